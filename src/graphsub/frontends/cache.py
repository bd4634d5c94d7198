"""A decoder's key/value cache interface, recognised from a model's declared inputs and outputs.

A decoder LLM exported with its cache as inputs and outputs (ONNX Runtime GenAI's interface, Hugging Face Optimum's)
declares symbolic dimensions that are not independent::

    input_ids                   [batch, sequence]
    attention_mask              [batch, total]
    past_key_values.{i}.key     [batch, heads, past, head_dim]      (also past.{i}.key, past_key_values.{i}, ...)
    present.{i}.key             [batch, heads, total, head_dim]

with ``total = past + sequence``: the model cannot run at sizes where that does not hold.  :func:`cache_dims` finds
the four names (:class:`CacheDims`) from the declarations alone: inputs named ``past*`` and outputs named
``present*`` of the same rank, the past's and the present's length on the same axis (``-2``) under two different
names, and an input of rank 2 on the batch whose other dimension is a third name (the sequence).  The import
(:func:`graphsub.frontends.onnx_types.static_inputs`) sizes ``total`` as ``past + sequence``, and the check at other
sizes (:mod:`graphsub.symbolic`) runs such a model at :data:`CACHE_SIZES` as well, with an attention mask of ones.

>>> ins = (("input_ids", ("b", "s")), ("attention_mask", ("b", "t")), ("past.0.key", ("b", 2, "p", 8)))
>>> cache_dims(ins, (("logits", ("b", "s", 16)), ("present.0.key", ("b", 2, "t", 8))))
CacheDims(batch='b', sequence='s', past='p', total='t')
>>> cache_dims(ins, (("logits", ("b", "s", 16)),)) is None
True
>>> CacheDims("b", "s", "p", "t").sizes(2, 7, 33)
{'b': 2, 's': 7, 'p': 33, 't': 40}
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: a declared dimension: its static size, or its ``dim_param`` name
Dims = tuple[int | str, ...] | None
Values = Sequence[tuple[str, Dims]]

#: (batch, sequence, past) a model with a cache is checked at: a first decode step, a decode step after a 127-token
#: prompt, a batch of 7-token chunks on a 33-token past, a 128-token prefill (past 0: empty pasts)
CACHE_SIZES: tuple[tuple[int, int, int], ...] = ((1, 1, 0), (1, 1, 127), (2, 7, 33), (1, 128, 0))

PAST_NAME = re.compile(r"^past(_key_values?|_key|_value|_kv)?([._]|$)", re.IGNORECASE)
_PRESENT = re.compile(r"^present([._]|$)", re.IGNORECASE)


@dataclass(frozen=True)
class CacheDims:
    """The ``dim_param`` names of a cache interface: the batch, the new tokens' length (``sequence``), the cached
    length (``past``) and their sum (``total``, the attention mask's and the presents' length)."""

    batch: str
    sequence: str
    past: str
    total: str

    def sizes(self, batch: int, sequence: int, past: int) -> dict[str, int]:
        """The four names' sizes at (``batch``, ``sequence``, ``past``)."""
        return {self.batch: batch, self.sequence: sequence, self.past: past, self.total: past + sequence}

    def derived(self, sizes: dict[str, int]) -> dict[str, int]:
        """``sizes`` with ``total`` set to ``past + sequence`` where both are given."""
        if self.past in sizes and self.sequence in sizes:
            return {**sizes, self.total: sizes[self.past] + sizes[self.sequence]}
        return dict(sizes)


def _named(dims: Dims, axis: int) -> str:
    """The ``dim_param`` name at ``axis`` of ``dims`` ("" when static, anonymous or absent)."""
    if not dims or not -len(dims) <= axis < len(dims):
        return ""
    d = dims[axis]
    return d if isinstance(d, str) else ""


def _one(names: set[str]) -> str:
    """The single name of ``names`` ("" when none or several)."""
    return next(iter(names)) if len(names) == 1 else ""


def _sequence(inputs: Values, batch: str, taken: set[str]) -> str:
    """The sequence name: axis 1 of ``input_ids``, else of the first rank-2 input on ``batch`` with a new name."""
    ranked = sorted(inputs, key=lambda nd: nd[0] != "input_ids")
    for _, dims in ranked:
        if dims is not None and len(dims) == 2 and _named(dims, 0) == batch and _named(dims, 1) not in taken | {""}:
            return _named(dims, 1)
    return ""


def cache_dims(inputs: Values, outputs: Values) -> CacheDims | None:
    """The :class:`CacheDims` of a model declaring ``inputs`` and ``outputs`` (``(name, dims)`` pairs), or None
    when it has no past/present cache interface (module docstring)."""
    pasts = [dims for name, dims in inputs if PAST_NAME.match(name) and dims is not None and len(dims) >= 3]
    presents = [dims for name, dims in outputs if _PRESENT.match(name) and dims is not None and len(dims) >= 3]
    if not pasts or not presents:
        return None
    batch = _one({_named(d, 0) for d in pasts + presents})
    past, total = _one({_named(d, -2) for d in pasts}), _one({_named(d, -2) for d in presents})
    if not batch or not past or not total or len({batch, past, total}) < 3:
        return None
    sequence = _sequence(inputs, batch, {batch, past, total})
    return CacheDims(batch, sequence, past, total) if sequence else None


__all__ = ["CACHE_SIZES", "PAST_NAME", "CacheDims", "cache_dims"]
