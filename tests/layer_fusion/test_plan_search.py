"""Plans stay well formed under random generation, moves, crossover and repair; searches are
deterministic, respect the budget and beat the no-fusion plan."""

from __future__ import annotations

import itertools
import random

import pytest

from graphsub import zoo
from graphsub.errors import GraphsubError
from graphsub.layer_fusion import BRRCost, FusionPlan, LBDFCost, check_plan, fusion_graph
from graphsub.layer_fusion.moves import crossover, mutate, random_plan, random_split
from graphsub.layer_fusion.plan import quotient_cycle
from graphsub.layer_fusion.repair import RandomRepair, get_repair
from graphsub.layer_fusion.search import cost_singletons, search

FG = {name: fusion_graph(zoo.get(name)) for name in ("resnet18", "mobilenet_v2", "efficientnet_b0")}


def test_plan_is_a_canonical_hashable_value() -> None:
    a = FusionPlan([(3, 2), (0, 1)])
    b = FusionPlan.from_labels(["x", "x", "y", "y"])
    assert a == b and hash(a) == hash(b) and a.groups == ((0, 1), (2, 3))
    assert len({a, b}) == 1 and a.labels == (0, 0, 1, 1)
    with pytest.raises(AttributeError):
        a.groups = ()  # type: ignore[misc]


def test_check_plan_rejects_cycles_and_bad_partitions() -> None:
    fg = FG["resnet18"]
    # first residual add of layer1: fusing the block's input with the add but not the convs
    # between them puts a path outside the group between two of its ops -> cyclic quotient
    add = fg.ops.index("add")
    x = fg.preds[add][1]
    inner = list(range(x + 1, add))
    labels = list(range(fg.num_ops))
    labels[add] = labels[x]
    problems = check_plan(fg, FusionPlan.from_labels(labels))
    assert problems and "cyclic" in problems[0], problems
    assert inner  # the convs between the fork and the add exist
    assert "partition" in check_plan(fg, FusionPlan([(0,), (1,)]))[0]


@pytest.mark.parametrize("name", sorted(FG))
def test_random_plans_moves_and_crossover_are_well_formed(name: str) -> None:
    fg = FG[name]
    cost = LBDFCost(fg, 256 * 1024)
    fixed = cost.unfusable
    rng = random.Random(1)
    plans = [random_plan(fg, rng, p, fixed) for p in (0.0, 0.5, 0.9, 1.0, None)]
    assert len(plans[0]) == fg.num_ops  # p = 0: no fusion
    assert len(plans[3]) < len(plans[1])
    for p in plans:
        assert check_plan(fg, p, fixed) == []
    p = plans[2]
    for _ in range(60):
        q = mutate(fg, p, rng, fixed)
        assert check_plan(fg, q, fixed) == []
        p = q
    for a, b in itertools.pairwise(plans):
        assert check_plan(fg, crossover(fg, a, b, rng), fixed) == []
    big = max(p.groups, key=len)
    pieces = random_split(fg, big, rng)
    assert len(pieces) >= 2 and sorted(v for g in pieces for v in g) == list(big)
    assert quotient_cycle(fg, p.replace(big, pieces).labels) is None


@pytest.mark.parametrize("cls", [LBDFCost, BRRCost])
def test_random_repair_makes_every_group_valid(cls: type) -> None:
    fg = FG["mobilenet_v2"]
    cost = cls(fg, 128 * 1024)
    rng = random.Random(3)
    plan = random_plan(fg, rng, 1.0, cost.unfusable)  # maximal fusion: invalid groups
    assert not cost.evaluate(plan).valid
    fixed = RandomRepair()(cost, plan, rng)
    assert cost.evaluate(fixed).valid
    assert check_plan(fg, fixed, cost.unfusable) == []
    # only invalid groups were touched
    valid_before = {g for g in plan.groups if cost.valid(g)}
    assert valid_before <= set(fixed.groups)


def test_explainer_repairs_are_built() -> None:
    assert get_repair("random").name == "random"
    for name in ("gnne", "pg", "rg"):
        assert get_repair(name).name == name  # the classifier loads lazily, on first use
    with pytest.raises(GraphsubError, match="unknown repair"):
        get_repair("magic")


@pytest.mark.parametrize("algo", ["rs", "ls", "nsga2"])
def test_search_is_deterministic_within_budget_and_beats_no_fusion(algo: str) -> None:
    fg = FG["resnet18"]
    cost = LBDFCost(fg, 256 * 1024)
    r1 = search(cost, algo, 80, seed=5)
    r2 = search(LBDFCost(fg, 256 * 1024), algo, 80, seed=5)
    assert r1.plan == r2.plan and r1.cost == r2.cost
    assert r1.evaluated_plans == 80
    assert r1.cost.valid and check_plan(fg, r1.plan, cost.unfusable) == []
    assert r1.cost.dram < cost.evaluate(cost_singletons(cost)).dram
    # the trace records strictly improving DRAM at increasing evaluation counts
    counts = [n for n, _ in r1.trace]
    drams = [d for _, d in r1.trace]
    assert counts == sorted(counts) and drams == sorted(drams, reverse=True)
    assert drams[-1] == r1.cost.dram


def test_local_search_improves_on_its_random_start() -> None:
    cost = LBDFCost(FG["mobilenet_v2"], 256 * 1024)
    ls = search(cost, "ls", 400, seed=0)
    first10 = min(d for n, d in ls.trace if n <= 10)
    assert ls.cost.dram < first10


def test_budget_must_be_positive() -> None:
    with pytest.raises(GraphsubError, match="at least 1"):
        search(LBDFCost(FG["resnet18"], 256 * 1024), "rs", 0)
    with pytest.raises(GraphsubError, match="unknown search"):
        search(LBDFCost(FG["resnet18"], 256 * 1024), "sa", 10)
