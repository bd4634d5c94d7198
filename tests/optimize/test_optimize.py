"""`graphsub.optimize.optimize`: verified, measured, keeps the original unless faster, bisects failures."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from graphsub.errors import GraphsubError
from graphsub.optimize import optimize
from graphsub.optimize.candidates import CLEANUP_STEP
from graphsub.rules.library import find_rule, resolve_rules
from graphsub.rules.replay import replay
from graphsub.rules.rule import Rule
from graphsub.search import Budget

FAST = {"cost": "roofline:cpu", "budget": Budget(time_s=5, k=4), "peers": "none", "eqsat_s": 0, "ort_search_s": 0}


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_optimizes_around_opaque_op(model_path: Path, tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    before = digest(model_path)
    out = tmp_path / "out.onnx"
    res = optimize(model_path, output=out, **FAST)  # type: ignore[arg-type]
    d = res.to_dict()
    assert d["verified"] and d["opaque_ops"] == 1
    assert {"cpu_identity_remove", "taso_pb_031"} <= {a["rule"] for a in d["applied"]}
    assert d["speedup_ort_all"] > 1 and not d["kept_original"] and d["written"] == str(out)
    assert d["chosen"] == "search" and [c["name"] for c in d["candidates"]] == ["search"]
    for key in ("max_abs_diff", "latency_ms_before", "latency_ms_after", "threads"):
        assert d[key] is not None
    written = onnx.load(str(out))
    onnx.checker.check_model(written)
    assert "Hardmax" in [n.op_type for n in written.graph.node]
    assert len(written.graph.node) == 5
    assert digest(model_path) == before  # the input is never touched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".graphsub-")]  # no temporary files left


def test_replay_reproduces_the_search(model_path: Path, fake_timing: Callable[..., None]) -> None:
    res = optimize(model_path, measure_latency=False, **FAST)  # type: ignore[arg-type]
    from graphsub.frontends.onnx_io import load

    g = replay(load(model_path), resolve_rules("default"), res.search.sequence)
    assert g.structural_hash() == res.search.best.structural_hash()


def test_searches_start_from_the_cleaned_model(model_path: Path, fake_timing: Callable[..., None]) -> None:
    """The clean-up runs first (one step of the sequence, its substitutions in the result) unless switched off."""
    on = optimize(model_path, measure_latency=False, **FAST)  # type: ignore[arg-type]
    off = optimize(model_path, measure_latency=False, cleanup=False, **FAST)  # type: ignore[arg-type]
    assert on.verified and off.verified
    assert on.search.sequence[0] == CLEANUP_STEP and [s.rule for s in on.cleanup] == ["cpu_identity_remove"]
    assert any(n.startswith("cleanup: 1 substitution") for n in on.portfolio_notes)
    assert CLEANUP_STEP not in off.search.sequence and off.cleanup == ()
    assert {a["rule"] for a in on.applied} >= {"cpu_identity_remove"} and "cleanup" not in {
        a["rule"] for a in on.applied}  # the clean-up's own substitutions, one by one


def test_keeps_original_unless_faster(model_path: Path, tmp_path: Path,
                                      fake_timing: Callable[..., None]) -> None:
    fake_timing(lambda model: 1.0)  # never faster
    out = tmp_path / "kept.onnx"
    res = optimize(model_path, output=out, **FAST)  # type: ignore[arg-type]
    assert res.verified and res.kept_original and res.speedup("all") == 1.0
    assert "no candidate is faster" in res.decision
    assert out.read_bytes() == model_path.read_bytes()
    slower = tmp_path / "slower.onnx"
    res = optimize(model_path, output=slower, keep_slower=True, **FAST)  # type: ignore[arg-type]
    assert not res.kept_original and len(onnx.load(str(slower)).graph.node) == 5


def test_bad_rule_is_caught_and_named(model_path: Path, tmp_path: Path, bad_rule: Rule,
                                      fake_timing: Callable[..., None]) -> None:
    rules = [find_rule("cpu_identity_remove"), bad_rule]
    out = tmp_path / "never.onnx"
    res = optimize(model_path, output=out, rules=rules, **FAST)  # type: ignore[arg-type]
    assert not res.verified and res.written is None and not out.exists()
    assert [s.rule for s in res.search.sequence].count("test_bad_add_drop") == 1
    f = res.failure
    assert f is not None and f.rule == "test_bad_add_drop" and f.output == "y"
    assert res.search.sequence[f.step - 1].rule == "test_bad_add_drop"
    assert "test_bad_add_drop" in res.decision


def test_real_timing_and_refusals(model_path: Path, tmp_path: Path) -> None:
    res = optimize(model_path, timing_budget_ms=5, **FAST)  # type: ignore[arg-type]
    lat = res.latency_ms["all"]
    shown = max(res.candidates, key=lambda c: c.speedup or 0.0)  # the leader, confirmed when faster side by side
    v = shown.confirmation
    assert lat["before"] > 0 and lat["after"] > 0
    assert len(lat["rounds"]) == (v.rounds if v is not None else 5)
    if v is not None:  # real sessions: an interval around the speedup, an A/A control near 1.0x
        assert v.speedup_ci[0] <= v.speedup <= v.speedup_ci[1] and 0.5 < v.aa_ratio < 2.0
    assert all(len(c.rounds_ms) == 5 for c in res.candidates if not c.same_as)
    with pytest.raises(GraphsubError, match="overwrite"):
        optimize(model_path, output=model_path, **FAST)  # type: ignore[arg-type]


def test_bisect_names_an_early_bad_step(model_path: Path, bad_rule: Rule) -> None:
    from graphsub.data import materialize
    from graphsub.frontends.onnx_io import load
    from graphsub.optimize.verification import bisect
    from graphsub.rules.match import find_matches
    from graphsub.search.base import Step

    g = load(model_path)
    ident = find_rule("cpu_identity_remove")
    rules = [bad_rule, ident]
    (idm,) = find_matches(g, ident)
    for bm in find_matches(g, bad_rule):  # a bad step first, then a good one that still applies after it
        steps = [Step(bad_rule.name, tuple(n for _, n in bm.nodes), 0.0),
                 Step(ident.name, tuple(n for _, n in idm.nodes), 0.0)]
        try:
            replay(g, rules, steps)
        except GraphsubError:
            continue
        f = bisect(g, materialize(g, 0), rules, steps, (0, 1), 0)
        assert (f.step, f.rule, f.output) == (1, "test_bad_add_drop", "y")
        break
    else:
        pytest.fail("no two-step sequence with the bad step first")


def test_token_ids_are_drawn_in_range(tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    """An embedding lookup on int64 token ids: verification draws ids inside the vocabulary."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("E", (100, 16)), ("W1", (16, 16)), ("W2", (16, 16)))]
    nodes = [helper.make_node("Gather", ["E", "ids"], ["e"], axis=0),
             helper.make_node("MatMul", ["e", "W1"], ["a"]), helper.make_node("MatMul", ["e", "W2"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    g = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 16])], inits)
    path = tmp_path / "emb.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    res = optimize(path, output=tmp_path / "o.onnx", **FAST)  # type: ignore[arg-type]
    assert res.verified and res.applied and not res.kept_original
    assert len(onnx.load(str(tmp_path / "o.onnx")).graph.node) == 2  # gather, then e@W1 + e@W2 -> e@(W1+W2)


def test_noise_does_not_count_as_a_gain() -> None:
    """The decision rests on the spread between session groups, not on how many rounds were faster: a candidate
    faster in both rounds of one session group but slower in another is not declared faster."""
    from graphsub.optimize.decide import Rounds, verdict

    lucky = Rounds(a=(10.0,) * 6, b=(8.0, 8.0, 11.0, 11.0, 10.0, 10.0), c=(10.0,) * 6, group=(0, 0, 1, 1, 2, 2))
    assert sum(b < a for a, b in zip(lucky.a, lucky.b, strict=True)) == 2
    assert not verdict(lucky, min_speedup=1.03).faster
    real = Rounds(a=(10.0,) * 6, b=(8.0, 8.1, 7.9, 8.0, 8.2, 7.9), c=(10.0, 10.1, 9.9, 10.0, 10.0, 10.1),
                  group=(0, 0, 1, 1, 2, 2))
    assert verdict(real, min_speedup=1.03).faster
