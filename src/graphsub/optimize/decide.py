"""One decision: is a candidate faster than the original? Measured with an A/A control, decided by a test whose
false-positive rate is bounded by design.

Every "faster" graphsub states -- the model ``optimize`` writes, the PyTorch and ONNX training routes, the suite's
head-to-head against the best peer -- comes from :func:`compare` (or, for rounds measured elsewhere, :func:`verdict`).

**What is measured** (:func:`measure`). Two sessions of the same model can differ by a few percent for as long as
they live (their weights and arenas land differently in memory), and the machine's speed drifts. So the measurement
is made of *session groups*: each group creates three fresh units -- a session of the original (arm ``a``), one of
the candidate (arm ``b``) and one more of the original (arm ``c``, the **A/A control**) -- and times them in three
rounds, one block of ``budget_ms`` each, in the orders of a Latin square (:data:`SQUARES`): within every group each
arm is timed once first, once second and once last, so that no position (the block after a session's creation, a
warm cache, a drifting load) favours an arm, and consecutive groups use the two squares in turn, so that the
candidate follows the original as often as the A/A control does. A group's units are released before the next
group starts (memory stays at three sessions whatever the model's size).

**The statistic** (:func:`verdict`). Per group ``j``, ``z_j`` is the median over its rounds of
``ln(sqrt(a * c) / b)``: the candidate against both sessions of the original, in the same rounds (drift cancels).
If the candidate runs as the original, ``b`` and ``c`` are exchangeable draws of "a fresh session of the original",
so ``z_j`` is centred on 0, and the groups are independent (fresh sessions each). The speedup is
``exp(mean z)``, with a Student-t interval over the groups (``df = groups - 1``): the session effects are in the
spread between groups, which is what the interval measures -- rounds within a group are not independent evidence
and are not counted as such. The A/A ratio ``exp(mean y)``, ``y_j`` the median of ``ln(a / c)``, says what the
measurement reads for the original against itself, with its own interval.

**The decision.** The candidate is *faster* when (1) the lower end of its ``1 - 2 alpha`` two-sided interval is above
1.0x -- a one-sided t-test at level ``alpha``, so that a candidate that runs as the original is declared faster at
most ``alpha`` of the time (under the model's assumptions; ``experiments/optimize/decision_fpr.py`` measures the
realized rate); (2) its gain exceeds what the A/A control reads for the original against itself (``mean z >
|mean y|``: a measurement that shows the original "faster" than itself by 5% needs more than a 5% gain to say
anything); and (3) its speedup exceeds ``min_speedup`` (a gain worth replacing the model for). Conditions (2) and (3)
only make the test stricter. With fewer than
:data:`MIN_GROUPS` groups (a budget cut) nothing is decided faster. A caller that tests ``k`` candidates against the
same original gives each ``alpha / k`` (Bonferroni), so that the family's false-positive rate stays ``alpha``.

**A second look** (:func:`confirm`). Five groups find a 10% gain but often miss a 5% one: this machine's blocks
differ by 5-10% from round to round, a group's statistic by about 4% (the median over the suite's confirmations,
2026-12-01), and a t-interval over four degrees of freedom at ``alpha / 2`` is 2.8 standard errors wide on each
side. Where the time for it is planned, a confirmation is therefore looked at twice (a group-sequential test): after
:data:`GROUPS` groups at :data:`FIRST_LOOK_SHARE` of its ``alpha``, and -- only when that look says neither faster
nor below 1.0x -- after :data:`GROUPS` more, on all the groups, at the rest of ``alpha``. A candidate that runs as
the original is declared faster at most ``alpha`` of the time over both looks (a union bound: each look's test
holds its level whatever the other did); a real 5% gain is found about 0.8 of the time instead of about 0.45
(``tests/optimize/test_decide.py`` simulates both), and a candidate at 1.0x or below stops at the first look. The
second look's groups are as many as the deadline lets start, up to :data:`GROUPS`.

>>> m = Rounds(a=(10.0,) * 8, b=(8.0, 8.1, 7.9, 8.0, 8.2, 7.8, 8.0, 8.1),
...            c=(10.1, 9.9, 10.0, 10.2, 9.8, 10.0, 10.1, 9.9), group=(0, 0, 1, 1, 2, 2, 3, 3))
>>> v = verdict(m, min_speedup=1.03)
>>> v.faster, round(v.speedup, 2), v.groups, v.rounds
(True, 1.25, 4, 8)
>>> twin = Rounds(a=(10.0,) * 8, b=(10.1, 9.9, 10.0, 10.0, 9.9, 10.1, 10.0, 10.0), c=(10.0,) * 8, group=m.group)
>>> verdict(twin, min_speedup=1.03).faster
False
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scipy import stats

#: the false-positive rate of one decision (a candidate that runs as the original declared faster)
ALPHA = 0.05
#: the smallest gain worth replacing a model for: the default ``min_speedup`` of every decision graphsub makes
#: (``optimize``, the training routes, the suite)
MIN_SPEEDUP = 1.03
#: fewer session groups than this decide nothing (a t interval over two groups is too wide to be of use)
MIN_GROUPS = 3
#: session groups of a full measurement, and rounds in each (one Latin square of the three arms)
GROUPS = 5
ROUNDS_PER_GROUP = 3
#: the share of a confirmation's ``alpha`` spent at its first look when a second one is planned (:func:`confirm`): half,
#: so that a second look the deadline cuts short costs the first little (simulated, a group's statistic varying by 4%:
#: a 5% gain is found 0.79 of the time over ten groups, 0.83 with a quarter first; 0.46 in one look of five)
FIRST_LOOK_SHARE = 0.5
#: the orders of the three arms (0: the original, 1: the candidate, 2: the A/A control) in a group's three rounds: two
#: Latin squares (each arm once in each position), used by the groups in turn; in the first the candidate follows the
#: original, in the second the A/A control does
SQUARES: tuple[tuple[tuple[int, int, int], ...], ...] = (((0, 1, 2), (1, 2, 0), (2, 0, 1)),
                                                         ((0, 2, 1), (2, 1, 0), (1, 0, 2)))

#: a unit of measurement: called with a time budget in ms, it runs its model for that long and returns its median
#: latency in ms (an onnxruntime session's :class:`~graphsub.optimize.timing.SessionTimer`, a PyTorch trainer's step)
Timer = Callable[[float], float]
#: makes a fresh unit (a new session, a new copy of a module): each session group gets new ones
Maker = Callable[[], Timer]


@dataclass(frozen=True)
class Rounds:
    """What :func:`measure` timed: per round, the ms of the original (``a``), the candidate (``b``) and the original
    again (``c``, the A/A control), and the session group the round belongs to."""

    a: tuple[float, ...] = ()
    b: tuple[float, ...] = ()
    c: tuple[float, ...] = ()
    group: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not len(self.a) == len(self.b) == len(self.c) == len(self.group):
            raise ValueError("Rounds: a, b, c and group must have one entry per round")

    @property
    def groups(self) -> int:
        return len(set(self.group))

    def by_group(self) -> dict[int, list[tuple[float, float, float]]]:
        out: dict[int, list[tuple[float, float, float]]] = {}
        for g, a, b, c in zip(self.group, self.a, self.b, self.c, strict=True):
            out.setdefault(g, []).append((a, b, c))
        return out

    def extend(self, other: Rounds) -> Rounds:
        """These rounds and ``other``'s, whose groups are renumbered after these."""
        shift = max(self.group, default=-1) + 1
        return Rounds(self.a + other.a, self.b + other.b, self.c + other.c,
                      self.group + tuple(g + shift for g in other.group))

    def to_dict(self) -> dict[str, Any]:
        return {"original_ms": list(self.a), "candidate_ms": list(self.b), "aa_ms": list(self.c),
                "group": list(self.group)}


