"""batchnorm / layernorm / softmax / reduce_mean / reduce_sum: formulas, shape rules, errors,
and the opset-dependent ONNX import/export forms checked against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.errors import ExportError, ShapeError
from graphsub.execute import run
from graphsub.frontends.onnx_io import from_onnx, to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir.node import make_sig
from graphsub.ops import REGISTRY
from graphsub.ops.types import TensorType
from helpers import build, check_ort, make_rand, ops_of

rand = make_rand(3)


def model_of(nodes: list[onnx.NodeProto], x_shape: tuple[int, ...], opset: int,
             inits: dict[str, np.ndarray] | None = None,
             outputs: tuple[str, ...] = ("y",),
             y_shape: tuple[int, ...] | None = None) -> onnx.ModelProto:
    """One-input model; ``y_shape`` declares the first output's shape (for opaque nodes)."""
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, y_shape if k == 0 else None)
         for k, o in enumerate(outputs)],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


def import_check(model: onnx.ModelProto, x_shape: tuple[int, ...], expected_ops: list[str]) -> Any:
    g = from_onnx(model)
    assert ops_of(g) == expected_ops
    feeds = {"x": rand(*x_shape)}
    (got,) = run(g, feeds).values()
    np.testing.assert_allclose(got, run_model(model, feeds)[0], rtol=1e-4, atol=1e-5)
    return g


# ----------------------------------------------------------------------------- batchnorm


def test_batchnorm_formula() -> None:
    x, s, b, m = rand(2, 3, 4, 4), rand(3), rand(3), rand(3)
    v = np.abs(rand(3)) + 0.5
    (y,) = REGISTRY["batchnorm"].reference([x, s, b, m, v], {"epsilon": 1e-3})
    r = (1, 3, 1, 1)
    expected = (x - m.reshape(r)) / np.sqrt(v.reshape(r) + 1e-3) * s.reshape(r) + b.reshape(r)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert y.dtype == np.float32


def test_batchnorm_errors_and_roles() -> None:
    with pytest.raises(ShapeError, match=r"var must have shape \(3,\)"):
        make_sig("batchnorm", {}, (TensorType((2, 3, 4)), *(TensorType((3,)),) * 3,
                                   TensorType((4,))))
    with pytest.raises(ShapeError, match="rank >= 2"):
        make_sig("batchnorm", {}, (TensorType((3,)), *(TensorType((3,)),) * 4))
    assert REGISTRY["batchnorm"].role(4) == "positive"


def test_batchnorm_import() -> None:
    p = {k: rand(3) for k in ("s", "b", "m")} | {"v": np.abs(rand(3)) + 0.5}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    g = import_check(model_of([node], (2, 3, 4, 5), 15, p), (2, 3, 4, 5), ["batchnorm"])
    eps = next(g.node(n) for n in g.ops_of("batchnorm")).attr["epsilon"]
    assert np.float32(eps) == np.float32(1e-3)  # ONNX float attributes are float32


def test_batchnorm_training_mode_imports_as_batchnorm_train() -> None:
    p = {k: rand(3) for k in ("s", "b", "m")} | {"v": np.abs(rand(3)) + 0.5}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                            training_mode=1)
    model = model_of([node], (2, 3, 4, 5), 15, p, y_shape=(2, 3, 4, 5))
    assert ops_of(from_onnx(model)) == ["batchnorm_train"]


def test_batchnorm_training_mode_with_running_stats_used_stays_opaque() -> None:
    p = {k: rand(3) for k in ("s", "b", "m")} | {"v": np.abs(rand(3)) + 0.5}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            training_mode=1)
    model = model_of([node], (2, 3, 4, 5), 15, p, y_shape=(2, 3, 4, 5))
    model.graph.output.append(helper.make_tensor_value_info("rm", 1, (3,)))
    assert "opaque" in ops_of(from_onnx(model))


# ----------------------------------------------------------------------------- layernorm


