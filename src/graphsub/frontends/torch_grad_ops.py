"""PyTorch implementations of the gradient kernels of :mod:`graphsub.ops.grad` and
:mod:`graphsub.ops.grad_pool` (merged into :data:`graphsub.frontends.torch_ops.TORCH_OPS`; this
module must not import that one).

They run under ``torch.no_grad`` and mirror the numpy references (checked on every OpDef sample
by ``tests/frontends/test_torch_ops.py``): asymmetric pads are applied explicitly, a max-pool
window's gradient goes to its first maximum (what ``max_pool2d``'s indices give), and the
average-pool gradient is a one-channel transposed convolution with a kernel of ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn import grad as nn_grad

from graphsub.ops.common import conv_out_hw, resolve_pads
from graphsub.ops.grad_pool import window_counts

T = torch.Tensor
A = Mapping[str, Any]
TorchFn = Callable[[Sequence[T], Mapping[str, Any]], tuple[T, ...]]


def _split_pads(pads: Sequence[int]) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Symmetric part (for torch's ``padding``) and the rest (t, l, b, r) applied explicitly."""
    t, left, b, r = pads
    ph, pw = min(t, b), min(left, r)
    return (ph, pw), (t - ph, left - pw, b - ph, r - pw)


def _conv_grad_x(xs: Sequence[T], a: A) -> tuple[T]:
    dy, w = xs
    n, c, h, wd = a["x_shape"]
    pads = resolve_pads(a["pads"], (h, wd), w.shape[2:], a["strides"], a["dilations"])
    sym, (t, left, b, r) = _split_pads(pads)
    size = (n, c, h + t + b, wd + left + r)  # x padded by the asymmetric rest
    gx = nn_grad.conv2d_input(size, w, dy, tuple(a["strides"]), sym, tuple(a["dilations"]),
                                    c // w.shape[1])
    return (gx[:, :, t: t + h, left: left + wd],)


def _conv_grad_w(xs: Sequence[T], a: A) -> tuple[T]:
    x, dy = xs
    w_shape = tuple(a["w_shape"])
    pads = resolve_pads(a["pads"], x.shape[2:], w_shape[2:], a["strides"], a["dilations"])
    sym, (t, left, b, r) = _split_pads(pads)
    if t or left or b or r:
        x = F.pad(x, (left, r, t, b))
    gw = nn_grad.conv2d_weight(x, w_shape, dy, tuple(a["strides"]), sym, tuple(a["dilations"]),
                                     x.shape[1] // w_shape[1])
    return (gw,)


def _pool_geometry(x_shape: Sequence[int], a: A) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    pads = resolve_pads(a["pads"], x_shape[2:], a["kernel"], a["strides"])
    return pads, conv_out_hw(x_shape[2:], a["kernel"], a["strides"], pads, ceil_mode=a["ceil_mode"])


def _maxpool_grad(xs: Sequence[T], a: A) -> tuple[T]:
    x, dy = xs
    n, c, h, w = x.shape
    (t, left, b, r), (ho, wo) = _pool_geometry(x.shape, a)
    (kh, kw), (sh, sw) = a["kernel"], a["strides"]
    extra_h = max((ho - 1) * sh + kh - (h + t + b), 0)  # ceil mode: windows past the padding
    extra_w = max((wo - 1) * sw + kw - (w + left + r), 0)
    xp = F.pad(x, (left, r + extra_w, t, b + extra_h), value=float("-inf"))
    _, idx = F.max_pool2d(xp, (kh, kw), (sh, sw), return_indices=True)  # first maximum of each window
    idx = idx[:, :, :ho, :wo].reshape(n, c, -1)
    hp, wp = xp.shape[2:]
    dxp = dy.new_zeros((n, c, hp * wp)).scatter_add_(2, idx, dy.reshape(n, c, -1))
    return (dxp.reshape(n, c, hp, wp)[:, :, t: t + h, left: left + w],)


def _avgpool_grad(xs: Sequence[T], a: A) -> tuple[T]:
    (dy,) = xs
    n, c, h, w = a["x_shape"]
    pads, (ho, wo) = _pool_geometry(a["x_shape"], a)
    (kh, kw), (sh, sw), inc = a["kernel"], a["strides"], a["count_include_pad"]
    cnt_h = torch.as_tensor(window_counts(h, kh, sh, pads[0], pads[2], ho, inc), dtype=dy.dtype, device=dy.device)
    cnt_w = torch.as_tensor(window_counts(w, kw, sw, pads[1], pads[3], wo, inc), dtype=dy.dtype, device=dy.device)
    q = (dy / torch.outer(cnt_h, cnt_w)).reshape(n * c, 1, ho, wo)
    ones = dy.new_ones((1, 1, kh, kw))
    full = F.conv_transpose2d(q, ones, stride=(sh, sw))  # [N*C, 1, (Ho-1)*sh+kh, (Wo-1)*sw+kw], padded coords
    # crop the padding (negative pads) and zero-fill rows/cols no window reached
    dx = F.pad(full, (-pads[1], w + pads[1] - full.shape[3], -pads[0], h + pads[0] - full.shape[2]))
    return (dx.reshape(n, c, h, w),)


def _clip_grad(xs: Sequence[T], a: A) -> tuple[T]:
    x, dy = xs
    keep = torch.ones_like(x, dtype=torch.bool)
    if a["min"] is not None:
        keep &= x >= a["min"]
    if a["max"] is not None:
        keep &= x <= a["max"]
    return (torch.where(keep, dy, torch.zeros_like(dy)),)


def _hardsigmoid_grad(xs: Sequence[T], a: A) -> tuple[T]:
    x, dy = xs
    pre = x * a["alpha"] + a["beta"]
    return (torch.where((pre > 0) & (pre < 1), dy * a["alpha"], torch.zeros_like(dy)),)


def _hardswish_grad(xs: Sequence[T], a: A) -> tuple[T]:
    x, dy = xs
    mid = torch.where(x < 3, dy * (x / 3 + 0.5), dy)
    return (torch.where(x <= -3, torch.zeros_like(dy), mid),)


def _gather_grad(xs: Sequence[T], a: A) -> tuple[T]:
    idx, dy = xs
    x_shape, axis = tuple(a["x_shape"]), a["axis"] % len(a["x_shape"])
    flat = idx.reshape(-1).long()
    flat = torch.where(flat < 0, flat + x_shape[axis], flat)
    # dy as [pre, numel(indices), post]: index_add_ along the middle axis
    upd = dy.reshape(*x_shape[:axis], flat.numel(), *x_shape[axis + 1:])
    out = dy.new_zeros(x_shape)
    return (out.index_add_(axis, flat, upd),)


GRAD_TORCH_OPS: dict[str, TorchFn] = {
    "conv2d_grad_x": _conv_grad_x,
    "conv2d_grad_w": _conv_grad_w,
    "maxpool2d_grad": _maxpool_grad,
    "avgpool2d_grad": _avgpool_grad,
    "relu_grad": lambda xs, a: (torch.where(xs[0] > 0, xs[1], torch.zeros_like(xs[1])),),
    "leakyrelu_grad": lambda xs, a: (torch.where(xs[0] > 0, xs[1], xs[1] * a["alpha"]),),
    "clip_grad": _clip_grad,
    "hardsigmoid_grad": _hardsigmoid_grad,
    "hardswish_grad": _hardswish_grad,
    "abs_grad": lambda xs, a: (xs[1] * torch.sign(xs[0]),),
    "gather_grad": _gather_grad,
}

__all__ = ["GRAD_TORCH_OPS"]
