"""maxpool2d / avgpool2d / global_avgpool: reference vs naive loops, ONNX ceil_mode and
count_include_pad semantics (checked against onnxruntime), import/export, errors, costs."""

from __future__ import annotations

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
from graphsub.ops.types import TensorType
from helpers import make_rand, ops_of

rand = make_rand(1)


def attrs_of(op: str, **kw: Any) -> dict[str, Any]:
    return dict(make_sig(op, kw, (TensorType((1, 1, 8, 8)),)).attr)


def naive_pool(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int],
               pads: tuple[int, int, int, int], avg: bool, include_pad: bool) -> np.ndarray:
    """Loop pooling without ceil_mode (explicit pads)."""
    n, c, h, w = x.shape
    ho = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    wo = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    y = np.zeros((n, c, ho, wo), np.float32)
    for i in range(ho):
        for j in range(wo):
            h0, w0 = i * strides[0] - pads[0], j * strides[1] - pads[1]
            h1, w1 = h0 + kernel[0], w0 + kernel[1]
            win = x[:, :, max(h0, 0):min(h1, h), max(w0, 0):min(w1, w)]
            if not avg:
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cells = kernel[0] * kernel[1] if include_pad else win.shape[2] * win.shape[3]
                y[:, :, i, j] = win.sum(axis=(2, 3)) / cells
    return y


