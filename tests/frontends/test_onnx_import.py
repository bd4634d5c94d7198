"""ONNX import: opaque nodes, constants, folding, opsets, dynamic dims, malformed input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.errors import ImportError_
from graphsub.execute import run
from graphsub.frontends.onnx_io import from_onnx, load, read_model, to_onnx, write_model
from graphsub.frontends.ort import run_model
from graphsub.ir.validate import validate


def model(nodes, inputs, outputs, inits=(), opset=17, domains=()):  # type: ignore[no-untyped-def]
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def vi(name, shape, dtype=TensorProto.FLOAT):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, dtype, shape)


def assert_round_trip_identical(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    g = from_onnx(m)
    validate(g)
    expected = run_model(m, feeds)
    got = run_model(to_onnx(g), feeds)
    for e, o in zip(expected, got, strict=True):
        np.testing.assert_array_equal(o, e)


def test_unknown_op_is_kept_opaque_and_round_trips() -> None:
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    m = model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
         helper.make_node("Relu", ["v"], ["y"])],
        [vi("x", [3, 5])], [vi("y", [3, 2]), vi("i", [3, 2], TensorProto.INT64)], [k],
    )
    g = from_onnx(m)
    assert g.op_histogram() == {"opaque": 1, "relu": 1}
    (nid,) = g.ops_of("opaque")
    assert g.nodes[nid].sig.attr["op_type"] == "TopK"
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)}
    assert_round_trip_identical(m, feeds)
    # the reference executor runs opaque nodes through onnxruntime
    ref = run(g, feeds)
    np.testing.assert_array_equal(ref["y"], run_model(m, feeds)[0])


def test_custom_domain_op_is_opaque_when_shapes_are_known() -> None:
    m = model(
        [helper.make_node("Frobnicate", ["x"], ["t"], domain="com.example", alpha=0.5),
         helper.make_node("Relu", ["t"], ["y"])],
        [vi("x", [2, 2])], [vi("y", [2, 2])], domains=("com.example",),
    )
    m.graph.value_info.append(vi("t", [2, 2]))
    g = from_onnx(m)
    (nid,) = g.ops_of("opaque")
    a = g.nodes[nid].sig.attr
    assert (a["domain"], a["op_type"]) == ("com.example", "Frobnicate")
    back = to_onnx(g)
    node = next(n for n in back.graph.node if n.op_type == "Frobnicate")
    assert node.domain == "com.example" and helper.get_attribute_value(node.attribute[0]) == 0.5
    assert any(o.domain == "com.example" for o in back.opset_import)


def test_custom_op_with_unknown_shape_is_a_clear_error() -> None:
    m = model([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
              [vi("x", [2, 2])], [helper.make_value_info("y", helper.make_tensor_type_proto(TensorProto.FLOAT, None))],
              domains=("com.example",))
    with pytest.raises(ImportError_, match=r"Frobnicate.*could not determine the shape"):
        from_onnx(m)


def test_constants_identity_and_shape_arithmetic_are_folded() -> None:
    """TorchScript-style flatten: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "c0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    m = model(nodes, [vi("x", [2, 3, 4])], [vi("y", [2, 12])], inits)
    g = from_onnx(m)
    assert g.op_histogram() == {"identity": 1, "reshape": 1}
    rnode = g.nodes[next(iter(g.ops_of("reshape")))]
    # the target computed from Shape(x) is a constant attribute now (its -1 resolved or not), not an input
    assert rnode.sig.attr["shape"] in ((2, -1), (2, 12)) and len(rnode.inputs) == 1
    assert rnode.sig.out_types[0].shape == (2, 12)
    assert_round_trip_identical(m, {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)})


def test_symbolic_dims_default_to_one_or_take_given_shapes() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 3])], [vi("y", ["N", 3])])
    assert from_onnx(m).input_types[0].shape == (1, 3)
    assert from_onnx(m, input_shapes={"x": (8, 3)}).input_types[0].shape == (8, 3)
    with pytest.raises(ImportError_, match="symbolic dimensions"):
        from_onnx(m, default_dim=None)
    with pytest.raises(ImportError_, match="contradicts"):
        from_onnx(m, input_shapes={"x": (8, 4)})
    with pytest.raises(ImportError_, match="unknown inputs"):
        from_onnx(m, input_shapes={"nope": (1,)})


