"""Normalisation and reduction family: ``batchnorm`` (inference form), ``layernorm``,
``softmax``, ``reduce_mean`` and ``reduce_sum``.

* ``batchnorm(x, scale, bias, mean, var)`` -- ``(x - mean) / sqrt(var + epsilon) * scale + bias``
  with the per-channel vectors broadcast along axis 1 (ONNX BatchNormalization, inference).
* ``layernorm(x, scale [, bias])`` -- normalise over the axes ``[axis, rank)`` (biased
  variance), then ``* scale + bias``; scale/bias broadcast unidirectionally to
  ``x.shape[axis:]`` (ONNX LayerNormalization, opset 17).
* ``softmax(x)`` -- ``exp(x) / sum(exp(x))`` along ``axis`` (ONNX opset >= 13 semantics).
* ``reduce_mean`` / ``reduce_sum`` -- over ``axes`` (non-empty, may be negative), keeping
  the reduced axes as size 1 when ``keepdims``.

References compute in float64 and cast back to the input dtype.

FLOPs per element: batchnorm 2 (a folded scale and shift per output); layernorm 6, 7 with a
bias (mean, centre, square-and-sum, normalise, scale, shift); softmax 5 (max, subtract, exp,
sum, divide); reductions one per input element, plus one per output for the mean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.common import canon_axes, canon_axis
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
    RefFn,
    Sample,
    Unsupported,
    f32,
    flops_per_output,
    normalize_axis,
    register,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType


def _check_float(op: str, ins: Sequence[TensorType]) -> None:
    """ShapeError unless all inputs share one floating-point dtype."""
    if ins[0].dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: expects a floating-point input, got {ins[0]}")
    for t in ins[1:]:
        if t.dtype != ins[0].dtype:
            raise ShapeError(f"{op}: dtype mismatch between {ins[0]} and {t}")


def _no_extra_outputs(ctx: OnnxImportCtx) -> None:
    for i in range(1, ctx.num_outputs):
        if ctx.output_used(i):
            raise Unsupported(f"{ctx.op_type} output {i} is used")


# ----------------------------------------------------------------------------- batchnorm


def _bn_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    x = ins[0]
    _check_float("batchnorm", ins)
    if x.rank < 2:
        raise ShapeError(f"batchnorm: expects x[N,C,...] of rank >= 2, got {x}")
    for name, t in zip(("scale", "bias", "mean", "var"), ins[1:], strict=True):
        if t.shape != (x.shape[1],):
            raise ShapeError(
                f"batchnorm: {name} must have shape ({x.shape[1]},) for x {x}, got {t}"
            )
    return (x,)


def _bn_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    scale, bias, mean, var = (v.astype(np.float64).reshape(shape) for v in xs[1:])
    y = (x - mean) / np.sqrt(var + a["epsilon"]) * scale + bias
    return (y.astype(x.dtype),)


def _bn_import(ctx: OnnxImportCtx) -> Imported:
    if int(ctx.attr("training_mode", 0)):
        raise Unsupported("BatchNormalization with training_mode=1")
    if ctx.opset < 9 and int(ctx.attr("spatial", 1)) == 0:
        raise Unsupported("BatchNormalization with spatial=0")
    _no_extra_outputs(ctx)
    return Imported("batchnorm", {"epsilon": float(ctx.attr("epsilon", 1e-5))}, (0, 1, 2, 3, 4))


def _bn_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("BatchNormalization", node.inputs, {"epsilon": node.attrs["epsilon"]},
             outputs=node.outputs)


register(OpDef(
    name="batchnorm", family="norm",
    doc="Inference batch normalisation: (x - mean) / sqrt(var + epsilon) * scale + bias, "
        "per channel (axis 1).",
    inputs=("x", "scale", "bias", "mean", "var"),
    attrs=(AttrSpec("epsilon", "float", 1e-5),),
    infer=_bn_infer, reference=_bn_ref, flops=flops_per_output(2),
    onnx_import={"BatchNormalization": _bn_import}, onnx_export=_bn_export,
    input_roles=("any", "any", "any", "any", "positive"),
    samples=(
        Sample((f32(2, 3, 4, 5), f32(3), f32(3), f32(3), f32(3))),
        Sample((f32(4, 6), f32(6), f32(6), f32(6), f32(6)), {"epsilon": 1e-3}, note="rank 2"),
    ),
))

# ----------------------------------------------------------------------------- layernorm


def _ln_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    x = ins[0]
    _check_float("layernorm", ins)
    if x.rank == 0:
        raise ShapeError(f"layernorm: expects an input of rank >= 1, got {x}")
    norm = x.shape[normalize_axis("layernorm", a["axis"], x.rank):]
    for name, t in zip(("scale", "bias"), ins[1:], strict=False):
        s = t.shape
        if len(s) > len(norm) or any(d not in (1, n) for d, n in zip(s[::-1], norm[::-1],
                                                                      strict=False)):
            raise ShapeError(
                f"layernorm: {name} {t} does not broadcast to the normalised shape {norm} "
                f"of x {x} (axis {a['axis']})"
            )
    return (x,)


def _ln_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    axes = tuple(range(normalize_axis("layernorm", a["axis"], x.ndim), x.ndim))
    x64 = x.astype(np.float64)
    centred = x64 - x64.mean(axis=axes, keepdims=True)
    var = np.mean(centred * centred, axis=axes, keepdims=True)
    y = centred / np.sqrt(var + a["epsilon"]) * xs[1]
    if len(xs) > 2:
        y = y + xs[2]
    return (y.astype(x.dtype),)


def _ln_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    return (6 + (len(ins) > 2)) * ins[0].numel


def _ln_import(ctx: OnnxImportCtx) -> Imported:
    _no_extra_outputs(ctx)
    attrs = {"axis": int(ctx.attr("axis", -1)), "epsilon": float(ctx.attr("epsilon", 1e-5))}
    return Imported("layernorm", attrs, (0, 1, 2) if ctx.has_input(2) else (0, 1))


def _ln_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    if ctx.opset < 17:
        raise ShapeError(
            f"layernorm: ONNX LayerNormalization needs opset >= 17, exporting at opset {ctx.opset}"
        )
    attrs = {"axis": node.attrs["axis"], "epsilon": node.attrs["epsilon"]}
    ctx.emit("LayerNormalization", node.inputs, attrs, outputs=node.outputs)


register(OpDef(
    name="layernorm", family="norm",
    canonicalize=canon_axis(),
    doc="Layer normalisation over axes [axis, rank): (x - mean) / sqrt(var + epsilon) * scale "
        "+ bias.",
    inputs=("x", "scale", "bias"), min_inputs=2,
    attrs=(AttrSpec("axis", "int", -1), AttrSpec("epsilon", "float", 1e-5)),
    infer=_ln_infer, reference=_ln_ref, flops=_ln_flops,
    onnx_import={"LayerNormalization": _ln_import}, onnx_export=_ln_export,
    samples=(
        Sample((f32(2, 5, 8), f32(8), f32(8))),
        Sample((f32(2, 3, 4, 5), f32(4, 5)), {"axis": 2, "epsilon": 1e-3}, note="no bias"),
        Sample((f32(3, 4, 6), f32(4, 6), f32(6)), {"axis": -2}, note="broadcast bias"),
    ),
))

# ----------------------------------------------------------------------------- softmax


def _softmax_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    _check_float("softmax", ins)
    normalize_axis("softmax", a["axis"], ins[0].rank)
    return (ins[0],)


def _softmax_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0].astype(np.float64)
    with np.errstate(invalid="ignore"):  # a row of -inf is NaN, as in ONNX
        e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return ((e / e.sum(axis=a["axis"], keepdims=True)).astype(xs[0].dtype),)


def _softmax_import(ctx: OnnxImportCtx) -> Imported:
    rank = ctx.input_type(0).rank
    if ctx.opset >= 13:
        return Imported("softmax", {"axis": int(ctx.attr("axis", -1))}, (0,))
    axis = normalize_axis("softmax", int(ctx.attr("axis", 1)), rank)
    if axis != rank - 1:
        raise Unsupported(f"Softmax-{ctx.opset} with axis {axis} (flattens to 2-D)")
    return Imported("softmax", {"axis": -1}, (0,))


def _softmax_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    rank = node.in_types[0].rank
    axis = normalize_axis("softmax", node.attrs["axis"], rank)
    if ctx.opset >= 13 or axis == rank - 1:
        ctx.emit("Softmax", node.inputs, {"axis": axis}, outputs=node.outputs)
        return
    # before opset 13 Softmax flattens to 2-D at `axis`: move the axis last instead
    perm = [i for i in range(rank) if i != axis] + [axis]
    inverse = [perm.index(i) for i in range(rank)]
    (t,) = ctx.emit("Transpose", node.inputs, {"perm": perm})
    (s,) = ctx.emit("Softmax", [t], {"axis": rank - 1})
    ctx.emit("Transpose", [s], {"perm": inverse}, outputs=node.outputs)


register(OpDef(
    name="softmax", family="norm", doc="exp(x) / sum(exp(x)) along axis.",
    canonicalize=canon_axis(),
    inputs=("x",), attrs=(AttrSpec("axis", "int", -1),),
    infer=_softmax_infer, reference=_softmax_ref, flops=flops_per_output(5),
    onnx_import={"Softmax": _softmax_import}, onnx_export=_softmax_export,
    samples=(Sample((f32(3, 7),)), Sample((f32(2, 5, 3, 4),), {"axis": 1})),
))

# ----------------------------------------------------------------------------- reductions


def _norm_axes(op: str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    if not axes:
        raise ShapeError(f"{op}: axes must be non-empty")
    out = tuple(sorted(normalize_axis(op, ax, rank) for ax in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {tuple(axes)} for rank {rank}")
    return out


def _reduce_infer(op: str) -> InferFn:
    def infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
        x = ins[0]
        if x.rank == 0:
            raise ShapeError(f"{op}: cannot reduce a scalar {x}")
        axes = _norm_axes(op, a["axes"], x.rank)
        if a["keepdims"]:
            return (x.with_shape(1 if i in axes else d for i, d in enumerate(x.shape)),)
        return (x.with_shape(d for i, d in enumerate(x.shape) if i not in axes),)

    return infer


def _reduce_ref(op: str) -> RefFn:
    fn = np.mean if op == "reduce_mean" else np.sum

    def ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
        x = xs[0]
        axes = _norm_axes(op, a["axes"], x.ndim)
        acc = np.float64 if np.issubdtype(x.dtype, np.floating) else None
        y = fn(x, axis=axes, keepdims=a["keepdims"], dtype=acc)
        return (np.asarray(y).astype(x.dtype),)

    return ref


def _reduce_flops(op: str) -> CostFn:
    def flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
        return ins[0].numel + (op == "reduce_mean") * outs[0].numel

    return flops


def _reduce_import(op: str, axes_input_from: int) -> ImportFn:
    """Importer; ``axes`` is an input from opset ``axes_input_from`` on, an attribute before."""

    def fn(ctx: OnnxImportCtx) -> Imported:
        rank = ctx.input_type(0).rank
        if rank == 0:
            raise Unsupported(f"{ctx.op_type} of a scalar")
        axes: list[int] = []
        if ctx.opset >= axes_input_from:
            if ctx.has_input(1):
                v = ctx.const_input(1)
                if v is None:
                    raise Unsupported(f"{ctx.op_type} axes input is not a constant")
                axes = [int(i) for i in np.asarray(v).reshape(-1)]
            if not axes and int(ctx.attr("noop_with_empty_axes", 0)):
                raise Unsupported(f"{ctx.op_type} with empty axes and noop_with_empty_axes=1")
        else:
            axes = [int(i) for i in ctx.attr("axes", None) or ()]
        attrs = {
            "axes": _norm_axes(op, axes or range(rank), rank),
            "keepdims": bool(ctx.attr("keepdims", 1)),
        }
        return Imported(op, attrs, (0,))

    return fn


def _reduce_export(op_type: str, axes_input_from: int) -> ExportFn:
    def fn(ctx: OnnxExportCtx, node: ExportNode) -> None:
        axes = list(_norm_axes(node.op, node.attrs["axes"], node.in_types[0].rank))
        keep = int(node.attrs["keepdims"])
        if ctx.opset >= axes_input_from:
            axes_name = ctx.const(np.array(axes, np.int64), f"{node.op}_axes")
            ctx.emit(op_type, [node.inputs[0], axes_name], {"keepdims": keep},
                     outputs=node.outputs)
        else:
            ctx.emit(op_type, node.inputs, {"axes": axes, "keepdims": keep},
                     outputs=node.outputs)

    return fn


for _op, _onnx, _from, _doc in (
    ("reduce_mean", "ReduceMean", 18, "Mean"),
    ("reduce_sum", "ReduceSum", 13, "Sum"),
):
    register(OpDef(
        name=_op, family="norm", canonicalize=canon_axes(),
        doc=f"{_doc} over axes (non-empty, may be negative); reduced axes kept as 1 if keepdims.",
        inputs=("x",),
        attrs=(AttrSpec("axes", "ints", doc="axes to reduce"), AttrSpec("keepdims", "bool", True)),
        infer=_reduce_infer(_op), reference=_reduce_ref(_op), flops=_reduce_flops(_op),
        onnx_import={_onnx: _reduce_import(_op, _from)},
        onnx_export=_reduce_export(_onnx, _from),
        samples=(
            Sample((f32(2, 3, 4, 5),), {"axes": (2, 3)}),
            Sample((f32(2, 3, 4),), {"axes": (-1, 0), "keepdims": False}),
        ),
    ))

__all__: list[str] = []
