"""The metaflow rule set: MetaFlow's relaxed substitutions and the SRU factoring example."""

from __future__ import annotations

import numpy as np

from graphsub import zoo
from graphsub.equivalence import equivalent
from graphsub.ir import Builder, Graph
from graphsub.rules import apply, explain, find_matches, get_set
from graphsub.rules.library import metaflow
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.numeric import MIN_EXAMPLES


def by_name(name: str) -> Rule:
    return next(r for r in metaflow.rules() if r.name == name)


def apply_all(g: Graph, rule: Rule) -> Graph:
    while ms := find_matches(g, rule):
        g = apply(g, ms[0]).graph
    return g


def test_rules_metadata() -> None:
    """Beyond the numeric check of every rule in ``test_all_rules``: exact, documented, tagged, enough examples."""
    for rule in metaflow.rules():
        assert rule.exact and rule.doc and rule.tags and len(rule.examples) >= MIN_EXAMPLES, rule.name


def test_names() -> None:
    names = [r.name for r in metaflow.rules()]
    assert len(names) == len(set(names)) and all(n.startswith("mf_") for n in names)
    assert [r.name for r in get_set("metaflow")] == names
    for n in ("mf_fuse_conv_add", "mf_fuse_matmul_act", "mf_fuse_conv_relu", "mf_merge_matmuls", "mf_merge_convs",
              "mf_exclusive_concat", "mf_resnet_merge", "mf_fuse_conv_batchnorm", "mf_sru_distribute",
              "mf_sru_reorder", "mf_sru_factor", "mf_sru_shortcut"):
        assert n in names


def test_exclusive_concat_on_inception_and_squeezenet() -> None:
    assert len(find_matches(zoo.get("inception_v3"), by_name("mf_exclusive_concat"))) == 4  # E: 1x3 | 3x1
    small = zoo.get("inception_e", blocks=1)
    (m, _) = find_matches(small, by_name("mf_exclusive_concat"))
    assert equivalent(small, apply(small, m).graph).equivalent
    # SqueezeNet: relu nodes sit between the expand convs and the concat; fuse them first
    sq = zoo.get("squeezenet")
    fused = apply_all(sq, by_name("mf_fuse_conv_relu_bias"))
    assert "relu" not in fused.op_histogram()
    ms = find_matches(fused, by_name("mf_exclusive_concat_bias"))
    assert len(ms) == 8  # one per fire module (1x1 and 3x3 expand)
    assert equivalent(sq, apply(fused, ms[0]).graph).equivalent


def test_conv_add_identity_kernel_on_resnet() -> None:
    g = zoo.get("resnet", blocks=1)
    (m,) = find_matches(g, by_name("mf_fuse_conv_add_rhs"))  # relu(shortcut + conv3x3)
    g2 = apply(g, m).graph
    assert equivalent(g, g2).equivalent
    assert g2.op_histogram()["conv2d"] == 3 and "add" not in g2.op_histogram()
    assert len(find_matches(zoo.get("resnet18"), by_name("mf_fuse_conv_add_bias"))) == 8


def _resnet_block(strides: tuple[int, int] = (1, 1)) -> tuple[Graph, int]:
    b = Builder("res")
    x1, x2 = b.input("x1", (1, 4, 8, 8)), b.input("x2", (1, 6, 8, 8))
    c1 = b.conv2d(x1, b.weight("w1", (5, 4, 3, 3)), pads="SAME", strides=strides)
    c2 = b.conv2d(x2, b.weight("w2", (5, 6, 1, 1)), strides=strides)
    s = b.add(c1, c2)
    return b.build(b.relu(s)), s.ref.node


