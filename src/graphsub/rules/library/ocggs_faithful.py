"""OCGGS's conv+X rules as OCGGS implements them: cost-only, NOT exact.

OCGGS's ``conv_batch``, ``conv_mul`` and ``conv_add`` (``OCGGS/src/core/substitution.cc``)
replace ``X(conv(x, w), y)`` by the bare ``conv(x, w)``: the batchnorm / mul / add operand is
dropped, so the result changes.  They are kept here only to reproduce OCGGS's search space and
match counts (set ``ocggs157-faithful``); they are ``exact=False`` and never part of ``default``.
The exact versions are in :mod:`graphsub.rules.library.builtin`.
"""

from __future__ import annotations

import functools

from graphsub.rules.library.builtin import PADS, STRIDES, ocggs_rules, suffix
from graphsub.rules.library.kit import ex, rule
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Rule

_REASON = "OCGGS drops the {} operand: the target is the bare conv (cost-only rewrite)"
#: the conv_<kind> rules OCGGS implements by dropping the operand
DROPPING = ("batch", "mul", "add")


def _dropping(kind: str, strides: tuple[int, int], pads: str) -> Rule:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        c = p.conv2d(p.var("x"), p.var("w"), strides=strides, pads=pads, act="none", name="conv")
        if kind == "batch":
            y = p.batchnorm(c, p.var("s"), p.var("b"), p.var("m"), p.var("v"), name="op")
        else:
            y = p.op1(kind, c, p.var("y"), name="op")
        return {"out": y}

    def same_shape(m: MatchView) -> bool:
        return m.type("op") == m.type("conv")

    e = ex({"x": (1, 2, 6, 6), "w": (3, 2, 3, 3), "y": (1, 3, 1, 1), **({k: (3,) for k in "sbmv"} if kind == "batch"
                                                                       else {})})
    return rule(
        f"ocggsf_conv_{kind}_{suffix(strides, pads)}",
        f"OCGGS conv_{kind} (stride {strides}, {pads}): drops the {kind} operand (not exact).", src,
        lambda t, m: {"out": t.conv2d(m.x, m.w, **m.attrs("conv"))}, [e, e, e],
        [(same_shape, "the op keeps the conv's shape")], exact=False, reason=_REASON.format(kind),
        tags=("conv", "ocggs", "inexact"))


@functools.cache
def rules() -> list[Rule]:
    """OCGGS's 24 built-ins in OCGGS's order, with its inexact conv_batch/mul/add."""
    faithful = {f"ocggs_conv_{k}_{suffix(s, p)}": _dropping(k, s, p) for s in STRIDES for p in PADS for k in DROPPING}
    return [faithful.get(r.name, r) for r in ocggs_rules()]


__all__ = ["DROPPING", "rules"]
