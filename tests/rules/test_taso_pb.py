"""TASO's graph_subst.pb: the wire-format reader, the loader and the 133 converted rules."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from graphsub import zoo
from graphsub.errors import RuleError
from graphsub.ir import Builder, Graph
from graphsub.ir.validate import validate
from graphsub.rules.apply import apply
from graphsub.rules.match import explain, find_all, find_matches
from graphsub.rules.rule import Example
from graphsub.rules.soundness.numeric import check_example, instantiate, verify_rule
from graphsub.rules.taso_pb import (
    ENV_VAR,
    PACKAGED_PB,
    Operator,
    PbRule,
    RuleCollection,
    collection_summary,
    decode_collection,
    default_pb_path,
    read_collection,
)
from graphsub.rules.taso_pb_convert import load_taso_pb

PB = PACKAGED_PB  # shipped inside the package: nothing outside the repository is read
RESULT = load_taso_pb(PB)
RULES = RESULT.rules
BY_NAME = {r.name: r for r in RULES}

# ----------------------------------------------------------------------------- a tiny encoder


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _int(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def _msg(num: int, body: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(body)) + body


def _op(type_: int, inputs: Sequence[tuple[int, int]], params: Sequence[tuple[int, int]] = ()) -> bytes:
    body = _int(1, type_)
    body += b"".join(_msg(2, _int(1, o) + _int(2, t)) for o, t in inputs)
    return body + b"".join(_msg(3, _int(1, k) + _int(2, v)) for k, v in params)


def _rule(src: Sequence[bytes], dst: Sequence[bytes], outs: Sequence[tuple[int, int, int, int]]) -> bytes:
    body = b"".join(_msg(1, s) for s in src) + b"".join(_msg(2, d) for d in dst)
    return body + b"".join(_msg(3, b"".join(_int(i + 1, v) for i, v in enumerate(o))) for o in outs)


def _collection(rules: Sequence[bytes]) -> bytes:
    return b"".join(_msg(1, r) for r in rules)


def _encode(coll: RuleCollection) -> bytes:
    def op(o: Operator) -> bytes:
        return _op(o.type, [(t.op_id, t.ts_id) for t in o.inputs], [(p.key, p.value) for p in o.params])

    return _collection([_rule([op(o) for o in r.src], [op(o) for o in r.dst],
                              [(m.src_op, m.dst_op, m.src_ts, m.dst_ts) for m in r.outputs]) for r in coll.rules])


ADD, MUL, MATMUL, POOL, SPLIT = 16, 17, 18, 6, 13
#: a + b -> b + a, mapped output 0 -> 0
COMMUTE = _rule([_op(ADD, [(-1, 0), (-2, 0)])], [_op(ADD, [(-2, 0), (-1, 0)])], [(0, 0, 0, 0)])

# ----------------------------------------------------------------------------- reader


def test_reads_the_133_rules_of_the_30262_byte_file() -> None:
    assert PB is not None and PB.stat().st_size == 30262
    coll = read_collection(PB)
    assert len(coll.rules) == 133 and not coll.errors
    assert [r.index for r in coll.rules] == list(range(133))
    s = collection_summary(coll)
    assert s["op_types"] == {"CONCAT": 182, "MATMUL": 144, "EW_ADD": 140, "EW_MUL": 134, "CONV2D": 106,
                             "RELU": 39, "SPLIT": 10}
    assert s["side_sizes"] == {(3, 3): 97, (2, 3): 18, (3, 2): 12, (2, 2): 5, (2, 1): 1}
    assert s["mapped_outputs"] == {1: 120, 2: 13}
    assert _encode(coll) == PB.read_bytes()  # re-encoding gives the file back byte for byte
    convs = [o for r in coll.rules for o in (*r.src, *r.dst) if o.type_name == "CONV2D"]
    assert {(o.param(4), o.param(5), o.param(6), o.param(7), o.param(8)) for o in convs} == {(3, 3, 1, 1, 0)}
    assert coll.rules[63].describe().startswith("RELU(CONV2D(v7, v19)); CONV2D(v8, v10)")


def test_negative_int32_varints_and_unknown_fields() -> None:
    tensor = _int(1, -7) + _int(2, 0)
    assert len(_int(1, -7)) == 11  # key + 10-byte varint
    unknown = _int(9, 5) + _msg(10, b"xyz") + _varint(11 << 3 | 5) + b"\0\0\0\0" + _varint(12 << 3 | 1) + b"\0" * 8
    op = _int(1, ADD) + unknown + _msg(2, tensor + unknown) + _msg(2, _int(1, -2147483648) + _int(2, 0))
    coll = decode_collection(_collection([_msg(1, op) + unknown]) + unknown)
    (rule,) = coll.rules
    assert [(t.op_id, t.ts_id) for t in rule.src[0].inputs] == [(-7, 0), (-2147483648, 0)]
    assert rule.dst == () and rule.outputs == ()


@pytest.mark.parametrize("data, match", [
    (b"\x0a\x05\x0a\x03", "runs past the end"),
    (b"\xff" * 12, "varint"),
    (b"\x0b", "wire type"),
    (b"\x00\x01", "field number 0"),
    (_collection([_msg(1, _op(ADD, [(-1, 0)]))])[:-1], "past the end"),
    (_collection([_msg(1, _int(1, 1 << 40))]), "out of range"),
    (_collection([_msg(1, _msg(2, _int(1, -1)))]), "missing required field"),
    (_collection([_msg(1, _int(2, 3))]), "missing required field"),
])
def test_malformed_data_raises_rule_error(data: bytes, match: str) -> None:
    with pytest.raises(RuleError, match=match):
        decode_collection(data)


def test_truncated_or_garbled_file_never_crashes(tmp_path: Path) -> None:
    assert PB is not None
    data = PB.read_bytes()
    rng = random.Random(0)
    for cut in [0, 1, 2, 100, len(data) // 2, len(data) - 1, *rng.sample(range(len(data)), 40)]:
        path = tmp_path / f"cut{cut}.pb"
        path.write_bytes(data[:cut])
        try:
            coll = read_collection(path)
        except RuleError:
            continue
        assert len(coll.rules) < 133  # cut exactly between two rules
    for seed in range(40):
        r = random.Random(seed)
        garbage = bytes(r.randrange(256) for _ in range(r.randrange(1, 400)))
        flipped = bytearray(data)
        for _ in range(5):
            flipped[r.randrange(len(data))] = r.randrange(256)
        for k, blob in enumerate((garbage, bytes(flipped))):
            path = tmp_path / f"g{seed}_{k}.pb"
            path.write_bytes(blob)
            try:
                if seed < 3:
                    load_taso_pb(path)  # rules that no longer make sense are rejected, never raised
                else:
                    read_collection(path, lenient=True)
            except RuleError:
                pass
    with pytest.raises(RuleError, match="cannot read"):
        read_collection(tmp_path / "missing.pb")


def test_bad_rules_are_rejected_with_reasons(tmp_path: Path) -> None:
    rules = [
        COMMUTE,
        _rule([_op(POOL, [(-1, 0)])], [_op(ADD, [(-1, 0), (-1, 0)])], [(0, 0, 0, 0)]),  # unsupported op
        _rule([_op(ADD, [(3, 0), (-1, 0)])], [_op(ADD, [(-1, 0), (-1, 0)])], [(0, 0, 0, 0)]),  # bad reference
        _rule([_op(ADD, [(-1, 0), (-2, 0)])], [_op(ADD, [(-1, 0), (-3, 0)])], [(0, 0, 0, 0)]),  # unbound var
        _rule([_op(ADD, [(-1, 0), (-2, 0)])], [_op(ADD, [(-2, 0), (-1, 0)])], [(0, 0, 5, 0)]),  # bad mapping
        _rule([_op(ADD, [(-1, 0), (-2, 0)])], [_op(ADD, [(-2, 0), (-1, 0)])], []),  # no outputs
        _msg(1, _msg(2, _int(1, -1))),  # malformed: Tensor without tsId
        _rule([_op(ADD, [(-1, 0), (-2, 0)]), _op(MUL, [(-1, 0), (-2, 0)])],  # dangling mul, droppable
              [_op(ADD, [(-2, 0), (-1, 0)])], [(0, 0, 0, 0)]),
        _rule([_op(ADD, [(-1, 0), (-2, 0)]), _op(MUL, [(-1, 0), (-3, 0)])],  # dangling mul, needed
              [_op(ADD, [(-3, 0), (-1, 0)])], [(0, 0, 0, 0)]),
        _rule([_op(SPLIT, [(-1, 0)], [(11, 0), (2, 2)])], [_op(ADD, [(-1, 0), (-1, 0)])], [(0, 0, 0, 0)]),
        _rule([_op(MATMUL, [(-1, 0), (-2, 0)]), _op(ADD, [(0, 0), (-1, 0)])],  # ranks 2 vs 4: no shapes
              [_op(3, [(-1, 0), (-1, 0)]), _op(ADD, [(0, 0), (-1, 0)])], [(1, 1, 0, 0)]),
    ]
    path = tmp_path / "bad.pb"
    path.write_bytes(_collection(rules))
    res = load_taso_pb(path)
    assert [r.name for r in res.rules] == ["taso_pb_000", "taso_pb_007"]
    reasons = dict(res.rejected)
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6, 8, 9, 10]
    for i, text in [(1, "POOL2D_MAX|OP6"), (2, "earlier op"), (3, "does not bind"), (4, "does not exist"),
                    (5, "no mapped outputs"), (6, "malformed"), (8, "only they read"), (9, "SPLIT in the source"),
                    (10, "rank")]:
        assert any(t in reasons[i] for t in text.split("|")), (i, reasons[i])
    assert "dropped" in res.rules[1].doc and len(res.rules[1].source.nodes) == 1
    assert all(verify_rule(r).passed for r in res.rules)
    assert load_taso_pb(path) is res  # cached per path
    assert res.summary()["converted"] == 2


def test_default_pb_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pb = tmp_path / "x.pb"
    pb.write_bytes(_collection([COMMUTE]))
    monkeypatch.setenv(ENV_VAR, str(pb))
    assert default_pb_path() == pb
    assert [r.name for r in load_taso_pb().rules] == ["taso_pb_000"]
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope.pb"))
    with pytest.raises(RuleError, match=ENV_VAR):
        default_pb_path()
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)
    assert default_pb_path() == PACKAGED_PB  # the packaged copy, whatever the current directory


def test_the_packaged_file_is_tasos_with_its_license() -> None:
    import hashlib

    assert hashlib.sha256(PACKAGED_PB.read_bytes()).hexdigest() == (
        "1a03c0cee64c434dc98bfd92fd2cd705d99a79d3b0089dc724c882b7b32a08b3")  # jiazhihao/TASO at f11782c
    assert "Apache License" in (PACKAGED_PB.parent / "LICENSE").read_text()
    assert "f11782c4db180ad7d1e7ff7f4bb82e574ac3b6b8" in (PACKAGED_PB.parent / "NOTICE").read_text()
    assert len(RULES) + len(RESULT.rejected) == 133


# ----------------------------------------------------------------------------- converted rules


def test_all_133_rules_convert() -> None:
    assert RESULT is not None
    assert RESULT.rejected == []
    assert [r.name for r in RULES] == [f"taso_pb_{i:03d}" for i in range(133)]
    for i, r in enumerate(RULES):
        assert r.origin == "taso-pb" and r.exact and r.location == f"graph_subst.pb#{i}"
        assert r.doc.startswith(f"TASO graph_subst.pb rule {i}: ") and " -> " in r.doc
        assert len(r.examples) >= 3 and len({tuple(sorted(e.types.items())) for e in r.examples}) == len(r.examples)
        assert all(not v.weight for v in r.source.vars)
    assert load_taso_pb(PB) is load_taso_pb(PB)
    assert RESULT.summary()["converted"] == 133
    disconnected = [r.name for r in RULES if "disconnected" in r.tags]
    assert disconnected == [f"taso_pb_{i:03d}" for i in (63, 65, 70, 81, 95, 120)]
    assert BY_NAME["taso_pb_000"].doc.endswith("matmul(matmul(v1, v4), v5) -> matmul(v1, matmul(v4, v5))")
    # rules 32-35 etc. feed one tensor as conv input and weight
    assert BY_NAME["taso_pb_032"].examples[0].types["v10"] == (2, 4, 3, 3)


@pytest.mark.parametrize("name", [f"taso_pb_{i:03d}" for i in range(133)])
def test_rule_verifies(name: str) -> None:
    rep = verify_rule(BY_NAME[name])
    assert rep.passed, rep.reason
    assert rep.mode == "exact"


def _graph_of(rule_name: str, types: dict[str, tuple[int, ...]]) -> Graph:
    return instantiate(BY_NAME[rule_name].source, Example(types=types))


def test_no_broadcasting_in_elementwise_ops() -> None:
    # concat(v1 + v2, v4 + v5, axis 0): with broadcast v2/v5 the target's concat(v2, v5) would differ
    g = _graph_of("taso_pb_082", {"v1": (2, 4), "v2": (1, 4), "v4": (2, 4), "v5": (1, 4)})
    assert find_matches(g, BY_NAME["taso_pb_082"]) == []
    assert "TASO needs equal shapes" in str(explain(g, BY_NAME["taso_pb_082"], max(g.ops_of("concat"))))


def test_grouped_conv_merges_need_aligned_groups() -> None:
    rule = BY_NAME["taso_pb_099"]  # concat(conv(a, w1), conv(b, w2)) -> conv(concat(a, b), concat(w1, w2))
    bad = _graph_of("taso_pb_099", {"v7": (1, 4, 5, 5), "v10": (2, 4, 3, 3), "v8": (1, 4, 5, 5), "v11": (6, 4, 3, 3)})
    assert find_matches(bad, rule) == []  # a 2-group conv would mix the two convs' output channels
    grouped = {"v7": (1, 4, 5, 5), "v10": (4, 2, 3, 3), "v8": (1, 4, 5, 5), "v11": (4, 2, 3, 3)}
    ok, mode, _, reason = check_example(rule, Example(types=grouped))
    assert ok and mode == "exact", reason
    # linearity holds for any groups: conv(x, w1 + w2) with depthwise weights
    ok, _, _, reason = check_example(BY_NAME["taso_pb_061"], Example(
        types={"v7": (1, 6, 5, 5), "v10": (6, 1, 3, 3), "v11": (6, 1, 3, 3)}))
    assert ok, reason


def test_split_sizes_come_from_the_split_tree() -> None:
    rule = BY_NAME["taso_pb_077"]  # x@w1, x@w2 -> split(x @ concat(w1, w2, axis 1), axis 1)
    b = Builder("g")
    x = b.input("x", (2, 4))
    w1, w2 = b.weight("w1", (4, 3)), b.weight("w2", (4, 5))
    g = b.build({"a": b.matmul(x, w1), "b": b.matmul(x, w2)})
    matches = find_matches(g, rule)
    assert len(matches) == 2  # (a, b) and (b, a): patterns are matched without symmetry breaking
    g2 = apply(g, matches[0]).graph
    (split,) = g2.ops_of("split")
    assert g2.nodes[split].sig.attr["sizes"] == (3, 5)
    # a 3-D batch of activations is outside TASO's 2-D matmul semantics
    b = Builder("g3")
    x3 = b.input("x", (2, 2, 4))
    g3 = b.build({"a": b.matmul(x3, b.weight("w1", (4, 3))), "b": b.matmul(x3, b.weight("w2", (4, 5)))})
    assert find_matches(g3, rule) == []


@pytest.mark.parametrize("model, at_least", [("nasrnn", 500), ("bert_corrected", 40), ("squeezenet", 30),
                                             ("nasnet_a", 50), ("sru", 10)])
def test_matches_on_zoo_models_are_sound(model: str, at_least: int) -> None:
    g = zoo.get(model)
    matches = find_all(g, RULES)
    assert len(matches) >= at_least
    seen: set[tuple[str, tuple[tuple[int, ...], ...]]] = set()
    for m in matches:  # re-verify each (rule, variable shapes) on a graph of exactly those shapes
        key = (m.rule.name, tuple(g.type_of(r).shape for _, r in m.vars))
        if key in seen:
            continue
        seen.add(key)
        ok, _, _, reason = check_example(m.rule, Example(types={v: g.type_of(r).shape for v, r in m.vars}))
        assert ok, (key, reason)
    sub = apply(g, matches[0])
    assert matches[0].node_ids <= set(sub.removed) and sub.added
    validate(sub.graph)


def test_pbrule_dataclasses() -> None:
    (rule,) = decode_collection(_collection([COMMUTE])).rules
    assert isinstance(rule, PbRule) and rule.index == 0
    assert rule.describe() == "EW_ADD(v1, v2) -> EW_ADD(v2, v1)"
    assert rule.src[0].param(9) is None and rule.src[0].param(9, 7) == 7
