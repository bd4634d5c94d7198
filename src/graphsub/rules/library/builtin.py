"""TASO's and OCGGS's hand-written rules, in exact versions.

Both peers add a fixed list of hand-written graph transfers in front of the 133 rules of
``graph_subst.pb`` (see ``shared/reference/peers_taso_ocggs_metaflow.md`` section 2):

* **OCGGS** (157 = 24 + 133): for strides {(1,1), (2,2)} x padding {SAME, VALID}: conv_relu,
  conv_batch, conv_mul, conv_add; then enlarge_convs (NONE, RELU), merge_convs (NONE, RELU) and
  merge_group_convs ((1,1), (2,2)) x (NONE, RELU) -- :func:`ocggs_rules`, in that order.
* **TASO** (151 = 18 + 133): the same loop without conv_add (commented out in TASO), then
  enlarge_merge_convs (NONE, RELU) -- enlarging the smaller kernel and merging in one step --
  and the four merge_group_convs -- :func:`taso_rules`.  Rules identical to an OCGGS one are the
  same :class:`Rule` object (same name); TASO's single-step enlarge+merge is ``taso_...``.

Exactness: OCGGS's conv_batch, conv_mul and conv_add *drop* the BN / mul / add operand (the
target is a bare conv, ``OCGGS/src/core/substitution.cc``), so they are cost-only and change the
result.  TASO's conv_batch computes the folded weights with its FUSE_CONV_BATCHNORM ops.  Here
every rule is exact: the folded kernel and bias are computed by ordinary ops on the weight
values (``w * scale / sqrt(var + eps)`` per output channel, ``bias - mean * scale / sqrt(var +
eps)``), which weight folding turns into constants.  Conv nodes in the TASO IR have no bias
input, so these rules match bias-free convs; conv+BN and conv+relu with a bias are in
``metaflow`` (any stride/padding) and conv+mul/add with a bias in ``cpu``.

Enlarging a kernel is exact for any stride when the pads grow by half the kernel growth on each
side; TASO instead recomputes SAME pads for the larger kernel, which shifts the window for
stride 2 on even input sizes.  The enlarge rules therefore require the grown pads to equal the
larger conv's pads (which also makes the pair mergeable, the point of enlarging).
"""

from __future__ import annotations

import functools
from typing import Any

from graphsub.ir.node import Ref
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library._common import (
    all_checks,
    conv_attrs,
    ex,
    fit_kernel,
    fold_add,
    fold_batchnorm,
    fold_mul,
    geometry,
    geometry_check,
    in_order,
    is_dense,
    kernel,
    merge_split,
    per_channel,
)
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule, make_rule

STRIDES = ((1, 1), (2, 2))
PADS = ("SAME", "VALID")
ACTS = ("none", "relu")
Out = dict[str, PValue]


def _suffix(strides: tuple[int, int], pads: str) -> str:
    return f"s{strides[0]}_{pads.lower()}"


# ----------------------------------------------------------------------------- conv + X (16)


def _conv_examples(extra: dict[str, Any], bn: bool = False) -> list[Example]:
    """Three conv shapes (dense 3x3, dense 1x1 batch 2, grouped 3x3) plus per-rule extras."""
    shapes = [((1, 2, 6, 6), (3, 2, 3, 3)), ((2, 3, 5, 7), (4, 3, 1, 1)), ((1, 4, 7, 6), (2, 2, 3, 3))]
    out = []
    for i, (x, w) in enumerate(shapes):
        o = w[0]
        types: dict[str, Any] = {"x": x, "w": w}
        attrs: dict[str, dict[str, Any]] = {}
        if bn:
            types.update({k: (o,) for k in ("scale", "bias", "mean", "var")})
            attrs["bn"] = {"epsilon": (1e-5, 1e-3, 0.1)[i]}
        for k, shape_of in extra.items():
            types[k] = shape_of(o, i)
        out.append(ex(types, attrs))
    return out


def _operand_shape(o: int, i: int) -> tuple[int, ...]:
    return ((1, o, 1, 1), (1,), (o, 1, 1))[i]


