"""Numeric equivalence checking and the reference executor."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

from graphsub import zoo
from graphsub.data import materialize, random_inputs, random_weights
from graphsub.equivalence import compare_arrays, equivalent
from graphsub.errors import ExecutionError, ReferenceFailed, VerificationError
from graphsub.execute import run
from graphsub.frontends.onnx_io import from_onnx, to_onnx
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


def embed_layernorm_model() -> onnx.ModelProto:
    """BERT's embedding as onnxruntime's transformer optimizer writes it: int64 ids cast to int32 for one
    com.microsoft EmbedLayerNormalization, which graphsub keeps opaque and onnxruntime checks ids against its
    tables."""
    rng = np.random.default_rng(0)
    tables = {"word": (30, 8), "pos": (16, 8), "seg": (2, 8)}
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in tables.items()]
    inits += [onnx.numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
              onnx.numpy_helper.from_array(np.zeros(8, np.float32), "beta")]
    casts = [helper.make_node("Cast", [n], [n + "_int32"], to=TensorProto.INT32) for n in ("ids", "segments")]
    node = helper.make_node("EmbedLayerNormalization", ["ids_int32", "segments_int32", "word", "pos", "seg", "gamma",
                                                        "beta"], ["y", "mask_index"], domain="com.microsoft")
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, (2, 16)) for n in ("ids", "segments")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 16, 8))
    graph = helper.make_graph([*casts, node], "emb", ints, [y], initializer=inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def test_ids_fed_to_an_opaque_embedding_stay_in_its_tables() -> None:
    g = from_onnx(embed_layernorm_model())
    assert [n.sig.attr["op_type"] for n in g.nodes.values() if n.sig.op == "opaque"] == ["EmbedLayerNormalization"]
    for seed in range(5):
        feeds = random_inputs(g, seed)
        assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 30 and feeds["ids"].max() >= 2
        assert set(np.unique(feeds["segments"])) <= {0, 1}
    assert equivalent(g, g, trials=3).equivalent  # the reference runs: a rewrite of it could be verified


def test_a_reference_that_cannot_run_is_not_blamed_on_a_rewrite(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphsub.optimize.verification import check

    g = materialize(from_onnx(embed_layernorm_model()), seed=0)
    bad = {"ids": np.full((2, 16), 99, np.int64), "segments": np.zeros((2, 16), np.int64)}
    with pytest.raises(ReferenceFailed, match="original model fails on random inputs"):
        equivalent(g, g, inputs=bad)
    monkeypatch.setattr("graphsub.equivalence.reference.random_inputs", lambda graph, seed: bad)
    with pytest.raises(ReferenceFailed):  # check() no longer reports it as the candidate breaking an output
        check(g, g, [0, 1])
