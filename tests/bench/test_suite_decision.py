"""The suite decides through :mod:`graphsub.optimize.decide` only: timed with fake :class:`Timers` whose sessions
each keep a lasting offset (as onnxruntime sessions do) and whose rounds jitter, a variant that runs as ONNX Runtime
alone is never the best tool nor ahead head-to-head, and a clearly faster one is, with its interval, its A/A ratio,
its rounds and its session groups on record."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.bench.suite.measure import aa_name
from graphsub.bench.suite.runner import BASELINE, GRAPHSUB, SuiteInput, time_all
from graphsub.bench.suite.table import best_cell, best_tool, json_rows, speedup_table, versus
from graphsub.optimize import decide
from graphsub.optimize.timing import Timers


def noisy_timers(latency: Mapping[str, float], seed: int, *, session_sd: float = 0.01,
                 round_sd: float = 0.003) -> tuple[Timers, list[str]]:
    """Timers without onnxruntime: a session of the file ``<tool>.onnx`` runs in ``latency[tool]`` ms times its
    own lasting factor (``session_sd``) times a jitter per call (``round_sd``); a clock that ticks once a read.
    Also the tools whose sessions were made, in order (the side-by-side's and the head-to-head's alike)."""
    rng = np.random.default_rng(seed)
    made: list[str] = []
    ticks = itertools.count()

    def session(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        tool = Path(str(model)).stem
        made.append(tool)
        lasting = latency[tool] * math.exp(rng.normal(0.0, session_sd))
        return lambda budget_ms: lasting * math.exp(rng.normal(0.0, round_sd))

    return Timers(session=session, confirm=session, clock=lambda: float(next(ticks))), made


def run(tmp_path: Path, latency: Mapping[str, float], seed: int = 0) -> tuple[dict[str, Any], list[str]]:
    """``time_all`` on distinct files, one per tool (verified), timed by :func:`noisy_timers`: the record and the
    sessions made."""
    outcomes: dict[str, dict[str, Any]] = {}
    for tool in latency:
        path = tmp_path / f"{tool}.onnx"
        path.write_bytes(tool.encode())  # never loaded: the fake sessions only read the name
        outcomes[tool] = {"status": "ok", "path": str(path), "loads": True, "verified": True}
    model = SuiteInput("m", tmp_path / f"{BASELINE}.onnx", ({"name": "x", "dtype": "float32", "shape": [1]},))
    timers, made = noisy_timers(latency, seed)
    time_all(model, outcomes, [1], rounds=7, budget_ms=1.0, seed=0, timers=timers)
    return {"model": "m", "family": "user", "threads": [1], "tools": outcomes}, made


def test_a_twin_of_onnx_runtime_is_never_best_nor_ahead(tmp_path: Path) -> None:
    for seed in range(12):
        rec, made = run(tmp_path, {BASELINE: 10.0, "onnxsim": 10.0, GRAPHSUB: 10.0}, seed)
        assert best_tool(rec, 1) == BASELINE, (seed, best_cell(rec, 1))
        for tool in ("onnxsim", GRAPHSUB):
            v = rec["tools"][tool]["timing"]["1"]["verdict"]
            assert not v["faster"] and v["sessions"] == 3 and v["rounds"] == 7 and v["alpha"] == decide.ALPHA / 2
        h = rec["tools"][GRAPHSUB]["timing"]["1"]["head_to_head"]
        assert h["peer"] == "onnxsim" and not h["faster"] and not h["slower"], (seed, h["reason"])
        assert versus(rec, 1)[0] == "tie"  # type: ignore[index]
    # the A/A arm: the original's file once more, three sessions of its own; a variant of no table. The
    # head-to-head: fresh sessions in every group, the peer twice (its A/A control), graphsub once
    assert (made.count(BASELINE), made.count("onnxsim"), made.count(GRAPHSUB)) == (
        3 + 3, 3 + 2 * decide.GROUPS, 3 + decide.GROUPS)
    assert aa_name(BASELINE) not in rec["tools"] and len(rec["tools"][BASELINE]["timing"]["1"]["aa_rounds_ms"]) == 7
    assert "no tool beyond noise" in speedup_table([rec], 1)


def test_a_clearly_faster_variant_is_best_and_ahead_with_its_interval(tmp_path: Path) -> None:
    rec, _ = run(tmp_path, {BASELINE: 10.0, "onnxsim": 10.0, "onnxslim": 9.9, GRAPHSUB: 8.0})
    assert best_tool(rec, 1) == GRAPHSUB
    v = rec["tools"][GRAPHSUB]["timing"]["1"]["verdict"]
    assert v["faster"] and 1.2 < v["speedup"] < 1.3 and v["speedup_ci"][0] > 1.03 and 0.95 < v["aa_ratio"] < 1.05
    assert best_cell(rec, 1).startswith("graphsub 1.2") and "CI" in best_cell(rec, 1)
    h = rec["tools"][GRAPHSUB]["timing"]["1"]["head_to_head"]
    assert h["faster"] and h["ratio"] == h["speedup"] and 1.2 < h["ratio"] < 1.3 and h["speedup_ci"][0] > 1.0
    assert h["rounds"] == decide.GROUPS * decide.ROUNDS_PER_GROUP and h["sessions"] == decide.GROUPS
    assert len(h["original_ms"]) == len(h["candidate_ms"]) == len(h["aa_ms"]) == h["rounds"]
    assert versus(rec, 1)[0] == "ahead"  # type: ignore[index]
    row = {r["tool"]: r for r in json_rows([rec])}[GRAPHSUB]
    assert row["faster"]["1"] and row["speedup_ci"]["1"] and row["aa_ratio"]["1"]
    assert row["head_to_head"]["1"]["speedup_ci"] and row["head_to_head"]["1"]["aa_ratio"]


def test_a_faster_peer_puts_graphsub_behind(tmp_path: Path) -> None:
    rec, _ = run(tmp_path, {BASELINE: 10.0, "onnxsim": 8.0, GRAPHSUB: 10.0})
    assert best_tool(rec, 1) == "onnxsim"
    h = rec["tools"][GRAPHSUB]["timing"]["1"]["head_to_head"]
    assert h["peer"] == "onnxsim" and h["slower"] and not h["faster"]
    assert versus(rec, 1)[0] == "behind"  # type: ignore[index]


def test_graphsub_keeping_the_peers_file_is_a_tie_unmeasured(tmp_path: Path) -> None:
    """graphsub's output byte-identical to the peer's: one file, timed once; the head-to-head is a tie by
    construction, no sessions made for it."""
    rec, made = run(tmp_path, {BASELINE: 10.0, "onnxsim": 9.0})
    peer = rec["tools"]["onnxsim"]
    rec["tools"][GRAPHSUB] = {**peer, "same_as": "onnxsim"}
    paths = {t: Path(o["path"]) for t, o in rec["tools"].items() if t != GRAPHSUB}
    from graphsub.bench.suite.runner import head_to_head

    timers, made = noisy_timers({BASELINE: 10.0, "onnxsim": 9.0}, 0)
    head_to_head(rec["tools"], paths, {}, 1, budget_ms=1.0, timers=timers)
    h = rec["tools"][GRAPHSUB]["timing"]["1"]["head_to_head"]
    assert h["same_file"] and h["ratio"] == 1.0 and not h["faster"] and not made
    assert versus(rec, 1) == ("tie", "onnxsim", 1.0, "same file")
