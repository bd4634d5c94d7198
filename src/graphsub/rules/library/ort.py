"""Rewrites into onnxruntime's fused contrib kernels (ONNX domain ``com.microsoft``, the
``ms_*`` ops of :mod:`graphsub.ops.msft`): rule set ``ort``, names ``ort_*``, tag ``"ort"``.

==============================  =================================================================
rules                           rewrite
==============================  =================================================================
``ort_conv[_bias]_act``         conv2d with fused relu/sigmoid/tanh -> ms_fused_conv
``ort_conv[_bias]_then_act``    conv2d -> relu/sigmoid/tanh/leakyrelu/hardsigmoid/clip(both
                                bounds) => ms_fused_conv
``ort_conv[_bias]_add_act[_r]`` conv2d -> add(., z) (``_r``: add(z, .)) -> activation =>
                                ms_fused_conv with the residual input z (zero bias if none)
``ort_{mm,fmm}_scale_*``        matmul / ms_fused_matmul -> mul / div / smul by a constant
                                scalar weight => ms_fused_matmul(alpha)
``ort_{mm,fmm}_trans_{a,b}``,   matmul / ms_fused_matmul reading a transpose of the last two
``ort_mm_trans_ab``             axes => ms_fused_matmul(trans_a / trans_b)
``ort_gelu_erf``,               the erf GELU decompositions of PyTorch exports: nn.GELU's
``ort_gelu_erf_halfx``          ``((x * (erf(x / sqrt2) + 1)) * 0.5`` and ``x * 0.5 * (...)``'s
                                ``(x * 0.5) * (erf(x / sqrt2) + 1)`` => ms_gelu
``ort_gelu``, ``ort_fast_gelu`` IR gelu (erf / tanh) => ms_gelu / ms_fast_gelu
``ort_bias_*gelu``              add(x, bias) or add(bias, x) (bias 1-D over the last axis) ->
                                gelu / ms_gelu / gelu(tanh) / ms_fast_gelu => ms_bias_gelu or
                                ms_fast_gelu(x, bias)
``ort_skip_layernorm*``         add(x, skip) [optionally add(add(x, bias), skip)] ->
                                layernorm(last axis, gamma[, beta] of shape (D,)) =>
                                ms_skip_layernorm
``ort_mha_*``                   head-split attention => ms_mha: the rule set ``attention``
                                (:mod:`graphsub.rules.library.attention`: TorchScript and dynamo
                                exports, scaled_dot_product_attention's scale, attention biases)
==============================  =================================================================

All rules are exact (up to float rounding: their kernels compute the same function); examples are verified in
float mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graphsub.ir.node import Ref
from graphsub.ops.msft import f32_attr
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library import attention, rms, rotary
from graphsub.rules.library.kit import (
    RuleFactory,
    WhereArg,
    ex,
    scalar_constant,
    scalar_value,
    skip_accepts,
    swaps_last2,
)
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue, one_of
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort")
ACT_OF = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}
SQRT2 = float(np.float32(np.sqrt(2.0)))


# ----------------------------------------------------------------------------- FusedConv


def _act_of_node(m: MatchView, name: str) -> tuple[str, tuple[float, ...]] | None:
    """FusedConv (activation, params) for the activation node ``name``, or None."""
    sig = m.node(name).sig
    a = sig.attr
    if sig.op in ACT_OF:
        return ACT_OF[sig.op], ()
    if sig.op == "leakyrelu":
        return "LeakyRelu", (a["alpha"],)
    if sig.op == "hardsigmoid":
        return "HardSigmoid", (a["alpha"], a["beta"])
    if sig.op == "clip" and a["min"] is not None and a["max"] is not None:
        return "Clip", (a["min"], a["max"])
    return None


_ACT_WHERE = (lambda m: _act_of_node(m, "f") is not None,
              "f is relu/sigmoid/tanh/leakyrelu/hardsigmoid or clip with both bounds")


def _geometry(m: MatchView) -> dict[str, Any]:
    return m.attrs("conv", "strides", "pads", "dilations")


def _conv_inputs(m: MatchView, bias: bool) -> list[Ref]:
    return [m.x, m.w, m.b] if bias else [m.x, m.w]


_CONV_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], tuple[int, ...]]] = [
    ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": "SAME"}, (1, 4, 8, 8)),
    ((2, 4, 9, 7), (6, 2, 3, 3), {"strides": (2, 1), "pads": (1, 0, 1, 2)}, (2, 6, 5, 7)),
    ((1, 6, 10, 10), (6, 1, 3, 3), {"pads": "SAME", "dilations": (2, 2)}, (1, 6, 10, 10)),
]


def _conv_examples(bias: bool, acts: tuple[str, ...] = ("none",) * 3, ops: tuple[str, ...] = (),
                   fattrs: tuple[dict[str, Any], ...] = ({}, {}, {}), z: bool = False) -> list[Example]:
    """Three conv geometries (grouped, strided/asymmetric, depthwise dilated)."""
    out = []
    for k, (x, w, geo, y) in enumerate(_CONV_CASES):
        types = {"x": x, "w": w} | ({"b": (w[0],)} if bias else {}) | ({"z": y} if z else {})
        attrs: dict[str, Any] = {"conv": geo | {"act": acts[k]}} | ({"f": fattrs[k]} if ops else {})
        out.append(ex(types, ops={"f": ops[k]} if ops else {}, **attrs))
    return out


def _conv(p: PatternBuilder, bias: bool, act: Any) -> PValue:
    ins = [p.var("x"), p.var("w")] + ([p.var("b")] if bias else [])
    return p.conv2d(*ins, act=act, name="conv")


def _fused_conv(t: TargetBuilder, m: MatchView, inputs: list[Ref], act: str = "f") -> Ref:
    """ms_fused_conv of ``inputs`` with the conv's geometry and the activation of node ``act``."""
    a = _act_of_node(m, act)
    assert a is not None
    return t.ms_fused_conv(*inputs, **_geometry(m), activation=a[0], activation_params=a[1])


