"""Training-mode operators: ``batchnorm_train``.

* ``batchnorm_train(x, scale, bias)`` -- batch normalisation with the statistics of the batch itself, as PyTorch's
  ``BatchNorm2d`` computes in ``train()`` mode: mean and *biased* variance over every axis but the channels
  (axis 1), then ``(x - mean) / sqrt(var + epsilon) * scale + bias``. Training graphs
  (:mod:`graphsub.training`) write every ``batchnorm`` this way by default; the running statistics it would update
  are not outputs (they do not change the loss or the gradients of the step).

It imports ``BatchNormalization(training_mode=1)`` when the running-statistics outputs are unused (PyTorch's
export of a ``train()``-mode model). The ONNX export is the decomposition (ReduceMean, Sub, Mul, ReduceMean, Add,
Sqrt, Div, Mul, Add): onnxruntime's standard build runs ``BatchNormalization(training_mode=1)`` only in its training
build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
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
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType


def _infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    x = ins[0]
    if x.dtype not in FLOAT_DTYPES or x.rank < 2:
        raise ShapeError(f"batchnorm_train: expects a floating-point x[N,C,...] of rank >= 2, got {x}")
    for name, t in zip(("scale", "bias"), ins[1:], strict=True):
        if t.shape != (x.shape[1],) or t.dtype != x.dtype:
            raise ShapeError(f"batchnorm_train: {name} must be {x.dtype}[{x.shape[1]}] for x {x}, got {t}")
    return (x,)


def _axes(rank: int) -> tuple[int, ...]:
    return tuple(i for i in range(rank) if i != 1)


def _ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    x64 = x.astype(np.float64)
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    mean = x64.mean(axis=_axes(x.ndim), keepdims=True)
    centred = x64 - mean
    var = (centred * centred).mean(axis=_axes(x.ndim), keepdims=True)
    y = centred / np.sqrt(var + a["epsilon"]) * xs[1].astype(np.float64).reshape(shape)
    y = y + xs[2].astype(np.float64).reshape(shape)
    return (y.astype(x.dtype),)


def _export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, scale, bias = node.inputs
    t = node.in_types[0]
    axes = list(_axes(t.rank))
    dt = np.dtype(t.dtype)
    shape = ctx.const(np.array([t.shape[1]] + [1] * (t.rank - 2), np.int64), "bn_shape")
    (mean,) = ctx.emit("ReduceMean", [x], {"axes": axes, "keepdims": 1})
    (centred,) = ctx.emit("Sub", [x, mean])
    (sq,) = ctx.emit("Mul", [centred, centred])
    (var,) = ctx.emit("ReduceMean", [sq], {"axes": axes, "keepdims": 1})
    (veps,) = ctx.emit("Add", [var, ctx.const(np.array(node.attrs["epsilon"], dt), "bn_eps")])
    (std,) = ctx.emit("Sqrt", [veps])
    (norm,) = ctx.emit("Div", [centred, std])
    (s,) = ctx.emit("Reshape", [scale, shape])
    (b,) = ctx.emit("Reshape", [bias, shape])
    (scaled,) = ctx.emit("Mul", [norm, s])
    ctx.emit("Add", [scaled, b], outputs=node.outputs)


def _import(ctx: OnnxImportCtx) -> Imported:
    """``BatchNormalization(training_mode=1)`` whose running-statistics outputs nobody reads (PyTorch's exporter
    writes every ``train()``-mode BatchNorm so)."""
    if not int(ctx.attr("training_mode", 0)):
        raise Unsupported("inference BatchNormalization is 'batchnorm'")
    for i in range(1, ctx.num_outputs):
        if ctx.output_used(i):
            raise Unsupported(f"BatchNormalization running-statistics output {i} is used")
    return Imported("batchnorm_train", {"epsilon": float(ctx.attr("epsilon", 1e-5))}, (0, 1, 2))


register(OpDef(
    name="batchnorm_train", family="norm",
    doc="Training-mode batch normalisation: the batch's own mean and biased variance over every axis but 1.",
    inputs=("x", "scale", "bias"),
    attrs=(AttrSpec("epsilon", "float", 1e-5),),
    infer=_infer, reference=_ref, flops=lambda ins, outs, a: 8 * ins[0].numel,
    onnx_export=_export, onnx_import={"BatchNormalization": _import},
    samples=(
        Sample((f32(4, 3, 5, 5), f32(3), f32(3))),
        Sample((f32(6, 8), f32(8), f32(8)), {"epsilon": 1e-3}, note="rank 2"),
    ),
))

__all__: list[str] = []
