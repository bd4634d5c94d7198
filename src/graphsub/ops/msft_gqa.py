"""onnxruntime's grouped-query attention with a key/value cache (``com.microsoft::GroupQueryAttention``) as the IR op
``ms_gqa``: the attention of a decoder layer, with the cache concatenation inside.

* ``ms_gqa(q[B,S,N*hd], k[B,S,Nkv*hd], v[B,S,Nkv*hd], past_key[B,Nkv,P,hd], past_value[B,Nkv,P,hd]
  [, attention_bias [, cos[B,1,S,hd/2], sin[B,1,S,hd/2]]])`` -> ``(out[B,S,N*hd], present_key[B,Nkv,P+S,hd],
  present_value[B,Nkv,P+S,hd])``:
  the presents are ``concat(past, new, axis=2)`` with the new keys/values split into ``kv_num_heads`` heads; query
  head ``n`` attends key/value head ``n // (N / Nkv)`` (the exporters' repeat-kv: ``unsqueeze(kv, 2)``, expand,
  reshape); logits ``q k^T * scale (+ attention_bias (B or 1, N or 1, S, P+S))`` are causal (query row ``i`` sees
  keys ``0 .. P + i``); a row that sees no key (every logit -inf or at float32's lowest) is 0.
  ``scale`` is stored explicitly (0 on import = ``1/sqrt(hd)``). With ``cos`` and ``sin`` (each new token's, as the
  exporters compute them from the position ids), q and k are first rotated as Hugging Face's ``rotate_half`` rotary
  embedding does: ``x * [cos, cos] + [-x2, x1] * [sin, sin]`` per head, ``x1``, ``x2`` the halves of a head; the
  presents hold the rotated keys.

The ONNX node needs three inputs the IR does not model, all derived from shapes when the model runs (so a written
model keeps its symbolic lengths): ``seqlens_k`` = ``P + S - 1`` per batch row, ``total_sequence_length`` =
``P + S`` and ``query_seqlens`` = ``S`` per batch row, which lets onnxruntime's CPU kernel run a batch of several
new tokens on a past (without it the kernel refuses batch > 1 with sequence > 1 and a past). They are read from the
attention bias's shape when it has the batch (one computation for every layer, merged by onnxruntime's common
subexpression elimination), else from ``q``'s and ``past_key``'s. With ``cos`` and ``sin`` the node rotates q and k
itself (``do_rotary``): its ``cos_cache`` is ``cos`` as (B*S, hd/2) rows and its ``position_ids`` ``arange(B*S)`` as
(B, S), so that token (b, s) reads its own row -- exact for any position ids, where a cache indexed by position
(onnxruntime-genai's) is bounded by its length; the kernel rotates heads whose size is a multiple of 16 only.
``ms_gqa_packed(qkv[B,S,(N+2*Nkv)*hd], past_key, past_value [, attention_bias [, cos, sin]])`` is the same attention on
one packed projection (q, k and v side by side on the last axis, as onnxruntime-genai's builder feeds the kernel): the
node reads it whole (its ``key`` and ``value`` left empty), so no Split runs before it.
Interleaved rotary embeddings, local windows, softcap,
quantized caches and a shared past/present buffer are not modelled (such nodes stay opaque). FLOPs: the two
products of every head, ``2*B*N*S*T*2*hd``, and 6 per logit for scale and softmax.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.msft import MS, check_attention_bias, scale_canon
from graphsub.ops.msft_rotary import dim_of, token_rows
from graphsub.ops.registry import AttrSpec, ExportNode, OnnxExportCtx, OpDef, Sample, f32, register
from graphsub.ops.types import FLOAT_DTYPES, TensorType

OP = "ms_gqa"
PACKED = "ms_gqa_packed"

#: onnxruntime's kernel rotates heads whose size is a multiple of this only
ROTARY_HEAD_MULTIPLE = 16
#: ONNX input positions of GroupQueryAttention's attention_bias and query_seqlens
_BIAS_AT, _QUERY_SEQLENS_AT = 10, 16


def _dims(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[int, int, int, int, int, int]:
    """(B, S, P, N, Nkv, hd); ShapeError on inconsistent inputs."""
    if ins[0].dtype not in FLOAT_DTYPES or any(t.dtype != ins[0].dtype for t in ins[1:]):
        raise ShapeError(f"{OP}: expects inputs of one floating-point type, got {', '.join(map(str, ins))}")
    q, k, v, pk, pv = ins[:5]
    n, nkv = a["num_heads"], a["kv_num_heads"]
    if (q.rank, k.rank, v.rank, pk.rank, pv.rank) != (3, 3, 3, 4, 4):
        raise ShapeError(f"{OP}: expects q, k, v [B,S,D] and pasts [B,Nkv,P,hd], got {q}, {k}, {v}, {pk}, {pv}")
    b, s, d = q.shape
    if n < 1 or nkv < 1 or n % nkv or d % n:
        raise ShapeError(f"{OP}: num_heads {n} must be a multiple of kv_num_heads {nkv} and divide D={d}")
    hd = d // n
    p = pk.shape[2]
    if k.shape != (b, s, nkv * hd) or v.shape != k.shape or pk.shape != (b, nkv, p, hd) or pv.shape != pk.shape:
        raise ShapeError(f"{OP}: k, v must be [B,S,Nkv*hd] = {(b, s, nkv * hd)} and the pasts [B,Nkv,P,hd], "
                         f"got {k}, {v}, {pk}, {pv}")
    if len(ins) > 5:
        check_attention_bias(OP, ins[5], (b, n, s, p + s))
    if len(ins) == 7 or (len(ins) == 8 and (hd % ROTARY_HEAD_MULTIPLE or ins[6].shape != (b, 1, s, hd // 2)
                                            or ins[7].shape != ins[6].shape)):
        raise ShapeError(f"{OP}: the rotary embedding needs a head size that is a multiple of {ROTARY_HEAD_MULTIPLE} "
                         f"and cos and sin of (B, 1, S, hd/2) = {(b, 1, s, hd // 2)}, got {', '.join(map(str, ins))}")
    return b, s, p, n, nkv, hd


def _infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    b, s, p, n, nkv, hd = _dims(ins, a)
    present = TensorType((b, nkv, p + s, hd), ins[0].dtype)
    return TensorType((b, s, n * hd), ins[0].dtype), present, present


def gqa_ref(xs: Sequence[np.ndarray], num_heads: int, kv_num_heads: int, scale: float) -> tuple[np.ndarray, ...]:
    """Grouped-query attention with a cache on numpy arrays (float64 inside): ``(out, present_key,
    present_value)``, as the module docstring says."""
    q, k, v, pk, pv = xs[:5]
    b, s, d = q.shape
    n, nkv = num_heads, kv_num_heads
    hd, p = d // n, pk.shape[2]
    if len(xs) > 6:
        q, k = (rotate_half(x, xs[6], xs[7], heads) for x, heads in ((q, n), (k, nkv)))
    present_k = np.concatenate([pk, k.reshape(b, s, nkv, hd).transpose(0, 2, 1, 3)], axis=2)
    present_v = np.concatenate([pv, v.reshape(b, s, nkv, hd).transpose(0, 2, 1, 3)], axis=2)
    qh = q.astype(np.float64).reshape(b, s, n, hd).transpose(0, 2, 1, 3)
    kh = np.repeat(present_k.astype(np.float64), n // nkv, axis=1)
    vh = np.repeat(present_v.astype(np.float64), n // nkv, axis=1)
    logits = (qh @ kh.transpose(0, 1, 3, 2)) * scale
    if len(xs) > 5:
        logits = logits + xs[5].astype(np.float64)
    t = p + s
    future = np.arange(t)[None, :] > p + np.arange(s)[:, None]
    # a logit at float32's lowest is masked as -inf is (onnxruntime's kernel; the exporters' masks use either)
    masked = future | (logits <= np.finfo(np.float32).min)
    logits = np.where(masked, -np.inf, logits)
    top = logits.max(axis=-1, keepdims=True)
    e = np.where(masked, 0.0, np.exp(logits - np.where(np.isfinite(top), top, 0.0)))
    total = e.sum(axis=-1, keepdims=True)
    probs = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    out = (probs @ vh).transpose(0, 2, 1, 3).reshape(b, s, d).astype(q.dtype)
    return out, present_k, present_v


def rotate_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, heads: int) -> np.ndarray:
    """``x`` (B, S, heads*hd) rotated per head by Hugging Face's ``rotate_half`` embedding with each token's
    ``cos``, ``sin`` (B, 1, S, hd/2), in ``x``'s type."""
    b, s, d = x.shape
    h = d // heads // 2
    xs = x.astype(np.float64).reshape(b, s, heads, 2, h)
    c = cos.astype(np.float64).reshape(b, s, 1, h)
    sn = sin.astype(np.float64).reshape(b, s, 1, h)
    x1, x2 = xs[..., 0, :], xs[..., 1, :]
    out = np.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], axis=3)
    return out.reshape(b, s, d).astype(x.dtype)


