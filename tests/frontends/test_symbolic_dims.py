"""Symbolic input dimensions (ONNX ``dim_param``) stay symbolic in what graphsub writes, or nothing is written.

graphsub imports a dynamic batch at size 1 (or at ``--input-shape``); a model written from the IR must still accept
the sizes the original accepts (checked at other sizes in onnxruntime), else the write is refused with exit code 1
and the advice to fix the dims with ``--input-shape`` -- then the output is static, as asked.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from graphsub.cli.app import app
from graphsub.errors import VerificationError
from graphsub.frontends.dims import interface
from graphsub.frontends.onnx_io import load, to_onnx
from graphsub.symbolic import keep_symbolic

runner = CliRunner()


def _save(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: list[onnx.TensorProto], path: Path) -> Path:
    g = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _vi(name: str, dims: list[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _weights() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]


def dense(path: Path, batch: str | None = "batch") -> Path:
    """``y = relu(x @ w + b)`` over ``x: [batch, 8]``: nothing in it depends on the batch size."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    return _save(nodes, [_vi("x", [batch, 8])], [_vi("y", [batch, 8])], _weights(), path)


def reshaped(path: Path) -> Path:
    """``y = relu(reshape(x @ w + b, concat(shape(x)[:1], [2, 4])))``: the import folds ``Shape(x)`` at batch 1, so
    the graph's Reshape target is the constant ``[1, 2, 4]``."""
    tail = numpy_helper.from_array(np.array([2, 4], dtype=np.int64), "tail")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Concat", ["s", "tail"], ["shp"], axis=0),
             helper.make_node("Reshape", ["u", "shp"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    return _save(nodes, [_vi("x", ["batch", 8])], [_vi("y", ["batch", 2, 4])], [*_weights(), tail], path)


def dims(path: Path) -> dict[str, list[int | str]]:
    m = onnx.load(str(path))
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*m.graph.input, *m.graph.output]}


