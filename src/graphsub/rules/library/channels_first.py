"""Channels-last MLPs between convolutions written channels-first (rule set ``channels-first``, names ``cf_*``,
tag ``"channels-first"``): the hand-written ONNX pass :mod:`graphsub.frontends.onnx_layout` as rules, so that every
search can make its rewrite, combined with every other rule.

PyTorch models written channels-last between convolutions -- ConvNeXt's block, ``dwconv -> permute(0, 2, 3, 1) ->
LayerNorm -> Linear -> GELU -> Linear -> permute(0, 3, 1, 2) -> * gamma`` -- reach graphsub as ``transpose ->
layernorm -> matmul -> add -> GELU -> matmul -> add -> transpose(0, 3, 1, 2) -> mul``. onnxruntime runs its
convolutions in the blocked NCHWc layout, but a MatMul over the last axis of an NHWC tensor is outside it. A matmul
by a weight ``W[K, N]`` over the channel axis is a 1x1 convolution, ``transpose(x @ W + b, (0, 3, 1, 2)) ==
conv2d(transpose(x, (0, 3, 1, 2)), W^T[:, :, None, None], b)``, and elementwise ops commute with the transpose. The
rules move the closing transpose up to the MLP's input (just after the layer normalisation, which stays over the
last axis) and write both linears as 1x1 convolutions; a layer scale ``g`` of shape ``(C, 1, 1)`` / ``(1, C, 1, 1)``
(or a scalar) after the region is folded into the last convolution's kernel and bias. The new weights (``W^T``
reshaped, scaled by ``g``) are weight-only values: free, and folded before export
(:func:`graphsub.rules.apply.fold_weights`). The arithmetic is the same up to float rounding (a convolution sums in
another order).

In the table, ``T`` is ``transpose(., (0, 3, 1, 2))`` (NHWC to NCHW), ``lin(v, W, b)`` is ``v @ W + b`` (the
matmul's fused activation ``none``), ``conv(v, W, b)`` the 1x1 convolution ``conv2d(v, reshape(W^T, (N, K, 1, 1)),
b)``; ``x`` is a rank-4 float tensor, ``W1``, ``W2``, ``W`` weight matrices over its last axis, ``b1``, ``b2``, ``b``
weight vectors of their widths, ``c1``, ``c2``, ``c3`` weight scalars.

======================================  ===========================================================================
rule                                    rewrite
======================================  ===========================================================================
``cf_mlp_act[_bias_XY][_scale*]``       ``T(lin(f(lin(x, W1, b1)), W2, b2)) [* g]  =>  conv(f(conv(T(x), W1, b1)),
                                        W2 * g, b2 * g)`` for ``f`` any one-input elementwise op (``gelu``: the
                                        dynamo export's GELU; ``relu``, ``tanh``, ``ms_gelu``, ...)
``cf_mlp_erf[_bias_XY][_scale*]``       the same with ``f(h) = (h * (erf(h / c1) + c2)) * c3``: the TorchScript
                                        export's GELU, spelled exactly so (the rewrite holds for any scalars)
``cf_linear_conv[_lhs]``                ``T(lin(x, W, b))  =>  conv(T(x), W, b)``; ``_lhs``: ``T(b + x @ W)``
``cf_matmul_conv``                      ``T(x @ W)  =>  conv(T(x), W)`` (no bias)
``cf_unary_transpose``                  ``T(f(x))  =>  f(T(x))`` for a one-input elementwise op ``f``
``cf_binary_transpose[_lhs]``           ``T(f(x, c))  =>  f(T(x), c')`` (``_lhs``: ``f(c, x)``) for a two-input
                                        elementwise op ``f`` and a weight ``c`` that is a scalar (``c' = c``) or a
                                        vector over the last axis (``c' = reshape(c, (C, 1, 1))``)
======================================  ===========================================================================

Suffixes of the ``cf_mlp_*`` rules: ``_bias_XY`` says on which side each linear (``X`` the first, ``Y`` the second)
adds its bias, ``l`` for ``b + x @ W`` (the TorchScript export: ``_bias_ll``) and ``r`` for ``x @ W + b`` (the
dynamo export; ``rr`` is the rule without a suffix); ``_scale`` for a layer scale ``T(...) * g`` after the region,
``_scale_lhs`` for ``g * T(...)`` (what both exporters write).

**One step or several.** Each ``cf_mlp_*`` rule is the pass on one region in one step, with as many ops after as
before (two matmuls become convolutions, the transpose moves from the region's output to its input, a layer scale
disappears into the weights): a search can take it wherever its cost model prefers it, and
:func:`~graphsub.rules.everywhere.rewrite_everywhere` reproduces the pass. The one-op rules ``cf_linear_conv``,
``cf_matmul_conv``, ``cf_unary_transpose`` and ``cf_binary_transpose`` are the same algebra one op at a time: they
take a region of a single linear (``T(lin(layernorm(...)))``) as the pass does, and regions of other shapes part of
the way. Their intermediate graphs can be worse than the start: moving the transpose through ``W2`` makes it transpose
the wider hidden tensor, and in the TorchScript GELU it stops at ``h * (erf(h / c1) + c2)``, whose operands both
come from ``h``, where it keeps onnxruntime from fusing the GELU (a block whose first weight is a graph input went
from 14 kernels to 18). :func:`rules` lists the ``cf_mlp_*`` rules first, those with a layer scale first of all, so
that applied everywhere they take whole regions before any one-op rule moves a transpose; :func:`region_rules` are
the ``cf_mlp_*`` rules alone, for applying the pass everywhere without the one-op rules.

**Measured** (``convnext_tiny.{ts,dynamo}.b1`` and ``.b4``, development half; imported, cleaned
(:func:`graphsub.rules.cleanup.clean`), these rules applied everywhere, exported; kernel counts of onnxruntime 1.32's
optimized graph at 1 thread, 2026-11-29): every one of the 18 MLP regions is taken (``cf_mlp_erf_bias_ll_scale_lhs``
on the TorchScript export, ``cf_mlp_act_scale_lhs`` on the dynamo export) and onnxruntime runs the kernels it runs
for the hand pass's output: 157 kernels (TorchScript; the hand pass's 157) and 159 (dynamo; 160) instead of 269 /
271, 58 NCHWc convolutions instead of 22, no Gemm in the blocks, and 24 ReorderInput / 25 ReorderOutput for both (18
/ 22 in the original: the reorders do not drop, the blocks' Gemm, Reshape, Mul and Transpose kernels do). The few
other differences (a Transpose, Reshape or Flatten in the stem and head) are graphsub's clean-up's, outside the
blocks. Outputs equal the original's within 1e-6.

**What the hand pass covers that the rules do not:**

* any chain of elementwise ops between the linears, and any number of linears in a region (the pass follows the
  region's dataflow); the ``cf_mlp_*`` rules know two linears with one elementwise op or TorchScript's five-op GELU
  between them, exactly as spelled (another order of the operands of its ``add`` and ``mul`` is not matched);
* a linear without a bias inside a two-linear region, a constant of an elementwise op that is a vector over the last
  axis inside one (the pass reshapes it to ``(C, 1, 1)``), and a region closed by several transposes;
* the one-op rules do each of these one op at a time, with the caveat above.

The rules ask nothing of what computes ``x``: the pass requires a region to start at ``transpose(0, 2, 3, 1) ->
LayerNormalization``, but the rewrite is exact for any ``x``. Like the ``ort-spelling`` and ``rows`` sets,
this set is not part of ``default``: whether the rewrite pays depends on the model and the machine (the pass's
measurements: ``experiments/results/channels_first.json``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graphsub.ir.node import Ref
from graphsub.ops.types import FLOAT_DTYPES
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import Check, RuleFactory, WhereArg, all_checks, channel_operand, ex
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("channels-first")

#: NHWC -> NCHW, the closing transpose of a channels-last region
TO_NCHW = (0, 3, 1, 2)
#: GELU's constants, for the examples of the erf spelling (the rules hold for any scalars)
GELU_CONSTANTS = {"c1": np.float32(np.sqrt(2.0)), "c2": np.float32(1.0), "c3": np.float32(0.5)}

Out = dict[str, PValue]

# ----------------------------------------------------------------------------- checks


def _float_nhwc(m: MatchView, x: str) -> Check:
    t = m.type(x)
    if t.rank != 4:
        return f"${x} {t} is not rank 4"
    return t.dtype in FLOAT_DTYPES or f"${x} {t} is not a float tensor"


def _vector(m: MatchView, b: str, n: int) -> bool:
    """``b`` holds one value per output column ``n``: shape ``(n,)`` or ``(1, ..., 1, n)`` of rank <= 4."""
    shape = m.shape(b)
    return 1 <= len(shape) <= 4 and shape[-1] == n and all(d == 1 for d in shape[:-1])


def _scalar(m: MatchView, c: str) -> bool:
    shape = m.shape(c)
    return len(shape) <= 4 and int(np.prod(shape, dtype=np.int64)) == 1


def linear_check(m: MatchView, x: str, w: str, b: str | None) -> Check:
    """``x @ w [+ b]`` is a linear layer over the last axis of a rank-4 ``x``: ``w`` a matrix of ``x``'s width,
    ``b`` a vector of ``w``'s."""
    xs, ws = m.shape(x), m.shape(w)
    if len(ws) != 2 or not xs or xs[-1] != ws[0]:
        return f"${w} {ws} is not a matrix of {x}'s width"
    if b is not None and not _vector(m, b, ws[1]):
        return f"bias ${b} {m.shape(b)} is not a vector of width {ws[1]}"
    return True


