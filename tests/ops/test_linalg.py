"""matmul / gemm: numpy semantics of shapes (1-D operands, batch broadcasting), transposes and
bias broadcasting, errors, costs, and ONNX import/export checked against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.errors import AttrError, ShapeError
from graphsub.execute import run
from graphsub.frontends.onnx_io import from_onnx, to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir.node import make_sig
from graphsub.ops.types import TensorType
from helpers import build, check_ort, make_rand, ops_of

rand = make_rand(2)


@pytest.mark.parametrize(
    ("a", "b"),
    [((3, 4), (4, 5)), ((4,), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)),
     ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (6, 4, 2))],
)
def test_matmul_shapes_follow_numpy(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    sig = make_sig("matmul", {}, (TensorType(a), TensorType(b)))
    x, y = rand(*a), rand(*b)
    expected = np.matmul(x, y)
    assert sig.out_types[0].shape == expected.shape
    g = build("matmul", [a, b])
    ref = check_ort(g, {"x0": x, "x1": y})
    np.testing.assert_allclose(ref, expected, rtol=1e-6)


def test_matmul_act_exports_two_nodes() -> None:
    g = build("matmul", [(3, 4), (4, 5)], act="relu")
    assert [n.op_type for n in to_onnx(g).graph.node] == ["MatMul", "Relu"]
    ref = check_ort(g, {"x0": rand(3, 4), "x1": rand(4, 5)})
    assert ref.min() >= 0


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [((3, 4), (5, 6), "inner dimensions"), ((2, 3, 4), (3, 4, 5), "not broadcastable"),
     ((), (3,), "rank >= 1")],
)
def test_matmul_errors(a: Any, b: Any, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        make_sig("matmul", {}, (TensorType(a), TensorType(b)))


def test_matmul_dtype_and_act_errors() -> None:
    with pytest.raises(ShapeError, match="dtype"):
        make_sig("matmul", {}, (TensorType((2, 2)), TensorType((2, 2), "float64")))
    with pytest.raises(AttrError, match="act"):
        make_sig("matmul", {"act": "softmax"}, (TensorType((2, 2)), TensorType((2, 2))))


def test_matmul_flops() -> None:
    sig = make_sig("matmul", {"act": "relu"}, (TensorType((2, 1, 3, 4)), TensorType((5, 4, 6))))
    assert sig.out_types[0].shape == (2, 5, 3, 6)
    assert sig.opdef.flops(sig.in_types, sig.out_types, sig.attr) == 2 * 10 * 3 * 4 * 6 + 180


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("c", [None, (), (5,), (1, 5), (3, 1), (3, 5)])
def test_gemm(trans_a: bool, trans_b: bool, c: tuple[int, ...] | None) -> None:
    m, k, n = 3, 4, 5
    a = rand(k, m) if trans_a else rand(m, k)
    b = rand(n, k) if trans_b else rand(k, n)
    feeds = {"x0": a, "x1": b}
    if c is not None:
        feeds["x2"] = rand(*c)
    attrs = {"alpha": 0.5, "beta": 2.0, "trans_a": trans_a, "trans_b": trans_b}
    g = build("gemm", [v.shape for v in feeds.values()], **attrs)
    ref = check_ort(g, feeds)
    expected = 0.5 * (a.T if trans_a else a) @ (b.T if trans_b else b)
    if c is not None:
        expected = expected + 2.0 * feeds["x2"]
    np.testing.assert_allclose(ref, expected, rtol=1e-5, atol=1e-6)


def test_gemm_without_c_exports_before_opset_11() -> None:
    g = build("gemm", [(3, 4), (4, 5)], alpha=2.0, beta=3.0)
    check_ort(g, {"x0": rand(3, 4), "x1": rand(4, 5)}, opset=9)


@pytest.mark.parametrize(
    ("shapes", "attrs", "match"),
    [
        ([(3, 4), (5, 4)], {}, "inner dimensions"),
        ([(3, 4), (4, 5), (4,)], {}, "does not broadcast"),
        ([(3, 4), (4, 5), (1, 3, 5)], {}, "does not broadcast"),
        ([(3, 4, 1), (4, 5)], {}, "matrices"),
    ],
)
def test_gemm_errors(shapes: Any, attrs: Any, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        make_sig("gemm", attrs, tuple(TensorType(s) for s in shapes))


def test_gemm_flops() -> None:
    sig = make_sig("gemm", {}, (TensorType((3, 4)), TensorType((4, 5)), TensorType((5,))))
    assert sig.opdef.flops(sig.in_types, sig.out_types, sig.attr) == 2 * 60 + 2 * 15


# ----------------------------------------------------------------------------- ONNX import


@pytest.mark.parametrize("with_c", [False, True])
def test_gemm_and_matmul_import(with_c: bool) -> None:
    w = rand(5, 4)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "c"] if with_c else ["x", "w"], ["h"],
                         alpha=0.5, beta=2.0, transB=1),
        helper.make_node("MatMul", ["h", "v"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rand(5), "c"),
             numpy_helper.from_array(rand(5, 2), "v")]
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    g = from_onnx(model)
    assert ops_of(g) == ["gemm", "matmul"]
    (gemm,) = (g.node(n) for n in g.ops_of("gemm"))
    assert gemm.attr["trans_b"] is True and gemm.attr["alpha"] == 0.5
    feeds = {"x": rand(3, 4)}
    (got,) = run(g, feeds).values()
    np.testing.assert_allclose(got, run_model(model, feeds)[0], rtol=1e-5, atol=1e-5)
