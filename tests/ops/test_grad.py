"""Gradient kernels (graphsub.ops.grad / grad_pool): the numpy references equal torch.autograd of the
forward ops (grids of groups/strides/dilations/pads, ties, ceil_mode, count_include_pad, repeated
indices), the ONNX exports agree with the references in onnxruntime on the same grids, and the
torch kernels (GRAD_TORCH_OPS) agree too.  The registry tests check the OpDef samples besides."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from graphsub.errors import ShapeError
from graphsub.frontends.onnx_export import export_graph
from graphsub.frontends.ort import run_model
from graphsub.frontends.torch_ops import TORCH_OPS, run_sig
from graphsub.ir import Builder
from graphsub.ir.node import make_sig
from graphsub.ops import REGISTRY
from graphsub.ops.types import TensorType

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def ties(*shape: int) -> np.ndarray:
    """relu'd data on a coarse grid: most windows hold several equal maxima (zeros and others)."""
    return np.maximum(np.round(RNG.standard_normal(shape) * 2) / 2, 0).astype(np.float32)


def reference(op: str, xs: list[np.ndarray], attrs: Any) -> Any:
    fn = REGISTRY[op].reference
    assert fn is not None
    return fn(xs, attrs)


def check_kernel(op: str, attrs: dict[str, Any], xs: list[np.ndarray], want: np.ndarray,
                 rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """The reference equals ``want``; onnxruntime (through the exporter) and the torch kernel
    equal the reference."""
    sig = make_sig(op, attrs, [TensorType(x.shape, str(x.dtype)) for x in xs])
    (ref,) = reference(op, xs, sig.attr)
    assert ref.shape == sig.out_types[0].shape == want.shape
    assert ref.dtype == np.float32
    np.testing.assert_allclose(ref, want, rtol=rtol, atol=atol)
    b = Builder(op)
    vals = [b.input(f"x{i}", x.shape, str(x.dtype)) for i, x in enumerate(xs)]
    g = b.build(b.op(op, *vals, **attrs))
    (got,) = run_model(export_graph(g), {f"x{i}": x for i, x in enumerate(xs)})
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        (tgot,) = run_sig(sig, [torch.from_numpy(x) for x in xs])
    np.testing.assert_allclose(tgot.numpy(), ref, rtol=1e-4, atol=1e-5)


def vjp(fn: Any, xs: list[np.ndarray], dy: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """Gradients of sum(fn(*xs) * dy) with respect to each float x (float64 autograd), and dy."""
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    y = fn(*ts)
    if dy is None:
        dy = rand(*y.shape)
    grads = torch.autograd.grad(y, ts, torch.from_numpy(dy).double())
    return [gr.numpy() for gr in grads], dy


# ----------------------------------------------------------------------------- convolution

#: (x shape, O, kernel, strides, dilations, pads (t, l, b, r)); groups = C / (C per group)
CONV_CASES = [
    pytest.param((2, 3, 8, 8), 4, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), id="plain"),
    pytest.param((2, 3, 9, 8), 4, 1, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), id="stride2-remainder"),
    pytest.param((1, 4, 9, 11), 6, 2, (3, 2), (2, 3), (1, 1), (1, 0, 2, 2), id="groups2-asym"),
    pytest.param((1, 6, 10, 10), 6, 6, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), id="depthwise-dilated"),
    pytest.param((1, 6, 11, 9), 12, 6, (3, 3), (2, 2), (2, 2), (0, 1, 2, 0), id="depthwise-x2-asym"),
    pytest.param((2, 4, 10, 8), 4, 2, (2, 2), (3, 3), (2, 1), (0, 1, 1, 0), id="stride3-dilated"),
    pytest.param((1, 2, 7, 7), 3, 1, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), id="1x1-stride2"),
    pytest.param((1, 4, 12, 13), 8, 4, (5, 5), (3, 2), (1, 2), (2, 1, 0, 3), id="5x5-mixed"),
    pytest.param((1, 2, 5, 5), 2, 1, (2, 2), (2, 2), (1, 1), (3, 0, 0, 3), id="pad-only-windows"),
]


def _conv_pad(x: torch.Tensor, pads: tuple[int, int, int, int]) -> torch.Tensor:
    t, left, b, r = pads
    return F.pad(x, (left, r, t, b))


