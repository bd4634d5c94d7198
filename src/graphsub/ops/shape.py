"""Shape operators: concat, split, transpose, reshape, flatten, squeeze, unsqueeze, expand, shape.

All shapes are static.  None of these ops computes anything (FLOPs 0).  ``reshape``,
``flatten``, ``squeeze``, ``unsqueeze`` and ``shape`` are views or metadata and move no bytes;
the others (``concat``, ``split``, ``transpose``, ``expand``) copy data and use the default
bytes model (inputs + outputs).

Axis attributes may be negative (counted from the end) wherever ONNX allows it; importers store
them non-negative.  ONNX configuration inputs (Reshape's shape, Split's split, Squeeze's axes,
...) are folded into attributes when they are constants; otherwise the importer raises
:class:`~graphsub.ops.registry.Unsupported` and the node stays opaque.

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> x = b.input("x", (2, 3, 4))
>>> b.reshape(x, shape=(6, -1)).shape, b.transpose(x, perm=(2, 0, 1)).shape
((6, 4), (4, 2, 3))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import AttrError, ShapeError
from graphsub.ops.common import canon_axes, canon_axis
from graphsub.ops.registry import (
    AttrSpec,
    ExportFn,
    ExportNode,
    Imported,
    ImportFn,
    OnnxExportCtx,
    OnnxImportCtx,
    OpDef,
    Sample,
    Unsupported,
    broadcast_shapes,
    f32,
    i64,
    normalize_axis,
    numel,
    register,
    zero_cost,
)
from graphsub.ops.types import TensorType, make_type

Types = tuple[TensorType, ...]
Arrays = tuple[np.ndarray, ...]
A = Mapping[str, Any]

# ----------------------------------------------------------------------------- helpers


def no_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: A) -> int:
    """FLOPs of a pure data-movement op: 0."""
    return 0


def const_ints(ctx: OnnxImportCtx, i: int, what: str) -> list[int]:
    """The constant int input ``i`` of the node as a list (Unsupported if not a constant)."""
    v = ctx.const_input(i)
    if v is None:
        raise Unsupported(f"{ctx.op_type}: {what} (input {i}) is not a constant")
    return [int(e) for e in np.asarray(v).reshape(-1)]


def str_attr(ctx: OnnxImportCtx, name: str, default: str) -> str:
    """A string attribute of the ONNX node (bytes are decoded)."""
    v = ctx.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _int64(values: Sequence[int]) -> np.ndarray:
    return np.asarray(list(values), dtype=np.int64)


def _axes(op: str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Normalised, duplicate-free axes for a tensor of ``rank`` (ShapeError otherwise)."""
    out = tuple(normalize_axis(op, a, rank) for a in axes)
    if len(set(out)) != len(out):
        raise AttrError(f"{op}: duplicate axes {tuple(axes)} for rank {rank}")
    return out


# ----------------------------------------------------------------------------- concat


def _concat_infer(ins: Sequence[TensorType], a: A) -> Types:
    first = ins[0]
    if first.rank == 0:
        raise ShapeError(f"concat: inputs must have rank >= 1, got {list(ins)}")
    axis = normalize_axis("concat", a["axis"], first.rank)
    for t in ins[1:]:
        if t.dtype != first.dtype:
            raise ShapeError(f"concat: dtype mismatch in {list(ins)}")
        same = t.rank == first.rank and all(
            d == e for k, (d, e) in enumerate(zip(t.shape, first.shape, strict=True)) if k != axis
        )
        if not same:
            raise ShapeError(f"concat: shapes {[x.shape for x in ins]} differ off axis {axis}")
    out = list(first.shape)
    out[axis] = sum(t.shape[axis] for t in ins)
    return (first.with_shape(out),)


def _concat_import(ctx: OnnxImportCtx) -> Imported:
    rank = ctx.input_type(0).rank
    axis = int(ctx.attr("axis"))
    inputs = tuple(i for i in range(ctx.num_inputs) if ctx.has_input(i))
    return Imported("concat", {"axis": axis % rank if rank else axis}, inputs)


def _concat_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("Concat", node.inputs, {"axis": node.attrs["axis"]}, outputs=node.outputs)


