"""Gradient kernels of the pools (family ``grad``; see :mod:`graphsub.ops.grad`).

* ``maxpool2d_grad(x, dy)`` -- d maxpool2d / d x: each window's ``dy`` goes to the *first*
  maximal element of the window in row-major order (PyTorch's rule, which matters after a relu
  where whole windows are zeros); overlapping windows add; padding never receives gradient.
  Exported as ``MaxPool`` with its ``Indices`` output (onnxruntime also keeps the first maximum:
  checked in ``tests/ops/test_grad.py`` on inputs full of ties) and ``ScatterElements`` with
  ``reduction="add"`` on the flattened input.
* ``avgpool2d_grad(dy)`` -- d avgpool2d / d x, shaped ``x_shape``: every window spreads
  ``dy / count`` over its cells, with avgpool2d's ``count`` (``count_include_pad``, ceil-mode
  cells never counted).  Exported as ``Div`` by the constant count map, then a ``ConvTranspose``
  of one channel with a kernel of ones over the ``[N*C, 1, Ho, Wo]`` view.

The attributes mean what they mean for the forward pools (no fused activation).
FLOPs: one per window cell visited plus one per output-gradient element.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.common import check_pair, conv_out_hw, onnx_pads, resolve_pads, sliding_windows
from graphsub.ops.grad import NOT_IMPORTED
from graphsub.ops.registry import (
    REQUIRED,
    AttrSpec,
    ExportNode,
    OnnxExportCtx,
    OpDef,
    Sample,
    f32,
    register,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType, np_dtype

A = Mapping[str, Any]
Types = tuple[TensorType, ...]
Pads = tuple[int, int, int, int]


def pool_grad_geometry(op: str, x_shape: tuple[int, ...], dy: TensorType, a: A) -> tuple[Pads, tuple[int, int]]:
    """Check that the forward pool of an input shaped ``x_shape`` gives dy's shape; returns
    (explicit pads, (Ho, Wo))."""
    if len(x_shape) != 4 or dy.rank != 4 or any(d < 0 for d in x_shape):
        raise ShapeError(f"{op}: expects x[N,C,H,W] and dy[N,C,Ho,Wo], got x {x_shape}, dy {dy}")
    if dy.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: expects a floating-point dy, got {dy}")
    check_pair(op, "kernel", a["kernel"])
    check_pair(op, "strides", a["strides"])
    pads = resolve_pads(a["pads"], x_shape[2:], a["kernel"], a["strides"])
    try:
        out_hw = conv_out_hw(x_shape[2:], a["kernel"], a["strides"], pads, ceil_mode=a["ceil_mode"])
    except ShapeError as e:
        raise ShapeError(f"{op}: x {x_shape}: {e}") from None
    if dy.shape != (*x_shape[:2], *out_hw):
        raise ShapeError(f"{op}: pooling x {x_shape} gives [{x_shape[0]},{x_shape[1]},{out_hw[0]},{out_hw[1]}], "
                         f"but the output gradient is {dy}")
    return pads, out_hw


# ----------------------------------------------------------------------------- maxpool2d_grad


def _max_infer(ins: Sequence[TensorType], a: A) -> Types:
    x, dy = ins
    if x.dtype != dy.dtype:
        raise ShapeError(f"maxpool2d_grad: dtype mismatch between x {x} and dy {dy}")
    pool_grad_geometry("maxpool2d_grad", x.shape, dy, a)
    return (x,)


def maxpool2d_grad_ref(x: np.ndarray, dy: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
                       pads: Sequence[int], out_hw: Sequence[int]) -> np.ndarray:
    """numpy d maxpool2d / d x (explicit pads): dy to each window's first maximum (float64 sums)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ho, wo) = kernel, strides, out_hw
    win = sliding_windows(x, kernel, strides, pads, out_hw, fill=-np.inf)
    first = win.reshape(n, c, ho, wo, kh * kw).argmax(axis=-1)  # ties: the first in row-major order
    rows = np.arange(ho)[:, None] * sh + first // kw - pads[0]
    cols = np.arange(wo)[None, :] * sw + first % kw - pads[1]
    inside = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)  # a window all padding: dropped
    plane = np.broadcast_to(np.arange(n * c).reshape(n, c, 1, 1), rows.shape)
    dx = np.zeros((n * c, h * w))
    np.add.at(dx, (plane[inside], (rows * w + cols)[inside]), dy[inside].astype(np.float64))
    return dx.reshape(x.shape).astype(dy.dtype)


def _max_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    x, dy = xs
    pads, out_hw = pool_grad_geometry("maxpool2d_grad", x.shape, TensorType(dy.shape, "float32"), a)
    return (maxpool2d_grad_ref(x, dy, a["kernel"], a["strides"], pads, out_hw),)


