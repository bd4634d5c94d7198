"""PyTorch implementations of the recurrent ops of :mod:`graphsub.ops.recurrent` (ONNX LSTM and GRU, layout 0,
default activations), merged into :data:`graphsub.frontends.torch_ops.TORCH_OPS`; this module must not import that
one. They mirror the numpy references step by step (checked on every OpDef sample by
``tests/frontends/test_torch_ops.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

T = torch.Tensor
TorchFn = Callable[[Sequence[T], Mapping[str, Any]], tuple[T, ...]]


def _lstm_step(xw: T, h: T, c: T, r: T, rb: T) -> tuple[T, T]:
    gi, go, gf, gc = (xw + h @ r.T + rb).chunk(4, dim=-1)
    c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gc)
    return torch.sigmoid(go) * torch.tanh(c), c


def _gru_step(xw: T, h: T, r: T, rb: T, linear_before_reset: int) -> T:
    xz, xr, xh = xw.chunk(3, dim=-1)
    rz, rr, rh = r.chunk(3, dim=0)
    bz, br, bh = rb.chunk(3)
    z = torch.sigmoid(xz + h @ rz.T + bz)
    reset = torch.sigmoid(xr + h @ rr.T + br)
    cand = torch.tanh(xh + reset * (h @ rh.T + bh)) if linear_before_reset else torch.tanh(xh + (reset * h) @ rh.T + bh)
    return (1.0 - z) * cand + z * h


def _recurrent(op: str) -> TorchFn:
    gates = 4 if op == "lstm" else 3

    @torch.no_grad()
    def fn(xs: Sequence[T], a: Mapping[str, Any]) -> tuple[T]:
        x, w, r, b = xs[:4]
        s, n, _ = x.shape
        hid, d = a["hidden_size"], 2 if a["direction"] == "bidirectional" else 1
        y = x.new_zeros((s, d, n, hid))
        for k in range(d):
            h = xs[4][k] if len(xs) > 4 else x.new_zeros((n, hid))
            c = xs[5][k] if len(xs) > 5 else x.new_zeros((n, hid))
            wb, rb = b[k, :gates * hid], b[k, gates * hid:]
            reverse = a["direction"] == "reverse" or k == 1
            for t in (range(s - 1, -1, -1) if reverse else range(s)):
                xw = x[t] @ w[k].T + wb
                if op == "lstm":
                    h, c = _lstm_step(xw, h, c, r[k], rb)
                else:
                    h = _gru_step(xw, h, r[k], rb, a["linear_before_reset"])
                y[t, k] = h
        return (y,)

    return fn


RNN_TORCH_OPS: dict[str, TorchFn] = {"lstm": _recurrent("lstm"), "gru": _recurrent("gru")}

__all__ = ["RNN_TORCH_OPS"]
