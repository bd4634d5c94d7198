"""Running ONNX models in onnxruntime (CPU, or CUDA for timing where the machine has it), with explicit
optimization level and threads."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from graphsub.errors import ExecutionError

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
#: ``--provider`` names -> onnxruntime execution providers, in preference order
PROVIDERS = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}


def require_provider(provider: str) -> None:
    """Raise ExecutionError unless ``provider`` (a key of :data:`PROVIDERS`) can run here."""
    if provider not in PROVIDERS:
        raise ExecutionError(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
    have = ort.get_available_providers()
    missing = [p for p in PROVIDERS[provider] if p not in have]
    if missing:
        raise ExecutionError(
            f"onnxruntime {ort.__version__} here has no {missing[0]} (available: {', '.join(have)}); "
            f"--provider {provider} needs the onnxruntime-gpu package on a machine with an NVIDIA GPU")


def make_session(
    model: onnx.ModelProto | bytes | str,
    *,
    optimization: str = "disable",
    threads: int | None = None,
    provider: str = "cpu",
) -> ort.InferenceSession:
    """An onnxruntime session for ``model`` (proto, serialized bytes or file path) on ``provider`` (CPU unless
    told; see :func:`require_provider`)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = OPT_LEVELS[optimization]
    so.log_severity_level = 4  # failures raise (with ORT's message); nothing is printed
    if threads is not None:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    try:
        return ort.InferenceSession(src, so, providers=PROVIDERS[provider])
    except Exception as e:  # onnxruntime raises its own exception types
        raise ExecutionError(f"onnxruntime rejected the model: {e}") from e


def optimized_model(model: bytes | str, *, threads: int, provider: str = "cpu") -> onnx.ModelProto:
    """The graph onnxruntime runs for ``model`` (serialized bytes or a path): its own rewrite under ``ORT_ENABLE_ALL``
    at ``threads`` intra-op threads, as written by ``SessionOptions.optimized_model_filepath`` into a temporary
    folder (weights included). Raises ExecutionError when onnxruntime rejects the model."""
    with tempfile.TemporaryDirectory(prefix="graphsub-ortopt-") as tmp:
        out = os.path.join(tmp, "ort_optimized.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 4
        so.optimized_model_filepath = out
        try:
            ort.InferenceSession(model, so, providers=PROVIDERS[provider])
        except Exception as e:  # onnxruntime raises its own exception types
            msg = " ".join(str(e).split())
            raise ExecutionError(f"onnxruntime rejected the model: {msg[:500]}") from e
        return onnx.load(out)


def run_session(
    sess: ort.InferenceSession, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None
) -> list[np.ndarray]:
    try:
        return [np.asarray(o) for o in sess.run(list(outputs) if outputs else None, dict(feeds))]
    except Exception as e:
        raise ExecutionError(f"onnxruntime failed to run the model: {e}") from e


def run_model(
    model: onnx.ModelProto | bytes | str,
    feeds: Mapping[str, np.ndarray],
    *,
    optimization: str = "disable",
    threads: int | None = None,
) -> list[np.ndarray]:
    """Run ``model`` once on ``feeds``; outputs in graph-output order."""
    return run_session(make_session(model, optimization=optimization, threads=threads), feeds)


__all__ = ["OPT_LEVELS", "PROVIDERS", "make_session", "optimized_model", "require_provider", "run_model",
           "run_session"]