def _conv_rules(bias: bool) -> list[Rule]:
    sfx = "_bias" if bias else ""

    def zero_bias(t: TargetBuilder, m: MatchView) -> Ref:
        return m.b if bias else t.const(np.zeros(m.shape("w")[0], np.float32), m.type("x").dtype)

    return [
        rule(f"ort_conv{sfx}_act", "conv2d with a fused relu/sigmoid/tanh is FusedConv with that activation.",
             lambda p: {"y": _conv(p, bias, one_of(*ACT_OF))},
             lambda t, m: {"y": t.ms_fused_conv(*_conv_inputs(m, bias), **_geometry(m),
                                                activation=ACT_OF[m.attr("conv", "act")])},
             _conv_examples(bias, acts=("relu", "sigmoid", "tanh"))),
        rule(f"ort_conv{sfx}_then_act", "conv2d followed by an activation FusedConv supports becomes one FusedConv.",
             lambda p: {"y": p.any(_conv(p, bias, "none"), name="f")},
             lambda t, m: {"y": _fused_conv(t, m, _conv_inputs(m, bias))},
             _conv_examples(bias, ops=("relu", "leakyrelu", "clip"),
                            fattrs=({}, {"alpha": 0.2}, {"min": 0.0, "max": 0.5})),
             [_ACT_WHERE]),
        *rule(f"ort_conv{sfx}_add_act", "conv2d, a residual add of a tensor z of the conv's shape, and an activation "
              "become FusedConv with input Z (ResNet blocks).",
              lambda p: {"y": p.any(p.add(_conv(p, bias, "none"), p.var("z"), name="add"), name="f")},
              lambda t, m: {"y": _fused_conv(t, m, [m.x, m.w, zero_bias(t, m), m.z])},
              _conv_examples(bias, ops=("relu", "sigmoid", "hardsigmoid"),
                             fattrs=({}, {}, {"alpha": 0.25, "beta": 0.5}), z=True),
              [_ACT_WHERE, (lambda m: m.type("z") == m.type("conv") and m.type("add") == m.type("conv"),
                            "z has the conv output's type")], commute=True),
    ]


# ----------------------------------------------------------------------------- FusedMatMul


def _mm(p: PatternBuilder, fused: bool, a: PValue, b: PValue) -> PValue:
    if fused:
        return p.ms_fused_matmul(a, b, name="mm")
    return p.matmul(a, b, act="none", name="mm")


