"""`graphsub optimize --training`: the ONNX route writes the joint graph (loss and every gradient, verified) with its
step-0 weights; `FILE.py:Class --training -o OUT.py` writes the faster emitted PyTorch module and its weights; usage
errors and refusals exit 2 / 3 with nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.optimize.timing import using_timers
from helpers import fake_timing_fixture, model_path_fixture  # noqa: F401  (fixtures)
from helpers import favour_optimized as _favour

runner = CliRunner()
FAST = ("--cost", "roofline:cpu", "--budget", "20", "--k", "4", "--peers", "none", "--eqsat-budget", "0",
        "--ort-search-budget", "0",
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


def test_cli_training_pytorch_route_writes_the_emitted_module(tmp_path: Path) -> None:
    """FILE.py:Class --training -o OUT.py: the faster emitted module's class and its weights, which load and train
    like the module (the timing is faked: the emitted module is declared faster, to exercise the writing)."""
    out = tmp_path / "fast.py"
    with using_timers(_favour(True)):  # the command line's timers
        r = runner.invoke(app, ["optimize", _net(tmp_path), "--training", "--input-shape", "x=4x3x8x8", "-o",
                                str(out), "--cost", "launches", "--budget", "20", "--eqsat-budget", "0", "--threads",
                                "1", "--json"])
    assert r.exit_code == 0, r.stdout
    d = json.loads(r.stdout)
    assert d["runtime"] == "pytorch" and d["verified"] and d["optimized"], d["decision"]
    assert d["speedup_train"] == pytest.approx(2.0, rel=0.05) and d["decision"].startswith("chose the optimized")
    lo, hi = d["speedup_ci"]
    assert 1.0 < lo <= d["speedup_train"] <= hi and d["aa_ratio"] == pytest.approx(1.0, abs=0.05)
    assert d["confirmation"]["faster"] and d["rounds"] == d["confirmation"]["rounds"] > 0 and d["sessions"] >= 3
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
