"""onnxruntime's packed self-attention (``com.microsoft::Attention``) as the IR op ``ms_attention``.

* ``ms_attention(x[B,S,Din], w[Din, Dq+Dk+Dv], b[Dq+Dk+Dv] [, attention_bias])``: the Q/K/V projections of one input
  in a single packed weight, ``q = x @ w[:, :Dq] + b[:Dq]`` (then ``k``, ``v`` from the next
  columns), followed by :func:`graphsub.ops.msft.mha_ref`'s multi-head attention with
  ``num_heads`` heads and ``scale`` (0 on import = ``1/sqrt(Dq/H)``) and the optional additive
  ``attention_bias`` of the logits (B or 1, H or 1, S, S; ONNX input 5); out ``[B, S, Dv]``.
  ``qkv_hidden_sizes`` is stored explicitly (``(Dq, Dk, Dv)``; ``Dq == Dk``).

onnxruntime's CPU kernel pre-packs the weight once and runs the projection as one GEMM, then the
attention per (batch, head) in its thread pool; on this project's suite it ran ViT's self-attention
about 4% faster than MultiHeadAttention on the same projections (see
:mod:`graphsub.rules.library.ort_spelling`). Masks, past state, rotary embeddings and ``unidirectional`` are not
modelled (such nodes stay opaque). FLOPs: the projection GEMM and bias plus ``ms_mha``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.msft import MS, attention_inputs, check_attention_bias, f32_attr, mha_ref
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

OP = "ms_attention"


def _sizes(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[int, int, int]:
    x, w, b = ins[:3]
    if x.dtype not in FLOAT_DTYPES or w.dtype != x.dtype or b.dtype != x.dtype:
        raise ShapeError(f"{OP}: expects float inputs of one dtype, got {x}, {w}, {b}")
    if x.rank != 3 or w.rank != 2 or b.rank != 1 or w.shape[0] != x.shape[2] or b.shape[0] != w.shape[1]:
        raise ShapeError(f"{OP}: expects x[B,S,Din], w[Din,N], b[N], got {x}, {w}, {b}")
    sizes = tuple(a.get("qkv_hidden_sizes") or ())
    if not sizes:
        if w.shape[1] % 3:
            raise ShapeError(f"{OP}: packed width {w.shape[1]} is not three equal parts")
        sizes = (w.shape[1] // 3,) * 3
    h = a["num_heads"]
    if len(sizes) != 3 or sum(sizes) != w.shape[1] or sizes[0] != sizes[1] or min(sizes) < 1:
        raise ShapeError(f"{OP}: qkv_hidden_sizes {sizes} do not split the packed width {w.shape[1]} (Dq = Dk)")
    if h < 1 or sizes[0] % h or sizes[2] % h:
        raise ShapeError(f"{OP}: num_heads {h} must divide the hidden sizes {sizes}")
    if len(ins) > 3:
        check_attention_bias(OP, ins[3], (x.shape[0], h, x.shape[1], x.shape[1]))
    return sizes[0], sizes[1], sizes[2]


def _canon(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    if len(ins) >= 3 and ins[1].rank == 2 and not a.get("qkv_hidden_sizes") and ins[1].shape[1] % 3 == 0:
        a["qkv_hidden_sizes"] = (ins[1].shape[1] // 3,) * 3
    sizes = a.get("qkv_hidden_sizes")
    if a.get("scale") == 0.0 and sizes and a.get("num_heads"):
        a["scale"] = 1.0 / np.sqrt(sizes[0] / a["num_heads"])
    if isinstance(a.get("scale"), float):
        a["scale"] = f32_attr(a["scale"])
    return a


def _infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    _, _, dv = _sizes(ins, a)
    x = ins[0]
    return (TensorType((x.shape[0], x.shape[1], dv), x.dtype),)


def _ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x, w, b = xs[:3]
    dq, dk, _ = a["qkv_hidden_sizes"]  # canonical attributes: always explicit
    p = x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64)
    q, k, v = p[..., :dq], p[..., dq:dq + dk], p[..., dq + dk:]
    return (mha_ref(q, k, v, a["num_heads"], a["scale"], xs[3] if len(xs) > 3 else None).astype(x.dtype),)


def _flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    dq, _, dv = _sizes(ins, a)
    x, w = ins[0], ins[1]
    bsz, s = x.shape[0], x.shape[1]
    proj = 2 * bsz * s * w.shape[0] * w.shape[1] + bsz * s * w.shape[1]
    return proj + 2 * bsz * s * s * (dq + dv) + (6 + (len(ins) > 3)) * bsz * a["num_heads"] * s * s


def _import(ctx: OnnxImportCtx) -> Imported:
    for i in range(1, ctx.num_outputs):
        if ctx.output_used(i):
            raise Unsupported("Attention's present output is used (past state is not modelled)")
    if not ctx.has_input(2) or any(ctx.has_input(i) for i in (3, 4, *range(6, ctx.num_inputs))):
        raise Unsupported("Attention without a bias, or with a mask index or past state")
    if int(ctx.attr("unidirectional", 0)) or int(ctx.attr("do_rotary", 0)):
        raise Unsupported("Attention with unidirectional=1 or rotary embeddings")
    if int(ctx.attr("past_present_share_buffer", 0)):
        raise Unsupported("Attention with past_present_share_buffer")
    sizes = tuple(int(v) for v in ctx.attr("qkv_hidden_sizes", ()) or ())
    attrs = {"num_heads": int(ctx.attr("num_heads")), "scale": float(ctx.attr("scale", 0.0)),
             "qkv_hidden_sizes": sizes}
    return Imported(OP, attrs, (0, 1, 2, 5) if ctx.has_input(5) else (0, 1, 2))


def _export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    sizes = tuple(node.attrs["qkv_hidden_sizes"])
    attrs: dict[str, Any] = {"num_heads": node.attrs["num_heads"], "scale": node.attrs["scale"]}
    if len(set(sizes)) > 1:
        attrs["qkv_hidden_sizes"] = list(sizes)
    ctx.emit("Attention", attention_inputs(node.inputs, 3), attrs, outputs=node.outputs, domain=MS)


register(OpDef(
    name=OP, family="msft", canonicalize=_canon,
    doc="onnxruntime Attention (no mask index/past): q, k, v = split(x @ w + b) by qkv_hidden_sizes, then per "
        "head softmax(Q K^T * scale (+ attention_bias (B or 1, H or 1, S, S))) V; out [B,S,Dv]. scale 0 means "
        "1/sqrt(Dq/num_heads) and is stored as that value.",
    inputs=("x", "w", "b", "attention_bias"), min_inputs=3,
    attrs=(AttrSpec("num_heads", "int"), AttrSpec("scale", "float", 0.0),
           AttrSpec("qkv_hidden_sizes", "ints", (), "(Dq, Dk, Dv); empty = three equal parts")),
    infer=_infer, reference=_ref, flops=_flops,
    onnx_import={f"{MS}::Attention": _import}, onnx_export=_export,
    samples=(
        Sample((f32(2, 5, 8), f32(8, 24), f32(24)), {"num_heads": 2}, note="default scale"),
        Sample((f32(1, 7, 6), f32(6, 48), f32(48)), {"num_heads": 4, "scale": 0.3}),
        Sample((f32(1, 4, 8), f32(8, 40), f32(40)), {"num_heads": 2, "qkv_hidden_sizes": (12, 12, 16)},
               note="Dv differs"),
        Sample((f32(1, 5, 8), f32(8, 24), f32(24), f32(1, 2, 5, 5)), {"num_heads": 2, "scale": 1.0},
               note="attention bias per head (T5's position bias)"),
    ),
))

__all__ = ["OP"]
