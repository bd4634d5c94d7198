"""Elementwise operators: binary arithmetic with numpy/ONNX broadcasting, unary maps,
activations, clip, cast, identity.

FLOPs convention: one FLOP per output element for every elementwise op (memory traffic, not
arithmetic, bounds them; the cost models use ``bytes_moved``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    broadcast_shapes,
    f32,
    flops_per_output,
    register,
    same_as_input,
    simple_export,
    simple_import,
)
from graphsub.ops.types import DTYPE_OF_ONNX_CODE, ONNX_DTYPE_CODES, TensorType, np_dtype

ONE = flops_per_output(1)

# ----------------------------------------------------------------------------- binary


def _binary_infer(op: str) -> Callable[[Sequence[TensorType], Mapping[str, Any]], tuple[TensorType, ...]]:
    def infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
        if op != "pow" and ins[0].dtype != ins[1].dtype:
            raise ShapeError(f"{op}: dtype mismatch {ins[0].dtype} vs {ins[1].dtype}")
        return (TensorType(broadcast_shapes(op, ins[0].shape, ins[1].shape), ins[0].dtype),)

    return infer


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)  # ONNX integer Div truncates toward zero
    return np.divide(a, b)


_BINARY: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray], str]] = {
    "add": ("Add", np.add, "x + y"),
    "sub": ("Sub", np.subtract, "x - y"),
    "mul": ("Mul", np.multiply, "x * y"),
    "div": ("Div", _div, "x / y (integer division truncates toward zero)"),
    "pow": ("Pow", lambda a, b: np.power(a, b).astype(a.dtype), "x ** y (result has x's dtype)"),
}

for _name, (_onnx, _fn, _doc) in _BINARY.items():
    register(OpDef(
        name=_name, family="elementwise", doc=f"Elementwise {_doc} with numpy broadcasting.",
        inputs=("x", "y"), attrs=(),
        infer=_binary_infer(_name),
        reference=(lambda f: lambda xs, a: (np.asarray(f(xs[0], xs[1])),))(_fn),
        flops=ONE,
        onnx_import={_onnx: simple_import(_name)},
        onnx_export=simple_export(_onnx),
        input_roles=("any", "nonzero") if _name == "div" else (("positive", "any") if _name == "pow" else ()),
        elementwise=True,
        samples=(
            Sample((f32(2, 3, 4), f32(2, 3, 4))),
            Sample((f32(2, 3, 4), f32(4,)), note="broadcast"),
            Sample((f32(1, 3, 1), f32(2, 1, 5)), note="two-sided broadcast"),
        ),
    ))


def _sum_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    shape = ins[0].shape
    for t in ins[1:]:
        if t.dtype != ins[0].dtype:
            raise ShapeError(f"sum: dtype mismatch {ins[0].dtype} vs {t.dtype}")
        shape = broadcast_shapes("sum", shape, t.shape)
    return (TensorType(shape, ins[0].dtype),)


def _sum_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    out = np.asarray(xs[0] + xs[1])
    for x in xs[2:]:
        out = out + x
    return (out.astype(xs[0].dtype),)


def _sum_import(ctx: OnnxImportCtx) -> Imported:
    if not 2 <= ctx.num_inputs <= 3 or not all(ctx.has_input(i) for i in range(ctx.num_inputs)):
        raise Unsupported(f"Sum with {ctx.num_inputs} inputs (graphsub models 2 or 3)")
    return Imported("sum", {}, tuple(range(ctx.num_inputs)))


# ONNX Sum: the same arithmetic as add, but a different op to onnxruntime, whose fusions (SkipLayerNormalization,
# Gemm bias, ...) look for Add only; the ``ort-spelling`` rules use it to choose which of them happen.
register(OpDef(
    name="sum", family="elementwise",
    doc="Elementwise x + y (+ z) with numpy broadcasting, as ONNX Sum (which onnxruntime does not fuse).",
    inputs=("x", "y", "z"), min_inputs=2, attrs=(),
    infer=_sum_infer, reference=_sum_ref, flops=ONE,
    onnx_import={"Sum": _sum_import}, onnx_export=simple_export("Sum"),
    elementwise=True,
    samples=(
        Sample((f32(2, 3, 4), f32(2, 3, 4))),
        Sample((f32(2, 3, 4), f32(2, 3, 4), f32(4,)), note="three inputs, broadcast"),
    ),
))


def _smul_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    if ins[1].numel != 1:
        raise ShapeError(f"smul: second input must be a scalar, got {ins[1]}")
    if ins[1].rank > ins[0].rank:
        raise ShapeError(f"smul: scalar of rank {ins[1].rank} would broadcast {ins[0]} up")
    return (ins[0],)


register(OpDef(
    name="smul", family="elementwise",
    doc="Scalar multiplication x * s where s has one element (TASO's MUL).",
    inputs=("x", "s"), attrs=(), infer=_smul_infer,
    reference=lambda xs, a: (np.multiply(xs[0], xs[1]).astype(xs[0].dtype),),
    flops=ONE, onnx_export=simple_export("Mul"),
    onnx_import_note="ONNX Mul imports as 'mul'; smul is created by rules",
    elementwise=True,
    samples=(Sample((f32(2, 3), f32())), Sample((f32(1, 4, 3, 3), f32(1)))),
))

# ----------------------------------------------------------------------------- unary


def _erf(x: np.ndarray) -> np.ndarray:
    """erf via Abramowitz & Stegun 7.1.26 refined in float64 (|error| < 1.5e-7)."""
    v = x.astype(np.float64)
    s = np.sign(v)
    a = np.abs(v)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (s * (1.0 - poly * np.exp(-a * a))).astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


_UNARY: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray], str, str]] = {
    "relu": ("Relu", lambda x: np.maximum(x, 0).astype(x.dtype), "max(x, 0)", "any"),
    "sigmoid": ("Sigmoid", _sigmoid, "1 / (1 + exp(-x))", "any"),
    "tanh": ("Tanh", np.tanh, "tanh(x)", "any"),
    "erf": ("Erf", _erf, "the error function", "any"),
    "sqrt": ("Sqrt", np.sqrt, "square root", "positive"),
    "exp": ("Exp", np.exp, "e ** x", "any"),
    "log": ("Log", np.log, "natural logarithm", "positive"),
    "neg": ("Neg", np.negative, "-x", "any"),
    "abs": ("Abs", np.abs, "|x|", "any"),
    "reciprocal": ("Reciprocal", np.reciprocal, "1 / x", "nonzero"),
    "identity": ("Identity", lambda x: x.copy(), "a copy of x", "any"),
}

for _name, (_onnx, _ufn, _doc, _role) in _UNARY.items():
    register(OpDef(
        name=_name, family="elementwise", doc=f"Elementwise {_doc}.",
        inputs=("x",), attrs=(), infer=same_as_input,
        reference=(lambda f: lambda xs, a: (np.asarray(f(xs[0])),))(_ufn),
        flops=ONE,
        onnx_import={_onnx: simple_import(_name)},
        onnx_export=simple_export(_onnx),
        input_roles=(_role,), elementwise=True,
        samples=(Sample((f32(2, 3, 4, 5),)),),
    ))


def _dropout_import(ctx: OnnxImportCtx) -> Imported:
    if ctx.has_input(2):
        mode = ctx.const_input(2)
        if mode is None or bool(np.asarray(mode).reshape(-1)[0]):
            raise Unsupported("Dropout in training mode")
    if ctx.num_outputs > 1 and ctx.output_used(1):
        raise Unsupported("Dropout mask output is used")
    return Imported("identity", {}, (0,))


# Dropout at inference is the identity: registered as an extra importer of 'identity'.
from graphsub.ops.registry import ONNX_IMPORTERS  # noqa: E402

ONNX_IMPORTERS.setdefault(("", "Dropout"), []).append(("identity", _dropout_import))

# ----------------------------------------------------------------------------- parametrised


def _leaky_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    return (np.where(x >= 0, x, x * a["alpha"]).astype(x.dtype),)


register(OpDef(
    name="leakyrelu", family="elementwise", doc="x if x >= 0 else alpha * x.",
    inputs=("x",), attrs=(AttrSpec("alpha", "float", 0.01),), infer=same_as_input,
    reference=_leaky_ref, flops=ONE,
    onnx_import={"LeakyRelu": simple_import("leakyrelu", {"alpha": "alpha"})},
    onnx_export=simple_export("LeakyRelu", {"alpha": "alpha"}), elementwise=True,
    samples=(Sample((f32(3, 7),), {"alpha": 0.1}),),
))


def _hsig_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    return (np.clip(a["alpha"] * x + a["beta"], 0, 1).astype(x.dtype),)


register(OpDef(
    name="hardsigmoid", family="elementwise", doc="clip(alpha * x + beta, 0, 1).",
    inputs=("x",),
    attrs=(AttrSpec("alpha", "float", 0.2), AttrSpec("beta", "float", 0.5)),
    infer=same_as_input, reference=_hsig_ref, flops=ONE,
    onnx_import={"HardSigmoid": simple_import("hardsigmoid", {"alpha": "alpha", "beta": "beta"})},
    onnx_export=simple_export("HardSigmoid", {"alpha": "alpha", "beta": "beta"}),
    elementwise=True,
    samples=(Sample((f32(2, 8),)), Sample((f32(2, 8),), {"alpha": 1 / 6, "beta": 0.5})),
))

register(OpDef(
    name="hardswish", family="elementwise", doc="x * clip(x / 6 + 1 / 2, 0, 1).",
    inputs=("x",), attrs=(), infer=same_as_input,
    reference=lambda xs, a: ((xs[0] * np.clip(xs[0] / 6 + 0.5, 0, 1)).astype(xs[0].dtype),),
    flops=ONE,
    onnx_import={"HardSwish": simple_import("hardswish")},
    onnx_export=simple_export("HardSwish"), elementwise=True,
    samples=(Sample((f32(2, 3, 4, 4),)),),
))


def _clip_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    lo = -np.inf if a["min"] is None else a["min"]
    hi = np.inf if a["max"] is None else a["max"]
    return (np.minimum(np.maximum(x, lo), hi).astype(x.dtype),)


def _clip_import(ctx: OnnxImportCtx) -> Imported:
    bounds: dict[str, Any] = {}
    if ctx.opset < 11:
        bounds = {"min": ctx.attr("min", None), "max": ctx.attr("max", None)}
    else:
        for i, key in ((1, "min"), (2, "max")):
            if ctx.has_input(i):
                v = ctx.const_input(i)
                if v is None:
                    raise Unsupported(f"Clip {key} is not a constant")
                bounds[key] = float(np.asarray(v).reshape(-1)[0])
    return Imported("clip", {k: v for k, v in bounds.items() if v is not None}, (0,))


def _clip_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    dt = np_dtype(node.in_types[0].dtype)
    ins = [node.inputs[0]]
    for key in ("min", "max"):
        v = node.attrs[key]
        ins.append("" if v is None else ctx.const(np.asarray(v, dtype=dt), f"clip_{key}"))
    while ins[-1] == "":
        ins.pop()
    ctx.emit("Clip", ins, outputs=node.outputs)


register(OpDef(
    name="clip", family="elementwise", doc="min(max(x, min), max); a missing bound is infinite.",
    inputs=("x",),
    attrs=(AttrSpec("min", "float", None), AttrSpec("max", "float", None)),
    infer=same_as_input, reference=_clip_ref, flops=ONE,
    onnx_import={"Clip": _clip_import}, onnx_export=_clip_export, elementwise=True,
    samples=(
        Sample((f32(4, 5),), {"min": 0.0, "max": 6.0}),
        Sample((f32(4, 5),), {"min": -0.5}),
        Sample((f32(4, 5),), {"max": 0.25}),
    ),
))


def _cast_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    return (TensorType(ins[0].shape, a["to"]),)


def _cast_import(ctx: OnnxImportCtx) -> Imported:
    code = int(ctx.attr("to"))
    if code not in DTYPE_OF_ONNX_CODE:
        raise Unsupported(f"Cast to ONNX dtype code {code}")
    return Imported("cast", {"to": DTYPE_OF_ONNX_CODE[code]}, (0,))


def _cast_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("Cast", node.inputs, {"to": ONNX_DTYPE_CODES[node.attrs["to"]]}, outputs=node.outputs)


register(OpDef(
    name="cast", family="elementwise", doc="Convert to dtype 'to' (float->int truncates).",
    inputs=("x",), attrs=(AttrSpec("to", "dtype"),), infer=_cast_infer,
    reference=lambda xs, a: (xs[0].astype(np_dtype(a["to"])),), flops=ONE,
    onnx_import={"Cast": _cast_import}, onnx_export=_cast_export,
    samples=(
        Sample((f32(3, 4),), {"to": "int64"}),
        Sample((TensorType((3, 4), "int64"),), {"to": "float32"}),
    ),
))


__all__: list[str] = []


def _gelu_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0].astype(np.float64)
    if a["approximate"] == "tanh":
        y = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    else:
        y = 0.5 * x * (1 + _erf(x / np.sqrt(2.0)))
    return (y.astype(xs[0].dtype),)


def _gelu_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    approx = node.attrs["approximate"]
    if ctx.opset >= 20:
        ctx.emit("Gelu", node.inputs, {"approximate": approx}, outputs=node.outputs)
        return
    dt = np_dtype(node.in_types[0].dtype)
    x = node.inputs[0]

    def c(v: float) -> str:
        return ctx.const(np.asarray(v, dtype=dt), "gelu_c")

    if approx == "tanh":
        (x3,) = ctx.emit("Mul", [x, x])
        (x3,) = ctx.emit("Mul", [x3, x])
        (inner,) = ctx.emit("Mul", [x3, c(0.044715)])
        (inner,) = ctx.emit("Add", [inner, x])
        (inner,) = ctx.emit("Mul", [inner, c(float(np.sqrt(2 / np.pi)))])
        (t,) = ctx.emit("Tanh", [inner])
    else:
        (inner,) = ctx.emit("Div", [x, c(float(np.sqrt(2.0)))])
        (t,) = ctx.emit("Erf", [inner])
    (t,) = ctx.emit("Add", [t, c(1.0)])
    (t,) = ctx.emit("Mul", [x, t])
    ctx.emit("Mul", [t, c(0.5)], outputs=node.outputs)


register(OpDef(
    name="gelu", family="elementwise",
    doc="0.5 x (1 + erf(x / sqrt 2)); approximate='tanh' uses the tanh formula (ONNX Gelu, opset 20; "
        "exported as its decomposition below opset 20).",
    inputs=("x",), attrs=(AttrSpec("approximate", "str", "none", choices=("none", "tanh")),),
    infer=same_as_input, reference=_gelu_ref, flops=flops_per_output(8),
    onnx_import={"Gelu": simple_import("gelu", {"approximate": "approximate"})},
    onnx_export=_gelu_export, elementwise=True,
    samples=(Sample((f32(2, 16),)), Sample((f32(2, 16),), {"approximate": "tanh"})),
))