def _unary_elementwise(m: MatchView, node: str) -> Check:
    n = m.node(node)
    if not n.sig.opdef.elementwise or len(n.inputs) != 1:
        return f"{n.sig.op} is not a one-input elementwise op"
    return n.sig.in_types[0] == n.sig.out_types[0] or f"{n.sig.op} changes its input's type"


def _scale_check(m: MatchView, out: str) -> Check:
    """The layer scale ``g`` is a scalar or per-channel (``(C, 1, 1)``, ``(1, C, 1, 1)``) and keeps the shape."""
    c = m.shape("t")[1]
    if channel_operand(m, "g", c) is None:
        return f"$g {m.shape('g')} is neither a scalar nor per channel ({c},1,1)/(1,{c},1,1)"
    return m.shape(out) == m.shape("t") or f"the scale broadcasts the output up to {m.shape(out)}"


# ----------------------------------------------------------------------------- target helpers


def kernel_1x1(t: TargetBuilder, m: MatchView, w: str) -> Any:
    """Weight matrix ``w[K, N]`` as the kernel ``(N, K, 1, 1)`` of the equal 1x1 convolution."""
    k, n = m.shape(w)
    return t.reshape(t.transpose(m[w], perm=(1, 0)), shape=(n, k, 1, 1))


def bias_of(t: TargetBuilder, m: MatchView, b: str) -> Any:
    """Bias ``b`` (one value per column) as a convolution's ``(N,)`` bias."""
    shape = m.shape(b)
    return m[b] if len(shape) == 1 else t.reshape(m[b], shape=(shape[-1],))


