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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


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


__all__ = ["consistent", "decide", "session_timer", "time_candidates"]
