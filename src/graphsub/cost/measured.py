"""Measured cost model: per-op onnxruntime timings on this machine, cached in SQLite.

Each distinct ``(op, canonical attributes, input types, which inputs are constants)`` is timed
once as a one-node ONNX model (TASO measures each op once per parameter set; MetaFlow §4.1):

1. build the node alone with :class:`~graphsub.ir.builder.Builder` -- constant inputs become
   initializers (so onnxruntime may pre-pack them, as in the full model), the others graph
   inputs; random data from :mod:`graphsub.data`;
2. export with :func:`~graphsub.frontends.onnx_export.export_graph`, open a session with a fixed
   thread count and optimization level (``disable`` by default);
3. ``warmup`` runs, then repeats until ``budget_ms`` of timed runs (at least ``min_repeats``,
   at most ``max_repeats``); record the median, the IQR, ``noise = IQR / median`` and the
   minimum (the model uses the median unless ``statistic="min"``).  With one thread the clock
   is the thread's CPU time (immune to other processes on a shared machine, see
   :func:`resolve_clock`), otherwise wall time.

The cost of a node is its median minus the session-call overhead (an ``Identity`` on one float,
measured the same way), clipped at 0; a graph adds one call overhead (:meth:`base_cost`).  A
one-node model keeps its weights in cache, a whole model whose weights exceed the last-level
cache does not: there a node costs at least the time to stream its constant inputs (over
256 KiB) from DRAM (``cold_weights``).  Leaves and weight-only nodes are free and never
measured; opaque nodes are measured like any other node (they export verbatim).

Cache: SQLite (:class:`~graphsub.cost.op_cache.OpTimeCache`), default ``$GRAPHSUB_CACHE`` or
``~/.cache/graphsub/op_times.sqlite``.  Key: signature digest (stable across processes) and
constant mask, onnxruntime version, thread count, CPU model and core count, optimization level
and measurement method (including the clock); a readable signature is stored beside it.  WAL
journal, a 60 s busy timeout and ``INSERT OR IGNORE`` (first writer wins) make concurrent
processes safe.

>>> import tempfile, pathlib
>>> from graphsub.ir import Builder
>>> b = Builder()
>>> g = b.build(b.relu(b.input("x", (1, 64))))
>>> m = MeasuredCostModel(cache=pathlib.Path(tempfile.mkdtemp()) / "t.sqlite", threads=1,
...                       budget_ms=2, progress=False)
>>> s = m.profile(g)
>>> (s.signatures, s.misses), m.profile(g).hits
((1, 1), 1)
>>> m.graph_cost(g).time_ms >= m.overhead_ms() > 0   # the op, plus one session call
True
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.cost.analytic import analytic_cost
from graphsub.cost.base import (
    Cost,
    CostModelError,
    Limits,
    Objective,
    SumCostModel,
    canonical_operands,
    const_mask,
    describe_sig,
)
from graphsub.cost.env import llc_bytes as default_llc_bytes
from graphsub.cost.env import machine_key
from graphsub.cost.op_cache import METHOD, Context, OpTimeCache, Timing
from graphsub.errors import ExecutionError, GraphsubError
from graphsub.ir.analysis import is_free, weight_bytes, weight_only_map
from graphsub.ir.builder import Builder
from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig

#: constant inputs smaller than this are assumed to stay in cache (no cold-weight floor)
COLD_MIN_BYTES = 256 * 1024
OVERHEAD_KEY = "__call_overhead__"

log = logging.getLogger("graphsub")

def default_consts(sig: OpSig) -> tuple[bool, ...]:
    """Constness assumed when a caller gives none: weights of conv/gemm/norms, 2-D matmul weights."""
    n = len(sig.in_types)
    if sig.op in ("conv2d", "gemm", "batchnorm", "layernorm"):
        return (False,) + (True,) * (n - 1)
    if sig.op == "matmul" and n == 2 and sig.in_types[1].rank == 2:
        return (False, True)
    return (False,) * n


def one_node_graph(sig: OpSig, consts: Sequence[bool]) -> Graph:
    """The node ``sig`` alone: constant slots are weights ``c<i>``, the others inputs ``x<i>``;
    every output is a graph output."""
    b = Builder(f"one_{sig.op}")
    ins = []
    for i, t in enumerate(sig.in_types):
        if consts[i]:
            ins.append(b.weight(f"c{i}", t.shape, dtype=t.dtype))
        else:
            ins.append(b.input(f"x{i}", t.shape, t.dtype))
    return b.build(list(b.op_multi(sig.op, *ins, **dict(sig.attrs))))


def time_graph(graph: Graph, *, threads: int, optimization: str = "disable", budget_ms: float = 60.0,
               warmup: int = 2, min_repeats: int = 5, max_repeats: int = 200, seed: int = 0,
               clock: str = "wall") -> Timing:
    """Median/IQR of onnxruntime runs of ``graph`` (random weights and inputs from ``seed``)."""
    from graphsub.data import materialize, random_inputs
    from graphsub.frontends.onnx_export import export_graph
    from graphsub.frontends.ort import make_session

    g = materialize(graph, seed)
    sess = make_session(export_graph(g), optimization=optimization, threads=threads)
    feeds = random_inputs(g, seed)
    kw: dict[str, Any] = {"budget_ms": budget_ms, "warmup": warmup, "min_repeats": min_repeats,
                          "max_repeats": max_repeats, "clock": clock}
    try:
        return time_session(sess, feeds, **kw)
    except Exception as first:  # onnxruntime raises its own types, e.g. an index out of range for an opaque op
        # integer data whose range graphsub does not know (GatherND indices ...): zero is always in range
        zeros = {k: np.zeros_like(v) for k, v in g.params.items() if np.asarray(v).dtype.kind in "iub"}
        g0 = g.with_params(zeros) if zeros else g
        feeds0 = {k: np.zeros_like(v) if v.dtype.kind in "iub" else v for k, v in feeds.items()}
        try:
            sess0 = make_session(export_graph(g0), optimization=optimization, threads=threads) if zeros else sess
            return time_session(sess0, feeds0, **kw)
        except Exception:
            raise ExecutionError(f"onnxruntime cannot run {graph.name} on random inputs: {first}") from first


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def resolve_clock(clock: str, threads: int) -> str:
    """``auto`` -> ``cpu`` for one thread, else ``wall``; ``cpu`` needs one thread.

    With one intra-op thread onnxruntime runs every kernel on the calling thread, so the thread's
    CPU time is the latency the run would have on an idle machine, and time other processes
    take from this core is not counted: a robust clock on a shared machine.  With more threads the
    work spreads over a pool and only wall-clock time measures latency.
    """
    if clock == "auto":
        return "cpu" if threads == 1 else "wall"
    if clock not in CLOCKS:
        raise CostModelError(f"unknown clock {clock!r}; known: auto, {', '.join(CLOCKS)}")
    if clock == "cpu" and threads != 1:
        raise CostModelError("clock='cpu' measures latency only with threads=1")
    return clock


def time_session(sess: Any, feeds: Mapping[str, np.ndarray], *, budget_ms: float = 60.0, warmup: int = 2,
                 min_repeats: int = 5, max_repeats: int = 200, clock: str = "wall") -> Timing:
    """Time ``sess.run`` on ``feeds``: warm-up, then repeats until the budget (wall time) is spent.

    ``clock``: ``wall`` (``perf_counter``) or ``cpu`` (this thread's CPU time, see
    :func:`resolve_clock`).  A run slower than ``budget_ms / 2`` cuts the warm-up to one run and
    the repeats to three, so one measurement stays within a few multiples of the budget.
    """
    run = sess.run
    timer = CLOCKS[clock]
    feeds = dict(feeds)
    t0 = time.perf_counter()
    run(None, feeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    if first_ms > budget_ms / 2:
        warmup, min_repeats = 0, min(min_repeats, 3)
    for _ in range(max(warmup - 1, 0)):
        run(None, feeds)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        t = timer()
        run(None, feeds)
        times.append(timer() - t)
        if len(times) >= min_repeats and (time.perf_counter() - start) * 1e3 >= budget_ms:
            break
    arr = np.asarray(times) * 1e3
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return Timing(float(med), float(q3 - q1), len(times), float(arr.min()))


def _overhead_graph() -> Graph:
    b = Builder("call_overhead")
    return b.build(b.identity(b.input("x", (1,))))


# ----------------------------------------------------------------------------- the model


@dataclass
class CacheStats:
    """Lookups by where they were answered; ``measure_s``: seconds spent measuring."""

    memory_hits: int = 0
    db_hits: int = 0
    misses: int = 0
    measure_s: float = 0.0

    @property
    def hit_rate(self) -> float:
        n = self.memory_hits + self.db_hits + self.misses
        return (self.memory_hits + self.db_hits) / n if n else 1.0


@dataclass(frozen=True)
class ProfileStats:
    """Result of :meth:`MeasuredCostModel.profile`: distinct keys, cache hits/misses, seconds."""

    signatures: int
    hits: int
    misses: int
    seconds: float
    noise_median: float = 0.0
    measured: tuple[str, ...] = field(default=(), repr=False)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.signatures if self.signatures else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {"signatures": self.signatures, "hits": self.hits, "misses": self.misses,
                "hit_rate": self.hit_rate, "seconds": self.seconds, "noise_median": self.noise_median}


NodeKey = tuple[OpSig, tuple[bool, ...]]


class MeasuredCostModel(SumCostModel):
    """Sum of measured per-op times (``time_ms``) plus the analytic FLOPs/bytes/launches.

    ``cache``: an :class:`OpTimeCache`, a path, or None for :func:`default_cache_path`;
    ``threads``: onnxruntime intra-op threads (default: all cores); ``optimization``: the
    onnxruntime level used for the one-node models; ``budget_ms`` / ``warmup`` /
    ``min_repeats`` / ``max_repeats``: see :func:`time_session`; ``progress``: show a rich
    progress bar (stderr) while profiling; ``gate``: called before every measurement (e.g.
    :func:`graphsub.cost.calibrate.wait_for_quiet` on a shared machine); ``clock``: ``auto``
    (thread CPU time with one thread, else wall time; see :func:`resolve_clock`), ``wall`` or
    ``cpu``; ``statistic``: ``median`` (default) or ``min`` of the repeats -- both are stored, so
    switching needs no re-measurement (on a machine shared with other VMs the minimum is far
    more repeatable, see ``experiments/results/cost_summary.md``); ``cold_weights``: in a graph
    whose weights exceed ``llc_bytes`` (default: the last-level cache), a node costs at least the
    time to stream its constant inputs from memory (:meth:`cold_weight_ms`); ``node_cost`` is the
    warm-cache cost of the op alone.  ``stats`` counts lookups.
    """

    method = METHOD

    def __init__(self, *, cache: OpTimeCache | str | os.PathLike[str] | None = None, threads: int | None = None,
                 optimization: str = "disable", budget_ms: float = 60.0, warmup: int = 2, min_repeats: int = 5,
                 max_repeats: int = 200, seed: int = 0, progress: bool = True, objective: Objective = "time_ms",
                 limits: Limits | None = None, gate: Callable[[], object] | None = None,
                 clock: str = "auto", statistic: str = "median", cold_weights: bool = True,
                 llc_bytes: int | None = None) -> None:
        import onnxruntime as ort

        from graphsub.frontends.ort import OPT_LEVELS

        super().__init__(objective, limits)
        if optimization not in OPT_LEVELS:
            raise CostModelError(f"unknown optimization level {optimization!r}; known: {', '.join(OPT_LEVELS)}")
        self.cache = cache if isinstance(cache, OpTimeCache) else OpTimeCache(cache)
        self.threads = int(threads or os.cpu_count() or 1)
        self.optimization = optimization
        self.clock = resolve_clock(clock, self.threads)
        if statistic not in ("median", "min"):
            raise CostModelError(f"statistic must be median or min, not {statistic!r}")
        self.statistic = statistic
        self.cold_weights = cold_weights
        self.llc_bytes = llc_bytes if llc_bytes is not None else default_llc_bytes()
        self._bandwidth: float | None = None
        self.ctx = Context(ort.__version__, self.threads, machine_key(), optimization, f"{self.method}-{self.clock}")
        self.budget_ms, self.warmup, self.seed, self.progress = budget_ms, warmup, seed, progress
        self.min_repeats, self.max_repeats = min_repeats, max_repeats
        self.gate = gate
        self.name = ("measured" if optimization == "disable" else f"measured:{optimization}") + (
            "[min]" if statistic == "min" else "")
        self.stats = CacheStats()
        self._times: dict[tuple[str, str], Timing] = {}
        self._opaque: dict[tuple[str, str], OpSig] = {}  # keys of opaque ops: estimated when they cannot run alone
        self._overhead: float | None = None

    # -- keys and timings -------------------------------------------------------------
    @staticmethod
    def key_of(sig: OpSig, consts: Sequence[bool]) -> tuple[str, str]:
        return f"{sig.digest & 0xFFFFFFFFFFFFFFFF:016x}", "".join("c" if c else "x" for c in consts)

    def _measure(self, graph: Graph) -> Timing:
        if self.gate is not None:
            self.gate()
        return time_graph(graph, threads=self.threads, optimization=self.optimization, budget_ms=self.budget_ms,
                          warmup=self.warmup, min_repeats=self.min_repeats, max_repeats=self.max_repeats,
                          seed=self.seed, clock=self.clock)

    def overhead_ms(self) -> float:
        """Median time of one session call on a trivial model (subtracted from every op)."""
        if self._overhead is None:
            hit = self.cache.get(self.ctx, OVERHEAD_KEY)
            if hit is None:
                hit = time_graph(_overhead_graph(), threads=self.threads, optimization=self.optimization,
                                 budget_ms=max(self.budget_ms, 20.0), warmup=5, min_repeats=50,
                                 max_repeats=2000, seed=self.seed, clock=self.clock)
                self.cache.put(self.ctx, OVERHEAD_KEY, "", "Identity f32[1] (session call overhead)", hit)
            self._overhead = hit.stat(self.statistic)
        return self._overhead

    def base_cost(self) -> Cost:
        return Cost(time_ms=self.overhead_ms())

    def timing(self, sig: OpSig, consts: Sequence[bool]) -> Timing:
        """The raw timing of a one-node model (memory, then SQLite, then a measurement)."""
        key = self.key_of(sig, consts)
        hit = self._times.get(key)
        if hit is not None:
            self.stats.memory_hits += 1
            return hit
        hit = self.cache.get(self.ctx, *key)
        if hit is not None:
            self.stats.db_hits += 1
        else:
            label = describe_sig(sig, 400)
            self.check_stop(label)
            self.stats.misses += 1
            if sig.op == "opaque":
                self._opaque[key] = sig
            hit = self._measure_and_store(key, label, lambda: one_node_graph(sig, consts))
        self._times[key] = hit
        return hit

    def _unmeasurable(self, sig: OpSig, error: CostModelError) -> Timing:
        """An estimate for an opaque op that cannot run alone on random data (a ``ReduceL2`` whose axes, a constant
        of the model, are drawn at random; a ``Reshape`` to a shape computed at run time): one session call plus
        streaming its inputs and outputs from memory, kept in memory only (never cached as a measurement). No rule
        rewrites an opaque op, so its cost is the same in every candidate: the estimate only has to be finite for
        the search and the model to go on (it used to refuse the whole model, exit 3)."""
        from graphsub.cost.analytic import cpu_device

        log.info("%s; estimating it from its bytes instead", error)
        moved = sum(t.nbytes for t in (*sig.in_types, *sig.out_types))
        ms = self.overhead_ms() + moved / (cpu_device().bandwidth_gbs * 1e9) * 1e3
        return Timing(ms, 0.0, 0, ms)

    def _measure_and_store(self, key: tuple[str, str], label: str, build: Any) -> Timing:
        t = time.perf_counter()
        try:
            timing = self._measure(build())
        except GraphsubError as e:
            error = CostModelError(f"cannot measure {label}: {e}")
            if key in self._opaque:  # an op graphsub keeps as it is: estimated, and the run goes on
                return self._unmeasurable(self._opaque[key], error)
            raise error from e
        self.stats.measure_s += time.perf_counter() - t
        self.cache.put(self.ctx, key[0], key[1], label, timing)
        return timing

    def is_cold(self, graph: Graph, parent: Graph | None = None) -> bool:
        """Whether ``graph``'s weights exceed the last-level cache (so each run reads them from DRAM)."""
        return self.cold_weights and weight_bytes(graph, parent) > self.llc_bytes

    def cold_weight_ms(self, const_bytes: int) -> float:
        """Time to stream ``const_bytes`` of weights from memory (the ``cold_weights`` floor).

        A one-node model re-reads the same weights every run, so they sit in the CPU cache; in a
        whole model whose weights exceed the last-level cache each weight comes from DRAM.  Below
        :data:`COLD_MIN_BYTES` the floor is 0.
        """
        if not self.cold_weights or const_bytes < COLD_MIN_BYTES:
            return 0.0
        if self._bandwidth is None:
            from graphsub.cost.analytic import cpu_device

            self._bandwidth = cpu_device().bandwidth_gbs
        return const_bytes / (self._bandwidth * 1e9) * 1e3

    def cost_in(self, graph: Graph, nid: int, wo: Mapping[int, bool]) -> Cost:
        c = super().cost_in(graph, nid, wo)
        if is_free(graph, nid, wo) or not self.is_cold(graph):
            return c
        node = graph.nodes[nid]
        floor = self.cold_weight_ms(sum(graph.type_of(r).nbytes for r in node.inputs if wo[r.node]))
        return c if floor <= c.time_ms else Cost(floor, c.flops, c.bytes, c.launches)

    def delta(self, parent: Graph, child: Graph) -> Cost:
        if self.is_cold(parent) != self.is_cold(child, parent):  # every weight-streaming node changes
            return self.graph_cost(child) - self.graph_cost(parent)
        return super().delta(parent, child)

    def _node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None) -> Cost:
        mask = default_consts(sig) if consts is None else consts
        ms = max(self.timing(sig, mask).stat(self.statistic) - self.overhead_ms(), 0.0)
        a = analytic_cost(sig)
        return Cost(time_ms=ms, flops=a.flops, bytes=a.bytes, launches=a.launches)

    # -- bulk ---------------------------------------------------------------------------
    def items(self, graph: Graph) -> dict[tuple[str, str], tuple[str, Any]]:
        """Distinct cache keys the graph needs -> (label, builder of the graph to time)."""
        wo = weight_only_map(graph)
        out: dict[tuple[str, str], tuple[str, Any]] = {}
        for nid in graph.topo_order():
            if not is_free(graph, nid, wo):
                self._add_items(graph, nid, wo, out)
        return out

    def _add_items(self, graph: Graph, nid: int, wo: Mapping[int, bool],
                   out: dict[tuple[str, str], tuple[str, Any]]) -> None:
        """Add the key run-time node ``nid`` is priced by (a one-node model) to ``out`` if new."""
        sig, mask, _ = canonical_operands(graph.nodes[nid].sig, const_mask(graph, nid, wo))
        assert mask is not None
        key = self.key_of(sig, mask)
        if key not in out:
            out[key] = (describe_sig(sig, 400), lambda s=sig, c=mask: one_node_graph(s, c))
            if sig.op == "opaque":
                self._opaque[key] = sig

    def profile(self, graph: Graph, progress: bool | None = None) -> ProfileStats:
        """Make sure every run-time node of ``graph`` is timed; measure only the missing keys.  BudgetExceeded
        (what was measured is kept) when :attr:`stop` says so before a measurement."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        start = time.perf_counter()
        self.overhead_ms()
        items = self.items(graph)
        todo = [k for k in items if k not in self._times]
        found = self.cache.get_many(self.ctx, todo)
        self._times.update(found)
        missing = [k for k in todo if k not in found]
        show = self.progress if progress is None else progress
        with Progress(TextColumn("[bold]profiling[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                      disable=not show or not missing) as bar:
            task = bar.add_task(graph.name, total=len(missing))
            for key in missing:
                label, build = items[key]
                self.check_stop(label)
                bar.update(task, description=f"{graph.name}: {label[:60]}")
                self._times[key] = self._measure_and_store(key, label, build)
                bar.advance(task)
        self.stats.misses += len(missing)
        self.stats.db_hits += len(found)
        self.stats.memory_hits += len(items) - len(todo)
        noise = [self._times[k].noise for k in items]
        return ProfileStats(len(items), len(items) - len(missing), len(missing), time.perf_counter() - start,
                            float(np.median(noise)) if noise else 0.0, tuple(items[k][0] for k in missing))

    def prepare(self, graph: Graph) -> None:
        self.profile(graph)


__all__ = [
    "COLD_MIN_BYTES",
    "METHOD",
    "CacheStats",
    "Context",
    "MeasuredCostModel",
    "OpTimeCache",
    "ProfileStats",
    "Timing",
    "default_consts",
    "one_node_graph",
    "resolve_clock",
    "time_graph",
    "time_session",
]