def test_resnet_merge() -> None:
    g, add = _resnet_block()
    assert len(find_matches(g, by_name("mf_resnet_merge"))) == 1
    (m,) = find_matches(g, by_name("mf_resnet_merge_relu"))
    g2 = apply(g, m).graph
    assert g2.op_histogram() == {"conv2d": 1, "concat": 2, "enlarge": 1}
    assert equivalent(g, g2).equivalent
    # stride 2 on an even size: SAME pads of the 3x3 conv are (0,0,1,1), the 1x1's grow to (1,1,1,1)
    g, add = _resnet_block((2, 2))
    why = explain(g, by_name("mf_resnet_merge"), add)
    assert not why.matched and "pads disagree" in why.reason


def test_merges_and_fusions_on_zoo() -> None:
    assert len(find_matches(zoo.get("inception_v3"), by_name("mf_merge_convs"))) > 0
    sru = zoo.get("sru")
    assert len(find_matches(sru, by_name("mf_fuse_matmul_act"))) == 2  # sigmoid(x @ W2), sigmoid(x @ W3)
    ms = find_matches(sru, by_name("mf_merge_matmuls"))
    assert len(ms) == 3  # 3 matmuls on x: one match per unordered pair
    assert equivalent(sru, apply(sru, ms[0]).graph).equivalent
    bn = zoo.get("resnet18", batchnorm=True)
    ms = find_matches(bn, by_name("mf_fuse_conv_batchnorm"))
    assert len(ms) == 20
    assert equivalent(bn, apply(bn, ms[0]).graph).equivalent


def _sru_graph(one_as_op: bool) -> Graph:
    b = Builder("sru_gate")
    x, y, z = (b.input(n, (2, 8)) for n in "xyz")
    one = b.const_one(shape=(2, 8)) if one_as_op else b.weight("one", (2, 8), data=np.ones((2, 8), np.float32))
    return b.build(b.add(b.mul(x, y), b.mul(b.sub(one, x), z)))


def test_sru_chain_reaches_the_shortcut() -> None:
    for one_as_op in (False, True):
        g = _sru_graph(one_as_op)
        g1 = apply(g, find_matches(g, by_name("mf_sru_distribute"))[0]).graph
        g2 = apply(g1, find_matches(g1, by_name("mf_sru_reorder"))[0]).graph
        g3 = apply(g2, find_matches(g2, by_name("mf_sru_factor"))[0]).graph
        short = apply(g, find_matches(g, by_name("mf_sru_shortcut"))[0]).graph
        assert g3.op_histogram() == short.op_histogram() == {"mul": 1, "sub": 1, "add": 1}
        for h in (g1, g2, g3, short):
            assert equivalent(g, h).equivalent


def test_sru_needs_ones() -> None:
    b = Builder("g")
    x, y, z = (b.input(n, (2, 8)) for n in "xyz")
    two = b.weight("two", (2, 8), data=np.full((2, 8), 2.0, np.float32))
    out = b.add(b.mul(x, y), b.mul(b.sub(two, x), z))
    g = b.build(out)
    why = explain(g, by_name("mf_sru_shortcut"), out.ref.node)
    assert not why.matched and "not all 1" in why.reason
    b = Builder("g")
    x, y, z = (b.input(n, (2, 8)) for n in "xyz")
    out = b.add(b.mul(x, y), b.mul(b.sub(b.weight("one", (2, 8)), x), z))  # no data: cannot tell
    why = explain(b.build(out), by_name("mf_sru_distribute"), out.ref.node)
    assert not why.matched and "no data" in why.reason


def test_negative_cases_explain() -> None:
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 8))
    c = b.conv2d(x, b.weight("w", (4, 4, 3, 3)), strides=(2, 2), pads="SAME")
    out = b.add(c, b.input("y", (1, 4, 4, 4)))
    why = explain(b.build(out), by_name("mf_fuse_conv_add"), out.ref.node)
    assert not why.matched and "strides" in why.reason
    b = Builder("g")
    a = b.matmul(b.input("a", (4, 4)), b.weight("w", (4, 4)))
    e = b.exp(a)
    why = explain(b.build(e), by_name("mf_fuse_matmul_act"), e.ref.node)
    assert not why.matched and "exp is not one of" in why.reason
