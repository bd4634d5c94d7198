"""onnxruntime's RMS normalisation kernels as IR ops: what a decoder LLM's RMSNorm (Llama, Qwen2, Mistral) runs as
in onnxruntime-genai's hand-built graphs.

* ``ms_rms_norm(x, gamma)`` -- ``SimplifiedLayerNormalization`` (onnxruntime's, ONNX domain): ``x /
  sqrt(mean(x^2, last axis) + epsilon) * gamma``, gamma of shape (D,).
* ``ms_skip_rms_norm(x, skip, gamma)`` -- ``com.microsoft::SkipSimplifiedLayerNormalization`` (output 0): the same
  of ``h = x + skip``; ``ms_skip_rms_norm_sum`` is the node with its sum output (ONNX output 3) as a second output,
  as a pre-norm decoder uses ``h`` as the next residual.  ``x`` is (B, S, D) or (N, D); ``skip`` has its shape (or
  (1, S, D) / (S, D) for a rank-3 ``x``).

Only the last axis is modelled (``axis`` -1: the decoders' norm; other nodes stay opaque); the mean and inverse
standard deviation outputs are not. FLOPs: 4 per element (square, sum, scale, gamma) plus one per element for the
skip's sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ops.msft import MS
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
    numel,
    register,
)
from graphsub.ops.types import FLOAT_DTYPES, TensorType

_ATTRS = (AttrSpec("epsilon", "float", 1e-6),)


def _check(op: str, ins: Sequence[TensorType], skip: bool) -> TensorType:
    x = ins[0]
    if x.dtype not in FLOAT_DTYPES or any(t.dtype != x.dtype for t in ins[1:]):
        raise ShapeError(f"{op}: expects inputs of one floating-point type, got {', '.join(map(str, ins))}")
    if x.rank < 1 or ins[-1].shape != x.shape[-1:]:
        raise ShapeError(f"{op}: gamma {ins[-1]} must be (D,) for x {x}")
    if skip:
        s = ins[1].shape
        if x.rank not in (2, 3) or not (s == x.shape or (x.rank == 3 and s in (x.shape[1:], (1, *x.shape[1:])))):
            raise ShapeError(f"{op}: expects x (B, S, D) or (N, D) and a skip of its shape, got {x}, {ins[1]}")
    return x


def rms_ref(x: np.ndarray, gamma: np.ndarray, epsilon: float) -> np.ndarray:
    """RMS normalisation over the last axis (float64 inside)."""
    v = x.astype(np.float64)
    y = v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + epsilon) * gamma.astype(np.float64)
    return y.astype(x.dtype)


def _flops(ins: Sequence[TensorType], outs: Sequence[TensorType], a: Mapping[str, Any]) -> int:
    return (4 + (len(ins) > 2)) * numel(ins[0].shape)


def _rms_import(ctx: OnnxImportCtx) -> Imported:
    if ctx.num_outputs > 1 and ctx.output_used(1):
        raise Unsupported("SimplifiedLayerNormalization's inv-std output is used (not modelled)")
    rank = ctx.input_type(0).rank
    if int(ctx.attr("axis", -1)) not in (-1, rank - 1):
        raise Unsupported("SimplifiedLayerNormalization over axes other than the last one")
    return Imported("ms_rms_norm", {"epsilon": float(ctx.attr("epsilon", 1e-5))}, (0, 1))


def _rms_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    ctx.emit("SimplifiedLayerNormalization", node.inputs, {"axis": -1, "epsilon": node.attrs["epsilon"],
                                                            "stash_type": 1}, outputs=node.outputs)


register(OpDef(
    name="ms_rms_norm", family="msft",
    doc="onnxruntime SimplifiedLayerNormalization (RMSNorm): x / sqrt(mean(x^2, last axis) + epsilon) * gamma.",
    inputs=("x", "gamma"), attrs=_ATTRS,
    infer=lambda ins, a: (_check("ms_rms_norm", ins, False),),
    reference=lambda xs, a: (rms_ref(xs[0], xs[1], a["epsilon"]),),
    flops=_flops,
    onnx_import={"SimplifiedLayerNormalization": _rms_import}, onnx_export=_rms_export,
    samples=(Sample((f32(2, 5, 16), f32(16)), {"epsilon": 1e-6}), Sample((f32(6, 8), f32(8)), {"epsilon": 1e-5})),
))


def _skip_import(ctx: OnnxImportCtx, with_sum: bool) -> Imported:
    if ctx.output_used(1) or ctx.output_used(2):
        raise Unsupported("SkipSimplifiedLayerNormalization's mean or inv-std output is used (not modelled)")
    used = ctx.num_outputs > 3 and ctx.output_used(3)
    if used != with_sum:
        raise Unsupported("SkipSimplifiedLayerNormalization's sum output is " + ("not " if with_sum else "")
                          + "used (the other op covers it)")
    if ctx.has_input(3):
        raise Unsupported("SkipSimplifiedLayerNormalization with a bias (not modelled)")
    op = "ms_skip_rms_norm_sum" if with_sum else "ms_skip_rms_norm"
    return Imported(op, {"epsilon": float(ctx.attr("epsilon", 1e-5))}, (0, 1, 2), outputs=(0, 3) if with_sum else (0,))


def _skip_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    outs = [node.outputs[0], "", "", node.outputs[1]] if len(node.outputs) > 1 else [node.outputs[0]]
    ctx.emit("SkipSimplifiedLayerNormalization", node.inputs, {"epsilon": node.attrs["epsilon"]}, outputs=outs,
             domain=MS)


def _skip_ref(xs: Sequence[np.ndarray], a: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    h = (xs[0] + xs[1]).astype(xs[0].dtype)
    return rms_ref(h, xs[2], a["epsilon"]), h


_SKIP_SAMPLES = (Sample((f32(2, 5, 16), f32(2, 5, 16), f32(16)), {"epsilon": 1e-6}),
                 Sample((f32(6, 8), f32(6, 8), f32(8)), {"epsilon": 1e-5}),
                 Sample((f32(2, 3, 8), f32(3, 8), f32(8)), {"epsilon": 1e-5}, note="a skip broadcast over the batch"))

register(OpDef(
    name="ms_skip_rms_norm", family="msft",
    doc="onnxruntime SkipSimplifiedLayerNormalization (output 0): RMSNorm of x + skip over the last axis.",
    inputs=("x", "skip", "gamma"), attrs=_ATTRS,
    infer=lambda ins, a: (_check("ms_skip_rms_norm", ins, True),),
    reference=lambda xs, a: (_skip_ref(xs, a)[0],),
    flops=_flops,
    onnx_import={f"{MS}::SkipSimplifiedLayerNormalization": lambda ctx: _skip_import(ctx, False)},
    onnx_export=_skip_export, samples=_SKIP_SAMPLES,
))

register(OpDef(
    name="ms_skip_rms_norm_sum", family="msft",
    doc="onnxruntime SkipSimplifiedLayerNormalization with its sum output (outputs 0 and 3): (RMSNorm(h), h) for "
        "h = x + skip; a pre-norm decoder uses h as the next residual.",
    inputs=("x", "skip", "gamma"), attrs=_ATTRS,
    infer=lambda ins, a: (_check("ms_skip_rms_norm_sum", ins, True),) * 2,
    reference=_skip_ref,
    flops=_flops,
    onnx_import={f"{MS}::SkipSimplifiedLayerNormalization": lambda ctx: _skip_import(ctx, True)},
    onnx_export=_skip_export, samples=_SKIP_SAMPLES,
))

__all__ = ["rms_ref"]
