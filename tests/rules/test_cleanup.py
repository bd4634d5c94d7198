"""graphsub's general clean-up (graphsub.rules.cleanup): no-ops and chains removed, repeated subexpressions merged,
constants folded (never a quantized weight, never a random op merged), in one linear-time pass whose result computes
what the input computes; optimize's searches start from it, and a sequence that starts with it replays."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.execute import run
from graphsub.frontends.onnx_io import load
from graphsub.frontends.ort import make_session, run_session
from graphsub.ir.builder import Builder
from graphsub.ir.graph import Graph
from graphsub.rules import everywhere, match
from graphsub.rules.cleanup import CLEANUP, clean, cse
from graphsub.rules.library import get_set
from graphsub.rules.replay import RuleStep, replay

INT64_MAX = 2**63 - 1


def _noisy() -> Graph:
    """What exporters write around a run-time size: no-op pad/slice/expand/cast, view chains, an identity, and the
    same product computed twice."""
    rng = np.random.default_rng(0)
    b = Builder()
    x = b.input("x", (2, 4, 6))
    w = b.weight("w", (6, 6), data=rng.standard_normal((6, 6)).astype(np.float32))
    h = b.pad(b.identity(x), pads=(0,) * 6)
    h = b.slice(h, starts=[0], ends=[INT64_MAX], axes=[2], steps=[1])
    h = b.cast(b.expand(h, shape=(2, 4, 6)), to="float32")
    h = b.reshape(b.unsqueeze(h, axes=(0,)), shape=(8, 6))
    a, c = b.matmul(h, w), b.matmul(h, w)  # the same product twice
    return b.build({"y": b.add(b.relu(a), c)})


def test_clean_removes_the_noops_and_merges_the_repeats() -> None:
    g = _noisy()
    out, steps = clean(g)
    ops = collections.Counter(n.op for n in out.nodes.values())
    assert ops == {"input": 1, "weight": 1, "reshape": 1, "matmul": 1, "relu": 1, "add": 1}, ops
    rules = {s.rule for s in steps}
    assert {"cleanup_pad_noop", "cleanup_slice_noop", "cleanup_expand_noop", "cleanup_cast_noop",
            "cleanup_view_chain", "cpu_identity_remove", "cse"} <= rules, rules
    x = {"x": np.random.default_rng(1).standard_normal((2, 4, 6)).astype(np.float32)}
    np.testing.assert_array_equal(run(out, x)["y"], run(g, x)["y"])
    assert clean(out) == (out, ())  # a fixed point


def test_rules_apply_everywhere_with_one_scan_of_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver scans the graph once and after each substitution only matches near it (linear in the graph)."""
    b = Builder()
    h = b.input("x", (2, 3))
    for _ in range(200):
        h = b.relu(b.reshape(b.reshape(b.identity(h), shape=(6,)), shape=(2, 3)))
    g = b.build(h)
    calls = {"find_all": 0, "near": 0}
    find_all, near = everywhere.find_all, everywhere.matches_near

    def counted_find_all(*a: object, **k: object) -> list[match.Match]:
        calls["find_all"] += 1
        return find_all(*a, **k)  # type: ignore[arg-type]

    def counted_near(*a: object, **k: object) -> list[match.Match]:
        calls["near"] += 1
        return near(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(everywhere, "find_all", counted_find_all)
    monkeypatch.setattr(everywhere, "matches_near", counted_near)
    out, steps = everywhere.rewrite_everywhere(g, get_set("cleanup"))
    assert collections.Counter(n.op for n in out.nodes.values()) == {"input": 1, "relu": 1}  # relu(relu(x)) too
    assert calls == {"find_all": 1, "near": len(steps)} and len(steps) == 2 * 200 + 199


def test_a_sequence_that_starts_with_the_cleanup_replays() -> None:
    g = _noisy()
    assert replay(g, [], [RuleStep(CLEANUP, ())]).structural_hash() == clean(g)[0].structural_hash()


def _onnx(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], path: Path, opset: int = 17) -> Path:
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def test_random_ops_are_never_merged(tmp_path: Path) -> None:
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["r1"], seed=1.0),
             helper.make_node("RandomUniformLike", ["x"], ["r2"], seed=1.0),
             helper.make_node("Sub", ["r1", "r2"], ["d"]), helper.make_node("Add", ["x", "d"], ["y"])]
    g = load(_onnx(nodes, [], tmp_path / "r.onnx"))
    out, n = cse(g)
    assert n == 0 and out is g


