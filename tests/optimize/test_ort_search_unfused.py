"""``ort_search.unfused``: after the search priced by onnxruntime's kernels, the residual LayerNorms are written so
that onnxruntime keeps Add and LayerNormalization apart -- one move, kept only where the whole graph's price says it
pays (a region's price favours the SkipLayerNormalization fusion that BERT runs slower whole)."""

from __future__ import annotations

from typing import Any

from graphsub.data import materialize
from graphsub.ir.graph import Graph
from graphsub.optimize.sources.ort_search import UNFUSED_SKIP, unfused
from graphsub.rules.library import find_rule
from graphsub.rules.soundness.numeric import instantiate


class _Price:
    """A whole-graph price that counts ``sum`` nodes: -1 each when ``unfused_pays``, +1 each otherwise."""

    resolution = 0.0

    def __init__(self, unfused_pays: bool, fails: bool = False) -> None:
        self.sign = -1.0 if unfused_pays else 1.0
        self.fails = fails
        self.priced = 0

    def graph_cost(self, graph: Graph) -> float:
        self.priced += 1
        if self.fails:
            raise RuntimeError("onnxruntime refused the whole graph")
        return self.sign * sum(1 for _ in graph.ops_of("sum"))

    def scalar(self, cost: Any) -> float:
        return float(cost)


def _example(name: str) -> Graph:
    rule = find_rule(name)
    return materialize(instantiate(rule.source, rule.examples[0], rule.name))


def _residual_layernorm() -> Graph:
    """``layernorm(u + v)``: the example graph of ``ortsp_ln_sum``."""
    return _example("ortsp_ln_sum")


def test_the_residual_layernorm_is_unfused_where_the_whole_graph_price_prefers_it() -> None:
    g = _residual_layernorm()
    prior = (object(),)
    out, steps = unfused(g, prior, _Price(unfused_pays=True))
    assert out.op_histogram().get("sum") == 1 and "add" not in out.op_histogram()
    assert steps[0] is prior[0] and [s.rule for s in steps[1:]] == ["ortsp_ln_sum"]
    assert all(s.rule in UNFUSED_SKIP for s in steps[1:])


def test_it_is_left_fused_where_the_price_does_not_prefer_it_or_cannot_price_it() -> None:
    g = _residual_layernorm()
    assert unfused(g, (), _Price(unfused_pays=False)) == (g, ())
    assert unfused(g, (), _Price(unfused_pays=True, fails=True)) == (g, ())


def test_the_pre_ln_fusion_that_keeps_the_sum_is_not_undone() -> None:
    """GPT-2's residual LayerNorms keep their sum as an output (ms_skip_layernorm_sum): onnxruntime does not make
    that fusion itself, and the decode steps gain by it, so the move leaves it alone (and prices nothing)."""
    g = _example("ortsp_unfuse_skip_layernorm_sum")
    assert "ms_skip_layernorm_sum" in g.op_histogram()
    price = _Price(unfused_pays=True)
    assert unfused(g, (), price) == (g, ()) and price.priced == 0


def test_a_graph_without_a_residual_layernorm_is_not_priced() -> None:
    from graphsub.ir.builder import Builder

    b = Builder()
    g = b.build(b.relu(b.input("x", (2, 4))))
    price = _Price(unfused_pays=True)
    assert unfused(g, (), price) == (g, ()) and price.priced == 0
