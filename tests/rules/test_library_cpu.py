"""The cpu rule set: matmul algebra, Q/K/V merge, gemm, layout and elementwise clean-ups."""

from __future__ import annotations

import numpy as np

from graphsub import zoo
from graphsub.equivalence import equivalent
from graphsub.ir import Builder, Graph
from graphsub.rules import apply, explain, find_matches, get_set
from graphsub.rules.library import cpu, metaflow
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.numeric import MIN_EXAMPLES


def by_name(name: str) -> Rule:
    return next(r for r in cpu.rules() if r.name == name)


def rewrite(g: Graph, name: str) -> Graph:
    (m,) = find_matches(g, by_name(name))
    g2 = apply(g, m).graph
    assert equivalent(g, g2).equivalent, name
    return g2


def test_rules_metadata() -> None:
    """Beyond the numeric check of every rule in ``test_all_rules``: exact, documented, tagged, enough examples."""
    for rule in cpu.rules():
        assert rule.exact and rule.doc and rule.tags and len(rule.examples) >= MIN_EXAMPLES, rule.name


def test_names() -> None:
    rules = cpu.rules()
    names = [r.name for r in rules]
    assert len(names) == len(set(names)) and [r.name for r in get_set("cpu")] == names
    assert all(n.startswith("cpu_") for n in names if n != "mf_merge_matmuls")
    assert by_name("mf_merge_matmuls") is next(r for r in metaflow.rules() if r.name == "mf_merge_matmuls")


def test_qkv_merge_on_bert() -> None:
    layers = 2
    faithful = zoo.get("bert", layers=layers)
    # the peers' graph reads each layer input with 4 matmuls (q, k, v and the output projection)
    assert len(find_matches(faithful, by_name("cpu_merge_qkv"))) == 4 * layers
    g = zoo.get("bert_corrected", layers=1)
    (m,) = find_matches(g, by_name("cpu_merge_qkv"))
    g2 = apply(g, m).graph
    assert g2.op_histogram()["matmul"] == 4 and g2.op_histogram()["split"] == 1
    assert equivalent(g, g2).equivalent


def test_matmul_algebra_and_gemm() -> None:
    b = Builder("g")
    x = b.input("x", (4, 8))
    y = b.add(b.matmul(x, b.weight("w1", (8, 6))), b.matmul(x, b.weight("w2", (8, 6))))
    g = rewrite(b.build(y), "cpu_matmul_distribute")
    assert g.op_histogram() == {"matmul": 1, "add": 1}  # the add is weight-only now
    b = Builder("g")
    x, z = b.input("x", (4, 8)), b.input("z", (4, 8))
    w = b.weight("w", (8, 6))
    g = rewrite(b.build(b.add(b.matmul(x, w), b.matmul(z, w))), "cpu_matmul_factor_weight")
    assert g.op_histogram() == {"matmul": 1, "add": 1}
    b = Builder("g")
    out = b.add(b.weight("c", (6,)), b.matmul(b.input("a", (4, 8)), b.input("k", (8, 6))))
    g = b.build(out)
    assert find_matches(g, by_name("cpu_matmul_bias_gemm")) == []  # the bias is on the left
    assert rewrite(g, "cpu_matmul_bias_gemm_lhs").op_histogram() == {"gemm": 1}


def test_layout_cleanups() -> None:
    b = Builder("g")
    x = b.input("x", (2, 3, 4))
    t = b.transpose(b.transpose(x, perm=(1, 0, 2)), perm=(1, 0, 2))
    r = b.reshape(b.reshape(b.identity(t), shape=(6, 4)), shape=(4, 6))
    g = b.build(b.relu(b.relu(r)))
    for name in ("cpu_transpose_transpose_identity", "cpu_identity_remove", "cpu_reshape_reshape",
                 "cpu_relu_relu"):
        g = rewrite(g, name)
    assert g.op_histogram() == {"reshape": 1, "relu": 1}
    b = Builder("g")
    x = b.input("x", (2, 3, 4, 5))
    g = b.build(b.transpose(b.transpose(x, perm=(0, 2, 3, 1)), perm=(0, 2, 1, 3)))
    g = rewrite(g, "cpu_transpose_transpose")
    (node,) = (n for n in g.nodes.values() if n.sig.op == "transpose")
    assert node.sig.attr["perm"] == (0, 3, 2, 1)
    assert find_matches(g, by_name("cpu_transpose_transpose_identity")) == []


def test_neutral_constants_need_data() -> None:
    b = Builder("g")
    x = b.input("x", (2, 3))
    ones = b.weight("ones", (3,), data=np.ones(3, np.float32))
    zeros = b.weight("zeros", (1,), data=np.zeros(1, np.float32))
    g = b.build(b.sub(b.add(zeros, b.mul(ones, x)), zeros))
    for name in ("cpu_mul_ones_lhs", "cpu_add_zeros_lhs", "cpu_sub_zeros"):
        g = rewrite(g, name)
    assert g.num_ops == 0
    b = Builder("g")
    x = b.input("x", (2, 3))
    halves = b.mul(x, b.weight("h", (3,), data=np.full(3, 0.5, np.float32)))
    unknown = b.mul(x, b.weight("u", (3,)))
    big = b.mul(x, b.weight("o", (4, 2, 3), data=np.ones((4, 2, 3), np.float32)))
    g = b.build({"a": halves, "b": unknown, "c": big})
    reasons = [explain(g, by_name("cpu_mul_ones"), v.ref.node).reason for v in (halves, unknown, big)]
    assert "not all 1" in reasons[0] and "no data" in reasons[1] and "broadcasts" in reasons[2]


def test_conv_bias_folds() -> None:
    b = Builder("g")
    x = b.input("x", (1, 3, 9, 9))
    c = b.conv2d(x, b.weight("w", (4, 3, 3, 3)), b.weight("b", (4,)), strides=(2, 2), pads=(1, 1, 1, 1))
    y = b.add(b.mul(c, b.weight("s", (1, 4, 1, 1))), b.weight("t", (4, 1, 1)))
    g = rewrite(b.build(y), "cpu_fold_conv_bias_mul")
    g = rewrite(g, "cpu_fold_conv_bias_add")
    assert g.op_histogram()["conv2d"] == 1 and "expand" not in g.op_histogram()
