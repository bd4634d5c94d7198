"""Timing variants of one model the way users run them, side by side.

Every variant (the original under plain ONNX Runtime, each peer's output, graphsub's) gets :data:`SESSIONS` ONNX
Runtime sessions with ``ORT_ENABLE_ALL`` at a fixed intra-op thread count (1, or every core of the machine), used in
turn from round to round: two sessions of one file differ by a few percent for as long as they live
(:class:`~graphsub.optimize.timing.SessionPool`), and a user gets a new one on every start.  Sessions are created
once, outside the timing.  Then, for ``rounds`` rounds, every variant is timed in turn -- a median over repeats within
a small time budget -- the order rotating from round to round, so that drifting machine load and cache effects hit
all variants alike.  Per variant the result keeps each round's median; its speedup over the baseline is the median of
the per-round ratios ``baseline / variant``, and ``faster_rounds`` is the share of rounds in which the variant was
faster than the baseline.  The machine's load average is read before and after.

>>> r = summarize({"ort": [2.0, 2.2, 2.1], "x": [1.0, 2.4, 1.0]}, "ort")
>>> r["x"]["speedup"], round(r["x"]["faster_rounds"], 3), r["ort"]["speedup"]
(2.0, 0.667, 1.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.bench.records import load_avg
from graphsub.cost.env import all_cores
from graphsub.optimize.peers import OutputCheck, check_feeds
from graphsub.optimize.peers import checker_verdict as checker
from graphsub.optimize.timing import Timers, time_candidates


def parse_threads(text: str) -> list[int]:
    """``"1,all"`` -> ``[1, all_cores()]`` (duplicates dropped, order kept).

    >>> parse_threads("1, 1")
    [1]
    """
    out: list[int] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        n = all_cores() if piece == "all" else int(piece)
        if n < 1:
            raise ValueError(f"thread counts must be positive (or 'all'), got {piece!r}")
        if n not in out:
            out.append(n)
    if not out:
        raise ValueError("no thread count given")
    return out


def make_feeds(inputs: Sequence[Mapping[str, Any]], seed: int) -> dict[str, np.ndarray]:
    """Random inputs from specs ``{name, dtype, shape[, low, high, role]}``: floats standard normal, integers uniform
    in ``[low, high)`` (``low`` defaults to 0; ``high`` is required), booleans fair coins unless a range says
    otherwise (``low=1``: all true); inputs with ``role: attention_mask`` right-padded, as tokenizers pad (each row
    keeps its first L >= half of the positions); one generator per seed, drawn in the order of ``inputs``.  The same
    feeds serve the export check, the output check and the timing.

    >>> f = make_feeds([{"name": "ids", "dtype": "int64", "shape": [2, 3], "low": 0, "high": 5},
    ...                 {"name": "mask", "dtype": "int64", "shape": [2, 3], "low": 1, "high": 2}], seed=0)
    >>> bool((f["ids"] < 5).all()), bool((f["mask"] == 1).all())
    (True, True)
    """
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in inputs:
        name, dtype, shape = spec["name"], np.dtype(spec["dtype"]), tuple(int(d) for d in spec["shape"])
        if spec.get("role") == "attention_mask" and shape:
            keep = rng.integers((shape[-1] + 1) // 2, shape[-1] + 1, size=shape[:-1])
            feeds[name] = (np.arange(shape[-1]) < keep[..., None]).astype(dtype)
        elif dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(int(spec.get("low", 0)), int(spec.get("high", 2)), size=shape).astype(bool)
        elif dtype.kind in "iu":
            if "high" not in spec:
                raise ValueError(f"integer input {name!r} needs 'high' (and optionally 'low') in its spec")
            feeds[name] = rng.integers(int(spec.get("low", 0)), int(spec["high"]), size=shape, dtype=dtype)
        else:
            raise ValueError(f"input {name!r}: no random data for dtype {dtype}")
    return feeds


def check_output(
    original: Path,
    candidate: Path,
    inputs: Sequence[Mapping[str, Any]],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    rtol: float = 1e-3,
    atol: float = 1e-4,
) -> OutputCheck:
    """Does ``candidate`` load (ORT_ENABLE_ALL, 1 thread) and compute what ``original`` computes on the random
    inputs :func:`make_feeds` draws from ``inputs`` for each seed? Never raises for a bad candidate."""
    return check_feeds(original, candidate, [(seed, make_feeds(inputs, seed)) for seed in seeds], rtol=rtol,
                       atol=atol, checker=checker(Path(candidate)))


@dataclass(frozen=True)
class TimingRun:
    """One side-by-side timing: per variant the median latency (ms) of each round, and the load averages."""

    threads: int
    rounds: dict[str, list[float]]
    load_avg_before: float | None
    load_avg_after: float | None

    def summary(self, baseline: str) -> dict[str, dict[str, Any]]:
        return summarize(self.rounds, baseline)


def summarize(rounds: Mapping[str, Sequence[float]], baseline: str) -> dict[str, dict[str, Any]]:
    """Per variant: ``ms`` (median of the round medians), ``speedup`` (median of the per-round ratios baseline /
    variant), ``faster_rounds`` (share of rounds faster than the baseline) and the ``rounds`` themselves."""
    base = rounds[baseline]
    out: dict[str, dict[str, Any]] = {}
    for name, ms in rounds.items():
        ratios = [b / v for b, v in zip(base, ms, strict=True) if v > 0]
        out[name] = {"ms": statistics.median(ms), "speedup": statistics.median(ratios) if ratios else None,
                     "faster_rounds": sum(v < b for b, v in zip(base, ms, strict=True)) / len(ms),
                     "rounds_ms": list(ms)}
    return out


#: a variant beats another only when it is faster in this share of the paired rounds ...
MIN_FASTER_ROUNDS = 0.8
#: ... and by at least this median ratio (the criterion ``graphsub optimize`` applies before it replaces a model)
MIN_RATIO = 1.03

#: sessions per variant, used in turn (module docstring)
SESSIONS = 3


def time_variants(paths: Mapping[str, Path | bytes], feeds: Mapping[str, np.ndarray], *, threads: int, rounds: int = 7,
                  budget_ms: float = 300.0, provider: str = "cpu", copies: int = SESSIONS,
                  timers: Timers | None = None) -> TimingRun:
    """Time every model of ``paths`` (variant name -> ONNX file or serialized model) on ``feeds`` under
    ``ORT_ENABLE_ALL`` with ``threads`` intra-op threads on ``provider`` (numpy feeds in, numpy outputs out, as
    users call a session), in ``rounds`` alternating rounds (see the module docstring).  Raises ExecutionError when
    a model cannot be loaded or run (check loading first). ``timers``: how the sessions are timed
    (:class:`~graphsub.optimize.timing.Timers`; None: the current ones)."""
    before = load_avg()
    per_round = time_candidates({name: p if isinstance(p, bytes) else str(p) for name, p in paths.items()},
                                dict(feeds), threads=threads, budget_ms=budget_ms, rounds=rounds,
                                provider=provider, copies=copies, timers=timers)
    return TimingRun(threads, per_round, before, load_avg())


__all__ = ["MIN_FASTER_ROUNDS", "MIN_RATIO", "SESSIONS", "TimingRun", "all_cores", "check_output", "make_feeds",
           "parse_threads", "summarize", "time_variants"]
