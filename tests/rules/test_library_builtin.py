"""The builtin rule set: TASO's and OCGGS's hand-written rules in exact versions."""

from __future__ import annotations

from graphsub import zoo
from graphsub.equivalence import equivalent
from graphsub.ir import Builder
from graphsub.ir.analysis import is_weight_only
from graphsub.rules import apply, explain, find_matches, get_set
from graphsub.rules.library import builtin
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.numeric import MIN_EXAMPLES


def by_name(name: str) -> Rule:
    return next(r for r in builtin.rules() if r.name == name)


def test_rules_metadata() -> None:
    """Beyond the numeric check of every rule in ``test_all_rules``: exact, documented, tagged, enough examples."""
    for rule in builtin.rules():
        assert rule.exact and rule.doc and rule.tags and len(rule.examples) >= MIN_EXAMPLES, rule.name


def test_counts_order_and_names() -> None:
    ocggs, taso, union = builtin.ocggs_rules(), builtin.taso_rules(), builtin.rules()
    assert len(ocggs) == 24 and len(taso) == 18
    assert [r.name for r in ocggs[:4]] == ["ocggs_conv_relu_s1_same", "ocggs_conv_batch_s1_same",
                                          "ocggs_conv_mul_s1_same", "ocggs_conv_add_s1_same"]
    assert ocggs[15].name == "ocggs_conv_add_s2_valid"
    assert [r.name for r in ocggs[16:20]] == ["ocggs_enlarge_convs_none", "ocggs_enlarge_convs_relu",
                                             "ocggs_merge_convs_none", "ocggs_merge_convs_relu"]
    assert ocggs[20:] == taso[14:]  # merge_group_convs shared
    assert [r.name for r in taso[12:14]] == ["taso_enlarge_merge_convs_none", "taso_enlarge_merge_convs_relu"]
    assert not any("conv_add" in r.name for r in taso)
    # identical rules are the same objects; the union has no duplicate names
    assert all(r in ocggs for r in taso[:12]) and taso[0] is ocggs[0]
    names = [r.name for r in union]
    assert len(names) == len(set(names)) == 26
    assert builtin.rules() is not builtin.rules() and builtin.rules()[0] is builtin.rules()[0]  # cached
    assert [r.name for r in get_set("builtin")] == names


def test_merge_convs_on_inception_v3_is_equivalent() -> None:
    g = zoo.get("inception_v3")
    assert len(find_matches(g, by_name("ocggs_merge_convs_relu"))) > 0
    assert len(find_matches(g, by_name("taso_enlarge_merge_convs_relu"))) > 0
    small = zoo.get("inception_e", blocks=1)
    for name in ("ocggs_merge_convs_relu", "taso_enlarge_merge_convs_relu"):
        m = find_matches(small, by_name(name))[0]
        assert equivalent(small, apply(small, m).graph).equivalent


def test_enlarge_on_resnet_and_group_merge_on_resnext() -> None:
    g = zoo.get("resnet", blocks=2)
    ms = find_matches(g, by_name("ocggs_enlarge_convs_relu"))
    assert len(ms) == 2  # the 1x1 shortcut next to the first 3x3 conv of each block
    g2 = apply(g, ms[0]).graph
    assert equivalent(g, g2).equivalent
    # now the two convs on the block input have one geometry: OCGGS's merge applies
    assert len(find_matches(g2, by_name("ocggs_merge_convs_relu"))) == 1
    rx = zoo.get("resnext50")
    assert len(find_matches(rx, by_name("ocggs_merge_group_convs_s1_relu"))) > 0
    assert len(find_matches(rx, by_name("ocggs_merge_group_convs_s2_relu"))) > 0


def test_conv_folds_on_a_small_graph() -> None:
    b = Builder("g")
    x = b.input("x", (1, 3, 8, 8))
    c = b.conv2d(x, b.weight("w", (4, 3, 3, 3)), pads="SAME")
    bn = b.batchnorm(c, *(b.weight(n, (4,)) for n in ("scale", "bias", "mean", "var")))
    y = b.add(b.mul(b.conv2d(bn, b.weight("w2", (4, 4, 1, 1)), strides=(2, 2)), b.weight("s", (1, 4, 1, 1))),
              b.weight("t", (1,)))
    g0 = g = b.build(y)
    # the reference is always the original graph: its batchnorm gives `var` positive random data
    for name in ("ocggs_conv_batch_s1_same", "ocggs_conv_mul_s2_valid", "ocggs_conv_add_s2_valid"):
        (m,) = find_matches(g, by_name(name))
        g = apply(g, m).graph
        assert equivalent(g0, g).equivalent, name
    runtime = [g.nodes[n].sig.op for n in g.topo_order() if not g.nodes[n].sig.opdef.leaf
               and not is_weight_only(g, n)]
    assert runtime == ["conv2d", "conv2d"]


def test_negative_cases_explain() -> None:
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 8))
    c = b.conv2d(x, b.weight("w", (4, 4, 3, 3)), strides=(2, 2), pads="SAME")
    r = b.relu(c)
    g = b.build(r)
    why = explain(g, by_name("ocggs_conv_relu_s1_same"), r.ref.node)
    assert not why.matched and "strides" in why.reason
    assert explain(g, by_name("ocggs_conv_relu_s2_same"), r.ref.node).matched
    why = explain(g, by_name("ocggs_merge_group_convs_s2_none"), c.ref.node)
    assert not why.matched and "groups" in why.reason
    # two convs on one input with unequal kernels do not merge
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 8))
    c1 = b.conv2d(x, b.weight("w1", (4, 4, 3, 3)), pads="SAME")
    c2 = b.conv2d(x, b.weight("w2", (4, 4, 5, 5)), pads="SAME")
    g = b.build({"a": c1, "b": c2})
    why = explain(g, by_name("ocggs_merge_convs_none"), c1.ref.node)
    assert not why.matched and "kernels differ" in why.reason
    # ... but 3x3 SAME fits centered in 5x5 SAME: enlarge applies
    assert len(find_matches(g, by_name("ocggs_enlarge_convs_none"))) == 1
    # a (O,) addend broadcasts along the width, not the channels
    b = Builder("g")
    x = b.input("x", (1, 4, 8, 4))
    a = b.add(b.conv2d(x, b.weight("w", (4, 4, 1, 1))), b.weight("s", (4,)))
    why = explain(b.build(a), by_name("ocggs_conv_add_s1_valid"), a.ref.node)
    assert not why.matched and "per channel" in why.reason
