"""PyTorch implementations of graphsub operators, for timing them on a GPU (:mod:`graphsub.cost.cuda`) and
for running graphs in PyTorch (:mod:`graphsub.frontends.torch_emit`, which emits modules calling this table).

``TORCH_OPS[op](xs, attrs) -> tuple of tensors`` mirrors the OpDef's numpy reference (checked on
every OpDef sample in ``tests/frontends/test_torch_ops.py``, on the CPU); ``attrs`` are a signature's
canonical attributes.  Every op but ``opaque`` is here, the weight transforms (``enlarge``,
``merge_gconv``) and constant generators (``const_*``, CPU tensors) included: the CUDA model never
runs those (they are folded before run time), but a trainable module must differentiate through them.
Everything is differentiable where torch is (indices come from numpy, data never leaves torch).

``split``, ``slice`` and ``expand`` materialise their results, as a split kernel does: torch's views
would make every consumer pay a hidden copy for reading a non-contiguous input, which a per-op timing
cannot see (measured on an H100: merged convs looked 10-15% slower end to end with views).
``resize`` uses ``F.interpolate`` for the linear modes it computes (half_pixel, pytorch_half_pixel
with output sizes > 1, align_corners) and index gathers (exact, as the reference) otherwise.

>>> import torch
>>> from graphsub.ir.node import make_sig
>>> from graphsub.ops.types import TensorType
>>> sig = make_sig("conv2d", {"pads": "SAME", "act": "relu"},
...                (TensorType((1, 4, 8, 8)), TensorType((6, 4, 3, 3))))
>>> run_sig(sig, [torch.ones(1, 4, 8, 8), torch.ones(6, 4, 3, 3)])[0].shape
torch.Size([1, 6, 8, 8])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from graphsub.ir.node import OpSig
from graphsub.ops.common import conv_out_hw
from graphsub.ops.conv import _enlarge_pads, _merge_mask
from graphsub.ops.layout import _linear_taps, _nearest_index, _pad_widths, _slice_bounds, _source_coords
from graphsub.ops.registry import get_op
from graphsub.ops.types import TensorType

T = torch.Tensor
A = Mapping[str, Any]
TorchFn = Callable[[Sequence[T], A], tuple[T, ...]]

ACTS: dict[str, Callable[[T], T]] = {"none": lambda x: x, "relu": torch.relu, "sigmoid": torch.sigmoid,
                                     "tanh": torch.tanh}


def _conv(xs: Sequence[T], a: A, act: Callable[[T], T], z: T | None = None) -> T:
    x, w = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 and xs[2] is not None else None
    t, left, b, r = a["pads"]
    if (t, left) == (b, r):
        pad: tuple[int, int] = (t, left)
    else:
        x, pad = F.pad(x, (left, r, t, b)), (0, 0)
    y = F.conv2d(x, w, bias, tuple(a["strides"]), pad, tuple(a["dilations"]), groups=x.shape[1] // w.shape[1])
    if z is not None:
        y = y + z
    return act(y)


def _pool(xs: Sequence[T], a: A, out_hw: tuple[int, int], avg: bool) -> T:
    """2-D pooling with explicit (possibly asymmetric) pads and ceil-mode output size."""
    x = xs[0]
    t, left, b, r = a["pads"]
    (kh, kw), (sh, sw) = a["kernel"], a["strides"]
    h, w = x.shape[2] + t + b, x.shape[3] + left + r
    extra_h, extra_w = max((out_hw[0] - 1) * sh + kh - h, 0), max((out_hw[1] - 1) * sw + kw - w, 0)
    if not avg:
        xp = F.pad(x, (left, r + extra_w, t, b + extra_h), value=float("-inf"))
        y = F.max_pool2d(xp, (kh, kw), (sh, sw))
        return ACTS[a["act"]](y[:, :, : out_hw[0], : out_hw[1]])
    ones = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
    cells = F.pad(ones, (left, r, t, b), value=1.0 if a["count_include_pad"] else 0.0)
    xp = F.pad(F.pad(x, (left, r, t, b)), (0, extra_w, 0, extra_h))
    cells = F.pad(cells, (0, extra_w, 0, extra_h))
    total = F.avg_pool2d(xp, (kh, kw), (sh, sw))
    count = F.avg_pool2d(cells, (kh, kw), (sh, sw))
    y = (total / count)[:, :, : out_hw[0], : out_hw[1]]
    return ACTS[a["act"]](y)


def _layernorm(x: T, scale: T, bias: T | None, axis: int, eps: float) -> T:
    shape = tuple(x.shape[axis:])
    if tuple(scale.shape) == shape and (bias is None or tuple(bias.shape) == shape):
        return F.layer_norm(x, shape, scale, bias, eps)
    y = F.layer_norm(x, shape, None, None, eps) * scale  # scale/bias broadcast against the normalized dims
    return y if bias is None else y + bias


def _mha(xs: Sequence[T], a: A) -> T:
    q, k, v = xs[:3]
    h = a["num_heads"]

    def heads(t: T) -> T:
        return t.reshape(t.shape[0], t.shape[1], h, t.shape[2] // h).transpose(1, 2)

    o = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=xs[3] if len(xs) > 3 else None,
                                       scale=a["scale"] or None)
    return o.transpose(1, 2).reshape(q.shape[0], q.shape[1], v.shape[2])


def _rotate_half(x: T, cos: T, sin: T, heads: int) -> T:
    b, s, d = x.shape
    h = d // heads // 2
    x1, x2 = x.reshape(b, s, heads, 2, h).unbind(3)
    c, sn = cos.reshape(b, s, 1, h), sin.reshape(b, s, 1, h)
    return torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], 3).reshape(b, s, d)


def _rotary(x: T, cos: T, sin: T, interleaved: int) -> T:
    """:func:`graphsub.ops.msft_rotary.rotary_ref` in torch: heads (B, N, S, hd) rotated by halves or by pairs."""
    h = x.shape[3] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :h], x[..., h:])
    first, second = a * cos - b * sin, b * cos + a * sin
    return torch.stack([first, second], -1).reshape(x.shape) if interleaved else torch.cat([first, second], -1)


def _gqa(xs: Sequence[T], a: A) -> tuple[T, T, T]:
    """:func:`graphsub.ops.msft_gqa.gqa_ref` in torch: grouped-query attention appending to the cache."""
    q, k, v, pk, pv = xs[:5]
    b, s, d = q.shape
    n, nkv = a["num_heads"], a["kv_num_heads"]
    hd, p = d // n, pk.shape[2]
    if len(xs) > 6:
        q, k = _rotate_half(q, xs[6], xs[7], n), _rotate_half(k, xs[6], xs[7], nkv)
    present_k = torch.cat([pk, k.reshape(b, s, nkv, hd).transpose(1, 2)], 2)
    present_v = torch.cat([pv, v.reshape(b, s, nkv, hd).transpose(1, 2)], 2)
    logits = q.reshape(b, s, n, hd).transpose(1, 2) @ present_k.repeat_interleave(n // nkv, 1).transpose(-1, -2)
    logits = logits * a["scale"]
    if len(xs) > 5:
        logits = logits + xs[5]
    later = torch.arange(p + s)[None, :] > p + torch.arange(s)[:, None]
    logits = logits.masked_fill(later | (logits <= torch.finfo(logits.dtype).min), float("-inf"))
    probs = torch.nan_to_num(torch.softmax(logits, -1), nan=0.0)  # a row that sees no key is 0
    out = probs @ present_v.repeat_interleave(n // nkv, 1)
    return out.transpose(1, 2).reshape(b, s, d), present_k, present_v


def _gqa_packed(xs: Sequence[T], a: A) -> tuple[T, T, T]:
    """``ms_gqa_packed``: :func:`_gqa` on the packed projection's q, k and v."""
    n, nkv = a["num_heads"], a["kv_num_heads"]
    hd = xs[0].shape[-1] // (n + 2 * nkv)
    return _gqa((*xs[0].split([n * hd, nkv * hd, nkv * hd], -1), *xs[1:]), a)


