"""Rule generation (TASO Algorithm 1): enumeration, fingerprints, pruning, emission (its command line,
`graphsub rules generate`, is tested in tests/cli/test_cli_rules.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphsub.rules.generate.emit import load_generated_json, load_substitutions
from graphsub.rules.generate.enumerate import EnumConfig, GraphCode, decode, enumerate_shard, first_choices
from graphsub.rules.generate.parallel import merge, run_shards
from graphsub.rules.generate.pipeline import doc_header, generate
from graphsub.rules.generate.prune import Pair, canonical_key, pair_text
from graphsub.rules.generate.templates import TEMPLATES, conv_mod, pool_mod, relu_poly, resolve_ops
from graphsub.rules.soundness.numeric import verify_rule

SMALL = EnumConfig(templates=("matmul", "add", "transpose", "concat0_2d", "concat1_2d", "split0", "split1"),
                   max_ops=2)


@pytest.fixture(scope="module")
def small() -> object:
    return generate(SMALL)


def texts(gen: object) -> list[str]:
    return [s["text"] for s in gen.doc["substitutions"]]  # type: ignore[attr-defined]


def test_known_identities_are_found(small: object) -> None:
    found = texts(small)
    assert "matmul(matmul(x1,w1),w2) == matmul(x1,matmul(w1,w2))" in found  # associativity
    assert "concat0_2d(concat0_2d(x1,x2),x3) == concat0_2d(x1,concat0_2d(x2,x3))" in found
    gen3 = generate(EnumConfig(templates=("matmul", "add"), max_ops=3))
    assert "add(matmul(x1,w1),matmul(x1,w2)) == matmul(x1,add(w1,w2))" in texts(gen3)  # linearity
    sub = next(s for s in gen3.doc["substitutions"] if s["text"].startswith("add(matmul(x1,w1),matmul(x1,w2))"))
    assert sub["directions"] == ["ab", "ba"]


def test_counts_are_monotone_and_stats_add_up(small: object) -> None:
    c = small.counts  # type: ignore[attr-defined]
    assert c["graphs"] >= c["fingerprints"] > 0
    assert c["graphs"] - c["fingerprints"] <= c["candidates"]
    assert c["candidates"] >= c["after_renaming"] >= c["confirmed"] >= c["after_common_subgraph"] >= c["emitted"] > 0
    dropped = small.stats.dropped  # type: ignore[attr-defined]
    # every candidate is accounted for: a collision, a renaming, or the one pair its class keeps
    renaming = sum(v for k, v in dropped.items() if k.startswith("renaming"))
    collisions = dropped.get("fingerprint collision (differs on a test input)", 0)
    assert c["candidates"] == renaming + collisions + c["confirmed"]
    common = sum(v for k, v in dropped.items() if k.startswith("common subgraph"))
    assert c["confirmed"] - c["after_common_subgraph"] == common


def test_emitted_rules_pass_numeric_verification(small: object) -> None:
    subs = load_substitutions(small.doc)  # type: ignore[attr-defined]
    from graphsub.rules.generate.emit import to_rules

    rules = [r for s in subs[:12] for r in to_rules(s)]
    assert rules
    for r in rules:
        rep = verify_rule(r)
        assert rep.passed, (r.name, r.doc, rep.reason)
        assert r.origin == "generated" and len(r.examples) >= 3


def test_false_pair_is_not_merged() -> None:
    cfg = EnumConfig(templates=("add", "mul", "relu"), max_ops=1)
    gen = generate(cfg)
    assert gen.counts["candidates"] == 0  # add(x1,x2) and mul(x1,x2) have different fingerprints
    # the ReLU stand-in is not linear, so relu(a + b) and relu(a) + relu(b) differ
    a, b = np.array([5, 7]), np.array([11, 2])
    assert not np.array_equal(relu_poly(a + b), (relu_poly(a) + relu_poly(b)) % 1_000_003)


def test_duplicate_computation_is_pruned() -> None:
    cfg = EnumConfig(templates=("transpose",), max_ops=2)
    recs = enumerate_shard(cfg, 0, 1)
    codes = [decode(c) for lst in recs.values() for _, c in lst]
    # transpose(transpose(w)) equals w: never kept; the same op twice: never kept
    assert all(len(g.ops) == 1 or g.ops[1][1][0] < g.num_vars for g in codes)
    assert len({g.ops for g in codes}) == len(codes)


def test_sharding_is_deterministic_and_resumable(tmp_path: Path) -> None:
    cfg = EnumConfig(templates=("matmul", "add", "relu"), max_ops=2)
    one = merge(run_shards(cfg, num_shards=1))
    calls: list[int] = []
    three = merge(run_shards(cfg, num_shards=3, checkpoint=tmp_path, on_done=lambda s, r: calls.append(s)))
    assert one.codes == three.codes and bool((one.fps == three.fps).all())
    assert len(list(tmp_path.glob("shard-*.npz"))) == 3
    again = run_shards(cfg, num_shards=3, checkpoint=tmp_path)
    assert all(r.loaded for r in again)  # nothing recomputed
    (tmp_path / "shard-00001-of-00003.npz").unlink()
    partly = run_shards(cfg, num_shards=3, checkpoint=tmp_path)
    assert [r.loaded for r in partly] == [True, False, True]
    with pytest.raises(Exception, match="another configuration"):
        run_shards(EnumConfig(templates=("add",), max_ops=2), num_shards=3, checkpoint=tmp_path)


def test_process_pool_matches_serial() -> None:
    cfg = EnumConfig(templates=("matmul", "transpose"), max_ops=2)
    a = merge(run_shards(cfg, num_shards=4, executor="process", workers=2))
    b = merge(run_shards(cfg, num_shards=1))
    assert a.codes == b.codes


def test_every_stage_in_worker_processes_writes_the_same_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enumeration shards, confirm pieces, renaming keys and verification pieces on a process pool (pieces made
    small so that there are many): the rules.json document is the same, byte for byte, as the serial run's."""
    from graphsub.rules.generate import pipeline, prune

    cfg = EnumConfig(templates=("matmul", "transpose", "add"), max_ops=2)
    serial = json.dumps(generate(cfg, num_shards=1).doc)
    monkeypatch.setattr(prune, "CONFIRM_CHUNK", 7)
    monkeypatch.setattr(pipeline, "VERIFY_CHUNK", 3)
    par = generate(cfg, num_shards=5, executor="process", workers=2)
    assert json.dumps(par.doc) == serial and par.counts["emitted"] > 5


