"""Numeric equivalence checking and the reference executor."""

from __future__ import annotations

import numpy as np
import pytest

from graphsub import zoo
from graphsub.data import materialize, random_inputs, random_weights
from graphsub.equivalence import compare_arrays, equivalent
from graphsub.errors import ExecutionError, VerificationError
from graphsub.execute import run
from graphsub.frontends.onnx_io import to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir import Builder, Graph


def mlp(act: str = "relu", alpha: float = 0.0) -> Graph:
    b = Builder("mlp")
    x = b.input("x", (8, 16))
    h = b.matmul(x, b.weight("w1", (16, 32)))
    h = b.relu(h) if act == "relu" else b.leakyrelu(h, alpha=alpha)
    return b.build({"y": b.matmul(h, b.weight("w2", (32, 4)))})


def test_equivalent_graphs_pass_and_different_ones_fail() -> None:
    assert equivalent(mlp(), mlp()).equivalent
    r = equivalent(mlp(), mlp("leaky", 1e-3), trials=2)
    assert not r.equivalent and r.worst_output == "y" and r.max_abs_diff > 0
    assert r.outputs[0].reason == "outside tolerance"
    loose = equivalent(mlp(), mlp("leaky", 1e-3), rtol=1.0, atol=1.0)
    assert loose.equivalent  # tolerances are honoured


def test_weights_are_shared_by_name_between_the_two_graphs() -> None:
    g = mlp()
    with_data = materialize(g, seed=3)
    assert equivalent(g, with_data, seed=3).equivalent
    other = g.with_params({"w1": np.ones((16, 32), np.float32)})
    assert not equivalent(with_data, other, seed=3).equivalent


def test_nan_reference_is_inconclusive_not_a_pass() -> None:
    b = Builder("nan")
    x = b.input("x", (4,))
    g = b.build(b.log(b.neg(b.abs(x))))  # log of a negative number: NaN everywhere
    r = equivalent(g, g)
    assert not r.equivalent and "inconclusive" in r.outputs[0].reason


def test_interface_mismatch_raises() -> None:
    b = Builder()
    other = b.build(b.relu(b.input("x", (8, 15))))
    with pytest.raises(VerificationError, match="inputs differ"):
        equivalent(mlp(), other)


def test_compare_arrays_shapes_and_infs() -> None:
    a = np.array([1.0, np.inf])
    d, _ = compare_arrays("o", a, a, 1e-4, 1e-5)
    assert not d.ok and "inconclusive" in d.reason
    d, _ = compare_arrays("o", np.zeros(3), np.zeros(4), 1e-4, 1e-5)
    assert not d.ok and "shape" in d.reason


@pytest.mark.parametrize("spec", [("resnet", {"blocks": 1}), ("sru", {}), ("nasrnn", {"length": 1}),
                                  ("inception_e", {"blocks": 1}), ("bert_corrected", {"layers": 1}),
                                  ("squeezenet", {"batchnorm": True})])
def test_reference_executor_agrees_with_onnxruntime(spec: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    name, kwargs = spec
    g = materialize(zoo.get(name, **kwargs), seed=1)
    feeds = random_inputs(g, seed=1)
    ours = run(g, feeds)
    theirs = run_model(to_onnx(g), feeds)
    for (oname, a), b in zip(ours.items(), theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-4 * max(1.0, float(np.abs(b).max())), err_msg=oname)


def test_executor_errors_name_the_problem() -> None:
    g = mlp()
    w = random_weights(g)
    x = np.zeros((8, 16), np.float32)
    with pytest.raises(ExecutionError, match="missing input"):
        run(g, {}, w)
    with pytest.raises(ExecutionError, match="missing weight data for 'w1'"):
        run(g, {"x": x})
    with pytest.raises(ExecutionError, match="expected"):
        run(g, {"x": np.zeros((8, 15), np.float32)}, w)
    with pytest.raises(ExecutionError, match="dtype"):
        run(g, {"x": x.astype(np.float64)}, w)
    with pytest.raises(ExecutionError, match="unknown input"):
        run(g, {"x": x, "z": x}, w)
