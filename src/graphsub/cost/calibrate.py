"""Calibration: how well do cost models predict (and rank) real onnxruntime latencies?

For each (model, variant) graph, :func:`calibrate` measures the end-to-end latency of the whole
graph in onnxruntime (fixed threads; ``ORT_DISABLE_ALL`` and ``ORT_ENABLE_ALL``), in
interleaved rounds so that background load hits every graph alike, and records each cost
model's prediction.  :func:`summarize` then reports, per (cost model, optimization level):

* ``spearman``: rank correlation over all graphs (:func:`spearman`, average ranks for ties);
* ``ratio``: median and spread of predicted / measured;
* ``pairs``: within each model, the fraction of variant pairs whose order the cost model gets
  right (pairs whose measured latencies differ by less than ``tol`` are ties and skipped).
  This is what a search needs: ranking rewrites of one graph, not graphs of different sizes.
* ``change_error``: mean over non-base variants of ``|log(pred_v / pred_base) -
  log(meas_v / meas_base)|`` (about the error, in percent, of the predicted speed-up of a
  rewrite); unlike ``pairs`` it also rewards predicting a tie.

The machine may be shared: :func:`wait_for_quiet` delays a measurement until the other
processes leave the CPUs (mostly) idle, and :func:`cpu_busy` reports the load seen.

>>> round(spearman([1, 2, 3, 4], [10, 20, 40, 30]), 3)
0.8
>>> spearman([1, 1, 2], [5, 5, 7])
1.0
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from graphsub.cost.base import SumCostModel
from graphsub.ir.graph import Graph

# ----------------------------------------------------------------------------- statistics


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks; ties get the average of the ranks they span."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    if n != len(ys) or n < 2:
        raise ValueError("pearson needs two sequences of equal length >= 2")
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson correlation of the (tie-averaged) ranks."""
    return pearson(ranks(xs), ranks(ys))


def pairwise_agreement(pred: Sequence[float], meas: Sequence[float], tol: float = 0.05) -> tuple[int, int]:
    """``(agreeing, compared)`` pairs: measured values differing by more than ``tol`` (relative)
    whose order the prediction reproduces."""
    agree = total = 0
    for i in range(len(meas)):
        for j in range(i + 1, len(meas)):
            lo = min(meas[i], meas[j])
            if lo <= 0 or abs(meas[i] - meas[j]) / lo < tol:
                continue
            total += 1
            if (pred[i] - pred[j]) * (meas[i] - meas[j]) > 0:
                agree += 1
    return agree, total


# ----------------------------------------------------------------------------- a shared machine