def _fmm_attrs(m: MatchView, fused: bool) -> dict[str, Any]:
    if fused:
        return m.attrs("mm")
    return {"alpha": 1.0, "trans_a": False, "trans_b": False}


_RANKS_WHERE = (lambda m: len(m.shape("a")) >= 2 and len(m.shape("b")) >= 2, "both operands have rank >= 2")


def _scale_rules(fused: bool) -> list[Rule]:
    """``matmul`` / ``ms_fused_matmul`` then mul (both orders), smul or div by a constant scalar."""
    pre = "fmm" if fused else "mm"
    ex_attrs: dict[str, Any] = {"mm": {"alpha": 0.5, "trans_b": True}} if fused else {}
    bshape = [(5, 6), (2, 5, 6), (3, 7)] if fused else [(6, 5), (2, 6, 5), (7, 3)]
    examples = [ex({"a": (4, 6), "b": bshape[0], "s": ()}, data={"s": 0.125}, **ex_attrs),
                ex({"a": (2, 3, 6), "b": bshape[1], "s": (1,)}, data={"s": [-2.5]}, **ex_attrs),
                ex({"a": (5, 2, 4, 7), "b": bshape[2], "s": (1, 1)}, data={"s": [[3.0]]}, **ex_attrs)]

    def doc(form: str) -> str:
        return f"{'ms_fused_matmul' if fused else 'matmul'} then {form} by a constant scalar is FusedMatMul with alpha."

    def source(op: str) -> Callable[[PatternBuilder], dict[str, PValue]]:
        return lambda p: {"y": p.op1(op, _mm(p, fused, p.var("a"), p.var("b")), p.weight("s"), name="sc")}

    def target(inverse: bool) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
        def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
            s = scalar_value(m, "s")
            assert s is not None
            a = _fmm_attrs(m, fused)
            a["alpha"] = f32_attr(a["alpha"] * (1.0 / s if inverse else s))
            return {"y": t.ms_fused_matmul(m.a, m.b, **a)}

        return tgt

    return [
        *rule(f"ort_{pre}_scale_mul", doc("mul"), source("mul"), target(False), examples,
              [_RANKS_WHERE, scalar_constant("s", "mm", "sc")], commute=True, mirror_doc=doc("mul_r")),
        rule(f"ort_{pre}_scale_smul", doc("smul"), source("smul"), target(False), examples,
             [_RANKS_WHERE, scalar_constant("s", "mm", "sc")]),
        rule(f"ort_{pre}_scale_div", doc("div"), source("div"), target(True), examples,
             [_RANKS_WHERE, scalar_constant("s", "mm", "sc", nonzero=True)]),
    ]


def _trans_rule(fused: bool, side: str) -> Rule:
    """A transpose of the last two axes of operand ``side`` folded into FusedMatMul's ``trans_<side>``."""
    ex_attrs: dict[str, Any] = {"mm": {"alpha": 0.5, "trans_b": True}} if fused else {}

    def src(p: PatternBuilder) -> dict[str, PValue]:
        a, b = p.var("a"), p.var("b")
        if side == "a":
            a = p.transpose(a, name="tr")
        else:
            b = p.transpose(b, name="tr")
        return {"y": _mm(p, fused, a, b)}

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        a = _fmm_attrs(m, fused)
        a[f"trans_{side}"] = not a[f"trans_{side}"]
        return {"y": t.ms_fused_matmul(m.a, m.b, **a)}

    def tex(ta: tuple[int, ...], tb: tuple[int, ...], perm: tuple[int, ...]) -> Example:
        return ex({"a": ta, "b": tb}, tr={"perm": perm}, **ex_attrs)

    if side == "a":
        exs = [tex((6, 4), (5, 6) if fused else (6, 5), (1, 0)),
               tex((2, 6, 3), (2, 5, 6) if fused else (2, 6, 5), (0, 2, 1)),
               tex((3, 1, 7, 2), (4, 7) if fused else (7, 4), (0, 1, 3, 2))]
    else:
        exs = [tex((4, 6), (6, 5) if fused else (5, 6), (1, 0)),
               tex((2, 3, 6), (2, 6, 5) if fused else (2, 5, 6), (0, 2, 1)),
               tex((3, 1, 2, 7), (2, 7, 4) if fused else (2, 4, 7), (0, 2, 1))]
    return rule(f"ort_{'fmm' if fused else 'mm'}_trans_{side}",
                f"A transpose of the last two axes of operand {side} folds into FusedMatMul's trans_{side}.",
                src, tgt, exs, [_RANKS_WHERE, (lambda m: swaps_last2(m, "tr"), "tr swaps the last two axes")])


