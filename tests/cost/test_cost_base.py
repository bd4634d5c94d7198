"""Cost arithmetic, limits, weight-only nodes, graph cost = sum, and O(change) deltas."""

from __future__ import annotations

import math
from typing import Any

import pytest

from graphsub import zoo
from graphsub.cost import AnalyticCostModel, Cost, Limits, get_model
from graphsub.cost.base import ZERO, CostModel, CostModelError, SumCostModel
from graphsub.cost.variants import merge_siblings
from graphsub.ir import Builder, Graph
from graphsub.ir.analysis import weight_only_map
from graphsub.ir.node import Ref


def test_cost_arithmetic_is_fieldwise() -> None:
    a = Cost(time_ms=1.5, flops=10, bytes=4, launches=1)
    b = Cost(time_ms=0.5, flops=2, bytes=1, launches=2)
    assert a + b == Cost(2.0, 12.0, 5.0, 3.0)
    assert a - b == Cost(1.0, 8.0, 3.0, -1.0)
    assert 2 * a == a * 2 == a + a
    assert -a == ZERO - a
    assert sum([a, b]) == a + b
    assert isinstance(Cost(launches=1).launches, float)


def test_scalarization_by_name_and_weights() -> None:
    c = Cost(time_ms=2.0, flops=1e9, bytes=3e6, launches=10)
    assert c.scalar() == 2.0
    assert c.scalar("flops") == 1e9
    assert c.scalar({"time_ms": 1.0, "launches": 0.1}) == pytest.approx(3.0)
    with pytest.raises(CostModelError, match="unknown cost dimension"):
        c.scalar("watts")


def test_infinite_cost_absorbs_and_cancels() -> None:
    inf = Cost.inf("peak memory 10 B > limit 5 B")
    c = Cost(time_ms=1.0)
    assert inf.is_inf and not c.is_inf
    assert (c + inf).is_inf and (c + inf).violation.startswith("peak memory")
    assert (c + inf).scalar() == math.inf
    assert (c - inf).scalar() == -math.inf
    assert (inf - inf) == Cost(violation=inf.violation)  # infeasible stays infeasible: no change
    assert (inf - c).scalar() == math.inf


def _chain(n: int = 3, size: int = 256) -> Graph:
    b = Builder("chain")
    x = b.input("x", (size,))
    for _ in range(n):
        x = b.relu(x)
    return b.build(x)


def test_limits_make_graph_infinite() -> None:
    g = _chain()
    ok = AnalyticCostModel("v100", limits=Limits(peak_memory_bytes=4096))
    tight = AnalyticCostModel("v100", limits=Limits(peak_memory_bytes=1024))
    assert not ok.graph_cost(g).is_inf
    c = tight.graph_cost(g)
    assert c.is_inf and "peak memory 2048 B > limit 1024 B" in c.violation
    capped = AnalyticCostModel(None, limits=Limits(max_cost={"flops": 100}))
    assert capped.graph_cost(g).is_inf  # 3 relus x 256 = 768 FLOPs


def test_delta_with_limits_is_inf_when_child_violates() -> None:
    b = Builder()
    x = b.input("x", (256,))
    g = b.build(b.relu(x))
    e = g.edit()
    r = Ref(next(iter(g.ops_of("relu"))), 0)
    big = e.op("concat", r, r, axis=0)  # a bigger intermediate ...
    e.replace(r, e.op("slice", big, starts=(0,), ends=(256,), axes=(0,)))
    child = e.commit()
    m = AnalyticCostModel("v100", limits=Limits(peak_memory_bytes=3000))
    assert not m.graph_cost(g).is_inf and m.graph_cost(child).is_inf
    d = m.delta(g, child)
    assert d.is_inf and d.scalar() == math.inf


def test_weight_only_nodes_and_leaves_are_free() -> None:
    b = Builder()
    x = b.input("x", (1, 8, 6, 6))
    w = b.concat(b.weight("w1", (4, 8, 3, 3)), b.enlarge(b.weight("w2", (4, 8, 1, 1)), kernel=(3, 3)), axis=0)
    g = b.build(b.conv2d(x, w, pads=(1, 1, 1, 1)))
    m = AnalyticCostModel(None)
    rows = m.breakdown(g)
    assert [r.sig.op for r in rows] == ["conv2d"]  # concat/enlarge of weights and the leaves cost nothing
    assert m.graph_cost(g).flops == 2 * 8 * 6 * 6 * 8 * 9


@pytest.mark.parametrize("spec", ["flops", "bytes", "launches", "roofline:v100", "roofline:p100"])
def test_graph_cost_is_sum_of_node_costs(spec: str) -> None:
    m = get_model(spec)
    assert isinstance(m, CostModel)
    g = zoo.get("inception_e", blocks=1)
    total = m.graph_cost(g)
    assert total.as_dict() == pytest.approx(sum(m.node_costs(g).values(), ZERO).as_dict())
    assert total.as_dict() == pytest.approx(sum((r.cost for r in m.breakdown(g)), ZERO).as_dict())
    assert sum(r.count for r in m.breakdown(g)) == len(m.node_costs(g))


def _relu_to_sigmoid(g: Graph) -> Graph:
    e = g.edit()
    nid = sorted(g.ops_of("relu"))[0]
    e.replace(Ref(nid, 0), e.op("sigmoid", *g.nodes[nid].inputs))
    return e.commit()


def _fold_input_to_weight(g: Graph) -> Graph:
    """Rewire a computed value to a weight of the same type: consumers become weight-only."""
    e = g.edit()
    nid = sorted(g.ops_of("relu"))[0]
    t = g.nodes[nid].sig.out_types[0]
    e.replace(Ref(nid, 0), e.weight("folded", shape=t.shape, dtype=t.dtype))
    return e.commit()


def _check_delta(m: SumCostModel, parent: Graph, child: Graph) -> None:
    assert child.edit_info() is not None
    d = m.delta(parent, child)
    want = m.graph_cost(child) - m.graph_cost(parent)
    assert d.as_dict() == pytest.approx(want.as_dict(), rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("spec", ["flops", "roofline:v100", "launches"])
def test_delta_equals_difference_of_graph_costs(spec: str) -> None:
    m = get_model(spec)
    g = zoo.get("squeezenet")
    for child in (_relu_to_sigmoid(g), merge_siblings(g, enlarge=True), _fold_input_to_weight(g)):
        assert child is not None
        _check_delta(m, g, child)
    # a chain of edits: every step is O(change) from its parent
    g1 = merge_siblings(zoo.get("resnet", blocks=3), enlarge=True)
    assert g1 is not None
    g2 = _relu_to_sigmoid(g1)
    _check_delta(m, g1, g2)


def test_delta_touches_only_the_change() -> None:
    class Counting(AnalyticCostModel):
        calls = 0

        def cost_in(self, graph: Graph, nid: int, wo: Any) -> Cost:
            Counting.calls += 1
            return super().cost_in(graph, nid, wo)

    m = Counting(None)
    g = zoo.get("resnet", blocks=8)
    weight_only_map(g)
    child = _relu_to_sigmoid(g)
    m.delta(g, child)
    # relu out, sigmoid in, rewired consumers and the producer, each in both graphs; the graph has 40 ops
    assert Counting.calls <= 10