def run(path: Path | bytes, x: np.ndarray) -> np.ndarray:
    src = path if isinstance(path, bytes) else str(path)
    return np.asarray(ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout


def test_convert_keeps_a_symbolic_batch_and_runs_at_other_sizes(tmp_path: Path) -> None:
    src, dst = dense(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--json")
    assert code == 0, out
    assert json.loads(out)["symbolic_dims"] == {"kept": ["batch"], "fixed": {}}
    assert dims(dst) == {"x": ["batch", 8], "y": ["batch", 8]}
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(run(dst, x), run(src, x), rtol=1e-5, atol=1e-6)


def test_search_output_keeps_a_symbolic_batch(tmp_path: Path) -> None:
    src, dst = dense(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, out = invoke("search", str(src), "-o", str(dst), "--time", "2", "--json")
    assert code == 0, out
    assert json.loads(out)["verification"]["symbolic_dims"]["kept"] == ["batch"]
    assert dims(dst) == {"x": ["batch", 8], "y": ["batch", 8]}
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_allclose(run(dst, x), run(src, x), rtol=1e-4, atol=1e-5)


def test_a_size_baked_in_at_import_is_refused_with_exit_1_and_nothing_written(tmp_path: Path) -> None:
    src, dst = reshaped(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["exit_code"] == 1
    assert "'batch'" in doc["error"] and "--input-shape x=1x8" in doc["error"] and "nothing written" in doc["error"]
    assert not dst.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temporary file left either
    code, _ = invoke("search", str(src), "-o", str(dst), "--time", "1", "--json")
    assert code == 1 and not dst.exists()


def test_an_original_that_runs_only_at_the_imported_size_keeps_its_declared_dims(tmp_path: Path) -> None:
    shp = numpy_helper.from_array(np.array([1, 2, 4], dtype=np.int64), "shp")  # an export that baked batch 1
    src = _save([helper.make_node("Reshape", ["x", "shp"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                [_vi("x", ["batch", 8])], [_vi("y", ["batch", 2, 4])], [shp], tmp_path / "m.onnx")
    dst = tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--json")
    assert code == 0, out
    assert dims(dst) == {"x": ["batch", 8], "y": ["batch", 2, 4]}  # what the original declares (and accepts)


def test_input_shape_gives_a_static_output(tmp_path: Path) -> None:
    src, dst = reshaped(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--input-shape", "x=3x8", "--json")
    assert code == 0, out
    assert json.loads(out)["symbolic_dims"] == {"kept": [], "fixed": {"batch": 3}}
    assert dims(dst) == {"x": [3, 8], "y": [3, 2, 4]}
    x = np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(run(dst, x), run(src, x), rtol=1e-5, atol=1e-6)


def test_a_static_model_is_written_as_before(tmp_path: Path) -> None:
    src, dst = tmp_path / "m.onnx", tmp_path / "out.onnx"
    _save([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 8])], [_vi("y", [2, 8])], [], src)
    code, out = invoke("convert", str(src), "-o", str(dst), "--json")
    assert code == 0 and json.loads(out)["symbolic_dims"] is None
    assert dims(dst) == {"x": [2, 8], "y": [2, 8]}


def test_a_name_fixed_on_one_input_fixes_it_on_the_others(tmp_path: Path) -> None:
    src = _save([helper.make_node("Add", ["x", "m"], ["y"])], [_vi("x", ["batch", "seq"]), _vi("m", ["batch", "seq"])],
                [_vi("y", ["batch", "seq"])], [], tmp_path / "two.onnx")
    g = load(src, input_shapes={"x": (2, 5)})
    assert [t.shape for t in g.input_types] == [(2, 5), (2, 5)]
    assert interface(src, {"x": (2, 5)}).free == ()
    dst = tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--input-shape", "x=2x5", "--json")
    assert code == 0, out
    assert dims(dst) == {"x": [2, 5], "m": [2, 5], "y": [2, 5]}


def test_keep_symbolic_on_protos_and_bytes(tmp_path: Path) -> None:
    src = dense(tmp_path / "m.onnx", batch=None)  # an anonymous dim: kept anonymous
    g = load(src)
    model = to_onnx(g)
    assert keep_symbolic(None, model) is model  # no file behind it (a zoo model)
    assert keep_symbolic(src, model, input_shapes={"x": (1, 8)}) is model  # fixed by the user
    kept = keep_symbolic(src, model, graph=g)
    assert isinstance(kept, onnx.ModelProto) and kept is not model
    d = kept.graph.input[0].type.tensor_type.shape.dim[0]
    assert not d.HasField("dim_value") and not d.dim_param
    again = keep_symbolic(src, kept.SerializeToString(), graph=g)  # already symbolic (a peer's output): checked
    assert isinstance(again, bytes)
    x = np.ones((4, 8), dtype=np.float32)
    np.testing.assert_allclose(run(again, x), run(src, x), rtol=1e-5, atol=1e-6)
    bad = reshaped(tmp_path / "r.onnx")
    with pytest.raises(VerificationError, match="--input-shape x=1x8"):
        keep_symbolic(bad, to_onnx(load(bad)))


def test_optimize_refuses_to_write_a_rewrite_that_lost_the_batch(tmp_path: Path) -> None:
    from graphsub.optimize import optimize
    from graphsub.search import Budget

    src, dst = reshaped(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    with pytest.raises(VerificationError, match="symbolic dimension"):
        optimize(str(src), output=dst, measure_latency=False, cost="roofline:cpu", budget=Budget(time_s=2),
                 keep_slower=True, seeds=1)
    assert not dst.exists()
    res = optimize(str(src), output=dst, measure_latency=False, cost="roofline:cpu", budget=Budget(time_s=2),
                   keep_slower=True, seeds=1, input_shapes={"x": (2, 8)})
    assert res.written == str(dst) and dims(dst)["x"] == [2, 8]


def test_an_output_declared_without_a_shape_gets_its_rank_only(tmp_path: Path) -> None:
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    src = _save(relu, [_vi("x", ["n", 8])], [_vi("y", None)], [], tmp_path / "m.onnx")
    kept = keep_symbolic(src, to_onnx(load(src)))
    dims = kept.graph.output[0].type.tensor_type.shape.dim
    assert len(dims) == 2 and not any(d.HasField("dim_value") or d.HasField("dim_param") for d in dims)
    onnx.checker.check_model(kept, full_check=True)  # a graph output needs a shape; sizes are not declared
    assert [d.dim_param or d.dim_value for d in kept.graph.input[0].type.tensor_type.shape.dim] == ["n", 8]