def _window_attrs(a: A, pads: Sequence[int]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"kernel_shape": list(a["kernel"]), "strides": list(a["strides"]),
                             "pads": onnx_pads(pads)}
    if a["ceil_mode"]:
        attrs["ceil_mode"] = 1
    return attrs


def _max_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    a, (x, dy) = node.attrs, node.in_types
    if ctx.opset < 16:
        raise ShapeError(f"maxpool2d_grad: ScatterElements with reduction needs ONNX opset >= 16, not {ctx.opset}")
    pads = resolve_pads(a["pads"], x.shape[2:], a["kernel"], a["strides"])
    _, idx = ctx.emit("MaxPool", [node.inputs[0]], _window_attrs(a, pads), num_outputs=2)
    flat = ctx.const(np.array([-1], np.int64), "maxpool_grad_flat")
    (idx,) = ctx.emit("Reshape", [idx, flat])
    (upd,) = ctx.emit("Reshape", [node.inputs[1], flat])
    (zeros,) = ctx.emit("ConstantOfShape", [ctx.const(np.array([x.numel], np.int64), "maxpool_grad_numel")],
                        {"value": np.zeros(1, np_dtype(dy.dtype))})
    (dx,) = ctx.emit("ScatterElements", [zeros, idx, upd], {"axis": 0, "reduction": "add"})
    ctx.emit("Reshape", [dx, ctx.const(np.array(x.shape, np.int64), "maxpool_grad_shape")], outputs=node.outputs)


# ----------------------------------------------------------------------------- avgpool2d_grad


def window_counts(size: int, k: int, s: int, before: int, after: int, out: int, include_pad: bool) -> np.ndarray:
    """avgpool2d's divisor along one axis: cells of each window inside the (padded) input."""
    start = np.arange(out) * s - before
    if include_pad:
        return np.minimum(start + k, size + after) - start
    return np.minimum(start + k, size) - np.maximum(start, 0)


def _count_map(x_shape: Sequence[int], a: A, pads: Sequence[int], out_hw: Sequence[int]) -> np.ndarray:
    (kh, kw), (sh, sw), inc = a["kernel"], a["strides"], a["count_include_pad"]
    return np.outer(window_counts(x_shape[2], kh, sh, pads[0], pads[2], out_hw[0], inc),
                    window_counts(x_shape[3], kw, sw, pads[1], pads[3], out_hw[1], inc))


def _avg_infer(ins: Sequence[TensorType], a: A) -> Types:
    x_shape = tuple(a["x_shape"])
    pool_grad_geometry("avgpool2d_grad", x_shape, ins[0], a)
    return (TensorType(x_shape, ins[0].dtype),)


def avgpool2d_grad_ref(dy: np.ndarray, x_shape: Sequence[int], a: A) -> np.ndarray:
    """numpy d avgpool2d / d x: each window adds dy / count to its cells (float64 sums)."""
    pads, (ho, wo) = pool_grad_geometry("avgpool2d_grad", tuple(x_shape), TensorType(dy.shape), a)
    n, c, h, w = x_shape
    (kh, kw), (sh, sw) = a["kernel"], a["strides"]
    q = dy.astype(np.float64) / _count_map(x_shape, a, pads, (ho, wo))
    hp = max(h + pads[0] + pads[2], (ho - 1) * sh + kh)  # ceil mode: windows past the padding
    wp = max(w + pads[1] + pads[3], (wo - 1) * sw + kw)
    dxp = np.zeros((n, c, hp, wp))
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i: i + (ho - 1) * sh + 1: sh, j: j + (wo - 1) * sw + 1: sw] += q
    return dxp[:, :, pads[0]: pads[0] + h, pads[1]: pads[1] + w].astype(dy.dtype)


def _avg_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    a, dy = node.attrs, node.in_types[0]
    x_shape = tuple(a["x_shape"])
    n, c, h, w = x_shape
    pads, (ho, wo) = pool_grad_geometry("avgpool2d_grad", x_shape, dy, a)
    cnt = _count_map(x_shape, a, pads, (ho, wo)).astype(np_dtype(dy.dtype)).reshape(1, 1, ho, wo)
    (q,) = ctx.emit("Div", [node.inputs[0], ctx.const(cnt, "avgpool_grad_count")])
    (q,) = ctx.emit("Reshape", [q, ctx.const(np.array([n * c, 1, ho, wo], np.int64), "avgpool_grad_planes")])
    # ConvTranspose output = s*(Ho-1) + k + output_padding - pad_begin - pad_end must be H: the end
    # pad drops ceil-mode cells past the input; output_padding adds back rows no window covered.
    end, extra = [], []
    for i, size, out in ((0, h, ho), (1, w, wo)):
        e = a["strides"][i] * (out - 1) + a["kernel"][i] - pads[i] - size
        end.append(max(e, 0))
        extra.append(max(-e, 0))
    attrs: dict[str, Any] = {"kernel_shape": list(a["kernel"]), "strides": list(a["strides"]),
                             "pads": [pads[0], pads[1], *end]}
    if any(extra):
        attrs["output_padding"] = extra
    ones = ctx.const(np.ones((1, 1, *a["kernel"]), np_dtype(dy.dtype)), "avgpool_grad_ones")
    (dx,) = ctx.emit("ConvTranspose", [q, ones], attrs)
    ctx.emit("Reshape", [dx, ctx.const(np.array(x_shape, np.int64), "avgpool_grad_shape")], outputs=node.outputs)


