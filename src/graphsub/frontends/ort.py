"""Running ONNX models in onnxruntime (CPU, or CUDA for timing where the machine has it), with explicit
optimization level and threads.

This module is the boundary to onnxruntime: every session graphsub opens comes from :func:`make_session`, and
no onnxruntime exception crosses it.  A model onnxruntime rejects raises
:class:`~graphsub.errors.ExecutionError` when the session is created; a run that fails (a ``Reshape`` to a
shape of the wrong size, an index out of range, an allocation that fails) raises ExecutionError from
:meth:`Session.run` -- also for callers that time ``sess.run`` directly (the measured cost models).

>>> import numpy as np
>>> from onnx import TensorProto, helper
>>> g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "r",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
...      helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
>>> sess = make_session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
>>> try:
...     sess.run(None, {"x": np.zeros((2, 3), np.float32), "s": np.array([5])})
... except ExecutionError as e:
...     print(type(e).__name__, str(e)[:35])
ExecutionError onnxruntime failed to run the model
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from graphsub.errors import ExecutionError, GraphsubError
from graphsub.frontends.shared import SHARE_BYTES, file_bytes, with_placeholders
from graphsub.frontends.weight_pool import release, session_file

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
#: ``--provider`` names -> onnxruntime execution providers, in preference order
PROVIDERS = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}


#: longest onnxruntime message quoted in an error (its messages can carry whole graph dumps)
MAX_MESSAGE = 2000
#: the file name of onnxruntime's optimized graph in :func:`optimized_files`' folder
OPTIMIZED_NAME = "ort_optimized.onnx"
#: sessions of models at least this large (MB) are measured for :func:`session_s_per_mb` (below it, the constant
#: part of creating a session dominates)
SESSION_RATE_MIN_MB = 20.0
#: how many of the latest such sessions :func:`session_s_per_mb` reads
SESSION_RATE_KEPT = 8
_session_rates: deque[float] = deque(maxlen=SESSION_RATE_KEPT)


def session_s_per_mb() -> float | None:
    """What creating an onnxruntime session took in this process, in seconds per MB of the model: the median over
    the latest :data:`SESSION_RATE_KEPT` sessions of models of at least :data:`SESSION_RATE_MIN_MB` (None: none yet).
    The timing's budget estimates its sessions with it (:mod:`graphsub.optimize.budget`), since the rate differs
    from machine to machine and model to model by several times: on the 100 M decoder (0.5 GB, 2026-11-30) a session
    took 2-3 ms per MB (7 ms with its optimized graph written for the fingerprint), where the constant estimate
    said 15, and the timing, which reserves the time of nine sessions for its leader's confirmation, never began."""
    return statistics.median(_session_rates) if _session_rates else None


def _observe_session(mb: float, seconds: float) -> None:
    if mb >= SESSION_RATE_MIN_MB:
        _session_rates.append(seconds / mb)


def ort_message(e: BaseException) -> str:
    """An onnxruntime exception's message on one line, cut to :data:`MAX_MESSAGE` characters."""
    text = str(e)
    if isinstance(e, UnicodeDecodeError) and isinstance(e.object, bytes):  # a message naming non-UTF-8 names
        text = e.object.decode("utf-8", errors="replace")
    msg = " ".join(text.split()) or type(e).__name__
    return msg if len(msg) <= MAX_MESSAGE else msg[:MAX_MESSAGE] + " ..."


class Session(ort.InferenceSession):
    """An ``onnxruntime.InferenceSession`` whose :meth:`run` raises ExecutionError (with onnxruntime's message)
    instead of onnxruntime's own exception types.  Made by :func:`make_session`.

    onnxruntime's provider fallback is off: on a failure it would print an "EP Error" banner on stdout (breaking
    ``--json`` output; a model whose node names are not UTF-8 triggers it) and retry on the CPU, and a model
    meant for CUDA must not silently run, or be timed, on the CPU."""

    def _create_inference_session(self, *args: Any, **kwargs: Any) -> Any:
        self._enable_fallback = False
        return super()._create_inference_session(*args, **kwargs)

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        try:
            return super().run(output_names, input_feed, run_options)
        except ExecutionError:
            raise
        except Exception as e:  # onnxruntime raises its own types (Fail, InvalidArgument, RuntimeException ...)
            raise ExecutionError(f"onnxruntime failed to run the model: {ort_message(e)}") from e