@dataclass(frozen=True)
class Verdict:
    """The decision on one candidate and what it rests on (see the module docstring). ``speedup_ci`` and ``aa_ci``
    are two-sided intervals at ``ci_level`` (``1 - 2 alpha``); ``reason`` says in one line why the candidate is or is
    not faster. ``slower``: the same test the other way round (the candidate slower than the original beyond the
    noise; the suite's "behind")."""

    faster: bool
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    aa_ratio: float | None
    aa_ci: tuple[float, float] | None
    p_value: float | None
    rounds: int
    groups: int
    alpha: float
    min_speedup: float
    reason: str
    slower: bool = False
    measured: Rounds = field(default_factory=Rounds, repr=False)
    #: which look of a :func:`confirm` decided (1, or 2 after more session groups)
    look: int = 1

    @property
    def ci_level(self) -> float:
        return 1.0 - 2.0 * self.alpha

    def details(self) -> str:
        """``90% CI 1.050-1.110x; A/A 1.002x; 10 rounds in 5 session groups`` (what the speedup rests on)."""
        parts = [f"{self.ci_level:.0%} CI {self.speedup_ci[0]:.3f}-{self.speedup_ci[1]:.3f}x"] \
            if self.speedup_ci is not None else []
        if self.aa_ratio is not None:
            parts.append(f"A/A {self.aa_ratio:.3f}x")
        parts.append(f"{self.rounds} rounds in {self.groups} session groups"
                     + (f", second look at alpha {self.alpha:.3g}" if self.look > 1 else ""))
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"faster": self.faster, "slower": self.slower, "speedup": self.speedup,
                "speedup_ci": None if self.speedup_ci is None else list(self.speedup_ci), "ci_level": self.ci_level,
                "aa_ratio": self.aa_ratio, "aa_ci": None if self.aa_ci is None else list(self.aa_ci),
                "p_value": self.p_value, "rounds": self.rounds, "sessions": self.groups, "alpha": self.alpha,
                "min_speedup": self.min_speedup, "reason": self.reason, "look": self.look, **self.measured.to_dict()}