def _rms(x: T, g: T, eps: float) -> T:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def _attention(xs: Sequence[T], a: A) -> T:
    x, w, b = xs[:3]
    dq, dk, _ = a["qkv_hidden_sizes"]
    p = torch.matmul(x, w) + b
    return _mha((p[..., :dq], p[..., dq:dq + dk], p[..., dq + dk:], *xs[3:]), a)


def _gelu_tanh(x: T) -> T:
    return F.gelu(x, approximate="tanh")


def _unary(fn: Callable[[T], T]) -> TorchFn:
    return lambda xs, a: (fn(xs[0]),)


def _binary(fn: Callable[[T, T], T]) -> TorchFn:
    return lambda xs, a: (fn(xs[0], xs[1]),)


def _sln(xs: Sequence[T], a: A) -> tuple[T]:
    return (_slns(xs, a)[0],)


def _slns(xs: Sequence[T], a: A) -> tuple[T, T]:
    h = xs[0] + xs[1] + (xs[4] if len(xs) > 4 else 0)
    return F.layer_norm(h, (h.shape[-1],), xs[2], xs[3] if len(xs) > 3 else None, a["epsilon"]), h


def _fmm(xs: Sequence[T], a: A) -> tuple[T]:
    x = xs[0].transpose(-1, -2) if a["trans_a"] else xs[0]
    y = xs[1].transpose(-1, -2) if a["trans_b"] else xs[1]
    return (torch.matmul(x, y) * a["alpha"],)