def conv_1x1(t: TargetBuilder, x: Ref, kernel: Ref, bias: Ref | None = None) -> Any:
    return t.conv2d(x, kernel, *([bias] if bias is not None else []), strides=(1, 1), pads=(0, 0, 0, 0),
                    dilations=(1, 1), act="none")


def channel_const(t: TargetBuilder, m: MatchView, c: str) -> Any:
    """A constant of a channels-last elementwise op for the NCHW twin: a scalar as it is, a vector over the last
    axis as ``(C, 1, 1)``."""
    return m[c] if _scalar(m, c) else t.reshape(m[c], shape=(m.shape(c)[-1], 1, 1))


# ----------------------------------------------------------------------------- the whole region


def _linear(p: PatternBuilder, x: PValue, k: str, bias_lhs: bool) -> PValue:
    mm = p.matmul(x, p.weight(f"w{k}"), act="none", name=f"mm{k}")
    b = p.weight(f"b{k}")
    return p.add(b, mm, name=f"add{k}") if bias_lhs else p.add(mm, b, name=f"add{k}")


def _erf_gelu(p: PatternBuilder, h: PValue) -> PValue:
    """TorchScript's GELU as graphsub imports it: ``(h * (erf(h / c1) + c2)) * c3``."""
    e = p.erf(p.div(h, p.weight("c1"), name="e_div"), name="e_erf")
    return p.mul(p.mul(h, p.add(e, p.weight("c2"), name="e_add"), name="e_mul"), p.weight("c3"), name="e_scale")


