"""The torch implementations used to time ops on a GPU agree with the numpy references on every
OpDef sample (run on the CPU here), and the CUDA cost model is usable without a GPU only as an
error that says so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphsub.data import random_array, slot_role
from graphsub.frontends.torch_ops import TORCH_OPS, run_sig, supported
from graphsub.ir.node import make_sig
from graphsub.ops import REGISTRY

#: ops without a torch implementation (the GPU model prices them with its roofline fallback instead)
UNMAPPED = {"opaque"}
RUN_OPS = sorted(n for n, d in REGISTRY.items() if not d.leaf and not d.weight_op and n not in UNMAPPED)
SAMPLES = [pytest.param(n, i, id=f"{n}-{i}") for n in RUN_OPS for i in range(len(REGISTRY[n].samples))]


def test_every_run_time_op_is_mapped_or_listed() -> None:
    missing = [n for n in RUN_OPS if not supported(make_sig(n, REGISTRY[n].samples[0].attrs,
                                                             REGISTRY[n].samples[0].in_types))]
    assert missing == []
    assert set(TORCH_OPS) <= set(REGISTRY)


@pytest.mark.parametrize(("name", "i"), SAMPLES)
def test_torch_matches_reference(name: str, i: int) -> None:
    d = REGISTRY[name]
    sample = d.samples[i]
    sig = make_sig(name, sample.attrs, sample.in_types)
    rng = np.random.default_rng(99 + i)
    xs = [random_array(t, rng, sample.roles[k] if sample.roles else slot_role(sig, k))
          for k, t in enumerate(sample.in_types)]
    expected = d.reference(xs, sig.attr)
    got = run_sig(sig, [torch.from_numpy(np.array(x)) for x in xs])
    assert len(got) == len(expected)
    for e, o in zip(expected, got, strict=True):
        e = np.asarray(e)
        assert tuple(o.shape) == e.shape
        np.testing.assert_allclose(o.numpy(), e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet", "sru", "bert", "squeezenet"])
def test_whole_graph_in_torch_matches_reference_executor(name: str) -> None:
    from graphsub import zoo
    from graphsub.cost.cuda import run_graph
    from graphsub.data import materialize, random_inputs
    from graphsub.execute import run

    kwargs = {"resnet": {"blocks": 1}, "bert": {"layers": 1}}.get(name, {})
    g = zoo.get(name, **kwargs)
    got = run_graph(g, device="cpu", seed=3)()
    m = materialize(g, 3)
    want = run(m, random_inputs(m, 3))
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(got[k].numpy(), v, rtol=1e-3, atol=1e-3)


def test_cuda_model_without_gpu_says_so() -> None:
    from graphsub.cost import CostModelError, get_model

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the error path does not apply (experiments/cost/cuda_costs.py covers the GPU)")
    with pytest.raises(CostModelError, match="CUDA"):
        get_model("measured:cuda")
