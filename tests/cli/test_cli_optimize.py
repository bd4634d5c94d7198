"""`graphsub optimize`: JSON fields, exit codes, nothing written on failure, the input never overwritten; a PyTorch
module spec; the HTML report (``--report``); and `graphsub optimize-many`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.rules.rule import Rule
from helpers import bad_rule_fixture, fake_timing_fixture, model_path_fixture, parse_report  # noqa: F401  (fixtures)

runner = CliRunner()
FAST = ("--cost", "roofline:cpu", "--budget", "5", "--k", "4", "--peers", "none", "--eqsat-budget", "0",
        "--ort-search-budget", "0")


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["optimize", *args])
    return r.exit_code, r.stdout


def test_json_fields(model_path: Path, tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    out = tmp_path / "o.onnx"
    code, text = invoke(str(model_path), "-o", str(out), *FAST, "--json")
    assert code == 0, text
    d = json.loads(text)
    for key in ("verified", "max_abs_diff", "latency_ms_before", "latency_ms_after", "speedup_ort_all",
                "chosen", "candidates", "threads", "written", "applied", "kept_original", "decision"):
        assert key in d
    assert d["verified"] and d["written"] == str(out) and out.exists()
    assert d["applied"] and {"rule", "nodes", "cost"} <= set(d["applied"][0])


def test_human_output_says_when_original_is_kept(model_path: Path, tmp_path: Path,
                                                 fake_timing: Callable[..., None]) -> None:
    fake_timing(lambda model: 1.0)
    out = tmp_path / "o.onnx"
    code, text = invoke(str(model_path), "-o", str(out), *FAST)
    assert code == 0, text
    text = " ".join(text.split())  # the console wraps lines
    assert "ORT_ENABLE_ALL" in text and "candidates" in text and "search" in text
    assert "kept the original" in text and "wrote the original model" in text
    assert out.read_bytes() == model_path.read_bytes()


def test_verification_failure_writes_nothing(model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             bad_rule: Rule, fake_timing: Callable[..., None]) -> None:
    from graphsub.rules.library import find_rule

    def rules(spec: str | list[Rule]) -> list[Rule]:
        return [find_rule("cpu_identity_remove"), bad_rule]

    monkeypatch.setattr("graphsub.optimize.pipeline.resolve_rules", rules)
    out = tmp_path / "o.onnx"
    code, text = invoke(str(model_path), "-o", str(out), *FAST, "--json")
    assert code == 1, text
    d = json.loads(text)
    assert d["verified"] is False and d["written"] is None and not out.exists()
    assert d["failure"]["rule"] == "test_bad_add_drop" and d["failure"]["output"] == "y"
    code, text = invoke(str(model_path), "-o", str(out), *FAST)
    assert code == 1 and not out.exists()


def test_error_exit_codes(model_path: Path, tmp_path: Path) -> None:
    original = model_path.read_bytes()
    assert invoke(str(model_path), "-o", str(model_path), "--json")[0] == 2  # never the input
    assert model_path.read_bytes() == original
    assert invoke(str(model_path), "-o", str(tmp_path / "o.onnx"), "--algo", "nope")[0] == 2
    assert invoke(str(model_path), "-o", str(tmp_path / "o.onnx"), "--rules", "nope")[0] == 2
    assert invoke(str(model_path), "-o", str(tmp_path / "o.onnx"), "--cost", "nope")[0] == 2
    assert invoke(str(model_path), "-o", str(tmp_path / "o.onnx"), "--peers", "nope")[0] == 2
    for bad in (("--threads", "0"), ("--eqsat-budget", "-1"), ("--on-top-budget", "nan"), ("--min-speedup", "nan"),
                ("--budget", "nan")):
        assert invoke(str(model_path), "-o", str(tmp_path / "o.onnx"), *bad)[0] == 2, bad
    assert invoke(str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.onnx"))[0] == 3
    assert invoke("zoo:no_such_model", "-o", str(tmp_path / "o.onnx"))[0] == 3
    assert invoke(str(model_path), "-o", str(tmp_path / "no" / "dir" / "o.onnx"))[0] == 4


# ----------------------------------------------------------------------------- a PyTorch module spec (path.py:Class)

MODULE_SRC = '''
import torch
from torch import nn


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(32, 32, bias=False)
        self.b = nn.Linear(32, 32, bias=False)

    def forward(self, x):
        h = torch.relu(x)
        return self.a(h) + self.b(h)
'''


def test_module_spec(tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    pytest.importorskip("torch")
    src = tmp_path / "net.py"
    src.write_text(MODULE_SRC)
    out = tmp_path / "net.onnx"
    fast = ["--cost", "roofline:cpu", "--budget", "5", "--k", "4"]
    code, text = invoke(f"{src}:TwoHeads", "-o", str(out), "--input-shape", "x=8x32", *fast, "--json")
    assert code == 0, text
    d = json.loads(text)
    assert d["verified"] and d["written"] == str(out) and out.exists()
    assert invoke(f"{src}:TwoHeads", "-o", str(out), *fast)[0] == 3  # no input shapes
    assert invoke(f"{src}:Missing", "-o", str(out), "--input-shape", "x=8x32", *fast)[0] == 3


# ----------------------------------------------------------------------------- --report


def test_report_flag(model_path: Path, tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    out, rep = tmp_path / "o.onnx", tmp_path / "r.html"
    args = [str(model_path), "-o", str(out), "--cost", "roofline:cpu", "--budget", "5", "--k", "4"]
    code, text = invoke(*args, "--report", str(rep), "--json")
    assert code == 0, text
    d = json.loads(text)
    assert d["report"] == str(rep) and d["written"] == str(out)
    assert len(parse_report(rep.read_text(encoding="utf-8")).rows) == len(d["applied"])
    rep.unlink()
    code, text = invoke(*args, "--report", str(rep))
    assert code == 0 and rep.exists() and "wrote the report" in " ".join(text.split())
    assert invoke(*args, "--report", str(out))[0] == 2  # not the output
    assert invoke(*args, "--report", str(model_path))[0] == 2  # never the input
    assert invoke(*args, "--report", str(tmp_path / "no" / "r.html"))[0] == 4


# ----------------------------------------------------------------------------- optimize-many


def test_many_reports_per_model_and_exits_1_when_one_fails(tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf")
    out = tmp_path / "out"
    r = runner.invoke(app, ["optimize-many", str(bad), "zoo:sru", "-o", str(out), "--budget", "30", "--peers", "none",
                            "--threads", "1", "--json"])
    assert r.exit_code == 1, r.stdout
    d = json.loads(r.stdout)
    assert [m["ok"] for m in d["models"]] == [False, True]
    assert json.loads((out / "results.json").read_text())["models"] == d["models"]
    r = runner.invoke(app, ["optimize-many", "zoo:sru", "-o", str(out), "--executor", "process", "--json"])
    assert r.exit_code == 2


def test_provider_cuda_without_a_gpu_and_an_unknown_provider_exit_2(model_path: Path, tmp_path: Path) -> None:
    """``--provider cuda`` where onnxruntime has no CUDA provider names what is missing (exit 2, nothing written);
    an unknown provider is a usage error too."""
    from graphsub.errors import ExecutionError
    from graphsub.frontends.ort import require_provider

    out = tmp_path / "o.onnx"
    try:
        require_provider("cuda")
    except ExecutionError:
        code, text = invoke(str(model_path), "-o", str(out), "--provider", "cuda", "--json")
        assert code == 2 and "CUDAExecutionProvider" in json.loads(text)["error"]
    code, _ = invoke(str(model_path), "-o", str(out), "--provider", "tpu")
    assert code == 2 and not out.exists()


def test_a_model_graphsub_cannot_represent_is_written_back_when_onnxruntime_runs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Reshape whose target shape is a graph input: graphsub cannot type its output (NotModelled). onnxruntime runs
    the model, so it is valid: the original is written unchanged, exit 0, and the decision says why; when onnxruntime
    does not load it either, it is bad input (exit 3) and nothing is written."""
    import onnx

    from corpus_models import shape_input_reshape

    src, out = tmp_path / "shape_input.onnx", tmp_path / "o.onnx"
    onnx.save(shape_input_reshape(), str(src))
    code, text = invoke(str(src), "-o", str(out), *FAST, "--json")
    assert code == 0, text
    d = json.loads(text)
    assert d["kept_original"] and d["written"] == str(out) and "cannot model this graph" in d["decision"]
    assert out.read_bytes() == src.read_bytes()
    code, text = invoke(str(src), "-o", str(tmp_path / "o2.onnx"), *FAST)
    assert code == 0 and "written unchanged" in text
    monkeypatch.setattr("graphsub.cli.optimize._runs_in_onnxruntime", lambda path: False)
    code, text = invoke(str(src), "-o", str(tmp_path / "never.onnx"), *FAST, "--json")
    assert code == 3 and not (tmp_path / "never.onnx").exists(), text