@pytest.mark.parametrize(("x_shape", "o", "groups", "kernel", "strides", "dilations", "pads"), CONV_CASES)
def test_conv_grads_match_autograd(x_shape: tuple[int, ...], o: int, groups: int, kernel: tuple[int, int],
                                   strides: tuple[int, int], dilations: tuple[int, int],
                                   pads: tuple[int, int, int, int]) -> None:
    x, w = rand(*x_shape), rand(o, x_shape[1] // groups, *kernel)
    (gx, gw), dy = vjp(lambda xt, wt: F.conv2d(_conv_pad(xt, pads), wt, None, strides, 0, dilations, groups),
                       [x, w])
    common = {"strides": strides, "dilations": dilations, "pads": pads}
    check_kernel("conv2d_grad_x", {**common, "x_shape": x_shape}, [dy, w], gx)
    check_kernel("conv2d_grad_w", {**common, "w_shape": w.shape}, [x, dy], gw, rtol=1e-4)


def test_conv_grads_same_pads_canonicalised() -> None:
    sig = make_sig("conv2d_grad_x", {"pads": "SAME", "strides": (2, 2), "x_shape": (1, 3, 9, 9)},
                   [TensorType((1, 4, 5, 5)), TensorType((4, 3, 3, 3))])
    assert sig.attr["pads"] == (1, 1, 1, 1)
    sig = make_sig("conv2d_grad_w", {"pads": "SAME", "strides": (2, 2), "w_shape": (4, 3, 3, 3)},
                   [TensorType((1, 3, 9, 9)), TensorType((1, 4, 5, 5))])
    assert sig.attr["pads"] == (1, 1, 1, 1)
    fwd = make_sig("conv2d", {"pads": "SAME", "strides": (2, 2)},
                   [TensorType((1, 3, 9, 9)), TensorType((4, 3, 3, 3))])
    # the gradients cost what the forward conv costs
    assert REGISTRY["conv2d_grad_w"].flops(sig.in_types, sig.out_types, sig.attr) == \
        REGISTRY["conv2d"].flops(fwd.in_types, fwd.out_types, fwd.attr)


@pytest.mark.parametrize(("op", "attrs", "shapes"), [
    ("conv2d_grad_x", {"x_shape": (1, 3, 8, 8)}, [(1, 4, 5, 5), (4, 3, 3, 3)]),  # dy should be 6x6
    ("conv2d_grad_x", {"x_shape": (1, 3, 8)}, [(1, 4, 6, 6), (4, 3, 3, 3)]),
    ("conv2d_grad_x", {"x_shape": (1, 5, 8, 8)}, [(1, 4, 6, 6), (4, 3, 3, 3)]),  # 5 channels, 3 per group
    ("conv2d_grad_w", {"w_shape": (4, 3, 3, 3)}, [(1, 3, 8, 8), (1, 5, 6, 6)]),  # O mismatch
    ("conv2d_grad_w", {"w_shape": (4, 2, 3, 3)}, [(1, 3, 8, 8), (1, 4, 6, 6)]),
    ("maxpool2d_grad", {"kernel": (2, 2)}, [(1, 2, 6, 6), (1, 2, 3, 3)]),  # dy should be 5x5
    ("maxpool2d_grad", {"kernel": (2, 2), "strides": (2, 2)}, [(1, 2, 6, 6), (1, 3, 3, 3)]),
    ("avgpool2d_grad", {"kernel": (2, 2), "x_shape": (1, 2, 6, 6)}, [(1, 2, 3, 3)]),
    ("relu_grad", {}, [(2, 3), (3, 2)]),
    ("hardswish_grad", {}, [(2, 3), (2, 1)]),
    ("gather_grad", {"x_shape": (5, 4)}, [(3,), (3, 5)]),
    ("gather_grad", {"x_shape": (5, 4), "axis": 2}, [(3,), (3, 4)]),
])
def test_inconsistent_shapes_raise(op: str, attrs: dict[str, Any], shapes: list[tuple[int, ...]]) -> None:
    types = [TensorType(s, "int64" if op == "gather_grad" and i == 0 else "float32") for i, s in enumerate(shapes)]
    with pytest.raises(ShapeError):
        make_sig(op, attrs, types)


# ----------------------------------------------------------------------------- pools

#: (x shape, kernel, strides, pads (t, l, b, r), ceil_mode)
POOL_CASES = [
    pytest.param((2, 3, 8, 8), (3, 3), (2, 2), (1, 1, 1, 1), False, id="overlap"),
    pytest.param((2, 3, 7, 8), (3, 3), (2, 2), (1, 1, 1, 1), True, id="ceil"),
    pytest.param((2, 2, 8, 7), (2, 3), (2, 2), (1, 0, 0, 1), False, id="asym"),
    pytest.param((1, 2, 9, 9), (3, 3), (1, 1), (0, 0, 0, 0), False, id="stride1"),
    pytest.param((1, 2, 7, 7), (2, 2), (2, 2), (0, 0, 0, 0), True, id="ceil-nopad"),
    pytest.param((1, 3, 6, 6), (3, 2), (3, 1), (1, 0, 1, 1), True, id="ceil-asym"),
    pytest.param((1, 2, 7, 9), (2, 2), (3, 3), (0, 0, 0, 0), False, id="stride>kernel"),
]


def _torch_pool(avg: bool, kernel: Any, strides: Any, pads: Any, ceil_mode: bool, include_pad: bool = False,
                out_hw: Any = None) -> Any:
    """Forward pool in torch: torch's own (symmetric pads it accepts) or graphsub's torch forward."""
    t, left, b, r = pads
    if (t, left) == (b, r) and t <= kernel[0] // 2 and left <= kernel[1] // 2:
        if avg:
            return lambda x: F.avg_pool2d(x, kernel, strides, (t, left), ceil_mode, include_pad)
        return lambda x: F.max_pool2d(x, kernel, strides, (t, left), ceil_mode=ceil_mode)
    op = "avgpool2d" if avg else "maxpool2d"
    extra = {"count_include_pad": include_pad} if avg else {}

    def fn(x: torch.Tensor) -> torch.Tensor:
        sig = make_sig(op, {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode, **extra},
                       [TensorType(tuple(x.shape))])
        return run_sig(sig, [x])[0]

    return fn


@pytest.mark.parametrize("data", ["ties", "zeros", "normal"])
@pytest.mark.parametrize(("x_shape", "kernel", "strides", "pads", "ceil_mode"), POOL_CASES)
def test_maxpool_grad_first_maximum(x_shape: tuple[int, ...], kernel: Any, strides: Any, pads: Any,
                                    ceil_mode: bool, data: str) -> None:
    x = {"ties": ties, "zeros": lambda *s: np.zeros(s, np.float32), "normal": rand}[data](*x_shape)
    (gx,), dy = vjp(_torch_pool(False, kernel, strides, pads, ceil_mode), [x])
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode}
    check_kernel("maxpool2d_grad", attrs, [x, dy], gx)