def _erf_gelu_target(t: TargetBuilder, m: MatchView, h: Any) -> Any:
    return (h * (t.erf(h / m.c1) + m.c2)) * m.c3


#: the activations between the two linears: (pattern, target on the NCHW value, where constraints, description)
ACTIVATIONS: dict[str, tuple[Callable[[PatternBuilder, PValue], PValue], Callable[[TargetBuilder, MatchView, Any],
                                                                                  Any],
                             tuple[WhereArg, ...], str]] = {
    "act": (lambda p, h: p.any(h, name="act"), lambda t, m, h: t.copy(m.node("act"), h),
            ((lambda m: _unary_elementwise(m, "act"), "act is a one-input elementwise op"),),
            "any one-input elementwise op"),
    "erf": (_erf_gelu, _erf_gelu_target,
            ((lambda m: all(_scalar(m, c) for c in ("c1", "c2", "c3")) or "a constant of the erf GELU is not a "
              "scalar", "c1, c2, c3 are scalars"),),
            "the erf GELU f(h) = (h * (erf(h / c1) + c2)) * c3 (scalar c1, c2, c3)"),
}


def _mlp(act: str, sides: str, scale: str) -> Rule:
    """``sides``: where each linear adds its bias, ``l`` (b + x@W) or ``r`` (x@W + b); ``scale``: ``""`` (none),
    ``"rhs"`` (T(...) * g) or ``"lhs"`` (g * T(...))."""
    pattern_act, target_act, act_where, act_doc = ACTIVATIONS[act]

    def src(p: PatternBuilder) -> Out:
        h = _linear(p, p.var("x"), "1", sides[0] == "l")
        y = p.transpose(_linear(p, pattern_act(p, h), "2", sides[1] == "l"), perm=TO_NCHW, name="t")
        if scale:
            g = p.weight("g")
            y = p.mul(g, y, name="scale") if scale == "lhs" else p.mul(y, g, name="scale")
        return {"y": y}

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        h = conv_1x1(t, t.transpose(m.x, perm=TO_NCHW), kernel_1x1(t, m, "w1"), bias_of(t, m, "b1"))
        kernel, bias = kernel_1x1(t, m, "w2"), bias_of(t, m, "b2")
        if scale:
            n = m.shape("w2")[1]
            per_channel = channel_operand(m, "g", n) == "channel"
            kernel = kernel * t.reshape(m.g, shape=(n, 1, 1, 1) if per_channel else (1, 1, 1, 1))
            bias = bias * t.reshape(m.g, shape=(n,) if per_channel else (1,))
        return {"y": conv_1x1(t, target_act(t, m, h), kernel, bias)}

    where: list[WhereArg] = [
        (lambda m: all_checks(_float_nhwc(m, "x"), linear_check(m, "x", "w1", "b1"),
                              linear_check(m, "e_scale" if act == "erf" else "act", "w2", "b2")),
         "x is a rank-4 float tensor, two linear layers over its last axis"),
        *act_where,
    ]
    if scale:
        where.append((lambda m: _scale_check(m, "scale"), "g is a scalar or per-channel layer scale"))

    def example(x: tuple[int, ...], hidden: int, out: int, g: tuple[int, ...], op: str, vec: bool) -> Example:
        c = x[-1]
        types: dict[str, Any] = {"x": x, "w1": (c, hidden), "w2": (hidden, out),
                                 "b1": (hidden,), "b2": (1, 1, 1, out) if vec else (out,)}
        if scale:
            types["g"] = g
        if act == "erf":
            types |= {"c1": (), "c2": (1,), "c3": (1, 1, 1, 1) if vec else ()}
            return ex(types, data={k: np.reshape(v, types[k]) for k, v in GELU_CONSTANTS.items()})
        return ex(types, ops={"act": op})

    examples = [example((1, 4, 5, 8), 12, 8, (8, 1, 1), "gelu", False),
                example((2, 3, 3, 6), 4, 5, (1, 5, 1, 1), "relu", True),
                example((1, 2, 7, 3), 9, 3, (), "tanh", False)]
    order = " and ".join("b + x@W" if s == "l" else "x@W + b" for s in sides) if sides[0] != sides[1] else \
        ("b + x@W" if sides[0] == "l" else "x@W + b")
    region = "transpose(lin2(f(lin1(x))), (0, 3, 1, 2))"
    region = {"": region, "rhs": f"{region} * g", "lhs": f"g * {region}"}[scale]
    doc = (f"A channels-last MLP, {region} with f {act_doc} and linears {order} over the last axis of a "
           "rank-4 x => its channels-first twin: the transpose moves to x and each linear becomes a 1x1 "
           "convolution (kernel W^T[:, :, None, None], bias b)"
           + ("; the scalar or per-channel layer scale g is folded into the last one's kernel and bias." if scale
              else "."))
    name = f"cf_mlp_{act}" + ("" if sides == "rr" else f"_bias_{sides}") + \
        {"": "", "rhs": "_scale", "lhs": "_scale_lhs"}[scale]
    return rule(name, doc, src, tgt, examples, where, tags=("layout", "conv", "matmul"))


