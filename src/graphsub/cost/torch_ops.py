"""PyTorch implementations of graphsub operators, for timing them on a GPU (:mod:`graphsub.cost.cuda`).

``TORCH_OPS[op](xs, attrs) -> tuple of tensors`` mirrors the OpDef's numpy reference (checked on
every OpDef sample in ``tests/cost/test_torch_ops.py``, on the CPU).  Ops missing here (slice,
gather, pad, expand, shape, resize, cast, opaque) are priced by the roofline fallback of the CUDA
model; weight-only ops never run (they are folded before run time).  ``split`` materialises its
pieces, as a split kernel does: torch's views would make every consumer pay a hidden copy for
reading a non-contiguous input, which a per-op timing cannot see (measured on an H100: merged
convs looked 10-15% slower end to end with views).

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

import torch
import torch.nn.functional as F

from graphsub.ir.node import OpSig

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
    q, k, v = xs
    h = a["num_heads"]

    def heads(t: T) -> T:
        return t.reshape(t.shape[0], t.shape[1], h, t.shape[2] // h).transpose(1, 2)

    o = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), scale=a["scale"] or None)
    return o.transpose(1, 2).reshape(q.shape[0], q.shape[1], v.shape[2])


def _gelu_tanh(x: T) -> T:
    return F.gelu(x, approximate="tanh")


def _unary(fn: Callable[[T], T]) -> TorchFn:
    return lambda xs, a: (fn(xs[0]),)


def _binary(fn: Callable[[T, T], T]) -> TorchFn:
    return lambda xs, a: (fn(xs[0], xs[1]),)


def _sln(xs: Sequence[T], a: A) -> tuple[T]:
    h = xs[0] + xs[1] + (xs[4] if len(xs) > 4 else 0)
    return (F.layer_norm(h, (h.shape[-1],), xs[2], xs[3] if len(xs) > 3 else None, a["epsilon"]),)


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
    "ms_mha": lambda xs, a: (_mha(xs, a),),
    "batchnorm": lambda xs, a: (F.batch_norm(xs[0], xs[3], xs[4], xs[1], xs[2], False, 0.0, a["epsilon"]),),
    "layernorm": lambda xs, a: (_layernorm(xs[0], xs[1], xs[2] if len(xs) > 2 else None, a["axis"], a["epsilon"]),),
    "softmax": lambda xs, a: (torch.softmax(xs[0], a["axis"]),),
    "reduce_mean": lambda xs, a: (torch.mean(xs[0], dim=tuple(a["axes"]), keepdim=a["keepdims"]),),
    "reduce_sum": lambda xs, a: (torch.sum(xs[0], dim=tuple(a["axes"]), keepdim=a["keepdims"]),),
    "global_avgpool": lambda xs, a: (torch.mean(xs[0], dim=tuple(range(2, xs[0].dim())), keepdim=True),),
}


def _unsqueezed(shape: tuple[int, ...], axes: Sequence[int]) -> list[int]:
    out = list(shape)
    for ax in sorted(axes):
        out.insert(ax, 1)
    return out


def supported(sig: OpSig) -> bool:
    """Whether ``sig`` has a torch implementation here."""
    return sig.op in TORCH_OPS or sig.op in ("maxpool2d", "avgpool2d")


def run_sig(sig: OpSig, xs: Sequence[T]) -> tuple[T, ...]:
    """Evaluate the operator ``sig`` on torch tensors ``xs`` (KeyError if unsupported)."""
    a = sig.attr
    if sig.op in ("maxpool2d", "avgpool2d"):
        return (_pool(xs, a, tuple(sig.out_types[0].shape[2:]), sig.op == "avgpool2d"),)  # type: ignore[arg-type]
    return TORCH_OPS[sig.op](xs, a)


__all__ = ["TORCH_OPS", "run_sig", "supported"]