def _t_interval(values: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """Mean of ``values`` and its two-sided ``1 - 2 alpha`` Student-t interval (ends in log space)."""
    n = len(values)
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else math.inf
    half = float(stats.t.ppf(1.0 - alpha, n - 1)) * sd / math.sqrt(n) if n > 1 else math.inf
    return mean, mean - half, mean + half


def verdict(m: Rounds, *, min_speedup: float = 1.0, alpha: float = ALPHA, min_groups: int = MIN_GROUPS) -> Verdict:
    """The decision on the measured rounds ``m`` (see the module docstring)."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), not {alpha!r}")
    groups = m.by_group()

    def undecided(reason: str) -> Verdict:
        return Verdict(False, None, None, None, None, None, len(m.a), len(groups), alpha, min_speedup, reason,
                       measured=m)

    if any(v <= 0 or not math.isfinite(v) for v in (*m.a, *m.b, *m.c)):
        return undecided("a round has no usable time")
    if len(groups) < 2:
        return undecided(f"not confirmed: {len(groups)} session group(s) measured, {min_groups} needed")
    z = [statistics.median(math.log(math.sqrt(a * c) / b) for a, b, c in rows) for rows in groups.values()]
    y = [statistics.median(math.log(a / c) for a, b, c in rows) for rows in groups.values()]
    zm, zlo, zhi = _t_interval(z, alpha)
    ym, ylo, yhi = _t_interval(y, alpha)
    sd = statistics.stdev(z)
    t = zm / (sd / math.sqrt(len(z))) if sd > 0 else math.copysign(math.inf, zm) if zm else 0.0
    p = float(stats.t.sf(t, len(z) - 1))
    speedup, ci, aa = math.exp(zm), (math.exp(zlo), math.exp(zhi)), math.exp(ym)
    enough = len(groups) >= min_groups
    faster = enough and zlo > 0.0 and speedup > min_speedup and zm > abs(ym)
    slower = enough and zhi < 0.0 and speedup * min_speedup < 1.0 and -zm > abs(ym)
    level = f"{1 - 2 * alpha:.0%} CI {ci[0]:.3f}-{ci[1]:.3f}x"
    if faster:
        reason = f"faster: {speedup:.3f}x, {level} above 1.0x, A/A {aa:.3f}x"
    elif not enough:
        reason = f"not confirmed: {len(groups)} session group(s) measured, {min_groups} needed"
    elif zhi < 0.0:
        reason = f"slower: {speedup:.3f}x, {level} below 1.0x (A/A {aa:.3f}x)"
    elif zlo <= 0.0:
        reason = f"not faster beyond the noise: {speedup:.3f}x, {level} includes 1.0x (A/A {aa:.3f}x)"
    elif speedup <= min_speedup:
        reason = f"faster by less than {min_speedup:g}x: {speedup:.3f}x ({level})"
    else:
        reason = (f"not faster than the A/A control reads: {speedup:.3f}x, {level}, against the original's "
                  f"{aa:.3f}x over itself")
    return Verdict(faster, speedup, ci, aa, (math.exp(ylo), math.exp(yhi)), p, len(m.a), len(groups), alpha,
                   min_speedup, reason, slower=slower, measured=m)


def measure(original: Maker, candidate: Maker, *, budget_ms: float, groups: int = GROUPS,
            rounds_per_group: int = ROUNDS_PER_GROUP, clock: Callable[[], float] | None = None,
            stop: Callable[[float], bool] | None = None) -> Rounds:
    """Time ``groups`` session groups (fresh ``original``, ``candidate`` and ``original`` units each) of
    ``rounds_per_group`` rounds (module docstring; a multiple of three keeps every position balanced). No group
    starts once ``stop(need_s)`` says so, ``need_s`` being what the last group took (0.0 before the first); a group
    once started is completed."""
    import time

    now = clock or time.perf_counter
    a: list[float] = []
    b: list[float] = []
    c: list[float] = []
    group: list[int] = []
    need = 0.0
    for j in range(groups):
        if stop is not None and stop(need):
            break
        t = now()
        units = (original(), candidate(), original())
        for r in range(rounds_per_group):
            ms = [0.0, 0.0, 0.0]
            square = SQUARES[j % len(SQUARES)]
            for k in square[r % len(square)]:
                ms[k] = units[k](budget_ms)
            a.append(ms[0])
            b.append(ms[1])
            c.append(ms[2])
            group.append(j)
        del units
        need = now() - t
    return Rounds(tuple(a), tuple(b), tuple(c), tuple(group))


def compare(original: Maker, candidate: Maker, *, budget_ms: float, min_speedup: float = 1.0, alpha: float = ALPHA,
            groups: int = GROUPS, rounds_per_group: int = ROUNDS_PER_GROUP, clock: Callable[[], float] | None = None,
            stop: Callable[[float], bool] | None = None) -> Verdict:
    """:func:`measure` then :func:`verdict`: the one way graphsub decides that a candidate is faster."""
    m = measure(original, candidate, budget_ms=budget_ms, groups=groups, rounds_per_group=rounds_per_group,
                clock=clock, stop=stop)
    return verdict(m, min_speedup=min_speedup, alpha=alpha)


def confirm(original: Maker, candidate: Maker, *, budget_ms: float, min_speedup: float = 1.0, alpha: float = ALPHA,
            clock: Callable[[], float] | None = None, stop: Callable[[float], bool] | None = None,
            second: Callable[[float], bool] | None = None) -> Verdict:
    """:func:`compare` with a second look (module docstring): ``second`` (None: one look, at ``alpha``) is the ``stop``
    of the second look's session groups, and says by being given that a second look is planned -- the first is then
    decided at :data:`FIRST_LOOK_SHARE` of ``alpha``. The second look runs only when the first measured all
    :data:`GROUPS` groups and found the candidate neither faster nor at or below 1.0x; its verdict, on the groups of
    both looks at the rest of ``alpha``, is the answer (``look`` 2), unless ``second`` let no group start.

    >>> o, c = (lambda: lambda ms: 10.0), (lambda: lambda ms: 8.0)
    >>> v = confirm(o, c, budget_ms=1.0, min_speedup=1.03, second=lambda need_s: False)
    >>> v.faster, v.look, v.groups, v.alpha  # faster at the first look: no second one
    (True, 1, 5, 0.025)
    """
    first_alpha = alpha * FIRST_LOOK_SHARE if second is not None else alpha
    m = measure(original, candidate, budget_ms=budget_ms, clock=clock, stop=stop)
    v = verdict(m, min_speedup=min_speedup, alpha=first_alpha)
    if second is None or v.faster or m.groups < GROUPS or v.speedup is None or v.speedup <= 1.0:
        return v
    more = measure(original, candidate, budget_ms=budget_ms, clock=clock, stop=second)
    if not more.groups:
        return v
    both = verdict(m.extend(more), min_speedup=min_speedup, alpha=alpha - first_alpha)
    return dataclasses.replace(both, look=2)


def session_makers(original: bytes | str, candidate: bytes | str, feeds: dict[str, Any], *, threads: int,
                   provider: str = "cpu", timers: Any = None) -> tuple[Maker, Maker]:
    """Makers of fresh onnxruntime sessions of two models (``timers``' confirmation sessions,
    :meth:`graphsub.optimize.timing.Timers.confirm_session`; None: the current timers)."""
    from graphsub.optimize.timing import resolve_timers

    tm = resolve_timers(timers)

    def maker(model: bytes | str) -> Maker:
        return lambda: tm.confirm_session(model, feeds, threads=threads, provider=provider)

    return maker(original), maker(candidate)


__all__ = ["ALPHA", "FIRST_LOOK_SHARE", "GROUPS", "MIN_GROUPS", "MIN_SPEEDUP", "ROUNDS_PER_GROUP", "SQUARES", "Maker",
           "Rounds", "Timer", "Verdict", "compare", "confirm", "measure", "session_makers", "verdict"]
