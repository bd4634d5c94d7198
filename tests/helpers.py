"""Shared test helpers (importable because pytest puts tests/ on sys.path, see pyproject)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.execute import run
from graphsub.frontends.onnx_io import to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir import Builder, Graph


def make_rand(seed: int) -> Callable[..., np.ndarray]:
    """A float32 standard-normal generator with its own seeded stream (one per test module)."""
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return rand


def ops_of(g: Graph) -> list[str]:
    """Sorted op names of the compute nodes."""
    return sorted(g.node(n).op for n in g.nodes if not g.node(n).is_leaf)


def build(op: str, shapes: list[tuple[int, ...]], **attrs: Any) -> Graph:
    """A graph applying ``op`` to fresh float32 inputs ``x0, x1, ...``."""
    b = Builder(op)
    xs = [b.input(f"x{i}", s) for i, s in enumerate(shapes)]
    return b.build(b.op(op, *xs, **attrs))


def check_ort(g: Graph, feeds: dict[str, np.ndarray], opset: int | None = None) -> np.ndarray:
    """Run ``g`` with the reference executor and in onnxruntime; assert they agree."""
    (ref,) = run(g, feeds).values()
    (got,) = run_model(to_onnx(g, opset=opset), feeds)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    return ref


@pytest.fixture(autouse=True)
def no_stop_request() -> Iterator[None]:
    """No pending stop request before or after a test (a Ctrl-C flag left behind would end the next searches at
    once). Autouse in the modules that import it: ``from helpers import no_stop_request  # noqa: F401``."""
    from graphsub import interrupt

    interrupt.clear()
    yield
    interrupt.clear()


# ----------------------------------------------------------------------------- optimize: a small model, fake timing


def small_model() -> onnx.ModelProto:
    """``y = hardmax(relu(x @ W1)) + (identity(x @ W2) + x @ W3)``: Hardmax is not modelled (kept
    opaque); around it the default rules remove the identity and merge ``x @ W2 + x @ W3`` into
    ``x @ (W2 + W3)`` (7 nodes -> 5, measurably faster in onnxruntime)."""
    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), f"W{i}") for i in (1, 2, 3)]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["a"]),
        helper.make_node("MatMul", ["x", "W2"], ["b"]),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Identity", ["b"], ["rb"]),
        helper.make_node("MatMul", ["x", "W3"], ["c"]),
        helper.make_node("Add", ["rb", "c"], ["s"]),
        helper.make_node("Hardmax", ["ra"], ["hm"], axis=1),
        helper.make_node("Add", ["hm", "s"], ["y"]),
    ]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])], ws)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _node_count(model: bytes | str) -> float:
    m = onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model)
    return float(len(m.graph.node))


def install_timing(mp: pytest.MonkeyPatch, fn: Callable[[bytes | str], float],
                   paired: Callable[[bytes | str], float] | None = None) -> None:
    """Replace onnxruntime timing: a model's latency is ``fn(model)`` in the side-by-side rounds and ``paired(model)``
    (default ``fn``) in the paired confirmation rounds, computed once per session (timers are called thousands of
    times)."""

    def side(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        v = fn(model)
        return lambda budget_ms: v

    def pair(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        v = (paired or fn)(model)
        return lambda budget_ms: v

    mp.setattr("graphsub.optimize.timing.session_timer", side)
    mp.setattr("graphsub.optimize.timing.confirm_timer", pair)


def convnext_block(c: int = 8, hw: int = 6, hidden: int = 24, *, gelu: str = "erf", gamma: str | None = "c11",
           bias_left: bool = False, leak: str = "", const_w: bool = True, mlp: bool = True,
           seed: int = 0) -> onnx.ModelProto:
    """A ConvNeXt block as the exporters write it: depthwise conv -> Transpose(0, 2, 3, 1) -> LayerNormalization ->
    MatMul -> Add -> GELU (``erf``: TorchScript's decomposition with Constant nodes; ``op``: ONNX Gelu) -> MatMul ->
    Add -> Transpose(0, 3, 1, 2) -> Mul by a layer scale (``gamma``: its shape, or None) -> + the block's input.
    ``leak``: a region tensor also read outside (``output``: the first MatMul's result is a graph output too)."""
    rng = np.random.default_rng(seed)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    inits = [w("dw", c, 1, 3, 3), w("dwb", c), w("g", c), w("b", c), w("w1", c, hidden), w("b1", hidden),
             w("w2", hidden, c), w("b2", c)]
    nodes = [helper.make_node("Conv", ["x", "dw", "dwb"], ["d"], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["ln"], axis=-1, epsilon=1e-6)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])]
    if not mlp:
        nodes.append(helper.make_node("Transpose", ["ln"], ["back"], perm=[0, 3, 1, 2]))
    else:
        if not const_w:
            inits = [i for i in inits if i.name != "w1"]
            inputs.append(helper.make_tensor_value_info("w1", TensorProto.FLOAT, [c, hidden]))
        nodes += [helper.make_node("MatMul", ["ln", "w1"], ["m1"]),
                  helper.make_node("Add", ["b1", "m1"] if bias_left else ["m1", "b1"], ["a1"])]
        if gelu == "op":
            nodes.append(helper.make_node("Gelu", ["a1"], ["h"]))
        else:
            for name, v in (("k_sqrt2", 1.4142135), ("k_one", 1.0), ("k_half", 0.5)):
                nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
                    np.array(v, np.float32), name + "_v")))
            nodes += [helper.make_node("Div", ["a1", "k_sqrt2"], ["e0"]), helper.make_node("Erf", ["e0"], ["e1"]),
                      helper.make_node("Add", ["e1", "k_one"], ["e2"]), helper.make_node("Mul", ["a1", "e2"], ["e3"]),
                      helper.make_node("Mul", ["e3", "k_half"], ["h"])]
        nodes += [helper.make_node("MatMul", ["h", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["a2"]),
                  helper.make_node("Transpose", ["a2"], ["back"], perm=[0, 3, 1, 2])]
    last = "back"
    if gamma is not None and mlp:
        shape = {"c11": (c, 1, 1), "1c11": (1, c, 1, 1), "c": (c,)}[gamma]
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), "gamma"))
        nodes.append(helper.make_node("Mul", ["gamma", "back"], ["scaled"]))
        last = "scaled"
    nodes.append(helper.make_node("Add", [last, "x"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])]
    if leak == "output":
        outputs.append(helper.make_tensor_value_info("m1", TensorProto.FLOAT, [1, hw, hw, hidden]))
    graph = helper.make_graph(nodes, "block", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
