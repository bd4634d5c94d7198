"""Timing in onnxruntime, and the seam every measurement of graphsub goes through.

The original and the candidates are timed in onnxruntime under ``ORT_ENABLE_ALL`` (as users run them) at the user's
thread count, in rounds whose order rotates so that drifting machine load hits all alike; each round is a median of
repeats (:func:`time_candidates`). These side-by-side rounds only rank candidates: whether one is faster is decided
by :mod:`graphsub.optimize.decide` (fresh session groups with an A/A control, a test with a bounded false-positive
rate).

**The timing seam.** Everything graphsub measures goes through one :class:`Timers`: the sessions the side-by-side
rounds time (``session``), the fresh sessions of the confirmation rounds (``confirm``), the clock that the deadline,
the rounds' durations and the step timings read (``clock``), and the PyTorch training-step units (``step_timer``).
The functions that time take ``timers=`` (None: :func:`current_timers`, which is :data:`DEFAULT_TIMERS` -- the real
onnxruntime sessions and ``time.perf_counter`` -- unless a :func:`using_timers` block says otherwise, for callers
that cannot pass it, such as a command line under test). A test fakes time by passing fakes, never by patching
module attributes:

>>> fake = Timers(session=lambda model, feeds, **kw: lambda budget_ms: float(len(model)))
>>> time_candidates({"original": b"abc", "c": b"ab"}, {}, threads=1, budget_ms=1.0, rounds=2, timers=fake)
{'original': [3.0, 3.0], 'c': [2.0, 2.0]}
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
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


def pool_size(model: bytes | str, copies: int, max_bytes: int | None = None) -> int:
    """How many sessions of ``model`` to rotate: ``copies``, or 1 for a model over ``max_bytes`` (None:
    :data:`POOL_MAX_BYTES`)."""
    limit = POOL_MAX_BYTES if max_bytes is None else max_bytes
    return max(1, copies) if _size(model) <= limit else 1


def _size(model: bytes | str) -> int:
    """The bytes of ``model`` with its weights (a large model's held ones, a small file's external data)."""
    if isinstance(model, bytes):
        from graphsub.frontends.shared import model_bytes

        size = model_bytes(model)  # with a large model's held weights (frontends.shared)
    else:
        from graphsub.frontends.onnx_io import file_bytes

        size = os.path.getsize(model) if os.path.isfile(model) else 0
        if size < 1 << 24:  # a small file may hold its weights beside it: count them (without parsing big files)
            size = file_bytes(model)
    return size


def _scratch_dir(model: bytes | str) -> str | None:
    """Where onnxruntime saves the optimized graph of a fingerprinted session of ``model`` (its weights too):
    memory-backed when the machine has it and the model is at most :data:`POOL_MAX_BYTES`, else the temporary
    folder (a large model's copy would take its size in memory)."""
    shm = "/dev/shm"
    small = _size(model) <= POOL_MAX_BYTES
    return shm if small and os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def session_timer(model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int,
                  provider: str = "cpu", fingerprint: bool = False) -> SessionTimer:
    """A :class:`SessionTimer` on a session created now, under ``ORT_ENABLE_ALL`` with ``threads`` intra-op threads,
    as users run it; with ``fingerprint``, the same session also saves the graph it runs, and the timer carries its
    :func:`~graphsub.frontends.ort_signature.signature` (the saved copy is deleted at once)."""
    from graphsub.frontends.ort import make_session
    from graphsub.frontends.ort_signature import SAVED_NAME, signature_and_kernels

    if not fingerprint:
        return SessionTimer(make_session(model, optimization="all", threads=threads, provider=provider), feeds)
    with tempfile.TemporaryDirectory(prefix="graphsub-fp-", dir=_scratch_dir(model)) as tmp:
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
    """A timer of the confirmation rounds: a :func:`session_timer` on a session of its own, created for the
    confirmation (what :data:`DEFAULT_TIMERS` gives :mod:`graphsub.optimize.decide`; a test fakes the two apart with
    :class:`Timers`' ``session`` and ``confirm``)."""
    return session_timer(model, feeds, threads=threads, provider=provider)


#: ``(model, feeds, *, threads, provider="cpu", ...) -> timer``: a new session of ``model`` (ONNX bytes or a path) as a
#: timer: called with a budget in ms, it runs the model for that long and gives its median latency in ms
SessionFactory = Callable[..., Callable[[float], float]]


class StepTimer:
    """A unit of :func:`graphsub.optimize.decide.measure` on one trainer: called with a budget in ms, it runs
    ``warmup`` steps on its first call, then at least ``steps`` steps and as many more as fit in the budget (at most
    ``max_steps``), and returns their median step time in ms, read on ``clock`` (seconds)."""

    def __init__(self, trainer: Any, *, steps: int = 3, warmup: int = 2, max_steps: int = 10_000,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if steps < 1:
            raise ValueError(f"steps must be at least 1, not {steps!r}")
        self.trainer, self.steps, self.warmup, self.max_steps, self.clock = trainer, steps, warmup, max_steps, clock
        self.calls = 0

    def __call__(self, budget_ms: float) -> float:
        if self.calls == 0:
            for _ in range(self.warmup):
                self.trainer.step()
        self.calls += 1
        ts: list[float] = []
        start = self.clock()
        while len(ts) < self.steps or (len(ts) < self.max_steps and (self.clock() - start) * 1e3 < budget_ms):
            t = self.clock()
            self.trainer.step()
            ts.append((self.clock() - t) * 1e3)
        return statistics.median(ts)


def step_timer(trainer: Any, *, steps: int = 3, clock: Callable[[], float] = time.perf_counter,
               name: str = "") -> StepTimer:
    """The default ``step_timer`` of :class:`Timers`: a :class:`StepTimer` on ``trainer`` (anything with ``step()``)
    (``name`` says which variant it times -- ``module``, ``optimized``, ...; a fake may read it, the real one does
    not)."""
    return StepTimer(trainer, steps=steps, clock=clock)


@dataclass(frozen=True)
class Timers:
    """How graphsub measures time: every latency, confirmation and budget clock goes through one of these (the seam
    of the module docstring). Each field is one way of measuring; a test replaces the ones it fakes.

    * ``session`` -- ``(model, feeds, *, threads, provider="cpu", fingerprint=False) -> timer``
      (:data:`SessionFactory`): the sessions of the side-by-side rounds (:func:`time_candidates`); default
      :func:`session_timer`. A timer may carry ``signature`` and ``kernels`` (:class:`SessionTimer`; read with
      ``getattr``: a fake need not).
    * ``confirm`` -- the fresh sessions of the confirmations (:func:`graphsub.optimize.decide.session_makers`),
      called without ``fingerprint``; None (the default): ``session``'s (with the default, what
      :func:`confirm_timer` makes), so that faking ``session`` alone fakes every onnxruntime session.
    * ``clock`` -- seconds, any origin: the clock of the deadline (:class:`graphsub.deadline.Deadline`), of the
      rounds' and session creations' durations that say whether one more fits, and of the steps' recorded times;
      default ``time.perf_counter``.
    * ``step_timer`` -- ``(trainer, *, steps, clock, name) -> timer``: a PyTorch trainer (one fresh copy of a module,
      :class:`graphsub.optimize.train_step.TorchTrainer`) as a unit of :mod:`graphsub.optimize.decide`: called with
      a budget in ms, it runs training steps for that long and returns the median step (ms); ``name`` says which
      variant it is (``module``, ``optimized``, ``emitted_original``; a fake may read it, the real one does not);
      default :func:`step_timer`.
    """

    session: SessionFactory = session_timer
    confirm: SessionFactory | None = None
    clock: Callable[[], float] = time.perf_counter
    step_timer: Callable[..., Callable[[float], float]] = step_timer

    def new_session(self, model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int, provider: str = "cpu",
                    fingerprint: bool = False) -> Callable[[float], float]:
        """A timer on a new session of the side-by-side rounds (``session``; ``fingerprint`` passed only when
        asked, so that a fake may ignore it)."""
        return self.session(model, feeds, threads=threads, provider=provider,
                            **({"fingerprint": True} if fingerprint else {}))

    def confirm_session(self, model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int,
                        provider: str = "cpu") -> Callable[[float], float]:
        """A timer on a new session of the confirmation rounds (``confirm``, else ``session``)."""
        make = self.session if self.confirm is None else self.confirm
        return make(model, feeds, threads=threads, provider=provider)


#: the real thing: onnxruntime sessions, ``time.perf_counter``, real training steps
DEFAULT_TIMERS = Timers()
_CURRENT: ContextVar[Timers] = ContextVar("graphsub_timers", default=DEFAULT_TIMERS)


def current_timers() -> Timers:
    """The timers of a call not given ``timers=``: those of the innermost :func:`using_timers` block of this context,
    else :data:`DEFAULT_TIMERS`."""
    return _CURRENT.get()


def resolve_timers(timers: Timers | None) -> Timers:
    """``timers``, or :func:`current_timers` for None (what every ``timers=None`` parameter means)."""
    return current_timers() if timers is None else timers


@contextmanager
def using_timers(timers: Timers) -> Iterator[Timers]:
    """Within the block (in this thread or task: a context variable), calls not given ``timers=`` use ``timers``: the
    injection point for callers that cannot pass them, such as a test of a command line.

    >>> with using_timers(Timers(clock=lambda: 42.0)):
    ...     current_timers().clock()
    42.0
    >>> current_timers() is DEFAULT_TIMERS
    True
    """
    token = _CURRENT.set(timers)
    try:
        yield timers
    finally:
        _CURRENT.reset(token)


def time_candidates(models: Mapping[str, bytes | str], feeds: dict[str, np.ndarray], *, threads: int,
                    budget_ms: float, rounds: int = 5, provider: str = "cpu",
                    sessions: dict[str, Callable[[float], float]] | None = None,
                    stop: Callable[[float], bool] | None = None,
                    twins: dict[str, str] | None = None, copies: int = 1,
                    timers: Timers | None = None,
                    session_stop: Callable[[float], bool] | None = None) -> dict[str, list[float]]:
    """Per model, its latency in each of ``rounds`` rounds; in every round each model is timed once, the order
    rotating from round to round, so that drifting machine load and cache effects hit all alike. Sessions are
    created once, before the first round (and kept in ``sessions`` by name when given, to be reused by a later
    call: on a big model, creating a session costs seconds). A model that cannot be loaded or run raises
    ExecutionError. ``stop(need_s)`` is asked before each session is created and before each round, with the time
    the last round took (0 before the first): once it says so (no time left, or not ``need_s``), no more rounds are
    run (every model has the same number of rounds, maybe none); when the time left would not cover creating one more
    session (twice what the last one took), the models still without one are left out (missing from the result: the
    first model, the original, always has a session or nothing is timed). ``session_stop`` (None: ``stop``) is asked
    before each session instead, where what the caller keeps back depends on whether a session or a round is next.

    With ``twins`` (a dict, filled in place), every session is fingerprinted (:func:`session_timer`), and a model
    whose graph onnxruntime runs exactly as an earlier model's is not timed: ``twins[name]`` names that earlier
    model, and the model is missing from the result (a tie by construction is not measured as noise).

    With ``copies`` > 1, each model gets that many sessions (:func:`pool_size`), used in turn from round to round
    (:class:`SessionPool`): rounds a multiple of ``copies`` give each session as many rounds.

    ``timers`` (None: :func:`current_timers`): the sessions are ``timers.session``'s, and the durations that ``stop``
    is asked about are read on ``timers.clock``."""
    tm = resolve_timers(timers)
    cache = {} if sessions is None else sessions
    names = [n for n in models if twins is None or n not in twins]
    out: dict[str, list[float]] = {n: [] for n in names}
    seen = {sig: n for n, t in cache.items() if (sig := getattr(t, "signature", ""))}
    made = 0.0  # what creating the last session took: one more must fit, and a round after it
    before_session = stop if session_stop is None else session_stop
    for name in names:
        if name not in cache:
            if before_session is not None and before_session(2.0 * made):
                if made == 0.0 or len(cache) < 2:
                    return out
                break  # the models without a session are left out of the rounds (and of ``out``)
            t = tm.clock()
            timer = tm.new_session(models[name], feeds, threads=threads, provider=provider,
                                   fingerprint=twins is not None)
            sig = getattr(timer, "signature", "")
            if twins is not None and sig in seen:
                twins[name] = seen[sig]  # its session is dropped: the twin's serves
                made = tm.clock() - t
                continue
            n = pool_size(models[name], copies)
            if n > 1:
                timer = SessionPool([timer, *(tm.new_session(models[name], feeds, threads=threads, provider=provider)
                                              for _ in range(n - 1))])
            made = tm.clock() - t
            if sig:
                seen[sig] = name
            cache[name] = timer
    names = [n for n in names if n in cache]
    out = {n: out[n] for n in names}
    need = 0.0
    for r in range(rounds):
        if stop is not None and stop(need):
            break
        t = tm.clock()
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(cache[name](budget_ms))
        need = tm.clock() - t
    return out


__all__ = [
    "DEFAULT_TIMERS",
    "POOL_MAX_BYTES",
    "SessionFactory",
    "SessionPool",
    "SessionTimer",
    "StepTimer",
    "Timers",
    "confirm_timer",
    "current_timers",
    "pool_size",
    "resolve_timers",
    "session_timer",
    "step_timer",
    "time_candidates",
    "using_timers",
]
