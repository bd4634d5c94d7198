"""Weights held by reference (:mod:`graphsub.frontends.shared`): a model above protobuf's 2 GB travels as small bytes
whose large weights are placeholders, runs in onnxruntime, is written with its weights beside it and read back as
memory maps -- here on a small model with the size limit lowered."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphsub.frontends.onnx_export as onnx_export
from graphsub.errors import ExportError, ImportError_
from graphsub.frontends import shared
from graphsub.frontends.onnx_io import file_bytes, from_onnx, model_files, read_model, to_onnx, write_model
from graphsub.frontends.ort import make_session, optimized_model, run_model

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((64, 256)).astype(np.float32)  # 64 KiB: held
W2 = RNG.standard_normal((256, 64)).astype(np.float32)
B = RNG.standard_normal(64).astype(np.float32)  # small: stays inline


def _model() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
                          [numpy_helper.from_array(a, n) for a, n in ((W1, "w1"), (W2, "w2"), (B, "b"))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W1, 0) @ W2 + B


@pytest.fixture
def share_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every graph counts as large (its weights are held)."""
    monkeypatch.setattr(onnx_export, "SHARE_BYTES", 0)


def test_large_graph_exports_placeholders_that_run_and_write(share_small: None, tmp_path: Path) -> None:
    g = from_onnx(_model(), input_shapes={"x": (3, 64)})
    proto = to_onnx(g)
    held = shared.placeholders(proto)
    assert sorted(t.name for t in held) == ["w1", "w2"]  # the bias is under MIN_TENSOR_BYTES
    data = proto.SerializeToString()
    assert len(data) < 4096 and shared.holds(data)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    for model in (proto, data):
        np.testing.assert_allclose(run_model(model, {"x": x}, optimization="all")[0], _expected(x), rtol=1e-5,
                                   atol=1e-5)
    assert {n.op_type for n in optimized_model(data, threads=1).graph.node} >= {"MatMul"}
    out = tmp_path / "big.onnx"
    write_model(proto, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert file_bytes(out) >= W1.nbytes + W2.nbytes and model_files(out)[1].name == "big.onnx.data"
    written = onnx.load(str(out))  # an ordinary file with external data: any tool reads it
    np.testing.assert_array_equal(numpy_helper.to_array(written.graph.initializer[0]), W1)
    np.testing.assert_allclose(run_model(str(out), {"x": x})[0], _expected(x), rtol=1e-5, atol=1e-5)


def test_reading_external_data_holds_memory_maps(tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, location="ext.bin", size_threshold=1024)
    before = (tmp_path / "ext.bin").read_bytes()
    model = read_model(path)
    assert [t.name for t in shared.placeholders(model)] == ["w1", "w2"]
    assert isinstance(shared.tensor_array(model.graph.initializer[0]), np.memmap)
    g = from_onnx(model)
    np.testing.assert_array_equal(g.params["w1"], W1)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(run_model(model.SerializeToString(), {"x": x})[0], _expected(x), rtol=1e-5,
                               atol=1e-5)
    sess = make_session(model.SerializeToString(), optimization="all", threads=1)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-5, atol=1e-5)
    assert (tmp_path / "ext.bin").read_bytes() == before  # the input's data is never written


def test_a_data_file_too_short_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, location="ext.bin", size_threshold=1024)
    data = tmp_path / "ext.bin"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ImportError_, match="missing or too short"):
        read_model(path)


def test_an_array_no_longer_held_is_an_error_not_a_crash() -> None:
    t = shared.placeholder(np.ones(1 << 15, np.float32), "gone")  # nothing else holds the array
    gc.collect()
    with pytest.raises(ExportError, match="no longer held"):
        shared.held(t)
    assert not shared.can_hold(np.ones((256, 256), np.float32)[:, ::2])  # not contiguous: inline


def test_a_view_of_a_memory_map_stays_held(tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, location="ext.bin", size_threshold=1024)
    mapped = shared.tensor_array(read_model(path).graph.initializer[0])
    t = shared.placeholder(np.asarray(mapped), "w1")  # a plain view: nothing else holds it
    gc.collect()
    np.testing.assert_array_equal(shared.held(t), W1)


def test_a_held_model_counts_its_weights_for_the_session_pool(share_small: None) -> None:
    from graphsub.optimize.timing import pool_size

    g = from_onnx(_model(), input_shapes={"x": (3, 64)})  # holds the arrays the bytes name
    data = to_onnx(g).SerializeToString()
    assert len(data) < 4096 and shared.model_bytes(data) > W1.nbytes + W2.nbytes
    assert pool_size(data, 3, max_bytes=4096) == 1  # its weights, not its few bytes, decide
