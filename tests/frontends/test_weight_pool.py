"""The weight pool (:mod:`graphsub.frontends.weight_pool`): a session of a model with held weights opens it from a file
whose external data onnxruntime maps -- a file's weights through a hard link of that file, graphsub's own arrays
written once each and removed when freed -- so its results are right (onnxruntime's constant folding reads the real
values) and no session copies the weights."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.frontends import shared, weight_pool
from graphsub.frontends.onnx_io import read_model
from graphsub.frontends.ort import make_session, optimized_model, run_session

RNG = np.random.default_rng(1)
W = RNG.standard_normal((128, 128)).astype(np.float32)  # 64 KiB: held


def _transposed_model(w: onnx.TensorProto) -> onnx.ModelProto:
    """``y = x @ (2 * w.T)``: onnxruntime folds ``2 * w.T`` at ORT_ENABLE_ALL, reading ``w``'s data."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("Mul", ["wt", "two"], ["w2"]),
             helper.make_node("MatMul", ["x", "w2"], ["y"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 128])],
                          [w, numpy_helper.from_array(np.asarray(2.0, np.float32), "two")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _pool_files() -> set[str]:
    folder = weight_pool._POOL.dir
    return set() if folder is None else {p.name for p in folder.iterdir()}


@pytest.mark.parametrize("optimization", ["disable", "all"])
def test_a_held_array_is_written_once_and_removed_when_freed(optimization: str) -> None:
    w = W.copy()
    data = _transposed_model(shared.placeholder(w, "w")).SerializeToString()
    x = RNG.standard_normal((3, 128)).astype(np.float32)
    before = _pool_files()
    for _ in range(2):  # the second session reuses what the first wrote
        sess = make_session(data, optimization=optimization, prepack=False)
        np.testing.assert_allclose(run_session(sess, {"x": x})[0], x @ (2 * w.T), rtol=1e-5, atol=1e-5)
    written = _pool_files() - before
    assert len(written) == 1 and next(iter(written)).startswith("array-")  # the array; no model file is left
    del w
    gc.collect()
    assert _pool_files() - before == set()  # freed: its file is gone
    np.testing.assert_allclose(run_session(sess, {"x": x})[0], x @ (2 * W.T), rtol=1e-5, atol=1e-5)  # still runs


def test_a_files_weights_are_written_once_and_the_input_left_alone(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_transposed_model(numpy_helper.from_array(W, "w")), os.fspath(src), save_as_external_data=True,
              location="m.data", size_threshold=1024)
    model = read_model(src)  # its weights: memory maps of m.data
    x = RNG.standard_normal((2, 128)).astype(np.float32)
    before = _pool_files()
    for _ in range(2):
        sess = make_session(model.SerializeToString(), optimization="all")
        np.testing.assert_allclose(run_session(sess, {"x": x})[0], x @ (2 * W.T), rtol=1e-5, atol=1e-5)
    assert len(_pool_files() - before) == 1  # one copy for both sessions
    data = tmp_path / "m.data"
    assert data.read_bytes() == W.tobytes() and data.stat().st_nlink == 1  # the input untouched, not linked
    assert {n.op_type for n in optimized_model(model.SerializeToString(), threads=1).graph.node} == {"MatMul"}


def test_every_view_of_a_mapped_region_is_one_array(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"\0" * 100 + W.tobytes())
    m = np.memmap(path, dtype=np.float32, mode="r", offset=100, shape=W.shape)
    assert weight_pool._mapped_file(np.asarray(m)[64:]) == (os.fspath(path), 100 + 64 * 128 * 4, 64 * 128 * 4)
    assert weight_pool._mapped_file(np.asarray(m)) == weight_pool._mapped_file(m)
    assert weight_pool._mapped_file(np.asarray(m)[:, :64]) is None  # not contiguous
    assert weight_pool._mapped_file(W) is None


def test_a_killed_processs_pool_is_removed() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    stale = Path(tempfile.mkdtemp(prefix=f"graphsub-weights-{int(dead.stdout)}-"))
    (stale / "array-0.data").write_bytes(b"x")
    mine = Path(tempfile.mkdtemp(prefix=f"graphsub-weights-{os.getpid()}-"))
    try:
        weight_pool._remove_stale()
        assert not stale.exists() and mine.exists()  # a live process's pool stays
    finally:
        mine.rmdir()
