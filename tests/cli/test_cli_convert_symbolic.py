"""Symbolic input dimensions (ONNX ``dim_param``) at the command line: ``graphsub convert`` (and ``search -o``,
tests/cli/test_cli_search.py) keeps them symbolic in what it writes, or writes nothing.

graphsub imports a dynamic batch at size 1 (or at ``--input-shape``); a model written from the IR must still accept
the sizes the original accepts (checked at other sizes in onnxruntime), else the write is refused with exit code 1
and the advice to fix the dims with ``--input-shape`` -- then the output is static, as asked.  The library side is
tests/frontends/test_symbolic_dims.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from graphsub.cli import app
from helpers import declared_dims, float_vi, ort_run_x, save_onnx, symbolic_dense, symbolic_reshaped

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout


def test_convert_keeps_a_symbolic_batch_and_runs_at_other_sizes(tmp_path: Path) -> None:
    src, dst = symbolic_dense(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--json")
    assert code == 0, out
    assert json.loads(out)["symbolic_dims"] == {"kept": ["batch"], "fixed": {}}
    assert declared_dims(dst) == {"x": ["batch", 8], "y": ["batch", 8]}
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run_x(dst, x), ort_run_x(src, x), rtol=1e-5, atol=1e-6)


def test_a_size_baked_in_at_import_is_written_over_the_file_and_stays_symbolic(tmp_path: Path) -> None:
    """The import folds ``Shape(x)`` into the Reshape's target (batch 1): the plain export runs at batch 1 only, so
    the graph is written over the file's own nodes (:func:`graphsub.symbolic.keep_spliced`), whose shape arithmetic
    runs again -- by ``convert`` and by ``search``. (A model that cannot keep them is refused with exit code 1:
    tests/frontends/test_symbolic_dims.py.)"""
    src, dst = symbolic_reshaped(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    for command in (["convert"], ["search", "--time", "1"]):
        code, out = invoke(*command, str(src), "-o", str(dst), "--json")
        assert code == 0, out
        assert declared_dims(dst)["x"] == ["batch", 8]
        np.testing.assert_allclose(ort_run_x(dst, x), ort_run_x(src, x), rtol=1e-5, atol=1e-6)
        dst.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # no temporary file left


def test_an_original_that_runs_only_at_the_imported_size_keeps_its_declared_dims(tmp_path: Path) -> None:
    shp = numpy_helper.from_array(np.array([1, 2, 4], dtype=np.int64), "shp")  # an export that baked batch 1
    src = save_onnx([helper.make_node("Reshape", ["x", "shp"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                    [float_vi("x", ["batch", 8])], [float_vi("y", ["batch", 2, 4])], [shp], tmp_path / "m.onnx")
    dst = tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--json")
    assert code == 0, out
    assert declared_dims(dst) == {"x": ["batch", 8], "y": ["batch", 2, 4]}  # what the original declares (and accepts)


def test_input_shape_gives_a_static_output(tmp_path: Path) -> None:
    src, dst = symbolic_reshaped(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--input-shape", "x=3x8", "--json")
    assert code == 0, out
    assert json.loads(out)["symbolic_dims"] == {"kept": [], "fixed": {"batch": 3}}
    assert declared_dims(dst) == {"x": [3, 8], "y": [3, 2, 4]}
    x = np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run_x(dst, x), ort_run_x(src, x), rtol=1e-5, atol=1e-6)


def test_a_static_model_is_written_as_before(tmp_path: Path) -> None:
    src, dst = tmp_path / "m.onnx", tmp_path / "out.onnx"
    save_onnx([helper.make_node("Relu", ["x"], ["y"])], [float_vi("x", [2, 8])], [float_vi("y", [2, 8])], [], src)
    code, out = invoke("convert", str(src), "-o", str(dst), "--json")
    assert code == 0 and json.loads(out)["symbolic_dims"] is None
    assert declared_dims(dst) == {"x": [2, 8], "y": [2, 8]}


def test_a_name_fixed_on_one_input_is_written_fixed_on_the_others(tmp_path: Path) -> None:
    """The import side (``load`` / ``interface``) is tests/frontends/test_symbolic_dims.py."""
    src = save_onnx([helper.make_node("Add", ["x", "m"], ["y"])],
                    [float_vi("x", ["batch", "seq"]), float_vi("m", ["batch", "seq"])],
                    [float_vi("y", ["batch", "seq"])], [], tmp_path / "two.onnx")
    dst = tmp_path / "out.onnx"
    code, out = invoke("convert", str(src), "-o", str(dst), "--input-shape", "x=2x5", "--json")
    assert code == 0, out
    assert declared_dims(dst) == {"x": [2, 5], "m": [2, 5], "y": [2, 5]}


def _described(path: Path) -> Path:
    """The model at ``path`` with a description of itself, as exporters write one (Hugging Face, genai's builder)."""
    import onnx

    m = onnx.load(str(path))
    helper.set_model_props(m, {"model_type": "dense", "author": "a test"})
    m.doc_string, m.model_version, m.domain = "a dense layer", 7, "org.example"
    onnx.save(m, str(path))
    return path


def _description(path: Path) -> tuple[dict[str, str], str, int, str]:
    import onnx

    m = onnx.load(str(path))
    return {p.key: p.value for p in m.metadata_props}, m.doc_string, m.model_version, m.domain


def test_what_graphsub_writes_keeps_the_models_own_description(tmp_path: Path) -> None:
    """A written model is a drop-in replacement: ``metadata_props``, ``doc_string``, ``model_version`` and ``domain``
    of the input are in it -- from ``convert`` (the IR's export) with a symbolic and with a static batch, and from
    ``optimize`` writing a rewritten model (a transpose pair the search removes; not timed, so it is written)."""
    from graphsub.optimize import optimize

    want = ({"model_type": "dense", "author": "a test"}, "a dense layer", 7, "org.example")
    for batch in ("batch", 2):
        src = _described(symbolic_dense(tmp_path / f"m{batch}.onnx", batch=batch))
        dst = tmp_path / f"out{batch}.onnx"
        code, out = invoke("convert", str(src), "-o", str(dst), "--json")
        assert code == 0, out
        assert _description(dst) == want
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Transpose", ["t"], ["u"], perm=[1, 0]),
             helper.make_node("Transpose", ["u"], ["v"], perm=[1, 0]), helper.make_node("Relu", ["v"], ["y"])]
    src = _described(save_onnx(nodes, [float_vi("x", ["batch", 8])], [float_vi("y", ["batch", 8])], [w],
                               tmp_path / "pair.onnx"))
    res = optimize(src, output=tmp_path / "opt.onnx", rules="default", cost="roofline:cpu", measure_latency=False,
                   peers="none", eqsat_s=0, time_s=None)
    assert not res.kept_original and res.applied, res.decision  # the search's graph, not the input's bytes
    assert _description(tmp_path / "opt.onnx") == want
    assert declared_dims(tmp_path / "opt.onnx") == {"x": ["batch", 8], "y": ["batch", 8]}
