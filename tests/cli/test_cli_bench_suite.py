"""``graphsub bench suite`` on a user's ONNX file: every tool run, verified, inspected and timed; resumable; a wrong
output is reported and never timed."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from graphsub.bench.records import load_records
from graphsub.bench.suite.runner import BASELINE, inspect, time_all
from graphsub.bench.suite.select import from_file
from graphsub.bench.suite.table import cell, failures, write_tables
from graphsub.cli import app
from graphsub.optimize.timing import Timers, confirm_timer, session_timer


def _model(path: Path) -> Path:
    """``relu(x @ W + 0) + identity(x @ V)``: exporter leftovers (an added zero, an identity) around two matmuls."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), n) for n in ("W", "V")]
    inits.append(numpy_helper.from_array(np.zeros((64,), np.float32), "Z"))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("Add", ["a", "Z"], ["b"]),
             helper.make_node("Relu", ["b"], ["r"]), helper.make_node("MatMul", ["x", "V"], ["c"]),
             helper.make_node("Identity", ["c"], ["d"]), helper.make_node("Add", ["r", "d"], ["y"])]
    g = helper.make_graph(nodes, "leftovers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


ARGS = ["--peers", "onnxslim", "--threads", "1", "--budget", "2", "--rounds", "2"]  # one peer: graphsub runs twice


@pytest.fixture(scope="module", autouse=True)
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The tools' outputs go to a temporary folder, not the user's cache."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("work")
        mp.setenv("GRAPHSUB_SUITE_WORK", str(path))
        yield path


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory, work_dir: Path) -> tuple[Path, Path, dict[str, object]]:
    tmp = tmp_path_factory.mktemp("suite")
    model = _model(tmp / "leftovers.onnx")
    r = CliRunner().invoke(app, ["bench", "suite", "--models", str(model), *ARGS, "--out", str(tmp), "--json"])
    assert r.exit_code == 0, r.output
    return tmp, model, json.loads(r.stdout)


def test_every_tool_is_verified_inspected_and_timed(suite_run: tuple[Path, Path, dict[str, object]]) -> None:
    tmp, _, data = suite_run
    rows = {row["tool"]: row for row in data["rows"]}  # type: ignore[attr-defined]
    assert list(rows) == ["ort", "onnxslim", "graphsub", "graphsub-own", "graphsub-rules", "graphsub+onnxslim"]
    for tool, row in rows.items():
        assert row["status"] == "ok" and row["loads"] and row["verified"], (tool, row)
        assert row["speedup"]["1"] > 0 and row["ms"]["1"] > 0 and 0 <= row["faster_rounds"]["1"] <= 1
        assert isinstance(row["ops"], int) and row["ops"] > 0 and isinstance(row["fused_kernels"], dict)
    assert rows["ort"]["speedup"]["1"] == 1.0 and rows["ort"]["verdict"]["1"] is None  # the baseline
    assert "ort (A/A)" not in rows  # its A/A arm is no tool
    decided = [t for t in rows if t != "ort" and rows[t]["verdict"]["1"] is not None]  # not graphsub if same as ort
    assert "onnxslim" in decided
    for tool in decided:  # --rounds 2: two session groups measured, too few to decide "faster"
        v = rows[tool]["verdict"]["1"]
        assert not rows[tool]["faster"]["1"] and v["sessions"] == 2 and v["rounds"] == 2, v
        assert rows[tool]["speedup_ci"]["1"] is not None and rows[tool]["aa_ratio"]["1"] > 0
    h = rows["graphsub"]["head_to_head"]["1"]
    assert h["peer"] == "onnxslim"  # then against the best peer, in fresh session groups with an A/A control
    assert h["ratio"] == h["speedup"] and h["speedup_ci"] is not None and h["aa_ratio"] > 0 and h["rounds"] > 0
    assert rows["onnxslim"]["ops"] <= rows["ort"]["ops"]  # the leftovers are gone after slimming
    assert (tmp / "suite.md").is_file() and (tmp / "suite.png").is_file()
    assert not list(tmp.glob("**/*onnxslim.onnx"))  # the tools' outputs are not written beside the results
    assert "onnxslim" in (tmp / "suite.md").read_text()


def test_a_second_run_resumes(suite_run: tuple[Path, Path, dict[str, object]]) -> None:
    tmp, model, _ = suite_run
    before = (tmp / "suite.jsonl").read_text()
    r = CliRunner().invoke(app, ["bench", "suite", "--models", str(model), *ARGS, "--out", str(tmp)])
    assert r.exit_code == 0, r.output
    assert (tmp / "suite.jsonl").read_text() == before and "leftovers" in r.stdout


