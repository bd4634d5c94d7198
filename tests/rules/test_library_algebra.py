"""The algebra rule set: TASO's operator properties (Table 2) as rewrite rules."""

from __future__ import annotations

import numpy as np
import pytest

from graphsub import zoo
from graphsub.equivalence import equivalent
from graphsub.execute import run
from graphsub.ir import Builder, Graph
from graphsub.rules import apply, explain, find_matches
from graphsub.rules.library import algebra, get_set
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.numeric import MIN_EXAMPLES

RULES = algebra.rules()


def by_name(name: str) -> Rule:
    return next(r for r in RULES if r.name == name)


def op_node(g: Graph, op: str, k: int = 0) -> int:
    """Id of the ``k``-th node (by id) of ``op``."""
    return sorted(g.ops_of(op))[k]


def same_values(g1: Graph, g2: Graph, seed: int = 0) -> None:
    """Run both graphs with the reference executor on the same random inputs."""
    rng = np.random.default_rng(seed)
    feeds = {g1.nodes[n].sig.attr["name"]: rng.standard_normal(g1.nodes[n].sig.out_types[0].shape).astype(np.float32)
             for n in g1.inputs}
    a, b = run(g1, feeds), run(g2, feeds)
    for x, y in zip(a.values(), b.values(), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def test_rules_metadata() -> None:
    """Beyond the numeric check of every rule in ``test_all_rules``: exact, documented, tagged, enough
    examples and no two alike."""
    for rule in RULES:
        assert rule.exact and rule.doc and rule.origin == "hand-written" and "algebra" in rule.tags, rule.name
        assert len(rule.examples) >= MIN_EXAMPLES, rule.name
        keys = {(tuple(sorted(e.types.items())), repr(sorted(e.attrs.items()))) for e in rule.examples}
        assert len(keys) == len(rule.examples), f"{rule.name}: examples must differ"


def test_names_unique_and_coverage() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)) and all(n.startswith("alg_") for n in names)
    for n in ("alg_add_assoc_l2r", "alg_add_assoc_r2l", "alg_add_comm", "alg_mul_comm", "alg_mul_add_factor",
              "alg_smul_mul_push", "alg_transpose_cancel", "alg_transpose_compose", "alg_matmul_assoc_l2r",
              "alg_transpose_matmul_push", "alg_conv_relu_unfuse", "alg_avgpool_to_conv", "alg_conv_identity",
              "alg_matmul_identity", "alg_mul_one", "alg_split_concat", "alg_concat_swap", "alg_conv_concat_merge",
              "alg_concat_maxpool_pull", "alg_matmul_concat_split"):
        assert n in names


def test_rules_cached() -> None:
    again = algebra.rules()
    assert len(again) == len(RULES) and all(a is b for a, b in zip(again, RULES, strict=True))
    assert all(a is b for a, b in zip(get_set("algebra"), RULES, strict=True))


# ----------------------------------------------------------------------------- negative cases


def test_explain_concat_add_broadcast_along_axis() -> None:
    # add(x, y) broadcasts y along the concat axis: concat(y, w) would have the wrong size
    b = Builder("g")
    x, y, z, w = b.input("x", (1, 4, 3)), b.input("y", (1, 1, 3)), b.input("z", (1, 2, 3)), b.input("w", (1, 2, 3))
    g = b.build(b.concat(b.add(x, y), b.add(z, w), axis=1))
    e = explain(g, by_name("alg_concat_add_pull"), op_node(g, "concat"))
    assert not e.matched and "broadcast along the concat axis" in e.reason


def test_explain_transpose_cancel_needs_inverse() -> None:
    b = Builder("g")
    x = b.input("x", (2, 3, 4))
    g = b.build(b.transpose(b.transpose(x, perm=(1, 2, 0)), perm=(1, 2, 0)))
    e = explain(g, by_name("alg_transpose_cancel"), op_node(g, "transpose"))
    assert not e.matched and "identity" in e.reason
    assert find_matches(g, by_name("alg_transpose_compose"))


def test_explain_grouped_conv_merge_rejected() -> None:
    b = Builder("g")
    x, z = b.input("x", (1, 4, 5, 5)), b.input("z", (1, 4, 5, 5))
    y1, y2 = b.weight("y", (4, 2, 3, 3)), b.weight("w", (4, 2, 3, 3))  # groups 2
    g = b.build(b.add(b.conv2d(x, y1, pads="SAME"), b.conv2d(z, y2, pads="SAME")))
    e = explain(g, by_name("alg_conv_concat_merge"), op_node(g, "add"))
    assert not e.matched and "groups" in e.reason


