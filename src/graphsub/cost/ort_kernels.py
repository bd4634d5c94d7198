"""Price a model as onnxruntime will run it: the kernels of ORT's own optimized graph, each timed.

Under ``ORT_ENABLE_ALL`` onnxruntime rewrites a model before it runs it: it folds constants, removes
identities and no-op casts, fuses attention (``Attention``, ``MultiHeadAttention``), normalisation
(``LayerNormalization``, ``SkipLayerNormalization``, ``SimplifiedLayerNormalization``), activations
(``Gelu``, ``BiasGelu``, ``FastGelu``, ``QuickGelu``), ``FusedMatMul``, ``FusedConv`` and ``FusedGemm``, and lays
convolutions out in NCHWc blocks (``com.microsoft.nchwc.Conv`` between ``ReorderInput`` and ``ReorderOutput``).
A sum of one-op timings, or :mod:`graphsub.cost.ort_fusion`'s conv/matmul chains, cannot see most of this.
This model asks onnxruntime instead:

1. **What will run** (:func:`graphsub.frontends.ort.optimized_model`): onnxruntime optimizes the model at the
   user's thread count and saves the result (``SessionOptions.optimized_model_filepath``); its nodes are the
   kernels that run.  No timing; :func:`kernel_counts` counts them by type.
2. **What each kernel receives** (:mod:`graphsub.frontends.ort_kernels`): one run of that graph, with every
   tensor exposed as an output, records the shape, type and value of every kernel input (integer inputs such as
   gather indices and shapes keep their real values).
3. **What each kernel costs**: each kernel alone, in a one-node model (its weights as initializers, so
   onnxruntime pre-packs them as in the full model; ``ORT_DISABLE_ALL``, since it is already in its final
   form), timed at the same thread count; cached in the op-time cache (:class:`~graphsub.cost.measured.OpTimeCache`)
   under a digest of the kernel (domain, type, attributes, input types, which inputs are weights, the values of
   small integer inputs).  As in :mod:`graphsub.cost.measured`, the session-call overhead is subtracted and, in a
   model whose weights exceed the last-level cache, a kernel costs at least the time to stream its weights from
   memory (not a gather, which reads a few rows of its table).
4. **The estimate**: ``scale * sum(kernel times) + per_kernel_ms * kernels + call overhead``, where ``scale``
   and ``per_kernel_ms`` (what isolated timings miss: the scheduling of kernels, caches evicted between them)
   are fitted on the suite's models (``experiments/cost/cost_ranking.py``; :data:`CALIBRATION`).

How well it ranks ``optimize``'s candidates, against ``fused``, is measured in
``experiments/results/cost_ranking.md``: neither ranks candidates that differ by a few percent reliably (585 and 671
of 1,064 candidate pairs ordered as measured, 2026-11-27), which is why ``optimize`` decides by timing them.

It prices any model onnxruntime can run -- a peer's output full of contrib ops included -- but a whole model
at a time: it is for ranking finished candidates (:mod:`graphsub.optimize`), not for a search's O(change)
deltas.  Kernels that carry subgraphs (``If``, ``Loop``, ``Scan``), and any kernel onnxruntime will not run
alone, are not timed; they are reported in ``unpriced`` and cost 0.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.cost.measured import Context, OpTimeCache, Timing, resolve_clock, time_session
from graphsub.errors import ExecutionError

METHOD = "ortkernel-v1"
#: (scale, per-kernel ms) per thread count, fitted on the suite's originals on this project's 2-core machine
#: (14 models at 2 threads, median error 14% in sample, 22% unscaled; fitted 2026-11-26 at 40d5e7b, see git history
#: -- ``experiments/results/cost_ranking.json``, rerun 2026-11-27 on the rebuilt suite, fits 0.896 and 0.0202);
#: a thread count not fitted gets (1, 0): the plain sum
CALIBRATION: dict[int, tuple[float, float]] = {2: (0.574, 0.0313)}
#: weights at least this large are assumed to come from memory, not cache, in a model whose weights do not fit
COLD_MIN_BYTES = 256 * 1024
#: kernels that read a few rows of a large weight (an embedding table), not all of it: no streaming floor
_READS_PART = frozenset({"Gather", "GatherElements", "GatherND", "EmbedLayerNormalization", "Slice"})


@dataclass
class KernelPrice:
    """What onnxruntime runs for one model and what it costs: per kernel ``(domain.op, ms)`` in graph order."""

    kernels: list[tuple[str, float]] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)
    overhead_ms: float = 0.0
    measured: int = 0  # kernels timed now (not found in the cache)
    seconds: float = 0.0

    @property
    def sum_ms(self) -> float:
        return sum(ms for _, ms in self.kernels)

    def estimate_ms(self, threads: int) -> float:
        """The calibrated estimate of the model's latency (see the module docstring)."""
        scale, per_kernel = calibration(threads)
        return scale * self.sum_ms + per_kernel * len(self.kernels) + self.overhead_ms

    def by_op(self) -> dict[str, float]:
        """Milliseconds per kernel type, most expensive first."""
        acc: dict[str, float] = {}
        for op, ms in self.kernels:
            acc[op] = acc.get(op, 0.0) + ms
        return dict(sorted(acc.items(), key=lambda kv: -kv[1]))

    def counts(self) -> dict[str, int]:
        return dict(Counter(op for op, _ in self.kernels).most_common())


def calibration(threads: int) -> tuple[float, float]:
    """``(scale, per_kernel_ms)`` for ``threads``; ``(1, 0)`` where none was fitted."""
    return CALIBRATION.get(threads, (1.0, 0.0))