def conv_relu(strides: tuple[int, int], pads: str, prefix: str = "ocggs") -> Rule:
    def src(p: PatternBuilder) -> Out:
        c = p.conv2d(p.var("x"), p.weight("w"), strides=strides, pads=pads, act="none", name="conv")
        return {"y": p.relu(c, name="relu")}

    return make_rule(
        f"{prefix}_conv_relu_{_suffix(strides, pads)}", src,
        lambda t, m: {"y": t.conv2d(m.x, m.w, **conv_attrs(m, "conv", act="relu"))},
        doc=f"conv (stride {strides}, {pads}, no activation) followed by relu => conv with a fused relu "
            "(one kernel instead of two, no intermediate tensor).",
        examples=_conv_examples({}), tags=("conv", "fusion", "activation"),
    )


def conv_batch(strides: tuple[int, int], pads: str, prefix: str = "ocggs") -> Rule:
    def src(p: PatternBuilder) -> Out:
        c = p.conv2d(p.var("x"), p.weight("w"), strides=strides, pads=pads, act="none", name="conv")
        bn = p.batchnorm(c, p.weight("scale"), p.weight("bias"), p.weight("mean"), p.weight("var"), name="bn")
        return {"y": bn}

    return make_rule(
        f"{prefix}_conv_batch_{_suffix(strides, pads)}", src,
        lambda t, m: {"y": fold_batchnorm(t, m, "conv", "bn")},
        doc=f"conv (stride {strides}, {pads}, no activation, no bias) followed by inference batchnorm => "
            "one conv with kernel w * scale / sqrt(var + eps) per output channel and bias "
            "bias - mean * scale / sqrt(var + eps) (exact; OCGGS's version drops the BN).",
        examples=_conv_examples({}, bn=True), tags=("conv", "fusion", "batchnorm"),
    )


def conv_mul(strides: tuple[int, int], pads: str, prefix: str = "ocggs") -> Rule:
    def src(p: PatternBuilder) -> Out:
        c = p.conv2d(p.var("x"), p.weight("w"), strides=strides, pads=pads, act="none", name="conv")
        return {"y": p.mul(c, p.weight("s"), name="mul")}

    return make_rule(
        f"{prefix}_conv_mul_{_suffix(strides, pads)}", src, lambda t, m: {"y": fold_mul(t, m, "conv", "s")},
        where=[(lambda m: per_channel(m, "s", "conv", "mul"), "s is a scalar or per-channel weight")],
        doc=f"conv (stride {strides}, {pads}, no activation, no bias) times a weight-only scalar or "
            "per-channel (1,O,1,1) tensor => conv with the kernel scaled per output channel "
            "(exact; OCGGS's version drops the multiplier).",
        examples=_conv_examples({"s": _operand_shape}), tags=("conv", "fusion", "mul"),
    )


def conv_add(strides: tuple[int, int], pads: str, prefix: str = "ocggs") -> Rule:
    def src(p: PatternBuilder) -> Out:
        c = p.conv2d(p.var("x"), p.weight("w"), strides=strides, pads=pads, act="none", name="conv")
        return {"y": p.add(c, p.weight("s"), name="add")}

    return make_rule(
        f"{prefix}_conv_add_{_suffix(strides, pads)}", src, lambda t, m: {"y": fold_add(t, m, "conv", "s")},
        where=[(lambda m: per_channel(m, "s", "conv", "add"), "s is a scalar or per-channel weight")],
        doc=f"conv (stride {strides}, {pads}, no activation, no bias) plus a weight-only scalar or "
            "per-channel (1,O,1,1)/(O,1,1) tensor => conv with that bias (exact; OCGGS's version drops "
            "the addend).  A (O,) addend broadcasts along the width, not the channels, so it is not matched.",
        examples=_conv_examples({"s": _operand_shape}), tags=("conv", "fusion", "bias"),
    )


# ----------------------------------------------------------------------------- two convs, one input


def _pair_examples(kernels: tuple[tuple[int, int], tuple[int, int]], pads: tuple[Any, Any],
                   strides: tuple[int, int] = (1, 1)) -> list[Example]:
    (k1, k2), (p1, p2) = kernels, pads
    out = []
    for x, o1, o2 in (((1, 3, 6, 6), 2, 4), ((2, 2, 7, 5), 3, 1), ((1, 4, 9, 8), 4, 2)):
        c = x[1]
        out.append(ex({"x": x, "w1": (o1, c, *k1), "w2": (o2, c, *k2)},
                      {"c1": {"pads": p1, "strides": strides}, "c2": {"pads": p2, "strides": strides}}))
    return out


