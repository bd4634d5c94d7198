"""The rule-authoring kit: target expressions, commuted twins, examples, rule-set specs."""

from __future__ import annotations

from typing import Any

import pytest

from graphsub.errors import RuleError
from graphsub.ir import Builder
from graphsub.rules import apply, find_matches
from graphsub.rules.apply import TValue
from graphsub.rules.library import get_set, resolve_rules
from graphsub.rules.library.kit import ex, rule
from graphsub.rules.rule import Rule, mirrored
from graphsub.rules.soundness.numeric import verify_rule

EXAMPLES = [ex({"x": (2, 3), "y": (2, 3), "z": (2, 3)}), ex({"x": (1, 4), "y": (3, 4), "z": (4,)}),
            ex({"x": (5,), "y": (5,), "z": ()})]


def distribute() -> Rule:
    return rule("t_distribute", "x*z + y*z -> (x+y)*z.",
                lambda p: {"out": p.var("x") * (z := p.var("z")) + p.var("y") * z},
                lambda t, m: {"out": (m.x + m.y) * m.z}, EXAMPLES)


def test_targets_read_like_sources() -> None:
    r = distribute()
    assert verify_rule(r).passed
    assert [n.op for n in r.source.nodes] == ["mul", "mul", "add"]
    b = Builder("g")
    x, y, z = b.input("x", (2, 3)), b.input("y", (2, 3)), b.input("z", (2, 3))
    g = b.build(b.add(b.mul(x, z), b.mul(y, z)))
    (m,) = find_matches(g, r)
    g2 = apply(g, m).graph
    assert g2.op_histogram() == {"add": 1, "mul": 1}
    assert all(type(ref) is not TValue for node in g2.nodes.values() for ref in node.inputs)  # plain Refs only


def test_target_values_are_refs_with_operators() -> None:
    seen: dict[str, Any] = {}

    def target(t: Any, m: Any) -> dict[str, Any]:
        seen["x"] = m.x
        return {"out": (m.x - m.y / m.y) @ m.z}

    r = rule("t_ops", "x@z + y -> (x - y/y)@z (not exact: only its ops are checked).",
             lambda p: {"out": p.var("x") @ p.var("z") + p.var("y")}, target, [])
    b = Builder("g")
    x, y, z = b.input("x", (2, 3)), b.input("y", (2, 3)), b.input("z", (3, 3))
    g = b.build(b.add(b.matmul(x, z), y))
    (m,) = find_matches(g, r)
    assert apply(g, m).graph.op_histogram() == {"sub": 1, "div": 1, "matmul": 1}
    assert isinstance(seen["x"], TValue) and seen["x"] == (seen["x"].node, 0) == m.vars[0][1]


def test_commute_builds_checked_twins() -> None:
    r, twin = rule("t_relu_add", "relu(x) + z -> z + relu(x).", lambda p: {"y": p.relu(p.var("x")) + p.var("z")},
                   lambda t, m: {"y": m.z + t.relu(m.x)},
                   [ex({"x": (2, 3), "z": (2, 3)}), ex({"x": (4,), "z": ()}), ex({"x": (1, 3), "z": (2, 1)})],
                   commute=True, mirror="_rev", mirror_doc="z + relu(x) -> z + relu(x).")
    assert (twin.name, twin.doc, twin.location) == ("t_relu_add_rev", "z + relu(x) -> z + relu(x).", r.location)
    assert twin.where == r.where and twin.examples == r.examples and twin.target is r.target
    assert str(twin.source).splitlines()[2] == "add0 = add($z, relu0)"
    assert verify_rule(r).passed and verify_rule(twin).passed
    b = Builder("g")
    x, z = b.input("x", (2, 3)), b.input("z", (2, 3))
    g = b.build(b.add(z, b.relu(x)))  # only the twin matches z + relu(x)
    assert not find_matches(g, r) and len(find_matches(g, twin)) == 1


def test_commute_named_nodes_and_errors() -> None:
    r = distribute()
    part = mirrored(r, "t_part", ["mul0"])
    assert part.source.nodes[0].inputs == tuple(reversed(r.source.nodes[0].inputs))
    assert part.source.nodes[1:] == r.source.nodes[1:]
    assert [n.inputs[::-1] for n in mirrored(r, "t_all").source.nodes] == [n.inputs for n in r.source.nodes]
    sub = rule("t_sub", "x - y.", lambda p: {"out": p.var("x") - p.var("y")}, lambda t, m: {"out": m.x - m.y}, [])
    with pytest.raises(RuleError, match="not a commutative"):
        mirrored(sub, "t_sub_r", ["sub0"])
    with pytest.raises(RuleError, match="no commutative node"):
        mirrored(sub, "t_sub_r")


def test_rule_location_and_example_keywords() -> None:
    r = distribute()
    path, line = r.location.rsplit(":", 1)
    assert path.endswith("tests/rules/test_kit.py") and 23 <= int(line) <= 26 and r.origin == "hand-written"
    e = ex({"x": (1, 3, 4, 4)}, data={"w": 1.0}, ops={"f": "relu"}, note="n", conv={"pads": "SAME"})
    assert (dict(e.attrs), dict(e.data), dict(e.ops), e.note) == ({"conv": {"pads": "SAME"}}, {"w": 1.0},
                                                                   {"f": "relu"}, "n")


def test_resolve_rules() -> None:
    cpu, mf = get_set("cpu"), get_set("metaflow")
    names = [r.name for r in resolve_rules(" metaflow , ,cpu,")]
    assert names == [r.name for r in mf] + [r.name for r in cpu if r.name != "mf_merge_matmuls"]
    assert [r.name for r in resolve_rules("cpu,metaflow")][:len(cpu)] == [r.name for r in cpu]  # first wins
    assert resolve_rules("cpu") == cpu and resolve_rules(" , ") == []
    given = (cpu[0], cpu[1])
    out = resolve_rules(given)
    assert out == list(given) and isinstance(out, list)
    with pytest.raises(RuleError) as e1:
        resolve_rules("cpu, nope")
    with pytest.raises(RuleError) as e2:
        get_set("nope")
    assert str(e1.value) == str(e2.value)
