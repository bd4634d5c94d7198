"""``search-ort+unfused``: the search priced by onnxruntime's kernels offers a second candidate, its result with the
residual LayerNorms written so that onnxruntime keeps Add and LayerNormalization apart -- the one move a region's
kernel price cannot judge, left to the side-by-side timing of the whole model (where the spelling source runs,
``search-ort+spelling`` has that move and no second candidate is made)."""

from __future__ import annotations

import math

from graphsub.data import materialize
from graphsub.ir.builder import Builder
from graphsub.ir.graph import Graph
from graphsub.optimize.candidates import ORIGINAL, Candidate, export_bytes
from graphsub.optimize.sources import Context, Sources
from graphsub.optimize.sources.ort_search import NAME, UNFUSED_NAME, UNFUSED_SKIP, make, unfused
from graphsub.rules import get_set
from graphsub.rules.library import find_rule
from graphsub.rules.soundness.numeric import instantiate
from graphsub.search.base import Step


def _example(name: str) -> Graph:
    rule = find_rule(name)
    return materialize(instantiate(rule.source, rule.examples[0], rule.name))


def _searched(graph: Graph) -> Candidate:
    """``graph`` as if the search had made it in one step."""
    return Candidate(NAME, export_bytes(graph), graph, ORIGINAL, (Step("cse", (), 0.0),))


def test_the_residual_layernorm_is_unfused_in_a_second_candidate_built_on_the_search() -> None:
    g = _example("ortsp_ln_sum")  # layernorm(u + v)
    cand = unfused(_searched(g))
    assert cand is not None and cand.name == UNFUSED_NAME and cand.base == NAME
    assert cand.graph is not None and cand.graph.op_histogram().get("sum") == 1
    assert "add" not in cand.graph.op_histogram()
    assert [s.rule for s in cand.steps] == ["cse", "ortsp_ln_sum"]
    assert all(s.rule in UNFUSED_SKIP for s in cand.steps[1:]) and math.isnan(cand.steps[1].cost)
    assert "add" in g.op_histogram()  # the search's own graph is left as it was


def test_the_skip_layernorm_a_region_price_took_is_undone() -> None:
    g = _example("ortsp_unfuse_skip_layernorm_bias")
    assert "ms_skip_layernorm" in g.op_histogram()
    cand = unfused(_searched(g))
    assert cand is not None and cand.graph is not None and "ms_skip_layernorm" not in cand.graph.op_histogram()
    assert cand.steps[-1].rule == "ortsp_unfuse_skip_layernorm_bias"


def test_nothing_is_made_where_no_residual_layernorm_or_only_the_pre_ln_fusion_is() -> None:
    b = Builder()
    assert unfused(_searched(materialize(b.build(b.relu(b.input("x", (2, 4))))))) is None
    # GPT-2's residual LayerNorms keep their sum as an output (ms_skip_layernorm_sum): onnxruntime does not make that
    # fusion itself and the decode steps gain by it, so the move leaves it alone
    pre_ln = _example("ortsp_unfuse_skip_layernorm_sum")
    assert "ms_skip_layernorm_sum" in pre_ln.op_histogram()
    assert unfused(_searched(pre_ln)) is None


def _made(spelling: bool) -> list[str]:
    g = _example("ortsp_ln_sum")

    def search(graph: Graph, seconds: float, algo: str) -> tuple[Graph, tuple[Step, ...]]:
        return graph, (Step("cse", (), 0.0),)

    rules = tuple(get_set("ort-spelling")) if spelling else ()
    ctx = Context(Sources(ort_search_fn=search, ort_search_s=5.0, spelling=rules), g)
    make(ctx, 5.0)
    return [c.name for c in ctx.portfolio.candidates]


def test_the_source_adds_it_only_where_the_spelling_source_does_not_make_the_move() -> None:
    assert _made(spelling=False) == [NAME, UNFUSED_NAME]
    assert _made(spelling=True) == [NAME]