def _matmul_rules() -> list[Rule]:
    return [
        *_scale_rules(False), _trans_rule(False, "a"), _trans_rule(False, "b"),
        *_scale_rules(True), _trans_rule(True, "a"), _trans_rule(True, "b"),
        rule("ort_mm_trans_ab", "matmul of two last-axes transposes is FusedMatMul(transA, transB).",
             lambda p: {"y": p.matmul(p.transpose(p.var("a"), name="ta"), p.transpose(p.var("b"), name="tb"),
                                      act="none", name="mm")},
             lambda t, m: {"y": t.ms_fused_matmul(m.a, m.b, trans_a=True, trans_b=True)},
             [ex({"a": (6, 4), "b": (5, 6)}, ta={"perm": (1, 0)}, tb={"perm": (1, 0)}),
              ex({"a": (2, 6, 3), "b": (5, 6)}, ta={"perm": (0, 2, 1)}, tb={"perm": (1, 0)}),
              ex({"a": (2, 2, 7, 3), "b": (2, 1, 4, 7)}, ta={"perm": (0, 1, 3, 2)}, tb={"perm": (0, 1, 3, 2)})],
             [_RANKS_WHERE,
              (lambda m: swaps_last2(m, "ta") and swaps_last2(m, "tb"), "ta and tb swap the last two axes")]),
    ]


# ----------------------------------------------------------------------------- GELU


def _consts_where(expect: dict[str, float], x: str, out: str) -> WhereArg:
    """Constant scalar weights with the given values (float32 tolerance), no broadcast of x."""
    def fn(m: MatchView) -> bool | str:
        for name, want in expect.items():
            v = scalar_value(m, name)
            if v is None or not np.isclose(v, want, rtol=1e-6, atol=0.0):
                return f"{name} is {v}, not the constant {want}"
        return m.shape(out) == m.shape(x)

    text = ", ".join(f"{k} = {v:.7g}" for k, v in expect.items())
    return fn, f"constants {text}; output has x's shape"


_GELU_CONSTS = {"c_sqrt2": SQRT2, "c_one": 1.0, "c_half": 0.5}


def _gelu_src(halfx: bool) -> Callable[[PatternBuilder], dict[str, PValue]]:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        x = p.var("x")
        if halfx:
            h = p.mul(x, p.weight("c_half"), name="mulh")
        e = p.erf(p.div(x, p.weight("c_sqrt2"), name="div"), name="erf")
        a = p.add(e, p.weight("c_one"), name="add")
        if halfx:
            return {"y": p.mul(h, a, name="mulx")}
        return {"y": p.mul(p.mul(x, a, name="mulx"), p.weight("c_half"), name="mulh")}

    return src


def _gelu_examples(scalar_shapes: tuple[tuple[int, ...], ...]) -> list[Example]:
    out = []
    for xs, cs in zip(((2, 16), (3, 4, 8), (1, 2, 5, 5)), scalar_shapes, strict=True):
        data = {k: np.full(cs, v, np.float32) for k, v in _GELU_CONSTS.items()}
        out.append(ex({"x": xs} | {k: cs for k in _GELU_CONSTS}, data=data))
    return out


def _bias_split(m: MatchView, add: str = "add", u: str = "u", v: str = "v") -> tuple[Ref, Ref] | None:
    """(x, bias) of ``add(u, v)`` where bias is 1-D over the last axis of x = the sum's shape."""
    out = m.shape(add)
    for x, b in ((u, v), (v, u)):
        if out and m.shape(x) == out and m.shape(b) == (out[-1],):
            return m[x], m[b]
    return None


