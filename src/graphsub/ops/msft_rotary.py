"""onnxruntime's rotary embedding kernel (``com.microsoft::RotaryEmbedding``) as the IR op ``ms_rotary``: a decoder's
rotary position embedding of q or k in one kernel, where it is not moved into the attention (:mod:`graphsub.ops.
msft_gqa`'s ``cos``/``sin``).

* ``ms_rotary(x[B,N,S,hd], cos[B,1,S,hd/2], sin[B,1,S,hd/2])`` -> ``[B,N,S,hd]``: each head of each token rotated by
  that token's angles. ``interleaved`` 0 (Hugging Face's ``rotate_half``, Llama, Qwen2, Mistral): the halves ``x1``,
  ``x2`` of a head become ``x1 * cos - x2 * sin`` and ``x2 * cos + x1 * sin``; ``interleaved`` 1 (GPT-J's
  ``rotate_every_two``): the even and odd elements ``xe``, ``xo`` become ``xe * cos - xo * sin`` and
  ``xo * cos + xe * sin``, in place.

The node's ``cos_cache`` and ``sin_cache`` are ``cos`` and ``sin`` as (B*S, hd/2) rows and its ``position_ids``
``arange(B*S)`` as (B, S), computed from shapes when the model runs, so that token (b, s) reads its own row: exact for
any position ids (a cache indexed by position is bounded by its length) and symbolic lengths stay symbolic. Partial
rotary (``rotary_embedding_dim``) and the kernel's 3-D input are not modelled (such nodes stay opaque). FLOPs: 3 per
element.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.msft import MS
from graphsub.ops.registry import AttrSpec, ExportNode, OnnxExportCtx, OpDef, Sample, f32, register
from graphsub.ops.types import FLOAT_DTYPES, TensorType

OP = "ms_rotary"


def _infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    x, cos, sin = ins
    if x.dtype not in FLOAT_DTYPES or cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise ShapeError(f"{OP}: expects x, cos and sin of one floating-point type, got {x}, {cos}, {sin}")
    if x.rank != 4 or x.shape[3] % 2:
        raise ShapeError(f"{OP}: expects x [B,N,S,hd] with an even head size, got {x}")
    b, _, s, hd = x.shape
    if cos.shape != (b, 1, s, hd // 2) or sin.shape != cos.shape:
        raise ShapeError(f"{OP}: cos and sin must be (B, 1, S, hd/2) = {(b, 1, s, hd // 2)}, got {cos}, {sin}")
    if a["interleaved"] not in (0, 1):
        raise ShapeError(f"{OP}: interleaved is 0 or 1, got {a['interleaved']}")
    return (x,)


def rotary_ref(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: int) -> np.ndarray:
    """``x`` (B, N, S, hd) rotated per head by each token's ``cos``, ``sin`` (B, 1, S, hd/2) (float64 inside, in
    ``x``'s type): by halves, or by even/odd pairs where ``interleaved``."""
    xs = x.astype(np.float64)
    c, s = cos.astype(np.float64), sin.astype(np.float64)
    h = x.shape[3] // 2
    a, b = (xs[..., 0::2], xs[..., 1::2]) if interleaved else (xs[..., :h], xs[..., h:])
    first, second = a * c - b * s, b * c + a * s
    out = np.stack([first, second], axis=-1).reshape(x.shape) if interleaved else \
        np.concatenate([first, second], axis=-1)
    return out.astype(x.dtype)


def dim_of(ctx: OnnxExportCtx, value: str, axis: int) -> str:
    """A 1-element int64 tensor holding ``value``'s size on ``axis`` at run time."""
    if ctx.opset >= 15:
        return ctx.emit("Shape", [value], {"start": axis, "end": axis + 1})[0]
    shape = ctx.emit("Shape", [value])[0]
    return ctx.emit("Gather", [shape, ctx.const(np.array([axis], np.int64), "axis")], {"axis": 0})[0]


def token_rows(ctx: OnnxExportCtx, cos: str) -> str:
    """``arange(B*S)`` as (B, S) for ``cos`` (B, 1, S, ...) at run time: the position ids that make token (b, s) read
    row ``b*S + s`` of a cache of each token's rows (see the module docstring). Five kernels, every layer's the same
    (merged by onnxruntime's common subexpression elimination)."""
    dims = ctx.emit("Gather", [ctx.emit("Shape", [cos])[0], ctx.const(np.array([0, 2], np.int64), "batch_seq")],
                    {"axis": 0})[0]
    count = ctx.emit("ReduceProd", [dims], {"keepdims": 0})[0]
    zero, one = ctx.const(np.array(0, np.int64), "zero_i64"), ctx.const(np.array(1, np.int64), "one_i64")
    return ctx.emit("Reshape", [ctx.emit("Range", [zero, count, one])[0], dims])[0]


def _export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, cos, sin = node.inputs
    rows = ctx.const(np.array([-1, node.in_types[0].shape[3] // 2], np.int64), "rotary_rows")
    cos_rows, sin_rows = (ctx.emit("Reshape", [v, rows])[0] for v in (cos, sin))
    ctx.emit("RotaryEmbedding", [x, token_rows(ctx, cos), cos_rows, sin_rows],
             {"interleaved": node.attrs["interleaved"]}, outputs=node.outputs, domain=MS)


register(OpDef(
    name=OP, family="msft",
    doc="onnxruntime RotaryEmbedding on heads [B,N,S,hd]: each token's rotation by its cos, sin (B,1,S,hd/2), by "
        "halves (rotate_half) or by even/odd pairs (interleaved: rotate_every_two).",
    inputs=("x", "cos", "sin"),
    attrs=(AttrSpec("interleaved", "int", 0),),
    infer=_infer,
    reference=lambda xs, a: (rotary_ref(xs[0], xs[1], xs[2], a["interleaved"]),),
    flops=lambda ins, outs, a: 3 * int(np.prod(ins[0].shape)),
    onnx_export=_export,
    onnx_import_note="a RotaryEmbedding node in a file stays opaque: its cos and sin caches are indexed by "
                     "position ids, which ms_rotary does not model",
    samples=(
        Sample((f32(1, 4, 1, 16), f32(1, 1, 1, 8), f32(1, 1, 1, 8)), {}, note="a decode step, by halves"),
        Sample((f32(2, 3, 5, 8), f32(2, 1, 5, 4), f32(2, 1, 5, 4)), {}, note="a batch of prompts, head size 8"),
        Sample((f32(2, 2, 3, 16), f32(2, 1, 3, 8), f32(2, 1, 3, 8)), {"interleaved": 1},
               note="interleaved (rotate_every_two)"),
    ),
))

__all__ = ["OP", "dim_of", "rotary_ref", "token_rows"]