def _flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    b, s, p, n, nkv, hd = _dims(ins, a)
    return 4 * b * n * s * (p + s) * hd + 6 * b * n * s * (p + s) + (6 * b * s * (n + nkv) * hd if len(ins) > 6 else 0)


def _sizes(ctx: OnnxExportCtx, node: ExportNode) -> tuple[str, str, str, str]:
    """``seqlens_k``, ``total_sequence_length`` and ``query_seqlens`` computed from shapes (see the module
    docstring), and the total length as a 1-element int64 tensor."""
    q, pk = node.inputs[0], node.inputs[3]
    bias = node.inputs[5] if len(node.inputs) > 5 else ""
    if bias and node.in_types[5].shape[0] == node.in_types[0].shape[0]:
        batch, seq, total = (dim_of(ctx, bias, i) for i in (0, 2, 3))
    else:
        batch, seq = dim_of(ctx, q, 0), dim_of(ctx, q, 1)
        total = ctx.emit("Add", [dim_of(ctx, pk, 2), seq])[0]
    total32 = ctx.emit("Cast", [total], {"to": 6})[0]  # INT32
    one = ctx.const(np.ones(1, np.int32), "one_i32")
    seqlens = ctx.emit("Expand", [ctx.emit("Sub", [total32, one])[0], batch])[0]
    scalar = ctx.emit("Reshape", [total32, ctx.const(np.zeros(0, np.int64), "scalar_shape")])[0]
    query = ctx.emit("Expand", [ctx.emit("Cast", [seq], {"to": 6})[0], batch])[0]
    return seqlens, scalar, query, total


