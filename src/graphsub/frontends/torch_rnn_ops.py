"""PyTorch implementations of the recurrent ops of :mod:`graphsub.ops.recurrent` (ONNX LSTM and GRU, layout 0,
default activations), merged into :data:`graphsub.frontends.torch_ops.TORCH_OPS`; this module must not import that
one. They run the reference's own steps (:func:`graphsub.ops.recurrent.run`) with torch's functions (checked on
every OpDef sample by ``tests/frontends/test_torch_ops.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from graphsub.ops.recurrent import Math, run

T = torch.Tensor
TorchFn = Callable[[Sequence[T], Mapping[str, Any]], tuple[T, ...]]

TORCH = Math(sigmoid=torch.sigmoid, tanh=torch.tanh, split=lambda v, n, ax: v.chunk(n, dim=ax),
             zeros=lambda like, shape: like.new_zeros(shape))


def _recurrent(op: str) -> TorchFn:
    @torch.no_grad()
    def fn(xs: Sequence[T], a: Mapping[str, Any]) -> tuple[T]:
        return (run(op, xs, a, TORCH),)

    return fn


RNN_TORCH_OPS: dict[str, TorchFn] = {"lstm": _recurrent("lstm"), "gru": _recurrent("gru")}

__all__ = ["RNN_TORCH_OPS"]