def _gemm(xs: Sequence[T], a: A) -> tuple[T]:
    x = xs[0].t() if a["trans_a"] else xs[0]
    y = xs[1].t() if a["trans_b"] else xs[1]
    out = a["alpha"] * (x @ y)
    return (out + a["beta"] * xs[2] if len(xs) > 2 else out,)


def _fused_conv_act(a: A) -> Callable[[T], T]:
    p = a["activation_params"]
    return {
        "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
        "LeakyRelu": lambda x: F.leaky_relu(x, p[0] if p else 0.01),
        "HardSigmoid": lambda x: torch.clamp((p[0] if p else 0.2) * x + (p[1] if p else 0.5), 0, 1),
        "Clip": lambda x: torch.clamp(x, p[0] if p else None, p[1] if len(p) > 1 else None),
    }[a["activation"]]


def _clip(xs: Sequence[T], a: A) -> tuple[T]:
    return (torch.clamp(xs[0], a["min"], a["max"]),)


#: torch dtype of each IR dtype
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}


def _index(values: Any, like: T) -> T:
    """An int64 index tensor on the device of ``like``."""
    return torch.as_tensor(np.asarray(values, dtype=np.int64), device=like.device)


def _pool_op(avg: bool) -> TorchFn:
    def fn(xs: Sequence[T], a: A) -> tuple[T]:
        out_hw = conv_out_hw(tuple(xs[0].shape[2:]), a["kernel"], a["strides"], a["pads"],
                             ceil_mode=a["ceil_mode"])
        return (_pool(xs, a, out_hw, avg),)

    return fn


def _slice(xs: Sequence[T], a: A) -> tuple[T]:
    x = xs[0]
    shape = TensorType(tuple(x.shape))
    plan: list[slice] = [slice(None)] * x.dim()
    backward: list[tuple[int, range]] = []
    for ax, start, end, step in _slice_bounds(shape, a):
        if x.shape[ax] == 0:
            plan[ax] = slice(0, 0)
            continue
        if step > 0:
            plan[ax] = slice(start, end, step)
        else:  # torch slicing has no negative steps: gather those axes
            backward.append((ax, range(*slice(start, None if end < 0 else end, step).indices(x.shape[ax]))))
    y = x[tuple(plan)]
    for ax, picked in backward:
        y = y.index_select(ax, _index(list(picked), y))
    return (y.contiguous(),)