def _rotary(ctx: OnnxExportCtx, node: ExportNode, total: str) -> list[str]:
    """``cos_cache``, ``sin_cache`` and ``position_ids``: each token's cos and sin as (B*S, hd/2) rows, token (b, s)
    at row ``b*S + s`` (see the module docstring), then ``total`` rows of zeros (the kernel wants a cache at least as
    long as the total length, which it never reads beyond the rows the ids name)."""
    rows = ctx.const(np.array([-1, node.in_types[6].shape[3]], np.int64), "rotary_rows")
    zero1 = ctx.const(np.zeros(1, np.int64), "zero_1")
    pads = ctx.emit("Concat", [zero1, zero1, total, zero1], {"axis": 0})[0]
    cos, sin = (ctx.emit("Pad", [ctx.emit("Reshape", [node.inputs[i], rows])[0], pads])[0] for i in (6, 7))
    return [cos, sin, token_rows(ctx, node.inputs[6])]


def _export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    seqlens, total, query, total64 = _sizes(ctx, node)
    ins = [*node.inputs[:5], seqlens, total]
    rotary = len(node.inputs) > 6
    if rotary:
        ins += _rotary(ctx, node, total64)
    if len(node.inputs) > 5:
        ins += [""] * (_BIAS_AT - len(ins)) + [node.inputs[5]]
    ins += [""] * (_QUERY_SEQLENS_AT - len(ins)) + [query]
    attrs = {"num_heads": node.attrs["num_heads"], "kv_num_heads": node.attrs["kv_num_heads"],
             "scale": node.attrs["scale"]} | ({"do_rotary": 1, "rotary_interleaved": 0} if rotary else {})
    ctx.emit("GroupQueryAttention", ins, attrs, outputs=node.outputs, domain=MS)


register(OpDef(
    name=OP, family="msft", canonicalize=scale_canon,
    doc="onnxruntime GroupQueryAttention with past/present (no rotary, window or quantized cache): causal "
        "softmax(Q K^T * scale (+ attention_bias)) V per query head, key/value head n // (N/Nkv), the new k/v "
        "appended to the pasts; outputs (out [B,S,N*hd], present_key, present_value [B,Nkv,P+S,hd]).",
    inputs=("q", "k", "v", "past_key", "past_value", "attention_bias", "cos", "sin"), min_inputs=5,
    attrs=(AttrSpec("num_heads", "int"), AttrSpec("kv_num_heads", "int"), AttrSpec("scale", "float", 0.0)),
    infer=_infer,
    reference=lambda xs, a: gqa_ref(xs, a["num_heads"], a["kv_num_heads"], a["scale"]),
    flops=_flops,
    onnx_export=_export,
    onnx_import_note="a GroupQueryAttention node in a file stays opaque: its seqlens_k and total_sequence_length are "
                     "run-time inputs (the genai builder's come from the attention mask's sums), which ms_gqa does "
                     "not model",
    samples=(
        Sample((f32(1, 1, 32), f32(1, 1, 16), f32(1, 1, 16), f32(1, 2, 7, 8), f32(1, 2, 7, 8)),
               {"num_heads": 4, "kv_num_heads": 2}, note="a decode step, default scale"),
        Sample((f32(2, 3, 32), f32(2, 3, 16), f32(2, 3, 16), f32(2, 2, 5, 8), f32(2, 2, 5, 8), f32(2, 1, 3, 8)),
               {"num_heads": 4, "kv_num_heads": 2, "scale": 0.3}, note="a batch of chunks on a past, a bias"),
        Sample((f32(1, 4, 24), f32(1, 4, 24), f32(1, 4, 24), f32(1, 3, 0, 8), f32(1, 3, 0, 8)),
               {"num_heads": 3, "kv_num_heads": 3, "scale": 0.5}, note="a prompt on an empty past"),
        Sample((f32(2, 3, 64), f32(2, 3, 32), f32(2, 3, 32), f32(2, 2, 5, 16), f32(2, 2, 5, 16), f32(2, 1, 3, 8),
                f32(2, 1, 3, 8), f32(2, 1, 3, 8)),
               {"num_heads": 4, "kv_num_heads": 2, "scale": 0.3}, note="the rotary embedding inside"),
    ),
))

