"""End-to-end timing step of :func:`graphsub.optimize.optimize`, and the decision it informs.

Both models are timed in onnxruntime under ``ORT_ENABLE_ALL`` and ``ORT_DISABLE_ALL`` (:data:`LEVELS`),
in alternating rounds so that drifting machine load hits both alike; each round is a median of repeats
at a fixed thread count.  The optimized model is preferred only when it is faster under
``ORT_ENABLE_ALL`` -- median speedup above ``min_speedup`` *and* faster in at least 80% of the rounds
(:func:`consistent`) -- so that timing noise does not pass for a gain.

>>> consistent([(2.0, 1.0)] * 4 + [(1.0, 2.0)]), consistent([(2.0, 1.0)] * 3 + [(1.0, 2.0)] * 2)
(True, False)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

LEVELS = ("all", "disable")


def time_model(model: bytes | str, feeds: dict[str, np.ndarray], *, level: str, threads: int,
               budget_ms: float = 400.0) -> float:
    """Median end-to-end latency (ms) of an ONNX model (serialized or a path) in onnxruntime at ``level``."""
    from graphsub.cost.measured import time_session
    from graphsub.frontends.ort import make_session

    sess = make_session(model, optimization=level, threads=threads)
    return time_session(sess, feeds, budget_ms=budget_ms, warmup=3, min_repeats=7, max_repeats=100_000).median_ms


def session_timer(model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int,
                  budget_ms: float, provider: str = "cpu") -> Callable[[], float]:
    """A function that times ``model`` once more (median latency in ms over a ``budget_ms`` budget) on a session
    created now, under ``ORT_ENABLE_ALL`` with ``threads`` intra-op threads, as users run it."""
    from graphsub.cost.measured import time_session
    from graphsub.frontends.ort import make_session

    sess = make_session(model, optimization="all", threads=threads, provider=provider)
    return lambda: time_session(sess, feeds, budget_ms=budget_ms, warmup=5, min_repeats=5,
                                max_repeats=100_000).median_ms


def time_candidates(models: Mapping[str, bytes | str], feeds: dict[str, np.ndarray], *, threads: int,
                    budget_ms: float, rounds: int = 5, provider: str = "cpu") -> dict[str, list[float]]:
    """Per model, its latency in each of ``rounds`` rounds; in every round each model is timed once, the order
    rotating from round to round, so that drifting machine load and cache effects hit all alike. Sessions are
    created once, before the first round. A model that cannot be loaded or run raises ExecutionError."""
    timers = {name: session_timer(m, feeds, threads=threads, budget_ms=budget_ms, provider=provider)
              for name, m in models.items()}
    names = list(timers)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(timers[name]())
    return out


def measure(before: bytes | str, after: bytes | str, feeds: dict[str, np.ndarray], *, threads: int, budget_ms: float,
            rounds: int = 5) -> dict[str, dict[str, Any]]:
    """Latency of both models at each level of :data:`LEVELS`: ``{level: {before, after, rounds}}``,
    the medians over ``rounds`` alternating measurements; ``rounds`` lists each round's
    ``(before, after)``.  ``after is before`` (nothing to compare) times the model once per level."""
    out: dict[str, dict[str, Any]] = {}
    for level in LEVELS:
        if after is before:
            v = time_model(before, feeds, level=level, threads=threads, budget_ms=budget_ms)
            out[level] = {"before": v, "after": v}
            continue
        pairs = []
        for _ in range(rounds):
            b = time_model(before, feeds, level=level, threads=threads, budget_ms=budget_ms)
            pairs.append((b, time_model(after, feeds, level=level, threads=threads, budget_ms=budget_ms)))
        out[level] = {"before": float(np.median([p[0] for p in pairs])),
                      "after": float(np.median([p[1] for p in pairs])), "rounds": pairs}
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


__all__ = ["LEVELS", "consistent", "decide", "measure", "session_timer", "time_candidates", "time_model"]