def test_a_suite_results_file_is_reported_by_the_suites_tables(suite_run: tuple[Path, Path, dict[str, object]],
                                                               tmp_path: Path) -> None:
    """``graphsub bench RESULTS.jsonl`` on a suite run's records writes the suite's table (it ended in an internal
    error: the grid's tables read fields a suite record does not have)."""
    tmp, _, _ = suite_run
    where = tmp_path / "new"  # a folder that does not exist yet
    r = CliRunner().invoke(app, ["bench", str(tmp / "suite.jsonl"), "--out", str(where), "--name", "again",
                                 "--no-plots", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["models"] == 1 and Path(doc["report"]["markdown"]) == where / "again.md"
    assert "onnxslim" in (where / "again.md").read_text()


def test_a_wrong_output_is_reported_and_never_timed(suite_run: tuple[Path, Path, dict[str, object]],
                                                   tmp_path: Path) -> None:
    _, model, _ = suite_run
    wrong = onnx.load(str(model))
    for init in wrong.graph.initializer:
        if init.name == "W":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 2, "W"))
    onnx.save(wrong, str(tmp_path / "wrong.onnx"))
    shutil.copy(model, tmp_path / "ort.onnx")
    inp = from_file(model)
    outcomes = {BASELINE: {"status": "ok", "path": str(tmp_path / "ort.onnx")},
                "bad": {"status": "ok", "path": str(tmp_path / "wrong.onnx")},
                "broken": {"status": "failed", "error": "crashed: SIGSEGV"}}
    inspect(inp, outcomes, seed=0)
    time_all(inp, outcomes, [1], rounds=1, budget_ms=5, seed=0)
    assert outcomes[BASELINE]["verified"] and "timing" in outcomes[BASELINE]
    assert outcomes["bad"]["loads"] and not outcomes["bad"]["verified"] and "timing" not in outcomes["bad"]
    rec = {"model": "m", "path": str(model), "threads": [1], "tools": outcomes}
    assert cell(outcomes["bad"], 1) == "WRONG" and cell(outcomes["broken"], 1) == "FAILED"
    lines = failures([rec])
    assert len(lines) == 2 and "wrong outputs" in lines[0] and "SIGSEGV" in lines[1]
    assert "graphsub bench suite --models" in lines[0]
    write_tables([rec], tmp_path, "t", plots=False)
    assert "WRONG" in (tmp_path / "t.md").read_text()


