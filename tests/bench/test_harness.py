"""Experiment harness: runs in spawned processes, JSONL/CSV, resume, errors, reports, presets (the command line,
`graphsub bench`, is tested in tests/cli/test_cli_bench.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from graphsub.bench.harness import Run, check_run, run_grid, run_one
from graphsub.bench.presets import PRESETS, TABLE3_MODELS, registered_algorithms
from graphsub.bench.records import load_records
from graphsub.bench.tables import summarize, table3_markdown, write_summary
from graphsub.spec import ModelSpec, split_specs

COST = "roofline:v100"
TINY = dict(cost=COST, rules="ocggs157", k=2, cutoff_s=10)


def tiny_grid() -> list[Run]:
    return [Run(a, m, **TINY) for m in ("resnet:blocks=2", "sru") for a in ("greedy", "enum")]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("bench")
    runs = [*tiny_grid(), Run("greedy", "no_such_model", **TINY)]  # type: ignore[arg-type]
    return out, run_grid(runs, out, name="tiny", progress=False)


def test_run_id_is_a_stable_hash_of_the_spec() -> None:
    a = Run("taso", "resnet:blocks=4", params={"alpha": 1.05}, cutoff_s=60)
    assert a.id == Run("taso", "resnet:blocks=4", params={"alpha": 1.05}, cutoff_s=60.0).id
    assert a.id != Run("taso", "resnet:blocks=4", params={"alpha": 1.05}, cutoff_s=60, repeat=1).id
    assert a.id != Run("taso", "resnet:blocks=4", params={"alpha": 1.1}, cutoff_s=60).id
    assert Run.from_dict({**a.spec(), "status": "ok"}) == a and len(a.id) == 16
    spec = ModelSpec.parse("bert:variant=faithful")
    assert (spec.kind, spec.name, spec.zoo_kwargs) == ("zoo", "bert", {"variant": "faithful"})
    assert check_run(a) == []
    assert any("unknown algorithm" in p for p in check_run(Run("nope", "sru")))
    assert any("unknown zoo model" in p for p in check_run(Run("greedy", "nope")))
    assert any("cost model" in p for p in check_run(Run("greedy", "sru", cost="roofline:h900")))


def test_grid_records_every_run_in_jsonl_and_csv(grid: tuple[Path, Any]) -> None:
    out, g = grid
    assert g.executed == 5 and g.skipped == 0
    assert g.counts == {"ok": 4, "timeout": 0, "error": 1}
    lines = (out / "tiny.jsonl").read_text().splitlines()
    assert len(lines) == 5
    recs = {(r["model"], r["algo"]): r for r in map(json.loads, lines)}
    for model in ("resnet:blocks=2", "sru"):
        greedy, enum = recs[(model, "greedy")], recs[(model, "enum")]
        for r in (greedy, enum):
            assert r["status"] == "ok" and r["error"] is None and r["stopped_by"] == "done"
            assert r["best_cost"] <= r["initial_cost"] and r["seq_len"] <= r["k"] == 2
            assert 10 < r["peak_mem_mb"] < 4000 and r["search_time_s"] < 10
            assert r["trace"][0] == [0.0, r["initial_cost"]] and r["trace"][-1][1] == r["best_cost"]
            assert {"time_match_s", "time_apply_s", "time_hash_s", "time_cost_s"} <= set(r["stats"])
            assert r["versions"]["graphsub"] and r["versions"]["onnxruntime"] and r["machine"]["cores"]
            assert r["explored"] >= 1 and r["generated"] >= 0 and r["num_ops"] >= 10
        assert enum["best_cost"] <= greedy["best_cost"] + 1e-12  # ENU is exact within K
    assert recs[("sru", "enum")]["best_cost"] < recs[("sru", "enum")]["initial_cost"]
    rows = list(csv.DictReader((out / "tiny.csv").open()))
    assert len(rows) == 5 and {r["status"] for r in rows} == {"ok", "error"}
    assert (out / "tiny_summary.csv").exists()


def test_failing_run_is_recorded_not_raised(grid: tuple[Path, Any]) -> None:
    out, _ = grid
    (bad,) = [r for r in load_records(out / "tiny.jsonl") if r["model"] == "no_such_model"]
    assert bad["status"] == "error" and "unknown model" in bad["error"] and "ZooError" in bad["error"]
    assert bad["best_cost"] is None


def test_resume_skips_recorded_runs(grid: tuple[Path, Any]) -> None:
    out, _ = grid
    seen: list[str] = []
    extra = Run("greedy", "resnet:blocks=2", **{**TINY, "k": 1})  # type: ignore[arg-type]
    g = run_grid([*tiny_grid(), extra], out, name="tiny", progress=False, on_record=lambda r: seen.append(r["id"]))
    assert g.executed == 1 and g.skipped == 4 and seen == [extra.id]
    assert len((out / "tiny.jsonl").read_text().splitlines()) == 6
    assert len(g.records) == 5 and len(load_records(out / "tiny.jsonl")) == 6


def test_child_is_killed_past_its_deadline() -> None:
    rec = run_one(Run("greedy", "sru", **TINY), setup_timeout_s=0.01)  # type: ignore[arg-type]
    assert rec["status"] == "timeout" and "setup" in rec["error"] and rec["best_cost"] is None


def test_report_writes_table3_and_plots(grid: tuple[Path, Any], tmp_path: Path) -> None:
    out, _ = grid
    files = write_summary(out / "tiny.jsonl", tmp_path)
    md = Path(files["table3"][1]).read_text()
    assert "(a) optimized cost" in md and "(c) peak memory (MB)" in md
    assert "| model | ENU | Greedy |" in md and "sru" in md and "resnet:blocks=2" in md
    assert files["plots"] and all(Path(p).read_bytes()[:4] == b"\x89PNG" for p in files["plots"])
    report = Path(files["report"][0]).read_text()
    assert "no_such_model" in report and "error" in report
    rows = summarize(load_records(out / "tiny.jsonl"))
    assert "†" not in table3_markdown([r for r in rows if r["k"] == 2 and r["error"] == 0])


def test_presets_follow_the_paper() -> None:
    t3 = PRESETS["table3"]
    assert t3.models == TABLE3_MODELS and len(t3.models) == 7 and t3.ks == (10,) and t3.rules == "ocggs157"
    assert set(t3.costs) == {"roofline:p100", "measured"}
    runs = t3.runs()
    assert {r.algo for r in runs} == set(registered_algorithms())
    assert len(runs) == 7 * 2 * len(registered_algorithms())
    assert all(r.params == {"alpha": 1.05} for r in runs if r.algo == "taso")
    assert not [p for r in runs for p in check_run(r)]
    quick = t3.runs(algos=["greedy"], models=["sru"], costs=["flops"], ks=[3], cutoff_s=5, repeats=2, seed=7)
    assert [(r.repeat, r.seed, r.k, r.cutoff_s, r.cost) for r in quick] == [(0, 7, 3, 5.0, "flops"),
                                                                          (1, 8, 3, 5.0, "flops")]
    assert PRESETS["fig5"].ks == (5, 10, 15, 20, 25)
    assert set(PRESETS["fig4"].models) >= {"resnet:blocks=8", "inception_e:blocks=4"}
    assert split_specs("resnet:blocks=4,sru,a:x=1,y=2") == ["resnet:blocks=4", "sru", "a:x=1,y=2"]


def test_a_grid_on_ray_records_the_same_results_with_the_node(grid: tuple[Path, Any], ray_cluster: str,
                                                              tmp_path: Path) -> None:
    """run_grid(executor="ray"): each run a task on the two-node cluster; the records carry the node and reach the
    same costs as the serial grid (the searches are deterministic); a measured cost model marks a run as timing (it
    then holds the node's timing unit); the process executor is refused (the command line's --executor ray:
    tests/cli/test_cli_bench.py)."""
    from graphsub.bench.harness import times_models

    _, serial = grid
    runs = tiny_grid()
    g = run_grid(runs, tmp_path, name="ray", progress=False, executor="ray", ray_address=ray_cluster)
    assert g.counts == {"ok": 4, "timeout": 0, "error": 0} and all(r.get("node") for r in g.records)
    want = {r["id"]: r["best_cost"] for r in serial.records if r["status"] == "ok"}
    assert {r["id"]: r["best_cost"] for r in g.records} == want
    assert times_models(Run("greedy", "sru", cost="measured:cpu")) and not times_models(runs[0])
    with pytest.raises(Exception, match=r"serial .* or on Ray"):
        run_grid(runs, tmp_path, name="proc", progress=False, executor="process")
