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
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import ExecutionError


class SessionTimer:
    """Times one onnxruntime session (:func:`session_timer`): calling it with a budget in ms gives the median latency
    in ms over that budget; ``signature`` is the fingerprint of the graph onnxruntime runs
    (:mod:`graphsub.frontends.ort_signature`), or "" when it was not asked for or could not be read; ``kernels`` the
    number of nodes of that graph (0 when unknown)."""

    def __init__(self, sess: Any, feeds: dict[str, np.ndarray], signature: str = "", kernels: int = 0) -> None:
        self.sess, self.feeds, self.signature, self.kernels, self.calls = sess, feeds, signature, kernels, 0

    def __call__(self, budget_ms: float) -> float:  # five warm-up runs on a new session, one (the cache) later
        from graphsub.cost.measured import time_session

        self.calls += 1
        return time_session(self.sess, self.feeds, budget_ms=budget_ms, warmup=5 if self.calls == 1 else 1,
                            min_repeats=5, max_repeats=100_000).median_ms


class SessionPool:
    """Several sessions of one model, used in turn (call ``i`` runs on session ``i mod copies``), with the interface
    of a :class:`SessionTimer` (the first session's ``signature`` and ``kernels``).

    Why: two onnxruntime sessions of the same file do not run equally fast.  Each keeps its own buffers and thread
    pool, and where they fall makes one session of BERT-base-like encoders 2-5% faster than another, for as long as
    they live (measured on this 2-core VM: ten sessions of bert.ts.b1 had medians 9.56-9.92 ms, ten of
    whisper_encoder.ts.b1 8.97-9.42 ms, each over 12 alternating rounds).  One session per variant turns that
    lottery into a "consistent" 3% gain or loss; a user, who gets a new session on every start, sees the average.
    Rotating a few sessions per variant averages it out of the comparison."""

    def __init__(self, timers: Sequence[Callable[[float], float]]) -> None:
        if not timers:
            raise ValueError("SessionPool needs at least one session")
        self.timers, self.calls = list(timers), 0
        self.signature: str = getattr(self.timers[0], "signature", "")
        self.kernels: int = getattr(self.timers[0], "kernels", 0)

    def __call__(self, budget_ms: float) -> float:
        timer = self.timers[self.calls % len(self.timers)]
        self.calls += 1
        return timer(budget_ms)


#: a model over this size (bytes) gets one session, whatever the number of copies asked (their memory)
POOL_MAX_BYTES = 256 << 20


def pool_size(model: bytes | str, copies: int) -> int:
    """How many sessions of ``model`` to rotate: ``copies``, or 1 for a model over :data:`POOL_MAX_BYTES`."""
    try:
        size = len(model) if isinstance(model, bytes) else os.path.getsize(model)
    except OSError:
        size = 0
    return max(1, copies) if size <= POOL_MAX_BYTES else 1