@pytest.mark.parametrize(
    ("axis", "scale", "bias"),
    [(-1, (8,), (8,)), (1, (4, 8), None), (-2, (4, 8), (8,)), (0, (3, 4, 8), ())],
)
def test_layernorm(axis: int, scale: Any, bias: Any) -> None:
    x = rand(3, 4, 8)
    shapes = [x.shape, scale] + ([] if bias is None else [bias])
    feeds = {f"x{i}": rand(*s) for i, s in enumerate(shapes)}
    feeds["x0"] = x
    ref = check_ort(build("layernorm", shapes, axis=axis, epsilon=1e-3), feeds)
    axes = tuple(range(axis % 3, 3))
    norm = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-3)
    expected = norm * feeds["x1"] + (feeds["x2"] if bias is not None else 0)
    np.testing.assert_allclose(ref, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("shapes", "attrs", "match"), [
    ([(2, 4, 8), (4,)], {}, "does not broadcast"),
    ([(2, 4, 8), (2, 4, 8)], {"axis": 1}, "does not broadcast"),
    ([(2, 4, 8), (8,)], {"axis": 3}, "out of range"),
    ([(2, 4, 8), (8,), (3,)], {}, "bias"),
])
def test_layernorm_errors(shapes: Any, attrs: Any, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        make_sig("layernorm", attrs, tuple(TensorType(s) for s in shapes))


def test_layernorm_export_needs_opset_17() -> None:
    g = build("layernorm", [(2, 8), (8,)])
    with pytest.raises(ExportError, match="opset >= 17"):
        to_onnx(g, opset=16)


@pytest.mark.parametrize("bias", [False, True])
def test_layernorm_import(bias: bool) -> None:
    ins = ["x", "s", "b"] if bias else ["x", "s"]
    node = helper.make_node("LayerNormalization", ins, ["y"], axis=-2, epsilon=1e-4)
    model = model_of([node], (2, 3, 4), 17, {"s": rand(3, 4), "b": rand(3, 4)})
    g = import_check(model, (2, 3, 4), ["layernorm"])
    a = next(g.node(n) for n in g.ops_of("layernorm")).attr
    assert a["axis"] == 1 and a["epsilon"] == 1e-4  # canonical axis; float32 attr read back as 1e-4


def test_layernorm_with_used_mean_stays_opaque() -> None:
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"])
    model = model_of([node], (2, 4), 17, {"s": rand(4)}, outputs=("y", "mean"))
    assert ops_of(from_onnx(model)) == ["opaque"]


# ----------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(opset: int, axis: int) -> None:
    ref = check_ort(build("softmax", [(2, 3, 5)], axis=axis), {"x0": rand(2, 3, 5)}, opset=opset)
    np.testing.assert_allclose(ref.sum(axis=axis), 1.0, rtol=1e-5)


def test_softmax_import() -> None:
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    g = import_check(model_of([node], (2, 3, 4), 13), (2, 3, 4), ["softmax"])
    assert next(g.node(n) for n in g.ops_of("softmax")).attr["axis"] == 1


def test_softmax_errors() -> None:
    with pytest.raises(ShapeError, match="out of range"):
        make_sig("softmax", {"axis": 2}, (TensorType((2, 3)),))
    with pytest.raises(ShapeError, match="floating-point"):
        make_sig("softmax", {}, (TensorType((2, 3), "int64"),))


# ----------------------------------------------------------------------------- reductions


@pytest.mark.parametrize(("axes", "keepdims", "shape"), [
    ((1,), True, (2, 1, 4, 5)), ((-1, 0), False, (3, 4)), ((0, 1, 2, 3), False, ()),
])
def test_reduce_shapes(axes: Any, keepdims: bool, shape: tuple[int, ...]) -> None:
    x = rand(2, 3, 4, 5)
    for op, fn in (("reduce_mean", np.mean), ("reduce_sum", np.sum)):
        sig = make_sig(op, {"axes": axes, "keepdims": keepdims}, (TensorType(x.shape),))
        assert sig.out_types[0].shape == shape
        (y,) = sig.opdef.reference([x], sig.attr)
        np.testing.assert_allclose(y, fn(x, axis=tuple(axes), keepdims=keepdims), rtol=1e-5,
                                   atol=1e-5)
        assert y.dtype == np.float32 and y.shape == shape


@pytest.mark.parametrize(("axes", "match"), [((), "non-empty"), ((1, -2), "repeated"),
                                             ((4,), "out of range")])
def test_reduce_errors(axes: Any, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        make_sig("reduce_sum", {"axes": axes}, (TensorType((2, 3, 4)),))


@pytest.mark.parametrize("opset", [11, 13, 17, 18])
@pytest.mark.parametrize("op", ["reduce_mean", "reduce_sum"])
def test_reduce_export_forms(op: str, opset: int) -> None:
    check_ort(build(op, [(2, 3, 4)], axes=(-1, 0), keepdims=False), {"x0": rand(2, 3, 4)},
              opset=opset)


@pytest.mark.parametrize(("op_type", "opset", "axes", "attrs", "expected_axes"), [
    ("ReduceMean", 13, None, {"axes": [-1, 1]}, (1, 2)),
    ("ReduceMean", 17, None, {"keepdims": 0}, (0, 1, 2)),
    ("ReduceMean", 18, [-2], {}, (1,)),
    ("ReduceMean", 18, None, {}, (0, 1, 2)),
    ("ReduceSum", 13, [0, -1], {"keepdims": 0}, (0, 2)),
    ("ReduceSum", 13, [], {}, (0, 1, 2)),
])
def test_reduce_import(op_type: str, opset: int, axes: list[int] | None, attrs: dict[str, Any],
                       expected_axes: tuple[int, ...]) -> None:
    ins, inits = ["x"], {}
    if axes is not None:
        ins.append("axes")
        inits["axes"] = np.array(axes, np.int64)
    node = helper.make_node(op_type, ins, ["y"], **attrs)
    op = "reduce_mean" if op_type == "ReduceMean" else "reduce_sum"
    g = import_check(model_of([node], (2, 3, 4), opset, inits), (2, 3, 4), [op])
    a = next(g.node(n) for n in g.ops_of(op)).attr
    assert a["axes"] == expected_axes and a["keepdims"] == bool(attrs.get("keepdims", 1))


def test_reduce_import_unsupported_forms() -> None:
    axes = helper.make_tensor_value_info("a", TensorProto.INT64, (1,))
    node = helper.make_node("ReduceSum", ["x", "a"], ["y"])
    model = model_of([node], (2, 3), 13, y_shape=(1, 1))
    model.graph.input.append(axes)
    assert ops_of(from_onnx(model)) == ["opaque"]  # axes not a constant
    node = helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)
    assert ops_of(from_onnx(model_of([node], (2, 3), 13))) == ["opaque"]