def test_ray_executor_errors_clearly_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if the ray extra were not installed
    with pytest.raises(Exception, match=r"pip install -e \.\[ray\]"):
        run_shards(EnumConfig(templates=("add",), max_ops=1), num_shards=2, executor="ray")


def test_canonical_key_identifies_renamings() -> None:
    cfg = SMALL
    mm = cfg.templates.index("matmul")
    nv = len(cfg.variables)
    # matmul(x1, w1) vs matmul(x2, w3): same pair up to renaming; x1 is 0, x2 is 1, w1 is 3, w3 is 5
    p1 = Pair(GraphCode(((mm, (0, 3)),), nv, (1,)), GraphCode(((mm, (0, 3)),), nv, (1,)), ((nv, nv),))
    p2 = Pair(GraphCode(((mm, (1, 5)),), nv, (1,)), GraphCode(((mm, (1, 5)),), nv, (1,)), ((nv, nv),))
    p3 = Pair(GraphCode(((mm, (3, 3)),), nv, (1,)), GraphCode(((mm, (3, 3)),), nv, (1,)), ((nv, nv),))
    assert canonical_key(cfg, p1) == canonical_key(cfg, p2) != canonical_key(cfg, p3)
    assert pair_text(cfg, p2) == (("matmul(x2,w3)", "matmul(x2,w3)"),)


def test_modular_kernels_match_float_references() -> None:
    from graphsub.ops.conv import conv2d_ref

    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (1, 4, 5, 5))
    w = rng.integers(-3, 4, (4, 2, 1, 3))
    want = conv2d_ref(x.astype(np.float64), w.astype(np.float64), None, (1, 1), "SAME")
    assert np.array_equal(conv_mod(x % 1_000_003, w % 1_000_003), np.round(want).astype(np.int64) % 1_000_003)
    s = pool_mod(np.ones((1, 1, 3, 3), np.int64) * 9, True)
    assert s[0, 0, 1, 1] == 9  # the centre window: 9 nines times 1/9
    assert resolve_ops(["conv", "add"])[:2] == ("conv3x3", "conv3x3r")
    with pytest.raises(KeyError, match="frobnicate"):
        resolve_ops(["frobnicate"])
    assert len(first_choices(EnumConfig(templates=("const_imm",), max_ops=1))) == 1
    assert TEMPLATES["conv1x3"].param == (1, 3)


