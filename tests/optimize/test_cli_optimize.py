"""`graphsub optimize`: JSON fields, exit codes, nothing written on failure, the input never overwritten."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.rules.rule import Rule

runner = CliRunner()
FAST = ("--cost", "roofline:cpu", "--budget", "5", "--k", "4", "--peers", "none", "--eqsat-budget", "0")


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
