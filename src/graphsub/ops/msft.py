"""onnxruntime contrib operators (ONNX domain ``com.microsoft``): the fused CPU kernels that
onnxruntime's own graph optimizer produces, as first-class IR ops (names prefixed ``ms_``).

* ``ms_fused_conv(x, w [, b [, z]])`` -- ``FusedConv``: conv2d (+ bias) (+ ``z``, a tensor of
  the output's shape) then ``activation`` (``Relu``, ``Sigmoid``, ``Tanh``, ``LeakyRelu``
  (alpha), ``Clip`` (min, max), ``HardSigmoid`` (alpha, beta); parameters in
  ``activation_params``).  Geometry attributes and ``groups = C / w.shape[1]`` as ``conv2d``.
* ``ms_fused_matmul(a, b)`` -- ``FusedMatMul``: ``alpha * op(a) @ op(b)``, ``op`` swapping the
  last two axes when ``trans_a`` / ``trans_b``; batch axes broadcast as in ``matmul`` (both
  operands of rank >= 2; ``transBatchA/B`` are not modelled).
* ``ms_gelu(x)`` (``Gelu``, erf form), ``ms_bias_gelu(x, bias)`` (``BiasGelu``: gelu(x + bias),
  bias 1-D over the last axis), ``ms_fast_gelu(x [, bias])`` (``FastGelu``: tanh approximation
  of gelu(x + bias)).
* ``ms_skip_layernorm(x, skip, gamma [, beta [, bias]])`` -- ``SkipLayerNormalization``:
  layer normalisation of ``x + skip (+ bias)`` over the last axis (output 0);
  ``ms_skip_layernorm_sum`` is the same node with its sum output (ONNX output 3) as a second
  output, as pre-LN transformers use it; nodes whose mean / inv-std outputs are used stay opaque.
* ``ms_mha(q[B,S,D], k[B,L,D], v[B,L,Dv] [, attention_bias])`` -- ``MultiHeadAttention`` without
  mask, projection bias or past state: per head ``softmax(Q K^T * scale (+ attention_bias)) V``
  (the bias (B or 1, H or 1, S, L), ONNX input 5, e.g. T5's position bias) with ``D`` (``Dv``) split into
  ``num_heads`` heads, head-major; ``scale`` is stored explicitly (0 on import = 1/sqrt(D/H)).

Attributes that onnxruntime reads as float32 (``alpha``, ``scale``) are kept in their shortest
float32 spelling so exported-and-reimported graphs have equal signatures.

FLOPs: as the unfused ops they replace (conv / matmul products, one per output for each
bias, residual and activation, 8 per element for gelu, 7-8 for layer normalisation, and for
attention ``2*B*H*S*L*(hd + hdv)`` plus 6 per attention weight for scale and softmax).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.common import canon_window_pads, onnx_pads, resolve_pads
from graphsub.ops.conv import conv2d_ref
from graphsub.ops.registry import (
    REGISTRY,
    AttrSpec,
    ExportFn,
    ExportNode,
    Imported,
    ImportFn,
    InferFn,
    OnnxExportCtx,
    OnnxImportCtx,
    OpDef,
    Sample,
    Unsupported,
    broadcast_shapes,
    f32,
    flops_per_output,
    numel,
    register,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType

MS = "com.microsoft"
FAMILY = "msft"


def f32_attr(v: float) -> float:
    """``v`` as the shortest decimal of the nearest float32 (how the ONNX importer reads floats)."""
    return float(str(np.float32(v)))


def _check_float(op: str, ins: Sequence[TensorType]) -> None:
    if ins[0].dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: expects a floating-point input, got {ins[0]}")
    for t in ins[1:]:
        if t.dtype != ins[0].dtype:
            raise ShapeError(f"{op}: dtype mismatch between {ins[0]} and {t}")


def _no_extra_outputs(ctx: OnnxImportCtx) -> None:
    for i in range(1, ctx.num_outputs):
        if ctx.output_used(i):
            raise Unsupported(f"{ctx.op_type} output {i} is used (only output 0 is modelled)")


def _present_prefix(ctx: OnnxImportCtx, first: int, last: int) -> tuple[int, ...]:
    """Inputs ``0..first-1`` plus the optional ones ``first..last`` that are present, which
    must form a prefix (graphsub's optional inputs are positional)."""
    present = [i for i in range(first, last + 1) if ctx.has_input(i)]
    if present != list(range(first, first + len(present))):
        raise Unsupported(f"{ctx.op_type} with optional inputs {present} (a gap is not modelled)")
    if any(ctx.has_input(i) for i in range(last + 1, ctx.num_inputs)):
        raise Unsupported(f"{ctx.op_type} uses inputs beyond position {last}")
    return tuple(range(first + len(present)))


# ----------------------------------------------------------------------------- ms_fused_conv

#: FusedConv activation -> number of activation_params (and their defaults, if any)
FUSED_ACTS: dict[str, tuple[int, tuple[float, ...] | None]] = {
    "Relu": (0, ()), "Sigmoid": (0, ()), "Tanh": (0, ()),
    "LeakyRelu": (1, (0.01,)), "HardSigmoid": (2, (0.2, 0.5)), "Clip": (2, None),
}


def fused_act(y: np.ndarray, act: str, params: Sequence[float]) -> np.ndarray:
    """A FusedConv activation applied to ``y`` (computed in float64, cast back)."""
    v = y.astype(np.float64)
    if act == "Relu":
        r = np.maximum(v, 0)
    elif act == "Sigmoid":
        r = 1.0 / (1.0 + np.exp(-v))
    elif act == "Tanh":
        r = np.tanh(v)
    elif act == "LeakyRelu":
        r = np.where(v >= 0, v, v * params[0])
    elif act == "HardSigmoid":
        r = np.clip(params[0] * v + params[1], 0, 1)
    elif act == "Clip":
        r = np.clip(v, params[0], params[1])
    else:
        raise ShapeError(f"unknown FusedConv activation {act!r}")
    return r.astype(y.dtype)


def _fconv_canon(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    a = canon_window_pads("weight")(a, ins)
    default = FUSED_ACTS.get(a.get("activation", ""), (0, None))[1]
    if not a.get("activation_params") and default:
        a["activation_params"] = default
    return a


def _conv_part(ins: Sequence[TensorType], a: Mapping[str, Any]) -> dict[str, Any]:
    return {k: a[k] for k in ("strides", "pads", "dilations")} | {"act": "none"}


def _fconv_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    (out,) = REGISTRY["conv2d"].infer(ins[:3], _conv_part(ins, a))
    if len(ins) > 3 and ins[3] != out:
        raise ShapeError(f"ms_fused_conv: z must have the output's type {out}, got {ins[3]}")
    want = FUSED_ACTS[a["activation"]][0]
    if len(a["activation_params"]) != want:
        raise ShapeError(
            f"ms_fused_conv: activation {a['activation']} takes {want} activation_params, "
            f"got {a['activation_params']}"
        )
    return (out,)


def _fconv_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    b = xs[2] if len(xs) > 2 else None
    y = conv2d_ref(xs[0], xs[1], b, a["strides"], a["pads"], a["dilations"])
    if len(xs) > 3:
        y = y + xs[3]
    return (fused_act(y, a["activation"], a["activation_params"]),)


def _fconv_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    conv = REGISTRY["conv2d"].flops(ins[:3], outs, _conv_part(ins, a))
    return conv + (1 + (len(ins) > 3)) * outs[0].numel


def _fconv_import(ctx: OnnxImportCtx) -> Imported:
    base = REGISTRY["conv2d"].onnx_import["Conv"](ctx)  # geometry checks and attributes
    act = ctx.attr("activation", None)
    if act not in FUSED_ACTS:
        raise Unsupported(f"FusedConv activation {act!r}")
    params = tuple(float(p) for p in ctx.attr("activation_params", None) or ())
    attrs = dict(base.attrs) | {"activation": act, "activation_params": params}
    return Imported("ms_fused_conv", attrs, _present_prefix(ctx, 2, 3))


def _fconv_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    x, w = node.in_types[0], node.in_types[1]
    a = node.attrs
    pads = resolve_pads(a["pads"], x.shape[2:], w.shape[2:], a["strides"], a["dilations"])
    attrs: dict[str, Any] = {
        "kernel_shape": list(w.shape[2:]), "strides": list(a["strides"]),
        "dilations": list(a["dilations"]), "pads": onnx_pads(pads),
        "group": x.shape[1] // w.shape[1], "activation": a["activation"],
    }
    if a["activation_params"]:
        attrs["activation_params"] = list(a["activation_params"])
    ctx.emit("FusedConv", node.inputs, attrs, outputs=node.outputs, domain=MS)


register(OpDef(
    name="ms_fused_conv", family=FAMILY, canonicalize=_fconv_canon,
    doc="onnxruntime FusedConv: activation(conv2d(x, w) + b + z); groups = C / w.shape[1]; z "
        "(optional, needs b) has the output's shape.",
    inputs=("x", "w", "b", "z"), min_inputs=2,
    attrs=(
        AttrSpec("strides", "ints", (1, 1), "(stride_h, stride_w)"),
        AttrSpec("pads", "pads", (0, 0, 0, 0), "SAME (=SAME_UPPER), VALID or (t, l, b, r)"),
        AttrSpec("dilations", "ints", (1, 1), "(dilation_h, dilation_w)"),
        AttrSpec("activation", "str", doc="fused activation", choices=tuple(FUSED_ACTS)),
        AttrSpec("activation_params", "floats", (), "LeakyRelu (alpha); Clip (min, max); "
                 "HardSigmoid (alpha, beta)"),
    ),
    infer=_fconv_infer, reference=_fconv_ref, flops=_fconv_flops,
    onnx_import={f"{MS}::FusedConv": _fconv_import}, onnx_export=_fconv_export,
    samples=(
        Sample((f32(1, 3, 9, 9), f32(4, 3, 3, 3)), {"pads": "SAME", "activation": "Relu"}),
        Sample((f32(2, 4, 7, 8), f32(6, 2, 3, 2), f32(6)),
               {"pads": (1, 0, 2, 1), "strides": (2, 1), "activation": "Sigmoid"}, note="grouped, bias"),
        Sample((f32(1, 6, 10, 10), f32(6, 1, 3, 3), f32(6)),
               {"pads": "SAME", "dilations": (2, 2), "activation": "Tanh"}, note="depthwise dilated"),
        Sample((f32(1, 3, 8, 8), f32(4, 3, 3, 3), f32(4), f32(1, 4, 6, 6)),
               {"activation": "LeakyRelu", "activation_params": (0.1,)}, note="residual z"),
        Sample((f32(1, 3, 8, 8), f32(4, 3, 1, 1), f32(4)),
               {"activation": "Clip", "activation_params": (-0.5, 0.5)}),
        Sample((f32(1, 3, 8, 8), f32(4, 3, 3, 3)), {"pads": "SAME", "activation": "HardSigmoid"}),
    ),
))

# ----------------------------------------------------------------------------- ms_fused_matmul


def _swap(s: tuple[int, ...]) -> tuple[int, ...]:
    return (*s[:-2], s[-1], s[-2])


def _fmm_dims(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[tuple[int, ...], int, int, int]:
    """(batch shape, M, K, N) of ``op(a) @ op(b)``."""
    x, y = ins
    _check_float("ms_fused_matmul", ins)
    if x.rank < 2 or y.rank < 2:
        raise ShapeError(f"ms_fused_matmul: operands must have rank >= 2, got {x} and {y}")
    sa = _swap(x.shape) if a["trans_a"] else x.shape
    sb = _swap(y.shape) if a["trans_b"] else y.shape
    if sa[-1] != sb[-2]:
        raise ShapeError(
            f"ms_fused_matmul: inner dimensions differ: {x} (trans_a={a['trans_a']}) and {y} "
            f"(trans_b={a['trans_b']}) give K={sa[-1]} vs {sb[-2]}"
        )
    return broadcast_shapes("ms_fused_matmul", sa[:-2], sb[:-2]), sa[-2], sa[-1], sb[-1]


def _fmm_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    batch, m, _, n = _fmm_dims(ins, a)
    return (TensorType((*batch, m, n), ins[0].dtype),)


def _fmm_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = np.swapaxes(xs[0], -1, -2) if a["trans_a"] else xs[0]
    y = np.swapaxes(xs[1], -1, -2) if a["trans_b"] else xs[1]
    out = np.matmul(x, y)
    return ((out * out.dtype.type(a["alpha"])).astype(xs[0].dtype),)


def _fmm_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    batch, m, k, n = _fmm_dims(ins, a)
    return 2 * numel(batch) * m * k * n + (a["alpha"] != 1.0) * outs[0].numel


def _fmm_canon(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    if isinstance(a.get("alpha"), float):
        a["alpha"] = f32_attr(a["alpha"])
    return a


def _fmm_import(ctx: OnnxImportCtx) -> Imported:
    if int(ctx.attr("transBatchA", 0)) or int(ctx.attr("transBatchB", 0)):
        raise Unsupported("FusedMatMul with transBatchA/transBatchB")
    attrs = {"alpha": float(ctx.attr("alpha", 1.0)), "trans_a": bool(ctx.attr("transA", 0)),
             "trans_b": bool(ctx.attr("transB", 0))}
    return Imported("ms_fused_matmul", attrs, (0, 1))


def _fmm_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    a = node.attrs
    attrs = {"alpha": a["alpha"], "transA": int(a["trans_a"]), "transB": int(a["trans_b"])}
    ctx.emit("FusedMatMul", node.inputs, attrs, outputs=node.outputs, domain=MS)


register(OpDef(
    name="ms_fused_matmul", family=FAMILY, canonicalize=_fmm_canon,
    doc="onnxruntime FusedMatMul: alpha * op(a) @ op(b), op swapping the last two axes when "
        "trans_a / trans_b; batch axes broadcast (ranks >= 2).",
    inputs=("a", "b"),
    attrs=(AttrSpec("alpha", "float", 1.0), AttrSpec("trans_a", "bool", False),
           AttrSpec("trans_b", "bool", False)),
    infer=_fmm_infer, reference=_fmm_ref, flops=_fmm_flops,
    onnx_import={f"{MS}::FusedMatMul": _fmm_import}, onnx_export=_fmm_export,
    samples=(
        Sample((f32(4, 6), f32(6, 5)), {"alpha": 0.5}),
        Sample((f32(2, 6, 4), f32(2, 5, 6)), {"trans_a": True, "trans_b": True, "alpha": 1.25}),
        Sample((f32(3, 1, 4, 5), f32(2, 6, 5)), {"trans_b": True}, note="broadcast batch"),
        Sample((f32(4, 5), f32(2, 4, 3)), {"trans_a": True, "alpha": -2.0}, note="2-D a"),
    ),
))

# ----------------------------------------------------------------------------- gelu family


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    ref = REGISTRY["gelu"].reference
    assert ref is not None
    return np.asarray(ref([x], {"approximate": approximate})[0])


def _bias_infer(op: str) -> InferFn:
    def infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
        _check_float(op, ins)
        x = ins[0]
        if len(ins) > 1 and (x.rank == 0 or ins[1].shape != (x.shape[-1],)):
            raise ShapeError(f"{op}: bias must be 1-D of the last dimension of x {x}, got {ins[1]}")
        return (x,)

    return infer


def _plus_bias(xs: Sequence[np.ndarray]) -> np.ndarray:
    return (xs[0] + xs[1]).astype(xs[0].dtype) if len(xs) > 1 else xs[0]


def _ms_export(op_type: str) -> ExportFn:
    def fn(ctx: OnnxExportCtx, node: ExportNode) -> None:
        ctx.emit(op_type, node.inputs, outputs=node.outputs, domain=MS)

    return fn


def _ms_import(op: str, n_required: int, n_max: int) -> ImportFn:
    def fn(ctx: OnnxImportCtx) -> Imported:
        _no_extra_outputs(ctx)
        return Imported(op, {}, _present_prefix(ctx, n_required, n_max - 1))

    return fn


register(OpDef(
    name="ms_gelu", family=FAMILY, doc="onnxruntime Gelu: 0.5 x (1 + erf(x / sqrt 2)).",
    inputs=("x",), attrs=(), infer=_bias_infer("ms_gelu"),
    reference=lambda xs, a: (_gelu(xs[0], "none"),), flops=flops_per_output(8),
    onnx_import={f"{MS}::Gelu": _ms_import("ms_gelu", 1, 1)}, onnx_export=_ms_export("Gelu"),
    elementwise=True,
    samples=(Sample((f32(2, 16),)), Sample((f32(2, 3, 4, 5),))),
))

register(OpDef(
    name="ms_bias_gelu", family=FAMILY,
    doc="onnxruntime BiasGelu: gelu(x + bias) (erf form), bias 1-D over the last axis of x.",
    inputs=("x", "bias"), attrs=(), infer=_bias_infer("ms_bias_gelu"),
    reference=lambda xs, a: (_gelu(_plus_bias(xs), "none"),), flops=flops_per_output(9),
    onnx_import={f"{MS}::BiasGelu": _ms_import("ms_bias_gelu", 2, 2)},
    onnx_export=_ms_export("BiasGelu"),
    samples=(Sample((f32(2, 16), f32(16))), Sample((f32(2, 3, 8), f32(8)))),
))

register(OpDef(
    name="ms_fast_gelu", family=FAMILY,
    doc="onnxruntime FastGelu: tanh approximation of gelu(x + bias), "
        "0.5 y (1 + tanh(sqrt(2/pi) (y + 0.044715 y^3))); bias (optional) 1-D over the last axis.",
    inputs=("x", "bias"), min_inputs=1, attrs=(), infer=_bias_infer("ms_fast_gelu"),
    reference=lambda xs, a: (_gelu(_plus_bias(xs), "tanh"),),
    flops=lambda ins, outs, a: (8 + (len(ins) > 1)) * outs[0].numel,
    onnx_import={f"{MS}::FastGelu": _ms_import("ms_fast_gelu", 1, 2)},
    onnx_export=_ms_export("FastGelu"),
    samples=(Sample((f32(2, 16),)), Sample((f32(2, 3, 8), f32(8)), note="bias")),
))

# ----------------------------------------------------------------------------- ms_skip_layernorm


def _sln_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    op = "ms_skip_layernorm"
    _check_float(op, ins)
    x, skip = ins[0], ins[1]
    if x.rank not in (2, 3):
        raise ShapeError(f"{op}: expects x of rank 2 or 3, got {x}")
    allowed = {x.shape} | ({x.shape[1:], (1, *x.shape[1:])} if x.rank == 3 else set())
    if skip.shape not in allowed:
        raise ShapeError(f"{op}: skip {skip} must have x's shape {x.shape} (or (S, D) / (1, S, D))")
    for name, t in zip(("gamma", "beta", "bias"), ins[2:], strict=False):
        if t.shape != (x.shape[-1],):
            raise ShapeError(f"{op}: {name} must have shape ({x.shape[-1]},), got {t}")
    return (x,)


def _sln_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray]:
    x = xs[0]
    h = x + xs[1]
    if len(xs) > 4:
        h = h + xs[4]
    h64 = h.astype(np.float64)
    centred = h64 - h64.mean(axis=-1, keepdims=True)
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    y = centred / np.sqrt(var + a["epsilon"]) * xs[2]
    if len(xs) > 3:
        y = y + xs[3]
    return (y.astype(x.dtype),)


def _sln_import(ctx: OnnxImportCtx) -> Imported:
    _no_extra_outputs(ctx)
    eps = float(ctx.attr("epsilon", 1e-12))
    return Imported("ms_skip_layernorm", {"epsilon": eps}, _present_prefix(ctx, 3, 4))


def _sln_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("SkipLayerNormalization", node.inputs, {"epsilon": node.attrs["epsilon"]},
             outputs=node.outputs, domain=MS)


#: what SkipLayerNormalization's two IR ops (with and without the sum output) share
_SLN_INPUTS = ("x", "skip", "gamma", "beta", "bias")
_SLN_ATTRS = (AttrSpec("epsilon", "float", 1e-12, "onnxruntime's default is 1e-12"),)
_SLN_SAMPLES = (
    Sample((f32(2, 5, 8), f32(2, 5, 8), f32(8), f32(8)), {"epsilon": 1e-5}),
    Sample((f32(2, 5, 8), f32(5, 8), f32(8)), {"epsilon": 1e-3}, note="no beta, (S, D) skip"),
    Sample((f32(3, 16), f32(3, 16), f32(16), f32(16), f32(16)), note="rank 2, bias"),
)


def _sln_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    return (7 + len(ins) - 3) * ins[0].numel


register(OpDef(
    name="ms_skip_layernorm", family=FAMILY,
    doc="onnxruntime SkipLayerNormalization (output 0): layer normalisation over the last axis "
        "of h = x + skip (+ bias): (h - mean) / sqrt(var + epsilon) * gamma (+ beta).",
    inputs=_SLN_INPUTS, min_inputs=3, attrs=_SLN_ATTRS,
    infer=_sln_infer, reference=_sln_ref,
    flops=_sln_flops,
    onnx_import={f"{MS}::SkipLayerNormalization": _sln_import},
    onnx_export=_sln_export,
    samples=_SLN_SAMPLES,
))



def _slns_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    (y,) = _sln_infer(ins, a)
    return (y, y)


def _slns_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    h = xs[0] + xs[1]
    if len(xs) > 4:
        h = h + xs[4]
    return _sln_ref(xs, a)[0], h.astype(xs[0].dtype)


def _slns_import(ctx: OnnxImportCtx) -> Imported:
    if not (ctx.num_outputs > 3 and ctx.output_used(3)):
        raise Unsupported("SkipLayerNormalization's sum output is not used (ms_skip_layernorm covers it)")
    if ctx.output_used(1) or ctx.output_used(2):
        raise Unsupported("SkipLayerNormalization's mean or inv-std output is used (not modelled)")
    eps = float(ctx.attr("epsilon", 1e-12))
    return Imported("ms_skip_layernorm_sum", {"epsilon": eps}, _present_prefix(ctx, 3, 4), outputs=(0, 3))


def _slns_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    y, h = node.outputs
    ctx.emit("SkipLayerNormalization", node.inputs, {"epsilon": node.attrs["epsilon"]},
             outputs=[y, "", "", h], domain=MS)


register(OpDef(
    name="ms_skip_layernorm_sum", family=FAMILY,
    doc="onnxruntime SkipLayerNormalization with its sum output (outputs 0 and 3): "
        "(layernorm(h, gamma (, beta)) over the last axis, h) for h = x + skip (+ bias); pre-LN "
        "transformers use h as the next residual.",
    inputs=_SLN_INPUTS, min_inputs=3, attrs=_SLN_ATTRS,
    infer=_slns_infer, reference=_slns_ref,
    flops=_sln_flops,
    onnx_import={f"{MS}::SkipLayerNormalization": _slns_import},
    onnx_export=_slns_export,
    samples=_SLN_SAMPLES,
))

# ----------------------------------------------------------------------------- ms_mha


def _mha_dims(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[int, int, int, int, int, int]:
    """(B, S, L, H, hd, hdv) of a multi-head attention; ShapeError on inconsistent inputs."""
    op = "ms_mha"
    _check_float(op, ins)
    q, k, v = ins[:3]
    h = a["num_heads"]
    if q.rank != 3 or k.rank != 3 or v.rank != 3:
        raise ShapeError(f"{op}: expects q[B,S,D], k[B,L,D], v[B,L,Dv], got {q}, {k}, {v}")
    (b, s, d), (bk, lk, dk), (bv, lv, dv) = q.shape, k.shape, v.shape
    if not (b == bk == bv and lk == lv and d == dk):
        raise ShapeError(f"{op}: inconsistent q {q}, k {k}, v {v} (need equal B, equal L, k's D = q's D)")
    if h < 1 or d % h or dv % h:
        raise ShapeError(f"{op}: num_heads {h} must divide D={d} and Dv={dv}")
    if len(ins) > 3:
        check_attention_bias(op, ins[3], (b, h, s, lk))
    return b, s, lk, h, d // h, dv // h


def check_attention_bias(op: str, bias: TensorType, full: tuple[int, int, int, int]) -> None:
    """An additive attention bias must be (B or 1, H or 1, S, L) for logits of shape ``full`` = (B, H, S, L)."""
    if bias.rank != 4 or bias.shape[2:] != full[2:] or any(d not in (1, f) for d, f in zip(bias.shape[:2], full[:2],
                                                                                             strict=True)):
        raise ShapeError(f"{op}: attention bias {bias} must be (B or 1, H or 1, S, L) for logits {full}")


def scale_canon(a: dict[str, Any], ins: Sequence[TensorType]) -> dict[str, Any]:
    """An attention's ``scale`` attribute explicit (0 = 1/sqrt(head size) of q[B, S, num_heads * hd]), in its
    shortest float32 spelling."""
    scale = a.get("scale")
    if scale == 0.0 and a.get("num_heads") and ins[0].rank == 3:
        scale = 1.0 / np.sqrt(ins[0].shape[2] / a["num_heads"])
    if isinstance(scale, float):
        a["scale"] = f32_attr(scale)
    return a


def _mha_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    b, s, _, h, _, hdv = _mha_dims(ins, a)
    return (TensorType((b, s, h * hdv), ins[0].dtype),)


def mha_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, num_heads: int, scale: float,
            bias: np.ndarray | None = None) -> np.ndarray:
    """Multi-head attention on (B,S,D) / (B,L,D) / (B,L,Dv) arrays (float64 inside), with an optional additive
    bias of the logits (B or 1, H or 1, S, L)."""
    b, s, d = q.shape
    L, dv = k.shape[1], v.shape[2]
    h = num_heads
    qh = q.astype(np.float64).reshape(b, s, h, d // h).transpose(0, 2, 1, 3)
    kh = k.astype(np.float64).reshape(b, L, h, d // h).transpose(0, 2, 3, 1)
    vh = v.astype(np.float64).reshape(b, L, h, dv // h).transpose(0, 2, 1, 3)
    logits = (qh @ kh) * scale
    if bias is not None:
        logits = logits + bias.astype(np.float64)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    out = (e / e.sum(axis=-1, keepdims=True)) @ vh  # B, H, S, hdv
    return out.transpose(0, 2, 1, 3).reshape(b, s, dv).astype(q.dtype)


def _mha_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    b, s, L, h, hd, hdv = _mha_dims(ins, a)
    return 2 * b * h * s * L * (hd + hdv) + (6 + (len(ins) > 3)) * b * h * s * L


def _mha_import(ctx: OnnxImportCtx) -> Imported:
    _no_extra_outputs(ctx)
    if int(ctx.attr("unidirectional", 0)):
        raise Unsupported("MultiHeadAttention with unidirectional=1 (causal mask)")
    if not (ctx.has_input(1) and ctx.has_input(2)):
        raise Unsupported("MultiHeadAttention with packed query/key/value")
    if ctx.input_type(1).rank != 3 or ctx.input_type(2).rank != 3:
        raise Unsupported("MultiHeadAttention with BNSH or packed key/value")
    if ctx.has_input(3) or ctx.has_input(4) or any(ctx.has_input(i) for i in range(6, ctx.num_inputs)):
        raise Unsupported("MultiHeadAttention with a bias, key padding mask or past state")
    attrs = {"num_heads": int(ctx.attr("num_heads")), "scale": float(ctx.attr("scale", 0.0))}
    return Imported("ms_mha", attrs, (0, 1, 2, 5) if ctx.has_input(5) else (0, 1, 2))


def attention_inputs(inputs: Sequence[str], n_fixed: int) -> list[str]:
    """ONNX inputs of onnxruntime's attention ops from the IR's: the optional attention bias (IR input ``n_fixed``)
    sits at ONNX position 5, after absent optional inputs."""
    ins = list(inputs)
    return ins if len(ins) <= n_fixed else ins[:n_fixed] + [""] * (5 - n_fixed) + ins[n_fixed:]


def _mha_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    attrs = {"num_heads": node.attrs["num_heads"], "scale": node.attrs["scale"]}
    ctx.emit("MultiHeadAttention", attention_inputs(node.inputs, 3), attrs, outputs=node.outputs, domain=MS)


register(OpDef(
    name="ms_mha", family=FAMILY, canonicalize=scale_canon,
    doc="onnxruntime MultiHeadAttention (no mask/projection bias/past): per head softmax(Q K^T * scale "
        "(+ attention_bias (B or 1, H or 1, S, L))) V "
        "with q[B,S,D], k[B,L,D], v[B,L,Dv] split head-major into num_heads heads; out [B,S,Dv]. "
        "scale 0 means 1/sqrt(D/num_heads) and is stored as that value.",
    inputs=("q", "k", "v", "attention_bias"), min_inputs=3,
    attrs=(AttrSpec("num_heads", "int"), AttrSpec("scale", "float", 0.0)),
    infer=_mha_infer,
    reference=lambda xs, a: (mha_ref(xs[0], xs[1], xs[2], a["num_heads"], a["scale"],
                                     xs[3] if len(xs) > 3 else None),),
    flops=_mha_flops,
    onnx_import={f"{MS}::MultiHeadAttention": _mha_import}, onnx_export=_mha_export,
    samples=(
        Sample((f32(2, 5, 8), f32(2, 6, 8), f32(2, 6, 12)), {"num_heads": 2}, note="default scale"),
        Sample((f32(1, 7, 16), f32(1, 7, 16), f32(1, 7, 16)), {"num_heads": 4, "scale": 0.3}),
        Sample((f32(3, 4, 6), f32(3, 9, 6), f32(3, 9, 6)), {"num_heads": 1, "scale": 1.0}),
        Sample((f32(1, 5, 8), f32(1, 5, 8), f32(1, 5, 8), f32(1, 2, 5, 5)), {"num_heads": 2},
               note="attention bias per head (T5's position bias)"),
        Sample((f32(2, 3, 8), f32(2, 4, 8), f32(2, 4, 8), f32(2, 1, 3, 4)), {"num_heads": 4, "scale": 1.0},
               note="attention bias per batch, broadcast over heads"),
    ),
))

__all__ = ["FUSED_ACTS", "MS", "attention_inputs", "check_attention_bias", "f32_attr", "fused_act", "mha_ref",
           "scale_canon"]