register(OpDef(
    name="concat", family="shape",
    canonicalize=canon_axis(),
    doc="Concatenate the inputs along ``axis``; all other dimensions must agree.",
    inputs=("x",), variadic=True,
    attrs=(AttrSpec("axis", "int", doc="concatenation axis (negative counts from the end)"),),
    infer=_concat_infer,
    reference=lambda xs, a: (np.concatenate(list(xs), axis=a["axis"]),),
    flops=no_flops,
    onnx_import={"Concat": _concat_import}, onnx_export=_concat_export,
    samples=(
        Sample((f32(2, 3, 4), f32(2, 5, 4)), {"axis": 1}),
        Sample((f32(2, 3), f32(2, 1), f32(2, 4)), {"axis": -1}, note="three inputs"),
        Sample((f32(1, 4, 2, 2),), {"axis": 0}, note="single input"),
    ),
))

# ----------------------------------------------------------------------------- split


def _split_infer(ins: Sequence[TensorType], a: A) -> Types:
    x = ins[0]
    axis = normalize_axis("split", a["axis"], x.rank)
    sizes = a["sizes"]
    if not sizes or any(s < 0 for s in sizes):
        raise AttrError(f"split: sizes must be a non-empty tuple of ints >= 0, got {sizes}")
    if sum(sizes) != x.shape[axis]:
        raise ShapeError(f"split: sizes {sizes} do not add up to dim {axis} of {x}")
    out = list(x.shape)
    types = []
    for s in sizes:
        out[axis] = s
        types.append(x.with_shape(out))
    return tuple(types)


def _split_ref(xs: Sequence[np.ndarray], a: A) -> Arrays:
    cuts = np.cumsum(a["sizes"])[:-1]
    return tuple(np.split(xs[0], cuts, axis=a["axis"]))


