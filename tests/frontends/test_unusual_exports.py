"""Valid exports graphsub used to refuse or write wrongly (found by the corpus, tests/optimize/test_corpus.py): a
Constant's ``sparse_value``, model-local functions, int4 initializers, outputs whose symbolic dims no input sets (a
Loop's iteration count), float16 rounding and onnxruntime's own kernels (MatMulNBits) in the check at other sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import corpus_models as cm
from graphsub.errors import VerificationError
from graphsub.execute import run
from graphsub.frontends.onnx_io import from_onnx, load, to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir.validate import validate
from graphsub.symbolic import keep_symbolic


def test_a_sparse_constant_is_imported_dense() -> None:
    """A Constant with ``sparse_value`` (linear and coordinate indices) is a weight holding the dense array."""
    values = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "v")
    for indices in (np.array([1, 6], np.int64), np.array([[0, 1], [1, 2]], np.int64)):
        sp = helper.make_sparse_tensor(values, numpy_helper.from_array(indices, "i"), [2, 4])
        g = helper.make_graph([helper.make_node("Constant", [], ["c"], sparse_value=sp),
                               helper.make_node("Add", ["x", "c"], ["y"])], "sparse",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        x = np.zeros((2, 4), np.float32)
        want = run_model(m, {"x": x})[0]
        assert np.count_nonzero(want) == 2
        np.testing.assert_array_equal(run(from_onnx(m), {"x": x})["y"], want)


def test_local_functions_are_inlined_and_round_trip() -> None:
    """A model-local function (``custom::ScaledGelu``) is inlined at import, as onnxruntime runs it: its ops are
    graphsub's own (nothing opaque that no one-node model could run), and the export computes the same."""
    m = cm.local_function()
    g = from_onnx(m)
    validate(g)
    assert not g.ops_of("opaque")
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)  # imported at batch 1
    np.testing.assert_allclose(run_model(to_onnx(g), {"x": x})[0], run_model(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_an_int4_initializer_stays_int4_inside_its_opaque_reader() -> None:
    """An initializer of a dtype the IR has no type for (int4) is held by the opaque node reading it (``embedded``):
    the import accepts the model, the export writes it back as an int4 initializer, and the reference executor and
    the weight folding run it (its one-node model holds the constant too)."""
    from graphsub.data import materialize
    from graphsub.rules.apply import fold_weights

    m = cm.opset21()
    g = from_onnx(m)
    (dq,) = [g.nodes[n].sig for n in g.ops_of("opaque")]
    assert dq.attr["op_type"] == "DequantizeLinear" and [s for s, _ in dq.attr["embedded"]] == [0]
    back = to_onnx(g)
    onnx.checker.check_model(back, full_check=True)
    assert [t.data_type for t in back.graph.initializer if t.data_type == TensorProto.INT4] == [TensorProto.INT4]
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    want = run_model(m, {"x": x}, optimization="disable")[0]
    np.testing.assert_allclose(run_model(back, {"x": x}, optimization="disable")[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(run(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    folded = fold_weights(materialize(g, 0))  # whether it folds the DequantizeLinear or keeps it, the same values
    np.testing.assert_allclose(run(folded, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_model(to_onnx(folded), {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_an_output_dim_only_known_at_run_time_stays_symbolic(tmp_path: Path) -> None:
    """A Loop's scan output is declared ``["iters"]``; no input dim is symbolic, yet the written model declares it as
    the original does (not the size of the import's run)."""
    src = tmp_path / "loop.onnx"
    onnx.save(cm.loop_outer_nested_if(), str(src))
    kept = keep_symbolic(src, to_onnx(load(src)))
    dims = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in kept.graph.output}
    assert dims == {"yr": [2, 4], "sums": ["iters"]}


def test_the_check_at_other_sizes_accepts_onnxruntimes_own_kernels(tmp_path: Path) -> None:
    """onnxruntime runs an int4 DequantizeLinear -> MatMul as MatMulNBits, which rounds otherwise than the plain
    float meaning: the round trip (the same ops) agrees with the original as onnxruntime runs it, and is kept."""
    src = tmp_path / "int4.onnx"
    onnx.save(cm.opset21(), str(src))
    g = load(src)
    kept = keep_symbolic(src, to_onnx(g), graph=g)
    assert [d.dim_param for d in kept.graph.input[0].type.tensor_type.shape.dim] == ["batch", ""]


def _fp16_chain(fold: bool) -> onnx.ModelProto:
    """``y = (x @ A) @ B`` in float16 over ``x: [batch, 16]``, or (``fold``) ``x @ (A @ B)``: the same function, other
    float16 roundings."""
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((16, 16)) * 0.5).astype(np.float16), (rng.standard_normal((16, 16)) * 0.5).astype(
        np.float16)
    h = TensorProto.FLOAT16
    if fold:
        nodes, inits = [helper.make_node("MatMul", ["x", "AB"], ["y"])], [numpy_helper.from_array(a @ b, "AB")]
    else:
        nodes = [helper.make_node("MatMul", ["x", "A"], ["t"]), helper.make_node("MatMul", ["t", "B"], ["y"])]
        inits = [numpy_helper.from_array(a, "A"), numpy_helper.from_array(b, "B")]
    g = helper.make_graph(nodes, "fp16", [helper.make_tensor_value_info("x", h, ["batch", 16])],
                          [helper.make_tensor_value_info("y", h, ["batch", 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_float16_outputs_are_compared_at_float16_rounding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A float16 rewrite that only rounds otherwise (a few units in the last place) keeps its symbolic batch, where
    float32's rtol (1e-4, ~1/10 of a float16 unit) refused it; one that computes something else is still refused."""
    from graphsub.equivalence import compare_arrays

    src = tmp_path / "fp16.onnx"
    onnx.save(_fp16_chain(False), str(src))
    g = load(src)
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float16)
    got, want = run_model(_fp16_chain(True), {"x": x})[0], run_model(_fp16_chain(False), {"x": x})[0]
    assert compare_arrays("y", got, want, 1e-4, 1e-5)[0].ok  # within float16's own rounding
    with monkeypatch.context() as mp:  # float32's tolerance: the same roundings refused
        mp.setattr("graphsub.equivalence.tolerance.format_rtol", lambda dtype: 0.0)
        assert not compare_arrays("y", got, want, 1e-4, 1e-5)[0].ok
        with pytest.raises(VerificationError):
            keep_symbolic(src, _fp16_chain(True), graph=g)
    kept = keep_symbolic(src, _fp16_chain(True), graph=g)
    assert kept.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    wrong = _fp16_chain(True)
    wrong.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        numpy_helper.to_array(wrong.graph.initializer[0]) * np.float16(1.1), "AB"))
    with pytest.raises(VerificationError):
        keep_symbolic(src, wrong, graph=g)
