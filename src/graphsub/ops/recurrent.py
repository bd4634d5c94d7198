"""Recurrent operators: ONNX ``LSTM`` and ``GRU`` (issue 20: "the ONNX LSTM and GRU ops modelled, today opaque, so
that the projections around them can merge").

Modelled as exporters write them for ``nn.LSTM`` / ``nn.GRU``: sequence-first ``layout=0``, the default activations
(sigmoid, tanh, tanh), no ``clip``, no peepholes ``P``, no ``sequence_lens``, the bias ``B`` given, and only the
output sequence ``Y`` read (``Y_h`` / ``Y_c`` unused); the initial states are optional trailing inputs. Anything else
stays an opaque node, as before.

IR inputs: ``x [S, B, I]``, ``w [D, G*H, I]``, ``r [D, G*H, H]``, ``b [D, 2*G*H]`` (``G`` = 4 gates for LSTM in
ONNX's i, o, f, c order, 3 for GRU in z, r, h order), then ``initial_h [D, B, H]`` (and for LSTM ``initial_c``);
``D`` = 2 for ``direction="bidirectional"``, else 1. Output: ``Y [S, D, B, H]``. The numpy reference follows the
equations of the ONNX operator specification, in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
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

GATES = {"lstm": 4, "gru": 3}
ONNX_NAME = {"lstm": "LSTM", "gru": "GRU"}
#: ONNX input positions of the initial states (4 is ``sequence_lens``, 7 LSTM's peepholes ``P``)
STATE_POSITIONS = {"lstm": (5, 6), "gru": (5,)}
DEFAULT_ACTIVATIONS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh")}


def _dirs(a: Mapping[str, Any]) -> int:
    return 2 if a["direction"] == "bidirectional" else 1


def _infer(op: str) -> Any:
    def fn(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
        x, w, r, b = ins[:4]
        if x.dtype not in FLOAT_DTYPES or any(t.dtype != x.dtype for t in ins):
            raise ShapeError(f"{op}: expects inputs of one floating-point dtype, got {[str(t) for t in ins]}")
        if x.rank != 3:
            raise ShapeError(f"{op}: x must be [seq, batch, input], got {x}")
        s, n, i = x.shape
        h, d, g = a["hidden_size"], _dirs(a), GATES[op]
        want = {"w": (d, g * h, i), "r": (d, g * h, h), "b": (d, 2 * g * h)}
        for name, t in zip(("w", "r", "b"), (w, r, b), strict=True):
            if t.shape != want[name]:
                raise ShapeError(f"{op}: {name} must have shape {want[name]}, got {t}")
        for t in ins[4:]:
            if t.shape != (d, n, h):
                raise ShapeError(f"{op}: an initial state must have shape {(d, n, h)}, got {t}")
        return (TensorType((s, d, n, h), x.dtype),)

    return fn


@dataclass(frozen=True)
class Math:
    """The array functions the recurrence needs, so that numpy (the reference) and torch
    (:mod:`graphsub.frontends.torch_rnn_ops`) run the same steps."""

    sigmoid: Callable[[Any], Any]
    tanh: Callable[[Any], Any]
    split: Callable[[Any, int, int], Sequence[Any]]  # (value, parts, axis)
    zeros: Callable[[Any, tuple[int, ...]], Any]  # (like, shape)


NUMPY = Math(sigmoid=lambda v: 1.0 / (1.0 + np.exp(-v)), tanh=np.tanh, split=lambda v, n, ax: np.split(v, n, axis=ax),
             zeros=lambda like, shape: np.zeros(shape, like.dtype))


def _lstm_step(m: Math, xw: Any, h: Any, c: Any, r: Any, rb: Any) -> tuple[Any, Any]:
    gi, go, gf, gc = m.split(xw + h @ r.T + rb, 4, -1)
    c = m.sigmoid(gf) * c + m.sigmoid(gi) * m.tanh(gc)
    return m.sigmoid(go) * m.tanh(c), c


def _gru_step(m: Math, xw: Any, h: Any, r: Any, rb: Any, linear_before_reset: int) -> Any:
    xz, xr, xh = m.split(xw, 3, -1)
    rz, rr, rh = m.split(r, 3, 0)
    bz, br, bh = m.split(rb, 3, 0)
    z = m.sigmoid(xz + h @ rz.T + bz)
    reset = m.sigmoid(xr + h @ rr.T + br)
    cand = m.tanh(xh + reset * (h @ rh.T + bh)) if linear_before_reset else m.tanh(xh + (reset * h) @ rh.T + bh)
    return (1.0 - z) * cand + z * h


def run(op: str, xs: Sequence[Any], a: Mapping[str, Any], m: Math) -> Any:
    """``Y [S, D, B, H]`` of ``op`` on inputs ``xs`` (x, w, r, b, initial states), step by step with ``m``'s
    functions."""
    x, w, r, b = xs[:4]
    s, n, _ = x.shape
    hid, g, d = a["hidden_size"], GATES[op], _dirs(a)
    y = m.zeros(x, (s, d, n, hid))
    for k in range(d):
        h = xs[4][k] if len(xs) > 4 else m.zeros(x, (n, hid))
        c = xs[5][k] if len(xs) > 5 else m.zeros(x, (n, hid))
        wb, rb = b[k, :g * hid], b[k, g * hid:]
        reverse = a["direction"] == "reverse" or k == 1
        for t in (range(s - 1, -1, -1) if reverse else range(s)):
            xw = x[t] @ w[k].T + wb
            if op == "lstm":
                h, c = _lstm_step(m, xw, h, c, r[k], rb)
            else:
                h = _gru_step(m, xw, h, r[k], rb, a["linear_before_reset"])
            y[t, k] = h
    return y


def _reference(op: str) -> Any:
    def fn(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
        return (run(op, [v.astype(np.float64) for v in xs], a, NUMPY).astype(xs[0].dtype),)

    return fn


def _flops(op: str) -> Any:
    def fn(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
        s, n, i = ins[0].shape
        h, d, g = a["hidden_size"], _dirs(a), GATES[op]
        return d * s * n * (2 * g * h * (i + h) + 8 * g * h)  # the two products, then gates and state updates

    return fn


def _importer(op: str) -> Any:
    def fn(ctx: OnnxImportCtx) -> Imported:
        what = ctx.op_type
        if int(ctx.attr("layout", 0)) != 0:
            raise Unsupported(f"{what} with layout=1 (batch-first)")
        acts = ctx.attr("activations", None)
        d = 2 if ctx.attr("direction", "forward") == "bidirectional" else 1
        if acts is not None and tuple(acts) != DEFAULT_ACTIVATIONS[op] * d:
            raise Unsupported(f"{what} with activations {list(acts)}")
        for name in ("clip", "activation_alpha", "activation_beta"):
            if ctx.attr(name, None) is not None:
                raise Unsupported(f"{what} with {name}")
        if int(ctx.attr("input_forget", 0)):
            raise Unsupported(f"{what} with input_forget=1")
        if not ctx.has_input(3):
            raise Unsupported(f"{what} without a bias B")
        if ctx.has_input(4):
            raise Unsupported(f"{what} with sequence_lens")
        if op == "lstm" and ctx.has_input(7):
            raise Unsupported("LSTM with peepholes P")
        for i in range(1, ctx.num_outputs):
            if ctx.output_used(i):
                raise Unsupported(f"{what} output {i} (a final state) is used")
        present = [p for p in STATE_POSITIONS[op] if ctx.has_input(p)]
        if present and present[0] != STATE_POSITIONS[op][0]:
            raise Unsupported(f"{what} with initial_c but no initial_h")
        positions = (0, 1, 2, 3, *present)
        attrs: dict[str, Any] = {"hidden_size": int(ctx.attr("hidden_size")),
                                 "direction": str(ctx.attr("direction", "forward"))}
        if op == "gru":
            attrs["linear_before_reset"] = int(ctx.attr("linear_before_reset", 0))
        return Imported(op, attrs, positions)

    return fn


def _exporter(op: str) -> Any:
    def fn(ctx: OnnxExportCtx, node: ExportNode) -> None:
        inputs = [*node.inputs[:4], *([""] if len(node.inputs) > 4 else []), *node.inputs[4:]]
        attrs = {k: node.attrs[k] for k in ("hidden_size", "direction")}
        if op == "gru":
            attrs["linear_before_reset"] = node.attrs["linear_before_reset"]
        ctx.emit(ONNX_NAME[op], inputs, attrs, outputs=node.outputs)

    return fn


def _attrs(op: str) -> tuple[AttrSpec, ...]:
    common = (AttrSpec("hidden_size", "int", doc="H"),
              AttrSpec("direction", "str", "forward", choices=("forward", "reverse", "bidirectional")))
    return common + ((AttrSpec("linear_before_reset", "int", 0, choices=(0, 1)),) if op == "gru" else ())


def _samples(op: str) -> tuple[Sample, ...]:
    g = GATES[op]
    out = [Sample((f32(5, 2, 3), f32(1, g * 4, 3), f32(1, g * 4, 4), f32(1, 2 * g * 4)), {"hidden_size": 4}),
           Sample((f32(4, 3, 5), f32(2, g * 6, 5), f32(2, g * 6, 6), f32(2, 2 * g * 6), f32(2, 3, 6),
                   *([f32(2, 3, 6)] if op == "lstm" else [])), {"hidden_size": 6, "direction": "bidirectional"},
                  note="both directions, initial states"),
           Sample((f32(3, 1, 2), f32(1, g * 3, 2), f32(1, g * 3, 3), f32(1, 2 * g * 3), f32(1, 1, 3)),
                  {"hidden_size": 3, "direction": "reverse"}, note="reverse, initial_h only")]
    if op == "gru":
        out.append(Sample(out[0].in_types, {"hidden_size": 4, "linear_before_reset": 1}, note="linear_before_reset"))
    return tuple(out)


for _op in ("lstm", "gru"):
    register(OpDef(
        name=_op, family="recurrent",
        doc=f"ONNX {ONNX_NAME[_op]} (layout 0, default activations): the output sequence Y [seq, dirs, batch, H].",
        inputs=("x", "w", "r", "b", "initial_h", *(("initial_c",) if _op == "lstm" else ())), min_inputs=4,
        attrs=_attrs(_op), infer=_infer(_op), reference=_reference(_op), flops=_flops(_op),
        onnx_import={ONNX_NAME[_op]: _importer(_op)}, onnx_export=_exporter(_op), samples=_samples(_op),
    ))

__all__ = ["GATES", "NUMPY", "Math", "run"]
