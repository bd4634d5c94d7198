"""Whole models: the training graph's loss and gradients equal ``torch.autograd``'s, and its rewrites keep them.

Two references: zoo graphs emitted as PyTorch modules (:func:`graphsub.frontends.torch_emit.to_module`, whose
backward is torch's own autograd, independent of graphsub's rules), and a real ``nn.Module`` (torchvision's
ResNet structure, batch norm in ``train()`` mode) exported as it trains.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphsub import zoo
from graphsub.data import materialize, random_inputs
from graphsub.execute import run
from graphsub.frontends.onnx_export import export_graph
from graphsub.frontends.ort import make_session, run_session
from graphsub.frontends.torch_emit import to_module
from graphsub.training import GRAD_PREFIX, GradientError, build_training, initial_params, training_graph

#: (zoo name, kwargs): small configurations of each family (CNN with pools and concat, residual, attention, RNN)
ZOO = [("resnet", {"blocks": 1}), ("squeezenet", {}), ("bert", {"layers": 1}), ("sru", {}),
       ("inception_e", {"blocks": 1}), ("mobilenet_v3_small", {"image_size": 64})]


def _onehot(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.eye(shape[1], dtype=np.float32)[rng.integers(0, shape[1], size=shape[0])]


def _torch_reference(fwd, params, feeds, labels, loss_name):  # type: ignore[no-untyped-def]
    m = to_module(fwd, trainable=params)
    out = m(*(torch.from_numpy(feeds[n]) for n in fwd.input_names))
    out = out[0] if isinstance(out, tuple) else out
    f = torch.nn.functional.cross_entropy if loss_name == "cross_entropy" else torch.nn.functional.mse_loss
    loss = f(out, torch.from_numpy(labels))
    loss.backward()
    keys = m.graph_names
    named = dict(m.named_parameters())
    grads = {n: named[keys[n]].grad for n in params}  # None: no path to the loss (ours: zeros)
    return float(loss.detach()), {n: np.zeros(named[keys[n]].shape, np.float32) if v is None else v.numpy()
                                  for n, v in grads.items()}


#: one seed per family here (the per-op test runs two; experiments/training/training_grads.py runs each zoo model at 2)
@pytest.mark.parametrize(("name", "kwargs", "seed"), [(*z, i % 2) for i, z in enumerate(ZOO)], ids=[z[0] for z in ZOO])
def test_zoo_gradients_match_torch_autograd(name: str, kwargs: dict, seed: int) -> None:
    fwd = materialize(zoo.get(name, **kwargs), seed)
    out_shape = fwd.output_types[0].shape
    loss_name = "cross_entropy" if len(out_shape) == 2 else "mse"  # (batch, classes) logits, else a regression
    g, spec = build_training(fwd, loss=loss_name, batchnorm="frozen")
    params = initial_params(fwd, spec)
    feeds = random_inputs(fwd, seed)
    labels = (_onehot(out_shape, seed) if loss_name == "cross_entropy"
              else np.random.default_rng(seed).standard_normal(out_shape).astype(np.float32))
    assert spec.label_input is not None
    feeds_all = {**feeds, **params, spec.label_input: labels}
    ours = run(g, feeds_all)
    loss, want = _torch_reference(fwd, spec.params, feeds, labels, loss_name)
    assert abs(float(ours["loss"]) - loss) <= 1e-4 * max(1.0, abs(loss))
    for n in spec.params:
        got, ref = ours[GRAD_PREFIX + n], want[n]
        scale = float(np.max(np.abs(ref))) + 1e-12
        assert np.max(np.abs(got - ref)) <= 1e-3 * scale + 1e-6, n
    # the same graph in onnxruntime (the gradient kernels' ONNX exports)
    sess = make_session(export_graph(g).SerializeToString(), optimization="all")
    ort_out = dict(zip(g.output_names, run_session(sess, feeds_all), strict=True))
    for n in g.output_names:
        np.testing.assert_allclose(ort_out[n], ours[n], rtol=1e-3, atol=1e-5 + 1e-3 * float(np.max(np.abs(ours[n]))))


def test_exported_module_in_train_mode_matches_autograd(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from graphsub.bench.suite.tv_models import resnet
    from graphsub.frontends.torch_export import export_module
    from graphsub.spec import ModelSpec

    torch.manual_seed(0)
    m = resnet(layers=(1, 1, 1, 1), width=8, num_classes=10)
    x = torch.randn(4, 3, 48, 48)
    export_module(m, [x], tmp_path / "m.onnx", training=True)
    fwd = ModelSpec.parse(str(tmp_path / "m.onnx")).load()
    assert "batchnorm_train" in fwd.op_histogram() and "opaque" not in fwd.op_histogram()
    g, spec = build_training(fwd)
    assert set(spec.params) == {k for k, p in m.named_parameters()}  # every parameter, under its own name
    labels = _onehot((4, 10), 0)
    ours = run(g, {"input_0": x.numpy(), "labels": labels, **initial_params(fwd, spec)})
    m.train()
    loss = torch.nn.functional.cross_entropy(m(x), torch.from_numpy(labels))
    loss.backward()
    assert abs(float(ours["loss"]) - float(loss.detach())) < 1e-5
    for k, p in m.named_parameters():
        ref = p.grad.numpy()
        assert np.max(np.abs(ours[GRAD_PREFIX + k] - ref)) <= 1e-3 * (np.max(np.abs(ref)) + 1e-12) + 1e-6, k


def test_opaque_op_on_the_path_is_refused_by_name() -> None:
    from graphsub.ir import Builder

    b = Builder("m")
    x = b.input("x", (2, 4))
    w = b.weight("w", data=np.ones((4, 3), np.float32))
    y = b.op1("opaque", b.matmul(x, w), op_type="Mystery", domain="ex", out_types=(((2, 3), "float32"),),
              input_slots=(0,), num_onnx_inputs=1, output_slots=(0,))
    with pytest.raises(GradientError, match="opaque"):
        training_graph(b.build(y))


def test_rules_keep_every_gradient_on_a_training_graph() -> None:
    """A search on the joint graph (exact by construction: every output -- the gradients -- is preserved)."""
    from graphsub.cost import get_model
    from graphsub.optimize.verification import check_seeds, finalize
    from graphsub.rules.library import resolve_rules
    from graphsub.search import Budget, search

    fwd = materialize(zoo.get("squeezenet"), 0)
    g = training_graph(fwd, loss="mse")
    res = search(g, resolve_rules("default"), get_model("flops"), Budget(time_s=10), 0, algo="greedy")
    ref = materialize(g, 0)
    ok, diff, worst, _ = check_seeds(ref, finalize(ref, res.best, 0), (0, 1000), rtol=1e-4, atol=1e-5)
    assert ok, (worst, diff)
