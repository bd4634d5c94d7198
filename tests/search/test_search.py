"""Search algorithms: the common interface, budgets, exactness of ENU, dedup, MetaFlow split."""

from __future__ import annotations

import pytest

from graphsub import zoo
from graphsub.cost import get_model
from graphsub.equivalence import equivalent
from graphsub.errors import GraphsubError
from graphsub.ir.validate import validate
from graphsub.rules import get_set
from graphsub.rules.apply import apply
from graphsub.rules.library import find_rule
from graphsub.rules.match import find_matches
from graphsub.search import ALGORITHMS, Budget, search, split_graph

COST = get_model("roofline:v100")
RULES = get_set("ocggs157")


def replay(graph, result):  # type: ignore[no-untyped-def]
    """Re-apply the result's sequence from the original graph (checks it is a real derivation)."""
    g = graph
    for step in result.sequence:
        rule = find_rule(step.rule)
        (m,) = [m for m in find_matches(g, rule) if tuple(n for _, n in m.nodes) == step.nodes]
        g = apply(g, m).graph
    return g


# eqsat returns an extraction, not a replayable sequence of <= K substitutions: tests/search/test_eqsat.py
@pytest.mark.parametrize("algo", sorted(a for a in ALGORITHMS if a != "eqsat"))
@pytest.mark.parametrize(("model", "kwargs"), [("resnet", {"blocks": 2}), ("sru", {})])
def test_every_algorithm_returns_a_valid_equivalent_derivation(algo: str, model: str, kwargs: dict) -> None:  # type: ignore[type-arg]
    g = zoo.get(model, **kwargs)
    r = search(g, RULES, COST, Budget(time_s=60, k=3), algo=algo)
    assert r.algorithm == ("taso" if algo == "taso" else algo)
    assert r.best_cost <= r.initial_cost
    assert len(r.sequence) <= 3
    validate(r.best)
    assert replay(g, r) == r.best
    assert abs(COST.scalar(COST.graph_cost(r.best)) - r.best_cost) < 1e-9  # incremental cost is exact
    if r.sequence:
        assert equivalent(g, r.best).equivalent
    d = r.to_dict()
    assert {"initial_cost", "best_cost", "search_time_s", "peak_mem_mb", "sequence", "explored"} <= set(d)


@pytest.mark.parametrize(("model", "kwargs"), [("resnet", {"blocks": 2}), ("resnet", {"blocks": 4}), ("sru", {})])
def test_enum_is_the_optimum(model: str, kwargs: dict) -> None:  # type: ignore[type-arg]
    g = zoo.get(model, **kwargs)
    k = 2
    best = search(g, RULES, COST, Budget(time_s=120, k=k), algo="enum")
    for algo in ("greedy", "taso", "metaflow"):
        r = search(g, RULES, COST, Budget(time_s=60, k=k), algo=algo)
        assert r.best_cost >= best.best_cost - 1e-12, f"{algo} beat the exhaustive optimum"


def test_enum_beats_taso_where_a_cost_increasing_step_is_needed() -> None:
    """OCGGS Fig. 1: enlarge a kernel (cost up) then merge convs (cost down) on ResNet blocks."""
    g = zoo.get("resnet", blocks=2)
    enum = search(g, RULES, COST, Budget(time_s=60, k=2), algo="enum")
    greedy = search(g, RULES, COST, Budget(time_s=60, k=2), algo="greedy")
    assert enum.best_cost < greedy.best_cost
    assert enum.sequence[0].rule.startswith("ocggs_enlarge")
    wide = search(g, RULES, COST, Budget(time_s=60, k=2), algo="taso", alpha=1.5)
    assert wide.best_cost == pytest.approx(enum.best_cost)  # a larger alpha lets TASO pass the hill


def test_budgets_are_honoured() -> None:
    g = zoo.get("nasrnn")
    r = search(g, get_set("taso-pb"), COST, Budget(time_s=None, expansions=3), algo="taso")
    assert r.stats.expanded == 3 and r.stopped_by == "expansions"
    r = search(g, get_set("taso-pb"), COST, Budget(time_s=0.5), algo="taso")
    assert r.stopped_by == "time" and r.wall_time_s < 5
    with pytest.raises(GraphsubError, match="maximum sequence length"):
        search(g, RULES, COST, Budget(), algo="enum")
    with pytest.raises(GraphsubError, match="unknown search algorithm"):
        search(g, RULES, COST, Budget(), algo="magic")


def test_deterministic() -> None:
    g = zoo.get("sru")
    a = search(g, RULES, COST, Budget(time_s=None, expansions=20), algo="taso", seed=1)
    b = search(g, RULES, COST, Budget(time_s=None, expansions=20), algo="taso", seed=1)
    assert a.sequence == b.sequence and a.best == b.best


def test_metaflow_split_parts_are_small_and_cover_the_graph() -> None:
    g = zoo.get("inception_v3")
    matches = [m for r in RULES for m in find_matches(g, r)]
    parts = split_graph(g, matches, threshold=30)
    compute = {n for n in g.nodes if not g.nodes[n].sig.opdef.leaf}
    assert set().union(*parts) == compute
    assert sum(len(p) for p in parts) == len(compute)  # disjoint
    assert all(len(p) <= 30 for p in parts) and len(parts) >= g.num_ops // 30