def test_maxpool_grad_goes_to_first_of_equal_maxima() -> None:
    x = np.zeros((1, 1, 2, 4), np.float32)
    x[0, 0, 1, 1] = x[0, 0, 0, 3] = x[0, 0, 1, 3] = 1.0
    dy = np.array([[[[2.0, 3.0]]]], np.float32)
    (dx,) = reference("maxpool2d_grad", [x, dy], make_sig(
        "maxpool2d_grad", {"kernel": (2, 2), "strides": (2, 2)},
        [TensorType((1, 1, 2, 4)), TensorType((1, 1, 1, 2))]).attr)
    want = np.zeros_like(x)
    want[0, 0, 1, 1], want[0, 0, 0, 3] = 2.0, 3.0  # the all-zero-but-one window, then row-major first
    np.testing.assert_array_equal(dx, want)
    # all zeros after a relu: every window's gradient lands on its top-left cell
    zero = np.zeros((1, 1, 4, 4), np.float32)
    sig = make_sig("maxpool2d_grad", {"kernel": (2, 2), "strides": (2, 2)},
                   [TensorType((1, 1, 4, 4)), TensorType((1, 1, 2, 2))])
    (dz,) = reference("maxpool2d_grad", [zero, np.ones((1, 1, 2, 2), np.float32)], sig.attr)
    assert dz[0, 0, ::2, ::2].tolist() == [[1, 1], [1, 1]] and dz.sum() == 4


@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize(("x_shape", "kernel", "strides", "pads", "ceil_mode"), POOL_CASES)
def test_avgpool_grad_matches_autograd(x_shape: tuple[int, ...], kernel: Any, strides: Any, pads: Any,
                                       ceil_mode: bool, include_pad: bool) -> None:
    (gx,), dy = vjp(_torch_pool(True, kernel, strides, pads, ceil_mode, include_pad), [rand(*x_shape)])
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode,
             "count_include_pad": include_pad, "x_shape": x_shape}
    check_kernel("avgpool2d_grad", attrs, [dy], gx)


# ----------------------------------------------------------------------------- elementwise

KINKS = np.array([-3.0, 3.0, 0.0, -0.0, 0.5, -0.5, 6.0, -6.0, 2.5, -2.5, 1.0, -1.0], np.float32)


def _with_kinks(n: int = 40) -> np.ndarray:
    return np.concatenate([KINKS, (RNG.standard_normal(n) * 4).astype(np.float32)]).reshape(2, -1)


@pytest.mark.parametrize(("op", "attrs", "fwd"), [
    ("relu_grad", {}, torch.relu),
    ("leakyrelu_grad", {"alpha": 0.1}, lambda x: F.leaky_relu(x, 0.1)),
    ("clip_grad", {"min": -0.5, "max": 1.0}, lambda x: torch.clamp(x, -0.5, 1.0)),
    ("clip_grad", {"min": 0.0}, lambda x: torch.clamp(x, min=0.0)),
    ("clip_grad", {"max": 2.5}, lambda x: torch.clamp(x, max=2.5)),
    ("hardsigmoid_grad", {"alpha": 1 / 6, "beta": 0.5}, F.hardsigmoid),
    ("hardswish_grad", {}, F.hardswish),
    ("abs_grad", {}, torch.abs),
])
def test_elementwise_grads_match_autograd(op: str, attrs: dict[str, Any], fwd: Any) -> None:
    x = _with_kinks()
    (gx,), dy = vjp(fwd, [x])
    check_kernel(op, attrs, [x, dy], gx)


