"""Helpers shared by op families: fused activations and spatial padding arithmetic.

Padding attributes (kind ``pads``) are ``"SAME"`` (TF/ONNX SAME_UPPER: total padding
``max((ceil(in/stride)-1)*stride + eff_k - in, 0)``, the smaller half before), ``"VALID"``
(no padding) or explicit ``(top, left, bottom, right)``.

>>> resolve_pads("SAME", (224, 224), (3, 3), (2, 2))
(0, 0, 1, 1)
>>> conv_out_hw((224, 224), (3, 3), (2, 2), (0, 0, 1, 1))
(112, 112)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.registry import OnnxExportCtx
from graphsub.ops.types import TensorType

ACTS = ("none", "relu", "sigmoid", "tanh")
_ONNX_ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


def apply_act(x: np.ndarray, act: str) -> np.ndarray:
    """Apply a fused activation (numpy)."""
    if act == "none":
        return x
    if act == "relu":
        return np.maximum(x, 0).astype(x.dtype, copy=False)
    if act == "sigmoid":
        return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype, copy=False)
    if act == "tanh":
        return np.tanh(x)
    raise ShapeError(f"unknown activation {act!r}")


def emit_with_act(
    ctx: OnnxExportCtx,
    op_type: str,
    inputs: Sequence[str],
    attrs: dict[str, Any],
    act: str,
    outputs: Sequence[str],
) -> None:
    """Emit ``op_type`` then, if ``act`` is not ``none``, the activation node."""
    if act == "none":
        ctx.emit(op_type, inputs, attrs, outputs=outputs)
        return
    (tmp,) = ctx.emit(op_type, inputs, attrs)
    ctx.emit(_ONNX_ACT[act], [tmp], outputs=outputs)


def check_pair(op: str, name: str, value: Sequence[int], minimum: int = 1) -> None:
    """ShapeError unless ``value`` is two ints >= ``minimum`` (strides, dilations, kernels)."""
    if len(value) != 2 or any(v < minimum for v in value):
        raise ShapeError(f"{op}: {name} must be two ints >= {minimum}, got {tuple(value)}")


def same_pads_1d(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    eff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return total // 2, total - total // 2


def resolve_pads(
    pads: Any,
    in_hw: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int] = (1, 1),
) -> tuple[int, int, int, int]:
    """Explicit ``(top, left, bottom, right)`` padding for a ``pads`` attribute value."""
    if pads == "VALID":
        return (0, 0, 0, 0)
    if pads == "SAME":
        t, b = same_pads_1d(in_hw[0], kernel[0], strides[0], dilations[0])
        left, r = same_pads_1d(in_hw[1], kernel[1], strides[1], dilations[1])
        return (t, left, b, r)
    return tuple(int(p) for p in pads)  # type: ignore[return-value]


def conv_out_hw(
    in_hw: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int] = (1, 1),
    ceil_mode: bool = False,
) -> tuple[int, int]:
    """Output spatial size of a sliding window (conv/pool) with explicit pads."""
    out = []
    for i in range(2):
        eff = (kernel[i] - 1) * dilations[i] + 1
        span = in_hw[i] + pads[i] + pads[i + 2] - eff
        if span < 0:
            raise ShapeError(
                f"window {kernel[0]}x{kernel[1]} (dilation {dilations[i]}) is larger than the "
                f"padded input {in_hw[0]}x{in_hw[1]} (pads {tuple(pads)})"
            )
        o = (math.ceil(span / strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (o - 1) * strides[i] >= in_hw[i] + pads[i]:
            o -= 1  # last window must start inside the input or left padding
        out.append(o)
    return out[0], out[1]


def sliding_windows(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    out_hw: Sequence[int],
    dilations: Sequence[int] = (1, 1),
    fill: Any = 0,
) -> np.ndarray:
    """Read-only view ``[N, C, Ho, Wo, kh, kw]`` of the windows of NCHW ``x``.

    ``x`` is padded with ``fill`` by ``pads`` (top, left, bottom, right) and, where ``out_hw``
    needs it (pooling with ``ceil_mode``), further at the bottom/right so that every one of the
    ``out_hw`` windows lies inside the array.
    """
    extra = [
        max((out_hw[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
            - (x.shape[2 + i] + pads[i] + pads[i + 2]), 0)
        for i in range(2)
    ]
    xp = np.pad(
        x,
        ((0, 0), (0, 0), (pads[0], pads[2] + extra[0]), (pads[1], pads[3] + extra[1])),
        constant_values=fill,
    )
    eff = [(kernel[i] - 1) * dilations[i] + 1 for i in range(2)]
    win = np.lib.stride_tricks.sliding_window_view(xp, (eff[0], eff[1]), axis=(2, 3))
    win = win[:, :, :: strides[0], :: strides[1], :: dilations[0], :: dilations[1]]
    return win[:, :, : out_hw[0], : out_hw[1]]


def onnx_pads(pads: Sequence[int]) -> list[int]:
    """IR ``(top, left, bottom, right)`` -> ONNX ``[top, left, bottom, right]`` (same order)."""
    return [int(p) for p in pads]


def import_pads(ctx: Any, kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int] = (1, 1)) -> Any:
    """The IR ``pads`` attribute for an ONNX Conv/Pool node (auto_pad or explicit pads)."""
    auto = ctx.attr("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto == "SAME_UPPER":
        return "SAME"
    if auto == "VALID":
        return "VALID"
    if auto == "SAME_LOWER":
        hw = ctx.input_type(0).shape[2:4]
        t, b = same_pads_1d(hw[0], kernel[0], strides[0], dilations[0])
        left, r = same_pads_1d(hw[1], kernel[1], strides[1], dilations[1])
        return (b, r, t, left)  # the larger half goes before
    p = ctx.attr("pads", None)
    if p is None:
        return (0, 0, 0, 0)
    p = [int(v) for v in p]
    if len(p) != 4:
        from graphsub.ops.registry import Unsupported

        raise Unsupported(f"pads of length {len(p)} (only 2-D windows are modelled)")
    return tuple(p)


__all__ = [
    "ACTS",
    "apply_act",
    "check_pair",
    "conv_out_hw",
    "emit_with_act",
    "import_pads",
    "onnx_pads",
    "resolve_pads",
    "same_pads_1d",
    "sliding_windows",
]


# ----------------------------------------------------------------------------- canonical forms
# Attributes with several spellings of the same meaning (SAME vs explicit pads, axis -1 vs 2)
# are rewritten to one form when a signature is created, so equal computations get equal
# signatures (and structural hashes) however they were written or imported.


Canon = Callable[[dict[str, Any], Sequence[TensorType]], dict[str, Any]]


def canon_window_pads(kernel_of: str) -> Canon:
    """Canonicaliser for conv/pool ``pads``: ``SAME``/``VALID`` -> explicit 4-tuple.

    ``kernel_of`` is ``"weight"`` (conv: kernel = w.shape[2:]) or ``"attr"`` (pools).
    """

    def fn(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
        if isinstance(a.get("pads"), str):
            kernel = ins[1].shape[2:4] if kernel_of == "weight" else a["kernel"]
            a["pads"] = resolve_pads(a["pads"], ins[0].shape[2:4], kernel, a["strides"], a.get("dilations", (1, 1)))
        return a

    return fn


def canon_axis(key: str = "axis") -> Canon:
    """Canonicaliser making ``a[key]`` non-negative (relative to the rank of input 0)."""

    def fn(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
        rank = ins[0].rank
        v = a.get(key)
        if isinstance(v, int) and -rank <= v < 0:
            a[key] = v + rank
        return a

    return fn


def canon_axes(key: str = "axes", *, out_rank: bool = False) -> Canon:
    """Canonicaliser making an ``axes`` tuple non-negative and sorted (``out_rank``: axes index
    the output, as for unsqueeze)."""

    def fn(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
        v = a.get(key)
        if isinstance(v, tuple) and v:
            rank = ins[0].rank + (len(v) if out_rank else 0)
            if all(-rank <= x < rank for x in v):
                a[key] = tuple(sorted(x % rank for x in v))
        return a

    return fn
