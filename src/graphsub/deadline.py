"""Wall-time limits: checked budget values and the :class:`Deadline` a command shares out between its phases.

A budget given by a user or a caller (``Budget(time_s=...)``, ``optimize(time_s=...)``) is checked with
:func:`check_seconds` before any work: NaN, infinite and negative values raise :class:`~graphsub.errors.GraphsubError`
(``None`` means "no limit" where the caller allows it), so that a limit always limits.

A :class:`Deadline` is one point in time (on its ``clock``: ``time.perf_counter`` unless a caller injects another, as
:class:`graphsub.optimize.timing.Timers` does) that every phase of a command checks: a phase
gets ``deadline.share(seconds)`` (its nominal time, or what is left, whichever is less) and stops early when
:meth:`Deadline.expired` -- the time is up or a stop was requested (:func:`graphsub.interrupt.stop_requested`, the
first Ctrl-C), which :meth:`Deadline.reason` tells apart (``"time"`` / ``"interrupt"``). Phases that cannot be
interrupted are kept short by design; the caller checks the deadline between them.

>>> d = Deadline.after(None)
>>> d.remaining(), d.expired(), d.share(5.0)
(inf, False, 5.0)
>>> Deadline.after(0.0).expired(), Deadline.after(0.0).reason()
(True, 'time')
>>> check_seconds("time_s", float("nan"))
Traceback (most recent call last):
...
graphsub.errors.GraphsubError: time_s must be a finite number of seconds >= 0, not nan
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from graphsub.errors import GraphsubError
from graphsub.interrupt import stop_requested


def check_seconds(name: str, value: float | None, *, allow_none: bool = False, positive: bool = False) -> float | None:
    """``value`` if it is a usable limit in seconds: a finite number >= 0 (> 0 with ``positive``), or None with
    ``allow_none``; else GraphsubError naming ``name``."""
    if value is None:
        if allow_none:
            return None
        raise GraphsubError(f"{name} must be a number of seconds, not None")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GraphsubError(f"{name} must be a number of seconds, not {value!r}") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        what = "> 0" if positive else ">= 0"
        raise GraphsubError(f"{name} must be a finite number of seconds {what}, not {value!r}")
    return v


def check_count(name: str, value: int | float | None) -> None:
    """A count limit (expansions, K, megabytes) must be None or a finite number >= 0; else GraphsubError."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise GraphsubError(f"{name} must be a finite number >= 0 or None, not {value!r}")


@dataclass(frozen=True)
class Deadline:
    """A point in time (``end``; None: no limit) on ``clock`` and the start it was set from.

    ``clock`` is the seam through which the deadline reads time (seconds, any origin; default ``time.perf_counter``):
    :func:`graphsub.optimize.optimize` passes its :class:`~graphsub.optimize.timing.Timers`' clock, so that a test
    moves time by hand instead of patching the ``time`` module. It is not part of the deadline's value (equality,
    repr)."""

    end: float | None
    start: float = 0.0
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False, repr=False)

    @classmethod
    def after(cls, seconds: float | None, start: float | None = None,
              clock: Callable[[], float] = time.perf_counter) -> Deadline:
        """The deadline ``seconds`` after ``start`` (a ``clock`` reading; default: now); None: none. Raises
        GraphsubError for NaN, infinite or negative ``seconds``."""
        s = check_seconds("time budget", seconds, allow_none=True)
        t0 = clock() if start is None else start
        return cls(None if s is None else t0 + s, t0, clock)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        """Seconds left (>= 0; ``inf`` without a limit)."""
        return math.inf if self.end is None else max(0.0, self.end - self.clock())

    def reason(self) -> str:
        """``"interrupt"`` when a stop was requested, ``"time"`` when the time is up, else ``""``."""
        if stop_requested():
            return "interrupt"
        if self.end is not None and self.clock() >= self.end:
            return "time"
        return ""

    def expired(self) -> bool:
        """Whether work should stop now (time is up, or a stop was requested)."""
        return bool(self.reason())

    def share(self, seconds: float, *, reserve: float = 0.0) -> float:
        """The time a phase that would take ``seconds`` gets: at most what is left after keeping ``reserve``
        seconds for the phases after it (0 when nothing is left, or a stop was requested)."""
        if stop_requested():
            return 0.0
        return max(0.0, min(seconds, self.remaining() - reserve))


def command_started() -> float:
    """The ``time.perf_counter()`` reading a command's budget counts from: now, when the command's code starts
    running (the interpreter's start and the imports before it, about a second, are not counted: they are part of
    the overshoot a command states)."""
    return time.perf_counter()


def left_of_command(seconds: float, started: float) -> float:
    """What is left now of a command's budget of ``seconds`` counted from ``started`` (:func:`command_started`):
    what a command line gives its main work so that the budget bounds the whole command. GraphsubError for NaN,
    infinite or negative ``seconds``."""
    s = check_seconds("time budget", seconds)
    assert s is not None
    return max(0.0, s - (time.perf_counter() - started))


#: no limit (the default of functions that take a deadline)
NO_DEADLINE = Deadline(None)

#: how far past its budget a command may run (``search --time``, ``optimize --budget`` and their library calls): the
#: longest step that cannot be interrupted -- one expansion of a search, one onnxruntime session creation or run, one
#: timing round, writing the output -- plus the work that grows with the weights and is never interrupted (drawing,
#: serializing, loading and writing them). The README states this bound, the tests assert it, and
#: ``experiments/results/budget_overshoot.md`` measures it (within 3 s on the zoo but the weight-bound VGG-16/19)
OVERSHOOT_S = 3.0
OVERSHOOT_S_PER_GB = 15.0


def overshoot_bound_s(weight_bytes: int = 0) -> float:
    """The most a command may run past its budget on a model with ``weight_bytes`` of weights:
    :data:`OVERSHOOT_S` plus :data:`OVERSHOOT_S_PER_GB` per GB.

    >>> overshoot_bound_s(), overshoot_bound_s(550_000_000)
    (3.0, 11.25)
    """
    return OVERSHOOT_S + OVERSHOOT_S_PER_GB * weight_bytes / 1e9

__all__ = ["NO_DEADLINE", "OVERSHOOT_S", "OVERSHOOT_S_PER_GB", "Deadline", "check_count", "check_seconds",
           "command_started", "left_of_command", "overshoot_bound_s"]