def _gather(xs: Sequence[T], a: A) -> tuple[T]:
    x, idx = xs
    axis = a["axis"] % x.dim()
    flat = idx.reshape(-1).long()
    flat = torch.where(flat < 0, flat + x.shape[axis], flat)  # negative indices count from the end
    y = x.index_select(axis, flat)
    return (y.reshape(*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]),)


def _gather_nd(xs: Sequence[T], a: A) -> tuple[T]:
    x, idx = xs
    idx = idx.long()
    at = tuple(torch.where(idx[..., i] < 0, idx[..., i] + x.shape[i], idx[..., i]) for i in range(idx.shape[-1]))
    return (x[at],)


def _pad(xs: Sequence[T], a: A) -> tuple[T]:
    x = xs[0]
    widths = _pad_widths(TensorType(tuple(x.shape)), a)
    flat = [w for lo_hi in reversed(widths) for w in lo_hi]  # F.pad: last dim first
    if a["mode"] == "constant":
        return (F.pad(x, flat, value=a["value"]),)
    padded = [k for k, (lo, hi) in enumerate(widths) if lo or hi]
    if not padded:
        return (x.clone(),)
    k = x.dim() - padded[0]  # trailing dims F.pad would have to pad
    if k <= 3 and x.dim() in (k + 1, k + 2):
        return (F.pad(x, flat[: 2 * k], mode="reflect" if a["mode"] == "reflect" else "replicate"),)
    y = x  # other ranks: one gather per padded axis (numpy's index pattern)
    for ax in padded:
        src = np.pad(np.arange(x.shape[ax]), widths[ax], mode=a["mode"])
        y = y.index_select(ax, _index(src, y))
    return (y,)


def _expand(xs: Sequence[T], a: A) -> tuple[T]:
    x = xs[0]
    return (x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(a["shape"]))).contiguous(),)


def _shape(xs: Sequence[T], a: A) -> tuple[T]:
    dims, rank = xs[0].shape, xs[0].dim()

    def clamp(v: int) -> int:
        return min(max(v + rank if v < 0 else v, 0), rank)

    picked = dims[clamp(a["start"]): clamp(rank if a["end"] is None else a["end"])]
    return (torch.tensor(list(picked), dtype=torch.int64, device=xs[0].device),)


def _interpolate_mode(a: A) -> bool | None:
    """``align_corners`` of the ``F.interpolate`` computing this resize exactly, None if none does."""
    if a["mode"] != "linear":
        return None
    coord, sizes = a["coordinate_transformation_mode"], a["sizes"]
    if coord == "half_pixel" or (coord == "pytorch_half_pixel" and min(sizes[-2:]) > 1):
        return False
    return True if coord == "align_corners" else None


def _resize(xs: Sequence[T], a: A) -> tuple[T]:
    x = xs[0]
    sizes = tuple(a["sizes"])
    align = _interpolate_mode(a)
    if align is not None:
        flat = x.reshape(1, -1, *x.shape[-2:])
        y = F.interpolate(flat, size=sizes[-2:], mode="bilinear", align_corners=align)
        return (y.reshape(sizes),)
    y = x
    for axis in (x.dim() - 2, x.dim() - 1):
        n_in, n_out = x.shape[axis], sizes[axis]
        c = _source_coords(n_in, n_out, a["coordinate_transformation_mode"])
        if a["mode"] == "nearest":
            y = y.index_select(axis, _index(_nearest_index(c, n_in, a["nearest_mode"]), y))
            continue
        lo, hi, w_hi = _linear_taps(c, n_in)
        shape = [1] * x.dim()
        shape[axis] = n_out
        w = torch.as_tensor(w_hi, device=x.device).reshape(shape)
        y = y.index_select(axis, _index(lo, y)) * (1 - w) + y.index_select(axis, _index(hi, y)) * w
    return (y.to(x.dtype),)


