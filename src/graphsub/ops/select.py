"""Selection operators: ``isnan`` and ``where``.

Exporters spell masked attention with them: torch's ``_safe_softmax`` (the math path of
``scaled_dot_product_attention``) is exported as ``Where(IsNaN(Softmax(x)), 0, Softmax(x))``, so that a row the mask
fills with ``-inf`` entirely gives zeros instead of NaN, and attention masks are built as ``Where(keep, 0, fill)``.
Modelled so that rules can see through them (:mod:`graphsub.rules.library.cpu`'s ``cpu_softmax_nan_guard``);
ONNX semantics, numpy/ONNX broadcasting for ``where``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.registry import (
    OpDef,
    Sample,
    broadcast_shapes,
    f32,
    flops_per_output,
    register,
    simple_export,
    simple_import,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType

ONE = flops_per_output(1)


def _bool(*shape: int) -> TensorType:
    return TensorType(tuple(shape), "bool")


def _isnan_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    if ins[0].dtype not in FLOAT_DTYPES:
        raise ShapeError(f"isnan: input must be floating point, got {ins[0].dtype}")
    return (TensorType(ins[0].shape, "bool"),)


register(OpDef(
    name="isnan", family="select", doc="True where x is NaN (a boolean tensor of x's shape).",
    inputs=("x",), attrs=(), infer=_isnan_infer,
    reference=lambda xs, a: (np.isnan(xs[0]),),
    flops=ONE,
    onnx_import={"IsNaN": simple_import("isnan")}, onnx_export=simple_export("IsNaN"),
    samples=(Sample((f32(2, 3, 4),)),),
))


def _where_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    cond, x, y = ins
    if cond.dtype != "bool":
        raise ShapeError(f"where: condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise ShapeError(f"where: dtype mismatch {x.dtype} vs {y.dtype}")
    return (TensorType(broadcast_shapes("where", cond.shape, x.shape, y.shape), x.dtype),)


def _where_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    return (np.asarray(np.where(xs[0], xs[1], xs[2])).astype(xs[1].dtype),)


register(OpDef(
    name="where", family="select", doc="x where cond is true, else y, with numpy broadcasting of all three.",
    inputs=("cond", "x", "y"), attrs=(), infer=_where_infer, reference=_where_ref,
    flops=ONE,
    onnx_import={"Where": simple_import("where")}, onnx_export=simple_export("Where"),
    samples=(
        Sample((_bool(2, 3, 4), f32(2, 3, 4), f32(2, 3, 4))),
        Sample((_bool(1, 1, 3, 4), f32(), f32(2, 2, 3, 4)), note="broadcast condition, scalar branch"),
    ),
))

__all__ = ["ONE"]