def _two_convs(act: str) -> Any:
    def src(p: PatternBuilder) -> Out:
        x = p.var("x")
        return {"y1": p.conv2d(x, p.weight("w1"), act=act, name="c1"),
                "y2": p.conv2d(x, p.weight("w2"), act=act, name="c2")}

    return src


def enlarge_convs(act: str) -> Rule:
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        big, pads = geometry(m, "first")
        w = t.enlarge(m.w1, kernel=big)
        return {"y1": t.conv2d(m.x, w, **conv_attrs(m, "c1", pads=pads)), "y2": m.c2}

    def differ(m: MatchView) -> bool | str:
        return kernel(m, "w1") != kernel(m, "w2") or "kernels are equal"

    return make_rule(
        f"ocggs_enlarge_convs_{act}", _two_convs(act), target,
        where=[(differ, "kernels differ"),
               (geometry_check("first"), "kernel 1 centered in kernel 2 with matching strides and pads")],
        doc=f"two convs (act {act}) on the same input with kernels k1 < k2: zero-pad kernel 1 to k2 "
            "(centered) and grow its pads by half the difference, so both convs get the same geometry "
            "and can be merged (OCGGS create_enlarge_convs; the larger conv is left as it is).",
        examples=[*_pair_examples(((1, 1), (3, 3)), ((0, 0, 0, 0), "SAME")),
                  ex({"x": (1, 2, 9, 9), "w1": (3, 2, 3, 1), "w2": (2, 2, 5, 3)},
                     {"c1": {"pads": (2, 0, 2, 0), "strides": (2, 2)}, "c2": {"pads": (3, 1, 3, 1), "strides": (2, 2)}},
                     note="stride 2, rectangular kernels")],
        tags=("conv", "enlarge"),
    )


def merge_convs(act: str) -> Rule:
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        c = t.conv2d(m.x, t.concat(m.w1, m.w2, axis=0), **conv_attrs(m, "c2"))
        y1, y2 = merge_split(t, c, 1, (m.shape("w1")[0], m.shape("w2")[0]))
        return {"y1": y1, "y2": y2}

    return make_rule(
        f"ocggs_merge_convs_{act}", _two_convs(act), target,
        where=[(geometry_check("none"), "equal kernel size, strides, pads, dilations"),
               (lambda m: all_checks(is_dense(m, "x", "w1"), is_dense(m, "x", "w2")), "both convs have one group"),
               (lambda m: in_order(m, "c1", "c2"), "one match per pair")],
        doc=f"two convs (act {act}) with equal kernel size, strides, pads and dilations on the same input "
            "=> one conv on the concatenated kernels (axis 0), then a split on the channels (one larger "
            "kernel launch; OCGGS create_merge_convs).",
        examples=[*_pair_examples(((3, 3), (3, 3)), ("SAME", "SAME"))[:2],
                  *_pair_examples(((1, 3), (1, 3)), ((0, 1, 0, 1), (0, 1, 0, 1)), strides=(2, 2))[2:],
                  ex({"x": (1, 2, 6, 6), "w1": (2, 2, 2, 2), "w2": (5, 2, 2, 2)},
                     {"c1": {"pads": "VALID"}, "c2": {"pads": "VALID"}})],
        tags=("conv", "merge"),
    )


