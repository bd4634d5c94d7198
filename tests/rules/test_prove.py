"""Z3 proofs from TASO's operator axioms, and the axioms' concrete check (the command line, `graphsub rules prove`,
is tested in tests/cli/test_cli_rules.py)."""

from __future__ import annotations

import pytest

from graphsub.rules.library import get_set
from graphsub.rules.rule import Example, make_rule
from graphsub.rules.soundness.axioms import AXIOMS, Axiom, check_axiom, check_axioms
from graphsub.rules.soundness.smt import prove_rule


def _rule(name: str, src_op: str, dst_op: str):  # type: ignore[no-untyped-def]
    def source(p):  # type: ignore[no-untyped-def]
        return {"y": p.op(src_op, p.var("a"), p.var("b"))}

    def target(t, m):  # type: ignore[no-untyped-def]
        return {"y": t.op(dst_op, m.a, m.b)}

    ex = [Example(types={"a": (2, 3), "b": (2, 3)}) for _ in range(3)]
    return make_rule(name, source, target, examples=ex)


def test_axioms_hold_on_concrete_tensors() -> None:
    checks = check_axioms(seed=3)
    assert len(checks) == len(AXIOMS) >= 43
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_a_false_axiom_is_caught_by_the_concrete_check() -> None:
    bad = Axiom("matmul_comm", "false", ("x", "y"), (), lambda A, x, y: A.matmul(x, y),
                lambda A, x, y: A.matmul(y, x), (({"x": (3, 3), "y": (3, 3)}, {}),))
    assert not check_axiom(bad).ok


def test_true_rules_are_proven() -> None:
    assert prove_rule(_rule("comm", "add", "add"), timeout_ms=5000).status == "proven"
    alg = {r.name: r for r in get_set("algebra")}
    for name in ("alg_matmul_assoc_l2r", "alg_concat_conv_outch_pull", "alg_matmul_concat_split"):
        assert prove_rule(alg[name], timeout_ms=5000).status == "proven", name


def test_wrong_rule_is_refuted() -> None:
    # Z3 does not settle add == mul within seconds (5 s cost 5 s here): the refutation is the numeric counterexample
    # found after its timeout, so a short timeout refutes the same way
    r = prove_rule(_rule("add_is_mul", "add", "mul"), timeout_ms=1000)
    assert r.status == "refuted", r
    assert "counterexample" in r.reason


def test_ops_without_axioms_are_unknown_with_a_reason() -> None:
    def source(p):  # type: ignore[no-untyped-def]
        return {"y": p.sigmoid(p.var("a"))}

    def target(t, m):  # type: ignore[no-untyped-def]
        return {"y": t.sigmoid(m.a)}

    r = prove_rule(make_rule("sig", source, target, examples=[Example(types={"a": (2, 2)})] * 3))
    assert r.status == "unknown" and "sigmoid" in r.reason


@pytest.mark.parametrize("index", [0, 5, 40])
def test_taso_pb_rules_are_proven(index: int) -> None:
    rules = get_set("taso-pb")
    assert prove_rule(rules[index], timeout_ms=5000).status == "proven"


def test_spelling_rules_are_proven() -> None:
    """``add == sum`` and SkipLayerNormalization's definition: every ort-spelling rule but the attention packings is
    proven (layer normalisation itself stays uninterpreted: equal arguments give equal results). The packings
    (MultiHeadAttention -> Attention) hold through batched matmuls and softmax, outside the 2-D axioms: they are
    "unknown" with that reason, and checked numerically on their examples like every rule."""
    results = {r.name: prove_rule(r, timeout_ms=5000) for r in get_set("ort-spelling")}
    packings = {n for n in results if n.startswith("ortsp_attention_")}
    assert len(packings) == 14
    assert {n: r.status for n, r in results.items() if n not in packings} == \
        dict.fromkeys(set(results) - packings, "proven"), results
    assert all(results[n].status == "unknown" and "2-D" in results[n].reason for n in packings)
