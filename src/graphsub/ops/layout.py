"""Data-movement operators that select, gather, pad or resample: slice, gather, pad, resize.

Like the ops in :mod:`graphsub.ops.shape` they compute nothing (FLOPs 0) except ``resize``
(one FLOP per output element for nearest, four for linear) and move their inputs and outputs
once (the default bytes model).  Their ONNX configuration inputs (Slice's starts/ends/axes/
steps, Pad's pads/constant_value/axes, Resize's scales/sizes) must be constants; they become
attributes.

``slice`` follows ONNX Slice exactly, including the clamping of out-of-range starts/ends:

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> x = b.input("x", (10,))
>>> b.slice(x, starts=(-1,), ends=(-(2 ** 63),), axes=(0,), steps=(-3,)).shape
(4,)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import AttrError, ShapeError
from graphsub.ops.common import canon_axis
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
    i64,
    normalize_axis,
    register,
)
from graphsub.ops.shape import const_ints, no_flops, str_attr
from graphsub.ops.types import FLOAT_DTYPES, TensorType, make_type, np_dtype

Types = tuple[TensorType, ...]
Arrays = tuple[np.ndarray, ...]
A = Mapping[str, Any]
INT64_MIN, INT64_MAX, INT32_MAX = -(2**63), 2**63 - 1, 2**31 - 1

# ----------------------------------------------------------------------------- slice


def _slice_bounds(x: TensorType, a: A) -> list[tuple[int, int, int, int]]:
    """``(axis, start, end, step)`` per sliced axis after ONNX Slice's clamping rules.

    Negative starts/ends count from the end; then, for step > 0, start and end are clamped
    to [0, dim]; for step < 0, start to [0, dim-1] and end to [-1, dim-1], where -1 means
    "past the front".
    """
    starts, ends = a["starts"], a["ends"]
    axes = tuple(range(len(starts))) if a["axes"] is None else a["axes"]
    steps = (1,) * len(starts) if a["steps"] is None else a["steps"]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise AttrError(f"slice: starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                        "must have the same length")
    if 0 in steps:
        raise AttrError(f"slice: steps {steps} must be non-zero")
    norm = [normalize_axis("slice", ax, x.rank) for ax in axes]
    if len(set(norm)) != len(norm):
        raise AttrError(f"slice: duplicate axes {axes} for {x}")
    out = []
    for ax, start, end, step in zip(norm, starts, ends, steps, strict=True):
        d = x.shape[ax]
        start = start + d if start < 0 else start
        end = end + d if end < 0 else end
        lo = 0 if step > 0 else -1
        hi = d if step > 0 else d - 1
        out.append((ax, min(max(start, 0), hi), min(max(end, lo), hi), step))
    return out


def _slice_plan(x: TensorType, a: A) -> tuple[slice, ...]:
    """numpy index implementing the slice on a tensor of type ``x``."""
    plan = [slice(None)] * x.rank
    for ax, start, end, step in _slice_bounds(x, a):
        if x.shape[ax] == 0:
            plan[ax] = slice(0, 0)
        else:
            plan[ax] = slice(start, None if end < 0 else end, step)
    return tuple(plan)


def _slice_infer(ins: Sequence[TensorType], a: A) -> Types:
    x = ins[0]
    plan = _slice_plan(x, a)
    return (x.with_shape(len(range(*s.indices(d))) for s, d in zip(plan, x.shape, strict=True)),)


def _slice_import(ctx: OnnxImportCtx) -> Imported:
    if ctx.opset < 10:
        raise Unsupported("Slice before opset 10 (attribute form)")
    rank = ctx.input_type(0).rank
    starts = const_ints(ctx, 1, "starts")
    ends = const_ints(ctx, 2, "ends")
    axes = const_ints(ctx, 3, "axes") if ctx.has_input(3) else list(range(len(starts)))
    steps = const_ints(ctx, 4, "steps") if ctx.has_input(4) else [1] * len(starts)
    if any(s < 0 and e in (INT32_MAX, INT64_MAX) for e, s in zip(ends, steps, strict=False)):
        # the spec clamps this end to dim-1 (empty result); onnxruntime reads it as "to the front"
        raise Unsupported("Slice: end INT_MAX with a negative step (onnx and onnxruntime disagree)")
    attrs = {"starts": starts, "ends": ends, "axes": [ax % rank for ax in axes], "steps": steps}
    return Imported("slice", attrs, (0,))


def _slice_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    # Export the clamped bounds, which every reading of ONNX Slice agrees on; a backward end
    # "past the front" (-1 after clamping) is written INT64_MIN.
    bounds = _slice_bounds(node.in_types[0], node.attrs)
    cols = [list(col) for col in zip(*bounds, strict=True)] if bounds else [[], [], [], []]
    axes, starts, ends, steps = cols
    ends = [INT64_MIN if e < 0 else e for e in ends]
    steps = [min(max(s, INT64_MIN), INT64_MAX) for s in steps]
    ins = [node.inputs[0]]
    for key, vals in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)):
        ins.append(ctx.const(np.asarray(vals, dtype=np.int64), key))
    ctx.emit("Slice", ins, outputs=node.outputs)


register(OpDef(
    name="slice", family="shape",
    doc="ONNX Slice: x[starts:ends:steps] along ``axes`` (negative values count from the end; "
        "out-of-range starts/ends are clamped, e.g. ends=INT64_MAX means 'to the end').",
    inputs=("x",),
    attrs=(
        AttrSpec("starts", "ints"),
        AttrSpec("ends", "ints"),
        AttrSpec("axes", "ints", None, doc="None: 0..len(starts)-1"),
        AttrSpec("steps", "ints", None, doc="None: all 1; negative steps go backwards"),
    ),
    infer=_slice_infer,
    reference=lambda xs, a: (xs[0][_slice_plan(make_type(xs[0].shape), a)].copy(),),
    flops=no_flops,
    onnx_import={"Slice": _slice_import}, onnx_export=_slice_export,
    samples=(
        Sample((f32(4, 10, 6),), {"starts": (1, 2), "ends": (3, 1000), "axes": (1, 2),
                                  "steps": (1, 2)}, note="clamped end"),
        Sample((f32(4, 10),), {"starts": (-1,), "ends": (INT64_MIN,), "axes": (-1,),
                               "steps": (-3,)}, note="negative step to the front"),
        Sample((f32(5, 6),), {"starts": (0, -100), "ends": (INT64_MAX, -2)}, note="defaults"),
        Sample((f32(5, 6),), {"starts": (10,), "ends": (2,), "axes": (0,), "steps": (-1,)},
               note="start clamped to dim-1"),
    ),
))

# ----------------------------------------------------------------------------- gather


def _gather_infer(ins: Sequence[TensorType], a: A) -> Types:
    x, idx = ins
    if idx.dtype not in ("int64", "int32"):
        raise ShapeError(f"gather: indices must be int64 or int32, got {idx}")
    if x.rank == 0:
        raise ShapeError(f"gather: data must have rank >= 1, got {x}")
    axis = normalize_axis("gather", a["axis"], x.rank)
    return (x.with_shape(x.shape[:axis] + idx.shape + x.shape[axis + 1:]),)


def _gather_import(ctx: OnnxImportCtx) -> Imported:
    rank = ctx.input_type(0).rank
    return Imported("gather", {"axis": normalize_axis("Gather", int(ctx.attr("axis", 0)), rank)},
                    (0, 1))


def _gather_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("Gather", node.inputs, {"axis": node.attrs["axis"]}, outputs=node.outputs)


register(OpDef(
    name="gather", family="shape",
    canonicalize=canon_axis(),
    doc="Take entries of x along ``axis`` at ``indices`` (negative indices count from the end); "
        "output shape x.shape[:axis] + indices.shape + x.shape[axis+1:].",
    inputs=("x", "indices"), attrs=(AttrSpec("axis", "int", 0),),
    infer=_gather_infer,
    reference=lambda xs, a: (np.take(xs[0], xs[1], axis=a["axis"]),),
    flops=no_flops,
    onnx_import={"Gather": _gather_import}, onnx_export=_gather_export,
    input_roles=("any", "index"),
    samples=(
        Sample((f32(5, 4), i64(3))),
        Sample((f32(2, 5, 3), i64(2, 2)), {"axis": 1}, note="2-D indices"),
        Sample((f32(4, 6), make_type((2,), "int32")), {"axis": -1}, note="int32 indices"),
        Sample((f32(7, 3), i64()), note="scalar index drops the axis"),
    ),
))

# ----------------------------------------------------------------------------- gather_nd


def _gather_nd_infer(ins: Sequence[TensorType], a: A) -> Types:
    x, idx = ins
    if idx.dtype != "int64" or idx.rank < 1:
        raise ShapeError(f"gather_nd: indices must be int64 of rank >= 1, got {idx}")
    k = idx.shape[-1]
    if k < 1 or k > x.rank:
        raise ShapeError(f"gather_nd: the indices' last dimension {k} must be in 1 .. rank of {x}")
    return (x.with_shape(idx.shape[:-1] + x.shape[k:]),)


def _gather_nd_import(ctx: OnnxImportCtx) -> Imported:
    if int(ctx.attr("batch_dims", 0)) != 0:
        raise Unsupported("GatherND with batch_dims > 0")
    return Imported("gather_nd", {}, (0, 1))


def _gather_nd_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    x, idx = xs
    k = idx.shape[-1]
    at = tuple(np.where(idx[..., i] < 0, idx[..., i] + x.shape[i], idx[..., i]) for i in range(k))
    return (x[at].copy(),)


def _gather_nd_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("GatherND", node.inputs, {}, outputs=node.outputs)


register(OpDef(
    name="gather_nd", family="shape",
    doc="ONNX GatherND with batch_dims 0: ``x[idx[..., 0], ..., idx[..., k-1]]`` for k = the indices' last "
        "dimension (negative indices count from the end); output shape idx.shape[:-1] + x.shape[k:] (the "
        "exporters' lookup of an attention mask at (batch, key) pairs).",
    inputs=("x", "indices"), attrs=(),
    infer=_gather_nd_infer,
    reference=_gather_nd_ref,
    flops=no_flops,
    onnx_import={"GatherND": _gather_nd_import},
    onnx_export=_gather_nd_export,
    input_roles=("any", "index"),
    samples=(
        Sample((f32(4, 4), i64(3, 2)), note="elements"),
        Sample((f32(4, 4, 3), i64(2, 1, 1)), note="rows"),
        Sample((f32(5, 5), i64(2, 1, 1, 5, 2)), note="an attention mask's lookup"),
    ),
))

# ----------------------------------------------------------------------------- pad

PAD_MODES = ("constant", "reflect", "edge")


def _pad_widths(x: TensorType, a: A) -> list[tuple[int, int]]:
    pads = a["pads"]
    if len(pads) != 2 * x.rank or min(pads, default=0) < 0:
        raise AttrError(f"pad: pads {pads} must be {2 * x.rank} ints >= 0 for {x}")
    widths = list(zip(pads[:x.rank], pads[x.rank:], strict=True))
    for k, (d, (lo, hi)) in enumerate(zip(x.shape, widths, strict=True)):
        if a["mode"] == "reflect" and max(lo, hi) >= d and max(lo, hi) > 0:
            raise ShapeError(f"pad: reflect pads ({lo}, {hi}) on dim {k} of {x} must be < {d}")
        if a["mode"] == "edge" and d == 0 and max(lo, hi) > 0:
            raise ShapeError(f"pad: edge padding of the empty dim {k} of {x}")
    return widths


def _pad_infer(ins: Sequence[TensorType], a: A) -> Types:
    x = ins[0]
    return (x.with_shape(d + lo + hi for d, (lo, hi) in zip(x.shape, _pad_widths(x, a),
                                                             strict=True)),)


def _pad_ref(xs: Sequence[np.ndarray], a: A) -> Arrays:
    x = xs[0]
    widths = _pad_widths(make_type(x.shape), a)
    if a["mode"] == "constant":
        return (np.pad(x, widths, mode="constant", constant_values=x.dtype.type(a["value"])),)
    return (np.pad(x, widths, mode=a["mode"]),)


def _pad_import(ctx: OnnxImportCtx) -> Imported:
    if ctx.opset < 11:
        raise Unsupported("Pad before opset 11 (attribute form)")
    rank = ctx.input_type(0).rank
    mode = str_attr(ctx, "mode", "constant")
    if mode not in PAD_MODES:
        raise Unsupported(f"Pad mode {mode!r}")
    pads = const_ints(ctx, 1, "pads")
    if ctx.has_input(3):
        axes = [ax % rank for ax in const_ints(ctx, 3, "axes")]
        full = [0] * (2 * rank)
        for k, ax in enumerate(axes):
            full[ax], full[rank + ax] = pads[k], pads[len(axes) + k]
        pads = full
    if min(pads, default=0) < 0:
        raise Unsupported(f"Pad with negative pads {pads} (cropping)")
    attrs: dict[str, Any] = {"pads": pads, "mode": mode}
    if ctx.has_input(2):
        value = ctx.const_input(2)
        if value is None:
            raise Unsupported("Pad constant_value is not a constant")
        attrs["value"] = float(np.asarray(value).reshape(-1)[0])
    return Imported("pad", attrs, (0,))


def _pad_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ins = [node.inputs[0], ctx.const(np.asarray(node.attrs["pads"], dtype=np.int64), "pads")]
    if node.attrs["mode"] == "constant" and node.attrs["value"] != 0:
        dt = np_dtype(node.in_types[0].dtype)
        ins.append(ctx.const(np.asarray(node.attrs["value"], dtype=dt), "pad_value"))
    ctx.emit("Pad", ins, {"mode": node.attrs["mode"]}, outputs=node.outputs)


register(OpDef(
    name="pad", family="shape",
    doc="ONNX Pad: ``pads`` = all begins then all ends (>= 0); mode constant (fill with "
        "``value``), reflect (mirror without the edge) or edge (repeat the edge).",
    inputs=("x",),
    attrs=(
        AttrSpec("pads", "ints", doc="begin pads of every dim, then end pads"),
        AttrSpec("mode", "str", "constant", choices=PAD_MODES),
        AttrSpec("value", "float", 0.0, doc="fill value of constant mode"),
    ),
    infer=_pad_infer, reference=_pad_ref, flops=no_flops,
    onnx_import={"Pad": _pad_import}, onnx_export=_pad_export,
    samples=(
        Sample((f32(1, 2, 4, 5),), {"pads": (0, 0, 1, 2, 0, 0, 3, 0)}),
        Sample((f32(2, 5),), {"pads": (1, 2, 0, 1), "value": -1.5}),
        Sample((f32(1, 2, 4, 5),), {"pads": (0, 0, 2, 1, 0, 0, 3, 4), "mode": "reflect"}),
        Sample((f32(3, 4),), {"pads": (2, 0, 1, 3), "mode": "edge"}),
    ),
))

# ----------------------------------------------------------------------------- resize

COORD_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_infer(ins: Sequence[TensorType], a: A) -> Types:
    x, sizes = ins[0], tuple(a["sizes"])
    if x.rank < 2 or len(sizes) != x.rank:
        raise AttrError(f"resize: sizes {sizes} must give every dim of {x} (rank >= 2)")
    if sizes[:-2] != x.shape[:-2] or min(sizes) < 1 or min(x.shape[-2:]) < 1:
        raise ShapeError(f"resize: only the last two dims of {x} may change, to sizes >= 1; "
                         f"got {sizes}")
    if a["mode"] == "linear" and (x.dtype not in FLOAT_DTYPES or x.rank > 5):
        raise ShapeError(f"resize: linear mode needs a float tensor of rank <= 5, got {x}")
    return (x.with_shape(sizes),)


def _source_coords(n_in: int, n_out: int, mode: str) -> np.ndarray:
    """Source coordinate of each output position, in float32 as onnxruntime computes it."""
    f = np.float32
    o = np.arange(n_out, dtype=f)
    scale = f(n_out) / f(n_in)
    if mode == "asymmetric":
        return o / scale
    if mode == "align_corners":
        return np.zeros_like(o) if n_out == 1 else o * f(n_in - 1) / f(n_out - 1)
    if mode == "pytorch_half_pixel" and n_out == 1:
        return np.zeros_like(o)
    return (o + f(0.5)) / scale - f(0.5)  # half_pixel (and pytorch_half_pixel)


def _nearest_index(c: np.ndarray, n_in: int, mode: str) -> np.ndarray:
    if mode == "floor":
        idx = np.floor(c)
    elif mode == "ceil":
        idx = np.ceil(c)
    else:  # round half away from zero; round_prefer_floor rounds exact .5 ties down
        idx = np.sign(c) * np.floor(np.abs(c) + 0.5)
        if mode == "round_prefer_floor":
            idx = np.where(c == np.trunc(c) + np.float32(0.5), np.floor(c), idx)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def _linear_taps(c: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower/upper source index and the weight of the upper one (source clamped to the edge)."""
    c = np.clip(c, 0, n_in - 1)
    lo = np.minimum(c.astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    w_hi = np.where(lo == hi, np.float32(0.5), c - lo).astype(np.float32)
    return lo, hi, w_hi


def _resize_ref(xs: Sequence[np.ndarray], a: A) -> Arrays:
    x = xs[0]
    out = x
    for axis in (-2, -1):
        n_in, n_out = x.shape[axis], a["sizes"][axis]
        c = _source_coords(n_in, n_out, a["coordinate_transformation_mode"])
        if a["mode"] == "nearest":
            out = np.take(out, _nearest_index(c, n_in, a["nearest_mode"]), axis=axis)
            continue
        lo, hi, w_hi = _linear_taps(c, n_in)
        shape = [1] * x.ndim
        shape[axis] = n_out
        w = w_hi.reshape(shape)
        out = np.take(out, lo, axis=axis) * (1 - w) + np.take(out, hi, axis=axis) * w
    return (out.astype(x.dtype),)


def _resize_import(ctx: OnnxImportCtx) -> Imported:
    if ctx.opset < 11:
        raise Unsupported("Resize before opset 11")
    attrs = {
        "mode": str_attr(ctx, "mode", "nearest"),
        "coordinate_transformation_mode": str_attr(
            ctx, "coordinate_transformation_mode", "half_pixel"),
        "nearest_mode": str_attr(ctx, "nearest_mode", "round_prefer_floor"),
    }
    allowed = {"mode": ("nearest", "linear"), "coordinate_transformation_mode": COORD_MODES,
               "nearest_mode": NEAREST_MODES}
    for key, value in attrs.items():
        if value not in allowed[key]:
            raise Unsupported(f"Resize {key}={value!r}")
    if int(ctx.attr("antialias", 0)) or int(ctx.attr("exclude_outside", 0)):
        raise Unsupported("Resize with antialias or exclude_outside")
    if str_attr(ctx, "keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Unsupported("Resize keep_aspect_ratio_policy other than 'stretch'")
    x = ctx.input_type(0)
    axes_attr = ctx.attr("axes", None)
    axes = range(x.rank) if axes_attr is None else [int(ax) % x.rank for ax in axes_attr]
    sizes = list(x.shape)
    given = ctx.const_input(3) if ctx.has_input(3) else None
    if ctx.has_input(3) and given is None:
        raise Unsupported("Resize sizes is not a constant")
    if given is not None and given.size:
        for ax, s in zip(axes, given.reshape(-1).tolist(), strict=True):
            sizes[ax] = int(s)
    else:
        scales = ctx.const_input(2) if ctx.has_input(2) else None
        if scales is None or not scales.size:
            raise Unsupported("Resize without constant scales or sizes")
        for ax, s in zip(axes, scales.astype(np.float32).reshape(-1).tolist(), strict=True):
            sizes[ax] = math.floor(x.shape[ax] * s)
            # the IR's scale is sizes/dim: it must equal the given one for the same coordinates
            if sizes[ax] < 1 or np.float32(sizes[ax]) / np.float32(x.shape[ax]) != np.float32(s):
                raise Unsupported(f"Resize scale {s} on dim {ax} of {x} is not sizes / dim")
    if sizes[:-2] != list(x.shape[:-2]):
        raise Unsupported(f"Resize of {x} to {sizes} changes a non-spatial dim")
    return Imported("resize", {"sizes": sizes, **attrs}, (0,))


def _resize_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    sizes = ctx.const(np.asarray(node.attrs["sizes"], dtype=np.int64), "sizes")
    attrs = {k: node.attrs[k] for k in ("mode", "coordinate_transformation_mode", "nearest_mode")}
    ctx.emit("Resize", [node.inputs[0], "", "", sizes], attrs, outputs=node.outputs)


def _resize_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: A) -> int:
    return (4 if a["mode"] == "linear" else 1) * outs[0].numel


register(OpDef(
    name="resize", family="shape",
    doc="ONNX Resize of the last two dims to ``sizes`` (the full output shape): nearest or "
        "linear (bilinear, rank <= 5) with the ONNX coordinate transformation modes.",
    inputs=("x",),
    attrs=(
        AttrSpec("sizes", "ints", doc="output shape; only the last two dims may differ"),
        AttrSpec("mode", "str", "nearest", choices=("nearest", "linear")),
        AttrSpec("coordinate_transformation_mode", "str", "half_pixel", choices=COORD_MODES),
        AttrSpec("nearest_mode", "str", "round_prefer_floor", choices=NEAREST_MODES),
    ),
    infer=_resize_infer, reference=_resize_ref, flops=_resize_flops,
    onnx_import={"Resize": _resize_import}, onnx_export=_resize_export,
    samples=(
        Sample((f32(1, 2, 4, 5),), {"sizes": (1, 2, 8, 10)}, note="nearest 2x, half_pixel"),
        Sample((f32(1, 2, 5, 7),), {"sizes": (1, 2, 3, 10), "nearest_mode": "round_prefer_ceil",
                                    "coordinate_transformation_mode": "asymmetric"}),
        Sample((f32(2, 1, 4, 6),), {"sizes": (2, 1, 7, 3), "nearest_mode": "floor",
                                    "coordinate_transformation_mode": "align_corners"}),
        Sample((f32(1, 3, 6, 4),), {"sizes": (1, 3, 4, 9), "nearest_mode": "ceil",
                                    "coordinate_transformation_mode": "pytorch_half_pixel"}),
        Sample((f32(1, 2, 4, 5),), {"sizes": (1, 2, 8, 10), "mode": "linear"}),
        Sample((f32(1, 2, 5, 4),), {"sizes": (1, 2, 3, 7), "mode": "linear",
                                    "coordinate_transformation_mode": "asymmetric"}),
        Sample((f32(1, 2, 5, 4),), {"sizes": (1, 2, 9, 1), "mode": "linear",
                                    "coordinate_transformation_mode": "align_corners"}),
        Sample((f32(1, 1, 6, 5),), {"sizes": (1, 1, 1, 8), "mode": "linear",
                                    "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ),
))

__all__: list[str] = []