def _cpu_times() -> tuple[float, float]:
    with open("/proc/stat", encoding="ascii") as f:
        parts = [float(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
    return sum(parts), idle


def cpu_busy(interval: float = 0.25) -> float:
    """Busy CPUs (in cores) over ``interval`` seconds, from /proc/stat (0 where unavailable)."""
    import os

    try:
        t0, i0 = _cpu_times()
        time.sleep(interval)
        t1, i1 = _cpu_times()
    except OSError:
        return 0.0
    total = t1 - t0
    return 0.0 if total <= 0 else (1 - (i1 - i0) / total) * (os.cpu_count() or 1)


def wait_for_quiet(max_busy: float = 0.35, max_wait_s: float = 20.0, interval: float = 0.25) -> float:
    """Sleep until other processes use at most ``max_busy`` cores (or ``max_wait_s`` passed);
    returns the last busy reading.  Call it while this process is idle."""
    deadline = time.monotonic() + max_wait_s
    busy = cpu_busy(interval)
    while busy > max_busy and time.monotonic() < deadline:
        busy = cpu_busy(interval)
    return busy


# ----------------------------------------------------------------------------- calibration


@dataclass
class CalibrationRow:
    """One graph: end-to-end latencies (ms, per optimization level), their noise, predictions."""

    model: str
    variant: str
    num_ops: int
    gflops: float
    measured_ms: dict[str, float] = field(default_factory=dict)
    wall_ms: dict[str, float] = field(default_factory=dict)
    min_ms: dict[str, float] = field(default_factory=dict)
    noise: dict[str, float] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    busy: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GraphCase:
    """A graph to calibrate on: zoo model name, variant name, the graph."""

    model: str
    variant: str
    graph: Graph


def e2e_sessions(graph: Graph, levels: Sequence[str], threads: int, seed: int = 0) -> dict[str, tuple[Any, dict]]:
    """One onnxruntime session per optimization level, with random weights and inputs.

    Weight-only subgraphs (``concat`` of kernels, ``enlarge``, ...) are folded into constants
    first, as before any deployment: cost models price them at 0, so onnxruntime must not run them.
    """
    from graphsub.data import materialize, random_inputs
    from graphsub.frontends.onnx_export import export_graph
    from graphsub.frontends.ort import make_session
    from graphsub.rules.apply import fold_weights

    g = fold_weights(materialize(graph, seed))
    proto = export_graph(g).SerializeToString()
    feeds = random_inputs(g, seed)
    return {lvl: (make_session(proto, optimization=lvl, threads=threads), feeds) for lvl in levels}


def calibrate(cases: Sequence[GraphCase], models: Mapping[str, SumCostModel], *, threads: int = 2,
              levels: Sequence[str] = ("disable", "all"), rounds: int = 3, budget_ms: float = 400.0,
              min_repeats: int = 3, gate: Callable[[], float] | None = None, clock: str = "auto",
              log: Callable[[str], None] | None = None) -> list[CalibrationRow]:
    """Predict each case with every model, then time every case end to end.

    Timing: for each round, for each case, for each level: one warm-up run, then runs until
    ``budget_ms / rounds`` (at least ``min_repeats``).  The latency is the median of all runs of
    all rounds, by ``clock`` (``auto``: this thread's CPU time with one thread, else wall time,
    see :func:`graphsub.cost.measured.resolve_clock`); ``wall_ms`` always holds the wall-clock
    median and ``min_ms`` the fastest run; noise is IQR / median.  ``gate`` (e.g.
    :func:`wait_for_quiet`) runs before each case in each round and returns the background load,
    averaged into ``busy``.
    """
    import numpy as np

    from graphsub.cost.measured import CLOCKS, resolve_clock

    timer = CLOCKS[resolve_clock(clock, threads)]

    rows: list[CalibrationRow] = []
    for case in cases:
        g = case.graph
        flops = sum(n.sig.opdef.flops(n.sig.in_types, n.sig.out_types, n.sig.attr)
                    for n in g.nodes.values() if not n.sig.opdef.leaf)
        row = CalibrationRow(case.model, case.variant, g.num_ops, flops / 1e9)
        for name, m in models.items():
            t = time.perf_counter()
            c = m.graph_cost(g)
            row.predicted[name] = m.scalar(c)
            if log:
                log(f"{case.model}/{case.variant}: {name} = {row.predicted[name]:.4g} ({time.perf_counter() - t:.1f}s)")
        rows.append(row)
    runs: list[dict[str, list[float]]] = [{lvl: [] for lvl in levels} for _ in cases]
    walls: list[dict[str, list[float]]] = [{lvl: [] for lvl in levels} for _ in cases]
    busy: list[list[float]] = [[] for _ in cases]
    for r in range(rounds):
        for i, case in enumerate(cases):
            sessions = e2e_sessions(case.graph, levels, threads)
            if gate is not None:
                busy[i].append(gate())
            for lvl in levels:
                sess, feeds = sessions[lvl]
                sess.run(None, feeds)
                start = time.perf_counter()
                n = 0
                while n < min_repeats or (time.perf_counter() - start) * 1e3 < budget_ms / rounds:
                    t, w = timer(), time.perf_counter()
                    sess.run(None, feeds)
                    runs[i][lvl].append((timer() - t) * 1e3)
                    walls[i][lvl].append((time.perf_counter() - w) * 1e3)
                    n += 1
            del sessions
            if log:
                log(f"round {r + 1}/{rounds} {case.model}/{case.variant}: "
                    + ", ".join(f"{lvl} {statistics.median(runs[i][lvl]):.2f} ms" for lvl in levels))
    for row, rr, ww, bb in zip(rows, runs, walls, busy, strict=True):
        for lvl, xs in rr.items():
            q1, med, q3 = np.percentile(np.asarray(xs), [25, 50, 75])
            row.measured_ms[lvl] = float(med)
            row.wall_ms[lvl] = float(np.median(ww[lvl]))
            row.min_ms[lvl] = float(np.min(xs))
            row.noise[lvl] = float((q3 - q1) / med) if med > 0 else 0.0
            row.samples[lvl] = len(xs)
        row.busy = float(sum(bb) / len(bb)) if bb else 0.0
    return rows


def summarize(rows: Sequence[CalibrationRow], pairs: Sequence[tuple[str, str]],
              tol: float = 0.05, stat: str = "median") -> list[dict[str, Any]]:
    """Per (prediction, level) pair: Spearman over all rows, predicted/measured ratios, and the
    within-model pairwise ordering agreement of variants; ``stat``: compare with the measured
    ``median`` (``measured_ms``) or ``min`` (``min_ms``)."""
    out = []
    for pred, lvl in pairs:
        use = [r for r in rows if pred in r.predicted and lvl in r.measured_ms]
        if len(use) < 2:
            continue

        def meas(r: CalibrationRow, lvl: str = lvl) -> float:
            return r.min_ms[lvl] if stat == "min" else r.measured_ms[lvl]

        p = [r.predicted[pred] for r in use]
        m = [meas(r) for r in use]
        ratios = [a / b for a, b in zip(p, m, strict=True) if b > 0]
        agree = total = 0
        change: list[float] = []
        for model in dict.fromkeys(r.model for r in use):
            sub = [r for r in use if r.model == model]
            a, t = pairwise_agreement([r.predicted[pred] for r in sub], [meas(r) for r in sub], tol)
            agree, total = agree + a, total + t
            base = next((r for r in sub if r.variant == "base"), None)
            if base is None or base.predicted[pred] <= 0:
                continue
            for r in sub:
                if r is not base and r.predicted[pred] > 0:
                    change.append(abs(math.log(r.predicted[pred] / base.predicted[pred])
                                      - math.log(meas(r) / meas(base))))
        out.append({
            "prediction": pred, "level": lvl, "stat": stat, "n": len(use), "spearman": spearman(p, m),
            "ratio_median": statistics.median(ratios) if ratios else math.nan,
            "ratio_min": min(ratios) if ratios else math.nan, "ratio_max": max(ratios) if ratios else math.nan,
            "pairs_agree": agree, "pairs": total, "pair_accuracy": agree / total if total else math.nan,
            "change_error": 100 * sum(change) / len(change) if change else math.nan,
        })
    return out


__all__ = [
    "CalibrationRow",
    "GraphCase",
    "calibrate",
    "cpu_busy",
    "e2e_sessions",
    "pairwise_agreement",
    "pearson",
    "ranks",
    "spearman",
    "summarize",
    "wait_for_quiet",
]
