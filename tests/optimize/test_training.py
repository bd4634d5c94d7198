"""The training entry points (their command line: tests/cli/test_cli_optimize_training.py): the joint graph is
verified (gradients included) and reported with max_grad_abs_diff / speedup_train; the forward-first candidate keeps
every gradient; a PyTorch module optimized for training trains like the module."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
import torch

from graphsub import zoo
from graphsub.data import materialize
from graphsub.optimize import decide
from graphsub.optimize.timing import Timers
from graphsub.optimize.training import forward_first, optimize_training
from graphsub.optimize.verification import check_seeds
from graphsub.search import Budget
from graphsub.training import build_training
from helpers import fake_step_timer, step_timers
from helpers import favour_optimized as _favour


def test_forward_first_candidate_keeps_every_gradient() -> None:
    fwd = materialize(zoo.get("inception_e", blocks=1), 0)
    g, spec = build_training(fwd, loss="mse")
    cand = forward_first(fwd, spec, budget_s=5, cost="roofline:p100", seed=0)  # merges the 1x1 convs
    assert cand is not None
    name, g1, steps = cand
    assert name == "forward-first" and steps and g1.output_names == g.output_names
    ref = materialize(g, 0)
    ok, diff, worst, _ = check_seeds(ref, materialize(g1, 0), (0, 1000), rtol=1e-4, atol=1e-5)
    assert ok, (worst, diff)


def test_optimize_training_without_timing_reports_gradients() -> None:
    r = optimize_training(zoo.get("resnet", blocks=1), loss="cross_entropy", time_s=None, measure_latency=False,
                          seeds=1, cost="roofline:cpu", budget=Budget(time_s=3))  # (N, C, H, W) logits: per pixel
    assert r.verified and r.spec.label_input == "labels" and len(r.spec.params) == 3
    assert r.max_grad_abs_diff <= 1e-4 * max(r.grad_norm, 1.0)
    assert r.to_dict()["max_grad_abs_diff"] == r.max_grad_abs_diff
    assert "cleanup" not in {s.rule for s in r.result.search.sequence}  # trained weights are never folded or merged


def _small_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(8, 5))


@pytest.mark.parametrize("faster", [True, False])
def test_optimize_module_for_training_trains_like_the_module(faster: bool) -> None:
    """The chosen module (``r.module``) trains like the module: when the optimized one is faster, it is a newly
    emitted module (a different object, with the emitted module's weight map and class source) whose SGD step gives
    the module's loss and weights; when it is not, it is the module itself. The step timing is injected (the
    optimized module's units report half or twice the module's ms, real steps run), so that each branch is taken for
    sure; the decision is the verdict's, with its interval and A/A control."""
    from graphsub.optimize import optimize_module
    from graphsub.optimize.torch_training import TrainedModule, one_hot

    module = _small_net()
    x = torch.randn(4, 3, 12, 12)
    labels = one_hot(4, 5, 0)
    r = optimize_module(module, [x], training=True, labels=labels, budget_s=3, cost="roofline:cpu", eqsat_s=0,
                        timers=_favour(faster))
    assert isinstance(r, TrainedModule)
    assert r.verified and r.max_grad_abs_diff <= 1e-5 and len(r.params) == len(list(module.parameters()))
    assert r.speedup_train == pytest.approx(2.0 if faster else 0.5, rel=0.05)
    assert r.speedup_emitted_original == pytest.approx(1.0, abs=0.05)  # timed as the module: informational
    assert r.applied and r.optimized == faster  # the search found something; kept only when faster
    assert r.verdict is not None and r.verdict.faster == faster and r.verdict.reason in r.decision
    d = r.to_dict()
    assert d["sessions"] == decide.GROUPS and d["rounds"] == decide.GROUPS * decide.ROUNDS_PER_GROUP
    assert d["aa_ratio"] == pytest.approx(1.0, abs=0.05)
    assert len(d["speedup_ci"]) == 2 and d["confirmation"]["faster"] == faster
    assert set(d["rounds_ms"]) == {"module", "optimized", "module_again", "emitted_original"}
    emitted = r.module
    if faster:  # a new module emitted from the optimized graph, holding the module's weights
        assert emitted is not module and not isinstance(emitted, torch.nn.Sequential)
        assert set(r.params) <= set(emitted.graph_names) and "class GraphModule" in r.source
    else:
        assert emitted is module and r.source == ""
    # one SGD step from the same weights gives the same loss and weights (dropout left out, as in the export)
    import copy

    a, b = copy.deepcopy(module).train(), copy.deepcopy(emitted).train()
    for m in (*a.modules(), *b.modules()):
        if isinstance(m, torch.nn.Dropout):
            m.eval()
    losses = []
    for m in (a, b):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = torch.nn.functional.cross_entropy(m(x), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert abs(losses[0] - losses[1]) < 1e-5
    keys = getattr(b, "graph_names", {k: k for k, _ in a.named_parameters()})
    pb = dict(b.named_parameters())
    for k, p in a.named_parameters():
        np.testing.assert_allclose(pb[keys[k]].detach().numpy(), p.detach().numpy(), atol=1e-5)


def test_optimize_module_for_training_keeps_the_module_when_the_optimized_one_is_a_twin() -> None:
    """An optimized module that trains as fast as the module, within 1% noise, is not chosen -- even with no minimum
    speedup asked for: the verdict's interval includes 1.0x, and the decision says so. The trainers' thread count
    (``threads``) is not left set in the caller's torch."""
    from graphsub.optimize import optimize_module

    module = _small_net()
    before = torch.get_num_threads()
    r = optimize_module(module, [torch.randn(4, 3, 12, 12)], training=True, budget_s=3, cost="roofline:cpu",
                        eqsat_s=0, min_speedup=1.0, threads=max(1, before - 1),
                        timers=step_timers(fake_step_timer({"module": 10.0}, run=False)))
    assert r.verified and r.applied and not r.optimized and r.module is module and r.source == ""
    assert r.verdict is not None and not r.verdict.faster and r.verdict.speedup == pytest.approx(1.0, abs=0.02)
    assert r.decision.startswith("kept the module") and "not faster beyond the noise" in r.decision, r.decision
    assert r.to_dict()["speedup_ci"][0] <= 1.0 <= r.to_dict()["speedup_ci"][1]
    assert torch.get_num_threads() == before  # the trainers' thread count does not leak into the caller's


@pytest.mark.parametrize("bad", [{"loss": "nope"}, {"batchnorm": "sometimes"}, {"params": ["missing"]}])
def test_bad_training_options_are_graphsub_errors(bad: dict) -> None:
    from graphsub.training import GradientError

    with pytest.raises(GradientError):
        build_training(materialize(zoo.get("resnet", blocks=1), 0), **bad)


def test_training_graphs_are_timed_on_a_real_step() -> None:
    """The candidates are timed on one-hot labels and the model's weights (``training_feeds``), not random draws:
    a training graph's kernels run at data-dependent speeds."""
    seen: list[dict] = []

    def timer(model: bytes | str, feeds: dict, **kw: object) -> Callable[[float], float]:
        seen.append(feeds)
        n = len(onnx.load_from_string(model).graph.node) if isinstance(model, bytes) else 1
        return lambda budget_ms: float(n)

    fwd = materialize(zoo.get("resnet", blocks=1), 0)
    r = optimize_training(fwd, rules="training", cost="fused", budget=Budget(time_s=10, k=2), time_s=60, peers=(),
                          eqsat_s=0, threads=1, forward_s=0, timers=Timers(session=timer, confirm=timer))
    assert r.verified and seen, r.result.decision
    labels = seen[0][r.spec.label_input]
    assert set(np.unique(labels)) == {0.0, 1.0} and np.all(labels.sum(axis=1) == 1)  # one-hot, every timing call
    assert all(np.array_equal(f[r.spec.label_input], labels) for f in seen)
    w = r.spec.params[0]
    assert np.array_equal(seen[0][w], fwd.params[w])  # the model's own weights


def test_backward_rules_candidate_rewrites_the_gradient_kernels_it_prices_cheaper() -> None:
    from graphsub.optimize.training import backward_rules, uses_training_rules
    from graphsub.training import training_graph

    g = training_graph(materialize(zoo.get("resnet", blocks=1), 0), loss="mse")
    name, out, steps = backward_rules(g, cost="flops") or ("", g, ())
    assert not steps  # the same FLOPs: no rewrite is cheaper under the FLOP count
    cand = backward_rules(g, cost="fused", threads=1)  # measured kernels: the GEMM spelling is cheaper
    assert cand is not None
    name, out, steps = cand
    assert name == "backward-rules" and {s.rule for s in steps} <= {"trn_grad_w_gemm", "trn_grad_x_conv"}
    assert out.op_histogram().get("conv2d_grad_w", 0) < g.op_histogram()["conv2d_grad_w"]
    ref = materialize(g, 0)
    ok, diff, worst, _ = check_seeds(ref, materialize(out, 0), (0, 1), rtol=1e-4, atol=1e-5)
    assert ok, (worst, diff)
    assert uses_training_rules("cpu, training") and uses_training_rules("default") and not uses_training_rules("cpu")