# ----------------------------------------------------------------------------- one op at a time


def _linear_conv(bias: str) -> Rule:
    """``bias``: ``"rhs"`` (x@W + b), ``"lhs"`` (b + x@W) or ``""`` (no bias)."""
    def src(p: PatternBuilder) -> Out:
        y = p.matmul(p.var("x"), p.weight("w"), act="none", name="mm")
        if bias:
            b = p.weight("b")
            y = p.add(b, y, name="add") if bias == "lhs" else p.add(y, b, name="add")
        return {"y": p.transpose(y, perm=TO_NCHW, name="t")}

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        b = bias_of(t, m, "b") if bias else None
        return {"y": conv_1x1(t, t.transpose(m.x, perm=TO_NCHW), kernel_1x1(t, m, "w"), b)}

    def example(x: tuple[int, ...], n: int, b: tuple[int, ...]) -> Example:
        return ex({"x": x, "w": (x[-1], n)} | ({"b": b} if bias else {}))

    name = "cf_matmul_conv" if not bias else "cf_linear_conv" + ("_lhs" if bias == "lhs" else "")
    form = {"": "x@W", "rhs": "x@W + b", "lhs": "b + x@W"}[bias]
    doc = (f"transpose({form}, (0, 3, 1, 2)) for a rank-4 x and a weight matrix W over its last axis"
           + (" (b a vector of W's width)" if bias else "") + " => conv2d(transpose(x, (0, 3, 1, 2)), "
           "W^T[:, :, None, None]" + (", b" if bias else "") + "): the matmul as a 1x1 convolution, the transpose "
           "moved to its input.")
    return rule(name, doc, src, tgt,
                [example((1, 4, 5, 6), 8, (8,)), example((2, 3, 2, 5), 3, (1, 1, 1, 3)),
                 example((1, 1, 7, 4), 4, (4,))],
                [(lambda m: all_checks(_float_nhwc(m, "x"), linear_check(m, "x", "w", "b" if bias else None)),
                  "a linear layer over the last axis of a rank-4 float x")],
                tags=("layout", "conv", "matmul"))


