"""OCGGS's conv+X rules as OCGGS implements them: cost-only, NOT exact.

OCGGS's ``conv_batch``, ``conv_mul`` and ``conv_add`` (``OCGGS/src/core/substitution.cc``)
replace ``X(conv(x, w), y)`` by the bare ``conv(x, w)``: the batchnorm / mul / add operand is
dropped, so the result changes.  They are kept here only to reproduce OCGGS's search space and
match counts (set ``ocggs157-faithful``); they are ``exact=False`` and never part of ``default``.
The exact versions are in :mod:`graphsub.rules.library.builtin`.
"""

from __future__ import annotations

import functools

from graphsub.rules.library.builtin import ocggs_rules
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule, make_rule

_REASON = "OCGGS drops the {} operand: the target is the bare conv (cost-only rewrite)"


def _dropping(kind: str, strides: tuple[int, int], pads: str) -> Rule:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        c = p.conv2d(p.var("x"), p.var("w"), strides=strides, pads=pads, act="none", name="conv")
        if kind == "batch":
            y = p.batchnorm(c, p.var("s"), p.var("b"), p.var("m"), p.var("v"), name="op")
        else:
            y = p.op1(kind, c, p.var("y"), name="op")
        return {"out": y}

    def same_shape(m: object) -> bool:
        return m.type("op") == m.type("conv")  # type: ignore[attr-defined]

    ex = Example({"x": (1, 2, 6, 6), "w": (3, 2, 3, 3), "y": (1, 3, 1, 1), **(
        {k: (3,) for k in "sbmv"} if kind == "batch" else {})})
    return make_rule(
        f"ocggsf_conv_{kind}_s{strides[0]}_{pads.lower()}", src,
        lambda t, m: {"out": t.conv2d(m.x, m.w, **m.attrs("conv"))},
        where=[(same_shape, "the op keeps the conv's shape")], exact=False, reason=_REASON.format(kind),
        doc=f"OCGGS conv_{kind} (stride {strides}, {pads}): drops the {kind} operand (not exact).",
        examples=[ex, ex, ex], tags=("conv", "ocggs", "inexact"), location=f"{__name__}:conv_{kind}",
    )


@functools.cache
def rules() -> list[Rule]:
    """OCGGS's 24 built-ins in OCGGS's order, with its inexact conv_batch/mul/add."""
    out = []
    for r in ocggs_rules():
        parts = r.name.split("_")  # ocggs_conv_<kind>_s<k>_<pads>
        if parts[1] == "conv" and parts[2] in ("batch", "mul", "add"):
            out.append(_dropping(parts[2], (int(parts[3][1:]),) * 2, parts[4].upper()))
        else:
            out.append(r)
    return out


__all__ = ["rules"]
