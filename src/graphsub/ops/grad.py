"""Gradient kernels (family ``grad``): the vector-Jacobian products that reverse-mode training
graphs (``graphsub.training``) emit, for the operators whose VJP is not a composition of
forward operators.  The pooling kernels live in :mod:`graphsub.ops.grad_pool`.

* ``conv2d_grad_x(dy, w)`` -- d conv2d / d x (a transposed convolution) with output
  ``f32[x_shape]``; ``groups = x_shape[1] / w.shape[1]``.
* ``conv2d_grad_w(x, dy)`` -- d conv2d / d w with output ``f32[w_shape]``;
  ``groups = x.shape[1] / w_shape[1]``.
* ``relu_grad``, ``leakyrelu_grad``, ``clip_grad``, ``hardsigmoid_grad``, ``hardswish_grad``,
  ``abs_grad`` ``(x, dy)`` -- ``dy`` times the activation's derivative at ``x``, with PyTorch's
  choices at the kinks (``relu_grad`` also accepts relu's *output* as ``x``).
* ``gather_grad(indices, dy)`` -- zeros of ``x_shape`` with ``dy`` scatter-added along ``axis``
  (repeated indices add; negative indices wrap as in ``gather``).

Every exporter uses standard ONNX operators only (onnxruntime's CPU build has no training ops):
ConvTranspose, Conv on re-laid-out tensors, Where/comparisons, ScatterND with
``reduction="add"`` (opset >= 16).  The strided and spatial attributes mean what they mean
for the forward op (``pads`` is ``(top, left, bottom, right)``).

FLOPs: the convolution gradients cost what the forward convolution costs
(``2*N*O*Ho*Wo*(C/G)*kh*kw``); the elementwise ones a few per output; ``gather_grad`` one per
update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.common import check_pair, conv_out_hw, onnx_pads, resolve_pads, sliding_windows
from graphsub.ops.registry import (
    REQUIRED,
    AttrSpec,
    CostFn,
    ExportNode,
    OnnxExportCtx,
    OpDef,
    Sample,
    f32,
    flops_per_output,
    i64,
    register,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType, make_type, np_dtype

A = Mapping[str, Any]
Types = tuple[TensorType, ...]
Pads = tuple[int, int, int, int]

NOT_IMPORTED = "gradient kernel: emitted by graphsub.training, never imported"

# ----------------------------------------------------------------------------- convolution


def _shape_attr(op: str, name: str, v: Sequence[int], rank: int | None = 4) -> tuple[int, ...]:
    if (rank is not None and len(v) != rank) or any(d < 0 for d in v):
        want = f"{rank} dims >= 0" if rank is not None else "dims >= 0"
        raise ShapeError(f"{op}: {name} must be {want}, got {tuple(v)}")
    return tuple(v)


def conv_grad_geometry(
    op: str, x: tuple[int, ...], w: tuple[int, ...], y: TensorType, a: A
) -> tuple[int, Pads]:
    """Check that a conv2d of x[x] with w[w] (shapes) gives y's shape; returns (groups, pads)."""
    if y.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: expects floating-point tensors, got {y}")
    check_pair(op, "strides", a["strides"])
    check_pair(op, "dilations", a["dilations"])
    (n, c), (o, cg, kh, kw) = x[:2], w
    if cg == 0 or c % cg or o % (c // cg):
        raise ShapeError(f"{op}: input shape {x} and weight shape {w} give no valid group count")
    pads = resolve_pads(a["pads"], x[2:], (kh, kw), a["strides"], a["dilations"])
    try:
        ho, wo = conv_out_hw(x[2:], (kh, kw), a["strides"], pads, a["dilations"])
    except ShapeError as e:
        raise ShapeError(f"{op}: x {x}, w {w}: {e}") from None
    if y.shape != (n, o, ho, wo):
        raise ShapeError(f"{op}: conv2d of x {x} with w {w} gives [{n},{o},{ho},{wo}], "
                         f"but the output gradient is {y}")
    return c // cg, pads


def _grad_x_infer(ins: Sequence[TensorType], a: A) -> Types:
    dy, w = ins
    x_shape = _shape_attr("conv2d_grad_x", "x_shape", a["x_shape"])
    if dy.rank != 4 or w.rank != 4 or w.dtype != dy.dtype:
        raise ShapeError(f"conv2d_grad_x: expects dy[N,O,Ho,Wo] and w[O,C/G,kh,kw] of one dtype, "
                         f"got dy {dy}, w {w}")
    conv_grad_geometry("conv2d_grad_x", x_shape, w.shape, dy, a)
    return (TensorType(x_shape, dy.dtype),)


def _grad_w_infer(ins: Sequence[TensorType], a: A) -> Types:
    x, dy = ins
    w_shape = _shape_attr("conv2d_grad_w", "w_shape", a["w_shape"])
    if x.rank != 4 or dy.rank != 4 or x.dtype != dy.dtype:
        raise ShapeError(f"conv2d_grad_w: expects x[N,C,H,W] and dy[N,O,Ho,Wo] of one dtype, "
                         f"got x {x}, dy {dy}")
    conv_grad_geometry("conv2d_grad_w", x.shape, w_shape, dy, a)
    return (TensorType(w_shape, dy.dtype),)


def conv2d_grad_x_ref(dy: np.ndarray, w: np.ndarray, x_shape: Sequence[int], strides: Sequence[int],
                      pads: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
    """numpy d conv2d / d x (explicit pads): one batched matmul, then col2im (float64)."""
    n, c, h, wd = x_shape
    o, cg, kh, kw = w.shape
    g, og = c // cg, o // (c // cg)
    t, left = pads[0], pads[1]
    (sh, sw), (dh, dw) = strides, dilations
    ho, wo = dy.shape[2:]
    hp, wp = h + pads[0] + pads[2], wd + pads[1] + pads[3]
    dyg = dy.reshape(n, g, og, ho * wo).transpose(1, 0, 3, 2).astype(np.float64)  # G,N,HoWo,og
    wm = w.reshape(g, 1, og, cg * kh * kw).astype(np.float64)
    cols = np.matmul(dyg, wm).reshape(g, n, ho, wo, cg, kh, kw)
    dxp = np.zeros((n, g, cg, hp, wp))
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, :, i * dh: i * dh + (ho - 1) * sh + 1: sh, j * dw: j * dw + (wo - 1) * sw + 1: sw] += (
                cols[..., i, j].transpose(1, 0, 4, 2, 3))
    return dxp[..., t: t + h, left: left + wd].reshape(n, c, h, wd).astype(dy.dtype)


def conv2d_grad_w_ref(x: np.ndarray, dy: np.ndarray, w_shape: Sequence[int], strides: Sequence[int],
                      pads: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
    """numpy d conv2d / d w (explicit pads): windows of x times dy, one batched matmul (float64)."""
    n, c = x.shape[:2]
    o, cg, kh, kw = w_shape
    g, og = c // cg, o // (c // cg)
    ho, wo = dy.shape[2:]
    win = sliding_windows(x, (kh, kw), strides, pads, (ho, wo), dilations)  # N,C,Ho,Wo,kh,kw
    cols = win.reshape(n, g, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.astype(np.float64).reshape(g, n * ho * wo, cg * kh * kw)
    dyg = dy.reshape(n, g, og, ho * wo).transpose(1, 2, 0, 3).astype(np.float64).reshape(g, og, n * ho * wo)
    return np.matmul(dyg, cols).reshape(o, cg, kh, kw).astype(dy.dtype)


def _grad_x_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    dy, w = xs
    pads = resolve_pads(a["pads"], a["x_shape"][2:], w.shape[2:], a["strides"], a["dilations"])
    return (conv2d_grad_x_ref(dy, w, a["x_shape"], a["strides"], pads, a["dilations"]),)


def _grad_w_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    x, dy = xs
    pads = resolve_pads(a["pads"], x.shape[2:], a["w_shape"][2:], a["strides"], a["dilations"])
    return (conv2d_grad_w_ref(x, dy, a["w_shape"], a["strides"], pads, a["dilations"]),)


def _conv_grad_flops(dy_slot: int, w_of: Callable[[Sequence[TensorType], A], Sequence[int]]) -> CostFn:
    """As the forward conv: 2 * (elements of dy) * (C/G) * kh * kw."""

    def fn(ins: Sequence[TensorType], outs: Sequence[TensorType], a: A) -> int:
        _, cg, kh, kw = w_of(ins, a)
        return 2 * ins[dy_slot].numel * cg * kh * kw

    return fn


def _grad_x_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    # ConvTranspose with the forward pads; output_padding adds back the bottom/right rows the
    # forward conv never read when (H + pads - dilated kernel) is not a multiple of the stride.
    a, w = node.attrs, node.in_types[1]
    x_shape = a["x_shape"]
    kernel = w.shape[2:]
    pads = resolve_pads(a["pads"], x_shape[2:], kernel, a["strides"], a["dilations"])
    rem = [(x_shape[2 + i] + pads[i] + pads[i + 2] - (kernel[i] - 1) * a["dilations"][i] - 1) % a["strides"][i]
           for i in range(2)]
    attrs: dict[str, Any] = {
        "kernel_shape": list(kernel),
        "strides": list(a["strides"]),
        "dilations": list(a["dilations"]),
        "pads": onnx_pads(pads),
        "group": x_shape[1] // w.shape[1],
    }
    if any(rem):
        attrs["output_padding"] = rem
    ctx.emit("ConvTranspose", node.inputs, attrs, outputs=node.outputs)


def _grad_w_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    # dw[(g,o), c, i, j] = sum_{n,ho,wo} dy[n,(g,o),ho,wo] * xpad[n,(g,c), i*d + ho*s, j*d + wo*s]:
    # a grouped Conv of x laid out as [C/G, G*N, H, W] with dy laid out as [O, N, Ho, Wo] as the
    # kernel, strides and dilations swapped; its output [C/G, O, kh', kw'] (kh' >= kh: rows the
    # forward conv never read) is sliced to the kernel and transposed to [O, C/G, kh, kw].
    a, (x, dy) = node.attrs, node.in_types
    o, cg, kh, kw = a["w_shape"]
    (n, c, h, wd), (ho, wo) = x.shape, dy.shape[2:]
    g, og = c // cg, o // (c // cg)
    pads = resolve_pads(a["pads"], (h, wd), (kh, kw), a["strides"], a["dilations"])

    def relayout(name: str, shape5: tuple[int, ...], perm: list[int], shape4: tuple[int, ...]) -> str:
        if g == 1:
            return ctx.emit("Transpose", [name], {"perm": [1, 0, 2, 3]})[0]
        (r,) = ctx.emit("Reshape", [name, ctx.const(np.array(shape5, np.int64), "grad_w_shape")])
        (p,) = ctx.emit("Transpose", [r], {"perm": perm})
        return ctx.emit("Reshape", [p, ctx.const(np.array(shape4, np.int64), "grad_w_shape")])[0]

    xr = relayout(node.inputs[0], (n, g, cg, h, wd), [2, 1, 0, 3, 4], (cg, g * n, h, wd))
    kr = relayout(node.inputs[1], (n, g, og, ho, wo), [1, 2, 0, 3, 4], (o, n, ho, wo))
    conv_attrs = {
        "kernel_shape": [ho, wo],
        "strides": list(a["dilations"]),
        "dilations": list(a["strides"]),
        "pads": onnx_pads(pads),
        "group": g,
    }
    (y,) = ctx.emit("Conv", [xr, kr], conv_attrs)
    full = [(h + pads[0] + pads[2] - (ho - 1) * a["strides"][0] - 1) // a["dilations"][0] + 1,
            (wd + pads[1] + pads[3] - (wo - 1) * a["strides"][1] - 1) // a["dilations"][1] + 1]
    if full != [kh, kw]:
        (y,) = ctx.emit("Slice", [y, ctx.const(np.array([0, 0], np.int64), "grad_w_starts"),
                                  ctx.const(np.array([kh, kw], np.int64), "grad_w_ends"),
                                  ctx.const(np.array([2, 3], np.int64), "grad_w_axes")])
    ctx.emit("Transpose", [y], {"perm": [1, 0, 2, 3]}, outputs=node.outputs)


def _canon_conv_pads(which: str) -> Callable[[dict[str, Any], Sequence[TensorType]], dict[str, Any]]:
    """SAME/VALID -> explicit pads, from x_shape and w (grad_x) or x and w_shape (grad_w)."""

    def fn(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
        if isinstance(a.get("pads"), str):
            hw, kernel = ((a["x_shape"][2:4], ins[1].shape[2:4]) if which == "x"
                          else (ins[0].shape[2:4], a["w_shape"][2:4]))
            a["pads"] = resolve_pads(a["pads"], hw, kernel, a["strides"], a["dilations"])
        return a

    return fn


_CONV_ATTRS = (
    AttrSpec("strides", "ints", (1, 1), "(stride_h, stride_w) of the forward conv"),
    AttrSpec("pads", "pads", (0, 0, 0, 0), "the forward conv's pads: SAME, VALID or (t, l, b, r)"),
    AttrSpec("dilations", "ints", (1, 1), "(dilation_h, dilation_w) of the forward conv"),
)

register(OpDef(
    name="conv2d_grad_x", family="grad",
    canonicalize=_canon_conv_pads("x"),
    doc="Gradient of conv2d(x, w) with respect to x: the transposed convolution of dy[N,O,Ho,Wo] "
        "with w[O,C/G,kh,kw], shaped x_shape (groups = x_shape[1] / w.shape[1]).",
    inputs=("dy", "w"),
    attrs=(*_CONV_ATTRS, AttrSpec("x_shape", "ints", REQUIRED, "shape of the forward input x")),
    infer=_grad_x_infer, reference=_grad_x_ref,
    flops=_conv_grad_flops(0, lambda ins, a: ins[1].shape),
    onnx_export=_grad_x_export, onnx_import_note=NOT_IMPORTED,
    samples=(
        Sample((f32(2, 4, 4, 4), f32(4, 3, 3, 3)), {"strides": (2, 2), "pads": (1, 1, 1, 1),
                                                     "x_shape": (2, 3, 8, 8)},
               note="stride 2, one remainder row/col"),
        Sample((f32(1, 6, 5, 4), f32(6, 2, 3, 2)), {"strides": (2, 3), "pads": (1, 0, 2, 2),
                                                     "x_shape": (1, 4, 9, 11)},
               note="grouped, asymmetric pads, remainders 1 and 2"),
        Sample((f32(1, 6, 10, 10), f32(6, 1, 3, 3)), {"pads": "SAME", "dilations": (2, 2),
                                                       "x_shape": (1, 6, 10, 10)},
               note="depthwise, dilated"),
        Sample((f32(2, 5, 3, 3), f32(5, 3, 2, 2)), {"strides": (3, 3), "dilations": (2, 1),
                                                     "pads": (0, 1, 1, 0), "x_shape": (2, 3, 10, 8)},
               note="stride 3 with dilation"),
    ),
))

register(OpDef(
    name="conv2d_grad_w", family="grad",
    canonicalize=_canon_conv_pads("w"),
    doc="Gradient of conv2d(x, w) with respect to w: the correlation of x[N,C,H,W] with "
        "dy[N,O,Ho,Wo], shaped w_shape = (O, C/G, kh, kw) (groups = x.shape[1] / w_shape[1]).",
    inputs=("x", "dy"),
    attrs=(*_CONV_ATTRS, AttrSpec("w_shape", "ints", REQUIRED, "shape of the forward weight w")),
    infer=_grad_w_infer, reference=_grad_w_ref,
    flops=_conv_grad_flops(1, lambda ins, a: a["w_shape"]),
    onnx_export=_grad_w_export, onnx_import_note=NOT_IMPORTED,
    samples=(
        Sample((f32(2, 3, 8, 8), f32(2, 4, 4, 4)), {"strides": (2, 2), "pads": (1, 1, 1, 1),
                                                     "w_shape": (4, 3, 3, 3)},
               note="stride 2, one unread row/col"),
        Sample((f32(1, 4, 9, 11), f32(1, 6, 5, 4)), {"strides": (2, 3), "pads": (1, 0, 2, 2),
                                                      "w_shape": (6, 2, 3, 2)},
               note="grouped, asymmetric pads"),
        Sample((f32(1, 6, 10, 10), f32(1, 6, 10, 10)), {"pads": "SAME", "dilations": (2, 2),
                                                         "w_shape": (6, 1, 3, 3)},
               note="depthwise, dilated"),
        Sample((f32(2, 3, 10, 8), f32(2, 5, 3, 3)), {"strides": (3, 3), "dilations": (2, 1),
                                                      "pads": (0, 1, 1, 0), "w_shape": (5, 3, 2, 2)},
               note="stride 3 with dilation"),
    ),
))

# ----------------------------------------------------------------------------- elementwise


def _pair_infer(op: str) -> Callable[[Sequence[TensorType], A], Types]:
    def infer(ins: Sequence[TensorType], a: A) -> Types:
        x, dy = ins
        if x.shape != dy.shape or x.dtype != dy.dtype or dy.dtype not in FLOAT_DTYPES:
            raise ShapeError(f"{op}: expects x and dy of one shape and floating-point dtype, got x {x}, dy {dy}")
        return (dy,)

    return infer


def _where(ctx: OnnxExportCtx, node: ExportNode, mask: str, value: str, other: str | None = None) -> None:
    """Emit ``Where(mask, value, other or 0)`` into the node's output."""
    if other is None:
        other = ctx.const(np.zeros((), np_dtype(node.in_types[1].dtype)), "grad_zero")
    ctx.emit("Where", [mask, value, other], outputs=node.outputs)


def _scalar(ctx: OnnxExportCtx, node: ExportNode, v: float, hint: str) -> str:
    return ctx.const(np.array(v, np_dtype(node.in_types[1].dtype)), hint)


def _relu_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, dy = node.inputs
    (m,) = ctx.emit("Greater", [x, _scalar(ctx, node, 0.0, "grad_zero")])
    _where(ctx, node, m, dy)


def _leaky_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, dy = node.inputs
    (m,) = ctx.emit("Greater", [x, _scalar(ctx, node, 0.0, "grad_zero")])
    (neg,) = ctx.emit("Mul", [dy, _scalar(ctx, node, node.attrs["alpha"], "leaky_alpha")])
    _where(ctx, node, m, dy, neg)


def _clip_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    x, dy = xs
    keep = np.ones(x.shape, bool)
    if a["min"] is not None:
        keep &= x >= np.asarray(a["min"], x.dtype)
    if a["max"] is not None:
        keep &= x <= np.asarray(a["max"], x.dtype)
    return (np.where(keep, dy, 0).astype(dy.dtype),)


def _clip_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, dy = node.inputs
    masks = [ctx.emit(cmp, [x, _scalar(ctx, node, node.attrs[key], f"clip_{key}")])[0]
             for key, cmp in (("min", "GreaterOrEqual"), ("max", "LessOrEqual")) if node.attrs[key] is not None]
    if not masks:
        ctx.emit("Identity", [dy], outputs=node.outputs)
        return
    m = masks[0] if len(masks) == 1 else ctx.emit("And", masks)[0]
    _where(ctx, node, m, dy)


def _hsig_pre(x: np.ndarray, a: A) -> np.ndarray:
    return x * np.asarray(a["alpha"], x.dtype) + np.asarray(a["beta"], x.dtype)


def _hsig_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    x, dy = xs
    t = _hsig_pre(x, a)
    return (np.where((t > 0) & (t < 1), dy * np.asarray(a["alpha"], dy.dtype), 0).astype(dy.dtype),)


def _hsig_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, dy = node.inputs
    alpha = _scalar(ctx, node, node.attrs["alpha"], "hsig_alpha")
    (ax,) = ctx.emit("Mul", [x, alpha])
    (t,) = ctx.emit("Add", [ax, _scalar(ctx, node, node.attrs["beta"], "hsig_beta")])
    (lo,) = ctx.emit("Greater", [t, _scalar(ctx, node, 0.0, "grad_zero")])
    (hi,) = ctx.emit("Less", [t, _scalar(ctx, node, 1.0, "grad_one")])
    (m,) = ctx.emit("And", [lo, hi])
    (v,) = ctx.emit("Mul", [dy, alpha])
    _where(ctx, node, m, v)


def _hswish_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    x, dy = xs
    three, half = np.asarray(3, x.dtype), np.asarray(0.5, x.dtype)
    mid = dy * (x / three + half)
    return (np.where(x <= -three, 0, np.where(x < three, mid, dy)).astype(dy.dtype),)


def _hswish_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, dy = node.inputs
    three = _scalar(ctx, node, 3.0, "hswish_three")
    (d,) = ctx.emit("Div", [x, three])
    (s,) = ctx.emit("Add", [d, _scalar(ctx, node, 0.5, "hswish_half")])
    (mid,) = ctx.emit("Mul", [dy, s])
    (lt,) = ctx.emit("Less", [x, three])
    (inner,) = ctx.emit("Where", [lt, mid, dy])
    (le,) = ctx.emit("LessOrEqual", [x, _scalar(ctx, node, -3.0, "hswish_minus_three")])
    ctx.emit("Where", [le, _scalar(ctx, node, 0.0, "grad_zero"), inner], outputs=node.outputs)


def _abs_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, dy = node.inputs
    (s,) = ctx.emit("Sign", [x])
    ctx.emit("Mul", [dy, s], outputs=node.outputs)


def _pair_samples(attrs: Mapping[str, Any] | None = None) -> tuple[Sample, ...]:
    attrs = attrs or {}
    return (Sample((f32(2, 3, 4, 5), f32(2, 3, 4, 5)), attrs), Sample((f32(7,), f32(7,)), attrs))


_ELEMENTWISE: list[tuple[str, str, tuple[AttrSpec, ...], Callable[..., Any], Any, int, tuple[Sample, ...]]] = [
    ("relu_grad", "dy where x > 0 else 0 (x may be relu's input or its output).", (),
     lambda xs, a: (np.where(xs[0] > 0, xs[1], 0).astype(xs[1].dtype),), _relu_export, 1, _pair_samples()),
    ("leakyrelu_grad", "dy where x > 0 else alpha * dy.", (AttrSpec("alpha", "float", 0.01),),
     lambda xs, a: (np.where(xs[0] > 0, xs[1], xs[1] * np.asarray(a["alpha"], xs[1].dtype)).astype(xs[1].dtype),),
     _leaky_export, 2, _pair_samples({"alpha": 0.1})),
    ("clip_grad", "dy where min <= x <= max (a missing bound always holds) else 0 (torch.clamp's backward).",
     (AttrSpec("min", "float", None), AttrSpec("max", "float", None)), _clip_ref, _clip_export, 2,
     (Sample((f32(4, 5), f32(4, 5)), {"min": 0.0, "max": 0.5}), Sample((f32(4, 5), f32(4, 5)), {"min": -0.5}),
      Sample((f32(4, 5), f32(4, 5)), {"max": 0.25}), Sample((f32(4, 5), f32(4, 5))))),
    ("hardsigmoid_grad", "alpha * dy where 0 < alpha * x + beta < 1 else 0.",
     (AttrSpec("alpha", "float", 0.2), AttrSpec("beta", "float", 0.5)), _hsig_ref, _hsig_export, 4,
     (*_pair_samples(), Sample((f32(3, 16), f32(3, 16)), {"alpha": 1 / 6, "beta": 0.5}))),
    ("hardswish_grad", "torch's hardswish backward: 0 where x <= -3, dy * (x / 3 + 1/2) where -3 < x < 3, "
     "dy where x >= 3 (what torch.autograd gives through F.hardswish at the kinks).", (),
     _hswish_ref, _hswish_export, 4,
     (Sample((f32(8, 250), f32(8, 250)), note="some |x| > 3"), *_pair_samples())),
    ("abs_grad", "dy * sign(x) (0 where x == 0).", (),
     lambda xs, a: ((xs[1] * np.sign(xs[0])).astype(xs[1].dtype),), _abs_export, 1, _pair_samples()),
]

for _name, _doc, _attrs, _ref, _export, _k, _samples in _ELEMENTWISE:
    register(OpDef(
        name=_name, family="grad", doc=_doc, inputs=("x", "dy"), attrs=_attrs,
        infer=_pair_infer(_name), reference=_ref, flops=flops_per_output(_k),
        onnx_export=_export, onnx_import_note=NOT_IMPORTED, samples=_samples,
    ))

# ----------------------------------------------------------------------------- gather


def _gather_axis(op: str, a: A) -> tuple[tuple[int, ...], int]:
    x_shape = _shape_attr(op, "x_shape", a["x_shape"], rank=None)
    rank = len(x_shape)
    if rank == 0 or not -rank <= a["axis"] < rank:
        raise ShapeError(f"{op}: axis {a['axis']} out of range for x_shape {x_shape}")
    return x_shape, a["axis"] % rank


def _gather_grad_infer(ins: Sequence[TensorType], a: A) -> Types:
    idx, dy = ins
    if idx.dtype not in ("int64", "int32"):
        raise ShapeError(f"gather_grad: indices must be int64 or int32, got {idx}")
    if dy.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"gather_grad: expects a floating-point dy, got {dy}")
    x_shape, axis = _gather_axis("gather_grad", a)
    want = x_shape[:axis] + idx.shape + x_shape[axis + 1:]
    if dy.shape != want:
        raise ShapeError(f"gather_grad: gather of x_shape {x_shape} at indices {idx} along axis {axis} gives "
                         f"{list(want)}, but dy is {dy}")
    return (make_type(x_shape, dy.dtype),)


def _gather_grad_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    idx, dy = xs
    x_shape, axis = _gather_axis("gather_grad", a)
    k = idx.ndim
    out = np.zeros(x_shape)
    moved = np.moveaxis(out, axis, 0)  # a view: scatter into it
    wrapped = np.where(idx < 0, idx.astype(np.int64) + x_shape[axis], idx)
    upd = np.moveaxis(dy, list(range(axis, axis + k)), list(range(k)))
    np.add.at(moved, wrapped, upd.astype(np.float64))
    return (out.astype(dy.dtype),)


def _gather_grad_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    # ScatterND(add) into zeros laid out [x_shape[axis], rest...], then transpose back.
    a = node.attrs
    (it, dt), (idx, dy) = node.in_types, node.inputs
    x_shape, axis = _gather_axis("gather_grad", a)
    if ctx.opset < 16:
        raise ShapeError(f"gather_grad: ScatterND with reduction needs ONNX opset >= 16, not {ctx.opset}")
    k, rank = it.rank, len(x_shape)
    if it.dtype != "int64":
        (idx,) = ctx.emit("Cast", [idx], {"to": 7})
    (neg,) = ctx.emit("Less", [idx, ctx.const(np.array(0, np.int64), "gather_grad_zero")])
    (shifted,) = ctx.emit("Add", [idx, ctx.const(np.array(x_shape[axis], np.int64), "gather_grad_dim")])
    (idx,) = ctx.emit("Where", [neg, shifted, idx])
    (idx,) = ctx.emit("Unsqueeze", [idx, ctx.const(np.array([-1], np.int64), "gather_grad_axes")])
    if axis and k:
        perm = [*range(axis, axis + k), *range(axis), *range(axis + k, dt.rank)]
        (dy,) = ctx.emit("Transpose", [dy], {"perm": perm})
    moved = (x_shape[axis], *x_shape[:axis], *x_shape[axis + 1:])
    (zeros,) = ctx.emit("ConstantOfShape", [ctx.const(np.array(moved, np.int64), "gather_grad_shape")],
                        {"value": np.zeros(1, np_dtype(dt.dtype))})
    if axis == 0:
        ctx.emit("ScatterND", [zeros, idx, dy], {"reduction": "add"}, outputs=node.outputs)
        return
    (s,) = ctx.emit("ScatterND", [zeros, idx, dy], {"reduction": "add"})
    perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
    ctx.emit("Transpose", [s], {"perm": perm}, outputs=node.outputs)


def _canon_gather_axis(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    rank = len(a["x_shape"])
    if -rank <= a["axis"] < 0:
        a["axis"] += rank
    return a


register(OpDef(
    name="gather_grad", family="grad",
    canonicalize=_canon_gather_axis,
    doc="Gradient of gather(x, indices, axis) with respect to x: zeros of x_shape with dy "
        "scatter-added along axis (repeated indices add; negative indices count from the end).",
    inputs=("indices", "dy"),
    attrs=(AttrSpec("axis", "int", 0), AttrSpec("x_shape", "ints", REQUIRED, "shape of gather's data x")),
    infer=_gather_grad_infer, reference=_gather_grad_ref,
    flops=lambda ins, outs, a: ins[1].numel,
    onnx_export=_gather_grad_export, onnx_import_note=NOT_IMPORTED,
    # indices index x_shape[axis], which slot_role cannot see: samples name the range
    input_roles=("index", "any"),
    samples=(
        Sample((i64(12), f32(12, 4)), {"x_shape": (5, 4)}, roles=("index:5", "any"),
               note="repeated indices"),
        Sample((i64(2, 3), f32(2, 2, 3, 3)), {"axis": 1, "x_shape": (2, 4, 3)},
               roles=("index:4", "any"), note="2-D indices, inner axis"),
        Sample((make_type((6,), "int32"), f32(4, 6)), {"axis": -1, "x_shape": (4, 3)},
               roles=("index:3", "any"), note="int32 indices, last axis"),
        Sample((i64(), f32(2, 3)), {"axis": 1, "x_shape": (2, 7, 3)}, roles=("index:7", "any"),
               note="scalar index"),
        Sample((i64(3, 2), f32(3, 2, 5)), {"x_shape": (5, 5)}, roles=("any", "any"),
               note="negative indices wrap (random in [-4, 5))"),
    ),
))

__all__ = ["conv2d_grad_w_ref", "conv2d_grad_x_ref", "conv_grad_geometry"]
