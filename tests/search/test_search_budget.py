"""Limits that limit: a search's budget bounds its whole run (matching, the cost model's profiling), bad budgets are
refused, and a stop request (the first Ctrl-C) ends a search at once with its best graph."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from graphsub import interrupt
from graphsub.cost import get_model
from graphsub.deadline import overshoot_bound_s
from graphsub.errors import BudgetExceeded, GraphsubError
from graphsub.ir import Builder
from graphsub.ir.graph import Graph
from graphsub.rules.match import find_matches
from graphsub.rules.rule import Rule, make_rule
from graphsub.search import Budget, search
from helpers import no_stop_request  # noqa: F401 -- autouse: no Ctrl-C flag across tests

#: how far past its budget a search may run: the bound the README states (no weights here)
OVERSHOOT_S = overshoot_bound_s()


def relu_chain(n: int) -> Graph:
    b = Builder()
    h = b.input("x", (1, 64))
    for _ in range(n):
        h = b.relu(h)
    return b.build(h)


def pair_rule() -> Rule:
    """A rule with a disconnected source (two independent relus, as TASO's relu-pair-to-concat rules): on a chain of
    n relus it has n^2 candidate pairs, each rejected by the cycle check in O(n)."""
    return make_rule("t_relu_pair", lambda p: {"a": p.relu(p.var("x")), "b": p.relu(p.var("y"))},
                     lambda t, m: {"a": t.relu(m.x), "b": t.relu(m.y)})


def relu_relu() -> Rule:
    return make_rule("t_relu_relu", lambda p: {"y": p.relu(p.relu(p.var("x")))}, lambda t, m: {"y": t.relu(m.x)})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0])
def test_budget_refuses_times_that_do_not_limit(value: float) -> None:
    with pytest.raises(GraphsubError, match="time_s must be a finite number"):
        Budget(time_s=value)


@pytest.mark.parametrize("field", ["expansions", "k", "memory_mb"])
def test_budget_refuses_negative_and_nan_counts(field: str) -> None:
    for value in (-1, math.nan):
        with pytest.raises(GraphsubError, match=field):
            Budget(**{field: value})  # type: ignore[arg-type]
    assert Budget(time_s=0, **{field: 0}).time_s == 0  # zero is a limit (stop at once); None is none


def test_matching_polls_its_stop() -> None:
    calls = [0]

    def stop() -> bool:
        calls[0] += 1
        return calls[0] > 3

    with pytest.raises(BudgetExceeded):
        find_matches(relu_chain(300), pair_rule(), stop=stop)
    assert find_matches(relu_chain(10), relu_relu(), stop=lambda: False)  # a stop that never fires changes nothing


@pytest.mark.parametrize("algo", ["taso", "metaflow", "eqsat"])
def test_time_budget_bounds_a_search_on_a_long_chain(algo: str) -> None:
    g = relu_chain(2000)
    t = time.perf_counter()
    r = search(g, [pair_rule(), relu_relu()], get_model("flops"), Budget(time_s=0.5), algo=algo)
    wall = time.perf_counter() - t
    assert r.stopped_by == "time" and wall < 0.5 + OVERSHOOT_S
    assert r.best_cost <= r.initial_cost


def test_stop_request_ends_a_search_at_once_with_the_input() -> None:
    g = relu_chain(50)
    interrupt.request_stop()
    t = time.perf_counter()
    r = search(g, [relu_relu()], get_model("flops"), Budget(time_s=60), algo="taso")
    assert r.stopped_by == "interrupt" and time.perf_counter() - t < OVERSHOOT_S
    assert r.best is g and r.sequence == ()


def test_stop_request_ends_eqsat() -> None:
    interrupt.request_stop()
    r = search(relu_chain(50), [relu_relu()], get_model("flops"), Budget(time_s=60), algo="eqsat")
    assert r.stopped_by == "interrupt" and r.wall_time_s < OVERSHOOT_S
    assert r.best_cost <= r.initial_cost


def test_an_exhausted_budget_stops_the_cost_models_profiling(tmp_path: Path) -> None:
    """A measured model with an empty cache would time every op of the input; with no time left it times none, the
    search ends at once, and the input's cost is an estimate that says so. The model measures again afterwards."""
    from graphsub.cost.measured import MeasuredCostModel

    b = Builder()
    x = b.input("x", (4, 32))
    g = b.build(b.tanh(b.sigmoid(b.relu(x))))
    cm = MeasuredCostModel(cache=tmp_path / "times.sqlite", threads=1, budget_ms=2, progress=False)
    r = search(g, [relu_relu()], cm, Budget(time_s=0), algo="taso")
    assert r.stopped_by == "time" and "estimate" in r.params["initial_cost"]
    assert cm.stats.misses == 0 and cm.stop is None
    assert cm.graph_cost(g).time_ms > 0 and cm.stats.misses > 0
