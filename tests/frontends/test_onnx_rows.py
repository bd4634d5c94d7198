"""Sequence activations written as rows (graphsub.frontends.onnx_rows): which nodes are taken, that the rewritten
model computes the same outputs in onnxruntime (exported transformer layers, hand-made edge cases, and random
chains of last-axis ops), that onnxruntime then runs fewer Reshape kernels, and that everything else is left alone."""

from __future__ import annotations

import io
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from graphsub.frontends.onnx_rows import plan, rewrite, rewrite_bytes, rows_shape


def _run(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], save: Path | None = None) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if save is not None:
        so.optimized_model_filepath = str(save)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return list(ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds))


def _feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    new = onnx.ModelProto()
    new.CopyFrom(model)
    return new


def _export(module: torch.nn.Module, shape: tuple[int, ...]) -> onnx.ModelProto:
    torch.manual_seed(0)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(*shape),), buf, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize(("batch_first", "shape"), [(True, (1, 12, 32)), (True, (2, 12, 32)), (False, (12, 1, 32)),
                                                    (False, (12, 3, 32))],
                         ids=["batch1", "batch2", "seq-first-batch1", "seq-first-batch3"])
def test_an_exported_encoder_layer_runs_the_same_with_fewer_reshapes(batch_first: bool, shape: tuple[int, ...],
                                                                     tmp_path: Path) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(
        32, 4, dim_feedforward=64, dropout=0.0, batch_first=batch_first), num_layers=2, enable_nested_tensor=False)
    model = _export(layer, shape)
    feeds = _feeds(model)
    want = _run(model, feeds, tmp_path / "before.onnx")
    new = _copy(model)
    assert rewrite(new) >= 1
    onnx.checker.check_model(new)
    got = _run(new, feeds, tmp_path / "after.onnx")
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    before = Counter(n.op_type for n in onnx.load(str(tmp_path / "before.onnx")).graph.node)
    after = Counter(n.op_type for n in onnx.load(str(tmp_path / "after.onnx")).graph.node)
    assert after["Reshape"] < before["Reshape"], (before, after)
    assert [o.name for o in new.graph.output] == ["y"]
    assert new.graph.output[0].type == model.graph.output[0].type


def _block(batch: int = 1, seq: int = 5, hidden: int = 8, *, pos: tuple[int, ...] | None = None,
           leak: str = "", opset: int = 17, bias: bool = True, norm: bool = True) -> onnx.ModelProto:
    """``y = LayerNorm(x (+ pos) + (x @ W1 + b1) @ W2 + b2)`` on ``x: [batch, seq, hidden]``.  ``leak``: ``output``
    also returns the first projection; ``reshape0`` reads it with a Reshape whose target has a 0 (copy a dim);
    ``transpose`` reads it with a Transpose; ``ln_mean`` uses LayerNormalization's Mean output."""
    rng = np.random.default_rng(0)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [init("w1", (hidden, 2 * hidden)), init("w2", (2 * hidden, hidden)), init("b1", (2 * hidden,)),
             init("b2", (hidden,)), init("g", (hidden,)), init("beta", (hidden,))]
    nodes = []
    x = "x"
    if pos is not None:
        inits.append(init("pos", pos))
        nodes.append(helper.make_node("Add", ["x", "pos"], ["xp"]))
        x = "xp"
    nodes.append(helper.make_node("MatMul", [x, "w1"], ["m1"]))
    h1 = "m1"
    if bias:
        nodes.append(helper.make_node("Add", ["m1", "b1"], ["h1"]))
        h1 = "h1"
    nodes += [helper.make_node("Relu", [h1], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["m2"])]
    h2 = "m2"
    if bias:
        nodes.append(helper.make_node("Add", ["m2", "b2"], ["h2"]))
        h2 = "h2"
    nodes.append(helper.make_node("Add", [x, h2], ["res"]))
    ln_outs = ["y", "mean"] if leak == "ln_mean" else ["y"]
    if norm:
        nodes.append(helper.make_node("LayerNormalization", ["res", "g", "beta"], ln_outs, axis=-1))
    else:
        nodes.append(helper.make_node("Relu", ["res"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])]
    if leak == "output":
        outputs.append(helper.make_tensor_value_info(h1, TensorProto.FLOAT, [batch, seq, 2 * hidden]))
    if leak == "reshape0":
        inits.append(numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "t0"))
        nodes.append(helper.make_node("Reshape", [h1, "t0"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, seq * 2 * hidden]))
    if leak == "transpose":
        nodes.append(helper.make_node("Transpose", [h1], ["z"], perm=[0, 2, 1]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 2 * hidden, seq]))
    if leak == "ln_mean":
        outputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, [batch, seq, 1]))
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [batch, seq, hidden])], outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("leak", ["output", "reshape0", "transpose"])
def test_a_value_read_outside_keeps_its_name_and_shape(leak: str) -> None:
    model = _block(batch=2, leak=leak)
    feeds = _feeds(model)
    want = _run(model, feeds)
    new = _copy(model)
    assert rewrite(new) == 1
    onnx.checker.check_model(new)
    got = _run(new, feeds)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    back = [n for n in new.graph.node if n.op_type == "Reshape" and n.output[0] == "h1"]
    assert len(back) == 1  # one Reshape back to [batch, seq, 2 * hidden], under the old name


