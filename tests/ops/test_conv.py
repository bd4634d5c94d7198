"""conv2d / enlarge / merge_gconv: reference vs a naive loop, TASO weight-transform identities,
shape and attribute errors, costs, and the ONNX import/export paths onnxruntime must agree with."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphsub.errors import AttrError, ShapeError
from graphsub.execute import run
from graphsub.frontends.onnx_io import from_onnx, to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir import Builder
from graphsub.ir.node import make_sig
from graphsub.ops import REGISTRY
from graphsub.ops.conv import conv2d_ref
from graphsub.ops.types import TensorType
from helpers import make_rand, ops_of

rand = make_rand(0)


def naive_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: tuple[int, int],
               pads: tuple[int, int, int, int], dil: tuple[int, int]) -> np.ndarray:
    """Direct six-loop convolution (explicit pads, groups = C / w.shape[1])."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = c // cg
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), np.float64)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    ho = (xp.shape[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    wo = (xp.shape[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    y = np.zeros((n, o, ho, wo))
    for oc in range(o):
        grp = oc // (o // g)
        for i in range(ho):
            for j in range(wo):
                for ci in range(cg):
                    for p in range(kh):
                        for q in range(kw):
                            y[:, oc, i, j] += w[oc, ci, p, q] * xp[
                                :, grp * cg + ci, i * strides[0] + p * dil[0],
                                j * strides[1] + q * dil[1]]
        if b is not None:
            y[:, oc] += b[oc]
    return y


@pytest.mark.parametrize(
    ("xs", "ws", "strides", "pads", "dil", "bias"),
    [
        ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
        ((1, 4, 9, 8), (6, 2, 3, 2), (2, 1), (0, 2, 1, 0), (1, 1), False),  # grouped, asymmetric
        ((1, 4, 8, 8), (4, 1, 3, 3), (1, 2), (2, 2, 2, 2), (2, 2), True),  # depthwise, dilated
        ((1, 2, 5, 5), (3, 2, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), False),  # 1x1 stride 2
    ],
)
def test_conv_matches_naive_loops(xs: tuple[int, ...], ws: tuple[int, ...], strides: Any,
                                  pads: Any, dil: Any, bias: bool) -> None:
    x, w = rand(*xs), rand(*ws)
    b = rand(ws[0]) if bias else None
    got = conv2d_ref(x, w, b, strides, pads, dil)
    np.testing.assert_allclose(got, naive_conv(x, w, b, strides, pads, dil), rtol=1e-4, atol=1e-4)
    assert got.dtype == np.float32


@pytest.mark.parametrize("size", [7, 8, 9, 224])
@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_same_output_size_is_ceil(size: int, stride: int, k: int) -> None:
    sig = make_sig("conv2d", {"strides": (stride, stride), "pads": "SAME"},
                   (TensorType((1, 2, size, size)), TensorType((2, 2, k, k))))
    assert sig.out_types[0].shape == (1, 2, -(-size // stride), -(-size // stride))


def test_acts_and_bias() -> None:
    x, w, b = rand(1, 2, 5, 5), rand(3, 2, 3, 3), rand(3)
    plain = conv2d_ref(x, w, b, pads="SAME")
    assert np.allclose(conv2d_ref(x, w, b, pads="SAME", act="relu"), np.maximum(plain, 0))
    assert np.allclose(conv2d_ref(x, w, b, pads="SAME", act="tanh"), np.tanh(plain), atol=1e-6)


def test_reference_is_fast_enough() -> None:
    x, w = rand(1, 64, 56, 56), rand(64, 64, 3, 3)
    t0 = time.perf_counter()
    y = conv2d_ref(x, w, None, pads="SAME")
    assert y.shape == (1, 64, 56, 56)
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize(("o", "cg", "groups", "count"), [(8, 2, 4, 2), (8, 2, 4, 4), (6, 1, 6, 3)])
def test_merge_gconv_preserves_the_conv(o: int, cg: int, groups: int, count: int) -> None:
    x, w = rand(2, cg * groups, 6, 6), rand(o, cg, 3, 3)
    (merged,) = REGISTRY["merge_gconv"].reference([w], {"groups": groups, "count": count})
    assert merged.shape == (o, cg * count, 3, 3)
    before = conv2d_ref(x, w, None, pads=(1, 1, 1, 1))
    after = conv2d_ref(x, merged, None, pads=(1, 1, 1, 1))  # groups / count groups
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_enlarge_1x1_equals_3x3_with_pads() -> None:
    x, w = rand(1, 3, 6, 7), rand(4, 3, 1, 1)
    (big,) = REGISTRY["enlarge"].reference([w], {"kernel": (3, 3)})
    assert big.shape == (4, 3, 3, 3) and big[:, :, 1, 1].tolist() == w[:, :, 0, 0].tolist()
    np.testing.assert_allclose(conv2d_ref(x, big, None, pads=(1, 1, 1, 1)),
                               conv2d_ref(x, w, None), rtol=1e-5, atol=1e-6)


def test_graph_rewrite_equivalence_via_builder() -> None:
    """merge_gconv / enlarge nodes in a graph compute the same as the original conv."""
    b = Builder("g")
    x = b.input("x", (1, 8, 5, 5))
    w = b.weight("w", data=rand(8, 2, 1, 1))
    y0 = b.conv2d(x, w, act="relu")
    wm = b.merge_gconv(b.enlarge(w, kernel=(3, 3)), groups=4, count=2)
    y1 = b.conv2d(x, wm, pads=(1, 1, 1, 1), act="relu")
    assert y1.shape == y0.shape == (1, 8, 5, 5)
    out = run(b.build([y0, y1]), {"x": rand(1, 8, 5, 5)})
    a, c = out.values()
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("xs", "ws", "extra", "attrs", "match"),
    [
        ((1, 3, 8, 8), (4, 2, 3, 3), (), {}, "not a multiple"),
        ((1, 4, 8, 8), (3, 2, 3, 3), (), {}, "not divisible by groups 2"),
        ((1, 4, 8, 8), (4, 4, 3, 3), ((3,),), {}, "bias must have shape"),
        ((1, 4, 2, 2), (4, 4, 3, 3), (), {}, "larger than the padded input"),
        ((1, 4, 8), (4, 4, 3, 3), (), {}, "expects x"),
        ((1, 4, 8, 8), (4, 4, 3, 3), (), {"strides": (0, 1)}, "strides"),
    ],
)
def test_conv_shape_errors(xs: Any, ws: Any, extra: Any, attrs: Any, match: str) -> None:
    ins = (TensorType(xs), TensorType(ws), *(TensorType(s) for s in extra))
    with pytest.raises(ShapeError, match=match):
        make_sig("conv2d", attrs, ins)


@pytest.mark.parametrize(
    ("op", "shape", "attrs", "err", "match"),
    [
        ("conv2d", None, {"act": "gelu"}, AttrError, "act"),
        ("conv2d", None, {"pads": (1, 1)}, AttrError, "pads"),
        ("conv2d", None, {"groups": 2}, AttrError, "unknown attribute"),
        ("enlarge", (4, 3, 1, 1), {}, AttrError, "kernel"),
        ("enlarge", (4, 3, 1, 1), {"kernel": (2, 2)}, ShapeError, "even"),
        ("enlarge", (4, 3, 3, 3), {"kernel": (1, 1)}, ShapeError, "at least"),
        ("merge_gconv", (8, 2, 3, 3), {"groups": 4, "count": 3}, ShapeError, "count"),
        ("merge_gconv", (6, 2, 3, 3), {"groups": 4, "count": 2}, ShapeError, "O=6"),
    ],
)
def test_attr_errors(op: str, shape: Any, attrs: Any, err: type, match: str) -> None:
    ins = (TensorType((1, 4, 8, 8)), TensorType((4, 4, 3, 3))) if shape is None else (
        TensorType(shape),)
    with pytest.raises(err, match=match):
        make_sig(op, attrs, ins)


def test_conv_flops() -> None:
    sig = make_sig("conv2d", {"strides": (2, 2), "pads": "SAME", "act": "relu"},
                   (TensorType((2, 8, 16, 16)), TensorType((6, 4, 3, 3)), TensorType((6,))))
    outs = 2 * 6 * 8 * 8
    assert sig.out_types[0].shape == (2, 6, 8, 8)
    assert sig.opdef.flops(sig.in_types, sig.out_types, sig.attr) == outs * (2 * 4 * 9 + 2)
    assert REGISTRY["enlarge"].weight_op and REGISTRY["merge_gconv"].weight_op


# ----------------------------------------------------------------------------- ONNX


def single_node_model(node: onnx.NodeProto, feeds: dict[str, np.ndarray],
                      opset: int = 17) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    model = helper.make_model(helper.make_graph([node], "t", ins, outs),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


@pytest.mark.parametrize(
    ("attrs", "xs", "ws"),
    [
        ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 4, 9, 8), (6, 4, 3, 3)),
        ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, (1, 4, 8, 8), (6, 4, 4, 4)),
        ({"auto_pad": "VALID", "dilations": [2, 1]}, (1, 4, 9, 8), (6, 4, 3, 3)),
        ({"pads": [0, 1, 2, 1], "group": 2, "kernel_shape": [3, 2]}, (1, 4, 7, 7), (6, 2, 3, 2)),
    ],
)
def test_conv_import_agrees_with_onnxruntime(attrs: dict[str, Any], xs: Any, ws: Any) -> None:
    feeds = {"x": rand(*xs), "w": rand(*ws), "b": rand(ws[0])}
    model = single_node_model(helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs), feeds)
    g = from_onnx(model)
    assert ops_of(g) == ["conv2d"]
    (got,) = run(g, feeds).values()
    np.testing.assert_allclose(got, run_model(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_conv1d_stays_opaque() -> None:
    feeds = {"x": rand(1, 2, 9), "w": rand(3, 2, 3)}
    g = from_onnx(single_node_model(helper.make_node("Conv", ["x", "w"], ["y"]), feeds))
    assert ops_of(g) == ["opaque"]


def test_conv_export_round_trip() -> None:
    b = Builder("c")
    x = b.input("x", (1, 4, 9, 9))
    w = b.weight("w", data=rand(4, 2, 3, 3))
    g = b.build(b.conv2d(x, w, strides=(2, 2), pads="SAME", act="relu"))
    model = to_onnx(g)
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu"]
    g2 = from_onnx(model)
    assert ops_of(g2) == ["conv2d", "relu"]
    feeds = {"x": rand(1, 4, 9, 9)}
    np.testing.assert_allclose(run_model(model, feeds)[0], next(iter(run(g, feeds).values())),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [10, 13])
def test_enlarge_exports_for_old_and_new_pad(opset: int) -> None:
    b = Builder("e")
    w = b.input("w", (2, 3, 1, 3))
    g = b.build(b.enlarge(w, kernel=(3, 5)))
    feeds = {"w": rand(2, 3, 1, 3)}
    (expected,) = run(g, feeds).values()
    np.testing.assert_array_equal(run_model(to_onnx(g, opset=opset), feeds)[0], expected)