_BIAS_WHERE = (lambda m: _bias_split(m) is not None, "one operand is a 1-D bias over the last axis of the other")
_BIAS_EXAMPLES = [ex({"u": (2, 16), "v": (16,)}), ex({"u": (8,), "v": (3, 8)}, note="bias first (torch)"),
                  ex({"u": (2, 3, 5), "v": (5,)})]
_X3 = [ex({"x": (2, 16)}), ex({"x": (3, 4, 5)}), ex({"x": (7,)})]


def _bias_gelu(name: str, gelu: Callable[[PatternBuilder, PValue], PValue], target: str) -> Rule:
    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        split = _bias_split(m)
        assert split is not None
        return {"y": t.op(target, *split)}

    return rule(name, f"A bias add feeding the GELU is folded into {target}.",
                lambda p: {"y": gelu(p, p.add(p.var("u"), p.var("v"), name="add"))}, tgt, _BIAS_EXAMPLES,
                [_BIAS_WHERE])


def _gelu_rules() -> list[Rule]:
    return [
        rule("ort_gelu_erf", "PyTorch nn.GELU export, (x * (erf(x / sqrt2) + 1)) * 0.5, is onnxruntime's Gelu.",
             _gelu_src(False), lambda t, m: {"y": t.ms_gelu(m.x)}, _gelu_examples(((), (1,), (1, 1))),
             [_consts_where(_GELU_CONSTS, "x", "mulh")]),
        rule("ort_gelu_erf_halfx", "PyTorch export of x * 0.5 * (1 + erf(x / sqrt2)), (x * 0.5) * (erf(x / sqrt2) "
             "+ 1), is onnxruntime's Gelu.",
             _gelu_src(True), lambda t, m: {"y": t.ms_gelu(m.x)}, _gelu_examples(((), (1, 1), (1,))),
             [_consts_where(_GELU_CONSTS, "x", "mulx")]),
        rule("ort_gelu", "gelu (erf) is onnxruntime's Gelu.",
             lambda p: {"y": p.gelu(p.var("x"), approximate="none", name="g")}, lambda t, m: {"y": t.ms_gelu(m.x)},
             _X3),
        rule("ort_fast_gelu", "gelu (tanh) is onnxruntime's FastGelu.",
             lambda p: {"y": p.gelu(p.var("x"), approximate="tanh", name="g")},
             lambda t, m: {"y": t.ms_fast_gelu(m.x)}, _X3),
        _bias_gelu("ort_bias_gelu", lambda p, s: p.gelu(s, approximate="none", name="g"), "ms_bias_gelu"),
        _bias_gelu("ort_bias_ms_gelu", lambda p, s: p.ms_gelu(s, name="g"), "ms_bias_gelu"),
        _bias_gelu("ort_bias_fast_gelu", lambda p, s: p.gelu(s, approximate="tanh", name="g"), "ms_fast_gelu"),
        _bias_gelu("ort_bias_ms_fast_gelu", lambda p, s: p.ms_fast_gelu(s, name="g"), "ms_fast_gelu"),
    ]


# ----------------------------------------------------------------------------- SkipLayerNormalization


def _skip_split(m: MatchView, a: str, b: str) -> tuple[Ref, Ref] | None:
    """(x, skip) of ``add(a, b)``: x has the sum's shape, skip one SkipLayerNormalization accepts."""
    out = m.shape("add")
    for x, s in ((a, b), (b, a)):
        if m.shape(x) == out and skip_accepts(out, m.shape(s)):
            return m[x], m[s]
    return None


def _sln_parts(m: MatchView, bias: bool) -> tuple[Ref, Ref, Ref | None] | None:
    """(x, skip, bias) for the matched sum, or None."""
    if not bias:
        split = _skip_split(m, "u", "v")
        return None if split is None else (*split, None)
    if m.shape("badd") != m.shape("add") or not skip_accepts(m.shape("add"), m.shape("s")):
        return None
    bsplit = _bias_split(m, "badd", "u", "v")
    return None if bsplit is None else (bsplit[0], m.s, bsplit[1])