def test_old_opset_is_upgraded() -> None:
    m = model([helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], [vi("x", [4])], [vi("y", [4])], opset=9)
    g = from_onnx(m)
    assert g.op_histogram() == {"clip": 1}
    x = np.linspace(-3, 9, 4).astype(np.float32)
    np.testing.assert_array_equal(run_model(to_onnx(g), {"x": x})[0], np.clip(x, 0, 6))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: model([helper.make_node("Relu", ["nope"], ["y"])], [vi("x", [2])], [vi("y", [2])]),
         "undefined value"),
        (lambda: model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
                       [vi("x", [2])], [vi("a", [2])]), "cycle"),
        (lambda: model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("z", [2])]),
         "not produced"),
        (lambda: model([], [helper.make_value_info("x", helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))], [vi("x", [2])]), "not a tensor"),
        (lambda: model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2], TensorProto.STRING)],
                       [vi("y", [2])]), "unsupported dtype"),
    ],
    ids=["undefined-input", "cycle", "missing-output", "sequence-input", "string-dtype"],
)
def test_malformed_models_raise_clear_errors(make, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ImportError_, match=match):
        from_onnx(make())


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ImportError_, match="no such file"):
        load(tmp_path / "missing.onnx")
    with pytest.raises(ImportError_, match="directory"):
        load(tmp_path)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a protobuf at all" * 10)
    with pytest.raises(ImportError_):
        load(junk)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ImportError_):
        load(empty)
    good = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(good.SerializeToString()[:-7])
    with pytest.raises(ImportError_):
        load(trunc)


def test_external_data_load_and_atomic_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [2, 64])], [vi("y", [2, 64])],
              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="ext.bin", size_threshold=0)
    assert (tmp_path / "ext.bin").exists()
    g = load(path)
    np.testing.assert_array_equal(g.params["w"], w)
    # large models are written with external data, atomically (no temp files left behind)
    import graphsub.frontends.onnx_io as io

    monkeypatch.setattr(io, "EXTERNAL_DATA_THRESHOLD", 100)
    out = tmp_path / "out" / "big.onnx"
    out.parent.mkdir()
    write_model(to_onnx(g), out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["big.onnx", "big.onnx.data"]
    x = np.ones((2, 64), np.float32)
    np.testing.assert_allclose(run_model(str(out), {"x": x})[0], x @ w, rtol=1e-5)
    # missing external data: clear error
    (tmp_path / "ext.bin").unlink()
    with pytest.raises(ImportError_):
        load(path)
    assert read_model(out).graph.name


def _control_flow_reading_outer_values() -> onnx.ModelProto:
    """``y = If(sum(x) > 0, relu(a), -a) * x`` with ``a = x + x`` read by both branches from the outer graph, then
    ``Loop`` 3 times adding ``b = x * 2`` (read by the body, inside a nested If too) to a carried value."""
    f = TensorProto.FLOAT
    then_b = helper.make_graph([helper.make_node("Relu", ["a"], ["t"])], "then", [], [
        helper.make_tensor_value_info("t", f, [2, 4])])
    else_b = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [], [
        helper.make_tensor_value_info("e", f, [2, 4])])
    inner = helper.make_graph([helper.make_node("Add", ["acc", "b"], ["nx"])], "inner", [], [
        helper.make_tensor_value_info("nx", f, [2, 4])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("If", ["cond_in"], ["acc_out"], then_branch=inner, else_branch=inner)],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in",
                                                                                                  TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", f, [2, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", f,
                                                                                                       [2, 4])])
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Mul", ["x", "two"], ["b"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y0"], then_branch=then_b, else_branch=else_b),
             helper.make_node("Loop", ["n", "true", "y0"], ["y1"], body=body),
             helper.make_node("Mul", ["y1", "x"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(2, np.float32), "two"), numpy_helper.from_array(np.array(3), "n"),
             numpy_helper.from_array(np.array(True), "true")]
    g = helper.make_graph(nodes, "cf", [helper.make_tensor_value_info("x", f, [2, 4])],
                          [helper.make_tensor_value_info("y", f, [2, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def test_control_flow_reading_outer_values_is_kept_opaque_and_round_trips(tmp_path: Path) -> None:
    """An If or Loop whose subgraphs read values of the enclosing graph (the normal way ONNX control flow is written)
    is imported as an opaque node with those values as extra inputs (``captures``), so the data flow is in the graph;
    the export writes the subgraphs reading the exported names, and the round trip computes what the original does;
    ``optimize`` runs on it (nothing refused)."""
    from graphsub.optimize import optimize

    m = _control_flow_reading_outer_values()
    g = from_onnx(m)
    opaque = [g.nodes[i].sig.attr for i in g.ops_of("opaque")]
    flow = [(a["op_type"], a["captures"]) for a in opaque if a["op_type"] in ("If", "Loop")]
    assert flow == [("If", ("a",)), ("Loop", ("b",))]
    back = to_onnx(g)
    onnx.checker.check_model(back, full_check=True)
    for sign in (1.0, -1.0):
        x = sign * np.abs(np.random.default_rng(0).standard_normal((2, 4))).astype(np.float32)
        want = run_model(m, {"x": x})[0]
        np.testing.assert_allclose(run_model(back, {"x": x})[0], want, rtol=1e-6)
        np.testing.assert_allclose(run(g, {"x": x})["y"], want, rtol=1e-6)  # the reference executor runs it too
    path = tmp_path / "cf.onnx"
    onnx.save(m, str(path))
    res = optimize(path, output=tmp_path / "out.onnx", cost="roofline:cpu", peers="none", eqsat_s=0, time_s=None,
                   measure_latency=False)
    assert res.verified and (tmp_path / "out.onnx").is_file(), res.decision
