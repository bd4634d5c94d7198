"""``graphsub fuse``: JSON fields, text output, picture, a GNN-explainer repair, and usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.cli.fuse import parse_buffer

runner = CliRunner()


def test_fuse_json(tmp_path: Path) -> None:
    png = tmp_path / "plan.png"
    r = runner.invoke(app, ["fuse", "zoo:resnet18", "--scheme", "lbdf", "--buffer", "256KB", "--algo", "ls",
                            "--budget", "50", "--seed", "1", "--json", "--plot", str(png)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for key in ("dram_mb", "mbu_kb", "num_groups", "valid", "evaluated_plans", "time_s"):
        assert key in d
    assert d["valid"] and d["evaluated_plans"] == 50 and d["mbu_kb"] < 256
    assert d["dram_mb"] < d["unfused_dram_mb"] and d["unfusable_ops"] == 9
    assert sum(len(g) for g in d["groups"]) == d["num_ops"] == 48
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_fuse_repair_gnne_end_to_end() -> None:
    """``--repair gnne`` with ``--model-weights`` (the packaged LBDF weights, a .pt with its .json beside it; the
    training and save/load round trip of such a file are tests/layer_fusion/test_gnn_explain_split.py)."""
    from graphsub.layer_fusion.gnn import default_weights

    r = runner.invoke(app, ["fuse", "zoo:resnet18", "--buffer", "128KB", "--algo", "rs", "--budget", "4",
                            "--repair", "gnne", "--model-weights", str(default_weights("lbdf")), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["valid"] and d["evaluated_plans"] == 4 and d["repair"] == "gnne"
    st = d["repair_stats"]
    assert st["groups_repaired"] > 0 and st["rectified"] + st["fallback"] == st["groups_repaired"]


def test_fuse_text_brr() -> None:
    r = runner.invoke(app, ["fuse", "zoo:squeezenet", "--scheme", "brr", "--buffer", "1MB", "--algo", "rs",
                            "--budget", "20"])
    assert r.exit_code == 0, r.output
    assert "DRAM" in r.stdout and "MBU" in r.stdout and "valid     yes" in r.stdout


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--buffer", "12XB"], 2, "malformed buffer size"),
    (["--budget", "0"], 2, "must be an integer >= 1"),
    (["--repair", "gnne", "--model-weights", "/nonexistent.pt"], 2, "need the .pt file"),
    (["--scheme", "xyz"], 2, "unknown --scheme"),
    (["--algo", "sa"], 2, "unknown --algo"),
])
def test_fuse_usage_errors(args: list[str], code: int, message: str) -> None:
    r = runner.invoke(app, ["fuse", "zoo:resnet18", "--json", *args])
    assert r.exit_code == code
    assert message in json.loads(r.stdout)["error"]


def test_fuse_unknown_model() -> None:
    r = runner.invoke(app, ["fuse", "zoo:resnet19", "--json"])
    assert r.exit_code == 3  # the CLI's "bad input" code for unknown zoo names
    assert "unknown model" in json.loads(r.stdout)["error"]


def test_parse_buffer() -> None:
    assert parse_buffer("256KB") == parse_buffer("256K") == parse_buffer("0.25MB") == 262144
    for bad in ("", "KB", "-1KB", "12GBx", "0"):
        with pytest.raises(ValueError):
            parse_buffer(bad)
