"""Plans on the wire: a :class:`~graphsub.dynamic.plan.Plan` as picklable data, for the prefetch workers
(:mod:`graphsub.dynamic.prefetch`) that record and plan a batch in another process.

Tensors travel as NumPy arrays, parameters as indices into the model's parameter list, captured modules by their
path in the model (:class:`ModuleRef`), and op definitions only once per key id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from graphsub.dynamic.lazy import LazyError
from graphsub.dynamic.plan import L, M, OpDef, Plan, Step


def _map_cols(cols: list[Any], batched: bool, conv: Callable[[Any], Any]) -> list[Any]:
    """A step's columns with ``conv`` applied to every value that may be a tensor (in either direction of the
    wire: tensors and parameters out, their wire forms in)."""
    if not batched:
        return [[(r[0], *[conv(v) for v in r[1:]]) for r in refs] for refs in cols]
    out: list[Any] = []
    for c in cols:
        if c[0] == L:
            out.append((L, [(s, conv(p), conv(r)) for s, p, r in c[1]], conv(c[2])))
        elif c[0] == M:
            out.append((M, [conv(k) for k in c[1]]))
        else:
            out.append((c[0], conv(c[1])))
    return out


@dataclass(frozen=True)
class ModuleRef:
    """A module of the model on the wire, by its path in ``named_modules()`` (a captured call's op, or a cell
    method's ``self``): the receiving process calls its own module, whose parameters are the live ones."""

    name: str


def _swap_modules(obj: Any, conv: Callable[[Any], Any]) -> Any:
    """``obj`` (an op or a call template) with ``conv`` applied to every module / :class:`ModuleRef` in it."""
    if isinstance(obj, (nn.Module, ModuleRef)):
        return conv(obj)
    t = type(obj)
    if t is tuple or t is list:
        return t(_swap_modules(o, conv) for o in obj)
    if t is dict:
        return {k: _swap_modules(v, conv) for k, v in obj.items()}
    return obj


def to_wire(plan: Plan, params: dict[int, int], sent: set[int], modules: dict[int, str] | None = None) -> Any:
    """``plan`` as picklable data: tensors as NumPy arrays, parameters as indices into the model's parameter
    list (``params``: ``id(p)`` -> index), modules (captured calls) as :class:`ModuleRef` (``modules``: ``id(m)``
    -> path), op definitions only for key ids not in ``sent`` (updated)."""
    names = modules or {}

    def module(m: Any) -> ModuleRef:
        name = names.get(id(m))
        if name is None:
            raise LazyError(f"prefetch: a captured module that is not part of the model ({type(m).__name__})")
        return ModuleRef(name)

    def tensor(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            if t.requires_grad:
                idx = params.get(id(t))
                if idx is None:
                    raise LazyError("prefetch: a tensor requiring grad that is not a parameter of the model")
                return ("param", idx)
            return ("np", t.detach().numpy())
        return t

    steps = [(st.kid, st.n, st.batched, _map_cols(st.cols, st.batched, tensor), st.chunks,
              None if st.merged is None else [(js, tensor(idx)) for js, idx in st.merged]) for st in plan.steps]
    new_ops = {k: (_swap_modules(o.func, module), _swap_modules(o.template, module), o.batchable)
               for k, o in plan.ops.items() if k not in sent}
    sent.update(new_ops)
    return steps, plan.out, tensor(plan.value), new_ops, plan.masks


def from_wire(wire: Any, params: Sequence[torch.Tensor], ops: dict[int, OpDef],
              modules: dict[str, nn.Module] | None = None) -> Plan:
    """The plan sent by :func:`to_wire` (``ops`` receives the new op definitions; ``modules``: the model's
    ``named_modules()``, which :class:`ModuleRef` names are looked up in)."""
    steps_w, out, value, new_ops, masks = wire
    mods = modules or {}

    def module(ref: Any) -> nn.Module:
        return mods[ref.name]

    for k, (func, template, batchable) in new_ops.items():
        ops[k] = OpDef(_swap_modules(func, module), _swap_modules(template, module), batchable)

    def tensor(t: Any) -> Any:
        if type(t) is tuple and len(t) == 2 and t[0] in ("np", "param"):
            return torch.from_numpy(t[1]) if t[0] == "np" else params[t[1]]
        return t

    steps = [Step(kid, n, batched, _map_cols(cols, batched, tensor), chunks,
                  None if merged is None else [(js, tensor(idx)) for js, idx in merged])
             for kid, n, batched, cols, chunks, merged in steps_w]
    return Plan(steps, out, tensor(value), masks=masks)


__all__ = ["ModuleRef", "from_wire", "to_wire"]
