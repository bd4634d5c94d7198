"""Pooling family: ``maxpool2d``, ``avgpool2d`` (NCHW, with a fused activation as in TASO) and
``global_avgpool``.

Window geometry follows ONNX: ``pads`` is SAME (=SAME_UPPER), VALID or explicit
``(top, left, bottom, right)``; with ``ceil_mode`` the output size rounds up, but the last
window must start inside the input or the top/left padding.  Padding never wins a max.
``avgpool2d`` divides by the number of window cells inside the input
(``count_include_pad=False``) or inside the padded input (``True``; cells that only exist
because of ``ceil_mode`` are never counted), as onnxruntime and PyTorch do.

FLOPs: one per window cell visited (``N*C*Ho*Wo*kh*kw``), plus one per output for the average's
division and one per output for a fused activation; ``global_avgpool`` one per input element
plus one per output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.common import (
    ACTS,
    apply_act,
    canon_window_pads,
    check_pair,
    conv_out_hw,
    emit_with_act,
    import_pads,
    onnx_pads,
    resolve_pads,
    sliding_windows,
)
from graphsub.ops.registry import (
    AttrSpec,
    CostFn,
    ExportFn,
    ExportNode,
    Imported,
    ImportFn,
    InferFn,
    OnnxExportCtx,
    OnnxImportCtx,
    OpDef,
    Sample,
    Unsupported,
    f32,
    register,
    simple_export,
    simple_import,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType


def _geometry(
    op: str, x: TensorType, a: Mapping[str, Any]
) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """Validate a pool's input and attributes; returns (explicit pads, output (Ho, Wo))."""
    if x.rank != 4:
        raise ShapeError(f"{op}: expects x[N,C,H,W], got {x}")
    if op == "avgpool2d" and x.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: expects a floating-point input, got {x}")
    check_pair(op, "kernel", a["kernel"])
    check_pair(op, "strides", a["strides"])
    pads = resolve_pads(a["pads"], x.shape[2:], a["kernel"], a["strides"])
    try:
        out_hw = conv_out_hw(x.shape[2:], a["kernel"], a["strides"], pads,
                             ceil_mode=a["ceil_mode"])
    except ShapeError as e:
        raise ShapeError(f"{op}: x {x}: {e}") from None
    return pads, out_hw


def _infer(op: str) -> InferFn:
    def infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
        _, (ho, wo) = _geometry(op, ins[0], a)
        return (ins[0].with_shape((*ins[0].shape[:2], ho, wo)),)

    return infer


def _lowest(dtype: np.dtype[Any]) -> Any:
    """The value padding takes in a max: -inf for floats, the minimum for integers."""
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _maxpool_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    pads, out_hw = _geometry("maxpool2d", TensorType(x.shape, "float32"), a)
    win = sliding_windows(x, a["kernel"], a["strides"], pads, out_hw, fill=_lowest(x.dtype))
    return (apply_act(win.max(axis=(4, 5)), a["act"]),)


def _cells(size: int, k: int, s: int, before: int, after: int, out: int,
           include_pad: bool) -> np.ndarray:
    """Number of cells each window along one axis covers inside the (padded) input."""
    start = np.arange(out) * s - before
    if include_pad:
        return np.minimum(start + k, size + after) - start
    return np.minimum(start + k, size) - np.maximum(start, 0)


def _avgpool_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    (t, left, b, r), (ho, wo) = _geometry("avgpool2d", TensorType(x.shape), a)
    (kh, kw), (sh, sw) = a["kernel"], a["strides"]
    win = sliding_windows(x, (kh, kw), (sh, sw), (t, left, b, r), (ho, wo))
    total = win.sum(axis=(4, 5), dtype=np.float64)
    inc = a["count_include_pad"]
    cnt = np.outer(_cells(x.shape[2], kh, sh, t, b, ho, inc),
                   _cells(x.shape[3], kw, sw, left, r, wo, inc))
    return (apply_act((total / cnt).astype(x.dtype), a["act"]),)


def _pool_flops(avg: bool) -> CostFn:
    def flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
        kh, kw = a["kernel"]
        n_out = outs[0].numel
        return n_out * kh * kw + n_out * (int(avg) + int(a["act"] != "none"))

    return flops


def _pool_import(op: str) -> ImportFn:
    def fn(ctx: OnnxImportCtx) -> Imported:
        if ctx.input_type(0).rank != 4:
            raise Unsupported(f"{ctx.op_type} on a rank-{ctx.input_type(0).rank} input "
                              "(only 2-D pooling is modelled)")
        kernel = [int(k) for k in ctx.attr("kernel_shape")]
        if len(kernel) != 2:
            raise Unsupported(f"{ctx.op_type} kernel_shape {kernel} (only 2-D is modelled)")
        dil = ctx.attr("dilations", None)
        if dil is not None and any(int(d) != 1 for d in dil):
            raise Unsupported(f"{ctx.op_type} with dilations {list(dil)}")
        strides = ctx.attr("strides", None)
        strides = (1, 1) if strides is None else tuple(int(s) for s in strides)
        if len(strides) != 2:
            raise Unsupported(f"{ctx.op_type} strides {strides} (only 2-D is modelled)")
        attrs: dict[str, Any] = {
            "kernel": tuple(kernel),
            "strides": strides,
            "pads": import_pads(ctx, kernel, strides),
            "ceil_mode": bool(ctx.attr("ceil_mode", 0)),
        }
        if op == "maxpool2d":
            if int(ctx.attr("storage_order", 0)) != 0:
                raise Unsupported("MaxPool with storage_order=1")
            if ctx.num_outputs > 1 and ctx.output_used(1):
                raise Unsupported("MaxPool Indices output is used")
        else:
            attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
        return Imported(op, attrs, (0,))

    return fn


