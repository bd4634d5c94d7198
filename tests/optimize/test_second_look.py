"""The timing step's second look (graphsub.optimize.race._second_look, graphsub.optimize.decide.confirm): a leader
whose first five session groups decide nothing is measured in five more where the time for them was left when its
confirmation began, and decided at the first look's full alpha where it was not."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphsub.deadline import Deadline
from graphsub.optimize import decide
from graphsub.optimize import portfolio as pf
from graphsub.optimize.pipeline import _Settings
from graphsub.optimize.race import time_portfolio
from graphsub.optimize.timing import Timers


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _one_leader(left_s: float, seed: int) -> tuple[pf.Portfolio, pf.Candidate, _Clock]:
    """One verified candidate against a 10 ms original, on fake sessions and a fake clock (each block moves it
    0.1 s): side by side it reads 9 ms; in its confirmation each block of it reads 9.5 ms off by a random 8%, so that
    five groups seldom decide a 5% gain."""
    clock = _Clock()
    rng = np.random.default_rng(seed)

    def make(ms: Callable[[bytes | str], float]) -> Callable[..., Callable[[float], float]]:
        def session(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
            def run(budget_ms: float) -> float:
                clock.t += 0.1
                return ms(model)

            return run

        return session

    cand = pf.Candidate("c", b"c" * 8, verified=True)
    noisy = lambda m: 10.0 if m != cand.data else 9.5 * float(np.exp(rng.normal(0.0, 0.08)))  # noqa: E731
    timers = Timers(session=make(lambda m: 10.0 if m != cand.data else 9.0), confirm=make(noisy), clock=clock)
    port = pf.Portfolio()
    port.add(cand)
    st = _Settings(seed=0, seeds=(0,), threads=1, rtol=1e-4, atol=1e-5, min_speedup=1.03, keep_slower=False,
                   budget_ms=100.0, peers=(), eqsat_s=0.0, on_top_s=0.0, spelling=False)
    time_portfolio(port, [cand], b"original", {}, st, Deadline.after(left_s, start=0.0, clock=clock), timers)
    return port, cand, clock


def _first_undecided(left_s: float) -> tuple[pf.Portfolio, decide.Verdict]:
    """The first seed whose leader is neither faster nor at or below 1.0x after the first look."""
    for seed in range(50):
        port, cand, _ = _one_leader(left_s, seed)
        v = cand.confirmation
        assert v is not None and v.measured is not None
        n, m = decide.GROUPS * decide.ROUNDS_PER_GROUP, v.measured
        first = v if v.look == 1 else decide.verdict(decide.Rounds(m.a[:n], m.b[:n], m.c[:n], m.group[:n]),
                                                     min_speedup=1.03, alpha=decide.ALPHA * decide.FIRST_LOOK_SHARE)
        if not first.faster and first.speedup is not None and first.speedup > 1.0:
            return port, v
    raise AssertionError("no seed left the first look undecided")


def test_an_undecided_leader_gets_a_second_look_when_the_time_is_left() -> None:
    port, v = _first_undecided(1e4)
    assert v.look == 2 and v.groups == 2 * decide.GROUPS  # all ten groups, decided at the other half of alpha
    assert v.alpha == decide.ALPHA * (1 - decide.FIRST_LOOK_SHARE)
    assert any("looked at again" in n for n in port.notes)
    assert "second look" in v.details()


def test_no_second_look_is_planned_without_its_time() -> None:
    """8 s of fake time: the side-by-side rounds (about 1 s) and five confirmation groups (about 4.5 s) fit, the
    eight a second look plans for do not. The first look is then decided at the whole alpha, and no group is measured
    past five."""
    for seed in range(10):
        _, cand, clock = _one_leader(8.0, seed)
        v = cand.confirmation
        assert v is not None and v.look == 1 and v.groups <= decide.GROUPS and v.alpha == decide.ALPHA
        assert clock.t <= 8.0