def runtime_version() -> str:
    """The version of the onnxruntime module this process runs (``onnxruntime-gpu``'s too, whatever the installed
    distributions' metadata say), and its providers: ``1.31.1 (CUDAExecutionProvider, CPUExecutionProvider)``."""
    return f"{ort.__version__} ({', '.join(ort.get_available_providers())})"


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
    save_optimized: str | None = None,
    prepack: bool = True,
) -> Session:
    """An onnxruntime session for ``model`` (proto, serialized bytes or file path) on ``provider`` (CPU unless
    told; see :func:`require_provider`). ``prepack=False``: onnxruntime does not prepack the weights of its matrix
    products (a copy of them, for speed): a session that checks rather than times saves that memory."""
    so = ort.SessionOptions()
    so.graph_optimization_level = OPT_LEVELS[optimization]
    so.log_severity_level = 4  # failures raise (with ORT's message); nothing is printed
    if threads is not None:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    if save_optimized is not None:
        from graphsub.frontends.ort_signature import saving_options

        saving_options(so, save_optimized)
    if not prepack:
        so.add_session_config_entry("session.disable_prepacking", "1")
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    pooled = pooled_file(model)
    try:
        where = pooled or src
        start = time.perf_counter()
        sess = Session(where, so, providers=PROVIDERS[provider])
        _observe_session((file_bytes(where) if isinstance(where, str) else len(where)) / 1e6,
                         time.perf_counter() - start)
        return sess
    except Exception as e:  # onnxruntime raises its own exception types (MemoryError for a huge model, too)
        raise ExecutionError(f"onnxruntime rejected the model: {ort_message(e)}") from e
    finally:
        if pooled:
            release(pooled)


def pooled_file(model: onnx.ModelProto | bytes | str) -> str | None:
    """A file of ``model`` whose held weights (:mod:`graphsub.frontends.shared`: a large model's weights, outside its
    bytes) are external data in the weight pool (:mod:`graphsub.frontends.weight_pool`), for onnxruntime to map
    without a copy; None for a model without held weights. Remove it with ``weight_pool.release`` once the session
    is made."""
    try:
        proto = with_placeholders(model)
    except GraphsubError:
        raise
    except Exception:  # bytes onnx cannot parse: onnxruntime says why when it reads them
        return None
    return None if proto is None else session_file(proto)


def optimized_model(model: bytes | str, *, threads: int, provider: str = "cpu") -> onnx.ModelProto:
    """The graph onnxruntime runs for ``model`` (serialized bytes or a path): its own rewrite under ``ORT_ENABLE_ALL``
    at ``threads`` intra-op threads, as written by ``SessionOptions.optimized_model_filepath`` into a temporary
    folder (weights included, except for a model with held weights: see :func:`optimized_files`). Raises
    ExecutionError when onnxruntime rejects the model."""
    with optimized_files(model, threads=threads, provider=provider) as (opt, _):
        return opt


@contextlib.contextmanager
def optimized_files(model: bytes | str, *, threads: int, provider: str = "cpu"
                    ) -> Iterator[tuple[onnx.ModelProto, str | None]]:
    """:func:`optimized_model`'s graph and, for a model with held weights (a large model's, or one exported with
    placeholders, :mod:`graphsub.frontends.shared`) or a file above :data:`~graphsub.frontends.shared.SHARE_BYTES`,
    the folder holding its weights while the context lasts: then the graph's initializers are external data
    (``weights.bin`` in that folder, which onnxruntime maps when a session is opened from a file there) and are not
    read into the proto; otherwise the folder is None and the weights are in the proto."""
    with tempfile.TemporaryDirectory(prefix="graphsub-ortopt-") as tmp:
        out = os.path.join(tmp, OPTIMIZED_NAME)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 4
        so.optimized_model_filepath = out
        so.add_session_config_entry("session.disable_prepacking", "1")  # the graph is asked, not the kernels' copies
        pooled = pooled_file(model)
        large = bool(pooled) or (isinstance(model, str) and file_bytes(model) > SHARE_BYTES)
        if large:  # the weights would not fit one protobuf: beside it, not read back (the graph is what is asked)
            so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
            so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        try:
            ort.InferenceSession(pooled or model, so, providers=PROVIDERS[provider])
        except Exception as e:  # onnxruntime raises its own exception types
            raise ExecutionError(f"onnxruntime rejected the model: {ort_message(e)[:500]}") from e
        finally:
            if pooled:
                release(pooled)
        try:
            opt = onnx.load(out, load_external_data=not large)
        except Exception as e:  # a file onnxruntime did not write, or one onnx cannot read back
            raise ExecutionError(f"onnxruntime's optimized model cannot be read back: {e}") from e
        yield opt, tmp if large else None


def run_session(
    sess: ort.InferenceSession, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None
) -> list[np.ndarray]:
    """Run ``sess`` on ``feeds``: the ``outputs`` named (all by default) as arrays; ExecutionError on failure."""
    try:
        return [np.asarray(o) for o in sess.run(list(outputs) if outputs else None, dict(feeds))]
    except ExecutionError:
        raise
    except Exception as e:  # a session not made by make_session, or np.asarray of a non-tensor output
        raise ExecutionError(f"onnxruntime failed to run the model: {ort_message(e)}") from e


def run_model(
    model: onnx.ModelProto | bytes | str,
    feeds: Mapping[str, np.ndarray],
    *,
    optimization: str = "disable",
    threads: int | None = None,
) -> list[np.ndarray]:
    """Run ``model`` once on ``feeds``; outputs in graph-output order."""
    return run_session(make_session(model, optimization=optimization, threads=threads), feeds)


__all__ = ["MAX_MESSAGE", "OPTIMIZED_NAME", "OPT_LEVELS", "PROVIDERS", "Session", "make_session", "optimized_files",
           "optimized_model", "ort_message", "pooled_file", "require_provider", "run_model", "run_session",
           "runtime_version", "session_s_per_mb"]
