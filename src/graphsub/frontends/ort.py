"""Running ONNX models in onnxruntime (CPU), with explicit optimization level and threads."""

from __future__ import annotations

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


def make_session(
    model: onnx.ModelProto | bytes | str,
    *,
    optimization: str = "disable",
    threads: int | None = None,
) -> ort.InferenceSession:
    """An onnxruntime CPU session for ``model`` (proto, serialized bytes or file path)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = OPT_LEVELS[optimization]
    so.log_severity_level = 4  # failures raise (with ORT's message); nothing is printed
    if threads is not None:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    try:
        return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise ExecutionError(f"onnxruntime rejected the model: {e}") from e


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


__all__ = ["OPT_LEVELS", "make_session", "run_model", "run_session"]
