"""TASO's and OCGGS's hand-written rules, in exact versions.

Both peers add a fixed list of hand-written graph transfers in front of the 133 rules of
``graph_subst.pb`` (their ``Graph::optimize_*`` functions in ``src/core/ops.cc``):

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
from graphsub.rules.library.kit import (
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
    rule,
)
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

STRIDES = ((1, 1), (2, 2))
PADS = ("SAME", "VALID")
ACTS = ("none", "relu")
#: the op following the conv in OCGGS's conv_<kind> rules, in OCGGS's order
CONV_KINDS = ("relu", "batch", "mul", "add")
Out = dict[str, PValue]


def suffix(strides: tuple[int, int], pads: str) -> str:
    """The name suffix of one stride x padding combination, e.g. ``s2_same``."""
    return f"s{strides[0]}_{pads.lower()}"


# ----------------------------------------------------------------------------- conv + X (16)


def _conv_examples(extra: dict[str, Any], bn: bool = False) -> list[Example]:
    """Three conv shapes (dense 3x3, dense 1x1 batch 2, grouped 3x3) plus per-rule extras."""
    shapes = [((1, 2, 6, 6), (3, 2, 3, 3)), ((2, 3, 5, 7), (4, 3, 1, 1)), ((1, 4, 7, 6), (2, 2, 3, 3))]
    out = []
    for i, (x, w) in enumerate(shapes):
        o = w[0]
        types: dict[str, Any] = {"x": x, "w": w}
        attrs: dict[str, Any] = {}
        if bn:
            types.update({k: (o,) for k in ("scale", "bias", "mean", "var")})
            attrs["bn"] = {"epsilon": (1e-5, 1e-3, 0.1)[i]}
        for k, shape_of in extra.items():
            types[k] = shape_of(o, i)
        out.append(ex(types, **attrs))
    return out


def _operand_shape(o: int, i: int) -> tuple[int, ...]:
    return ((1, o, 1, 1), (1,), (o, 1, 1))[i]


def _conv_then_source(kind: str, strides: tuple[int, int], pads: str) -> Any:
    def src(p: PatternBuilder) -> Out:
        c = p.conv2d(p.var("x"), p.weight("w"), strides=strides, pads=pads, act="none", name="conv")
        if kind == "relu":
            return {"y": p.relu(c, name="relu")}
        if kind == "batch":
            return {"y": p.batchnorm(c, p.weight("scale"), p.weight("bias"), p.weight("mean"), p.weight("var"),
                                     name="bn")}
        return {"y": p.op1(kind, c, p.weight("s"), name=kind)}

    return src


_OPERAND = "s is a scalar or per-channel weight"


def conv_then(kind: str, strides: tuple[int, int], pads: str, prefix: str = "ocggs") -> Rule:
    """OCGGS's ``conv_<kind>`` for one stride x padding: a conv (no activation, no bias) followed by
    relu / batchnorm / mul / add (:data:`CONV_KINDS`) folded into one conv, exactly."""
    name, src = f"{prefix}_conv_{kind}_{suffix(strides, pads)}", _conv_then_source(kind, strides, pads)
    geo = f"stride {strides}, {pads}, no activation"
    if kind == "relu":
        return rule(
            name, f"conv ({geo}) followed by relu => conv with a fused relu (one kernel instead of two, no "
            "intermediate tensor).", src, lambda t, m: {"y": t.conv2d(m.x, m.w, **conv_attrs(m, "conv", act="relu"))},
            _conv_examples({}), tags=("conv", "fusion", "activation"))
    if kind == "batch":
        return rule(
            name, f"conv ({geo}, no bias) followed by inference batchnorm => one conv with kernel w * scale / "
            "sqrt(var + eps) per output channel and bias bias - mean * scale / sqrt(var + eps) (exact; OCGGS's "
            "version drops the BN).", src, lambda t, m: {"y": fold_batchnorm(t, m, "conv", "bn")},
            _conv_examples({}, bn=True), tags=("conv", "fusion", "batchnorm"))
    where = [(lambda m: per_channel(m, "s", "conv", kind), _OPERAND)]
    if kind == "mul":
        return rule(
            name, f"conv ({geo}, no bias) times a weight-only scalar or per-channel (1,O,1,1) tensor => conv "
            "with the kernel scaled per output channel (exact; OCGGS's version drops the multiplier).", src,
            lambda t, m: {"y": fold_mul(t, m, "conv", "s")}, _conv_examples({"s": _operand_shape}), where,
            tags=("conv", "fusion", "mul"))
    return rule(
        name, f"conv ({geo}, no bias) plus a weight-only scalar or per-channel (1,O,1,1)/(O,1,1) tensor => conv "
        "with that bias (exact; OCGGS's version drops the addend).  A (O,) addend broadcasts along the width, not "
        "the channels, so it is not matched.", src, lambda t, m: {"y": fold_add(t, m, "conv", "s")},
        _conv_examples({"s": _operand_shape}), where, tags=("conv", "fusion", "bias"))


# ----------------------------------------------------------------------------- two convs, one input


def _pair_examples(kernels: tuple[tuple[int, int], tuple[int, int]], pads: tuple[Any, Any],
                   strides: tuple[int, int] = (1, 1)) -> list[Example]:
    (k1, k2), (p1, p2) = kernels, pads
    out = []
    for x, o1, o2 in (((1, 3, 6, 6), 2, 4), ((2, 2, 7, 5), 3, 1), ((1, 4, 9, 8), 4, 2)):
        c = x[1]
        out.append(ex({"x": x, "w1": (o1, c, *k1), "w2": (o2, c, *k2)},
                      c1={"pads": p1, "strides": strides}, c2={"pads": p2, "strides": strides}))
    return out


def _two_convs(act: str) -> Any:
    def src(p: PatternBuilder) -> Out:
        x = p.var("x")
        return {"y1": p.conv2d(x, p.weight("w1"), act=act, name="c1"),
                "y2": p.conv2d(x, p.weight("w2"), act=act, name="c2")}

    return src


_DENSE = (lambda m: all_checks(is_dense(m, "x", "w1"), is_dense(m, "x", "w2")), "both convs have one group")
_FITS = (geometry_check("first"), "kernel 1 centered in kernel 2 with matching strides and pads")


def _merged(t: TargetBuilder, m: MatchView, w: Ref, **attrs: Any) -> dict[str, Ref]:
    """One conv of ``x`` with the concatenated kernel ``w``, split back into ``y1``, ``y2``."""
    y1, y2 = merge_split(t, t.conv2d(m.x, w, **attrs), 1, (m.shape("w1")[0], m.shape("w2")[0]))
    return {"y1": y1, "y2": y2}


def enlarge_convs(act: str) -> Rule:
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        big, pads = geometry(m, "first")
        return {"y1": t.conv2d(m.x, t.enlarge(m.w1, kernel=big), **conv_attrs(m, "c1", pads=pads)), "y2": m.c2}

    return rule(
        f"ocggs_enlarge_convs_{act}",
        f"two convs (act {act}) on the same input with kernels k1 < k2: zero-pad kernel 1 to k2 (centered) and "
        "grow its pads by half the difference, so both convs get the same geometry and can be merged (OCGGS "
        "create_enlarge_convs; the larger conv is left as it is).",
        _two_convs(act), target,
        [*_pair_examples(((1, 1), (3, 3)), ((0, 0, 0, 0), "SAME")),
         ex({"x": (1, 2, 9, 9), "w1": (3, 2, 3, 1), "w2": (2, 2, 5, 3)}, c1={"pads": (2, 0, 2, 0), "strides": (2, 2)},
            c2={"pads": (3, 1, 3, 1), "strides": (2, 2)}, note="stride 2, rectangular kernels")],
        [(lambda m: kernel(m, "w1") != kernel(m, "w2") or "kernels are equal", "kernels differ"), _FITS],
        tags=("conv", "enlarge"))


def merge_convs(act: str) -> Rule:
    return rule(
        f"ocggs_merge_convs_{act}",
        f"two convs (act {act}) with equal kernel size, strides, pads and dilations on the same input => one conv "
        "on the concatenated kernels (axis 0), then a split on the channels (one larger kernel launch; OCGGS "
        "create_merge_convs).",
        _two_convs(act), lambda t, m: _merged(t, m, t.concat(m.w1, m.w2, axis=0), **conv_attrs(m, "c2")),
        [*_pair_examples(((3, 3), (3, 3)), ("SAME", "SAME"))[:2],
         *_pair_examples(((1, 3), (1, 3)), ((0, 1, 0, 1), (0, 1, 0, 1)), strides=(2, 2))[2:],
         ex({"x": (1, 2, 6, 6), "w1": (2, 2, 2, 2), "w2": (5, 2, 2, 2)}, c1={"pads": "VALID"}, c2={"pads": "VALID"})],
        [(geometry_check("none"), "equal kernel size, strides, pads, dilations"), _DENSE,
         (lambda m: in_order(m, "c1", "c2"), "one match per pair")],
        tags=("conv", "merge"))


def taso_enlarge_merge_convs(act: str) -> Rule:
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        big, pads = geometry(m, "first")
        return _merged(t, m, t.concat(fit_kernel(t, m, "w1", big), m.w2, axis=0), **conv_attrs(m, "c2", pads=pads))

    return rule(
        f"taso_enlarge_merge_convs_{act}",
        f"two convs (act {act}) on the same input, kernel 1 fitting centered in kernel 2: enlarge kernel 1 and "
        "merge both into one conv + split in a single step (TASO's create_enlarge_merge_convs; with equal kernels "
        "it is a plain merge).",
        _two_convs(act), target,
        [*_pair_examples(((1, 1), (3, 3)), ((0, 0, 0, 0), "SAME"))[:2],
         *_pair_examples(((3, 3), (3, 3)), ("SAME", "SAME"))[2:],
         ex({"x": (1, 2, 9, 9), "w1": (3, 2, 1, 3), "w2": (2, 2, 3, 5)}, c1={"pads": (1, 2, 1, 2), "strides": (2, 2)},
            c2={"pads": (2, 3, 2, 3), "strides": (2, 2)}, note="stride 2, rectangular kernels")],
        [_FITS, _DENSE, (lambda m: kernel(m, "w1") != kernel(m, "w2") or in_order(m, "c1", "c2"),
                         "one match per pair of equal kernels")],
        tags=("conv", "enlarge", "merge"))


def merge_group_convs(strides: tuple[int, int], act: str) -> Rule:
    def groups(m: MatchView) -> int:
        return int(m.shape("x")[1] // m.shape("w")[1])

    def even(m: MatchView) -> bool | str:
        g = groups(m)
        return (g > 1 and g % 2 == 0) or f"{g} groups (need an even count > 1)"

    return rule(
        f"ocggs_merge_group_convs_s{strides[0]}_{act}",
        f"grouped conv (stride {strides}, act {act}) with G groups, G even => conv with G/2 groups on "
        "merge_gconv(w, count=2) (each merged group holds two original groups' kernels, zeros across them; "
        "TASO/OCGGS create_merge_group_convs).",
        lambda p: {"y": p.conv2d(p.var("x"), p.weight("w"), strides=strides, act=act, name="conv")},
        lambda t, m: {"y": t.conv2d(m.x, t.merge_gconv(m.w, groups=groups(m), count=2), **conv_attrs(m, "conv"))},
        [ex({"x": (1, 4, 6, 6), "w": (4, 1, 3, 3)}, conv={"pads": "SAME"}), ex({"x": (2, 8, 5, 5), "w": (8, 2, 1, 1)}),
         ex({"x": (1, 6, 7, 7), "w": (12, 3, 3, 3)}, conv={"pads": (1, 0, 1, 2)})],
        [(even, "even number of groups > 1")], tags=("conv", "group"))


# ----------------------------------------------------------------------------- the lists


@functools.lru_cache(maxsize=1)
def _build() -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """(OCGGS list, TASO list), sharing the identical rules."""
    ocggs: list[Rule] = []
    taso: list[Rule] = []
    for strides in STRIDES:
        for pads in PADS:
            four = [conv_then(kind, strides, pads) for kind in CONV_KINDS]
            ocggs += four
            taso += four[:3]  # TASO has no conv_add (commented out in TASO)
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
    "ACTS", "CONV_KINDS", "PADS", "STRIDES", "conv_then", "enlarge_convs", "merge_convs", "merge_group_convs",
    "ocggs_rules", "rules", "suffix", "taso_enlarge_merge_convs", "taso_rules",
]