def _scratch_dir() -> str | None:
    """Where onnxruntime saves the optimized graph of a fingerprinted session: memory-backed when the machine has it."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def session_timer(model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int,
                  provider: str = "cpu", fingerprint: bool = False) -> SessionTimer:
    """A :class:`SessionTimer` on a session created now, under ``ORT_ENABLE_ALL`` with ``threads`` intra-op threads,
    as users run it; with ``fingerprint``, the same session also saves the graph it runs, and the timer carries its
    :func:`~graphsub.frontends.ort_signature.signature` (the saved copy is deleted at once)."""
    from graphsub.frontends.ort import make_session
    from graphsub.frontends.ort_signature import SAVED_NAME, signature_and_kernels

    if not fingerprint:
        return SessionTimer(make_session(model, optimization="all", threads=threads, provider=provider), feeds)
    with tempfile.TemporaryDirectory(prefix="graphsub-fp-", dir=_scratch_dir()) as tmp:
        try:
            sess = make_session(model, optimization="all", threads=threads, provider=provider, save_optimized=tmp)
        except ExecutionError:  # loads, maybe, but cannot be saved: timed without a fingerprint (or fails as usual)
            return session_timer(model, feeds, threads=threads, provider=provider)
        try:
            sig, kernels = signature_and_kernels(os.path.join(tmp, SAVED_NAME))
        except Exception:  # onnxruntime wrote no readable copy (a provider that cannot save): no fingerprint
            sig, kernels = "", 0
    return SessionTimer(sess, feeds, sig, kernels)


def confirm_timer(model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int,
                  provider: str = "cpu") -> Callable[[float], float]:
    """The timer of the confirmation rounds (:func:`time_pair`): a :func:`session_timer` on a session of its own,
    created for the confirmation (under a name of its own, so that a test can fake the two steps apart)."""
    return session_timer(model, feeds, threads=threads, provider=provider)


def time_candidates(models: Mapping[str, bytes | str], feeds: dict[str, np.ndarray], *, threads: int,
                    budget_ms: float, rounds: int = 5, provider: str = "cpu",
                    sessions: dict[str, Callable[[float], float]] | None = None,
                    stop: Callable[[float], bool] | None = None,
                    twins: dict[str, str] | None = None, copies: int = 1) -> dict[str, list[float]]:
    """Per model, its latency in each of ``rounds`` rounds; in every round each model is timed once, the order
    rotating from round to round, so that drifting machine load and cache effects hit all alike. Sessions are
    created once, before the first round (and kept in ``sessions`` by name when given, to be reused by a later
    call: on a big model, creating a session costs seconds). A model that cannot be loaded or run raises
    ExecutionError. ``stop(need_s)`` is asked before each session is created and before each round, with the time
    the last round took (0 before the first): once it says so (no time left, or not ``need_s``), no more rounds are
    run (every model has the same number of rounds, maybe none); when the time left would not cover creating one more
    session (twice what the last one took), the models still without one are left out (missing from the result: the
    first model, the original, always has a session or nothing is timed).

    With ``twins`` (a dict, filled in place), every session is fingerprinted (:func:`session_timer`), and a model
    whose graph onnxruntime runs exactly as an earlier model's is not timed: ``twins[name]`` names that earlier
    model, and the model is missing from the result (a tie by construction is not measured as noise).

    With ``copies`` > 1, each model gets that many sessions (:func:`pool_size`), used in turn from round to round
    (:class:`SessionPool`): rounds a multiple of ``copies`` give each session as many rounds."""
    cache = {} if sessions is None else sessions
    names = [n for n in models if twins is None or n not in twins]
    out: dict[str, list[float]] = {n: [] for n in names}
    seen = {sig: n for n, t in cache.items() if (sig := getattr(t, "signature", ""))}
    made = 0.0  # what creating the last session took: one more must fit, and a round after it
    for name in names:
        if name not in cache:
            if stop is not None and stop(2.0 * made):
                if made == 0.0 or len(cache) < 2:
                    return out
                break  # the models without a session are left out of the rounds (and of ``out``)
            t = time.perf_counter()
            timer: Callable[[float], float] = session_timer(
                models[name], feeds, threads=threads, provider=provider,
                **({"fingerprint": True} if twins is not None else {}))
            sig = getattr(timer, "signature", "")
            if twins is not None and sig in seen:
                twins[name] = seen[sig]  # its session is dropped: the twin's serves
                made = time.perf_counter() - t
                continue
            n = pool_size(models[name], copies)
            if n > 1:
                timer = SessionPool([timer, *(session_timer(models[name], feeds, threads=threads, provider=provider)
                                              for _ in range(n - 1))])
            made = time.perf_counter() - t
            if sig:
                seen[sig] = name
            cache[name] = timer
    names = [n for n in names if n in cache]
    out = {n: out[n] for n in names}
    need = 0.0
    for r in range(rounds):
        if stop is not None and stop(need):
            break
        t = time.perf_counter()
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(cache[name](budget_ms))
        need = time.perf_counter() - t
    return out


def time_pair(a: bytes | str, b: bytes | str, feeds: dict[str, np.ndarray], *, threads: int, budget_ms: float,
              rounds: int = 7, provider: str = "cpu",
              extend_if: Callable[[list[float], list[float]], bool] | None = None,
              stop: Callable[[float], bool] | None = None, copies: int = 1) -> tuple[list[float], list[float]]:
    """Per round, the median latency (ms) of ``a`` and of ``b``, each timed for ``budget_ms`` in a block of its own
    (which one goes first alternates by round), on two sessions created now (:func:`confirm_timer`); as many
    rounds again when ``extend_if(a's rounds, b's rounds)`` says the first ones were inconclusive. No round starts
    once ``stop(need_s)`` (``need_s``: what the last round took) says so (both lists have the same length, maybe 0).

    It is the confirmation step of the decision: data independent of the rounds that picked the leader, which
    would otherwise favour whichever candidate was lucky (the winner's curse). Blocks, not finer interleaving:
    alternating single runs or short bursts of two sessions at several threads leaves one session's worker
    threads spinning (onnxruntime's default) while the other runs, which measured a 4% slower EfficientNet 17%
    faster (``benchmarks/results/suite21_b1.jsonl``, 2 threads).

    With ``copies`` > 1, each side gets that many sessions, used in turn (:class:`SessionPool`): the comparison is
    then of the two models, not of two sessions' luck."""
    out: tuple[list[float], list[float]] = ([], [])
    timers: list[Callable[[float], float]] = []
    n = min(pool_size(a, copies), pool_size(b, copies))
    for m in (a, b):
        made: list[Callable[[float], float]] = []
        for _ in range(n):
            if stop is not None and stop(0.0):
                return out
            made.append(confirm_timer(m, feeds, threads=threads, provider=provider))
        timers.append(made[0] if n == 1 else SessionPool(made))
    need = 0.0
    for r in range(2 * rounds):
        if r == rounds and (extend_if is None or not extend_if(*out)):
            break
        if stop is not None and stop(need):
            break
        t = time.perf_counter()
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            out[i].append(timers[i](budget_ms))
        need = time.perf_counter() - t
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


__all__ = ["POOL_MAX_BYTES", "SessionPool", "SessionTimer", "confirm_timer", "consistent", "decide", "pool_size",
           "session_timer", "time_candidates", "time_pair"]