@pytest.mark.parametrize(("avg", "include_pad"), [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize(
    ("kernel", "strides", "pads"),
    [
        ((3, 3), (2, 2), (1, 1, 1, 1)),
        ((2, 3), (1, 2), (1, 0, 0, 2)),
        ((3, 2), (3, 1), (0, 0, 0, 0)),
    ],
)
def test_pools_match_naive_loops(avg: bool, include_pad: bool, kernel: Any, strides: Any,
                                 pads: Any) -> None:
    x = rand(2, 3, 7, 8)
    op = "avgpool2d" if avg else "maxpool2d"
    kw = {"kernel": kernel, "strides": strides, "pads": pads}
    if avg:
        kw["count_include_pad"] = include_pad
    (got,) = REGISTRY[op].reference([x], attrs_of(op, **kw))
    np.testing.assert_allclose(got, naive_pool(x, kernel, strides, pads, avg, include_pad),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("h", "k", "s", "p", "ceil", "out"),
    [
        (8, 3, 2, 1, False, 4),
        (8, 3, 2, 1, True, 5),
        (6, 1, 3, 0, True, 2),  # last window would start past the input: dropped
        (9, 3, 3, 0, True, 3),
    ],
)
def test_ceil_mode_output_size(h: int, k: int, s: int, p: int, ceil: bool, out: int) -> None:
    sig = make_sig("maxpool2d", {"kernel": (k, k), "strides": (s, s), "pads": (p, p, p, p),
                                 "ceil_mode": ceil}, (TensorType((1, 1, h, h)),))
    assert sig.out_types[0].shape == (1, 1, out, out)


CASES = [
    ("maxpool2d", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": True}),
    ("maxpool2d", {"kernel": (2, 2), "strides": (2, 2), "pads": "SAME", "act": "sigmoid"}),
    ("avgpool2d", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": True}),
    ("avgpool2d", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": True,
                   "count_include_pad": True}),
    ("avgpool2d", {"kernel": (2, 3), "strides": (3, 2), "pads": (0, 1, 1, 0), "ceil_mode": True,
                   "count_include_pad": True, "act": "relu"}),
    ("avgpool2d", {"kernel": (3, 3), "strides": (2, 2), "pads": "SAME", "count_include_pad": True}),
    ("avgpool2d", {"kernel": (2, 2), "strides": (1, 1), "pads": "VALID", "act": "tanh"}),
]


@pytest.mark.parametrize(("op", "attrs"), CASES)
@pytest.mark.parametrize("hw", [(8, 9), (7, 7)])
def test_agrees_with_onnxruntime(op: str, attrs: dict[str, Any], hw: tuple[int, int]) -> None:
    b = Builder("p")
    g = b.build(b.op(op, b.input("x", (1, 2, *hw)), **attrs))
    feeds = {"x": rand(1, 2, *hw)}
    (ref,) = run(g, feeds).values()
    (got,) = run_model(to_onnx(g), feeds)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_global_avgpool() -> None:
    x = rand(2, 3, 4, 5)
    (y,) = REGISTRY["global_avgpool"].reference([x], {})
    assert y.shape == (2, 3, 1, 1) and y.dtype == np.float32
    # float32 sums in another order: a channel whose mean is near 0 differs by a few ulps of its inputs, not of it
    np.testing.assert_allclose(y[:, :, 0, 0], x.mean(axis=(2, 3)), rtol=1e-6, atol=1e-6)
    sig = make_sig("global_avgpool", {}, (TensorType((2, 3, 4, 5)),))
    assert sig.opdef.flops(sig.in_types, sig.out_types, sig.attr) == 120 + 6


@pytest.mark.parametrize(
    ("op", "shape", "attrs", "err", "match"),
    [
        ("maxpool2d", (1, 2, 8, 8), {}, AttrError, "kernel"),
        ("maxpool2d", (1, 2, 8), {"kernel": (2, 2)}, ShapeError, "expects x"),
        ("maxpool2d", (1, 2, 2, 2), {"kernel": (3, 3)}, ShapeError, "larger than the padded"),
        ("avgpool2d", (1, 2, 8, 8), {"kernel": (0, 2)}, ShapeError, "kernel"),
        ("avgpool2d", (1, 2, 8, 8), {"kernel": (2, 2), "act": "gelu"}, AttrError, "act"),
        ("maxpool2d", (1, 2, 8, 8), {"kernel": (2, 2), "count_include_pad": True}, AttrError,
         "unknown attribute"),
        ("global_avgpool", (4, 5), {}, ShapeError, "expects"),
    ],
)
def test_errors(op: str, shape: Any, attrs: Any, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        make_sig(op, attrs, (TensorType(shape),))


def test_avgpool_rejects_integers() -> None:
    with pytest.raises(ShapeError, match="floating-point"):
        make_sig("avgpool2d", {"kernel": (2, 2)}, (TensorType((1, 1, 4, 4), "int64"),))


def test_pool_flops() -> None:
    sig = make_sig("avgpool2d", {"kernel": (3, 3), "strides": (2, 2), "act": "relu"},
                   (TensorType((1, 2, 9, 9)),))
    n_out = 2 * 4 * 4
    assert sig.opdef.flops(sig.in_types, sig.out_types, sig.attr) == n_out * 9 + 2 * n_out


# ----------------------------------------------------------------------------- ONNX import


def single_node_model(node: onnx.NodeProto, shape: tuple[int, ...], indices: bool = False,
                      opset: int = 17) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if indices:
        outs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, None))
    model = helper.make_model(helper.make_graph([node], "t", ins, outs),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


@pytest.mark.parametrize(
    ("op_type", "attrs", "expected"),
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
         "maxpool2d"),
        ("MaxPool",
         {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1, "strides": [2, 2]},
         "maxpool2d"),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 0, 1, 0], "count_include_pad": 1},
         "avgpool2d"),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
         "avgpool2d"),
        ("GlobalAveragePool", {}, "global_avgpool"),
        ("MaxPool", {"kernel_shape": [2, 2], "storage_order": 1}, "opaque"),
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}, "opaque"),
        ("AveragePool", {"kernel_shape": [2, 2], "dilations": [1, 2]}, "opaque"),
    ],
)
def test_import(op_type: str, attrs: dict[str, Any], expected: str) -> None:
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    model = single_node_model(node, (1, 2, 7, 9), opset=19)  # AveragePool dilations: 19
    g = from_onnx(model)
    assert ops_of(g) == [expected]
    feeds = {"x": rand(1, 2, 7, 9)}
    (got,) = run(g, feeds).values()
    np.testing.assert_allclose(got, run_model(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_maxpool_with_used_indices_stays_opaque() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2])
    g = from_onnx(single_node_model(node, (1, 2, 4, 4), indices=True))
    assert ops_of(g) == ["opaque"]


def test_maxpool_with_unused_indices_imports() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2])
    g = from_onnx(single_node_model(node, (1, 2, 4, 4)))
    assert ops_of(g) == ["maxpool2d"]


def test_maxpool1d_stays_opaque() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2])
    assert ops_of(from_onnx(single_node_model(node, (1, 2, 6)))) == ["opaque"]