def test_explain_identity_kernel_data_checked() -> None:
    b = Builder("g")
    x = b.input("x", (1, 3, 5, 5))
    k = np.zeros((3, 3, 3, 3), np.float32)
    k[0, 0, 1, 1] = k[1, 1, 1, 1] = 1.0
    k[2, 2, 1, 1] = 2.0  # not the identity
    g = b.build(b.conv2d(x, b.weight("k", data=k), pads="SAME"))
    e = explain(g, by_name("alg_conv_identity"), op_node(g, "conv2d"))
    assert not e.matched and "identity" in e.reason


def test_explain_split_sizes_and_mul_one_broadcast() -> None:
    b = Builder("g")
    x, y = b.input("x", (2, 3)), b.input("y", (2, 5))
    g = b.build(*b.split(b.concat(x, y, axis=1), axis=1, sizes=(4, 4)))
    assert not explain(g, by_name("alg_split_concat"), op_node(g, "split")).matched
    b = Builder("g")
    x = b.input("x", (3,))
    g = b.build(b.mul(x, b.weight("one", data=np.ones((2, 3), np.float32))))  # broadcasts x up
    e = explain(g, by_name("alg_mul_one"), op_node(g, "mul"))
    assert not e.matched and "shape" in e.reason


# ----------------------------------------------------------------------------- constant ops


@pytest.mark.parametrize("case", ["iconv", "pool", "imm", "one"])
def test_constant_ops_match(case: str) -> None:
    """The identity/pool rules also match TASO's constant ops (not only weights holding their data)."""
    b = Builder(case)
    if case == "iconv":
        x = b.input("x", (1, 3, 5, 5))
        y, rule = b.conv2d(x, b.const_iconv(shape=(3, 1, 3, 3)), pads="SAME", act="relu"), "alg_conv_identity"
    elif case == "pool":
        x = b.input("x", (1, 3, 6, 6))
        y, rule = b.conv2d(x, b.const_pool(shape=(3, 1, 3, 3)), strides=(2, 2), pads="SAME"), "alg_conv_to_avgpool"
    elif case == "imm":
        x = b.input("x", (2, 4))
        y, rule = b.matmul(b.relu(x), b.const_imm(n=4)), "alg_matmul_identity"
    else:
        x = b.input("x", (2, 4))
        y, rule = b.mul(b.const_one(shape=(4,)), b.relu(x)), "alg_mul_one_left"
    g = b.build(y)
    (m,) = find_matches(g, by_name(rule))
    g2 = apply(g, m).graph
    assert "conv2d" not in g2.op_histogram() and "matmul" not in g2.op_histogram()
    same_values(g, g2)


# ----------------------------------------------------------------------------- zoo models


def test_add_comm_on_resnet() -> None:
    g = zoo.get("resnet", blocks=2)
    ms = find_matches(g, by_name("alg_add_comm"))
    assert len(ms) == 2
    assert equivalent(g, apply(g, ms[0]).graph).equivalent


def test_concat_relu_on_inception() -> None:
    """Unfuse the relus of two convs feeding a concat, then pull the relu through the concat."""
    g = zoo.get("inception_v3")
    unfuse, pull = by_name("alg_conv_relu_unfuse"), by_name("alg_concat_relu_pull")
    assert len(find_matches(g, unfuse)) == 94 and not find_matches(g, pull)
    cat = next(n for n in sorted(g.ops_of("concat")) if len(g.nodes[n].inputs) == 2
               and all(g.nodes[r.node].sig.op == "conv2d" for r in g.nodes[n].inputs))
    g2 = g
    for r in g.nodes[cat].inputs:
        (m,) = [m for m in find_matches(g2, unfuse) if m.node("c") == r.node]
        g2 = apply(g2, m).graph
    (m,) = find_matches(g2, pull)
    g3 = apply(g2, m).graph
    assert g3.op_histogram()["relu"] == 1
    assert equivalent(g, g3).equivalent


def test_avgpool_to_conv_and_rnn_merge() -> None:
    g = zoo.get("inception_v3")
    ms = find_matches(g, by_name("alg_avgpool_to_conv"))
    assert len(ms) == 9  # every avgpool counts padding (the others: no padding)
    assert equivalent(g, apply(g, ms[0]).graph).equivalent
    g = zoo.get("nasrnn", length=1)
    ms = find_matches(g, by_name("alg_matmul_concat_merge"))  # x @ W + h @ U -> [x h] @ [W; U]
    assert len(ms) == 8
    assert equivalent(g, apply(g, ms[0]).graph).equivalent


def test_conv_concat_merge_on_nasnet() -> None:
    g = zoo.get("nasnet_a")
    ms = find_matches(g, by_name("alg_conv_concat_merge"))
    assert ms
    g2 = apply(g, ms[0]).graph
    assert g2.op_histogram()["conv2d"] == g.op_histogram()["conv2d"] - 1
    assert equivalent(g, g2).equivalent
