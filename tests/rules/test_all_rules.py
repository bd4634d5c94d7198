"""Every rule of every set: exact rules pass numeric verification; inexact ones say why (and
really are inexact); and exact rules stay right for every value of the enumerable attributes that
their source leaves free (matmul's fused ``act``, a pool's ``ceil_mode``, ...)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from typing import Any

import pytest

from graphsub.errors import GraphsubError
from graphsub.ops.registry import REGISTRY, AttrSpec
from graphsub.rules import Example, make_rule
from graphsub.rules.library import get_set, set_names
from graphsub.rules.match import find_matches
from graphsub.rules.pattern import WILDCARD, PNode, Pred
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.numeric import check_example, instantiate, verify_rule

ALL: dict[str, Rule] = {}
for _s in set_names():
    for _r in get_set(_s):
        ALL.setdefault(_r.name, _r)


def test_set_sizes() -> None:
    sizes = {s: len(get_set(s)) for s in set_names()}
    assert sizes["taso-pb"] == 133 and sizes["taso151"] == 151 and sizes["ocggs157"] == 157
    assert sizes["ocggs157-faithful"] == 157
    assert all(n > 0 for n in sizes.values())
    assert all(r.exact for r in get_set("default"))


@pytest.mark.parametrize("name", sorted(ALL))
def test_rule(name: str) -> None:
    rule = ALL[name]
    report = verify_rule(rule)
    if rule.exact:
        assert report.passed, report.reason
    else:
        assert rule.reason
        assert not report.passed, "a rule marked inexact verifies: mark it exact or fix the examples"


# ----------------------------------------------------------------------------- free attributes
#
# A pattern node matches any value of an attribute it does not pin: ``p.matmul(x, w)`` (or ``x @ w``)
# matches a relu-fused matmul too.  ``verify_rule`` only tries the values the examples set, so a
# target that drops such an attribute passes it.  Here every exact rule is also checked with each
# free (or predicate-constrained) attribute of an enumerable domain -- an attribute with ``choices``
# or a bool -- set to each value on each example.  A value the pattern or ``where`` rejects, or one
# that does not type-check on the example's shapes, is not a failure: the rule does not apply there.

Slot = tuple[str, str, str, tuple[Any, ...]]  # pattern node, its (concrete) op, attribute, values
#: the most attribute combinations tried on one example (beyond: each value alone, and all alike)
MAX_COMBINATIONS = 256


def _domain(spec: AttrSpec) -> tuple[Any, ...] | None:
    if spec.choices is not None:
        return tuple(spec.choices)
    return (False, True) if spec.kind == "bool" else None


def free_enum_slots(rule: Rule, example: Example) -> list[Slot]:
    """The enumerable attributes of ``rule``'s source that ``example`` may set to another value."""
    slots = []
    for n in rule.source.nodes:
        op = example.ops.get(n.name) if n.op == WILDCARD else n.op
        if op is None:
            continue
        for spec in REGISTRY[op].attrs:
            values = _domain(spec)
            want = n.constraint(spec.name)
            if values is not None and (want is None or isinstance(want, Pred)):
                slots.append((n.name, op, spec.name, values))
    return slots


def _current(node: PNode, op: str, example: Example, key: str) -> Any:
    if key in example.attrs.get(node.name, {}):
        return example.attrs[node.name][key]
    want = node.constraint(key)
    if want is not None and not isinstance(want, Pred):
        return want
    return next(spec.default for spec in REGISTRY[op].attrs if spec.name == key)


def _fit_types(rule: Rule, example: Example, assignment: tuple[tuple[Slot, Any], ...]) -> dict[str, Any]:
    """The example's variable types, adjusted to attributes that change operand shapes: a recurrence's
    ``direction`` (leading axis of its weights and states), FusedMatMul's ``trans_a``/``trans_b``."""
    types = dict(example.types)
    nodes = {n.name: n for n in rule.source.nodes}
    for (name, op, key, _), value in assignment:
        node = nodes[name]
        if op in ("lstm", "gru") and key == "direction":
            for r in node.inputs[1:]:
                if r.var is not None:
                    types[r.var] = (2 if value == "bidirectional" else 1, *tuple(types[r.var])[1:])
        elif op == "ms_fused_matmul" and key in ("trans_a", "trans_b") and value != _current(node, op, example, key):
            r = node.inputs[0 if key == "trans_a" else 1]
            while r.var is None and nodes[str(r.node)].op == "transpose":
                r = nodes[str(r.node)].inputs[0]
            if r.var is not None:
                shape = tuple(types[r.var])
                types[r.var] = (*shape[:-2], shape[-1], shape[-2])
    return types


