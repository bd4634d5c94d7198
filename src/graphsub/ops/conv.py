"""Convolution family: ``conv2d`` and the weight transforms ``enlarge`` and ``merge_gconv``.

* ``conv2d(x[N,C,H,W], w[O, C/G, kh, kw] [, b[O]])`` -- 2-D cross-correlation (ONNX ``Conv``)
  followed by an optional fused activation.  As in TASO, the group count is *not* an
  attribute: ``G = C / w.shape[1]``, so rewriting the weight (``merge_gconv``) changes it.
* ``enlarge(w)`` -- zero-pads a kernel symmetrically to a larger odd/even-compatible size
  (TASO's ``Enlarge``), so a 1x1 conv with pads 0 equals a 3x3 conv with pads 1.
* ``merge_gconv(w)`` -- rewrites a grouped-conv weight so that ``count`` consecutive groups
  become one group (TASO's ``MERGE_GCONV``); the extra input channels get zero weights.

The weight transforms are ``weight_op``: they only ever see weights and are folded, so they
cost nothing at run time.

FLOPs of ``conv2d``: ``2*N*O*Ho*Wo*(C/G)*kh*kw`` plus one per output for the bias and one per
output for a fused activation.
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
    ExportNode,
    Imported,
    OnnxExportCtx,
    OnnxImportCtx,
    OpDef,
    Sample,
    Unsupported,
    f32,
    register,
    zero_cost,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType, np_dtype

# ----------------------------------------------------------------------------- conv2d


def _conv_geometry(
    ins: Sequence[TensorType], a: Mapping[str, Any]
) -> tuple[int, tuple[int, int, int, int], tuple[int, int]]:
    """Validate conv2d inputs; returns (groups, explicit pads, output (Ho, Wo))."""
    x, w = ins[0], ins[1]
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"conv2d: expects x[N,C,H,W] and w[O,C/groups,kh,kw], got x {x}, w {w}")
    if x.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"conv2d: expects a floating-point input, got {x}")
    for t in ins[1:]:
        if t.dtype != x.dtype:
            raise ShapeError(f"conv2d: dtype mismatch between x {x} and {t}")
    check_pair("conv2d", "strides", a["strides"])
    check_pair("conv2d", "dilations", a["dilations"])
    c, (o, cg, kh, kw) = x.shape[1], w.shape
    if cg == 0 or c % cg:
        raise ShapeError(
            f"conv2d: input channels {c} (x {x}) are not a multiple of the weight's "
            f"channels-per-group {cg} (w {w})"
        )
    groups = c // cg
    if o % groups:
        raise ShapeError(f"conv2d: {o} output channels (w {w}) not divisible by groups {groups}")
    if len(ins) > 2 and ins[2].shape != (o,):
        raise ShapeError(f"conv2d: bias must have shape ({o},), got {ins[2]}")
    hw = x.shape[2:]
    pads = resolve_pads(a["pads"], hw, (kh, kw), a["strides"], a["dilations"])
    try:
        out_hw = conv_out_hw(hw, (kh, kw), a["strides"], pads, a["dilations"])
    except ShapeError as e:
        raise ShapeError(f"conv2d: x {x}, w {w}: {e}") from None
    return groups, pads, out_hw


def _conv_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    _, _, (ho, wo) = _conv_geometry(ins, a)
    return (TensorType((ins[0].shape[0], ins[1].shape[0], ho, wo), ins[0].dtype),)


def conv2d_ref(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: Sequence[int] = (1, 1),
    pads: Any = (0, 0, 0, 0),
    dilations: Sequence[int] = (1, 1),
    act: str = "none",
) -> np.ndarray:
    """numpy conv2d (groups = C / w.shape[1]); one batched matmul over all groups."""
    ins = [TensorType(x.shape, "float32"), TensorType(w.shape, "float32")]
    groups, p, (ho, wo) = _conv_geometry(
        ins, {"strides": strides, "dilations": dilations, "pads": pads}
    )
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    win = sliding_windows(x, (kh, kw), strides, p, (ho, wo), dilations)  # N,C,Ho,Wo,kh,kw
    cols = win.reshape(n, groups, cg, ho, wo, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
    cols = cols.reshape(n, groups, ho * wo, cg * kh * kw)
    wm = w.reshape(groups, o // groups, cg * kh * kw).transpose(0, 2, 1)
    y = np.matmul(cols, wm)  # N, G, Ho*Wo, O/G
    y = y.transpose(0, 1, 3, 2).reshape(n, o, ho, wo)
    if b is not None:
        y = y + b.reshape(1, o, 1, 1)
    return apply_act(y.astype(x.dtype, copy=False), act)


def _conv_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    b = xs[2] if len(xs) > 2 else None
    return (conv2d_ref(xs[0], xs[1], b, a["strides"], a["pads"], a["dilations"], a["act"]),)


def _conv_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    _, cg, kh, kw = ins[1].shape
    n_out = outs[0].numel
    extra = (len(ins) > 2) + (a["act"] != "none")
    return 2 * n_out * cg * kh * kw + extra * n_out


def _pair_attr(ctx: OnnxImportCtx, name: str, default: tuple[int, int]) -> tuple[int, int]:
    v = ctx.attr(name, None)
    if v is None:
        return default
    v = [int(i) for i in v]
    if len(v) != 2:
        raise Unsupported(f"{ctx.op_type} {name} of length {len(v)} (only 2-D is modelled)")
    return v[0], v[1]


def _conv_import(ctx: OnnxImportCtx) -> Imported:
    x, w = ctx.input_type(0), ctx.input_type(1)
    if x.rank != 4 or w.rank != 4:
        raise Unsupported(f"Conv on rank-{x.rank} input (only 2-D convolutions are modelled)")
    kernel = (w.shape[2], w.shape[3])
    if _pair_attr(ctx, "kernel_shape", kernel) != kernel:
        raise Unsupported(f"Conv kernel_shape differs from the weight shape {w.shape}")
    group = int(ctx.attr("group", 1))
    if w.shape[1] * group != x.shape[1]:
        raise Unsupported(
            f"Conv group={group} inconsistent with input channels {x.shape[1]} and weight {w}"
        )
    strides = _pair_attr(ctx, "strides", (1, 1))
    dilations = _pair_attr(ctx, "dilations", (1, 1))
    attrs = {
        "strides": strides,
        "dilations": dilations,
        "pads": import_pads(ctx, kernel, strides, dilations),
    }
    return Imported("conv2d", attrs, (0, 1, 2) if ctx.has_input(2) else (0, 1))


def _conv_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, w = node.in_types[0], node.in_types[1]
    kernel = w.shape[2:]
    a = node.attrs
    pads = resolve_pads(a["pads"], x.shape[2:], kernel, a["strides"], a["dilations"])
    attrs = {
        "kernel_shape": list(kernel),
        "strides": list(a["strides"]),
        "dilations": list(a["dilations"]),
        "pads": onnx_pads(pads),
        "group": x.shape[1] // w.shape[1],
    }
    emit_with_act(ctx, "Conv", node.inputs, attrs, a["act"], node.outputs)


register(OpDef(
    name="conv2d", family="conv",
    canonicalize=canon_window_pads("weight"),
    doc="2-D convolution (cross-correlation) of NCHW x with w[O, C/groups, kh, kw], plus "
        "optional bias b[O], then the fused activation; groups = C / w.shape[1].",
    inputs=("x", "w", "b"), min_inputs=2,
    attrs=(
        AttrSpec("strides", "ints", (1, 1), "(stride_h, stride_w)"),
        AttrSpec("pads", "pads", (0, 0, 0, 0), "SAME (=SAME_UPPER), VALID or (t, l, b, r)"),
        AttrSpec("dilations", "ints", (1, 1), "(dilation_h, dilation_w)"),
        AttrSpec("act", "str", "none", "fused activation", choices=ACTS),
    ),
    infer=_conv_infer, reference=_conv_ref, flops=_conv_flops,
    onnx_import={"Conv": _conv_import}, onnx_export=_conv_export,
    samples=(
        Sample((f32(1, 3, 9, 9), f32(4, 3, 3, 3)), {"strides": (2, 2), "pads": "SAME"},
               note="SAME stride 2"),
        Sample((f32(2, 4, 7, 8), f32(6, 4, 3, 2), f32(6)), {"pads": "VALID", "act": "relu"},
               note="VALID, bias, relu"),
        Sample((f32(1, 4, 8, 8), f32(8, 2, 3, 3), f32(8)),
               {"pads": (1, 0, 2, 1), "strides": (1, 2), "act": "sigmoid"},
               note="grouped, asymmetric pads"),
        Sample((f32(1, 6, 10, 10), f32(6, 1, 3, 3)),
               {"pads": "SAME", "dilations": (2, 2), "act": "tanh"},
               note="depthwise, dilated"),
    ),
))

# ----------------------------------------------------------------------------- enlarge


def _enlarge_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    w = ins[0]
    if w.rank != 4:
        raise ShapeError(f"enlarge: expects a conv weight w[O,I,kh,kw], got {w}")
    check_pair("enlarge", "kernel", a["kernel"])
    (kh, kw), (nh, nw) = w.shape[2:], a["kernel"]
    if nh < kh or nw < kw or (nh - kh) % 2 or (nw - kw) % 2:
        raise ShapeError(
            f"enlarge: cannot center a {kh}x{kw} kernel (w {w}) in {nh}x{nw}: the target must be "
            "at least as large and differ by an even amount in each dimension"
        )
    return (w.with_shape((*w.shape[:2], nh, nw)),)


def _enlarge_pads(w: TensorType, kernel: Sequence[int]) -> tuple[int, int]:
    return (kernel[0] - w.shape[2]) // 2, (kernel[1] - w.shape[3]) // 2


def _enlarge_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    w = xs[0]
    ph, pw = _enlarge_pads(TensorType(w.shape), a["kernel"])
    return (np.pad(w, ((0, 0), (0, 0), (ph, ph), (pw, pw))),)


def _enlarge_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ph, pw = _enlarge_pads(node.in_types[0], node.attrs["kernel"])
    pads = [0, 0, ph, pw, 0, 0, ph, pw]
    if ctx.opset >= 11:
        ctx.emit("Pad", [node.inputs[0], ctx.const(np.array(pads, np.int64), "enlarge_pads")],
                 outputs=node.outputs)
    else:
        ctx.emit("Pad", node.inputs, {"pads": pads}, outputs=node.outputs)


register(OpDef(
    name="enlarge", family="conv",
    doc="Zero-pad a conv weight w[O,I,kh,kw] to kernel (KH, KW), keeping it centered.",
    inputs=("w",), attrs=(AttrSpec("kernel", "ints", doc="target (KH, KW)"),),
    infer=_enlarge_infer, reference=_enlarge_ref, flops=zero_cost, bytes_moved=zero_cost,
    onnx_export=_enlarge_export, weight_op=True,
    onnx_import_note="created by rules (weights are imported as constants)",
    samples=(
        Sample((f32(4, 3, 1, 1),), {"kernel": (3, 3)}),
        Sample((f32(2, 2, 3, 1),), {"kernel": (5, 3)}),
    ),
))

# ----------------------------------------------------------------------------- merge_gconv


def _merge_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    w = ins[0]
    g, count = a["groups"], a["count"]
    if w.rank != 4:
        raise ShapeError(f"merge_gconv: expects a conv weight w[O,C/groups,kh,kw], got {w}")
    if g < 1 or count < 1 or g % count or w.shape[0] % g:
        raise ShapeError(
            f"merge_gconv: need groups >= 1 dividing O={w.shape[0]} (w {w}) and count >= 1 "
            f"dividing groups; got groups={g}, count={count}"
        )
    o, cg, kh, kw = w.shape
    return (w.with_shape((o, cg * count, kh, kw)),)


def _merge_mask(o: int, groups: int, count: int) -> np.ndarray:
    """mask[o, j] = 1 where block j of output channel o's merged weight holds the original."""
    j = (np.arange(o) // (o // groups)) % count
    return (j[:, None] == np.arange(count)[None, :]).astype(np.float32)


def _merge_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    w = xs[0]
    o, cg, kh, kw = w.shape
    count = a["count"]
    mask = _merge_mask(o, a["groups"], count).astype(w.dtype)
    out = w[:, None] * mask[:, :, None, None, None]  # O, count, Cg, kh, kw
    return (out.reshape(o, count * cg, kh, kw),)


def _merge_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    # Tile the weight `count` times along the channel axis, then zero the foreign blocks.
    w = node.in_types[0]
    o, cg = w.shape[:2]
    count = node.attrs["count"]
    reps = ctx.const(np.array([1, count, 1, 1], np.int64), "merge_gconv_repeats")
    (tiled,) = ctx.emit("Tile", [node.inputs[0], reps])
    mask = np.repeat(_merge_mask(o, node.attrs["groups"], count), cg, axis=1)
    m = ctx.const(mask.astype(np_dtype(w.dtype)).reshape(o, count * cg, 1, 1), "merge_gconv_mask")
    ctx.emit("Mul", [tiled, m], outputs=node.outputs)


register(OpDef(
    name="merge_gconv", family="conv",
    doc="Rewrite the weight of a conv with `groups` groups so that a conv with groups/count "
        "groups computes the same: w'[o, j*Cg:(j+1)*Cg] = w[o] for "
        "j = (o // (O/groups)) % count, zeros elsewhere.",
    inputs=("w",),
    attrs=(
        AttrSpec("groups", "int", doc="group count G of the original conv"),
        AttrSpec("count", "int", doc="number of consecutive groups merged into one"),
    ),
    infer=_merge_infer, reference=_merge_ref, flops=zero_cost, bytes_moved=zero_cost,
    onnx_export=_merge_export, weight_op=True,
    onnx_import_note="created by rules (weights are imported as constants)",
    samples=(
        Sample((f32(8, 2, 3, 3),), {"groups": 4, "count": 2}),
        Sample((f32(12, 1, 3, 3),), {"groups": 12, "count": 4}, note="depthwise"),
    ),
))

__all__ = ["conv2d_ref"]
