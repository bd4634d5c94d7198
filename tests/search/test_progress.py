"""Progress reports of ``search(..., progress=fn)``: every algorithm reports the start, every
improvement and a heartbeat; costs never increase, the last report is the result's best cost,
and the result is the same with and without the callback."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import graphsub.search.base as base
from graphsub import zoo
from graphsub.cost import get_model
from graphsub.rules import get_set
from graphsub.search import ALGORITHMS, Budget, SearchResult, search

V100 = get_model("roofline:v100")
P100 = get_model("roofline:p100")
RULES = get_set("ocggs157")

#: a small deterministic case per algorithm, each of which improves the graph
CASES: dict[str, tuple[str, dict[str, Any], Budget, dict[str, Any]]] = {
    "greedy": ("sru", {}, Budget(time_s=None, k=3), {}),
    "taso": ("sru", {}, Budget(time_s=None, expansions=30), {}),
    "metaflow": ("sru", {}, Budget(time_s=None, expansions=40), {"threshold": 10}),
    "enum": ("sru", {}, Budget(time_s=None, k=2), {}),
    "pruning": ("sru", {}, Budget(time_s=None, k=2), {}),
    "dpp": ("sru", {}, Budget(time_s=None, k=2), {}),
    "sampling": ("sru", {}, Budget(time_s=None, k=3), {}),
    "eqsat": ("sru", {"length": 1}, Budget(time_s=20), {}),
}


def run(algo: str, with_progress: bool) -> tuple[SearchResult, list[tuple[float, float]]]:
    model, kwargs, budget, params = CASES[algo]
    calls: list[tuple[float, float]] = []
    progress = (lambda t, c: calls.append((t, c))) if with_progress else None
    r = search(zoo.get(model, **kwargs), RULES, P100 if algo == "eqsat" else V100, budget, algo=algo,
               progress=progress, **params)
    return r, calls


def check_reports(r: SearchResult, calls: list[tuple[float, float]]) -> None:
    assert calls[0] == (0.0, r.initial_cost)
    times = [t for t, _ in calls]
    costs = [c for _, c in calls]
    assert times == sorted(times), "elapsed time goes back"
    assert all(b <= a for a, b in itertools.pairwise(costs)), "a reported best cost increases"
    assert costs[-1] == r.best_cost
    assert {c for _, c in r.trace} <= set(costs), "an improvement was not reported"


def test_every_algorithm_has_a_case() -> None:
    assert set(CASES) == set(ALGORITHMS)


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_reports_are_monotone_and_end_at_the_best_cost(algo: str) -> None:
    r, calls = run(algo, True)
    assert r.best_cost < r.initial_cost
    check_reports(r, calls)


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_results_are_the_same_with_and_without_progress(algo: str) -> None:
    (a, _), (b, _) = run(algo, True), run(algo, False)
    assert a.best == b.best
    assert (a.best_cost, a.initial_cost, a.sequence, a.stopped_by) == (b.best_cost, b.initial_cost, b.sequence,
                                                                       b.stopped_by)
    assert (a.stats.expanded, a.stats.generated, a.stats.matches) == (b.stats.expanded, b.stats.generated,
                                                                      b.stats.matches)
    if algo == "eqsat":
        assert a.params["egraph"]["nodes"] == b.params["egraph"]["nodes"]
        assert a.params["extraction"]["chosen"] == b.params["extraction"]["chosen"]


def test_no_improvement_reports_the_initial_cost() -> None:
    calls: list[tuple[float, float]] = []
    r = search(zoo.get("sru"), [], V100, Budget(time_s=None, k=2), algo="greedy",
               progress=lambda t, c: calls.append((t, c)))
    assert r.best_cost == r.initial_cost
    assert calls == [(0.0, r.initial_cost)]


@pytest.mark.parametrize("algo", ["taso", "eqsat"])
def test_heartbeat_reports_between_improvements(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "HEARTBEAT_S", 0.0)  # every budget check reports
    r, calls = run(algo, True)
    check_reports(r, calls)
    assert len(calls) > len({c for _, c in calls}) + 2


def test_heartbeats_are_at_most_five_a_second() -> None:
    _, calls = run("sampling", True)
    for (t0, c0), (t1, c1) in itertools.pairwise(calls):
        if c1 == c0:  # a heartbeat, not an improvement
            assert t1 - t0 >= base.HEARTBEAT_S


def test_metaflow_reports_improvements_found_inside_a_part() -> None:
    """With one part (sru is below the split threshold) the outer search sees one improvement per
    part; the reports show the part search's own improvements too."""
    calls: list[tuple[float, float]] = []
    r = search(zoo.get("sru"), RULES, V100, Budget(time_s=None, expansions=40), algo="metaflow",
               progress=lambda t, c: calls.append((t, c)))
    check_reports(r, calls)
    assert r.params["parts"] == 1
    assert len({c for _, c in calls}) > len({c for _, c in r.trace})
