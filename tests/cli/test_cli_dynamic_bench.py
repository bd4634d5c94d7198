"""``graphsub dynamic bench --json`` on tiny synthetic sizes (issue 10); the benchmark's library side is
tests/dynamic/test_bench_modes.py."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from graphsub.cli import app


def test_dynamic_bench_json_tiny() -> None:
    r = CliRunner().invoke(app, ["dynamic", "bench", "--data", "synthetic", "--batches", "3", "--batch-size", "3",
                                 "--emb", "12", "--hidden", "6", "--warmup", "1", "--train-steps", "2", "--depth", "4",
                                 "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert set(res["ms_per_batch"]) == {"eager", "traced", "reuse", "reuse+batch", "prefetch", "module+batch",
                                        "module+prefetch"}
    for mode in ("prefetch", "module+prefetch"):
        assert res["ms_per_batch"][mode]["full"] > 0 and res["speedup"][mode]["full"] > 0
    # recording time per batch and per node, for every lazy mode (the workers' for prefetch modes)
    assert set(res["recording"]) == set(res["ms_per_batch"]) - {"eager"}
    rec = res["recording"]
    assert rec["module+batch"]["nodes_per_batch"] < rec["reuse+batch"]["nodes_per_batch"]
    assert rec["module+prefetch"]["nodes_per_batch"] == rec["module+batch"]["nodes_per_batch"]
    assert all(r["us_per_node"] > 0 for r in rec.values())
    # the capture decisions, named by their path in the model, with the reason of each refusal
    cap = {r["callable"]: r for r in res["capture"]}
    assert cap["composer (TreeComposer)"]["captured"] and cap["leaf_cell (TreeLeaf)"]["captured"]
    assert not cap["BinaryTreeLSTM"]["captured"] and "Tree" in cap["BinaryTreeLSTM"]["reason"]
    assert set(res["plan_cache"]) == {"module+batch", "module+prefetch"}
    assert res["plan_cache"]["module+batch"]["hits"] > 0  # the second round repeats the batches
    # the best mode: the fastest full step among the modes run other than eager (the baseline), and the speedup
    # reported for it is its own
    full = {m: t["full"] for m, t in res["ms_per_batch"].items() if m != "eager"}
    assert res["best_mode"] in full and full[res["best_mode"]] == min(full.values())
    assert res["speedup_full_step"] == pytest.approx(res["speedup"][res["best_mode"]]["full"])
    assert res["speedup_full_step"] == pytest.approx(max(res["speedup"][m]["full"] for m in full))
    assert res["training"]["mode"] == res["best_mode"] and res["loss_max_abs_diff"] < 1e-5  # it trains as eager does
    for stage in ("preprocess", "trace", "optimize", "forward", "backward", "step", "full"):
        assert res["ms_per_batch"]["reuse+batch"][stage] >= 0
    assert [row["depth"] for row in res["table_6_3"]] == [5, 6, 7, 8, 9, 10]
    assert res["engines"]["reuse+batch"]["calls"] < res["engines"]["reuse+batch"]["units"]
    # the host's speed for Python, probed per round before its one slice (3 batches) and its two prefetch phases
    probe = res["host_probe_ms"]
    assert probe["n"] == 2 * (1 + 2) and 0 < probe["min"] <= probe["median"] <= probe["max"]


def test_dynamic_bench_seqlstm_and_usage_errors() -> None:
    r = CliRunner().invoke(app, ["dynamic", "bench", "--data", "synthetic", "--batches", "2", "--batch-size", "2",
                                 "--emb", "8", "--hidden", "4", "--warmup", "0", "--train-steps", "1",
                                 "--workload", "seqlstm", "--modes", "eager,reuse+batch", "--no-tables", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert set(res["ms_per_batch"]) == {"eager", "reuse+batch"}  # only the modes asked for
    # reuse+batch, the only other mode, is the best one by construction: what counts is that it trains as eager does
    assert res["best_mode"] == res["training"]["mode"] == "reuse+batch"
    assert res["training"]["steps"] == 1 and res["loss_max_abs_diff"] < 1e-5
    r = CliRunner().invoke(app, ["dynamic", "bench", "--modes", "eager,bogus", "--json"])
    assert r.exit_code == 2 and "bogus" in r.stdout


def test_dynamic_bench_unknown_vocabulary_is_a_usage_error() -> None:
    """The library side (``--vocab train`` / ``batches`` on the real SST split): tests/dynamic/test_bench_modes.py."""
    r = CliRunner().invoke(app, ["dynamic", "bench", "--vocab", "all", "--json"])
    assert r.exit_code == 2 and "vocabulary" in r.stdout