@pytest.mark.parametrize(("pos", "taken"), [((1, 5, 8), True), ((2, 5, 8), True), ((5, 8), True), ((1, 1, 8), True),
                                            ((8,), True)])
def test_constants_broadcast_as_before(pos: tuple[int, ...], taken: bool) -> None:
    model = _block(batch=2, pos=pos)
    feeds = _feeds(model)
    want = _run(model, feeds)
    new = _copy(model)
    assert (rewrite(new) >= 1) == taken
    np.testing.assert_allclose(_run(new, feeds)[0], want[0], rtol=1e-5, atol=1e-5)
    if pos == (1, 5, 8):  # [1, S, H] over batch 2 has no 2-D spelling: the Add stays rank 3, its reader gets a Reshape
        assert any(n.op_type == "Add" and "pos" in n.input for n in new.graph.node)


def test_rows_shape_refuses_what_would_broadcast_differently() -> None:
    assert rows_shape((1, 5, 8), 2, 5) is None  # a positional embedding over a batch of 2
    assert rows_shape((5, 8), 2, 5) is None  # [S, H] over a batch of 2: in rows it would meet [2 * S, H]
    assert rows_shape((5, 8), 1, 5) == (5, 8)
    assert rows_shape((2, 1, 8), 2, 5) is None


@pytest.mark.parametrize("why", ["no projection with a bias", "LayerNormalization's mean is read", "opset 12",
                                 "an empty sequence"])
def test_models_without_the_pattern_are_left_alone(why: str) -> None:
    model = {"no projection with a bias": _block(bias=False),
             "LayerNormalization's mean is read": _block(leak="ln_mean", bias=False),
             "opset 12": _block(opset=12, norm=False),
             "an empty sequence": _block(seq=0)}[why]
    onnx.checker.check_model(model)
    before = model.SerializeToString()
    assert plan(model).taken == {}, why
    assert rewrite(model) == 0, why
    assert model.SerializeToString() == before, why
    assert rewrite_bytes(before) is None, why


def test_a_rewritten_model_is_not_rewritten_again() -> None:
    data = rewrite_bytes(_block().SerializeToString())
    assert data is not None
    assert rewrite_bytes(data[0]) is None


# ----------------------------------------------------------------------------------- random chains (fuzz)
_OPS = ["proj", "proj_nobias", "relu", "gelu_erf", "softmax", "ln", "center", "residual", "scale3", "exit_t",
        "exit_out", "split"]