def _enlarge(xs: Sequence[T], a: A) -> tuple[T]:
    w = xs[0]
    ph, pw = _enlarge_pads(TensorType(tuple(w.shape)), a["kernel"])
    return (F.pad(w, (pw, pw, ph, ph)),)


def _merge_gconv(xs: Sequence[T], a: A) -> tuple[T]:
    w = xs[0]
    o, cg, kh, kw = w.shape
    count = a["count"]
    mask = torch.as_tensor(_merge_mask(o, a["groups"], count), device=w.device).to(w.dtype)
    return ((w[:, None] * mask[:, :, None, None, None]).reshape(o, count * cg, kh, kw),)


def _constant(op: str) -> TorchFn:
    """A constant generator: its numpy reference's value, as a CPU tensor."""
    ref = get_op(op).reference
    assert ref is not None
    return lambda xs, a: tuple(torch.from_numpy(np.array(v)) for v in ref([], a))


TORCH_OPS: dict[str, TorchFn] = {
    "conv2d": lambda xs, a: (_conv(xs, a, ACTS[a["act"]]),),
    "ms_fused_conv": lambda xs, a: (_conv(xs[:3], a, _fused_conv_act(a), xs[3] if len(xs) > 3 else None),),
    "add": _binary(torch.add), "sub": _binary(torch.sub), "mul": _binary(torch.mul), "div": _binary(torch.div),
    "pow": _binary(torch.pow), "smul": _binary(torch.mul),
    "sum": lambda xs, a: (functools.reduce(torch.add, xs),),
    "relu": _unary(torch.relu), "sigmoid": _unary(torch.sigmoid), "tanh": _unary(torch.tanh),
    "erf": _unary(torch.erf), "sqrt": _unary(torch.sqrt), "exp": _unary(torch.exp), "log": _unary(torch.log),
    "neg": _unary(torch.neg), "abs": _unary(torch.abs), "reciprocal": _unary(torch.reciprocal),
    "identity": lambda xs, a: (xs[0].clone(),), "hardswish": _unary(F.hardswish),
    "leakyrelu": lambda xs, a: (F.leaky_relu(xs[0], a["alpha"]),),
    "hardsigmoid": lambda xs, a: (torch.clamp(a["alpha"] * xs[0] + a["beta"], 0, 1),),
    "clip": _clip,
    "gelu": lambda xs, a: (F.gelu(xs[0], approximate=a["approximate"]),),
    "ms_gelu": _unary(F.gelu),
    "ms_bias_gelu": lambda xs, a: (F.gelu(xs[0] + xs[1]),),
    "ms_fast_gelu": lambda xs, a: (_gelu_tanh(xs[0] + xs[1] if len(xs) > 1 else xs[0]),),
    "concat": lambda xs, a: (torch.cat(list(xs), a["axis"]),),
    "split": lambda xs, a: tuple(p.contiguous() for p in torch.split(xs[0], list(a["sizes"]), a["axis"])),
    "transpose": lambda xs, a: (xs[0].permute(*a["perm"]).contiguous(),),
    "reshape": lambda xs, a: (xs[0].reshape(*a["shape"]),),
    "flatten": lambda xs, a: (xs[0].reshape(int(torch.tensor(xs[0].shape[: a["axis"]]).prod()), -1),),
    "unsqueeze": lambda xs, a: (xs[0].reshape(_unsqueezed(tuple(xs[0].shape), a["axes"])),),
    "squeeze": lambda xs, a: (xs[0].reshape([d for i, d in enumerate(xs[0].shape) if i not in a["axes"]]),),
    "matmul": lambda xs, a: (ACTS[a["act"]](torch.matmul(xs[0], xs[1])),),
    "gemm": _gemm,
    "ms_fused_matmul": _fmm,
    "ms_skip_layernorm": _sln,
    "ms_skip_layernorm_sum": _slns,
    "ms_mha": lambda xs, a: (_mha(xs, a),),
    "ms_attention": lambda xs, a: (_attention(xs, a),),
    "ms_gqa": _gqa,
    "ms_gqa_packed": _gqa_packed,
    "ms_rotary": lambda xs, a: (_rotary(xs[0], xs[1], xs[2], a["interleaved"]),),
    "ms_rms_norm": lambda xs, a: (_rms(xs[0], xs[1], a["epsilon"]),),
    "ms_skip_rms_norm": lambda xs, a: (_rms(xs[0] + xs[1], xs[2], a["epsilon"]),),
    "ms_skip_rms_norm_sum": lambda xs, a: (_rms(xs[0] + xs[1], xs[2], a["epsilon"]), xs[0] + xs[1]),
    "batchnorm": lambda xs, a: (F.batch_norm(xs[0], xs[3], xs[4], xs[1], xs[2], False, 0.0, a["epsilon"]),),
    "batchnorm_train": lambda xs, a: (F.batch_norm(xs[0], None, None, xs[1], xs[2], True, 0.0, a["epsilon"]),),
    "layernorm": lambda xs, a: (_layernorm(xs[0], xs[1], xs[2] if len(xs) > 2 else None, a["axis"], a["epsilon"]),),
    "softmax": lambda xs, a: (torch.softmax(xs[0], a["axis"]),),
    "reduce_mean": lambda xs, a: (torch.mean(xs[0], dim=tuple(a["axes"]), keepdim=a["keepdims"]),),
    "reduce_sum": lambda xs, a: (torch.sum(xs[0], dim=tuple(a["axes"]), keepdim=a["keepdims"]),),
    "global_avgpool": lambda xs, a: (torch.mean(xs[0], dim=tuple(range(2, xs[0].dim())), keepdim=True),),
    "maxpool2d": _pool_op(avg=False), "avgpool2d": _pool_op(avg=True),
    "slice": _slice, "gather": _gather, "gather_nd": _gather_nd, "pad": _pad, "expand": _expand, "shape": _shape,
    "resize": _resize,
    "cast": lambda xs, a: (xs[0].to(DTYPES[a["to"]]),),
    "isnan": lambda xs, a: (torch.isnan(xs[0]),),
    "where": lambda xs, a: (torch.where(xs[0].to(torch.bool), xs[1], xs[2]),),
    # weight transforms and constant generators (run in emitted modules; the CUDA model folds them)
    "enlarge": _enlarge, "merge_gconv": _merge_gconv,
    **{op: _constant(op) for op in ("const_iconv", "const_imm", "const_pool", "const_one")},
}


from graphsub.frontends.torch_grad_ops import GRAD_TORCH_OPS  # noqa: E402  (gradient kernels, same table)
from graphsub.frontends.torch_rnn_ops import RNN_TORCH_OPS  # noqa: E402  (LSTM and GRU, same table)

TORCH_OPS.update(GRAD_TORCH_OPS)
TORCH_OPS.update(RNN_TORCH_OPS)


def _unsqueezed(shape: tuple[int, ...], axes: Sequence[int]) -> list[int]:
    out = list(shape)
    for ax in sorted(axes):
        out.insert(ax, 1)
    return out


def supported(sig: OpSig) -> bool:
    """Whether ``sig`` has a torch implementation here."""
    return sig.op in TORCH_OPS


def run_sig(sig: OpSig, xs: Sequence[T]) -> tuple[T, ...]:
    """Evaluate the operator ``sig`` on torch tensors ``xs`` (KeyError if unsupported)."""
    return TORCH_OPS[sig.op](xs, sig.attr)


__all__ = ["DTYPES", "TORCH_OPS", "run_sig", "supported"]
