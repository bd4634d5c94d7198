"""MetaFlow's relaxed graph substitutions (Jia et al., SysML 2019), as exact rules.

MetaFlow's search (``code/cnn.cc``) uses seven hand-written transfers: fuse_conv_batch,
fuse_mm_acti, fuse_conv_relu, merge_mm, merge_conv, exclusive_concat and resnet_merge; its
paper adds the conv+add fusion through an identity kernel (Figure 4b) and the SRU factoring
example of section 3.  "Relaxed" means a substitution may *increase* the cost (e.g. Figure 4b
adds FLOPs) to enable later ones; every rule here is still semantics-preserving.

MetaFlow matches any stride and padding (its convs carry explicit pads), and its convs own
their weights.  Here the conv rules come in a bias-free and a ``_bias`` flavour (ONNX/PyTorch
convs carry a bias input; TASO-style ones do not), and rules on two symmetric operands match
each unordered pair once (node-id order).  Kernels of different sizes are made equal with
``enlarge`` where the geometry allows it (exclusive concat, resnet merge), as in Figure 1.

The SRU example is the chain ``x*y + (1-x)*z -> x*y + z - x*z -> x*y - x*z + z -> x*(y-z) + z``
(``mf_sru_distribute``, ``mf_sru_reorder``, ``mf_sru_factor``) plus the shortcut
``mf_sru_shortcut``; the "1" is a ``const_one`` or a weight whose data is all ones.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np

from graphsub.ir.node import Ref
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import (
    all_checks,
    broadcasts_into,
    constant_value,
    conv_attrs,
    ex,
    fit_kernel,
    fold_batchnorm,
    geometry,
    geometry_check,
    in_order,
    is_dense,
    kernel,
    merge_split,
    rule,
)
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

Out = dict[str, PValue]


def _sfx(bias: bool) -> str:
    return "_bias" if bias else ""


def _conv(p: PatternBuilder, x: PValue, w: str, b: str | None, name: str, **attrs: Any) -> PValue:
    ins = [x, p.weight(w)] + ([p.weight(b)] if b else [])
    return p.conv2d(*ins, name=name, **attrs)


def _with_bias(examples: list[Example], bias: bool,
               pairs: tuple[tuple[str, str], ...] = (("b", "w"),)) -> list[Example]:
    """Add bias shapes (O,) for the ``(bias, kernel)`` variable pairs when ``bias``."""
    if not bias:
        return examples
    return [replace(e, types={**e.types, **{b: (e.types[w][0],) for b, w in pairs}}) for e in examples]


# ----------------------------------------------------------------------------- conv + add (Fig. 4b)


def _identity_geometry(m: MatchView) -> bool | str:
    a = conv_attrs(m, "conv")
    (kh, kw), (dh, dw) = kernel(m, "w"), a["dilations"]
    if a["strides"] != (1, 1):
        return f"strides {a['strides']} (need 1)"
    if kh % 2 == 0 or kw % 2 == 0:
        return f"even kernel {(kh, kw)} has no center tap"
    centred = (dh * (kh // 2), dw * (kw // 2)) * 2
    return a["pads"] == centred or f"pads {a['pads']} are not centred {centred}"


def _addend_fits(m: MatchView) -> bool | str:
    if m.type("y") != m.type("conv") or m.type("w").dtype != "float32":
        return f"addend {m.type('y')} differs from the conv output {m.type('conv')} (or not float32)"
    return True


def fuse_conv_add(bias: bool) -> tuple[Rule, Rule]:
    """``conv(x, w) + y`` and its twin ``y + conv(x, w)`` (``_rhs``)."""
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        o = m.shape("conv")[1]
        kh, kw = kernel(m, "w")
        w = t.concat(m.w, t.const_iconv(shape=(o, o, kh, kw)), axis=1)
        ins = [t.concat(m.x, m.y, axis=1), w] + ([m.b] if bias else [])
        return {"out": t.conv2d(*ins, **conv_attrs(m, "conv"))}

    def doc(order: str) -> str:
        return (f"{order} with stride 1 and centred pads (output size = input size) => one conv on concat(x, y) "
                "with kernel concat(w, I) where I is the identity kernel const_iconv (MetaFlow Figure 4b): "
                "fewer kernels and memory passes, more FLOPs.")

    return rule(
        f"mf_fuse_conv_add{_sfx(bias)}", doc("conv(x, w) + y"),
        lambda p: {"out": p.add(_conv(p, p.var("x"), "w", "b" if bias else None, "conv", act="none"), p.var("y"),
                                name="add")},
        target,
        _with_bias([
            ex({"x": (1, 2, 5, 5), "w": (3, 2, 3, 3), "y": (1, 3, 5, 5)}, conv={"pads": "SAME"}),
            ex({"x": (2, 3, 4, 6), "w": (2, 3, 1, 1), "y": (2, 2, 4, 6)}),
            ex({"x": (1, 2, 7, 7), "w": (2, 2, 3, 3), "y": (1, 2, 7, 7)},
               conv={"pads": (2, 2, 2, 2), "dilations": (2, 2)}, note="dilated"),
            ex({"x": (1, 1, 4, 5), "w": (2, 1, 1, 3), "y": (1, 2, 4, 5)}, conv={"pads": (0, 1, 0, 1)}),
        ], bias),
        [(lambda m: is_dense(m, "x", "w"), "one group"), (_identity_geometry, "stride 1, centred pads"),
         (_addend_fits, "addend has the conv output's type")],
        tags=("conv", "fusion", "relaxed"), commute=True, mirror="_rhs", mirror_doc=doc("y + conv(x, w)"))


# ----------------------------------------------------------------------------- activation fusion


def fuse_matmul_act() -> Rule:
    acts = ("relu", "sigmoid", "tanh")

    def is_act(m: MatchView) -> bool | str:
        op = m.node("act").sig.op
        return op in acts or f"{op} is not one of {acts}"

    return rule(
        "mf_fuse_matmul_act",
        "matmul (no activation) followed by relu/sigmoid/tanh => matmul with that fused activation (MetaFlow "
        "fuse_mm_acti; the activation is a wildcard).",
        lambda p: {"y": p.any(p.matmul(p.var("a"), p.var("b"), act="none", name="mm"), name="act")},
        lambda t, m: {"y": t.matmul(m.a, m.b, act=m.node("act").sig.op)},
        [ex({"a": (4, 6), "b": (6, 5)}, ops={"act": "relu"}), ex({"a": (2, 3, 4), "b": (4, 2)}, ops={"act": "sigmoid"}),
         ex({"a": (5,), "b": (2, 5, 3)}, ops={"act": "tanh"})],
        [(is_act, "the wildcard is relu/sigmoid/tanh")], tags=("matmul", "fusion", "activation"))


def fuse_conv_relu(bias: bool) -> Rule:
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        ins = [m.x, m.w] + ([m.b] if bias else [])
        return {"y": t.conv2d(*ins, **conv_attrs(m, "conv", act="relu"))}

    return rule(
        f"mf_fuse_conv_relu{_sfx(bias)}",
        "conv (any stride/padding, no activation) followed by relu => conv with a fused relu (MetaFlow "
        "fuse_conv_relu).",
        lambda p: {"y": p.relu(_conv(p, p.var("x"), "w", "b" if bias else None, "conv", act="none"), name="relu")},
        target,
        _with_bias([ex({"x": (1, 2, 6, 6), "w": (3, 2, 3, 3)}, conv={"pads": (1, 0, 2, 1)}),
                    ex({"x": (2, 4, 7, 7), "w": (4, 2, 3, 3)}, conv={"strides": (2, 1)}),
                    ex({"x": (1, 3, 5, 5), "w": (2, 3, 1, 1)}, conv={"strides": (3, 3)})], bias),
        tags=("conv", "fusion", "activation"))


def fuse_conv_batchnorm(bias: bool) -> Rule:
    def src(p: PatternBuilder) -> Out:
        c = _conv(p, p.var("x"), "w", "b" if bias else None, "conv", act="none")
        return {"y": p.batchnorm(c, p.weight("scale"), p.weight("bias"), p.weight("mean"), p.weight("var"), name="bn")}

    examples = []
    for x, w, attrs, eps in (((1, 2, 6, 6), (3, 2, 3, 3), {"pads": (1, 1, 1, 1)}, 1e-5),
                             ((2, 4, 7, 5), (4, 2, 3, 3), {"strides": (2, 1), "pads": (0, 1, 2, 1)}, 1e-3),
                             ((1, 3, 8, 8), (5, 3, 7, 7), {"strides": (2, 2), "pads": (3, 3, 3, 3)}, 0.1)):
        types: dict[str, Any] = {"x": x, "w": w, **{k: (w[0],) for k in ("scale", "bias", "mean", "var")}}
        examples.append(ex(types, conv=attrs, bn={"epsilon": eps}))
    return rule(
        f"mf_fuse_conv_batchnorm{_sfx(bias)}",
        "conv (any stride/padding, no activation) followed by inference batchnorm => one conv with kernel w * k and "
        "bias (b - mean) * k + bias, k = scale / sqrt(var + eps) per output channel (MetaFlow fuse_conv_batch).",
        src, lambda t, m: {"y": fold_batchnorm(t, m, "conv", "bn", "b" if bias else None)},
        _with_bias(examples, bias), tags=("conv", "fusion", "batchnorm"))


# ----------------------------------------------------------------------------- merges


def merge_matmuls() -> Rule:
    def src(p: PatternBuilder) -> Out:
        x = p.var("x")
        return {"y1": p.matmul(x, p.weight("w1"), name="mm1"), "y2": p.matmul(x, p.weight("w2"), name="mm2")}

    def compatible(m: MatchView) -> bool | str:
        s1, s2 = m.shape("w1"), m.shape("w2")
        if len(s1) < 2 or s1[:-1] != s2[:-1]:
            return f"right operands {s1} and {s2} differ before the last axis (or are vectors)"
        return m.attr("mm1", "act") == m.attr("mm2", "act") or "activations differ"

    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        w = t.concat(m.w1, m.w2, axis=len(m.shape("w1")) - 1)
        y = t.matmul(m.x, w, act=m.attr("mm1", "act"))
        y1, y2 = merge_split(t, y, len(m.shape("mm1")) - 1, (m.shape("w1")[-1], m.shape("w2")[-1]))
        return {"y1": y1, "y2": y2}

    return rule(
        "mf_merge_matmuls",
        "two matmuls sharing the left operand with weight-only right operands => one matmul on the right operands "
        "concatenated along the last axis, then a split (MetaFlow merge_mm).",
        src, target,
        [ex({"x": (4, 6), "w1": (6, 3), "w2": (6, 5)}),
         ex({"x": (2, 3, 4), "w1": (4, 2), "w2": (4, 2)}, mm1={"act": "relu"}, mm2={"act": "relu"}),
         ex({"x": (5,), "w1": (2, 5, 3), "w2": (2, 5, 1)})],
        [(compatible, "right operands concatenable, equal activations"),
         (lambda m: in_order(m, "mm1", "mm2"), "one match per pair")],
        tags=("matmul", "merge"))


def _pair(bias: bool, xs: tuple[str, str] = ("x", "x")) -> Any:
    """Pattern helper: two convs c1 (x1, w1 [, b1]) and c2 (x2, w2 [, b2])."""
    def convs(p: PatternBuilder, **attrs: Any) -> tuple[PValue, PValue]:
        ins = {n: p.var(n) for n in dict.fromkeys(xs)}
        c1 = _conv(p, ins[xs[0]], "w1", "b1" if bias else None, "c1", **attrs)
        c2 = _conv(p, ins[xs[1]], "w2", "b2" if bias else None, "c2", **attrs)
        return c1, c2

    return convs


_BIASES = (("b1", "w1"), ("b2", "w2"))


def _dense(x1: str = "x", x2: str = "x") -> tuple[Any, str]:
    return (lambda m: all_checks(is_dense(m, x1, "w1"), is_dense(m, x2, "w2")), "both convs have one group")


def merge_convs(bias: bool) -> Rule:
    convs = _pair(bias)

    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        ins = [m.x, t.concat(m.w1, m.w2, axis=0)] + ([t.concat(m.b1, m.b2, axis=0)] if bias else [])
        y1, y2 = merge_split(t, t.conv2d(*ins, **conv_attrs(m, "c1")), 1, (m.shape("w1")[0], m.shape("w2")[0]))
        return {"y1": y1, "y2": y2}

    return rule(
        f"mf_merge_convs{_sfx(bias)}",
        "two convs on the same input with equal kernel size, strides, pads, dilations and activation => one conv on "
        "the kernels concatenated along the output channels, then a split (MetaFlow merge_conv, Figure 4a).",
        lambda p: dict(zip(("y1", "y2"), convs(p), strict=True)), target,
        _with_bias([
            ex({"x": (1, 3, 6, 6), "w1": (2, 3, 3, 3), "w2": (4, 3, 3, 3)}, c1={"pads": "SAME"}, c2={"pads": "SAME"}),
            ex({"x": (2, 2, 7, 5), "w1": (3, 2, 1, 1), "w2": (1, 2, 1, 1)},
               c1={"strides": (2, 2), "act": "relu"}, c2={"strides": (2, 2), "act": "relu"}),
            ex({"x": (1, 4, 9, 8), "w1": (2, 4, 3, 1), "w2": (2, 4, 3, 1)},
               c1={"pads": (1, 0, 1, 0), "act": "sigmoid"}, c2={"pads": (1, 0, 1, 0), "act": "sigmoid"}),
        ], bias, _BIASES),
        [(geometry_check("none"), "equal kernel size, strides, pads, dilations and activation"), _dense(),
         (lambda m: in_order(m, "c1", "c2"), "one match per pair")],
        tags=("conv", "merge"))


def exclusive_concat(bias: bool) -> Rule:
    convs = _pair(bias)

    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        big, pads = geometry(m, "both")
        w = t.concat(fit_kernel(t, m, "w1", big), fit_kernel(t, m, "w2", big), axis=0)
        ins = [m.x, w] + ([t.concat(m.b1, m.b2, axis=0)] if bias else [])
        return {"y": t.conv2d(*ins, **conv_attrs(m, "c1", pads=pads))}

    return rule(
        f"mf_exclusive_concat{_sfx(bias)}",
        "concat(conv(x, w1), conv(x, w2), axis=1) where the convs feed only the concat => one conv on the "
        "concatenated kernels (MetaFlow exclusive_concat).  Kernels of different sizes are first zero-padded to "
        "their elementwise maximum (pads grown by half the difference, which must make the pads equal), e.g. "
        "Inception's 1x3/3x1 pair or SqueezeNet's 1x1/3x3 expand convs.",
        lambda p: {"y": p.concat(*convs(p), axis=1, name="cat")}, target,
        _with_bias([
            ex({"x": (1, 3, 6, 6), "w1": (2, 3, 3, 3), "w2": (4, 3, 3, 3)}, c1={"pads": "SAME"}, c2={"pads": "SAME"}),
            ex({"x": (2, 2, 7, 5), "w1": (3, 2, 1, 3), "w2": (1, 2, 3, 1)},
               c1={"pads": (0, 1, 0, 1), "act": "relu"}, c2={"pads": (1, 0, 1, 0), "act": "relu"},
               note="1x3 + 3x1 -> 3x3"),
            ex({"x": (1, 4, 9, 8), "w1": (2, 4, 1, 1), "w2": (3, 4, 3, 3)},
               c1={"strides": (2, 2)}, c2={"strides": (2, 2), "pads": (1, 1, 1, 1)}, note="1x1 + 3x3, stride 2"),
        ], bias, _BIASES),
        [(geometry_check("both"), "equal strides/dilations/activation; kernels equal or centred in their max"),
         _dense()],
        tags=("conv", "merge", "concat"))


def resnet_merge(relu: bool) -> Rule:
    convs = _pair(False, ("x1", "x2"))

    def src(p: PatternBuilder) -> Out:
        s = p.add(*convs(p, act="none"), name="add")
        return {"y": p.relu(s, name="relu") if relu else s}

    def inputs_fit(m: MatchView) -> bool | str:
        s1, s2 = m.shape("x1"), m.shape("x2")
        if (s1[0], *s1[2:]) != (s2[0], *s2[2:]) or m.type("x1").dtype != m.type("x2").dtype:
            return f"inputs {s1} and {s2} differ in batch or spatial size"
        return m.type("c1") == m.type("c2") or "conv outputs differ (the add broadcasts)"

    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        big, pads = geometry(m, "both")
        w = t.concat(fit_kernel(t, m, "w1", big), fit_kernel(t, m, "w2", big), axis=1)
        x = t.concat(m.x1, m.x2, axis=1)
        return {"y": t.conv2d(x, w, **conv_attrs(m, "c1", pads=pads, act="relu" if relu else "none"))}

    return rule(
        f"mf_resnet_merge{'_relu' if relu else ''}",
        "conv(x1, w1) + conv(x2, w2)" + (" then relu" if relu else "") + " => one conv on concat(x1, x2) with "
        "kernels concatenated along the input channels" + (" and a fused relu" if relu else "") + " (MetaFlow "
        "resnet_merge: a residual add of two convs becomes one conv).  Kernels of different sizes are zero-padded "
        "to their maximum when the pads allow it.",
        src, target,
        [ex({"x1": (1, 3, 6, 6), "w1": (4, 3, 3, 3), "x2": (1, 2, 6, 6), "w2": (4, 2, 3, 3)},
            c1={"pads": "SAME"}, c2={"pads": "SAME"}),
         ex({"x1": (2, 2, 7, 7), "w1": (3, 2, 1, 1), "x2": (2, 5, 7, 7), "w2": (3, 5, 3, 3)},
            c1={"strides": (2, 2)}, c2={"strides": (2, 2), "pads": (1, 1, 1, 1)}, note="1x1 + 3x3"),
         ex({"x1": (1, 4, 5, 6), "w1": (2, 4, 1, 3), "x2": (1, 1, 5, 6), "w2": (2, 1, 1, 3)},
            c1={"pads": "VALID"}, c2={"pads": "VALID"})],
        [(inputs_fit, "inputs of equal batch/spatial size, equal conv outputs"),
         (geometry_check("both"), "equal strides/dilations; kernels equal or centred in their max"),
         _dense("x1", "x2")],
        tags=("conv", "merge", "residual"))


# ----------------------------------------------------------------------------- SRU factoring (section 3)


def _ones(m: MatchView) -> bool | str:
    ok = constant_value(m, "one", 1.0)
    if ok is not True:
        return ok
    return broadcasts_into(m.shape("one"), m.shape("x")) or f"1 {m.shape('one')} broadcasts x {m.shape('x')} up"


def _sru_start(p: PatternBuilder) -> Out:
    x, y, z = p.var("x"), p.var("y"), p.var("z")
    omx = p.sub(p.weight("one"), x, name="one_minus_x")
    return {"out": p.add(p.mul(x, y, name="xy"), p.mul(omx, z, name="omx_z"), name="add")}


def _sru_examples(one: bool) -> list[Example]:
    shapes = [((2, 3), (2, 3), (2, 3), (2, 3)), ((4, 1), (1, 5), (4, 5), (1,)), ((1, 4, 5), (3, 1, 5), (5,), ())]
    out = []
    for x, y, z, o in shapes:
        types: dict[str, Any] = {"x": x, "y": y, "z": z}
        if one:
            types["one"] = o
        out.append(ex(types, data={"one": np.ones(o, np.float32)} if one else None))
    return out


def sru_rules() -> list[Rule]:
    """The SRU factoring chain of MetaFlow section 3 and its shortcut."""
    def reorder_src(p: PatternBuilder) -> Out:
        x, y, z = p.var("x"), p.var("y"), p.var("z")
        return {"out": p.sub(p.add(p.mul(x, y, name="xy"), z, name="add"), p.mul(x, z, name="xz"), name="sub")}

    def factor_src(p: PatternBuilder) -> Out:
        x, y, z = p.var("x"), p.var("y"), p.var("z")
        return {"out": p.add(p.sub(p.mul(x, y, name="xy"), p.mul(x, z, name="xz"), name="sub"), z, name="add")}

    ones = [(_ones, "the 1 is all ones and does not broadcast x up")]
    tags = ("elementwise", "algebra", "rnn")
    return [
        rule("mf_sru_distribute", "x*y + (1-x)*z => x*y + z - x*z: distribute the multiplication over 1 - x "
             "(MetaFlow section 3, first step; 4 -> 5 operators, enabling the factoring).",
             _sru_start, lambda t, m: {"out": m.x * m.y + m.z - m.x * m.z}, _sru_examples(True), ones, tags=tags),
        rule("mf_sru_reorder", "(x*y + z) - x*z => (x*y - x*z) + z: reorder the commutative additive terms so the "
             "two products of x are adjacent (MetaFlow section 3, second step).",
             reorder_src, lambda t, m: {"out": (m.x * m.y - m.x * m.z) + m.z}, _sru_examples(False), tags=tags),
        rule("mf_sru_factor", "(x*y - x*z) + z => x*(y - z) + z: factor out the common x (MetaFlow section 3, "
             "last step; 4 -> 3 operators).",
             factor_src, lambda t, m: {"out": m.x * (m.y - m.z) + m.z}, _sru_examples(False), tags=tags),
        rule("mf_sru_shortcut", "x*y + (1-x)*z => x*(y - z) + z in one step (the SRU highway gate; 4 -> 3 "
             "operators).",
             _sru_start, lambda t, m: {"out": m.x * (m.y - m.z) + m.z}, _sru_examples(True), ones, tags=tags),
    ]


# ----------------------------------------------------------------------------- the set


@functools.lru_cache(maxsize=1)
def _build() -> tuple[Rule, ...]:
    return (
        *fuse_conv_add(False), *fuse_conv_add(True),
        fuse_matmul_act(),
        fuse_conv_relu(False), fuse_conv_relu(True),
        merge_matmuls(),
        merge_convs(False), merge_convs(True),
        exclusive_concat(False), exclusive_concat(True),
        resnet_merge(False), resnet_merge(True),
        fuse_conv_batchnorm(False), fuse_conv_batchnorm(True),
        *sru_rules(),
    )


def rules() -> list[Rule]:
    """The ``metaflow`` set (names ``mf_...``)."""
    return list(_build())


__all__ = [
    "exclusive_concat", "fuse_conv_add", "fuse_conv_batchnorm", "fuse_conv_relu", "fuse_matmul_act",
    "merge_convs", "merge_matmuls", "resnet_merge", "rules", "sru_rules",
]
