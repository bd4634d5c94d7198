"""Rules core: pattern language, Definition-2 matching, application, incremental matching."""

from __future__ import annotations

import random

import numpy as np
import pytest

from graphsub import zoo
from graphsub.equivalence import equivalent
from graphsub.errors import RuleError
from graphsub.ir import Builder, Graph
from graphsub.ir.analysis import is_weight_only
from graphsub.ir.validate import validate
from graphsub.rules import (
    Example,
    apply,
    explain,
    find_matches,
    fold_weights,
    make_rule,
    matches_near,
    rematch,
)
from graphsub.rules.apply import weight_only_nodes
from graphsub.rules.match import max_radius
from graphsub.rules.soundness.numeric import verify_rule


def relu_fuse():  # type: ignore[no-untyped-def]
    def src(p):  # type: ignore[no-untyped-def]
        c = p.conv2d(p.var("x"), p.weight("w"), act="none", name="conv")
        return {"y": p.relu(c, name="relu")}

    return make_rule("t_conv_relu", src, lambda t, m: {"y": t.conv2d(m.x, m.w, **{**m.attrs("conv"), "act": "relu"})},
                     examples=[Example({"x": (1, 2, 5, 5), "w": (3, 2, 3, 3)}, {"conv": {"pads": "SAME"}}),
                               Example({"x": (2, 3, 6, 6), "w": (2, 3, 1, 1)}),
                               Example({"x": (1, 4, 7, 7), "w": (4, 2, 3, 3)}, {"conv": {"strides": (2, 2)}})])


def merge_convs():  # type: ignore[no-untyped-def]
    def src(p):  # type: ignore[no-untyped-def]
        x = p.var("x")
        return {"a": p.conv2d(x, p.weight("w1"), name="c1"), "b": p.conv2d(x, p.weight("w2"), name="c2")}

    def tgt(t, m):  # type: ignore[no-untyped-def]
        c = t.conv2d(m.x, t.concat(m.w1, m.w2, axis=0), **m.attrs("c1"))
        a, b = t.split(c, axis=1, sizes=(m.shape("w1")[0], m.shape("w2")[0]))
        return {"a": a, "b": b}

    def same(m):  # type: ignore[no-untyped-def]
        keys = ("strides", "pads", "dilations", "act")
        return m.attrs("c1", *keys) == m.attrs("c2", *keys) and m.shape("w1")[1:] == m.shape("w2")[1:]

    return make_rule("t_merge_convs", src, tgt, where=[(same, "same conv parameters and kernel shape")])


def conv_relu_graph() -> tuple[Graph, dict[str, int]]:
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 8))
    c = b.conv2d(x, b.weight("w", (4, 4, 3, 3)), pads="SAME")
    r = b.relu(c)
    g = b.build({"y": r})
    return g, {"conv": c.ref.node, "relu": r.ref.node}


def test_pattern_errors() -> None:
    with pytest.raises(RuleError, match="unknown attribute"):
        make_rule("bad", lambda p: {"y": p.relu(p.var("x"), axis=1)}, lambda t, m: {})
    def unused_var(p):  # type: ignore[no-untyped-def]
        p.var("unused")
        return {"y": p.relu(p.var("x"))}

    with pytest.raises(RuleError, match="not used"):
        make_rule("bad", unused_var, lambda t, m: {})
    with pytest.raises(RuleError, match="origin"):
        make_rule("bad", lambda p: {"y": p.relu(p.var("x"))}, lambda t, m: {}, origin="magic")
    with pytest.raises(RuleError, match="must say why"):
        make_rule("bad", lambda p: {"y": p.relu(p.var("x"))}, lambda t, m: {}, exact=False)


def test_match_apply_and_trace() -> None:
    g, ids = conv_relu_graph()
    rule = relu_fuse()
    (m,) = find_matches(g, rule)
    assert dict(m.nodes) == ids and m.rule is rule
    sub = apply(g, m)
    validate(sub.graph)
    assert sub.graph.op_histogram() == {"conv2d": 1}
    assert set(sub.removed) == set(ids.values()) and len(sub.added) == 1
    assert equivalent(g, sub.graph).equivalent
    assert sub.cost_delta(lambda n: 1.0) == -1.0
    why = explain(sub.graph, rule, sub.added[0])
    assert not why.matched and "act" in why.reason
    assert explain(g, rule, ids["relu"]).matched


def test_external_consumer_of_inner_value_blocks_the_match() -> None:
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 8))
    c = b.conv2d(x, b.weight("w", (4, 4, 3, 3)), pads="SAME")
    g = b.build({"y": b.relu(c), "z": b.sigmoid(c)})  # conv output also read by sigmoid
    assert find_matches(g, relu_fuse()) == []
    why = explain(g, relu_fuse(), c.ref.node)
    assert "outside the match" in why.reason
    g2 = b.build({"y": b.relu(c), "c": c})  # ... or is a graph output
    assert find_matches(g2, relu_fuse()) == []


