"""The suite's tables judge speedups against the noise: a tool is best, ahead of graphsub, or better or worse
than the peer it follows only when :mod:`graphsub.optimize.decide` says so on its rounds by session group (with the
original's A/A arm against ONNX Runtime alone); records from before that decision still render, marked, by the rule
of their time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.bench.suite.measure import aa_name, summarize
from graphsub.bench.suite.runner import BASELINE
from graphsub.bench.suite.table import (
    LEGACY_NOTE,
    beats,
    best_cell,
    best_tool,
    composition,
    gap,
    kernel_diff,
    versus,
    write_tables,
)
from graphsub.optimize import decide

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"

BASE = [10.0, 10.0, 10.0, 10.0, 10.0]
#: the original timed again in sessions of its own (the A/A arm): within noise of BASE
AA = [10.1, 9.9, 10.0, 10.0, 10.1]


def record(**tools: Any) -> dict[str, Any]:
    """A record at 1 thread as the suite writes it: every variant's rounds (``tools``: name -> rounds, or
    ``(rounds, extra fields)``) summarized against ``BASE`` with the A/A arm ``AA``, three sessions each (round ``r``
    on session ``r mod 3``)."""
    rounds = {BASELINE: BASE, **{t: v[0] if isinstance(v, tuple) else v for t, v in tools.items()},
              aa_name(BASELINE): AA}
    summary = summarize(rounds, BASELINE, sessions={t: 3 for t in rounds})
    out: dict[str, Any] = {}
    for t, s in summary.items():
        extra = tools[t][1] if isinstance(tools.get(t), tuple) else {}
        out[t] = {"status": "ok", "loads": True, "verified": True, "timing": {"1": s}, **extra}
    return {"model": "m", "path": "m.onnx", "threads": [1], "tools": out}


def legacy_variant(rounds: list[float], base: list[float], **extra: Any) -> dict[str, Any]:
    """A timing entry as the suite wrote it before the A/A decision: no sessions, no verdict."""
    ratios = sorted(b / r for r, b in zip(rounds, base, strict=True))
    timing = {"ms": sorted(rounds)[len(rounds) // 2], "speedup": ratios[len(ratios) // 2], "rounds_ms": rounds}
    return {"status": "ok", "loads": True, "verified": True, "timing": {"1": timing}, **extra}


def test_noise_is_not_a_win() -> None:
    noisy = [9.0, 10.5, 9.9, 10.2, 9.6]  # faster by 4% median, but in 3 of 5 rounds only
    clear = [9.0, 9.1, 8.9, 9.2, 9.0]
    rec = record(onnxsim=noisy)
    assert not rec["tools"]["onnxsim"]["timing"]["1"]["verdict"]["faster"]
    assert beats(rec["tools"]["onnxsim"], rec["tools"][BASELINE], 1) is None
    assert best_tool(rec, 1) == "ort" and best_cell(rec, 1) == "ort (no tool beyond noise)"
    rec = record(onnxsim=noisy, onnxslim=clear)
    v = rec["tools"]["onnxslim"]["timing"]["1"]["verdict"]
    assert v["faster"] and v["alpha"] == decide.ALPHA / 2  # two tools tested: each at alpha / 2
    assert v["speedup_ci"][0] > 1.0 and v["sessions"] == 3 and v["rounds"] == 5 and v["aa_ratio"] is not None
    assert beats(rec["tools"]["onnxslim"], rec["tools"][BASELINE], 1) is not None
    assert best_tool(rec, 1) == "onnxslim" and best_cell(rec, 1).startswith("onnxslim 1.1")
    assert "CI" in best_cell(rec, 1) and "A/A" in best_cell(rec, 1)
    assert aa_name(BASELINE) not in rec["tools"]  # the A/A arm is no tool: its rounds are the baseline's
    assert rec["tools"][BASELINE]["timing"]["1"]["aa_rounds_ms"] == AA


def test_a_peer_is_ahead_of_graphsub_only_beyond_the_noise() -> None:
    assert gap(record(graphsub=BASE, onnxsim=[9.9, 9.8, 10.0, 9.9, 9.8]), 1) is None  # 1.01x
    name, theirs, mine = gap(record(graphsub=BASE, onnxsim=[8.0, 8.1, 8.0, 7.9, 8.0]), 1) or ("", 0, 0)
    assert name == "onnxsim" and theirs > 1.2 and mine == 1.0


def test_composition_reports_graphsub_after_a_peer_against_that_peer() -> None:
    rec = record(onnxsim=[9.0] * 5, **{"graphsub+onnxsim": [9.6] * 5,
                                       "graphsub+onnxslim": ([9.6] * 5, {"same_as": "onnxslim"}),
                                       "onnxslim": [9.6] * 5})
    lines = composition([rec], [1])
    assert len(lines) == 1 and "SLOWER than onnxsim alone by 1.07x" in lines[0]  # same_as the peer: not listed
    rec = record(onnxsim=[9.0] * 5, **{"graphsub+onnxsim": [8.0] * 5})
    assert "faster than onnxsim alone by 1.12x" in composition([rec], [1])[0]
    rec = record(onnxsim=[9.0] * 5, **{"graphsub+onnxsim": [8.9, 9.1, 9.0, 8.9, 9.1]})
    assert "within noise of onnxsim alone" in composition([rec], [1])[0]


def test_gaps_are_explained_by_the_ops_after_ort(tmp_path: Path) -> None:
    peer = {"ops": 38, "op_histogram": {"com.microsoft:Attention": 4, "MatMul": 12}}
    ours = {"ops": 150, "op_histogram": {"MatMul": 60, "Reshape": 64, "Softmax": 4, "Add": 22}}
    line = kernel_diff(peer, ours)
    assert line.startswith("Attention +4, Reshape -64, MatMul -48") and line.endswith("ops after ORT 38 vs 150")
    rec = record(graphsub=(BASE, ours), onnxscript=([8.0, 8.1, 7.9, 8.0, 8.0], peer))
    md = Path(write_tables([rec], tmp_path, "t", plots=False)["markdown"]).read_text()
    assert "m at 1 thread(s): side by side onnxscript 1.25x vs graphsub 1.00x -- Attention +4" in md
    assert "| onnxscript 1.25x (" in md and "| behind onnxscript: 1.00x vs 1.25x |" in md
    assert LEGACY_NOTE not in md.split("\n## ", 1)[1]  # measured with verdicts: no row is marked


def test_what_graphsub_kept_and_family_means(tmp_path: Path) -> None:
    from graphsub.bench.suite.table import choices, family_geomeans, rule_family, time_to_result

    assert [rule_family(r) for r in ("ortsp_ln_sum", "ort_gelu", "alg_add_comm", "mf_merge_matmuls")] == [
        "ort-spelling", "ort", "algebra", "metaflow"]
    kept = {"name": "onnxscript+spelling", "speedup": 1.2, "rules": ["ortsp_ln_sum"]}
    ours = ([8.0] * 5, {"chosen": "onnxscript+spelling", "chosen_base": "onnxscript", "threads": 2, "seconds": 61.5,
                        "candidates": [kept, {"name": "search", "speedup": 1.0, "rules": []}]})
    recs = [record(graphsub=ours) | {"family": "transformer"},
            record(graphsub=(BASE, {"status": "failed", "verified": False})) | {"family": "cnn"}]
    lines = choices(recs)
    assert lines[2] == ("| m | onnxscript+spelling | onnxscript | ort-spelling (1 rules) | 1.200x | 2 | 2 | 61.5 s |")
    assert time_to_result(recs) == ["- 1 runs of graphsub optimize: longest 61.5 s (m, 2 thread(s)), median 61.5 s; "
                                    "over 90 s: 0"]
    conf = decide.verdict(decide.Rounds((10.0,) * 4, (8.0, 8.1, 7.9, 8.0), (10.1, 9.9, 10.0, 10.0), (0, 1, 2, 3)),
                          min_speedup=1.03)
    kept.update(confirm_speedup=conf.speedup, confirmation=conf.to_dict())  # as graphsub's portfolio now records it
    assert " | 1.250x (90% CI 1.2" in choices(recs)[2] and "A/A 1.00x) | 2 | 2 | 61.5 s |" in choices(recs)[2]
    means = family_geomeans(recs, 1)
    assert "- transformer (1 models), graphsub: 1.250x" in means
    assert "- cnn (1 models), graphsub: 1.000x" in means  # a failed run counts as keeping the original


def test_a_record_is_done_only_for_its_provider() -> None:
    """Resuming with another provider runs the model again: a CPU record says nothing of CUDA."""
    from graphsub.bench.suite.runner import _done

    rec = {"tools": {"ort": {}, "graphsub": {}}, "threads": [1]}
    assert _done(rec, ["ort", "graphsub"], [1]) and not _done(rec, ["ort", "graphsub"], [1], "cuda")
    assert _done({**rec, "provider": "cuda"}, ["ort"], [1], "cuda")


def _h2h(peer_ms: list[float], graphsub_ms: list[float], aa_ms: list[float]) -> dict[str, Any]:
    """A head-to-head as :func:`graphsub.bench.suite.runner.head_to_head` stores it: the verdict on the peer (the
    original) against graphsub (the candidate), two rounds in each of five session groups."""
    m = decide.Rounds(tuple(peer_ms), tuple(graphsub_ms), tuple(aa_ms), tuple(r // 2 for r in range(len(peer_ms))))
    v = decide.verdict(m, min_speedup=1.03)
    return {"peer": "onnxslim", "same_file": False, "ratio": v.speedup, **v.to_dict()}


def test_a_side_by_side_gap_the_head_to_head_does_not_confirm_is_a_tie() -> None:
    """Side by side a peer is 1.05x ahead in every round; head-to-head they tie: the column says tie, the list of
    gaps still shows the side-by-side numbers beside the head-to-head."""
    from graphsub.bench.suite.table import behind, speedup_table, versus_counts

    peer = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0]
    rec = {"model": "m", "family": "transformer", "tools": record(onnxslim=[9.5] * 5, graphsub=[10.0] * 5)["tools"]}
    rec["tools"]["graphsub"]["timing"]["1"]["head_to_head"] = _h2h(peer, [0.99, 1.0, 1.01, 1.0, 0.99, 1.01, 1.0,
                                                                         1.0, 1.0, 0.99], peer[::-1])
    row = speedup_table([rec], 1).splitlines()[-1]
    assert "| tie with onnxslim: 1.00x head-to-head (90% CI " in row and row.endswith(", A/A 1.00x) |"), row
    [line] = behind([rec], [1])
    assert "side by side onnxslim 1.05x vs graphsub 1.00x; head-to-head: tie with onnxslim" in line
    assert versus_counts([rec], 1) == ["- transformer: ahead on 0, tie on 1, behind on 0 (of 1 models with a "
                                       "head-to-head)"]
    slower = [1.05, 1.06, 1.04, 1.05, 1.07, 1.03, 1.05, 1.06, 1.04, 1.05]  # now the head-to-head confirms it
    rec["tools"]["graphsub"]["timing"]["1"]["head_to_head"] = _h2h(peer, slower, peer[::-1])
    assert "behind onnxslim: 0.95x head-to-head (90% CI" in speedup_table([rec], 1)
    assert versus(rec, 1)[0] == "behind"  # type: ignore[index]
    faster = [0.9 * x for x in peer]
    rec["tools"]["graphsub"]["timing"]["1"]["head_to_head"] = _h2h(peer, faster, peer[::-1])
    assert versus(rec, 1)[:2] == ("ahead", "onnxslim")  # type: ignore[index]


def test_records_from_before_the_a_a_decision_render_marked(tmp_path: Path) -> None:
    """A record without verdicts (written before the A/A decision) renders: the ratio as before, classified by the
    legacy rule of its time, every such claim marked as having no interval."""
    from graphsub.bench.suite.table import behind, legacy_rule, speedup_table

    assert legacy_rule(1.05, 8 / 9) == "faster" and legacy_rule(1.05, 5 / 9) == "tie"

    def ok(rounds: list[float], **timing: object) -> dict[str, object]:
        return {"status": "ok", "loads": True, "verified": True, "ops": 5, "fused_kernels": {},
                "timing": {"2": {"speedup": 2.0 / rounds[0], "rounds_ms": rounds, **timing}}}

    h2h = {"peer": "onnxslim", "same_file": False, "ratio": 1.01, "faster_rounds": 5 / 9,
           "rounds_graphsub_ms": [1.0] * 9, "rounds_peer_ms": [1.0] * 9}
    rec = {"model": "m", "family": "transformer", "tools": {
        BASELINE: ok([2.0] * 5), "onnxslim": ok([1.0] * 5), "graphsub": ok([1.05] * 5, head_to_head=h2h)}}
    row = speedup_table([rec], 2).splitlines()[-1]
    assert row.endswith(f"| onnxslim ({LEGACY_NOTE}) | tie with onnxslim: 1.01x head-to-head (5/9 rounds; "
                        "no interval) |"), row
    assert "side by side onnxslim 2.00x vs graphsub 1.90x" in behind([rec], [2])[0]
    h2h.update(ratio=0.95, faster_rounds=1 / 9)
    assert "behind onnxslim: 0.95x head-to-head (1/9 rounds; no interval)" in speedup_table([rec], 2)
    legacy = {"model": "m", "path": "m.onnx", "threads": [1], "tools": {
        BASELINE: legacy_variant(BASE, BASE), "onnxsim": legacy_variant([9.0, 10.5, 9.9, 10.2, 9.6], BASE),
        "onnxslim": legacy_variant([9.0, 9.1, 8.9, 9.2, 9.0], BASE)}}
    assert best_tool(legacy, 1) == "onnxslim" and best_cell(legacy, 1) == f"onnxslim ({LEGACY_NOTE})"


def test_the_committed_suite_results_still_render(tmp_path: Path) -> None:
    """The committed results (no verdicts in them) render as they were published: the same head-to-head counts and
    best tools, marked as measured without an interval."""
    from graphsub.bench.records import load_records

    recs = load_records(RESULTS / "suite.jsonl")
    assert recs and all("verdict" not in t for r in recs for o in r["tools"].values()
                        for t in o.get("timing", {}).values())
    md = Path(write_tables(recs, tmp_path, "suite", plots=False)["markdown"]).read_text()
    published = (RESULTS / "suite.md").read_text()
    counts = [ln for ln in md.splitlines() if ln.startswith("- ") and "models with a head-to-head" in ln]
    assert counts and counts == [ln for ln in published.splitlines() if "models with a head-to-head" in ln]
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and "head-to-head" in ln]
    assert rows and all(LEGACY_NOTE in ln for ln in rows)
    strip = md.replace(f" ({LEGACY_NOTE})", "").replace(f"; {LEGACY_NOTE}", "").replace("; no interval)", ")")
    assert set(ln for ln in strip.splitlines() if ln.startswith("| ")) <= set(published.splitlines())


def test_the_false_positive_rate_of_a_twin_is_bounded() -> None:
    """A variant that runs as the original (three sessions of its own, each a few percent off for its life, as
    onnxruntime sessions are) is called faster at most ALPHA of the time -- because the rounds are grouped by the
    session they ran on: taking each round as independent evidence (wrong) would call many more twins faster."""
    rng = np.random.default_rng(0)

    def arm(rounds: int = 7, sessions: int = 3) -> list[float]:
        effect = rng.normal(0.0, 0.04, sessions)  # each session's lasting luck
        return [float(10.0 * np.exp(effect[r % sessions] + rng.normal(0.0, 0.01))) for r in range(rounds)]

    trials, found, wrong = 400, 0, 0
    for _ in range(trials):
        a, b, c = arm(), arm(), arm()
        v = summarize({BASELINE: a, "twin": b, aa_name(BASELINE): c}, BASELINE,
                      sessions={BASELINE: 3, "twin": 3, aa_name(BASELINE): 3})["twin"]["verdict"]
        found += v["faster"]
        per_round = decide.verdict(decide.Rounds(tuple(a), tuple(b), tuple(c), tuple(range(7))), min_speedup=1.03)
        wrong += per_round.faster
    assert found <= decide.ALPHA * trials, found
    assert wrong > 2 * found, (wrong, found)  # the grouping by session is what bounds it


def test_json_rows_carry_the_verdicts() -> None:
    from graphsub.bench.suite.table import json_rows

    rows = {r["tool"]: r for r in json_rows([record(onnxslim=[9.0, 9.1, 8.9, 9.2, 9.0])])}
    assert rows["onnxslim"]["faster"]["1"] and rows["onnxslim"]["speedup_ci"]["1"][0] > 1.0
    assert rows["onnxslim"]["aa_ratio"]["1"] is not None and rows["onnxslim"]["verdict"]["1"]["sessions"] == 3
    assert rows[BASELINE]["verdict"]["1"] is None and aa_name(BASELINE) not in rows
    json.dumps(rows)  # plain data