def test_a_quantized_weight_stays_quantized(tmp_path: Path) -> None:
    """DequantizeLinear of an int8 constant is a quantized weight (onnxruntime fuses it with its MatMul): not
    folded into float32, nor is what is computed from it."""
    w = numpy_helper.from_array(np.arange(-8, 8, dtype=np.int8).reshape(4, 4), "w")
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"]),
             helper.make_node("Transpose", ["wf"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    g = load(_onnx(nodes, [w, scale, zero], tmp_path / "q.onnx"))
    out, _ = clean(g)
    kept = [n.sig.attr.get("op_type") for n in out.nodes.values() if n.op == "opaque"]
    assert kept == ["DequantizeLinear"] and any(n.op == "transpose" for n in out.nodes.values())


def test_equal_constants_merge_and_constant_math_folds() -> None:
    b = Builder()
    x = b.input("x", (3,))
    one = np.ones(3, np.float32)
    w1, w2 = b.weight("w1", (3,), data=one), b.weight("w2", (3,), data=one.copy())
    k = b.weight("k", (3,), data=np.full(3, 2.0, np.float32))
    g = b.build({"y": b.add(b.mul(x, b.add(w1, k)), b.mul(x, b.add(w2, k)))})
    out, steps = clean(g)
    counts = collections.Counter(s.rule for s in steps)  # w1 + k and w2 + k fold into one constant; one product
    assert counts["fold"] >= 1 and counts["cse"] >= 1
    assert collections.Counter(n.op for n in out.nodes.values()) == {"input": 1, "weight": 1, "mul": 1, "add": 1}
    xs = {"x": np.arange(3, dtype=np.float32)}
    np.testing.assert_array_equal(run(out, xs)["y"], run(g, xs)["y"])


def test_large_weights_merge_only_when_equal_everywhere() -> None:
    """Large weights are digested on a sample (:func:`graphsub.rules.cleanup.sample_digest`): two that agree on it
    but differ elsewhere stay apart; two equal ones merge."""
    from graphsub.rules.cleanup import SAMPLE

    n = 4 * SAMPLE
    base = np.arange(n, dtype=np.float32)
    off_sample = base.copy()
    off_sample[1] += 1.0  # the sample reads every fourth element: 0, 4, 8, ...
    for other, merged in ((base.copy(), True), (off_sample, False)):
        b = Builder()
        x = b.input("x", (n,))
        w1, w2 = b.weight("w1", (n,), data=base), b.weight("w2", (n,), data=other)
        g = b.build({"y": b.add(b.mul(x, w1), b.mul(x, w2))})
        out, k = cse(g)
        assert (k >= 1) is merged
        xs = {"x": np.ones(n, np.float32)}
        np.testing.assert_array_equal(run(out, xs)["y"], run(g, xs)["y"])


@pytest.mark.parametrize("order", ["rows", "shuffled"])
def test_a_lookup_of_every_row_in_order_is_the_tensor_itself(order: str) -> None:
    """The TorchScript exporter's ``mask[b, j]`` lookup (``gather(flatten(mask), b*T + j)``) is the mask with unit
    axes (``cleanup_gather_rows_in_order``); indices in another order are a real gather, left alone."""
    idx = np.arange(16, dtype=np.int64).reshape(2, 1, 1, 8)
    if order == "shuffled":
        idx = idx[::-1].copy()
    b = Builder()
    x = b.input("x", (2, 8))
    g = b.build({"y": b.gather(b.flatten(x, axis=2), b.weight("idx", idx.shape, data=idx, dtype="int64"), axis=0)})
    out, steps = clean(g)
    ops = collections.Counter(n.op for n in out.nodes.values())
    if order == "rows":
        assert "cleanup_gather_rows_in_order" in {s.rule for s in steps} and ops["gather"] == 0
    else:
        assert ops["gather"] == 1
    feed = {"x": np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)}
    np.testing.assert_array_equal(run(out, feed)["y"], run(g, feed)["y"])


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_the_dynamo_exporters_mask_lookup_is_the_mask_itself(batch_dims: int, tmp_path: Path) -> None:
    """``GatherND(mask, pairs)`` at every (batch, key) pair in order, as the dynamo exporter looks up an attention mask,
    imports as ``gather_nd`` and is the mask with unit axes (``cleanup_gather_nd_in_order``); onnxruntime runs the
    written model as the file. ``batch_dims`` 1 (not modelled) stays an opaque node."""
    pairs = np.indices((2, 8)).transpose(1, 2, 0).reshape(2, 1, 1, 8, 2).astype(np.int64)
    idx = pairs if batch_dims == 0 else pairs[..., 1:].reshape(2, 8, 1)
    node = helper.make_node("GatherND", ["mask", "idx"], ["y"], batch_dims=batch_dims)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(idx, "idx")])
    path = tmp_path / "lookup.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    g = load(path)
    ops = collections.Counter(n.op for n in g.nodes.values())
    assert ops["gather_nd" if batch_dims == 0 else "opaque"] == 1
    out, steps = clean(g)
    feed = {"mask": np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)}
    want = run_session(make_session(str(path)), feed)[0]
    np.testing.assert_array_equal(run(g, feed)["y"], want)
    if batch_dims == 0:
        assert "cleanup_gather_nd_in_order" in {s.rule for s in steps}
        assert collections.Counter(n.op for n in out.nodes.values())["gather_nd"] == 0
        np.testing.assert_array_equal(run(out, feed)["y"], want)
