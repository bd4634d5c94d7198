"""The ``rows`` rule set (graphsub.rules.library.rows): applied everywhere, the rules write a transformer's
[batch, sequence, hidden] activations as [batch * sequence, hidden] rows -- the layout of the hand-written pass
graphsub.frontends.onnx_rows -- so that the model computes the same outputs in onnxruntime with fewer Reshape kernels
(at least as few as the hand pass leaves); the rules stop where a lift cannot sink or an entry cannot rise."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from graphsub.cost.ort_kernels import kernel_counts
from graphsub.frontends import onnx_rows
from graphsub.frontends.onnx_io import load, to_onnx
from graphsub.ir.builder import Builder, Value
from graphsub.ir.graph import Graph
from graphsub.rules.cleanup import clean
from graphsub.rules.everywhere import rewrite_everywhere
from graphsub.rules.library import get_set
from graphsub.rules.match import find_matches

A, B, C, H = 2, 5, 16, 32  # batch, sequence, hidden, feed-forward width


def _mlp(layers: int = 2) -> Graph:
    """``layers`` pre-LN feed-forward blocks on ``x [A, B, C]`` (``h + W2 gelu(W1 LN(h) + b1) + b2``, GELU written
    out as exporters write it, biases added on either side), then a projection and a softmax over the last axis."""
    rng = np.random.default_rng(0)
    b = Builder("rows_mlp")

    def w(name: str, *shape: int) -> Value:
        return b.weight(name, shape, data=(rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))

    def scalar(name: str, v: float) -> Value:
        return b.weight(name, (), data=np.asarray(v, np.float32))

    h = b.input("x", (A, B, C))
    for k in range(layers):
        n = b.layernorm(h, w(f"g{k}", C), w(f"be{k}", C), axis=-1, epsilon=1e-5)
        u = b.add(b.matmul(n, w(f"w1_{k}", C, H)), w(f"b1_{k}", H))
        g = b.mul(b.mul(u, b.add(b.erf(b.div(u, scalar(f"s2_{k}", np.sqrt(2.0)))), scalar(f"one{k}", 1.0))),
                  scalar(f"half{k}", 0.5))
        d = b.add(w(f"b2_{k}", C), b.matmul(g, w(f"w2_{k}", H, C)))  # the bias first, as TorchScript writes it
        h = b.add(h, d)
    logits = b.add(b.matmul(b.layernorm(h, w("gf", C), w("bf", C), axis=-1), w("wo", C, 8)), w("bo", 8))
    return b.build({"y": b.softmax(logits, axis=-1)})


def _rows(g: Graph) -> tuple[Graph, Counter[str]]:
    """The rows rules applied everywhere, then graphsub's clean-up (reshape chains collapse, weights fold)."""
    out, steps = rewrite_everywhere(g, get_set("rows"))
    out, _ = clean(out)
    return out, Counter(s.rule for s in steps)


def _run(data: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return list(ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds))


def _feeds(data: bytes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    model = onnx.load_from_string(data)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _compare(before: bytes, after: bytes) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Kernel counts of the original, the rules' output and the hand pass's output (asserting equal outputs)."""
    feeds = _feeds(before)
    want = _run(before, feeds)
    hand = onnx_rows.rewrite_bytes(before)
    assert hand is not None
    for data in (after, hand[0]):
        for got, ref in zip(_run(data, feeds), want, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    return tuple(kernel_counts(d, threads=1) for d in (before, after, hand[0]))  # type: ignore[return-value]


def test_a_projection_chain_is_written_on_rows_with_fewer_reshapes() -> None:
    g = _mlp()
    new, used = _rows(g)
    assert {"rows_matmul", "rows_pointwise", "rows_binary", "rows_binary_lhs",
            "rows_hoist_layernorm", "rows_hoist_binary"} <= set(used), used
    # what is left of the rank-3 layout: one reshape in (the input) and one out, before the softmax whose output is
    # the graph's: a lift there would be a copy into the output's buffer (Rule.inner), so rows_softmax does not apply
    ops = Counter(n.op for n in new.nodes.values())
    assert ops["reshape"] == 2, ops
    assert "rows_softmax" not in used and [new.nodes[r.node].op for r in new.outputs] == ["softmax"]
    assert [len(new.type_of(r).shape) for r in new.outputs] == [3]
    assert all(len(new.nodes[n].sig.out_types[0].shape) == 2 for n in new.ops_of("matmul"))
    before, after, hand = _compare(to_onnx(g).SerializeToString(), to_onnx(new).SerializeToString())
    assert after.get("Reshape", 0) < before.get("Reshape", 0), (before, after)
    assert after.get("Reshape", 0) <= hand.get("Reshape", 0), (after, hand)
    assert after.get("Gemm", 0) >= before.get("Gemm", 0) == 5, (before, after)  # every projection still one Gemm
    assert sum(after.values()) <= sum(hand.values()), (after, hand)


def test_the_rules_reach_a_fixed_point() -> None:
    new, _ = _rows(_mlp(1))
    again, steps = rewrite_everywhere(new, get_set("rows"))
    assert steps == () and again is new


def _encoder(tmp_path: Path) -> bytes:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(
        32, 4, dim_feedforward=64, dropout=0.0, batch_first=True), num_layers=2, enable_nested_tensor=False)
    path = tmp_path / "encoder.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(layer.eval(), (torch.randn(1, 12, 32),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return path.read_bytes()


def test_an_exported_encoder_matches_the_hand_pass(tmp_path: Path) -> None:
    data = _encoder(tmp_path)
    g, _ = clean(load(tmp_path / "encoder.onnx"))
    new, used = _rows(g)
    assert used["rows_matmul"] == 6, used  # per layer: the packed input projection and the feed-forward pair
    before, after, hand = _compare(data, to_onnx(new).SerializeToString())
    assert after.get("Reshape", 0) < before.get("Reshape", 0), (before, after)
    assert after.get("Reshape", 0) <= hand.get("Reshape", 0), (after, hand)
    assert sum(after.values()) <= sum(hand.values()), (after, hand)


@pytest.mark.parametrize("pos", [(1, B, C), (B, C)])
def test_an_operand_that_does_not_broadcast_over_rows_stops_the_lift(pos: tuple[int, ...]) -> None:
    """``[2, 5, 16] + pos[1, 5, 16]``: no 2-D operand broadcasts over ``[10, 16]`` the same way, so the lift stays."""
    b = Builder()
    x = b.input("x", (A * B, C))
    lifted = b.reshape(x, shape=(A, B, C))
    g = b.build({"y": b.add(lifted, b.input("pos", pos))})
    rules = {r.name: r for r in get_set("rows")}
    assert find_matches(g, rules["rows_binary"]) == []
    assert rewrite_everywhere(g, get_set("rows"))[1] == ()