def taso_enlarge_merge_convs(act: str) -> Rule:
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        big, pads = geometry(m, "first")
        w = t.concat(fit_kernel(t, m, "w1", big), m.w2, axis=0)
        c = t.conv2d(m.x, w, **conv_attrs(m, "c2", pads=pads))
        y1, y2 = merge_split(t, c, 1, (m.shape("w1")[0], m.shape("w2")[0]))
        return {"y1": y1, "y2": y2}

    def symmetric(m: MatchView) -> bool | str:
        return kernel(m, "w1") != kernel(m, "w2") or in_order(m, "c1", "c2")

    return make_rule(
        f"taso_enlarge_merge_convs_{act}", _two_convs(act), target,
        where=[(geometry_check("first"), "kernel 1 centered in kernel 2 with matching strides and pads"),
               (lambda m: all_checks(is_dense(m, "x", "w1"), is_dense(m, "x", "w2")), "both convs have one group"),
               (symmetric, "one match per pair of equal kernels")],
        doc=f"two convs (act {act}) on the same input, kernel 1 fitting centered in kernel 2: enlarge "
            "kernel 1 and merge both into one conv + split in a single step (TASO's "
            "create_enlarge_merge_convs; with equal kernels it is a plain merge).",
        examples=[*_pair_examples(((1, 1), (3, 3)), ((0, 0, 0, 0), "SAME"))[:2],
                  *_pair_examples(((3, 3), (3, 3)), ("SAME", "SAME"))[2:],
                  ex({"x": (1, 2, 9, 9), "w1": (3, 2, 1, 3), "w2": (2, 2, 3, 5)},
                     {"c1": {"pads": (1, 2, 1, 2), "strides": (2, 2)}, "c2": {"pads": (2, 3, 2, 3), "strides": (2, 2)}},
                     note="stride 2, rectangular kernels")],
        tags=("conv", "enlarge", "merge"),
    )


def merge_group_convs(strides: tuple[int, int], act: str) -> Rule:
    def src(p: PatternBuilder) -> Out:
        return {"y": p.conv2d(p.var("x"), p.weight("w"), strides=strides, act=act, name="conv")}

    def groups(m: MatchView) -> int:
        return int(m.shape("x")[1] // m.shape("w")[1])

    def even(m: MatchView) -> bool | str:
        g = groups(m)
        return (g > 1 and g % 2 == 0) or f"{g} groups (need an even count > 1)"

    return make_rule(
        f"ocggs_merge_group_convs_s{strides[0]}_{act}", src,
        lambda t, m: {"y": t.conv2d(m.x, t.merge_gconv(m.w, groups=groups(m), count=2), **conv_attrs(m, "conv"))},
        where=[(even, "even number of groups > 1")],
        doc=f"grouped conv (stride {strides}, act {act}) with G groups, G even => conv with G/2 groups on "
            "merge_gconv(w, count=2) (each merged group holds two original groups' kernels, zeros across "
            "them; TASO/OCGGS create_merge_group_convs).",
        examples=[ex({"x": (1, 4, 6, 6), "w": (4, 1, 3, 3)}, {"conv": {"pads": "SAME"}}),
                  ex({"x": (2, 8, 5, 5), "w": (8, 2, 1, 1)}),
                  ex({"x": (1, 6, 7, 7), "w": (12, 3, 3, 3)}, {"conv": {"pads": (1, 0, 1, 2)}})],
        tags=("conv", "group"),
    )


# ----------------------------------------------------------------------------- the lists


@functools.lru_cache(maxsize=1)
def _build() -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """(OCGGS list, TASO list), sharing the identical rules."""
    ocggs: list[Rule] = []
    taso: list[Rule] = []
    for strides in STRIDES:
        for pads in PADS:
            relu, batch = conv_relu(strides, pads), conv_batch(strides, pads)
            mul, add = conv_mul(strides, pads), conv_add(strides, pads)
            ocggs += [relu, batch, mul, add]
            taso += [relu, batch, mul]
    ocggs += [enlarge_convs(a) for a in ACTS]
    ocggs += [merge_convs(a) for a in ACTS]
    group = [merge_group_convs(s, a) for s in STRIDES for a in ACTS]
    ocggs += group
    taso += [taso_enlarge_merge_convs(a) for a in ACTS]
    taso += group
    return tuple(ocggs), tuple(taso)


def ocggs_rules() -> list[Rule]:
    """OCGGS's 24 hand-written rules (exact versions), in OCGGS's order."""
    return list(_build()[0])


def taso_rules() -> list[Rule]:
    """TASO's 18 hand-written rules (exact versions), in TASO's order."""
    return list(_build()[1])


def rules() -> list[Rule]:
    """The ``builtin`` set: OCGGS's rules plus TASO's own (no duplicate names)."""
    ocggs, taso = _build()
    seen = {r.name for r in ocggs}
    return [*ocggs, *(r for r in taso if r.name not in seen)]


__all__ = [
    "conv_add", "conv_batch", "conv_mul", "conv_relu", "enlarge_convs", "merge_convs", "merge_group_convs",
    "ocggs_rules", "rules", "taso_enlarge_merge_convs", "taso_rules",
]
