"""Vector-Jacobian rules of the arithmetic operators: elementwise maps, matrix products, normalisations and
reductions, and onnxruntime's fused forms of them (see :mod:`graphsub.training.vjp` for the interface).

Every rule gives PyTorch autograd's gradient (except ``pow``'s exponent gradient ``out * log(x)`` at ``x = 0``,
which is NaN here and 0 in PyTorch). Rules that need an intermediate the forward op computed but did not output
(the normalised input of a layer norm, the inner ``tanh`` of a GELU) recompute it from the op's inputs; rules use
the op's output where the derivative is a function of it (``exp``, ``sigmoid``, ``tanh``, ``sqrt``, ``div``...).
``ms_mha`` has no rule (training graphs refuse it). The shape operators' rules are in
:mod:`graphsub.training.rules_shape`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from graphsub.ir.builder import Value
from graphsub.ops.registry import broadcast_shapes, normalize_axis
from graphsub.ops.types import FLOAT_DTYPES
from graphsub.training.rules_nn import act_grad
from graphsub.training.vjp import Attrs, GOuts, Grad, Ins, Outs, VjpCtx, register_vjp
from graphsub.training.vjp import out_grad as _g


def const_value(ctx: VjpCtx, v: Value) -> np.ndarray | None:
    """The data of ``v`` when it is a weight with data (a constant: trained weights are inputs of the training
    graph), else None."""
    sig = ctx.b.nodes[v.ref.node].sig
    if sig.op != "weight":
        return None
    data = ctx.b.params.get(sig.attr["name"])
    return None if data is None else np.asarray(data)


# ------------------------------------------------------------------------------------------------ binary


@register_vjp("add", "sum")
def _add(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    g = _g(gouts)
    return [ctx.unbroadcast(g, x.shape) for x in ins]


@register_vjp("sub")
def _sub(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    g = _g(gouts)
    return [ctx.unbroadcast(g, ins[0].shape), ctx.op("neg", ctx.unbroadcast(g, ins[1].shape))]


@register_vjp("mul")
def _mul(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    g = _g(gouts)
    x, y = ins
    return [ctx.unbroadcast(ctx.op("mul", g, y), x.shape), ctx.unbroadcast(ctx.op("mul", g, x), y.shape)]


@register_vjp("div")
def _div(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """d(x/y)/dx = 1/y; d(x/y)/dy = -x/y^2 = -(1/y) * out."""
    g = _g(gouts)
    x, y = ins
    gx = ctx.op("div", g, y)
    gy = ctx.op("neg", ctx.unbroadcast(ctx.op("mul", gx, outs[0]), y.shape))
    return [ctx.unbroadcast(gx, x.shape), gy]


@register_vjp("pow")
def _pow(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """d(x^y)/dx = y x^(y-1) (a constant exponent is folded: x^2 gives 2 x); d(x^y)/dy = x^y log x."""
    g = _g(gouts)
    x, y = ins
    c = const_value(ctx, y)
    if c is not None and c.size == 1:  # a constant exponent: not trained, no gradient
        e = float(c.reshape(-1)[0])
        if e == 0.0:
            return [ctx.zeros(x.shape, x.dtype), None]
        d = g if e == 1.0 else ctx.op("mul", g, x if e == 2.0 else ctx.op("pow", x, ctx.scalar(e - 1.0, x)))
        return [ctx.unbroadcast(ctx.scale(d, e), x.shape), None]
    yf = y if y.dtype == x.dtype else ctx.op("cast", y, to=x.dtype)
    dx = ctx.op("mul", yf, ctx.op("pow", x, ctx.op("sub", yf, ctx.scalar(1.0, yf))))
    gx = ctx.unbroadcast(ctx.op("mul", g, dx), x.shape)
    if y.dtype not in FLOAT_DTYPES:
        return [gx, None]
    gy = ctx.unbroadcast(ctx.op("mul", g, ctx.op("mul", outs[0], ctx.op("log", x))), y.shape)
    return [gx, gy if gy.dtype == y.dtype else ctx.op("cast", gy, to=y.dtype)]


@register_vjp("smul")
def _smul(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    g = _g(gouts)
    x, s = ins
    return [ctx.op("smul", g, s), ctx.unbroadcast(ctx.op("mul", g, x), s.shape)]


# ------------------------------------------------------------------------------------------------ unary


@register_vjp("identity")
def _identity(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [_g(gouts)]


@register_vjp("neg")
def _neg(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [ctx.op("neg", _g(gouts))]


@register_vjp("exp")
def _exp(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [ctx.op("mul", _g(gouts), outs[0])]


@register_vjp("log")
def _log(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [ctx.op("div", _g(gouts), ins[0])]


@register_vjp("sqrt")
def _sqrt(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """d sqrt(x) = 1 / (2 sqrt(x))."""
    return [ctx.scale(ctx.op("div", _g(gouts), outs[0]), 0.5)]


@register_vjp("reciprocal")
def _reciprocal(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """d (1/x) = -1/x^2 = -out^2."""
    y = outs[0]
    return [ctx.op("neg", ctx.op("mul", _g(gouts), ctx.op("mul", y, y)))]


@register_vjp("sigmoid", "tanh")
def _sigmoid_tanh(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    op = ctx.b.nodes[outs[0].ref.node].sig.op
    return [act_grad(ctx, op, outs[0], _g(gouts))]


@register_vjp("erf")
def _erf(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """d erf(x) = 2/sqrt(pi) exp(-x^2)."""
    x = ins[0]
    e = ctx.op("exp", ctx.op("neg", ctx.op("mul", x, x)))
    return [ctx.op("mul", _g(gouts), ctx.scale(e, 2.0 / math.sqrt(math.pi)))]


def gelu_grad(ctx: VjpCtx, x: Value, g: Value, approximate: str) -> Value:
    """``g`` times the derivative of GELU at ``x`` (PyTorch's ``gelu_backward``): ``Phi(x) + x phi(x)``, or for
    the tanh form ``0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2)`` with ``t = tanh(beta (x + kappa x^3))``.
    """
    one = ctx.scalar(1.0, x)
    x2 = ctx.op("mul", x, x)
    if approximate == "tanh":
        beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
        inner = ctx.scale(ctx.op("mul", x, ctx.op("add", ctx.scale(x2, kappa), one)), beta)
        t = ctx.op("tanh", inner)
        left = ctx.scale(ctx.op("add", t, one), 0.5)
        inner_d = ctx.scale(ctx.op("add", ctx.scale(x2, 3.0 * kappa), one), beta)
        tanh_d = ctx.op("sub", one, ctx.op("mul", t, t))
        right = ctx.op("mul", ctx.scale(x, 0.5), ctx.op("mul", tanh_d, inner_d))
        d = ctx.op("add", left, right)
    elif approximate == "none":
        cdf = ctx.scale(ctx.op("add", ctx.op("erf", ctx.scale(x, math.sqrt(0.5))), one), 0.5)
        pdf = ctx.scale(ctx.op("exp", ctx.scale(x2, -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
        d = ctx.op("add", cdf, ctx.op("mul", x, pdf))
    else:
        raise ValueError(f"no gradient for gelu approximation {approximate!r}")
    return ctx.op("mul", g, d)


@register_vjp("gelu")
def _gelu(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [gelu_grad(ctx, ins[0], _g(gouts), a["approximate"])]


@register_vjp("cast")
def _cast(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """Float to float: the gradient cast back; from or to an integer type: none."""
    x = ins[0]
    if x.dtype not in FLOAT_DTYPES or outs[0].dtype not in FLOAT_DTYPES:
        return [None]
    g = _g(gouts)
    return [g if g.dtype == x.dtype else ctx.op("cast", g, to=x.dtype)]


# ------------------------------------------------------------------------------------------------ linalg


def _swap(ctx: VjpCtx, v: Value) -> Value:
    """``v`` with its last two axes swapped: a reshape when one of them has size 1, else a transpose."""
    s = v.shape
    if 1 in s[-2:]:
        return ctx.reshape(v, (*s[:-2], s[-1], s[-2]))
    return ctx.transpose_last2(v)


def _mm(ctx: VjpCtx, x: Value, y: Value) -> Value:
    """``x @ y`` (ranks >= 2); an outer product (inner dimension 1) is a broadcast ``mul``."""
    if x.shape[-1] == 1:
        return ctx.op("mul", x, y)
    return ctx.op("matmul", x, y)


@register_vjp("matmul")
def _matmul(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """numpy matmul: 1-D operands are promoted (a row, b a column) and the gradients reshaped back; operands
    broadcast over batch axes get their gradient summed over them. A 2-D ``b`` under a batched ``a`` (a linear
    layer) gets ``a^T @ dy`` with the batch folded into the rows: one matmul, no reduction."""
    x, w = ins
    gy = act_grad(ctx, a["act"], outs[0], _g(gouts))
    x2 = x if len(x.shape) >= 2 else ctx.reshape(x, (1, *x.shape))
    w2 = w if len(w.shape) >= 2 else ctx.reshape(w, (*w.shape, 1))
    batch = broadcast_shapes("matmul", x2.shape[:-2], w2.shape[:-2])
    m, k, n = x2.shape[-2], x2.shape[-1], w2.shape[-1]
    g2 = ctx.reshape(gy, (*batch, m, n))
    gx = ctx.reshape(ctx.unbroadcast(_mm(ctx, g2, _swap(ctx, w2)), x2.shape), x.shape)
    if len(w2.shape) == 2 and batch:
        rows = int(np.prod(batch)) * m
        xf, gf = ctx.reshape(x2, (rows, k)), ctx.reshape(g2, (rows, n))
        # one column: a vector-matrix product (rows,) @ (rows, k) needs no transpose
        gw = ctx.op("matmul", ctx.reshape(gf, (rows,)), xf) if n == 1 else _mm(ctx, _swap(ctx, xf), gf)
    else:
        gw = ctx.unbroadcast(_mm(ctx, _swap(ctx, x2), g2), w2.shape)
    return [gx, ctx.reshape(gw, w.shape)]


def _trans_mm(ctx: VjpCtx, op: str, x: Value, y: Value, alpha: float, ta: bool, tb: bool) -> Value:
    """``alpha * op(x) @ op(y)`` with ``op`` itself (gemm, ms_fused_matmul): its transposes cost no copy."""
    return ctx.op(op, x, y, alpha=alpha, trans_a=ta, trans_b=tb)


def _trans_grads(ctx: VjpCtx, op: str, x: Value, w: Value, g: Value, a: Attrs) -> tuple[Value, Value]:
    """Gradients of ``alpha * op(x) @ op(w)``: each is again such a product of ``g`` with the other operand
    (``dA' = alpha g B'^T``, ``dB' = alpha A'^T g``, transposed back where the operand was), summed over the
    batch axes an operand was broadcast along."""
    alpha, ta, tb = float(a["alpha"]), bool(a["trans_a"]), bool(a["trans_b"])
    gx = _trans_mm(ctx, op, w, g, alpha, tb, True) if ta else _trans_mm(ctx, op, g, w, alpha, False, not tb)
    gw = _trans_mm(ctx, op, g, x, alpha, True, ta) if tb else _trans_mm(ctx, op, x, g, alpha, not ta, False)
    return ctx.unbroadcast(gx, x.shape), ctx.unbroadcast(gw, w.shape)


@register_vjp("gemm")
def _gemm(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    g = _g(gouts)
    gx, gw = _trans_grads(ctx, "gemm", ins[0], ins[1], g, a)
    out: list[Grad] = [gx, gw]
    if len(ins) > 2:
        out.append(ctx.scale(ctx.unbroadcast(g, ins[2].shape), float(a["beta"])))
    return out


@register_vjp("ms_fused_matmul")
def _fused_matmul(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    gx, gw = _trans_grads(ctx, "ms_fused_matmul", ins[0], ins[1], _g(gouts), a)
    return [gx, gw]


# ------------------------------------------------------------------------------------------------ norm


def _axes_of(x: Value, axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(normalize_axis("vjp", int(ax), len(x.shape)) for ax in axes))


@register_vjp("reduce_sum", "reduce_mean")
def _reduce(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """The gradient broadcast back over the reduced axes (divided by their size for the mean)."""
    x = ins[0]
    axes = _axes_of(x, a["axes"])
    g = _g(gouts)
    if ctx.b.nodes[outs[0].ref.node].sig.op == "reduce_mean":
        g = ctx.scale(g, 1.0 / max(int(np.prod([x.shape[i] for i in axes])), 1))
    if all(x.shape[i] == 1 for i in axes):
        return [ctx.reshape(g, x.shape)]
    if axes != tuple(range(len(axes))):  # expand broadcasts the trailing axes: leading ones need no reshape
        g = ctx.reshape(g, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return [g if g.shape == x.shape else ctx.op("expand", g, shape=x.shape)]


@register_vjp("softmax")
def _softmax(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """y (g - sum(g y)) along the axis."""
    y, g = outs[0], _g(gouts)
    axis = normalize_axis("softmax", int(a["axis"]), len(y.shape))
    gy = ctx.op("mul", g, y)
    s = ctx.op("reduce_sum", gy, axes=(axis,), keepdims=True)
    return [ctx.op("sub", gy, ctx.op("mul", y, s))]


def _rstd(ctx: VjpCtx, var: Value, eps: float) -> Value:
    return ctx.op("reciprocal", ctx.op("sqrt", ctx.op("add", var, ctx.scalar(eps, var))))


def layernorm_grads(ctx: VjpCtx, x: Value, g: Value, scale: Value, bias: Value | None, axis: int,
                    eps: float) -> tuple[Value, Value, Value | None]:
    """Gradients of ``(x - mean) / sqrt(var + eps) * scale + bias`` (statistics over ``[axis, rank)``) with
    respect to x, scale and bias: ``dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))``."""
    axes = tuple(range(axis, len(x.shape)))
    mean = ctx.op("reduce_mean", x, axes=axes, keepdims=True)
    centred = ctx.op("sub", x, mean)
    rstd = _rstd(ctx, ctx.op("reduce_mean", ctx.op("mul", centred, centred), axes=axes, keepdims=True), eps)
    xhat = ctx.op("mul", centred, rstd)
    gbias = None if bias is None else ctx.unbroadcast(g, bias.shape)
    gscale = ctx.unbroadcast(ctx.op("mul", g, xhat), scale.shape)
    gxhat = ctx.op("mul", g, scale)
    m1 = ctx.op("reduce_mean", gxhat, axes=axes, keepdims=True)
    m2 = ctx.op("reduce_mean", ctx.op("mul", gxhat, xhat), axes=axes, keepdims=True)
    inner = ctx.op("sub", ctx.op("sub", gxhat, m1), ctx.op("mul", xhat, m2))
    return ctx.op("mul", inner, rstd), gscale, gbias


@register_vjp("layernorm")
def _layernorm(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    x = ins[0]
    axis = normalize_axis("layernorm", int(a["axis"]), len(x.shape))
    bias = ins[2] if len(ins) > 2 else None
    gx, gscale, gbias = layernorm_grads(ctx, x, _g(gouts), ins[1], bias, axis, float(a["epsilon"]))
    return [gx, gscale] + ([gbias] if bias is not None else [])


@register_vjp("batchnorm")
def _batchnorm(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """Inference (frozen) batch norm, an affine map per channel: the running mean and variance are constants
    (no gradient), as in PyTorch's ``eval()`` mode."""
    x, scale, _bias, mean, var = ins
    g = _g(gouts)
    rank = len(x.shape)
    bshape = (x.shape[1],) + (1,) * (rank - 2)
    axes = tuple(i for i in range(rank) if i != 1)
    inv = _rstd(ctx, var, float(a["epsilon"]))
    gx = ctx.op("mul", g, ctx.reshape(ctx.op("mul", scale, inv), bshape))
    centred = ctx.op("sub", x, ctx.reshape(mean, bshape))
    gscale = ctx.op("mul", ctx.op("reduce_sum", ctx.op("mul", g, centred), axes=axes, keepdims=False), inv)
    gbias = ctx.op("reduce_sum", g, axes=axes, keepdims=False)
    return [gx, gscale, gbias, None, None]