# ----------------------------------------------------------------------------- ms_gqa_packed


def _unpacked(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    """``ms_gqa``'s input types for ``ms_gqa_packed``'s: the packed projection as q, k and v."""
    if len(ins) < 3 or ins[0].rank != 3 or ins[1].rank != 4:
        raise ShapeError(f"{PACKED}: expects qkv [B,S,(N+2*Nkv)*hd] and pasts [B,Nkv,P,hd], got "
                         f"{', '.join(map(str, ins))}")
    b, s, d = ins[0].shape
    n, nkv, hd = a["num_heads"], a["kv_num_heads"], ins[1].shape[3]
    if d != (n + 2 * nkv) * hd:
        raise ShapeError(f"{PACKED}: qkv's last axis {d} is not (num_heads + 2 * kv_num_heads) * head size = "
                         f"{(n + 2 * nkv) * hd}")
    q, kv = TensorType((b, s, n * hd), ins[0].dtype), TensorType((b, s, nkv * hd), ins[0].dtype)
    return (q, kv, kv, *ins[1:])


def unpack(qkv: np.ndarray, num_heads: int, kv_num_heads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k and v of a packed projection (B, S, (N+2*Nkv)*hd)."""
    hd = qkv.shape[-1] // (num_heads + 2 * kv_num_heads)
    q, k, v = np.split(qkv, [num_heads * hd, (num_heads + kv_num_heads) * hd], axis=-1)
    return q, k, v


def _export_packed(ctx: OnnxExportCtx, node: ExportNode) -> None:
    unpacked = _unpacked(node.in_types, node.attrs)
    _export(ctx, dataclasses.replace(node, inputs=(node.inputs[0], "", "", *node.inputs[1:]), in_types=unpacked))


register(OpDef(
    name=PACKED, family="msft", canonicalize=scale_canon,
    doc="ms_gqa on one packed projection: q, k and v side by side on qkv's last axis ((N + 2*Nkv) * hd), read by "
        "onnxruntime's GroupQueryAttention whole (no Split before it); outputs as ms_gqa's.",
    inputs=("qkv", "past_key", "past_value", "attention_bias", "cos", "sin"), min_inputs=3,
    attrs=(AttrSpec("num_heads", "int"), AttrSpec("kv_num_heads", "int"), AttrSpec("scale", "float", 0.0)),
    infer=lambda ins, a: _infer(_unpacked(ins, a), a),
    reference=lambda xs, a: gqa_ref((*unpack(xs[0], a["num_heads"], a["kv_num_heads"]), *xs[1:]), a["num_heads"],
                                    a["kv_num_heads"], a["scale"]),
    flops=lambda ins, outs, a: _flops(_unpacked(ins, a), outs, a),
    onnx_export=_export_packed,
    onnx_import_note="a GroupQueryAttention node in a file stays opaque (see ms_gqa)",
    samples=(
        Sample((f32(1, 1, 64), f32(1, 2, 7, 8), f32(1, 2, 7, 8)), {"num_heads": 4, "kv_num_heads": 2},
               note="a decode step, default scale"),
        Sample((f32(2, 3, 64), f32(2, 2, 5, 8), f32(2, 2, 5, 8), f32(2, 1, 3, 8)),
               {"num_heads": 4, "kv_num_heads": 2, "scale": 0.3}, note="a batch of chunks on a past, a bias"),
        Sample((f32(2, 3, 128), f32(2, 2, 5, 16), f32(2, 2, 5, 16), f32(2, 1, 3, 8), f32(2, 1, 3, 8),
                f32(2, 1, 3, 8)),
               {"num_heads": 4, "kv_num_heads": 2, "scale": 0.3}, note="the rotary embedding inside"),
        Sample((f32(1, 4, 72), f32(1, 3, 0, 8), f32(1, 3, 0, 8)), {"num_heads": 3, "kv_num_heads": 3, "scale": 0.5},
               note="a prompt on an empty past, as many key/value heads as query heads"),
    ),
))

__all__ = ["PACKED", "ROTARY_HEAD_MULTIPLE", "gqa_ref", "rotate_half", "unpack"]
