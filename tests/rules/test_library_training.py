"""The ``training`` rules (backward-op spellings): they match the gradient kernels of real training graphs, rewrite
every one they should, and keep the loss and every gradient."""

from __future__ import annotations

import pytest

from graphsub import zoo
from graphsub.data import materialize
from graphsub.ir.builder import Builder
from graphsub.optimize.verification import check_seeds, finalize
from graphsub.rules.apply import apply
from graphsub.rules.library import get_set
from graphsub.rules.match import explain, find_matches
from graphsub.training import training_graph

RULES = {r.name: r for r in get_set("training")}


def _rewrite_all(g, rule):  # type: ignore[no-untyped-def]
    """Apply ``rule`` until it no longer matches; returns the graph and the number of rewrites."""
    n = 0
    while (ms := find_matches(g, rule)) and n < 200:
        g, n = apply(g, ms[0]).graph, n + 1
    return g, n


def test_in_default() -> None:
    names = {r.name for r in get_set("default")}
    assert set(RULES) <= names


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rewrites_a_resnet_training_graph_and_keeps_every_gradient(rule: str) -> None:
    fwd = materialize(zoo.get("resnet", blocks=1), 0)
    g = training_graph(fwd, loss="mse")
    op = "conv2d_grad_w" if rule == "trn_grad_w_gemm" else "conv2d_grad_x"
    before = g.op_histogram().get(op, 0)
    out, n = _rewrite_all(g, RULES[rule])
    assert n > 0 and out.op_histogram().get(op, 0) == before - n
    if rule == "trn_grad_w_gemm":  # every weight gradient of the (ungrouped) resnet becomes a GEMM
        assert out.op_histogram().get(op, 0) == 0 and out.op_histogram()["gemm"] >= n
    ref = materialize(g, 0)
    ok, diff, worst, _ = check_seeds(ref, finalize(ref, out, 0), (0, 1), rtol=1e-4, atol=1e-5)
    assert ok, (worst, diff)


def test_refusals_name_their_reason() -> None:
    b = Builder("m")
    x = b.input("x", (2, 4, 8, 8))
    y = b.conv2d(x, b.weight("w0", shape=(4, 4, 1, 1)))  # the input has no gradient: start with one more conv
    y = b.conv2d(y, b.weight("w1", shape=(4, 4, 3, 3)), strides=(2, 2), pads=(1, 1, 1, 1))
    y = b.conv2d(y, b.weight("w2", shape=(4, 2, 3, 3)), pads=(1, 1, 1, 1))  # two groups
    g = training_graph(materialize(b.build(y), 0), loss="mse")
    reasons = {g.node(nid).attr["strides"]: str(explain(g, RULES["trn_grad_x_conv"], nid))
               for nid in g.ops_of("conv2d_grad_x")}
    assert "strided" in reasons[(2, 2)] and "grouped" in reasons[(1, 1)]
    (grouped_w,) = [nid for nid in g.ops_of("conv2d_grad_w") if g.node(nid).attr["w_shape"][1] == 2]
    assert "grouped" in str(explain(g, RULES["trn_grad_w_gemm"], grouped_w))