def _unary_transpose() -> Rule:
    return rule(
        "cf_unary_transpose",
        "transpose(f(x), (0, 3, 1, 2)) => f(transpose(x, (0, 3, 1, 2))) for a one-input elementwise op f: the "
        "closing transpose of a channels-last region moves up through an activation.",
        lambda p: {"y": p.transpose(p.any(p.var("x"), name="f"), perm=TO_NCHW, name="t")},
        lambda t, m: {"y": t.copy(m.node("f"), t.transpose(m.x, perm=TO_NCHW))},
        [ex({"x": (1, 4, 5, 6)}, ops={"f": "gelu"}), ex({"x": (2, 3, 2, 5)}, ops={"f": "erf"}),
         ex({"x": (1, 1, 7, 4)}, ops={"f": "sigmoid"})],
        [(lambda m: _unary_elementwise(m, "f"), "f is a one-input elementwise op")], tags=("layout", "elementwise"))


def _binary_check(m: MatchView) -> Check:
    n = m.node("f")
    if not n.sig.opdef.elementwise or len(n.inputs) != 2:
        return f"{n.sig.op} is not a two-input elementwise op"
    if m.type("f") != m.type("x"):
        return f"{n.sig.op} changes x's type {m.type('x')} into {m.type('f')}"
    return _scalar(m, "c") or _vector(m, "c", m.shape("x")[-1]) or \
        f"$c {m.shape('c')} is neither a scalar nor a vector over the last axis"


def _binary_transpose(lhs: bool) -> Rule:
    def src(p: PatternBuilder) -> Out:
        x, c = p.var("x"), p.weight("c")
        return {"y": p.transpose(p.any(*((c, x) if lhs else (x, c)), name="f"), perm=TO_NCHW, name="t")}

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        x, c = t.transpose(m.x, perm=TO_NCHW), channel_const(t, m, "c")
        return {"y": t.copy(m.node("f"), *((c, x) if lhs else (x, c)))}

    form = "f(c, x)" if lhs else "f(x, c)"
    twin = "f(c', transpose(x, (0, 3, 1, 2)))" if lhs else "f(transpose(x, (0, 3, 1, 2)), c')"
    return rule(
        "cf_binary_transpose" + ("_lhs" if lhs else ""),
        f"transpose({form}, (0, 3, 1, 2)) => {twin} for a two-input elementwise op f and a weight c that is a scalar "
        "(c' = c) or a vector over x's last axis (c' = c as (C, 1, 1)): the closing transpose of a channels-last "
        "region moves up through a bias or a scale.",
        src, tgt,
        [ex({"x": (1, 4, 5, 6), "c": (6,)}, ops={"f": "sub" if lhs else "add"}),
         ex({"x": (2, 3, 2, 5), "c": ()}, ops={"f": "mul"}),
         ex({"x": (1, 1, 7, 4), "c": (1, 1, 1, 4)}, ops={"f": "div"})],
        [(_binary_check, "f is a two-input elementwise op, c a scalar or a vector over the last axis")],
        tags=("layout", "elementwise"))


def region_rules() -> list[Rule]:
    """The whole-region rules ``cf_mlp_*``: those with a layer scale first (so that applied everywhere a layer scale
    is folded where there is one)."""
    return [_mlp(act, sides, scale) for scale in ("lhs", "rhs", "") for act in ACTIVATIONS
            for sides in ("rr", "ll", "lr", "rl")]


def step_rules() -> list[Rule]:
    """The one-op rules (see the module docstring for what they do to a region no ``cf_mlp_*`` rule takes)."""
    return [_linear_conv("rhs"), _linear_conv("lhs"), _linear_conv(""), _unary_transpose(),
            _binary_transpose(False), _binary_transpose(True)]


def rules() -> list[Rule]:
    """The ``channels-first`` set (see the module docstring): :func:`region_rules`, then :func:`step_rules`."""
    return [*region_rules(), *step_rules()]


__all__ = ["ACTIVATIONS", "TO_NCHW", "bias_of", "channel_const", "conv_1x1", "kernel_1x1", "linear_check",
           "region_rules", "rules", "step_rules"]
