"""``cpu_softmax_nan_guard``: torch's exported ``_safe_softmax`` guard goes where the mask is finite, stays where the
mask can fill a row with -inf (the guard's zeros are then the model's real output)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.frontends.onnx_export import export_graph
from graphsub.frontends.onnx_import import from_onnx
from graphsub.rules.apply import apply
from graphsub.rules.library import get_set
from graphsub.rules.match import find_all

FINITE = [r for r in get_set("default") if r.name in ("cpu_softmax_nan_guard", "cpu_softmax_nan_guard_lhs")]
INF = [r for r in get_set("default") if r.name.startswith("cpu_softmax_nan_guard_inf")]


def _attention(fill: float, mask_first: bool = False) -> onnx.ModelProto:
    """scores = q @ k; probs = guard(softmax(scores + where(keep, 0, fill))); out = probs @ v (HF/dynamo layout)."""
    consts = [numpy_helper.from_array(np.zeros((), np.float32), "zero"),
              numpy_helper.from_array(np.full((), fill, np.float32), "fill")]
    add_in = ["mask", "scores"] if mask_first else ["scores", "mask"]
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["scores"]),
        helper.make_node("Where", ["keep", "zero", "fill"], ["mask"]),
        helper.make_node("Add", add_in, ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("IsNaN", ["probs"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "probs"], ["safe"]),
        helper.make_node("MatMul", ["safe", "v"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "attn",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 5, 4]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 2, 4, 5]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 2, 5, 4]),
         helper.make_tensor_value_info("keep", TensorProto.BOOL, [1, 1, 5, 5])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 5, 4])], initializer=consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    keep = rng.random((1, 1, 5, 5)) < 0.6
    keep[0, 0, 2] = False  # one query row with every key masked
    return {"q": rng.standard_normal((1, 2, 5, 4), dtype=np.float32),
            "k": rng.standard_normal((1, 2, 4, 5), dtype=np.float32),
            "v": rng.standard_normal((1, 2, 5, 4), dtype=np.float32), "keep": keep}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, feeds)[0])


@pytest.mark.parametrize("mask_first", [False, True])
def test_guard_removed_under_a_finite_mask_and_outputs_unchanged(mask_first: bool) -> None:
    model = _attention(float(np.finfo(np.float32).min), mask_first)
    graph = from_onnx(model)
    matches = find_all(graph, FINITE + INF)
    assert len(matches) == 1 and matches[0].rule in FINITE
    out = apply(graph, matches[0]).graph
    assert not list(out.ops_of("isnan"))
    assert len(list(out.ops_of("where"))) == 1  # the mask's select stays
    rewritten = export_graph(out)
    feeds = _feeds()
    want = _run(model, feeds)
    got = _run(rewritten, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.isfinite(got).all()  # the fully masked row is uniform, never NaN: the guard never fired


@pytest.mark.parametrize("mask_first", [False, True])
def test_minus_inf_mask_spelled_finite_and_fully_masked_rows_still_zero(mask_first: bool) -> None:
    """With -inf in the mask a fully masked row is NaN before the guard and zeros after it: the finite-mask rule
    must not apply; the -inf rule spells the mask with finfo.min and zeroes those rows by a mul instead."""
    model = _attention(float("-inf"), mask_first)
    graph = from_onnx(model)
    assert find_all(graph, FINITE) == []
    matches = find_all(graph, INF)
    assert len(matches) == 1
    out = apply(graph, matches[0]).graph
    assert not list(out.ops_of("isnan"))
    feeds = _feeds()
    want = _run(model, feeds)
    assert np.isfinite(want).all() and np.all(want[0, :, 2] == 0.0)  # what the guard is for
    got = _run(export_graph(out), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.all(got[0, :, 2] == 0.0)