def test_malformed_rules_files_are_rejected(tmp_path: Path) -> None:
    from graphsub.errors import RuleError

    head = doc_header(SMALL)
    bad_docs = [
        {"format": "nope"},
        {**head, "substitutions": [{"id": 0, "a": [{"op": "frob", "in": ["x1"]}], "b": [{"op": "relu", "in": ["x1"]}],
                                    "outputs": [["$0", "$0"]]}]},
        {**head, "substitutions": [{"id": 0, "a": [{"op": "relu", "in": ["$3"]}], "b": [{"op": "relu", "in": ["x1"]}],
                                    "outputs": [["$0", "$0"]]}]},
        {**head, "substitutions": [{"id": 0, "a": [{"op": "relu", "in": ["zz"]}], "b": [{"op": "relu", "in": ["x1"]}],
                                    "outputs": [["$0", "$0"]]}]},
        {**head, "substitutions": [{"id": 0, "a": [{"op": "relu", "in": ["x1"]}], "b": [{"op": "relu", "in": ["x1"]}],
                                    "outputs": []}]},
    ]
    for doc in bad_docs:
        with pytest.raises(RuleError):
            load_substitutions(doc)
    f = tmp_path / "bad.json"
    f.write_text("{not json")
    with pytest.raises(RuleError, match="not valid JSON"):
        load_generated_json(f)


def test_generated_set_is_registered_and_verified() -> None:
    from graphsub.rules.library import GENERATED_JSON, get_set

    if not GENERATED_JSON.is_file():
        pytest.skip("generated.json not produced yet (experiments/rules/rulegen.py --install)")
    rules = get_set("generated")
    assert len(rules) > 100 and all(r.origin == "generated" for r in rules)
    rng = np.random.default_rng(1)
    for i in rng.choice(len(rules), size=15, replace=False):
        assert verify_rule(rules[int(i)]).passed, rules[int(i)].doc
    assert "generated" not in {r.origin for r in get_set("default")}


def test_confirm_keeps_what_testing_every_candidate_then_deduplicating_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The confirm stage tests one pair per renaming class; where that pair fails (here: forced, for the first pair of
    every class that has several), the class offers its next one. The result is what TASO's order -- test every
    candidate, then deduplicate by renaming -- keeps."""
    from graphsub.rules.generate import prune
    from graphsub.rules.generate.prune import CodeTable, Stats, candidate_pairs, confirm, map_chunk

    cfg = EnumConfig(templates=("matmul", "transpose", "add"), max_ops=2)
    merged = merge(run_shards(cfg, num_shards=1))
    cands = candidate_pairs(merged.fps)
    table = CodeTable.of(merged.codes)
    found = map_chunk((cfg, table), cands)
    first_of_class: dict[object, tuple[int, int]] = {}
    sizes: dict[object, int] = {}
    for c, m in zip(cands, found, strict=True):
        if m is not None and m[1] is not None:
            first_of_class.setdefault(m[1], c)
            sizes[m[1]] = sizes.get(m[1], 0) + 1
    failing = {first_of_class[k] for k, n in sizes.items() if n > 1}
    assert failing
    real_test = prune.test_chunk

    def forced(context, items):  # type: ignore[no-untyped-def]
        ok = real_test(context, items)
        return [o and (i, j) not in failing for (i, j, _), o in zip(items, ok, strict=True)]

    monkeypatch.setattr(prune, "test_chunk", forced)
    monkeypatch.setattr(prune, "CONFIRM_CHUNK", 5)
    stats = Stats()
    got = confirm(cfg, merged.codes, cands, 3, stats)
    # the reference: test every candidate, then keep the first passing pair per key, in candidate order
    seen: set[object] = set()
    want = []
    for (i, j), m in zip(cands, found, strict=True):
        if m is None or m[1] is None or m[1] in seen:
            continue
        if forced((cfg, table, 3), [(i, j, m[0])])[0]:
            seen.add(m[1])
            want.append((merged.codes[i], merged.codes[j], m[0]))
    assert [(p.a.encode(), p.b.encode(), p.outputs) for p in got] == want
    assert stats.dropped["fingerprint collision (differs on a test input)"] == len(failing)
    assert stats.confirmed == len(got) == len(sizes)  # every class had a second pair to offer