def test_weight_variable_needs_weight_only_value() -> None:
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 8))
    k = b.input("k", (4, 4, 3, 3))  # a runtime kernel: not a weight
    g = b.build(b.relu(b.conv2d(x, k, pads="SAME")))
    assert find_matches(g, relu_fuse()) == []
    b2 = Builder("g2")
    x = b2.input("x", (1, 4, 8, 8))
    w = b2.enlarge(b2.weight("w", (4, 4, 1, 1)), kernel=(3, 3))  # weight-only computation
    g2 = b2.build(b2.relu(b2.conv2d(x, w, pads="SAME")))
    assert is_weight_only(g2, w.ref) and len(find_matches(g2, relu_fuse())) == 1
    assert weight_only_nodes(g2) == [w.ref.node]


def test_no_match_that_would_create_a_cycle() -> None:
    """conv2 reads (through relu) conv1's output: merging them would feed a node its own output."""
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 8))
    c1 = b.conv2d(x, b.weight("w1", (4, 4, 3, 3)), pads="SAME")
    y = b.relu(c1)
    c2 = b.conv2d(y, b.weight("w2", (4, 4, 3, 3)), pads="SAME")
    # a rule merging two convs that read *different* variables
    def src(p):  # type: ignore[no-untyped-def]
        return {"a": p.conv2d(p.var("x1"), p.weight("w1"), name="c1"),
                "b": p.conv2d(p.var("x2"), p.weight("w2"), name="c2")}

    def tgt(t, m):  # type: ignore[no-untyped-def]
        xs = t.concat(m.x1, m.x2, axis=0)
        c = t.conv2d(xs, m.w1, **m.attrs("c1"))
        a, bb = t.split(c, axis=0, sizes=(1, 1))
        return {"a": a, "b": bb}

    rule = make_rule("t_batch_two", src, tgt, where=[(lambda m: m.w1 == m.w2, "same kernel")])
    g = b.build({"y": b.add(c2, c2)})
    assert find_matches(g, rule) == []  # w1 != w2 anyway; now force the same weight
    b3 = Builder("g3")
    x = b3.input("x", (1, 4, 8, 8))
    w = b3.weight("w", (4, 4, 3, 3))
    c1 = b3.conv2d(x, w, pads="SAME")
    c2 = b3.conv2d(b3.relu(c1), w, pads="SAME")
    g3 = b3.build({"y": b3.add(c2, b3.sigmoid(c1))})
    assert find_matches(g3, rule) == []
    why = explain(g3, rule, c1.ref.node)
    assert "cycle" in why.reason or "already" in why.reason


def test_verify_rule_catches_a_wrong_rule() -> None:
    good = relu_fuse()
    assert verify_rule(good).passed
    def src(p):  # type: ignore[no-untyped-def]
        return {"y": p.relu(p.conv2d(p.var("x"), p.weight("w"), act="none", name="conv"))}

    wrong = make_rule("t_wrong", src,
                      lambda t, m: {"y": t.conv2d(m.x, m.w, **{**m.attrs("conv"), "act": "sigmoid"})},
                      examples=good.examples)
    report = verify_rule(wrong)
    assert not report.passed and "differs" in report.reason
    few = make_rule("t_few", lambda p: {"y": p.relu(p.var("x"))}, lambda t, m: {"y": m.x})
    assert "at least 3 examples" in verify_rule(few).reason


def test_fold_weights_computes_constants() -> None:
    b = Builder("g")
    x = b.input("x", (2, 3))
    w1 = b.weight("w1", data=np.ones((3, 4), np.float32))
    w2 = b.weight("w2", data=np.full((3, 4), 2.0, np.float32))
    g = b.build(b.matmul(x, b.add(w1, w2)))
    f = fold_weights(g)
    assert f.op_histogram() == {"matmul": 1}
    assert equivalent(g, f).equivalent
    (folded,) = [n for n in f.params if n.startswith("folded_")]
    np.testing.assert_array_equal(f.params[folded], np.full((3, 4), 3.0, np.float32))
    nodata = Builder("h")
    y = nodata.input("x", (2, 3))
    h = nodata.build(nodata.matmul(y, nodata.add(nodata.weight("a", (3, 4)), nodata.weight("b", (3, 4)))))
    assert fold_weights(h) is h  # no data: nothing to fold
    again = fold_weights(b.build(b.relu(b.matmul(x, b.add(w1, w2)))))  # another candidate folding the same value
    (same,) = [n for n in again.params if n.startswith("folded_")]
    assert again.params[same] is f.params[folded]  # one array, shared (a 1 B decoder's merged projections)


@pytest.mark.parametrize("model", ["inception_v3", "nasnet_a", "resnext50"])
def test_incremental_rematch_equals_full_rematch(model: str) -> None:
    rules = [merge_convs(), relu_fuse()]
    g = zoo.get(model)
    matches = [m for r in rules for m in find_matches(g, r)]
    rng = random.Random(0)
    for _ in range(4):
        if not matches:
            break
        m = rng.choice(matches)
        g = apply(g, m).graph
        inc = rematch(g, rules, matches)
        full = [m2 for r in rules for m2 in find_matches(g, r)]
        assert sorted(x.key for x in inc) == sorted(x.key for x in full)
        matches = inc


def test_matches_near_is_a_subset_touching_the_region() -> None:
    g = zoo.get("inception_v3")
    rule = merge_convs()
    full = find_matches(g, rule)
    some = full[0].node_ids
    near = matches_near(g, [rule], some, radius=0)
    assert {m.key for m in near} <= {m.key for m in full}
    assert all(m.node_ids & some for m in near) and full[0].key in {m.key for m in near}
    assert max_radius([rule]) == rule.source.diameter() + 1