def kernel_counts(model: bytes | str, *, threads: int) -> dict[str, int]:
    """How many kernels of each type onnxruntime runs for ``model`` (no timing), most frequent first."""
    from graphsub.frontends.ort import optimized_model
    from graphsub.frontends.ort_kernels import op_name

    return dict(Counter(op_name(n) for n in optimized_model(model, threads=threads).graph.node).most_common())


class OrtKernelPricer:
    """Prices whole models by their ORT kernels (see the module docstring); one per thread count."""

    def __init__(self, *, threads: int, cache: OpTimeCache | str | os.PathLike[str] | None = None,
                 budget_ms: float = 20.0, clock: str = "auto", cold_weights: bool = True,
                 gate: Callable[[], object] | None = None) -> None:
        from graphsub.cost.env import llc_bytes, machine_key
        from graphsub.frontends.ort_kernels import ORT_VERSION

        self.threads = int(threads)
        self.cache = cache if isinstance(cache, OpTimeCache) else OpTimeCache(cache)
        self.clock = resolve_clock(clock, self.threads)
        self.budget_ms = budget_ms
        self.cold_weights = cold_weights
        self.llc = llc_bytes()
        self.gate = gate
        self.ctx = Context(ORT_VERSION, self.threads, machine_key(), "kernel", f"{METHOD}-{self.clock}")
        self._memo: dict[str, Timing] = {}
        self._overhead: float | None = None

    def _time(self, data: bytes, feeds: dict[str, np.ndarray]) -> Timing:
        from graphsub.frontends.ort import make_session

        if self.gate is not None:
            self.gate()
        sess = make_session(data, optimization="disable", threads=self.threads)
        try:
            return time_session(sess, feeds, budget_ms=self.budget_ms, warmup=2, min_repeats=5, max_repeats=2000,
                                clock=self.clock)
        except Exception as e:  # onnxruntime raises its own types
            raise ExecutionError(f"onnxruntime failed to run a kernel alone: {e}") from e

    def overhead_ms(self) -> float:
        """One session call on a trivial model (subtracted from each kernel, added once per model)."""
        if self._overhead is None:
            from graphsub.frontends.ort_kernels import call_overhead_model

            key = "__call_overhead__"
            hit = self.cache.get(self.ctx, key)
            if hit is None:
                hit = self._time(*call_overhead_model())
                self.cache.put(self.ctx, key, "", "Identity f32[1] (session call overhead)", hit)
            self._overhead = hit.median_ms
        return self._overhead

    def price(self, model: bytes | str, feeds: Mapping[str, np.ndarray]) -> KernelPrice:
        """The kernels onnxruntime runs for ``model`` (fed ``feeds``) and each one's time."""
        from graphsub.frontends.ort import optimized_files

        t0 = time.perf_counter()
        with optimized_files(model, threads=self.threads) as (opt, base_dir):
            out = self._price(opt, feeds, base_dir)
        out.seconds = time.perf_counter() - t0
        return out

    def _price(self, opt: Any, feeds: Mapping[str, np.ndarray], base_dir: str | None) -> KernelPrice:
        """:meth:`price` of onnxruntime's optimized graph ``opt`` (an ``onnx.ModelProto``; its external weights in
        ``base_dir``)."""
        from graphsub.cost.analytic import cpu_device
        from graphsub.frontends.ort_kernels import kernels, weight_bytes

        cold = self.cold_weights and weight_bytes(opt) > self.llc
        bandwidth = cpu_device().bandwidth_gbs
        out = KernelPrice(overhead_ms=self.overhead_ms())

        def known(digest: str) -> bool:
            hit = self._memo.get(digest) or self.cache.get(self.ctx, digest)
            if hit is not None:
                self._memo[digest] = hit
            return hit is not None

        for k in kernels(opt, feeds, self.threads, known, base_dir):
            hit = None if k.error else self._memo.get(k.digest) or self.cache.get(self.ctx, k.digest)
            if hit is None and not k.error:
                try:
                    hit = self._time(k.model, k.feeds)
                except ExecutionError:  # a kernel onnxruntime will not run alone (it needs its graph)
                    hit = None
                else:
                    self.cache.put(self.ctx, k.digest, "", k.op, hit)
                    out.measured += 1
            if hit is None:
                out.unpriced.append(k.op)
                continue
            self._memo[k.digest] = hit
            ms = max(hit.median_ms - out.overhead_ms, 0.0)
            if cold and k.weight_bytes >= COLD_MIN_BYTES and k.op_type not in _READS_PART:
                ms = max(ms, k.weight_bytes / (bandwidth * 1e9) * 1e3)
            out.kernels.append((k.op, ms))
        return out


def fit_calibration(points: list[tuple[float, int, float]]) -> tuple[float, float]:
    """Least-squares ``(scale, per_kernel_ms)`` from ``(sum of kernel ms, kernels, measured ms - overhead)``
    points; scale is kept positive and the per-kernel term non-negative."""
    if not points:
        return 1.0, 0.0
    a = np.array([[s, n] for s, n, _ in points], dtype=float)
    y = np.array([m for _, _, m in points], dtype=float)
    (scale, per_kernel), *_ = np.linalg.lstsq(a, y, rcond=None)
    if per_kernel < 0 or scale <= 0:  # fall back to a scale alone
        scale, per_kernel = float(a[:, 0] @ y / max(a[:, 0] @ a[:, 0], 1e-12)), 0.0
    return float(scale), float(per_kernel)


def describe(price: KernelPrice, threads: int, top: int = 6) -> str:
    """One line: the estimate and the most expensive kernel types."""
    parts = ", ".join(f"{op} x{price.counts()[op]} {ms:.2f} ms" for op, ms in list(price.by_op().items())[:top])
    return f"{price.estimate_ms(threads):.2f} ms over {len(price.kernels)} kernels ({parts})"
