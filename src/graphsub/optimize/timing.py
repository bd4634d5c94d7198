"""End-to-end timing step of :func:`graphsub.optimize.optimize`, and the decision it informs.

The original and the candidates are timed in onnxruntime under ``ORT_ENABLE_ALL`` (as users run them) at
the user's thread count, in rounds whose order rotates so that drifting machine load hits all alike; each
round is a median of repeats (:func:`time_candidates`).  A candidate is preferred only when it is faster --
median speedup above ``min_speedup`` *and* faster in at least 80% of the rounds (:func:`consistent`) -- so
that timing noise does not pass for a gain.

>>> consistent([(2.0, 1.0)] * 4 + [(1.0, 2.0)]), consistent([(2.0, 1.0)] * 3 + [(1.0, 2.0)] * 2)
(True, False)
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def session_timer(model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int,
                  provider: str = "cpu") -> Callable[[float], float]:
    """A function that times ``model`` once more (median latency in ms over the budget in ms it is given) on a
    session created now, under ``ORT_ENABLE_ALL`` with ``threads`` intra-op threads, as users run it."""
    from graphsub.cost.measured import time_session
    from graphsub.frontends.ort import make_session

    sess = make_session(model, optimization="all", threads=threads, provider=provider)
    calls = [0]

    def once(budget_ms: float) -> float:  # five warm-up runs on a new session, one (the cache) on later calls
        calls[0] += 1
        return time_session(sess, feeds, budget_ms=budget_ms, warmup=5 if calls[0] == 1 else 1, min_repeats=5,
                            max_repeats=100_000).median_ms

    return once


def run_timer(model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int,
              provider: str = "cpu") -> Callable[[], float]:
    """A function that runs ``model`` once on ``feeds`` and returns the latency in ms, on a session created now
    under ``ORT_ENABLE_ALL`` with ``threads`` intra-op threads."""
    from graphsub.frontends.ort import make_session

    run = make_session(model, optimization="all", threads=threads, provider=provider).run
    feeds = dict(feeds)

    def once() -> float:
        t0 = time.perf_counter()
        run(None, feeds)
        return (time.perf_counter() - t0) * 1e3

    return once


def time_candidates(models: Mapping[str, bytes | str], feeds: dict[str, np.ndarray], *, threads: int,
                    budget_ms: float, rounds: int = 5, provider: str = "cpu",
                    sessions: dict[str, Callable[[float], float]] | None = None) -> dict[str, list[float]]:
    """Per model, its latency in each of ``rounds`` rounds; in every round each model is timed once, the order
    rotating from round to round, so that drifting machine load and cache effects hit all alike. Sessions are
    created once, before the first round (and kept in ``sessions`` by name when given, to be reused by a later
    call: on a big model, creating a session costs seconds). A model that cannot be loaded or run raises
    ExecutionError."""
    cache = {} if sessions is None else sessions
    for name, m in models.items():
        if name not in cache:
            cache[name] = session_timer(m, feeds, threads=threads, provider=provider)
    names = list(models)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(cache[name](budget_ms))
    return out


def time_pair(a: bytes | str, b: bytes | str, feeds: dict[str, np.ndarray], *, threads: int, budget_ms: float,
              rounds: int = 7, provider: str = "cpu") -> tuple[list[float], list[float]]:
    """Per round, the median latency (ms) of ``a`` and of ``b`` timed in short alternating bursts (``a a b b a a
    ...``, about 30 ms and at least two runs each, the first run of a burst dropped as its warm-up; which model
    starts alternates by round) until ``budget_ms`` per model is spent (at least
    five runs each, three for a model slower than half the budget), on two sessions created now.

    Interleaving this finely makes both models see the same machine: drift and a neighbour's burst of load hit
    both alike, so the per-round ratio is far steadier than timing each model in its own block. It is the
    confirmation step of the decision: data independent of the rounds that picked the leader, which would
    otherwise favour whichever candidate was lucky (the winner's curse)."""
    runs = [run_timer(m, feeds, threads=threads, provider=provider) for m in (a, b)]
    first = []
    for run in runs:  # warm-up, and a latency estimate that sizes the bursts
        first.append(run())
        for _ in range(2 if first[-1] < budget_ms / 4 else 0):
            run()
    # about 30 ms a burst, at least two runs: the first of a burst is dropped, it pays for the cache the other model
    # evicted and for the other session's worker threads still spinning (ORT's default) when it starts
    burst = max(2, min(8, math.ceil(30.0 / max(min(first), 1e-3))))
    need = 3 if min(first) > budget_ms / 2 else 5
    out: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        times: tuple[list[float], list[float]] = ([], [])
        order = (0, 1) if r % 2 == 0 else (1, 0)
        spent = 0.0
        while min(len(t) for t in times) < need or (spent < 2 * budget_ms and len(times[0]) < 10_000):
            for i in order:
                for k in range(burst):
                    dt = runs[i]()
                    spent += dt
                    if k:
                        times[i].append(dt)
        for i in (0, 1):
            out[i].append(statistics.median(times[i]))
    return out


def consistent(rounds: Sequence[tuple[float, float]]) -> bool:
    """Whether ``after < before`` in at least 80% of the timing rounds (all rounds when there are
    fewer than five; vacuously true when there are none)."""
    faster = sum(1 for b, a in rounds if a < b)
    return faster >= (len(rounds) if len(rounds) < 5 else math.ceil(0.8 * len(rounds)))


def decide(changed: bool, latency_ms: dict[str, dict[str, Any]], *, keep_slower: bool,
           min_speedup: float) -> tuple[bool, str]:
    """``(keep the original?, decision text)`` for a verified result (``changed``: the search applied
    at least one substitution) timed as ``latency_ms`` (empty when not measured)."""
    lat = latency_ms.get("all")
    sp = lat["before"] / lat["after"] if lat and lat["after"] > 0 else None
    if not changed:
        return True, "no cheaper equivalent graph found; kept the original"
    if keep_slower:
        return False, "kept the optimized model" + (" (--keep-slower)" if sp is not None and sp <= min_speedup
                                                     else "")
    if sp is None:
        return False, "kept the optimized model (latency not measured)"
    if sp > min_speedup and consistent(latency_ms["all"].get("rounds", [])):
        return False, f"the optimized model is {sp:.3f}x faster under ORT_ENABLE_ALL"
    return True, (f"the optimized model is not faster under ORT_ENABLE_ALL ({sp:.3f}x, needed > {min_speedup:g}x "
                  "and faster in 80% of the timing rounds); kept the original (--keep-slower writes it anyway)")


__all__ = ["consistent", "decide", "run_timer", "session_timer", "time_candidates", "time_pair"]