def _pool_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: A) -> int:
    dy = ins[-1]
    return dy.numel * (a["kernel"][0] * a["kernel"][1] + 1)


def _canon_pads(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    if isinstance(a.get("pads"), str):
        hw = a["x_shape"][2:4] if "x_shape" in a else ins[0].shape[2:4]
        a["pads"] = resolve_pads(a["pads"], hw, a["kernel"], a["strides"])
    return a


_POOL_ATTRS = (
    AttrSpec("kernel", "ints", doc="(kh, kw)"),
    AttrSpec("strides", "ints", (1, 1), "(stride_h, stride_w)"),
    AttrSpec("pads", "pads", (0, 0, 0, 0), "the forward pool's pads: SAME, VALID or (t, l, b, r)"),
    AttrSpec("ceil_mode", "bool", False, "the forward pool rounded its output size up"),
)

register(OpDef(
    name="maxpool2d_grad", family="grad", canonicalize=_canon_pads,
    doc="Gradient of maxpool2d(x) with respect to x: each window's dy goes to the first maximal "
        "element of the window (row-major); overlapping windows add; padding gets nothing.",
    inputs=("x", "dy"), attrs=_POOL_ATTRS,
    infer=_max_infer, reference=_max_ref, flops=_pool_flops,
    onnx_export=_max_export, onnx_import_note=NOT_IMPORTED,
    samples=(
        Sample((f32(1, 3, 9, 9), f32(1, 3, 5, 5)), {"kernel": (3, 3), "strides": (2, 2), "pads": "SAME"},
               note="overlapping windows"),
        Sample((f32(2, 2, 8, 7), f32(2, 2, 4, 3)), {"kernel": (2, 3), "strides": (2, 2), "pads": (1, 0, 0, 1)},
               note="asymmetric pads"),
        Sample((f32(1, 2, 7, 8), f32(1, 2, 4, 5)), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                                    "ceil_mode": True}, note="ceil_mode"),
        Sample((f32(1, 2, 6, 6), f32(1, 2, 3, 3)), {"kernel": (2, 2), "strides": (2, 2)},
               note="non-overlapping"),
    ),
))

register(OpDef(
    name="avgpool2d_grad", family="grad", canonicalize=_canon_pads,
    doc="Gradient of avgpool2d(x) with respect to x (shaped x_shape): each window adds dy / count "
        "to its cells, with avgpool2d's count (count_include_pad; ceil-mode cells never count).",
    inputs=("dy",),
    attrs=(*_POOL_ATTRS,
           AttrSpec("count_include_pad", "bool", False, "the forward pool counted padding cells"),
           AttrSpec("x_shape", "ints", REQUIRED, "shape of the forward input x")),
    infer=_avg_infer, reference=lambda xs, a: (avgpool2d_grad_ref(xs[0], a["x_shape"], a),),
    flops=_pool_flops, onnx_export=_avg_export, onnx_import_note=NOT_IMPORTED,
    samples=(
        Sample((f32(1, 3, 5, 5),), {"kernel": (3, 3), "strides": (2, 2), "pads": "SAME",
                                    "x_shape": (1, 3, 9, 9)}),
        Sample((f32(2, 2, 9, 7),), {"kernel": (3, 2), "pads": (1, 1, 2, 0), "count_include_pad": True,
                                    "x_shape": (2, 2, 8, 7)}, note="count_include_pad"),
        Sample((f32(1, 2, 4, 5),), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                    "ceil_mode": True, "x_shape": (1, 2, 7, 8)}, note="ceil_mode"),
        Sample((f32(1, 2, 4, 4),), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 0, 1, 0),
                                    "ceil_mode": True, "count_include_pad": True, "x_shape": (1, 2, 7, 8)},
               note="ceil_mode + count_include_pad"),
        Sample((f32(1, 2, 2, 3),), {"kernel": (2, 2), "strides": (3, 3), "x_shape": (1, 2, 7, 9)},
               note="stride > kernel: uncovered rows/cols"),
    ),
))

__all__ = ["avgpool2d_grad_ref", "maxpool2d_grad_ref", "pool_grad_geometry", "window_counts"]
