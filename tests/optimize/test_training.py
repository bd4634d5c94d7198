"""`graphsub optimize --training` and the training entry points: the joint graph is verified (gradients included),
written with its step-0 weights, reported with max_grad_abs_diff / speedup_train; the forward-first candidate keeps
every gradient; a PyTorch module optimized for training trains like the module."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from typer.testing import CliRunner

from graphsub import zoo
from graphsub.cli import app
from graphsub.data import materialize
from graphsub.optimize.training import forward_first, optimize_training
from graphsub.optimize.verification import check_seeds
from graphsub.search import Budget
from graphsub.training import build_training

runner = CliRunner()
FAST = ("--cost", "roofline:cpu", "--budget", "20", "--k", "4", "--peers", "none", "--eqsat-budget", "0",
        "--threads", "1")


def test_cli_training_json_and_output(tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    out = tmp_path / "train.onnx"
    r = runner.invoke(app, ["optimize", "zoo:resnet:blocks=1", "-o", str(out), "--training", "--loss", "mse",
                            *FAST, "--json"])
    assert r.exit_code == 0, r.stdout
    d = json.loads(r.stdout)
    assert d["verified"] and d["training"] and d["loss"] == "mse" and d["params"] == 3
    assert d["max_grad_abs_diff"] is not None and d["max_grad_abs_diff"] <= 1e-4 * max(d["max_abs_grad"], 1.0)
    assert "speedup_train" in d
    m = onnx.load(str(out))
    names = [o.name for o in m.graph.output]
    assert names[0] == "loss" and all(n.startswith("grad.") for n in names[1:])
    inits = {t.name for t in m.graph.initializer}
    assert {n.removeprefix("grad.") for n in names[1:]} <= inits  # step-0 weights travel with the model


def test_cli_training_usage_and_refusal(model_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    r = runner.invoke(app, ["optimize", "zoo:resnet:blocks=1", "-o", str(out), "--training", "--loss", "hinge",
                            *FAST, "--json"])
    assert r.exit_code == 2 and "--loss" in json.loads(r.stdout)["error"]
    # the fixture model has an op graphsub keeps opaque (Hardmax) between a weight and the output
    r = runner.invoke(app, ["optimize", str(model_path), "-o", str(out), "--training", "--loss", "mse", *FAST,
                            "--json"])
    assert r.exit_code == 3, r.stdout
    assert "no gradient" in json.loads(r.stdout)["error"] and not out.exists()


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


def test_optimize_module_for_training_trains_like_the_module() -> None:
    from graphsub.optimize import optimize_module
    from graphsub.optimize.torch_training import TrainedModule, one_hot

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                 torch.nn.Conv2d(8, 8, 1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                 torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(8, 5))
    x = torch.randn(4, 3, 12, 12)
    labels = one_hot(4, 5, 0)
    r = optimize_module(module, [x], training=True, labels=labels, budget_s=3, cost="roofline:cpu", rounds=1,
                        steps=1, min_speedup=0.0)  # min_speedup 0: the optimized module is kept unless it is slower
    assert isinstance(r, TrainedModule)
    assert r.verified and r.max_grad_abs_diff <= 1e-5 and len(r.params) == len(list(module.parameters()))
    assert r.speedup_train is not None and r.speedup_emitted_original is not None
    emitted = r.module
    assert emitted is not module or not r.optimized
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


@pytest.mark.parametrize("bad", [{"loss": "nope"}, {"batchnorm": "sometimes"}, {"params": ["missing"]}])
def test_bad_training_options_are_graphsub_errors(bad: dict) -> None:
    from graphsub.training import GradientError

    with pytest.raises(GradientError):
        build_training(materialize(zoo.get("resnet", blocks=1), 0), **bad)


def test_training_graphs_are_timed_on_a_real_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidates are timed on one-hot labels and the model's weights (``training_feeds``), not random draws:
    a training graph's kernels run at data-dependent speeds."""
    seen: list[dict] = []

    def timer(model: bytes | str, feeds: dict, **kw: object) -> Callable[[float], float]:
        seen.append(feeds)
        n = len(onnx.load_from_string(model).graph.node) if isinstance(model, bytes) else 1
        return lambda budget_ms: float(n)

    monkeypatch.setattr("graphsub.optimize.timing.session_timer", timer)
    monkeypatch.setattr("graphsub.optimize.timing.confirm_timer", timer)
    fwd = materialize(zoo.get("resnet", blocks=1), 0)
    r = optimize_training(fwd, rules="training", cost="fused", budget=Budget(time_s=10, k=2), time_s=60, peers=(),
                          eqsat_s=0, threads=1, forward_s=0)
    assert r.verified and seen, r.result.decision
    labels = seen[0][r.spec.label_input]
    assert set(np.unique(labels)) == {0.0, 1.0} and np.all(labels.sum(axis=1) == 1)  # one-hot, every timing call
    assert all(np.array_equal(f[r.spec.label_input], labels) for f in seen)
    w = r.spec.params[0]
    assert np.array_equal(seen[0][w], fwd.params[w])  # the model's own weights