def _split_import(ctx: OnnxImportCtx) -> Imported:
    x = ctx.input_type(0)
    axis = normalize_axis("Split", int(ctx.attr("axis", 0)), x.rank)
    dim = x.shape[axis]
    if ctx.opset < 13:
        split = ctx.attr("split", None)
        sizes = None if split is None else [int(s) for s in split]
    else:
        sizes = const_ints(ctx, 1, "split") if ctx.has_input(1) else None
    if sizes is None:
        n = ctx.num_outputs
        if ctx.opset >= 18 and ctx.attr("num_outputs", None) is not None:
            chunk = -(-dim // n)  # opset 18: ceil-sized chunks, the last one smaller
            sizes = [max(min(chunk, dim - k * chunk), 0) for k in range(n)]
        elif dim % n:
            raise Unsupported(f"Split: dim {dim} is not divisible into {n} equal outputs")
        else:
            sizes = [dim // n] * n
    if len(sizes) != ctx.num_outputs or sum(sizes) != dim or min(sizes) < 0:
        raise Unsupported(f"Split: sizes {sizes} do not fit dim {dim} / {ctx.num_outputs} outputs")
    return Imported("split", {"axis": axis, "sizes": sizes}, (0,))


def _split_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    sizes = ctx.const(_int64(node.attrs["sizes"]), "split")
    ctx.emit("Split", [node.inputs[0], sizes], {"axis": node.attrs["axis"]},
             outputs=node.outputs)


register(OpDef(
    name="split", family="shape",
    canonicalize=canon_axis(),
    doc="Split along ``axis`` into consecutive pieces of the given ``sizes`` (one output each).",
    inputs=("x",),
    attrs=(AttrSpec("axis", "int", doc="split axis (negative counts from the end)"),
           AttrSpec("sizes", "ints", doc="piece sizes; they add up to the dimension")),
    infer=_split_infer, reference=_split_ref, flops=no_flops,
    onnx_import={"Split": _split_import}, onnx_export=_split_export,
    samples=(
        Sample((f32(2, 8, 3),), {"axis": 1, "sizes": (2, 6)}),
        Sample((f32(4, 6),), {"axis": -1, "sizes": (1, 2, 3)}),
        Sample((f32(6, 2),), {"axis": 0, "sizes": (6,)}, note="single output"),
    ),
))

# ----------------------------------------------------------------------------- transpose


def _transpose_infer(ins: Sequence[TensorType], a: A) -> Types:
    x, perm = ins[0], a["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise AttrError(f"transpose: perm {perm} is not a permutation of the axes of {x}")
    return (x.with_shape(x.shape[p] for p in perm),)


def _transpose_import(ctx: OnnxImportCtx) -> Imported:
    rank = ctx.input_type(0).rank
    perm = ctx.attr("perm", None)
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    return Imported("transpose", {"perm": perm}, (0,))


def _transpose_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("Transpose", node.inputs, {"perm": list(node.attrs["perm"])}, outputs=node.outputs)


register(OpDef(
    name="transpose", family="shape",
    doc="Permute the axes: output dim k is input dim ``perm[k]``.",
    inputs=("x",), attrs=(AttrSpec("perm", "ints", doc="a permutation of range(rank)"),),
    infer=_transpose_infer,
    reference=lambda xs, a: (np.ascontiguousarray(np.transpose(xs[0], a["perm"])),),
    flops=no_flops,
    onnx_import={"Transpose": _transpose_import}, onnx_export=_transpose_export,
    samples=(
        Sample((f32(2, 3, 4),), {"perm": (2, 0, 1)}),
        Sample((f32(1, 3, 4, 5),), {"perm": (0, 2, 3, 1)}, note="NCHW -> NHWC"),
        Sample((f32(3, 5),), {"perm": (1, 0)}),
    ),
))

# ----------------------------------------------------------------------------- reshape


def reshape_target(op: str, x: TensorType, shape: Sequence[int]) -> tuple[int, ...]:
    """Resolve a reshape target with at most one -1 against ``x`` (no 0 entries allowed)."""
    if sum(1 for d in shape if d == -1) > 1 or any(d == 0 or d < -1 for d in shape):
        raise AttrError(f"{op}: shape {tuple(shape)} must be positive ints with at most one -1")
    known = numel([d for d in shape if d != -1])
    if -1 in shape:
        if x.numel % known:
            raise ShapeError(f"{op}: cannot reshape {x} to {tuple(shape)}")
        shape = [x.numel // known if d == -1 else d for d in shape]
    elif known != x.numel:
        raise ShapeError(f"{op}: cannot reshape {x} ({x.numel} elements) to {tuple(shape)}")
    return tuple(shape)


def _canon_reshape(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    """Canonical reshape target: the -1 resolved."""
    if -1 in a["shape"]:
        a["shape"] = reshape_target("reshape", ins[0], a["shape"])
    return a


def _reshape_import(ctx: OnnxImportCtx) -> Imported:
    x = ctx.input_type(0)
    shape = const_ints(ctx, 1, "shape")
    if 0 in shape:
        if int(ctx.attr("allowzero", 0)):
            raise Unsupported("Reshape: allowzero=1 with a 0 in the target shape")
        if any(k >= x.rank for k, d in enumerate(shape) if d == 0):
            raise Unsupported(f"Reshape: 0 in shape {shape} beyond the rank of {x}")
        shape = [x.shape[k] if d == 0 else d for k, d in enumerate(shape)]
    return Imported("reshape", {"shape": shape}, (0,))


def _reshape_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    shape = ctx.const(_int64(node.attrs["shape"]), "shape")
    ctx.emit("Reshape", [node.inputs[0], shape], outputs=node.outputs)


register(OpDef(
    name="reshape", family="shape",
    canonicalize=_canon_reshape,
    doc="Reinterpret x with a new static ``shape`` (row-major); one entry may be -1 (inferred).",
    inputs=("x",),
    attrs=(AttrSpec("shape", "ints", doc="target shape: ints >= 1, at most one -1"),),
    infer=lambda ins, a: (ins[0].with_shape(reshape_target("reshape", ins[0], a["shape"])),),
    reference=lambda xs, a: (
        xs[0].reshape(reshape_target("reshape", make_type(xs[0].shape), a["shape"])),),
    flops=no_flops, bytes_moved=zero_cost,
    onnx_import={"Reshape": _reshape_import}, onnx_export=_reshape_export,
    samples=(
        Sample((f32(2, 3, 4),), {"shape": (6, 4)}),
        Sample((f32(2, 3, 4),), {"shape": (2, -1)}, note="inferred dim"),
        Sample((f32(24,),), {"shape": (1, 2, 3, 4)}),
    ),
))

# ----------------------------------------------------------------------------- flatten


def _flatten_infer(ins: Sequence[TensorType], a: A) -> Types:
    x, axis = ins[0], a["axis"]
    if not -x.rank <= axis <= x.rank:
        raise AttrError(f"flatten: axis {axis} out of range [{-x.rank}, {x.rank}] for {x}")
    if axis < 0:
        axis += x.rank
    return (x.with_shape((numel(x.shape[:axis]), numel(x.shape[axis:]))),)


def _flatten_ref(xs: Sequence[np.ndarray], a: A) -> Arrays:
    (out,) = _flatten_infer([make_type(xs[0].shape)], a)
    return (xs[0].reshape(out.shape),)


def _flatten_import(ctx: OnnxImportCtx) -> Imported:
    rank = ctx.input_type(0).rank
    axis = int(ctx.attr("axis", 1))
    return Imported("flatten", {"axis": axis + rank if axis < 0 else axis}, (0,))


def _flatten_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("Flatten", node.inputs, {"axis": node.attrs["axis"]}, outputs=node.outputs)


register(OpDef(
    name="flatten", family="shape",
    canonicalize=canon_axis(),
    doc="Reshape to 2-D: (prod(shape[:axis]), prod(shape[axis:])); axis in [-rank, rank].",
    inputs=("x",), attrs=(AttrSpec("axis", "int", 1),),
    infer=_flatten_infer, reference=_flatten_ref,
    flops=no_flops, bytes_moved=zero_cost,
    onnx_import={"Flatten": _flatten_import}, onnx_export=_flatten_export,
    samples=(
        Sample((f32(2, 3, 4, 5),)),
        Sample((f32(2, 3, 4),), {"axis": 0}),
        Sample((f32(2, 3, 4),), {"axis": -1}),
    ),
))

# ----------------------------------------------------------------------------- squeeze / unsqueeze


def _unsqueeze_infer(ins: Sequence[TensorType], a: A) -> Types:
    x = ins[0]
    rank = x.rank + len(a["axes"])
    axes = _axes("unsqueeze", a["axes"], rank)
    if not axes:
        raise AttrError("unsqueeze: axes must not be empty")
    dims = iter(x.shape)
    return (x.with_shape(1 if k in axes else next(dims) for k in range(rank)),)


def _squeeze_infer(ins: Sequence[TensorType], a: A) -> Types:
    x = ins[0]
    axes = _axes("squeeze", a["axes"], x.rank) or tuple(
        k for k, d in enumerate(x.shape) if d == 1)
    bad = [k for k in axes if x.shape[k] != 1]
    if bad:
        raise ShapeError(f"squeeze: axes {bad} of {x} do not have size 1")
    return (x.with_shape(d for k, d in enumerate(x.shape) if k not in axes),)


def _axes_import(op: str) -> ImportFn:
    def fn(ctx: OnnxImportCtx) -> Imported:
        if ctx.opset < 13:
            axes = ctx.attr("axes", None)
            axes = None if axes is None else [int(v) for v in axes]
        else:
            axes = const_ints(ctx, 1, "axes") if ctx.has_input(1) else None
        x = ctx.input_type(0)
        if axes is None:
            if op == "unsqueeze":
                raise Unsupported("Unsqueeze without axes")
            axes = [k for k, d in enumerate(x.shape) if d == 1]
        rank = x.rank + (len(axes) if op == "unsqueeze" else 0)
        return Imported(op, {"axes": sorted(a % rank if rank else a for a in axes)}, (0,))

    return fn


def _axes_export(op_type: str) -> ExportFn:
    def fn(ctx: OnnxExportCtx, node: ExportNode) -> None:
        axes = list(node.attrs["axes"])
        if op_type == "Squeeze" and not axes:
            axes = [k for k, d in enumerate(node.in_types[0].shape) if d == 1]
        if not axes:  # squeezing a tensor without size-1 dims: Squeeze with no axes is a no-op
            ctx.emit(op_type, node.inputs, outputs=node.outputs)
        elif ctx.opset >= 13:
            ctx.emit(op_type, [node.inputs[0], ctx.const(_int64(axes), "axes")],
                     outputs=node.outputs)
        else:
            ctx.emit(op_type, node.inputs, {"axes": axes}, outputs=node.outputs)

    return fn


register(OpDef(
    name="unsqueeze", family="shape",
    canonicalize=canon_axes(out_rank=True),
    doc="Insert size-1 dims at ``axes`` (positions in the output; negative from the end).",
    inputs=("x",), attrs=(AttrSpec("axes", "ints", doc="output positions of the new dims"),),
    infer=_unsqueeze_infer,
    reference=lambda xs, a: (np.expand_dims(xs[0], tuple(a["axes"])),),
    flops=no_flops, bytes_moved=zero_cost,
    onnx_import={"Unsqueeze": _axes_import("unsqueeze")}, onnx_export=_axes_export("Unsqueeze"),
    samples=(
        Sample((f32(3, 4),), {"axes": (0,)}),
        Sample((f32(3, 4),), {"axes": (1, -1)}),
        Sample((f32(),), {"axes": (0, 1)}, note="scalar"),
    ),
))

def _canon_squeeze(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    """Canonical squeeze axes: explicit, non-negative, sorted."""
    shape = ins[0].shape
    axes = a["axes"] or tuple(i for i, d in enumerate(shape) if d == 1)
    a["axes"] = tuple(sorted(x % len(shape) for x in axes)) if shape else axes
    return a


register(OpDef(
    name="squeeze", family="shape",
    canonicalize=_canon_squeeze,
    doc="Remove the size-1 dims at ``axes``; empty ``axes`` removes every size-1 dim.",
    inputs=("x",), attrs=(AttrSpec("axes", "ints", (), doc="dims to remove (size 1 each)"),),
    infer=_squeeze_infer,
    reference=lambda xs, a: (
        xs[0].reshape(_squeeze_infer([make_type(xs[0].shape)], a)[0].shape),),
    flops=no_flops, bytes_moved=zero_cost,
    onnx_import={"Squeeze": _axes_import("squeeze")}, onnx_export=_axes_export("Squeeze"),
    samples=(
        Sample((f32(1, 3, 1, 4),), {"axes": (0,)}),
        Sample((f32(1, 3, 1, 4),), {"axes": (-2, 0)}),
        Sample((f32(1, 3, 1, 4),), note="all size-1 dims"),
    ),
))

# ----------------------------------------------------------------------------- expand


def _expand_infer(ins: Sequence[TensorType], a: A) -> Types:
    if any(d < 0 for d in a["shape"]):
        raise AttrError(f"expand: shape {a['shape']} has negative entries")
    return (ins[0].with_shape(broadcast_shapes("expand", ins[0].shape, tuple(a["shape"]))),)


def _expand_ref(xs: Sequence[np.ndarray], a: A) -> Arrays:
    out = broadcast_shapes("expand", xs[0].shape, tuple(a["shape"]))
    return (np.broadcast_to(xs[0], out).copy(),)


def _expand_import(ctx: OnnxImportCtx) -> Imported:
    return Imported("expand", {"shape": const_ints(ctx, 1, "shape")}, (0,))


def _expand_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    shape = ctx.const(_int64(node.attrs["shape"]), "shape")
    ctx.emit("Expand", [node.inputs[0], shape], outputs=node.outputs)


register(OpDef(
    name="expand", family="shape",
    doc="Broadcast x against ``shape`` (ONNX bidirectional broadcasting) and materialise it.",
    inputs=("x",), attrs=(AttrSpec("shape", "ints", doc="shape to broadcast against"),),
    infer=_expand_infer, reference=_expand_ref, flops=no_flops,
    onnx_import={"Expand": _expand_import},
    onnx_export=_expand_export,
    samples=(
        Sample((f32(3, 1),), {"shape": (2, 3, 4)}),
        Sample((f32(2, 1, 5),), {"shape": (1, 4, 1)}, note="target smaller than input dims"),
        Sample((f32(1),), {"shape": (3,)}),
    ),
))

# ----------------------------------------------------------------------------- shape


def _shape_range(rank: int, a: A) -> range:
    """ONNX Shape's [start, end) slice of the dims, with negative and out-of-range clamping."""
    def clamp(v: int) -> int:
        return min(max(v + rank if v < 0 else v, 0), rank)

    return range(clamp(a["start"]), clamp(rank if a["end"] is None else a["end"]))


def _shape_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    attrs = {k: node.attrs[k] for k, d in (("start", 0), ("end", None)) if node.attrs[k] != d}
    ctx.emit("Shape", node.inputs, attrs, outputs=node.outputs)


def _shape_import(ctx: OnnxImportCtx) -> Imported:
    attrs = {"start": int(ctx.attr("start", 0))}
    end = ctx.attr("end", None)
    if end is not None:
        attrs["end"] = int(end)
    return Imported("shape", attrs, (0,))


register(OpDef(
    name="shape", family="shape",
    doc="The int64 vector x.shape[start:end] (ONNX clamping of negative/out-of-range bounds).",
    inputs=("x",),
    attrs=(AttrSpec("start", "int", 0), AttrSpec("end", "int", None, doc="None: up to rank")),
    infer=lambda ins, a: (make_type((len(_shape_range(ins[0].rank, a)),), "int64"),),
    reference=lambda xs, a: (np.asarray(
        [xs[0].shape[k] for k in _shape_range(xs[0].ndim, a)], dtype=np.int64),),
    flops=no_flops, bytes_moved=zero_cost,
    onnx_import={"Shape": _shape_import}, onnx_export=_shape_export,
    samples=(
        Sample((f32(2, 3, 4),)),
        Sample((f32(2, 3, 4, 5),), {"start": 1, "end": -1}),
        Sample((i64(2, 3),), {"start": -5, "end": 10}, note="clamped bounds"),
    ),
))

__all__ = ["const_ints", "no_flops", "reshape_target", "str_attr"]
