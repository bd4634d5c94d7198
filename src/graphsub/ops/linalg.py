"""Linear algebra family: ``matmul`` (numpy semantics, fused activation) and ``gemm`` (ONNX).

* ``matmul(a, b)`` -- ``numpy.matmul``: the last two axes multiply, leading (batch) axes
  broadcast; a 1-D ``a`` is a row vector and a 1-D ``b`` a column vector, and the added axis is
  removed from the result.  Then the fused activation ``act``.
* ``gemm(a[M,K], b[K,N] [, c])`` -- ``alpha * a' @ b' + beta * c`` with ``a'``/``b'`` optionally
  transposed (``trans_a``/``trans_b``) and ``c`` unidirectionally broadcast to ``(M, N)``.

FLOPs: ``2*M*N*K`` per batch element, plus one per output for a fused activation; ``gemm``
adds two per output (scale and add) when ``c`` is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.common import ACTS, apply_act, emit_with_act
from graphsub.ops.registry import (
    AttrSpec,
    ExportNode,
    OnnxExportCtx,
    OpDef,
    Sample,
    broadcast_shapes,
    f32,
    numel,
    register,
    simple_import,
)
from graphsub.ops.types import TensorType, np_dtype

# ----------------------------------------------------------------------------- matmul


def _matmul_dims(a: TensorType, b: TensorType) -> tuple[tuple[int, ...], int, int, int]:
    """(batch shape, M, K, N) of ``a @ b``; ShapeError if they do not multiply."""
    if a.rank == 0 or b.rank == 0:
        raise ShapeError(f"matmul: operands must have rank >= 1, got {a} and {b}")
    if a.dtype != b.dtype:
        raise ShapeError(f"matmul: dtype mismatch {a} vs {b}")
    sa = a.shape if a.rank > 1 else (1, *a.shape)
    sb = b.shape if b.rank > 1 else (*b.shape, 1)
    if sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {a} @ {b} ({sa[-1]} vs {sb[-2]})")
    batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
    return batch, sa[-2], sa[-1], sb[-1]


def _matmul_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    x, y = ins
    batch, m, _, n = _matmul_dims(x, y)
    shape = (*batch, *((m,) if x.rank > 1 else ()), *((n,) if y.rank > 1 else ()))
    return (TensorType(shape, x.dtype),)


def _matmul_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    return (apply_act(np.asarray(np.matmul(xs[0], xs[1])), a["act"]),)


def _matmul_flops(ins: Sequence[TensorType], outs: Sequence[TensorType],
                  a: Mapping[str, Any]) -> int:
    batch, m, k, n = _matmul_dims(ins[0], ins[1])
    return 2 * numel(batch) * m * k * n + (a["act"] != "none") * outs[0].numel


def _matmul_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    emit_with_act(ctx, "MatMul", node.inputs, {}, node.attrs["act"], node.outputs)


register(OpDef(
    name="matmul", family="linalg",
    doc="numpy.matmul (batched, broadcasting leading axes; 1-D operands as in numpy), "
        "then the fused activation.",
    inputs=("a", "b"),
    attrs=(AttrSpec("act", "str", "none", "fused activation", choices=ACTS),),
    infer=_matmul_infer, reference=_matmul_ref, flops=_matmul_flops,
    onnx_import={"MatMul": simple_import("matmul")}, onnx_export=_matmul_export,
    samples=(
        Sample((f32(4, 6), f32(6, 5)), {"act": "relu"}),
        Sample((f32(2, 1, 3, 4), f32(3, 4, 2)), {"act": "tanh"}, note="broadcast batch"),
        Sample((f32(4,), f32(2, 4, 3)), note="1-D a"),
        Sample((f32(2, 3, 4), f32(4,)), {"act": "sigmoid"}, note="1-D b"),
    ),
))

# ----------------------------------------------------------------------------- gemm


def _gemm_dims(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[int, int, int]:
    """(M, K, N) of a gemm; ShapeError on bad ranks, dims or c."""
    x, y = ins[0], ins[1]
    if x.rank != 2 or y.rank != 2:
        raise ShapeError(f"gemm: operands must be matrices, got {x} and {y}")
    for t in ins[1:]:
        if t.dtype != x.dtype:
            raise ShapeError(f"gemm: dtype mismatch between {x} and {t}")
    m, k = x.shape[::-1] if a["trans_a"] else x.shape
    k2, n = y.shape[::-1] if a["trans_b"] else y.shape
    if k != k2:
        raise ShapeError(
            f"gemm: inner dimensions differ: {x} (trans_a={a['trans_a']}) and {y} "
            f"(trans_b={a['trans_b']}) give K={k} vs {k2}"
        )
    if len(ins) > 2:
        c = ins[2].shape
        if len(c) > 2 or any(d not in (1, full) for d, full in zip(c[::-1], (n, m), strict=False)):
            raise ShapeError(f"gemm: c {ins[2]} does not broadcast to ({m}, {n})")
    return m, k, n


def _gemm_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    m, _, n = _gemm_dims(ins, a)
    return (TensorType((m, n), ins[0].dtype),)


def _gemm_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0].T if a["trans_a"] else xs[0]
    y = xs[1].T if a["trans_b"] else xs[1]
    out = a["alpha"] * (x @ y)
    if len(xs) > 2:
        out = out + a["beta"] * xs[2]
    return (np.asarray(out).astype(xs[0].dtype),)


def _gemm_flops(ins: Sequence[TensorType], outs: Sequence[TensorType],
                a: Mapping[str, Any]) -> int:
    m, k, n = _gemm_dims(ins, a)
    return 2 * m * k * n + 2 * m * n * (len(ins) > 2)


_GEMM_ATTRS = {"alpha": "alpha", "beta": "beta", "transA": "trans_a", "transB": "trans_b"}


def _gemm_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    a = node.attrs
    attrs = {"alpha": a["alpha"], "beta": a["beta"],
             "transA": int(a["trans_a"]), "transB": int(a["trans_b"])}
    inputs = list(node.inputs)
    if len(inputs) == 2 and ctx.opset < 11:  # c became optional in opset 11
        attrs["beta"] = 0.0
        inputs.append(ctx.const(np.zeros((1,), np_dtype(node.in_types[0].dtype)), "gemm_c"))
    ctx.emit("Gemm", inputs, attrs, outputs=node.outputs)


register(OpDef(
    name="gemm", family="linalg",
    doc="alpha * op(a) @ op(b) + beta * c, op = transpose if trans_a/trans_b; c broadcast "
        "unidirectionally to (M, N).",
    inputs=("a", "b", "c"), min_inputs=2,
    attrs=(
        AttrSpec("alpha", "float", 1.0),
        AttrSpec("beta", "float", 1.0),
        AttrSpec("trans_a", "bool", False),
        AttrSpec("trans_b", "bool", False),
    ),
    infer=_gemm_infer, reference=_gemm_ref, flops=_gemm_flops,
    onnx_import={"Gemm": simple_import("gemm", _GEMM_ATTRS)},
    onnx_export=_gemm_export,
    samples=(
        Sample((f32(3, 4), f32(4, 5), f32(5))),
        Sample((f32(4, 3), f32(5, 4), f32(3, 1)),
               {"alpha": 0.5, "beta": 2.0, "trans_a": True, "trans_b": True}),
        Sample((f32(3, 4), f32(5, 4)), {"trans_b": True, "alpha": 1.5}, note="no c"),
    ),
))

__all__: list[str] = []
