"""Fusion-aware measured model (ORT_ENABLE_ALL): groups, one charge per group, deltas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from graphsub import zoo
from graphsub.cost.base import ZERO
from graphsub.cost.ort_fusion import FusedMeasuredCostModel, fusion_group, group_anchor, group_graph
from graphsub.cost.variants import merge_siblings
from graphsub.ir import Builder, Graph
from graphsub.ir.analysis import weight_only_map
from graphsub.ir.node import Ref

FAST: dict[str, Any] = {"budget_ms": 2.0, "warmup": 1, "min_repeats": 3, "progress": False, "threads": 1}


def block(bn: bool = True, residual: bool = True, channels: int = 8, size: int = 6) -> Graph:
    b = Builder("block")
    x = b.input("x", (1, channels, size, size))
    y = b.conv2d(x, b.weight("w", (channels, channels, 3, 3)), pads=(1, 1, 1, 1))
    if bn:
        y = b.batchnorm(y, *(b.weight(n, (channels,)) for n in ("s", "o", "m", "v")))
    if residual:
        y = b.add(y, x)
    return b.build(b.relu(y))


def ops(g: Graph, ids: tuple[int, ...]) -> list[str]:
    return [g.nodes[n].op for n in ids]


def test_chain_conv_bn_add_relu() -> None:
    g = block()
    conv = next(iter(g.ops_of("conv2d")))
    grp = fusion_group(g, conv)
    assert ops(g, grp) == ["conv2d", "batchnorm", "add", "relu"]
    wo = weight_only_map(g)
    assert all(group_anchor(g, n, wo) == conv for n in grp)
    sub = group_graph(g, grp, wo)
    assert sub.op_histogram() == {"add": 1, "batchnorm": 1, "conv2d": 1, "relu": 1}
    assert len(sub.inputs) == 2  # the conv input and the residual input


def test_no_fusion_through_shared_or_output_values() -> None:
    b = Builder()
    x = b.input("x", (1, 4, 5, 5))
    y = b.conv2d(x, b.weight("w", (4, 4, 1, 1)))
    g = b.build([b.relu(y), b.sigmoid(y)])  # y has two consumers: nothing fuses
    conv = next(iter(g.ops_of("conv2d")))
    assert fusion_group(g, conv) == (conv,)
    b2 = Builder()
    x2 = b2.input("x", (1, 4, 5, 5))
    y2 = b2.conv2d(x2, b2.weight("w", (4, 4, 1, 1)), act="relu")  # already fused: no chain
    g2 = b2.build(b2.relu(y2))
    assert fusion_group(g2, next(iter(g2.ops_of("conv2d")))) == (next(iter(g2.ops_of("conv2d"))),)


def test_residual_add_joins_one_chain_only() -> None:
    b = Builder()
    x = b.input("x", (1, 4, 5, 5))
    p = b.conv2d(x, b.weight("w1", (4, 4, 1, 1)))
    q = b.conv2d(x, b.weight("w2", (4, 4, 1, 1)))
    g = b.build(b.relu(b.add(p, q)))
    groups = [fusion_group(g, c) for c in sorted(g.ops_of("conv2d"))]
    members = [n for grp in groups for n in grp]
    assert len(members) == len(set(members)) == 4


def test_group_is_charged_once(tmp_path: Path) -> None:
    m = FusedMeasuredCostModel(cache=tmp_path / "c.sqlite", **FAST)
    g = block(channels=32, size=32)  # ~9 MFLOP: its time stands clear of the session-call overhead subtracted from it
    costs = m.node_costs(g)
    conv = next(iter(g.ops_of("conv2d")))
    assert costs[conv].time_ms > 0 and costs[conv].launches == 1
    assert all(c == ZERO for n, c in costs.items() if n != conv)
    s = m.profile(g)
    assert s.signatures == 1 and s.hits == 1


@pytest.mark.parametrize("name", ["resnet18", "squeezenet"])
def test_fused_delta_equals_difference(tmp_path: Path, name: str) -> None:
    m = FusedMeasuredCostModel(cache=tmp_path / "c.sqlite", **FAST)
    g = zoo.get(name, batchnorm=True) if name == "resnet18" else zoo.get(name)
    children = []
    merged = merge_siblings(g, enlarge=True)
    if merged is not None:
        children.append(merged)
    e = g.edit()  # insert an identity after the first relu: breaks a conv->relu chain
    relu = sorted(g.ops_of("relu"))[0]
    e.replace(Ref(relu, 0), e.op("sigmoid", *g.nodes[relu].inputs))
    children.append(e.commit())
    for child in children:
        d = m.delta(g, child)
        want = m.graph_cost(child) - m.graph_cost(g)
        assert d.time_ms == pytest.approx(want.time_ms, abs=1e-9)
        assert d.flops == pytest.approx(want.flops)


def test_fused_delta_over_many_local_edits(tmp_path: Path) -> None:
    """Insert an identity after, drop, or replace every relu/add/conv: groups break and re-form."""
    m = FusedMeasuredCostModel(cache=tmp_path / "c.sqlite", **FAST)
    g = zoo.get("resnet", blocks=2)
    base = m.graph_cost(g)
    checked = 0
    for nid in sorted(g.nodes):
        node = g.nodes[nid]
        if node.op not in ("relu", "add", "conv2d"):
            continue
        for kind in ("identity", "drop", "sigmoid"):
            e = g.edit()
            if kind == "identity":
                e.replace(Ref(nid, 0), e.op("identity", Ref(nid, 0)))
            elif kind == "drop" and node.op == "relu" and not g.is_output(nid):
                e.replace(Ref(nid, 0), node.inputs[0])
            elif kind == "sigmoid" and node.op == "relu":
                e.replace(Ref(nid, 0), e.op("sigmoid", *node.inputs))
            else:
                continue
            child = e.commit()
            d = m.delta(g, child)
            assert d.time_ms == pytest.approx((m.graph_cost(child) - base).time_ms, abs=1e-9), (node.op, kind)
            checked += 1
    assert checked >= 12


def _sum_then_scale(swap: bool, bias_first: bool) -> Graph:
    """``(x @ W) + b`` (or ``b + x @ W``), then ``* y`` (or ``y * ...``): the same arithmetic in two spellings."""
    b = Builder("commuted")
    x, y = b.input("x", (8, 16)), b.input("y", (8, 16))
    m = b.matmul(x, b.weight("w", (16, 16)))
    bias = b.weight("b", (16,))
    s = b.add(bias, m) if bias_first else b.add(m, bias)
    return b.build(b.mul(y, s) if swap else b.mul(s, y))


@pytest.mark.parametrize("model", ["fused", "measured", "roofline"])
def test_commuting_an_operation_is_cost_neutral(tmp_path: Path, model: str) -> None:
    """Every order of the operands of add/mul has one price (canonical operand order in every cost key), so no
    search step is spent on a commutation."""
    from graphsub.cost import get_model
    from graphsub.cost.measured import MeasuredCostModel

    if model == "fused":
        cm: Any = FusedMeasuredCostModel(cache=tmp_path / "c.sqlite", **FAST)
    elif model == "measured":
        cm = MeasuredCostModel(cache=tmp_path / "c.sqlite", **FAST)
    else:
        cm = get_model("roofline:cpu")
    costs = {cm.graph_cost(_sum_then_scale(swap, first)).time_ms for swap in (False, True) for first in (False, True)}
    assert len(costs) == 1