def test_usage_errors(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    runner = CliRunner()
    for extra, words in ((["--peers", "nope"], "unknown peer"), (["--threads", "0"], "--threads"),
                         (["--budget", "-1"], "--budget")):
        r = runner.invoke(app, ["bench", "suite", "--models", str(model), *extra, "--out", str(tmp_path)])
        assert r.exit_code == 2 and words in " ".join(r.output.split()), r.output
    r = runner.invoke(app, ["bench", "suite", "--models", str(tmp_path / "missing.onnx"), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "no such file" in " ".join(r.output.split())
    assert load_records(tmp_path / "suite.jsonl") == []


def test_provider_cuda_without_a_gpu_is_a_usage_error(tmp_path: Path) -> None:
    """``--provider cuda`` where onnxruntime has no CUDA provider: exit 2 naming what is missing, before any model
    is built, run or recorded; an unknown provider likewise. Where onnxruntime-gpu sees a GPU, the suite runs on it
    and every record says so."""
    from graphsub.errors import ExecutionError
    from graphsub.frontends.ort import require_provider

    model = _model(tmp_path / "m.onnx")
    runner = CliRunner()
    r = runner.invoke(app, ["bench", "suite", "--models", str(model), *ARGS, "--out", str(tmp_path),
                            "--provider", "tpu"])
    assert r.exit_code == 2 and "unknown provider" in " ".join(r.output.split()), r.output
    try:
        require_provider("cuda")
    except ExecutionError:
        r = runner.invoke(app, ["bench", "suite", "--models", str(model), *ARGS, "--out", str(tmp_path),
                                "--provider", "cuda", "--json"])
        assert r.exit_code == 2 and "CUDAExecutionProvider" in json.loads(r.stdout)["error"]
        assert load_records(tmp_path / "suite.jsonl") == []
        return
    r = runner.invoke(app, ["bench", "suite", "--models", str(model), *ARGS, "--out", str(tmp_path),
                            "--provider", "cuda", "--json"])
    assert r.exit_code == 0, r.output
    (rec,) = load_records(tmp_path / "suite.jsonl")
    assert rec["provider"] == "cuda" and rec["tools"]["graphsub"]["verified"]


def _spy(timed: dict[int, set[str]], paths: Mapping[str, str]) -> Timers:
    """Real timers that record, per thread count, which variants (by tool name, from their ``paths``) the
    side-by-side rounds create sessions of (the head-to-head's confirmation sessions are not counted)."""
    by_path = {p: t for t, p in paths.items()}

    def session(model: bytes | str, feeds: dict, *, threads: int, **kw: Any) -> Callable[[float], float]:
        timed.setdefault(threads, set()).add(by_path[str(model)])
        return session_timer(model, feeds, threads=threads, **kw)

    return Timers(session=session, confirm=confirm_timer)


def test_graphsub_decides_at_each_thread_count(suite_run: tuple[Path, Path, dict[str, object]],
                                                tmp_path: Path) -> None:
    """``graphsub@1`` (``graphsub optimize --threads 1``) is timed at 1 thread only and becomes graphsub's result
    there; the all-cores run keeps the other thread counts (its 1-thread timing stays on record). So does
    ``graphsub-own@1`` for graphsub on its own."""
    _, model, _ = suite_run
    paths = {}
    for tool in (BASELINE, "graphsub", "graphsub-own", "graphsub@1", "graphsub-own@1"):
        m = onnx.load(str(model))
        m.producer_name = tool  # same computation, distinct files
        onnx.save(m, str(tmp_path / f"{tool}.onnx"))
        paths[tool] = str(tmp_path / f"{tool}.onnx")
    timed: dict[int, set[str]] = {}
    outcomes = {t: {"status": "ok", "path": p, "chosen": t, "threads": 1 if "@" in t else 2} for t, p in paths.items()}
    inspect(from_file(model), outcomes, seed=0)
    for o in outcomes.values():  # the files compute the same: as if ORT ran them differently (else one is timed)
        o.pop("ort_signature")
    time_all(from_file(model), outcomes, [1, 2], rounds=1, budget_ms=5, seed=0, timers=_spy(timed, paths))
    assert {n: sorted(v) for n, v in timed.items()} == {
        1: ["graphsub", "graphsub-own", "graphsub-own@1", "graphsub@1", "ort"], 2: ["graphsub", "graphsub-own", "ort"]}
    for variant in ("graphsub", "graphsub-own"):
        ours = outcomes[variant]
        assert f"{variant}@1" not in outcomes and ours["at_threads"]["1"]["chosen"] == f"{variant}@1"
        assert set(ours["timing"]) == {"1", "2"} and set(ours["timing_all_cores_run"]) == {"1"}
        assert ours["timing"]["1"] != ours["timing_all_cores_run"]["1"]
    from graphsub.bench.suite.table import choices

    rows = choices([{"model": "m", "tools": outcomes}])[2:]
    assert [r.split(" | ")[1] for r in rows] == ["graphsub@1", "graphsub"]  # one row per thread count, 1 first


def test_graphsub_meets_the_best_peer_head_to_head(suite_run: tuple[Path, Path, dict[str, object]],
                                                   tmp_path: Path) -> None:
    """After the side-by-side rounds, graphsub's output is timed again against the peer with the highest speedup, in
    fresh session groups (the peer, graphsub, the peer again as the A/A control) decided by
    :func:`graphsub.optimize.decide.compare`; the record and the table say the verdict."""
    from graphsub.bench.suite.table import speedup_table, versus
    from graphsub.optimize import decide

    _, model, _ = suite_run
    paths = {}
    for tool in (BASELINE, "slow-peer", "fast-peer", "graphsub"):
        m = onnx.load(str(model))
        m.producer_name = tool  # same computation, distinct files
        onnx.save(m, str(tmp_path / f"{tool}.onnx"))
        paths[tool] = str(tmp_path / f"{tool}.onnx")
    outcomes = {t: {"status": "ok", "path": p} for t, p in paths.items()}
    inspect(from_file(model), outcomes, seed=0)
    for o in outcomes.values():
        o.pop("ort_signature")  # as if ORT ran them differently (else they are timed once)
    time_all(from_file(model), outcomes, [1], rounds=1, budget_ms=5, seed=0)
    h = outcomes["graphsub"]["timing"]["1"]["head_to_head"]
    best = max(("slow-peer", "fast-peer"), key=lambda t: outcomes[t]["timing"]["1"]["speedup"])
    assert h["peer"] == best and not h["same_file"] and h["sessions"] == decide.GROUPS
    # every session group: two rounds of the peer, graphsub and the peer again, whatever the side-by-side rounds
    assert len(h["candidate_ms"]) == len(h["original_ms"]) == len(h["aa_ms"]) == h["rounds"] == (
        decide.GROUPS * decide.ROUNDS_PER_GROUP)
    assert h["ratio"] == h["speedup"] > 0 and h["speedup_ci"][0] <= h["ratio"] <= h["speedup_ci"][1]
    assert h["aa_ratio"] > 0 and h["reason"] and not (h["faster"] and h["slower"])
    rec = {"model": "m", "family": "user", "tools": outcomes}
    v = versus(rec, 1)
    assert v is not None and v[0] in ("ahead", "tie", "behind") and v[1] == best
    assert "head-to-head (" in speedup_table([rec], 1)


def test_variants_onnx_runtime_runs_alike_are_timed_once(suite_run: tuple[Path, Path, dict[str, object]],
                                                          tmp_path: Path) -> None:
    """A peer output that differs from the original only where ONNX Runtime's own optimizations make them equal (an
    Identity here, which ORT removes) is timed once with it: it says ``same_as`` and ``same_after_ort``, and the table
    marks it, so noise between two runs of the same kernels never shows as a speedup."""
    from graphsub.bench.suite.table import cell

    _, model, _ = suite_run
    m = onnx.load(str(model))
    first = m.graph.node[0]
    moved = first.input[0] + "_id"
    m.graph.node.insert(0, onnx.helper.make_node("Identity", [first.input[0]], [moved]))
    first.input[0] = moved
    onnx.save(m, str(tmp_path / "peer.onnx"))
    timed: dict[int, set[str]] = {}
    outcomes = {BASELINE: {"status": "ok", "path": str(model)}, "peer": {"status": "ok", "path": str(tmp_path /
                                                                                                 "peer.onnx")}}
    inspect(from_file(model), outcomes, seed=0)
    assert outcomes["peer"]["ort_signature"] == outcomes[BASELINE]["ort_signature"]
    spy = _spy(timed, {t: str(o["path"]) for t, o in outcomes.items()})
    time_all(from_file(model), outcomes, [1], rounds=1, budget_ms=5, seed=0, timers=spy)
    assert timed == {1: {BASELINE}} and outcomes["peer"]["same_as"] == BASELINE and outcomes["peer"]["same_after_ort"]
    assert cell(outcomes["peer"], 1) == "1.00x (same after ORT)"


def test_the_suite_on_ray_runs_every_model_as_a_task(suite_run: tuple[Path, Path, dict[str, object]],
                                                     ray_cluster: str, tmp_path: Path) -> None:
    """run_suite(executor="ray"): each model a task on the two-node cluster, its record appended with the node that
    ran it, the tools verified as in the sequential run (the original and one peer here, to keep it short); a model
    that cannot run is its own record; `process` is refused (it would time side by side)."""
    from graphsub.bench.suite.runner import SuiteInput, run_suite

    _, model, data = suite_run
    twin = Path(shutil.copy(model, tmp_path / "twin.onnx"))
    inputs = [from_file(model), from_file(twin)]
    missing = SuiteInput("missing", tmp_path / "missing.onnx", inputs[0].inputs)
    recs = run_suite([*inputs, missing], ["ort", "onnxslim"], [1], tmp_path, executor="ray",
                     ray_address=ray_cluster, rounds=2, budget_ms=50.0)
    assert [r["id"] for r in recs] == ["leftovers", "twin", "missing"] and all(r.get("node") for r in recs)
    assert len(load_records(tmp_path / "suite.jsonl")) == 3
    (seq,) = load_records(Path(str(data["results"])))
    for rec in recs[:2]:
        assert {t: o.get("verified") for t, o in rec["tools"].items()} == {
            t: seq["tools"][t].get("verified") for t in ("ort", "onnxslim")}
    assert not any(o.get("verified") for o in recs[2]["tools"].values())
    r = CliRunner().invoke(app, ["bench", "suite", "--models", str(model), *ARGS, "--out", str(tmp_path),
                                 "--executor", "process", "--json"])
    assert r.exit_code == 2