def test_elementwise_grads_at_kinks() -> None:
    x = np.array([-4.0, -3.0, 0.0, 3.0, 4.0], np.float32)
    dy = np.ones(5, np.float32)

    def ref(op: str, **attrs: Any) -> list[float]:
        sig = make_sig(op, attrs, [TensorType((5,)), TensorType((5,))])
        return reference(op, [x, dy], sig.attr)[0].tolist()

    assert ref("relu_grad") == [0, 0, 0, 1, 1]
    assert ref("leakyrelu_grad", alpha=0.5) == [0.5, 0.5, 0.5, 1, 1]
    assert ref("clip_grad", min=-3.0, max=3.0) == [0, 1, 1, 1, 0]
    assert ref("hardswish_grad") == [0, 0, 0.5, 1, 1]  # torch's choice at -3 and 3
    assert ref("abs_grad") == [-1, -1, 0, 1, 1]
    assert ref("hardsigmoid_grad") == [0, 0, pytest.approx(0.2), 0, 0]  # 0.2*x+0.5 in (0, 1) for |x| < 2.5


def test_relu_grad_accepts_relu_output() -> None:
    x = _with_kinks()
    (gx,), dy = vjp(torch.relu, [x])
    check_kernel("relu_grad", {}, [np.maximum(x, 0), dy], gx)


def test_hardsigmoid_grad_general_alpha() -> None:
    x = (RNG.standard_normal((4, 30)) * 3).astype(np.float32)
    pre = 0.3 * x + 0.1
    # off the kinks, where clamp's backward (inclusive) and hardsigmoid's (exclusive) differ
    x = np.where((np.abs(pre) < 1e-3) | (np.abs(pre - 1) < 1e-3), np.float32(0.5), x)
    assert ((0.3 * x + 0.1 < 0) | (0.3 * x + 0.1 > 1)).any()
    (gx,), dy = vjp(lambda t: torch.clamp(0.3 * t + 0.1, 0, 1), [x])
    check_kernel("hardsigmoid_grad", {"alpha": 0.3, "beta": 0.1}, [x, dy], gx)


# ----------------------------------------------------------------------------- gather


@pytest.mark.parametrize(("x_shape", "idx", "axis"), [
    pytest.param((5, 4), [0, 2, 2, 4, 0, 2, 1, 2], 0, id="repeated"),
    pytest.param((5, 4), [-1, 4, -5, 0, -1], 0, id="negative"),
    pytest.param((2, 6, 3), [[1, 1], [5, -6], [0, 1]], 1, id="2d-inner"),
    pytest.param((3, 4), [3, 3, -1, 0, 2, 3], -1, id="last-axis"),
    pytest.param((2, 7, 3), 4, 1, id="scalar"),
])
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_gather_grad_matches_autograd(x_shape: tuple[int, ...], idx: Any, axis: int, dtype: str) -> None:
    ind = np.array(idx, dtype)
    ax = axis % len(x_shape)
    wrapped = torch.from_numpy(np.where(ind < 0, ind + x_shape[ax], ind).astype(np.int64))

    def gather(x: torch.Tensor) -> torch.Tensor:
        out = x.index_select(ax, wrapped.reshape(-1))
        return out.reshape(*x_shape[:ax], *ind.shape, *x_shape[ax + 1:])

    (gx,), dy = vjp(gather, [rand(*x_shape)])
    check_kernel("gather_grad", {"axis": axis, "x_shape": x_shape}, [ind, dy], gx)


def test_gather_grad_axis_canonicalised() -> None:
    sig = make_sig("gather_grad", {"axis": -1, "x_shape": (3, 4)}, [TensorType((2,), "int64"), TensorType((3, 2))])
    assert sig.attr["axis"] == 1 and sig.out_types == (TensorType((3, 4)),)


def test_every_grad_kernel_has_a_torch_kernel() -> None:
    grads = {n for n, d in REGISTRY.items() if d.family == "grad"}
    assert grads >= {"conv2d_grad_x", "conv2d_grad_w", "maxpool2d_grad", "avgpool2d_grad", "relu_grad",
                     "leakyrelu_grad", "clip_grad", "hardsigmoid_grad", "hardswish_grad", "abs_grad", "gather_grad"}
    assert grads <= set(TORCH_OPS)
