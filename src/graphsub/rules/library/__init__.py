"""Named rule sets.

=============  =================================================================================
set            contents
=============  =================================================================================
``builtin``    TASO's and OCGGS's hand-written rules, exact versions (conv+relu / batchnorm /
               scalar-mul / add folding per stride x padding, enlarge, merge convs, merge group convs)
``taso-pb``    the 133 rules of TASO's ``graph_subst.pb`` (shipped in ``graphsub/rules/data/taso``, Apache-2.0)
``taso151``    TASO's list: its 18 built-ins + the 133
``ocggs157``   OCGGS's list: its 24 built-ins + the 133
``ocggs157-faithful``  the same with OCGGS's inexact conv+BN/mul/add (they drop the operand), to
               reproduce OCGGS's search space; never part of ``default``
``metaflow``   MetaFlow's substitutions (conv+add via identity kernel, matmul+activation, merge
               matmuls, exclusive concat, resnet merge) and the SRU factoring example
``algebra``    TASO's operator properties as rules (associativity, distributivity, linearity, ...)
``cpu``        CPU-relevant algebra and clean-ups (x@W1 + x@W2, Q/K/V merge, transpose/reshape/
               identity elimination)
``cleanup``    no-op Pad/Slice/Expand/Cast, cast and view chains, with ``cpu``'s clean-ups: what
               :mod:`graphsub.rules.cleanup` applies everywhere before every search of ``optimize``
``ort``        rewrites into onnxruntime's fused kernels (com.microsoft domain; opt-in: models using
               them only run in onnxruntime)
``attention``  the ``ort`` set's attention rules alone: head-split attention as TorchScript and dynamo
               exports write it (scaled_dot_product_attention's scale, attention biases and masks) =>
               onnxruntime's MultiHeadAttention (:mod:`graphsub.rules.library.attention`); a decoder's attention
               with its key/value cache => GroupQueryAttention, the rotary embedding inside
               (:mod:`graphsub.rules.library.gqa`, :mod:`graphsub.rules.library.gqa_rotary`); opt-in like ``ort``
``decoder``    the ``ort`` set's rules for a decoder LLM's RMSNorm (the exporters' three spellings, a residual sum
               first) => onnxruntime's SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization
               (:mod:`graphsub.rules.library.rms`), a LayerNorm after a residual sum (GPT-2) => its
               SkipLayerNormalization, and its rotary embeddings (by halves or interleaved) => onnxruntime's
               RotaryEmbedding (:mod:`graphsub.rules.library.rotary`); opt-in like ``ort``
``ort-spelling``  spellings that steer onnxruntime's own fusions (``Add -> LayerNormalization`` as ``Sum``,
               unfused SkipLayerNormalization); not in ``default``: ``optimize`` applies them to make
               candidates and keeps one only when measured faster
``channels-first``  channels-last MLPs between convolutions (ConvNeXt) written channels-first, MatMuls as 1x1
               convolutions: :mod:`graphsub.frontends.onnx_layout` as rules; not in ``default``
``rows``       ``[batch, sequence, hidden]`` activations written as ``[batch * sequence, hidden]`` rows, so that
               onnxruntime's projections are plain ``Gemm`` kernels: :mod:`graphsub.frontends.onnx_rows` as rules;
               not in ``default``. These two sets, ``ort-spelling`` and ``attention`` are what the search priced by
               onnxruntime's kernels adds to the call's rules (:mod:`graphsub.optimize.sources.ort_search`)
``training``   backward ops of training graphs: a conv's weight gradient as one GEMM (im2col), its input
               gradient at stride 1 as a convolution (:mod:`graphsub.rules.library.training`)
``generated``  substitutions found by TASO's generation algorithm (``graphsub rules generate``, n=3,
               TASO's operator set), from the package file ``generated.json.gz``; opt-in (not in
               ``default``: hundreds of rules, many of them redundant for search)
``default``    every exact rule of the sets above except ``ort``, ``attention``, ``decoder``, ``ort-spelling``,
               ``channels-first``, ``rows`` and ``generated`` (no duplicates)
=============  =================================================================================

>>> sorted(SETS)[:4]
['algebra', 'attention', 'builtin', 'channels-first']

Every command resolves rule-set specs with :func:`resolve_rules`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

from graphsub.errors import RuleError
from graphsub.rules.rule import Rule


def _builtin() -> list[Rule]:
    from graphsub.rules.library import builtin

    return builtin.rules()


def _taso_builtin() -> list[Rule]:
    from graphsub.rules.library import builtin

    return builtin.taso_rules()


def _ocggs_builtin() -> list[Rule]:
    from graphsub.rules.library import builtin

    return builtin.ocggs_rules()


def _pb(path: str | Path | None = None) -> list[Rule]:
    from graphsub.rules.taso_pb_convert import load_taso_pb

    return load_taso_pb(path).rules


def _ocggs_faithful(path: str | Path | None = None) -> list[Rule]:
    from graphsub.rules.library import ocggs_faithful

    return ocggs_faithful.rules() + _pb(path)


def _metaflow() -> list[Rule]:
    from graphsub.rules.library import metaflow

    return metaflow.rules()


def _algebra() -> list[Rule]:
    from graphsub.rules.library import algebra

    return algebra.rules()


def _cleanup() -> list[Rule]:
    from graphsub.rules.library import cleanup

    return cleanup.rules()


def _cpu() -> list[Rule]:
    from graphsub.rules.library import cpu

    return cpu.rules()


def _channels_first() -> list[Rule]:
    from graphsub.rules.library import channels_first

    return channels_first.rules()


def _rows() -> list[Rule]:
    from graphsub.rules.library import rows

    return rows.rules()


def _training() -> list[Rule]:
    from graphsub.rules.library import training

    return training.rules()


def _generated() -> list[Rule]:
    from graphsub.rules.generate.emit import load_generated_json

    return load_generated_json(GENERATED_JSON)


def _ort() -> list[Rule]:
    from graphsub.rules.library import ort

    return ort.rules()


def _attention() -> list[Rule]:
    from graphsub.rules.library import attention

    return attention.rules()


def _decoder() -> list[Rule]:
    from graphsub.rules.library import ort, rms, rotary

    return rms.rules() + ort.skip_layernorm_rules() + rotary.rules()


def _ort_spelling() -> list[Rule]:
    from graphsub.rules.library import ort_spelling

    return ort_spelling.rules()


SETS: dict[str, tuple[str, Callable[..., list[Rule]]]] = {
    "builtin": ("TASO/OCGGS hand-written rules (exact versions)", _builtin),
    "taso-pb": ("the 133 rules of TASO's graph_subst.pb", _pb),
    "taso151": ("TASO: 18 built-ins + 133 pb rules", lambda path=None: _taso_builtin() + _pb(path)),
    "ocggs157": ("OCGGS: 24 built-ins + 133 pb rules", lambda path=None: _ocggs_builtin() + _pb(path)),
    "ocggs157-faithful": ("OCGGS's 157 as OCGGS runs them (conv+BN/mul/add drop the operand: 12 inexact)",
                          _ocggs_faithful),
    "metaflow": ("MetaFlow's relaxed substitutions", _metaflow),
    "algebra": ("TASO's operator properties as rules", _algebra),
    "cpu": ("CPU-relevant algebra and clean-ups", _cpu),
    "cleanup": ("no-ops and collapsible chains, applied everywhere by optimize's clean-up pass", _cleanup),
    "ort": ("rewrites into onnxruntime fused kernels", _ort),
    "attention": ("head-split attention (TorchScript and dynamo exports) => onnxruntime's MultiHeadAttention; a "
                  "decoder's attention with its key/value cache => GroupQueryAttention (the ort set's attention "
                  "rules)", _attention),
    "decoder": ("a decoder LLM's RMSNorm spellings => onnxruntime's SimplifiedLayerNormalization and "
                "SkipSimplifiedLayerNormalization, its residual LayerNorms => SkipLayerNormalization, its rotary "
                "embeddings => RotaryEmbedding (the ort set's decoder rules)", _decoder),
    "ort-spelling": ("spellings that steer onnxruntime's own fusions (applied and timed by optimize)",
                     _ort_spelling),
    "channels-first": ("channels-last MLPs between convolutions written channels-first, MatMuls as 1x1 convolutions "
                       "(the layout pass as rules)", _channels_first),
    "rows": ("[batch, sequence, hidden] activations written as [batch * sequence, hidden] rows (the rows pass as "
             "rules)", _rows),
    "training": ("backward-op spellings for training graphs (conv gradients as GEMM / convolution)", _training),
    "generated": ("substitutions generated by TASO's algorithm (graphsub rules generate)", _generated),
}
#: the committed output of ``graphsub rules generate`` (package data)
GENERATED_JSON = Path(__file__).with_name("generated.json.gz")
_PB_SETS = frozenset({"taso-pb", "taso151", "ocggs157", "ocggs157-faithful"})
#: sets whose rules produce non-standard (com.microsoft) ops: never part of ``default``
_OPT_IN = frozenset({"ort", "attention", "decoder"})
#: sets left out of ``default``
_NOT_DEFAULT = _OPT_IN | {"generated", "ort-spelling", "channels-first", "rows"}


@functools.lru_cache(maxsize=32)
def _get(name: str, path: str | None) -> tuple[Rule, ...]:
    if name == "default":
        seen: dict[str, Rule] = {}
        for other in (s for s in SETS if s not in _NOT_DEFAULT):
            for r in _get(other, path):
                if r.exact:
                    seen.setdefault(r.name, r)
        return tuple(seen.values())
    if name not in SETS:
        raise RuleError(f"unknown rule set {name!r}; known: {', '.join([*SETS, 'default'])}")
    fn = SETS[name][1]
    rules = fn(path) if name in _PB_SETS else fn()
    names = [r.name for r in rules]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise RuleError(f"rule set {name!r} has duplicate rule names: {sorted(dup)}")
    return tuple(rules)


def get_set(name: str, path: str | Path | None = None) -> list[Rule]:
    """The rules of set ``name`` (``path``: TASO's graph_subst.pb for the sets that use it)."""
    return list(_get(name, None if path is None else str(path)))


def set_names() -> list[str]:
    return [*SETS, "default"]


def resolve_rules(spec: str | Sequence[Rule], path: str | Path | None = None) -> list[Rule]:
    """The rules of a rule-set spec: set names joined by ``,`` (whitespace stripped, empty pieces
    ignored; a rule in several sets is kept once, where its name first occurs), or a sequence of
    rules (returned as a list).  An unknown set raises :class:`~graphsub.errors.RuleError`.
    ``path``: TASO's graph_subst.pb for the sets that use it.

    >>> names = [r.name for r in resolve_rules(" metaflow, ,cpu ")]
    >>> len(names) == len(set(names)), names.index("mf_merge_matmuls") < names.index("cpu_merge_qkv")
    (True, True)
    >>> resolve_rules("cpu,nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    graphsub.errors.RuleError: unknown rule set 'nope'; known: builtin, taso-pb, ..., default
    """
    if not isinstance(spec, str):
        return list(spec)
    seen: dict[str, Rule] = {}
    for piece in spec.split(","):
        name = piece.strip()
        if name:
            for r in get_set(name, path):
                seen.setdefault(r.name, r)
    return list(seen.values())


def find_rule(name: str, path: str | Path | None = None) -> Rule:
    """A rule by name, searched in every set."""
    for s in set_names():
        for r in get_set(s, path):
            if r.name == name:
                return r
    raise RuleError(f"no rule named {name!r}")


__all__ = ["GENERATED_JSON", "SETS", "find_rule", "get_set", "resolve_rules", "set_names"]