def attribute_variants(rule: Rule, example: Example) -> Iterator[tuple[str, Example]]:
    """``example`` with its free enumerable attributes set to every combination of values (or, past
    :data:`MAX_COMBINATIONS`, each value alone and each value on all nodes of one op at once)."""
    slots = free_enum_slots(rule, example)
    if not slots:
        return
    assignments: list[tuple[tuple[Slot, Any], ...]]
    if math.prod(len(s[3]) for s in slots) <= MAX_COMBINATIONS:
        assignments = [tuple(zip(slots, values, strict=True)) for values in itertools.product(*(s[3] for s in slots))]
    else:
        assignments = [((s, v),) for s in slots for v in s[3]]
        by_attr = [list(g) for _, g in itertools.groupby(sorted(slots, key=lambda s: s[1:3]), key=lambda s: s[1:3])]
        assignments += [tuple((s, v) for s in same) for same in by_attr if len(same) > 1 for v in same[0][3]]
    for assignment in assignments:
        attrs = {k: dict(v) for k, v in example.attrs.items()}
        for (name, _, key, _), value in assignment:
            attrs.setdefault(name, {})[key] = value
        text = ", ".join(f"{name}.{key}={value!r}" for (name, _, key, _), value in assignment)
        yield text, dataclasses.replace(example, attrs=attrs, types=_fit_types(rule, example, assignment))


def free_attribute_check(rule: Rule) -> tuple[int, list[str]]:
    """(number of attribute variants the rule applies to, the variants on which it is wrong)."""
    applies, wrong = 0, []
    for i, example in enumerate(rule.examples):
        for text, variant in attribute_variants(rule, example):
            try:
                src = instantiate(rule.source, variant)
            except GraphsubError:
                continue  # ill-typed on these shapes (e.g. two pools with different ceil_mode under a concat)
            full = {n for n, node in src.nodes.items() if not node.sig.opdef.leaf}
            if not any(set(m.node_ids) == full for m in find_matches(src, rule.on_examples())):
                continue  # a pinned predicate or a `where` constraint rejects it: the rule does not apply
            applies += 1
            ok, _, _, reason = check_example(rule, variant, seed=i)
            if not ok:
                wrong.append(f"example {i} with {text}: {reason}")
    return applies, wrong


FREE = sorted(n for n, r in ALL.items() if r.exact and any(free_enum_slots(r, e) for e in r.examples))


def test_free_attribute_rules_found() -> None:
    assert {"mf_merge_matmuls", "alg_matmul_assoc_l2r", "cpu_merge_qkv", "ort_conv_act"} <= set(FREE)


@pytest.mark.parametrize("name", FREE)
def test_rule_free_attributes(name: str) -> None:
    applies, wrong = free_attribute_check(ALL[name])
    assert applies, "the rule applies to none of its attribute variants"
    assert not wrong, f"{len(wrong)} wrong: " + "; ".join(wrong[:5])


def test_free_attribute_check_catches_a_dropped_act() -> None:
    """The bug this guards against: ``x @ w1 + x @ w2 => x @ (w1 + w2)`` with ``act`` left free matches
    relu-fused products and drops the relu; examples that never set ``act`` verify."""
    def source(p: Any) -> dict[str, Any]:
        x = p.var("x")
        return {"y": p.matmul(x, p.weight("w1"), name="mm1") + p.matmul(x, p.weight("w2"), name="mm2")}

    exs = [Example({"x": (4, 8), "w1": (8, 3), "w2": (8, 3)}), Example({"x": (2, 6), "w1": (6, 6), "w2": (6, 6)}),
           Example({"x": (1, 5), "w1": (5, 2), "w2": (5, 2)})]
    unsafe = make_rule("t_unsafe_factor", source, lambda t, m: {"y": m.x @ (m.w1 + m.w2)}, examples=exs)
    assert verify_rule(unsafe).passed
    applies, wrong = free_attribute_check(unsafe)
    assert applies == 3 * 16 and len(wrong) == 3 * 15
    assert "mm1.act='relu', mm2.act='none'" in " ".join(wrong)
    pinned = make_rule("t_pinned_factor",
                       lambda p: {"y": p.matmul(x := p.var("x"), p.weight("w1"), act="none")
                                  + p.matmul(x, p.weight("w2"), act="none")},
                       lambda t, m: {"y": m.x @ (m.w1 + m.w2)}, examples=exs)
    assert not free_enum_slots(pinned, exs[0])


def test_attribute_variants_past_the_limit() -> None:
    """Five free ``act`` (4**5 combinations): each value alone on each node, then on all five at once."""
    def source(p: Any) -> dict[str, Any]:
        x = p.var("x")
        return {"y": sum((p.matmul(x, p.weight(f"w{i}"), name=f"mm{i}") for i in range(1, 5)),
                         start=p.matmul(x, p.weight("w0"), name="mm0"))}

    example = Example({"x": (2, 3), **{f"w{i}": (3, 3) for i in range(5)}})
    r = make_rule("t_five_products", source, lambda t, m: {"y": m.x @ m.w0}, examples=[example] * 3)
    texts = [text for text, _ in attribute_variants(r, example)]
    assert len(texts) == 5 * 4 + 4 and texts[5 * 4:][1] == ", ".join(f"mm{i}.act='relu'" for i in range(5))