def _sln_where(beta: bool, bias: bool) -> list[WhereArg]:
    def norm(m: MatchView) -> bool:
        d = m.shape("add")[-1:]
        return (m.attr("ln", "axis") == len(m.shape("add")) - 1 and m.shape("g") == d
                and (not beta or m.shape("be") == d))

    return [(norm, "layernorm over the last axis with gamma (and beta) of shape (D,)"),
            (lambda m: _sln_parts(m, bias) is not None,
             "the sum is x + skip (+ a 1-D bias) with a skip shape SkipLayerNormalization accepts")]


def _sln_rules(beta: bool, bias: bool, keep_sum: bool = False) -> list[Rule]:
    """add(x, skip) [or add(add(x, bias), skip) and its twin add(skip, add(x, bias)) (``_r``)] then layernorm;
    ``keep_sum``: the sum is used elsewhere too (a pre-LN transformer's next residual, GPT-2's), and the node's sum
    output replaces it (``ms_skip_layernorm_sum``, rules ``..._sum``)."""
    def src(p: PatternBuilder) -> dict[str, PValue]:
        u, v = p.var("u"), p.var("v")
        if bias:
            inner, s = p.add(u, v, name="badd"), p.var("s")
            h = p.add(inner, s, name="add")
        else:
            h = p.add(u, v, name="add")
        ln_in = [h, p.var("g")] + ([p.var("be")] if beta else [])
        return {"y": p.layernorm(*ln_in, name="ln")} | ({"h": h} if keep_sum else {})

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        parts = _sln_parts(m, bias)
        assert parts is not None
        x, skip, b = parts
        ins = [x, skip, m.g]
        if beta or b is not None:
            ins.append(m.be if beta else t.const(np.zeros(m.shape("g"), np.float32), m.type("g").dtype))
        if b is not None:
            ins.append(b)
        eps = m.attr("ln", "epsilon")
        if not keep_sum:
            return {"y": t.ms_skip_layernorm(*ins, epsilon=eps)}
        y, h = t.ms_skip_layernorm_sum(*ins, epsilon=eps)
        return {"y": y, "h": h}

    def example(h: tuple[int, ...], skip: tuple[int, ...], eps: float, swap: bool = False) -> Example:
        d = (h[-1],)
        types: dict[str, Any] = {"g": d} | ({"be": d} if beta else {})
        if bias:
            types |= {"u": d if swap else h, "v": h if swap else d, "s": skip}
        else:
            types |= {"u": skip if swap else h, "v": h if swap else skip}
        return ex(types, ln={"axis": len(h) - 1, "epsilon": eps})

    name = "ort_skip_layernorm" + ("" if beta else "_nobeta") + ("_bias" if bias else "") + ("_sum" if keep_sum else "")
    doc = ("add(x, skip" + (" + 1-D bias" if bias else "") + ") then layer normalisation over the last axis is "
           "onnxruntime's SkipLayerNormalization" + (", the sum its sum output." if keep_sum else "."))
    examples = [example((2, 5, 8), (2, 5, 8), 1e-5), example((2, 5, 8), (5, 8), 1e-3, swap=True),
                example((6, 16), (6, 16), 1e-12)]
    where = _sln_where(beta, bias) + ([(_sum_used, "the sum is used elsewhere too")] if keep_sum else [])
    if not bias:
        return [rule(name, doc, src, tgt, examples, where)]
    return list(rule(name, doc, src, tgt, examples, where, commute=("add",)))


def _sum_used(m: MatchView) -> bool:
    """Whether the matched sum is read by more than its layer normalisation (or is a graph output)."""
    nid = m["add"].node
    return len(m.graph.users(nid)) > 1 or any(r.node == nid for r in m.graph.outputs)


def skip_layernorm_rules() -> list[Rule]:
    """The ``ort_skip_layernorm*`` rules: a residual sum and the layer normalisation after it as onnxruntime's
    SkipLayerNormalization (with its sum output where the sum is used again: those first)."""
    return [r for keep_sum in (True, False) for beta in (True, False) for bias in (False, True)
            for r in _sln_rules(beta, bias, keep_sum)]

def rules() -> list[Rule]:
    """The ``ort`` rule set (see the module docstring)."""
    return [*_conv_rules(False), *_conv_rules(True), *_matmul_rules(), *_gelu_rules(),
            *skip_layernorm_rules(), *attention.rules(), *rms.rules(), *rotary.rules()]


__all__ = ["rules", "skip_layernorm_rules"]
