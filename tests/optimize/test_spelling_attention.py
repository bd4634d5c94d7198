"""The spelling pass on a pre-LN attention block as onnxscript's ``optimize_for_ort`` leaves it: SkipLayerNormalization
whose sum output is the next residual, and MultiHeadAttention reading its projections through a head-split reshape
round trip. The pass unfuses the former and packs the latter into onnxruntime's Attention; the result runs in
onnxruntime and equals the original."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.frontends import onnx_io
from graphsub.frontends.onnx_export import export_graph
from graphsub.optimize.pipeline import _spelling_rules
from graphsub.optimize.portfolio import rewrite_everywhere

S, D, H = 6, 16, 2


def _block(tmp_path: Path, mean_used: bool = False) -> Path:
    rng = np.random.default_rng(0)
    inits = {n: rng.standard_normal(s).astype(np.float32) * 0.3 for n, s in
             [("g", (D,)), ("be", (D,)), ("wq", (D, D)), ("wk", (D, D)), ("wv", (D, D)),
              ("bq", (D,)), ("bk", (D,)), ("bv", (D,))]}
    inits["heads"] = np.array([1, S, H, D // H], np.int64)
    inits["flat"] = np.array([1, S, D], np.int64)
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "r", "g", "be"], ["ln", "mean" if mean_used else "",
                              "", "h"], domain="com.microsoft", epsilon=1e-5)]
    for n in "qkv":
        nodes += [helper.make_node("MatMul", ["ln", f"w{n}"], [f"mm_{n}"]),
                  helper.make_node("Add", [f"b{n}", f"mm_{n}"], [f"p_{n}"]),
                  helper.make_node("Reshape", [f"p_{n}", "heads"], [f"r4_{n}"]),
                  helper.make_node("Reshape", [f"r4_{n}", "flat"], [n])]
    nodes += [helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft", num_heads=H),
              helper.make_node("Add", ["o", "h"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, D])]
    if mean_used:
        outs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, S, D])
                                               for n in ("x", "r")], outs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    path = tmp_path / "block.onnx"
    onnx.save(model, path)
    return path


def _run(model: bytes | str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(["y"], feeds)[0])


def test_pre_ln_block_is_unfused_and_packed(tmp_path: Path) -> None:
    path = _block(tmp_path)
    g = onnx_io.load(path)
    ops = Counter(n.sig.op for n in g.nodes.values())
    assert ops["ms_skip_layernorm_sum"] == 1 and ops["ms_mha"] == 1 and ops["opaque"] == 0
    spelled, steps = rewrite_everywhere(g, _spelling_rules())
    rules = Counter(s.rule for s in steps)
    assert rules == {"ortsp_unfuse_skip_layernorm_sum": 1, "cpu_reshape_reshape": 3, "ortsp_attention_bbb_lhs": 1}
    assert rewrite_everywhere(spelled, _spelling_rules())[1] == ()  # a fixed point
    model = export_graph(spelled)
    types = Counter(n.op_type for n in model.graph.node)
    assert types["Attention"] == 1 and types["Sum"] == 1 and types["LayerNormalization"] == 1
    assert not set(types) & {"MultiHeadAttention", "SkipLayerNormalization", "MatMul"}
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((1, S, D)).astype(np.float32) for n in ("x", "r")}
    want = _run(str(path), feeds)
    got = _run(model.SerializeToString(), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mean_used", [False, True])
def test_skip_layernorm_outputs_round_trip(tmp_path: Path, mean_used: bool) -> None:
    """The sum output imports as ms_skip_layernorm_sum and exports in ONNX position 3; a used mean output is not
    modelled, so that node stays opaque (and still runs)."""
    path = _block(tmp_path, mean_used)
    g = onnx_io.load(path)
    ops = Counter(n.sig.op for n in g.nodes.values())
    assert (ops["opaque"], ops["ms_skip_layernorm_sum"]) == ((1, 0) if mean_used else (0, 1))
    model = export_graph(g)
    (sln,) = [n for n in model.graph.node if n.op_type == "SkipLayerNormalization"]
    assert len(sln.output) == 4 and sln.output[3] and bool(sln.output[1]) == mean_used
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((1, S, D)).astype(np.float32) for n in ("x", "r")}
    np.testing.assert_allclose(_run(model.SerializeToString(), feeds), _run(str(path), feeds), rtol=1e-5, atol=1e-6)
