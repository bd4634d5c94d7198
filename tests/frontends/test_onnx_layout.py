"""Channels-last MLPs written channels-first (graphsub.frontends.onnx_layout): which regions are taken, that the
rewritten model computes the same outputs in onnxruntime, and that everything else is left alone."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphsub.frontends.onnx_layout import find_regions, rewrite, rewrite_bytes
from helpers import convnext_block


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


@pytest.mark.parametrize(("gelu", "gamma", "bias_left", "c", "hidden"), [
    ("erf", "c11", False, 8, 24), ("op", "c11", True, 8, 32), ("erf", None, False, 5, 7), ("op", "1c11", False, 16, 4),
])
def test_a_convnext_block_is_written_channels_first_with_the_same_outputs(gelu: str, gamma: str | None,
                                                                          bias_left: bool, c: int,
                                                                          hidden: int) -> None:
    model = convnext_block(c=c, hidden=hidden, gelu=gelu, gamma=gamma, bias_left=bias_left)
    feeds = _feeds(model)
    want = _run(model, feeds)
    new = onnx.ModelProto()
    new.CopyFrom(model)
    assert rewrite(new) == 1
    onnx.checker.check_model(new)
    ops = Counter(n.op_type for n in new.graph.node)
    assert ops["MatMul"] == 0 and ops["Conv"] == 3  # the depthwise conv and the two MLP layers
    assert ops["Transpose"] == 2  # into the LayerNorm and straight out of it: the closing one is gone
    kernels = [n for n in new.graph.node if n.op_type == "Conv" and n.name.endswith("__nchw")]
    assert all(len(k.input) == 3 for k in kernels)  # both biases folded into their convolutions
    if gamma is not None:  # the layer scale is folded into the last convolution
        assert not any(n.op_type == "Mul" and "gamma" in n.input for n in new.graph.node)
        assert "gamma" not in {i.name for i in new.graph.initializer}
    got = _run(new, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_regions_that_cannot_be_taken_whole_are_left_alone() -> None:
    cases = {"a region tensor is also a graph output": convnext_block(leak="output"),
             "the weight is not a constant": convnext_block(const_w=False),
             "no MatMul between the transposes (a downsampling layer's norm)": convnext_block(mlp=False)}
    for why, model in cases.items():
        before = model.SerializeToString()
        assert find_regions(model) == [], why
        assert rewrite(model) == 0, why
        assert model.SerializeToString() == before, why
        assert rewrite_bytes(before) is None, why


def test_a_per_channel_scale_that_broadcasts_over_width_is_not_folded() -> None:
    """gamma of shape (C,) multiplies the NCHW tensor's last axis (width), not its channels: the region is still
    rewritten, but the Mul must stay as it is."""
    model = convnext_block(c=6, hw=6, gamma="c")
    feeds = _feeds(model)
    want = _run(model, feeds)
    data = rewrite_bytes(model.SerializeToString())
    assert data is not None and data[1] == 1
    new = onnx.load_from_string(data[0])
    assert any(n.op_type == "Mul" and "gamma" in n.input for n in new.graph.node)
    np.testing.assert_allclose(_run(new, feeds)[0], want[0], rtol=1e-5, atol=1e-5)


def test_several_blocks_in_a_row_are_all_rewritten() -> None:
    a = convnext_block(c=8, seed=3)
    b = convnext_block(c=8, seed=4, gelu="op")
    rename = {n: f"b_{n}" for n in [*(i.name for i in b.graph.initializer), "d", "t", "ln", "m1", "a1", "h", "m2",
                                   "a2", "back", "scaled"]}
    g = b.graph
    for init in g.initializer:
        init.name = rename[init.name]
    for node in g.node:
        node.input[:] = ["y" if i == "x" else rename.get(i, i) for i in node.input]
        node.output[:] = [rename.get(o, "y2" if o == "y" else o) for o in node.output]
    merged = helper.make_graph([*a.graph.node, *g.node], "two", list(a.graph.input),
                               [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 8, 6, 6])],
                               [*a.graph.initializer, *g.initializer])
    model = helper.make_model(merged, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    feeds = _feeds(model)
    want = _run(model, feeds)
    assert len(find_regions(model)) == 2
    assert rewrite(model) == 2
    np.testing.assert_allclose(_run(model, feeds)[0], want[0], rtol=1e-5, atol=1e-5)


def test_a_rewritten_model_is_a_fixed_point() -> None:
    model = convnext_block()
    assert rewrite(model) == 1
    again = model.SerializeToString()
    assert rewrite(model) == 0 and model.SerializeToString() == again


def test_names_the_pass_would_make_are_never_reused() -> None:
    """A model that already has a tensor named like the pass's twins is left alone, not silently aliased."""
    model = convnext_block()
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.output[0] = "d__nchw"
        node.input[:] = ["d__nchw" if i == "d" else i for i in node.input]
    assert rewrite(model) == 0