NET = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(3, stride=1, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = self.pool(torch.relu(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))
'''


def _net(tmp_path: Path) -> str:
    path = tmp_path / "net.py"
    path.write_text(NET)
    return f"{path}:Net"


def test_cli_training_pytorch_route_usage(tmp_path: Path) -> None:
    spec = _net(tmp_path)
    for extra, words in ((["-o", str(tmp_path / "m.txt")], "-o OUT.py"),
                         (["-o", str(tmp_path / "m.py"), "--loss", "mse"], "--loss")):
        r = runner.invoke(app, ["optimize", spec, "--training", "--input-shape", "x=4x3x8x8", *extra, "--json"])
        assert r.exit_code == 2 and words in json.loads(r.stdout)["error"], r.stdout
    assert not list(tmp_path.glob("m.*"))


def test_cli_training_pytorch_route_writes_the_emitted_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """FILE.py:Class --training -o OUT.py: the faster emitted module's class and its weights, which load and train
    like the module (the timing is faked: the emitted module is declared faster, to exercise the writing)."""
    from graphsub.optimize import train_step

    real = train_step.time_interleaved

    def favour_optimized(runners: dict, **kw: object) -> train_step.Timed:
        t = real(runners, rounds=1, steps=1)
        t.rounds_ms["optimized"] = [0.5 * v for v in t.rounds_ms["module"]]
        return t

    monkeypatch.setattr(train_step, "time_interleaved", favour_optimized)
    out = tmp_path / "fast.py"
    r = runner.invoke(app, ["optimize", _net(tmp_path), "--training", "--input-shape", "x=4x3x8x8", "-o", str(out),
                            "--cost", "launches", "--budget", "20", "--threads", "1", "--json"])
    assert r.exit_code == 0, r.stdout
    d = json.loads(r.stdout)
    assert d["runtime"] == "pytorch" and d["verified"] and d["optimized"], d["decision"]
    assert "alg_conv_bias_relu_fuse" in d["applied"] and d["written"] == [str(out), str(out.with_suffix(".pt"))]
    ns: dict = {}
    exec(compile(out.read_text(), str(out), "exec"), ns)
    m = ns["GraphModule"]()
    m.load_state_dict(torch.load(out.with_suffix(".pt")))
    import importlib.util

    spec = importlib.util.spec_from_file_location("net", tmp_path / "net.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref = mod.Net()  # the user's module with the same weights: the state dict names are its own
    assert {k for k, _ in ref.named_parameters()} <= set(m.state_dict())
    ref.load_state_dict({k: v for k, v in m.state_dict().items() if k in ref.state_dict()}, strict=False)
    x = torch.randn(4, 3, 8, 8)
    np.testing.assert_allclose(m.train()(x).detach().numpy(), ref.train()(x).detach().numpy(), atol=1e-5)


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