def _chain(batch: int, seq: int, hidden: int, ops: list[str], seed: int, opset: int) -> onnx.ModelProto:
    """A random chain of last-axis ops on ``[batch, seq, hidden]`` (with residual links and values read outside);
    a Reduce names its axes by attribute up to opset 17, by input from 18."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    outputs: list[onnx.ValueInfoProto] = []

    def const(value: np.ndarray) -> str:
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(value.astype(np.float32) if value.dtype.kind == "f" else value, name))
        return name

    def node(op: str, ins: list[str], **attrs: object) -> str:
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    h, width, prev = "x", hidden, "x"
    widths = {"x": hidden}
    for op in ops:
        if op in ("proj", "proj_nobias"):
            new_width = int(rng.choice([hidden, 2 * hidden]))
            t = node("MatMul", [h, const(rng.standard_normal((width, new_width)) / np.sqrt(width))])
            h, width = (node("Add", [t, const(rng.standard_normal(new_width))]) if op == "proj" else t), new_width
        elif op == "relu":
            h = node("Relu", [h])
        elif op == "gelu_erf":
            e = node("Erf", [node("Div", [h, const(np.array(1.4142135, dtype=np.float32))])])
            h = node("Mul", [node("Mul", [h, node("Add", [e, const(np.array(1.0, dtype=np.float32))])]),
                             const(np.array(0.5, dtype=np.float32))])
        elif op == "softmax":
            h = node("Softmax", [h], axis=int(rng.choice([-1, 2])))
        elif op == "ln":
            h = node("LayerNormalization", [h, const(rng.standard_normal(width)), const(rng.standard_normal(width))],
                     axis=-1)
        elif op == "center":
            axis = int(rng.choice([-1, 2]))
            mean = node("ReduceMean", [h, const(np.array([axis], dtype=np.int64))], keepdims=1) if opset >= 18 else \
                node("ReduceMean", [h], axes=[axis], keepdims=1)
            h = node("Sub", [h, mean])
        elif op == "residual":
            h = node("Add", [h, prev if widths[prev] == width else h])
        elif op == "scale3":
            shape = [(1, 1, width), (batch, seq, width), (1, seq, 1), (seq, width), (width,)][int(rng.integers(5))]
            h = node("Mul", [h, const(rng.standard_normal(shape))])
        elif op == "exit_t":
            t = node("Transpose", [h], perm=[0, 2, 1])
            outputs.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, [batch, width, seq]))
        elif op == "exit_out":
            outputs.append(helper.make_tensor_value_info(h, TensorProto.FLOAT, [batch, seq, width]))
        elif op == "split" and width % 2 == 0:
            a, b = f"s{len(nodes)}a", f"s{len(nodes)}b"
            nodes.append(helper.make_node("Split", [h, const(np.array([width // 2] * 2, dtype=np.int64))], [a, b],
                                          axis=2))
            h, width = node("Add", [a, b]), width // 2
        widths[h] = width
        if op in ("proj", "ln"):
            prev = h
    outputs.append(helper.make_tensor_value_info(h, TensorProto.FLOAT, [batch, seq, width]))
    outputs = list({o.name: o for o in outputs}.values())  # the last value may also be an earlier exit_out
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [batch, seq, hidden])], outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.integers(1, 3), seq=st.integers(1, 6), hidden=st.sampled_from([4, 6, 8]),
       ops=st.lists(st.sampled_from(_OPS), min_size=1, max_size=10), seed=st.integers(0, 2**16),
       opset=st.sampled_from([17, 18]))
def test_random_chains_of_last_axis_ops_compute_the_same(batch: int, seq: int, hidden: int, ops: list[str],
                                                         seed: int, opset: int) -> None:
    model = _chain(batch, seq, hidden, ["proj", *ops, "proj"], seed, opset)
    onnx.checker.check_model(model)
    feeds = _feeds(model, seed)
    want = _run(model, feeds)
    data = rewrite_bytes(model.SerializeToString())
    if data is None:
        return  # nothing worth rewriting (e.g. a batch and sequence of 1 with no second projection)
    new = onnx.load_from_string(data[0])
    onnx.checker.check_model(new)
    assert [o.name for o in new.graph.output] == [o.name for o in model.graph.output]
    got = _run(new, feeds)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
