"""Validity GNN (CI-sized training, save/load), the three explainers, the recursive greedy split
(Algorithm 1) and the explainer-driven repairs (end to end through the command line: tests/cli/test_cli_fuse.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from graphsub import zoo
from graphsub.layer_fusion import LBDFCost, check_plan, fusion_graph
from graphsub.layer_fusion.explain import GNNExplainerX, PGExplainerX, RGExplainerX, invalid_groups_for_fit
from graphsub.layer_fusion.gnn import ValidityClassifier, build_dataset, group_edges, train
from graphsub.layer_fusion.graph import FusionGraph, OpGeom
from graphsub.layer_fusion.moves import random_plan
from graphsub.layer_fusion.plan import FusionPlan, Group
from graphsub.layer_fusion.repair import ExplainerRepair, RandomRepair
from graphsub.layer_fusion.split import GreedySplitter, candidate_cuts


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[ValidityClassifier, dict, Path]:
    ds = build_dataset(["resnet18", "mobilenet_v2"], "lbdf", plans_per_buffer=6, seed=0)
    clf, rep = train(ds, epochs=5, seed=0)
    path = tmp_path_factory.mktemp("gnn") / "lbdf.pt"
    clf.save(path)
    return clf, rep, path


class AllEdges:
    """An oracle 'explainer': every edge of the group is a candidate."""

    def explain(self, cost: LBDFCost, group: Group) -> list[tuple[int, int]]:
        return group_edges(cost.fg, group)


def invalid_groups(cost: LBDFCost, n: int, seed: int = 0) -> list[Group]:
    return invalid_groups_for_fit(cost, random.Random(seed), plans=10, limit=n)


def test_classifier_beats_majority(trained: tuple[ValidityClassifier, dict, Path]) -> None:
    _, rep, _ = trained
    assert rep["samples"] > 1000 and rep["train"] + rep["val"] + rep["test"] == rep["samples"]
    assert rep["test_accuracy"] > rep["test_majority_accuracy"], rep
    assert rep["test_f1"] > 0.3


def test_save_load_round_trip(trained: tuple[ValidityClassifier, dict, Path]) -> None:
    clf, _, path = trained
    assert path.with_suffix(".json").is_file()
    again = ValidityClassifier.load(path)
    cost = LBDFCost(fusion_graph(zoo.get("mobilenet_v2")), 128 * 1024)
    groups = [*invalid_groups(cost, 12), (0, 1), (5, 6, 7)]
    assert clf.prob_invalid(cost, groups) == again.prob_invalid(cost, groups)
    assert again.vocab == clf.vocab


@pytest.mark.parametrize("cls", [GNNExplainerX, PGExplainerX, RGExplainerX])
def test_explainers_return_edges_of_the_group(trained: tuple[ValidityClassifier, dict, Path], cls: type) -> None:
    _clf, _, _ = trained
    cost = LBDFCost(fusion_graph(zoo.get("mobilenet_v2")), 128 * 1024)
    groups = invalid_groups(cost, 8)
    kwargs = {"epochs": 20} if cls is GNNExplainerX else {"epochs": 2}
    ex = cls(ValidityClassifier.load(trained[2]), top_k=5, **kwargs)
    if not ex.trained:
        ex.fit(cost, groups)
    for g in groups[:4]:
        edges = ex.explain(cost, g)
        assert edges, g
        assert len(edges) <= 5 and len(set(edges)) == len(edges)
        assert set(edges) <= set(group_edges(cost.fg, g))
        assert ex.explain(cost, g) == edges  # memoized, deterministic


def _chain(channels: list[int], hw: int = 32) -> FusionGraph:
    """conv3x3 chain ``input -> 0 -> 1 -> ... -> n-1`` with the given output channels."""
    n = len(channels)
    c_in = [16, *channels[:-1]]
    return FusionGraph(
        name="chain", ops=("conv2d",) * n, node_ids=tuple(range(n)),
        preds=tuple((n,) if v == 0 else (v - 1,) for v in range(n)),
        consumers=(*tuple((v + 1,) if v < n - 1 else () for v in range(n)), (0,)),
        shape=(*tuple((c, hw, hw) for c in channels), (16, hw, hw)),
        weight=tuple(ci * co * 9 for ci, co in zip(c_in, channels, strict=True)),
        geom=tuple(OpGeom("conv", 3, 1, 3, 1) for _ in range(n)),
        is_output=(*tuple(v == n - 1 for v in range(n)), False))


def test_split_finds_the_known_best_cut_and_never_loses_to_random() -> None:
    fg = _chain([32, 32, 2, 32, 32, 32])
    cost = LBDFCost(fg, 40 * 1024)
    group = tuple(range(6))
    assert not cost.valid(group) and not cost.unfusable
    # the best cut crosses the 2-channel tensor of op 2: both halves fit
    best = cost.fd((0, 1, 2)) + cost.fd((3, 4, 5))
    assert cost.valid((0, 1, 2)) and cost.valid((3, 4, 5))
    pieces = GreedySplitter(AllEdges()).split(cost, group)
    assert pieces is not None and sorted(pieces) == [(0, 1, 2), (3, 4, 5)]
    dram = sum(cost.fd(g) for g in pieces)
    assert dram == best
    assert GreedySplitter(AllEdges()).split(cost, group) is not None
    for seed in range(10):
        rnd = RandomRepair().split_group(cost, group, random.Random(seed))
        assert dram <= sum(cost.fd(g) for g in rnd)


def test_skip_connection_cuts_are_down_sets() -> None:
    fg = fusion_graph(zoo.get("resnet", blocks=1))  # 0 conv(x), 1 conv(x), 2 conv(1), 3 add(0, 2), 4 relu
    cost = LBDFCost(fg, 1 << 30)
    cuts = {a for (a,) in candidate_cuts(cost, (0, 1, 2, 3, 4), [(0, 3)])}
    # cutting the skip (0, 3) alone leaves the group connected: the extra edge (2, 3) or (x->1) goes too
    assert (0, 1, 2) in cuts and (0,) in cuts
    for a in cuts:
        assert all(u in a for v in a for u in fg.preds[v] if u < fg.num_ops)  # down-set


@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2"])
def test_split_gives_valid_exact_cover_and_acyclic_plans(trained: tuple[ValidityClassifier, dict, Path],
                                                         model: str) -> None:
    fg = fusion_graph(zoo.get(model))
    cost = LBDFCost(fg, 128 * 1024)
    splitters = [GreedySplitter(AllEdges()), GreedySplitter(GNNExplainerX(trained[0], epochs=10))]
    rng = random.Random(3)
    for _ in range(3):
        plan = random_plan(fg, rng, 0.95, cost.unfusable)
        bad = [g for g in plan.groups if len(g) > 1 and not cost.valid(g)]
        for sp in splitters:
            new_groups = [g for g in plan.groups if g not in bad]
            for g in bad:
                pieces = sp.split(cost, g)
                if pieces is None:  # explanation gave no usable cut: the repair falls back
                    pieces = RandomRepair().split_group(cost, g, rng)
                else:
                    assert all(cost.valid(p) for p in pieces)
                assert sorted(v for p in pieces for v in p) == list(g)
                new_groups += pieces
            fixed = FusionPlan(new_groups)
            assert check_plan(fg, fixed, cost.unfusable) == []
            assert cost.evaluate(fixed).valid


def test_explainer_repair_with_packaged_weights() -> None:
    cost = LBDFCost(fusion_graph(zoo.get("resnet18")), 128 * 1024)
    rep = ExplainerRepair("pg")
    plan = random_plan(cost.fg, random.Random(0), 0.9, cost.unfusable)
    fixed = rep(cost, plan, random.Random(0))
    assert cost.evaluate(fixed).valid and check_plan(cost.fg, fixed, cost.unfusable) == []
    assert rep.groups_repaired > 0


class OnlyEdge:
    """An "explainer" that always names one fixed edge."""

    def __init__(self, edge: tuple[int, int]):
        self.edge = edge

    def explain(self, cost: LBDFCost, group: tuple[int, ...]) -> list[tuple[int, int]]:
        return [self.edge] if self.edge[0] in group and self.edge[1] in group else []


def test_split_records_the_category_of_the_first_cut() -> None:
    fg = _chain([32, 32, 2, 32, 32, 32])
    cost = LBDFCost(fg, 40 * 1024)
    group = tuple(range(6))
    good = GreedySplitter(OnlyEdge((2, 3)))  # the edge over the 2-channel tensor: one cut suffices
    assert good.split(cost, group) == [(0, 1, 2), (3, 4, 5)]
    assert good.category[cost][group] == 1
    poor = GreedySplitter(OnlyEdge((0, 1)))  # a cut at the start leaves an invalid tail: recursion
    pieces = poor.split(cost, group)
    assert poor.category[cost][group] != 1
    if pieces is not None:
        assert all(cost.valid(g) for g in pieces) and sorted(v for g in pieces for v in g) == list(group)


def test_repair_stats_count_one_cut_rectifications() -> None:
    cost = LBDFCost(_chain([32, 32, 2, 32, 32, 32]), 40 * 1024)
    rep = ExplainerRepair("gnne")
    rep._splitter = GreedySplitter(OnlyEdge((2, 3)))
    fixed = rep(cost, FusionPlan([tuple(range(6))]), random.Random(0))
    assert cost.evaluate(fixed).valid
    st = rep.stats()
    assert (st["groups_repaired"], st["rectified"], st["one_cut"], st["one_cut_rate"]) == (1, 1, 1, 1.0)