def _pool_export(op_type: str) -> ExportFn:
    def fn(ctx: OnnxExportCtx, node: ExportNode) -> None:
        a = node.attrs
        pads = resolve_pads(a["pads"], node.in_types[0].shape[2:], a["kernel"], a["strides"])
        attrs: dict[str, Any] = {
            "kernel_shape": list(a["kernel"]),
            "strides": list(a["strides"]),
            "pads": onnx_pads(pads),
        }
        if a["ceil_mode"]:
            if ctx.opset < 10:
                raise ShapeError(f"{node.op}: ceil_mode needs ONNX opset >= 10, not {ctx.opset}")
            attrs["ceil_mode"] = 1
        if a.get("count_include_pad"):
            attrs["count_include_pad"] = 1
        emit_with_act(ctx, op_type, node.inputs, attrs, a["act"], node.outputs)

    return fn


_COMMON_ATTRS = (
    AttrSpec("kernel", "ints", doc="(kh, kw)"),
    AttrSpec("strides", "ints", (1, 1), "(stride_h, stride_w)"),
    AttrSpec("pads", "pads", (0, 0, 0, 0), "SAME (=SAME_UPPER), VALID or (t, l, b, r)"),
    AttrSpec("act", "str", "none", "fused activation", choices=ACTS),
    AttrSpec("ceil_mode", "bool", False, "round the output size up (ONNX ceil_mode)"),
)

register(OpDef(
    name="maxpool2d", family="pool",
    canonicalize=canon_window_pads("attr"),
    doc="2-D max pooling over NCHW windows, then the fused activation.",
    inputs=("x",), attrs=_COMMON_ATTRS,
    infer=_infer("maxpool2d"), reference=_maxpool_ref, flops=_pool_flops(avg=False),
    onnx_import={"MaxPool": _pool_import("maxpool2d")}, onnx_export=_pool_export("MaxPool"),
    samples=(
        Sample((f32(1, 3, 9, 9),), {"kernel": (3, 3), "strides": (2, 2), "pads": "SAME"}),
        Sample((f32(2, 2, 8, 7),), {"kernel": (2, 3), "strides": (2, 2), "pads": (1, 0, 0, 1),
                                    "act": "relu"}, note="asymmetric pads"),
        Sample((f32(1, 2, 7, 8),), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                    "ceil_mode": True, "act": "tanh"}, note="ceil_mode"),
    ),
))

register(OpDef(
    name="avgpool2d", family="pool",
    canonicalize=canon_window_pads("attr"),
    doc="2-D average pooling over NCHW windows, then the fused activation; the divisor counts "
        "padding cells only if count_include_pad.",
    inputs=("x",),
    attrs=(*_COMMON_ATTRS,
           AttrSpec("count_include_pad", "bool", False, "count padding cells in the divisor")),
    infer=_infer("avgpool2d"), reference=_avgpool_ref, flops=_pool_flops(avg=True),
    onnx_import={"AveragePool": _pool_import("avgpool2d")},
    onnx_export=_pool_export("AveragePool"),
    samples=(
        Sample((f32(1, 3, 9, 9),), {"kernel": (3, 3), "strides": (2, 2), "pads": "SAME"}),
        Sample((f32(2, 2, 8, 7),), {"kernel": (3, 2), "pads": (1, 1, 2, 0),
                                    "count_include_pad": True, "act": "sigmoid"}),
        Sample((f32(1, 2, 7, 8),), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                    "ceil_mode": True}, note="ceil_mode"),
        Sample((f32(1, 2, 7, 8),), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 0, 1, 0),
                                    "ceil_mode": True, "count_include_pad": True,
                                    "act": "relu"}, note="ceil_mode + count_include_pad"),
    ),
))

# ----------------------------------------------------------------------------- global


def _global_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    x = ins[0]
    if x.rank < 3 or x.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"global_avgpool: expects a floating-point x[N,C,spatial...], got {x}")
    return (x.with_shape((*x.shape[:2], *(1 for _ in x.shape[2:]))),)


def _global_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    axes = tuple(range(2, x.ndim))
    return (x.mean(axis=axes, keepdims=True, dtype=np.float64).astype(x.dtype),)


def _global_flops(ins: Sequence[TensorType], outs: Sequence[TensorType],
                  a: Mapping[str, Any]) -> int:
    return ins[0].numel + outs[0].numel


register(OpDef(
    name="global_avgpool", family="pool",
    doc="Mean over all spatial axes: x[N,C,H,W] -> [N,C,1,1].",
    inputs=("x",), attrs=(), infer=_global_infer, reference=_global_ref, flops=_global_flops,
    onnx_import={"GlobalAveragePool": simple_import("global_avgpool")},
    onnx_export=simple_export("GlobalAveragePool"),
    samples=(Sample((f32(2, 3, 5, 7),)), Sample((f32(1, 8, 1, 1),))),
))

__all__: list[str] = []
