"""``graphsub cost`` / ``graphsub profile``, every test with a private cache directory (``private_cache``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from graphsub.cli import app
from helpers import encoder_like_fixture, private_cache  # noqa: F401  (fixtures; private_cache is autouse)

runner = CliRunner()
FAST = ["--threads", "1"]


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout


def test_cost_flops_json_lists_top_ops_and_total() -> None:
    code, out = invoke("cost", "zoo:resnet:blocks=2", "--model", "flops", "--top", "3", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["cost_model"] == "flops" and len(data["ops"]) == 3
    assert data["ops"][0]["op"] == "conv2d" and data["total"]["flops"] > 0
    assert data["num_signatures"] >= 3
    assert sum(o["share"] for o in data["ops"]) <= 1.0 + 1e-9


def test_cost_roofline_table() -> None:
    code, out = invoke("cost", "zoo:squeezenet", "--model", "roofline:v100", "--top", "2")
    assert code == 0
    assert "roofline:v100" in out and "total:" in out and "time_ms" in out


def test_profile_then_cost_measured_hits_cache(tmp_path: Path) -> None:
    cache = str(tmp_path / "cli.sqlite")
    code, out = invoke("profile", "zoo:sru", "--cache", cache, *FAST, "--json")
    assert code == 0, out
    first = json.loads(out)
    assert first["misses"] == first["signatures"] > 0 and first["threads"] == 1
    code, out = invoke("profile", "zoo:sru", "--cache", cache, *FAST, "--json")
    assert json.loads(out)["hit_rate"] == 1.0
    code, out = invoke("cost", "zoo:sru", "--model", "measured", "--cache", cache, *FAST, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["cache"]["misses"] == 0 and data["total"]["time_ms"] > 0
    code, out = invoke("profile", "zoo:sru", "--cache", cache, *FAST)
    assert code == 0 and "hit rate 100%" in out


@pytest.mark.parametrize(("args", "code"), [
    (("cost", "zoo:sru", "--model", "bogus"), 2),
    (("cost", "zoo:no_such_model"), 3),
    (("profile", "zoo:no_such_model"), 3),
])
def test_errors_have_exit_codes(args: tuple[str, ...], code: int) -> None:
    got, out = invoke(*args, "--json")
    assert got == code
    assert "error" in json.loads(out)


def test_cost_ort_kernels_shows_what_onnxruntime_runs(tmp_path: Path, encoder_like: Any) -> None:
    src = tmp_path / "enc.onnx"
    src.write_bytes(encoder_like())
    code, out = invoke("cost", str(src), "--model", "ort-kernels", "--threads", "1",
                       "--cache", str(tmp_path / "k.sqlite"), "--json")
    assert code == 0, out
    data = json.loads(out)
    kinds = {r["kernel"] for r in data["by_kernel"]}
    assert "LayerNormalization" in kinds and "ReduceMean" not in kinds  # ORT's fused graph, not the file's ops
    assert data["kernels"] == sum(r["count"] for r in data["by_kernel"]) and data["estimate_ms"] > 0
    code, text = invoke("cost", str(src), "--model", "ort-kernels", "--threads", "1",
                        "--cache", str(tmp_path / "k.sqlite"))
    assert code == 0 and "LayerNormalization" in text and "0 timed now" in text  # the cache answered
