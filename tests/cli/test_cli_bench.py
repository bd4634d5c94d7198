"""``graphsub bench``: a grid of runs with its report, a dry run, the report alone, presets, usage errors, and a
grid on a two-node Ray cluster (the harness itself: tests/bench/test_harness.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphsub.cli import app

COST = "roofline:v100"
runner = CliRunner()


def test_bench_runs_a_grid_and_reports(tmp_path: Path) -> None:
    args = ["bench", "small-exact", "--algos", "greedy", "--models", "sru", "--costs", COST, "--k", "2",
            "--cutoff", "10", "--out", str(tmp_path)]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["counts"] == {"ok": 1, "timeout": 0, "error": 0} and data["executed"] == 1
    assert (tmp_path / "small-exact.jsonl").exists() and data["report"]["table3"]
    r = runner.invoke(app, [*args, "--dry-run", "--json"])
    assert r.exit_code == 0 and [x["done"] for x in json.loads(r.stdout)] == [True]
    r = runner.invoke(app, [*args, "--report-only", "--no-plots"])
    assert r.exit_code == 0 and "sru" in r.stdout
    r = runner.invoke(app, ["bench", str(tmp_path / "small-exact.jsonl"), "--json", "--no-plots"])
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"][0]["algo"] == "greedy"
    r = runner.invoke(app, ["bench", "--list", "--json"])
    assert r.exit_code == 0 and {p["name"] for p in json.loads(r.stdout)} >= {"table3", "fig4", "fig5"}


@pytest.mark.parametrize("bad", [["nosuch"], ["table3", "--algos", "nosuch"], ["table3", "--k", "x"],
                                 ["table3", "--models", "nosuch"], ["table3", "--cutoff", "0"],
                                 ["table3", "--param", "taso"], ["table3", "--costs", "roofline:h900"], []])
def test_bench_bad_arguments_exit_2(bad: list[str], tmp_path: Path) -> None:
    r = runner.invoke(app, ["bench", *bad, "--out", str(tmp_path), "--json"])
    assert r.exit_code == 2, r.output
    assert not list(tmp_path.iterdir())


def test_bench_on_ray(ray_cluster: str, tmp_path: Path) -> None:
    """``--executor ray --ray-address``: each run a task on the cluster (what the records say:
    tests/bench/test_harness.py)."""
    r = runner.invoke(app, ["bench", "small-exact", "--models", "sru", "--algos", "greedy", "--costs", COST, "--k", "2",
                            "--cutoff", "10", "--out", str(tmp_path), "--name", "cli", "--executor", "ray",
                            "--ray-address", ray_cluster, "--json", "--no-plots"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["counts"] == {"ok": 1, "timeout": 0, "error": 0}
    (rec,) = [json.loads(line) for line in (tmp_path / "cli.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok" and rec.get("node")  # it ran on a node of the cluster
