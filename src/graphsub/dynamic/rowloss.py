"""One-row losses batched: ``F.cross_entropy`` / ``F.nll_loss`` of one example (input ``[1, C]``, target ``[1]``) is a
scalar, so the plan ran such a step member by member -- on the Tree-LSTM, 20 calls per batch of 20 trees and 40
autograd nodes in backward.  With no class weights, no label smoothing and reduction ``mean`` or ``sum``, the loss of
one row is the row's ``reduction="none"`` loss (divided by 1, or by 0 where the target is ``ignore_index``, which
gives eager's NaN): one batched call, whose rows are the members' values (``unbind``), the same numbers as eager.

:func:`row_loss_kid` gives a group of such calls the key id of its batched form (:class:`RowLoss`, whose result
:func:`graphsub.dynamic.plan.run_plan` splits into one scalar per member).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from graphsub.dynamic.calls import Slot, new_kid
from graphsub.dynamic.dag import DagNode
from graphsub.dynamic.lazy import LazyTensor

_LOSSES = (F.cross_entropy, F.nll_loss)
_DEFAULTS = {"weight": None, "size_average": None, "reduce": None, "label_smoothing": 0.0}
_DERIVED: dict[int, int] = {}  # key id of a one-row loss -> key id of its batched form


class RowLoss:
    """``func`` (a loss) over all members' rows at once: the per-row losses, as a 1-D tensor."""

    __slots__ = ("func",)

    def __init__(self, func: Any) -> None:
        self.func = func

    def __call__(self, input: torch.Tensor, target: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        mean = kwargs.get("reduction", "mean") == "mean"
        kwargs["reduction"] = "none"
        out: torch.Tensor = self.func(input, target, **kwargs)
        if mean:  # eager's mean over one row: the loss / 1, or 0 / 0 for an ignored target
            out = out / (target != kwargs.get("ignore_index", -100)).to(out.dtype)
        return out

    def __reduce__(self) -> Any:  # (sent to the main process with a plan)
        return (RowLoss, (self.func,))

    def __repr__(self) -> str:
        return f"RowLoss({getattr(self.func, '__name__', self.func)})"


def _shape_dtype(x: Any) -> tuple[tuple[int, ...], torch.dtype] | None:
    if type(x) is LazyTensor:
        meta = x.info.meta
        return (tuple(meta.shape), meta.dtype) if isinstance(meta, torch.Tensor) else None
    if isinstance(x, torch.Tensor):
        return tuple(x.shape), x.dtype
    return None


def row_loss_kid(first: DagNode) -> int | None:
    """The key id of the batched form of ``first``'s key when it is a one-row loss that batches exactly (module
    docstring), else ``None``."""
    if first.func not in _LOSSES:
        return None
    args, kwargs = first.template
    if len(args) != 2 or not all(type(a) is Slot for a in args) or len(first.inputs) != 2:
        return None
    for k, v in kwargs.items():
        if k in _DEFAULTS:
            if v != _DEFAULTS[k] or type(v) is Slot:
                return None
        elif k == "reduction":
            if v not in ("mean", "sum"):
                return None
        elif k != "ignore_index" or type(v) is not int:
            return None
    x, t = (_shape_dtype(i) for i in first.inputs)
    if x is None or t is None or len(x[0]) != 2 or x[0][0] != 1 or not x[1].is_floating_point \
            or t[0] != (1,) or t[1] != torch.int64:
        return None
    kid = _DERIVED.get(first.kid)
    if kid is None:
        kid = _DERIVED[first.kid] = new_kid(True)
    return kid


__all__ = ["RowLoss", "row_loss_kid"]