# ------------------------------------------------------------------------------------------------ com.microsoft


@register_vjp("ms_gelu")
def _ms_gelu(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [gelu_grad(ctx, ins[0], _g(gouts), "none")]


@register_vjp("ms_bias_gelu", "ms_fast_gelu")
def _ms_bias_gelu(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """gelu(x + bias): BiasGelu the erf form, FastGelu the tanh one."""
    op = ctx.b.nodes[outs[0].ref.node].sig.op
    h = ins[0] if len(ins) == 1 else ctx.op("add", ins[0], ins[1])
    d = gelu_grad(ctx, h, _g(gouts), "tanh" if op == "ms_fast_gelu" else "none")
    return [d, *(ctx.unbroadcast(d, b.shape) for b in ins[1:])]


def _sln_grads(ctx: VjpCtx, ins: Ins, h: Value, gy: Grad, gh_extra: Grad, eps: float) -> list[Grad]:
    """Gradients of SkipLayerNormalization's inputs given the gradients of its normalised output ``gy`` and of
    its sum ``h = x + skip (+ bias)`` (``gh_extra``, from the sum output); the sum's gradient goes to all three."""
    x, skip, gamma = ins[0], ins[1], ins[2]
    beta = ins[3] if len(ins) > 3 else None
    gh: Grad = gh_extra
    ggamma: Grad = None
    gbeta: Grad = None
    if gy is not None:
        dh, ggamma, gbeta = layernorm_grads(ctx, h, gy, gamma, beta, len(x.shape) - 1, eps)
        gh = dh if gh_extra is None else ctx.op("add", dh, gh_extra)
    assert gh is not None, "the sweep calls a rule only with a gradient for one of its outputs"
    out: list[Grad] = [gh, ctx.unbroadcast(gh, skip.shape), ggamma]
    if beta is not None:
        out.append(gbeta)
    if len(ins) > 4:
        out.append(ctx.unbroadcast(gh, ins[4].shape))
    return out


@register_vjp("ms_skip_layernorm")
def _ms_skip_layernorm(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """Layer norm over the last axis of ``x + skip (+ bias)``."""
    h = ctx.op("add", ins[0], ins[1])
    if len(ins) > 4:
        h = ctx.op("add", h, ins[4])
    return _sln_grads(ctx, ins, h, _g(gouts), None, float(a["epsilon"]))


@register_vjp("ms_skip_layernorm_sum")
def _ms_skip_layernorm_sum(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """The same with the sum as output 1: its gradient joins the one through the normalisation."""
    return _sln_grads(ctx, ins, outs[1], gouts[0], gouts[1], float(a["epsilon"]))


__all__ = ["const_value", "gelu_grad", "layernorm_grads"]
