"""Vector-Jacobian rules of the neural-network operators: convolutions, pooling, piecewise activations and the
weight transforms (see :mod:`graphsub.training.vjp` for the interface).

Convolution and pooling gradients use the gradient kernels of :mod:`graphsub.ops.grad` (``conv2d_grad_x`` is a
transposed convolution, ``conv2d_grad_w`` a convolution of the input with the output gradient); piecewise
activations use masked kernels (``relu_grad``...), which take the activation's input -- or its output, which has
the same sign -- so that a fused ``act`` needs no extra value kept from the forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.ir.builder import Value
from graphsub.training.vjp import Grad, VjpCtx, register_vjp


def act_grad(ctx: VjpCtx, act: str, y: Value, g: Value) -> Value:
    """The gradient before a fused activation ``act`` whose output is ``y``."""
    if act == "none":
        return g
    if act == "relu":
        return ctx.op("relu_grad", y, g)
    one = ctx.scalar(1.0, y)
    if act == "sigmoid":  # y (1 - y)
        return ctx.op("mul", g, ctx.op("mul", y, ctx.op("sub", one, y)))
    if act == "tanh":  # 1 - y^2
        return ctx.op("mul", g, ctx.op("sub", one, ctx.op("mul", y, y)))
    raise ValueError(f"no gradient for fused activation {act!r}")


# ------------------------------------------------------------------------------------------------ convolution


def _conv_grads(ctx: VjpCtx, x: Value, w: Value, has_b: bool, gy: Value, a: Mapping[str, Any]) -> list[Grad]:
    geo = {"strides": a["strides"], "pads": a["pads"], "dilations": a["dilations"]}
    gx = ctx.op("conv2d_grad_x", gy, w, x_shape=x.shape, **geo)
    gw = ctx.op("conv2d_grad_w", x, gy, w_shape=w.shape, **geo)
    out: list[Grad] = [gx, gw]
    if has_b:
        out.append(ctx.op("reduce_sum", gy, axes=(0, 2, 3), keepdims=False))
    return out


@register_vjp("conv2d")
def _conv2d(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
            a: Mapping[str, Any]) -> list[Grad]:
    assert gouts[0] is not None
    gy = act_grad(ctx, a["act"], outs[0], gouts[0])
    return _conv_grads(ctx, ins[0], ins[1], len(ins) > 2, gy, a)


_FUSED_ACTS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}


@register_vjp("ms_fused_conv")
def _fused_conv(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
                a: Mapping[str, Any]) -> list[Grad]:
    """com.microsoft FusedConv: act(conv(x, w, b) + z); Relu, Sigmoid and Tanh activations."""
    assert gouts[0] is not None
    act = _FUSED_ACTS.get(a["activation"])
    if act is None:
        from graphsub.training.vjp import GradientError

        raise GradientError(f"ms_fused_conv: no gradient for activation {a['activation']!r}")
    gy = act_grad(ctx, act, outs[0], gouts[0])
    grads = _conv_grads(ctx, ins[0], ins[1], len(ins) > 2, gy, a)
    if len(ins) > 3:
        grads.append(gy)
    return grads


@register_vjp("enlarge")
def _enlarge(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
             a: Mapping[str, Any]) -> list[Grad]:
    """Zero-padding of a kernel to a larger centred one: the gradient is the centre."""
    assert gouts[0] is not None
    kh, kw = ins[0].shape[2:]
    big_h, big_w = outs[0].shape[2:]
    ph, pw = (big_h - kh) // 2, (big_w - kw) // 2
    return [ctx.op("slice", gouts[0], starts=(ph, pw), ends=(ph + kh, pw + kw), axes=(2, 3))]


@register_vjp("merge_gconv")
def _merge_gconv(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
                 a: Mapping[str, Any]) -> list[Grad]:
    """``w'[o, j*Cg:(j+1)*Cg] = w[o]`` for one ``j`` per output channel: the gradient gathers that block back (a
    constant 0/1 mask over the ``count`` blocks, summed)."""
    assert gouts[0] is not None
    o, cg, kh, kw = ins[0].shape
    count = int(a["count"])
    per_group = o // int(a["groups"])
    mask = np.zeros((o, count, 1, 1, 1), np.float32)
    for oc in range(o):
        mask[oc, (oc // per_group) % count] = 1.0
    g = ctx.reshape(gouts[0], (o, count, cg, kh, kw))
    picked = ctx.op("mul", g, ctx.const(mask))
    return [ctx.op("reduce_sum", picked, axes=(1,), keepdims=False)]


# ------------------------------------------------------------------------------------------------ pooling


def _pool_geo(a: Mapping[str, Any]) -> dict[str, Any]:
    return {"kernel": a["kernel"], "strides": a["strides"], "pads": a["pads"], "ceil_mode": a["ceil_mode"]}


@register_vjp("maxpool2d")
def _maxpool(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
             a: Mapping[str, Any]) -> list[Grad]:
    assert gouts[0] is not None
    gy = act_grad(ctx, a["act"], outs[0], gouts[0])
    return [ctx.op("maxpool2d_grad", ins[0], gy, **_pool_geo(a))]


@register_vjp("avgpool2d")
def _avgpool(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
             a: Mapping[str, Any]) -> list[Grad]:
    assert gouts[0] is not None
    gy = act_grad(ctx, a["act"], outs[0], gouts[0])
    return [ctx.op("avgpool2d_grad", gy, x_shape=ins[0].shape, count_include_pad=a["count_include_pad"],
                   **_pool_geo(a))]


@register_vjp("global_avgpool")
def _global_avgpool(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
                    a: Mapping[str, Any]) -> list[Grad]:
    assert gouts[0] is not None
    x = ins[0]
    area = int(np.prod(x.shape[2:]))
    if area == 1:
        return [ctx.reshape(gouts[0], x.shape)]
    return [ctx.scale(ctx.op("expand", gouts[0], shape=x.shape), 1.0 / area)]


# ------------------------------------------------------------------------------------------------ activations


def _masked(kernel: str, **fixed: Any) -> Any:
    def rule(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
             a: Mapping[str, Any]) -> list[Grad]:
        assert gouts[0] is not None
        attrs = {k: a[k] for k in fixed}
        return [ctx.op(kernel, ins[0], gouts[0], **attrs)]

    return rule


register_vjp("relu")(_masked("relu_grad"))
register_vjp("leakyrelu")(_masked("leakyrelu_grad", alpha=None))
register_vjp("clip")(_masked("clip_grad", min=None, max=None))
register_vjp("hardsigmoid")(_masked("hardsigmoid_grad", alpha=None, beta=None))
register_vjp("hardswish")(_masked("hardswish_grad"))
register_vjp("abs")(_masked("abs_grad"))

__all__ = ["act_grad"]


# ------------------------------------------------------------------------------------------------ batch norm


@register_vjp("batchnorm_train")
def _batchnorm_train(ctx: VjpCtx, ins: Sequence[Value], outs: Sequence[Value], gouts: Sequence[Grad],
                     a: Mapping[str, Any]) -> list[Grad]:
    """Batch statistics are functions of x: ``dx = (dy - mean(dy) - xhat * mean(dy xhat)) * scale / std`` (the
    statistics are recomputed from x, as the fused op keeps none)."""
    assert gouts[0] is not None
    x, scale, dy = ins[0], ins[1], gouts[0]
    axes = tuple(i for i in range(len(x.shape)) if i != 1)
    bshape = tuple(d if i == 1 else 1 for i, d in enumerate(x.shape))
    c = x.shape[1]
    mean = ctx.op("reduce_mean", x, axes=axes, keepdims=True)
    centred = ctx.op("sub", x, mean)
    var = ctx.op("reduce_mean", ctx.op("mul", centred, centred), axes=axes, keepdims=True)
    inv = ctx.op("reciprocal", ctx.op("sqrt", ctx.op("add", var, ctx.scalar(float(a["epsilon"]), x))))
    xhat = ctx.op("mul", centred, inv)
    m1 = ctx.op("reduce_mean", dy, axes=axes, keepdims=True)
    m2 = ctx.op("reduce_mean", ctx.op("mul", dy, xhat), axes=axes, keepdims=True)
    n = int(np.prod([x.shape[i] for i in axes]))
    inner = ctx.op("sub", ctx.op("sub", dy, m1), ctx.op("mul", xhat, m2))
    gx = ctx.op("mul", inner, ctx.op("mul", ctx.reshape(scale, bshape), inv))
    gscale = ctx.scale(ctx.reshape(m2, (c,)), float(n))
    gbias = ctx.scale(ctx.reshape(m1, (c,)), float(n))
    return [gx, gscale, gbias]
