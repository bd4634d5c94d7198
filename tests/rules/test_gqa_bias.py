"""``ort_gqa_causal_bias*`` (:mod:`graphsub.rules.library.gqa_bias`): a decoder's bias ``where(And(causal, x), a, w)``
is written ``where(x, a, w)`` broadcast over the query rows where GroupQueryAttention masks the later keys itself --
the premise checked on onnxruntime's kernel; the condition's split proven only for a constant part that is the causal
mask (a sliding window, a mask that drops nothing, a run-time part per query row are left alone)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.frontends.onnx_io import load
from graphsub.frontends.ort import make_session, run_session
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.rules.library.gqa import _future
from graphsub.rules.library.gqa_bias import causal_part

B, S, P, N, NKV, HD = 2, 3, 4, 4, 2, 16
T = P + S
LOWEST = float(np.finfo(np.float32).min)


def _gqa(bias_shape: tuple[int, ...]) -> bytes:
    names = ["q", "k", "v", "pk", "pv", "sl", "ts", "", "", "", "ab", "", "", "", "", "", "qs"]
    shapes = {"q": [B, S, N * HD], "k": [B, S, NKV * HD], "v": [B, S, NKV * HD], "pk": [B, NKV, P, HD],
              "pv": [B, NKV, P, HD], "ab": list(bias_shape)}
    node = helper.make_node("GroupQueryAttention", names, ["y", "prk", "prv"], domain="com.microsoft",
                            num_heads=N, kv_num_heads=NKV)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    inputs += [helper.make_tensor_value_info("sl", TensorProto.INT32, [B]),
               helper.make_tensor_value_info("ts", TensorProto.INT32, []),
               helper.make_tensor_value_info("qs", TensorProto.INT32, [B])]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def test_onnxruntimes_kernel_reads_no_bias_after_a_rows_position() -> None:
    """The same output with the exporters' bias (causal and padding) and with the padding alone over every row."""
    rng = np.random.default_rng(0)
    pad = np.ones((B, 1, 1, T), bool)
    pad[1, 0, 0, :2] = False  # batch row 1 left-padded by two keys
    causal = ~_future(S, T)[None, None]
    full = np.where(causal & pad, 0.0, LOWEST).astype(np.float32)
    padding = np.broadcast_to(np.where(pad, 0.0, LOWEST).astype(np.float32), full.shape).copy()
    shapes = {"q": (B, S, N * HD), "k": (B, S, NKV * HD), "v": (B, S, NKV * HD), "pk": (B, NKV, P, HD),
              "pv": (B, NKV, P, HD)}
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feeds |= {"sl": np.full(B, T - 1, np.int32), "ts": np.array(T, np.int32), "qs": np.full(B, S, np.int32)}
    session = make_session(_gqa(full.shape))
    want = run_session(session, feeds | {"ab": full})
    have = run_session(session, feeds | {"ab": padding})
    assert not np.array_equal(full, padding)
    for w, h in zip(want, have, strict=True):
        np.testing.assert_array_equal(h, w)


def _condition(tmp_path: Path, const: np.ndarray, x_shape: tuple[int, ...]) -> tuple[Graph, Ref, Ref]:
    """An imported graph computing ``And(const, x)``: the graph, the And's value and ``x``'s."""
    c = numpy_helper.from_array(const, "c")
    node = helper.make_node("And", ["c", "x"], ["m"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.BOOL, list(x_shape))],
                              [helper.make_tensor_value_info("m", TensorProto.BOOL, None)], initializer=[c])
    path = tmp_path / "and.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    g = load(path, generic=True)
    [and_id] = [n for n in g.nodes if g.nodes[n].sig.op == "opaque"]
    x = next(n for n in g.nodes if g.nodes[n].sig.op == "input")
    return g, Ref(and_id, 0), Ref(x, 0)


def test_the_run_time_part_of_a_causal_condition_is_found(tmp_path: Path) -> None:
    g, cond, x = _condition(tmp_path, ~_future(S, T)[None, None], (B, 1, 1, T))
    assert causal_part(g, cond, S, T) == x
    assert causal_part(g, cond, S, T, exact=True) == x


@pytest.mark.parametrize("const,x_shape,why", [
    ("window", (B, 1, 1, T), "drop a key before"),
    ("all", (B, 1, 1, T), "not the causal mask"),
    ("causal", (B, 1, S, T), "depends on the query row"),
])
def test_a_condition_that_is_not_causal_and_padding_is_left_alone(tmp_path: Path, const: str,
                                                                   x_shape: tuple[int, ...], why: str) -> None:
    mask = ~_future(S, T)
    if const == "window":  # a sliding window of two keys: drops keys a causal mask keeps
        mask &= np.arange(T)[None, :] > (T - S) + np.arange(S)[:, None] - 2
    elif const == "all":
        mask = np.ones_like(mask)
    g, cond, _ = _condition(tmp_path, mask[None, None], x_shape)
    got = causal_part(g, cond, S, T)
    assert isinstance(got, str) and why in got


def test_a_mask_true_at_a_later_key_is_not_exactly_causal(tmp_path: Path) -> None:
    """What ``ort_gqa_kept_rows*`` needs of the condition (its row factor counts the keys the mask keeps)."""
    mask = ~_future(S, T)
    mask[0, -1] = True  # row 0 also keeps the last key
    g, cond, x = _condition(tmp_path, mask[None, None], (B, 1, 1, T))
    assert causal_part(g, cond, S, T) == x
    assert isinstance(causal_part(g, cond, S, T, exact=True), str)
