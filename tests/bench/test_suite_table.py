"""The suite's tables judge speedups against the noise: a tool is best, ahead of graphsub, or better or worse
than the peer it follows only when it is faster in most paired rounds by a clear median ratio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphsub.bench.suite.runner import BASELINE
from graphsub.bench.suite.table import beats, best_tool, composition, gap, kernel_diff, write_tables


def variant(rounds: list[float], base: list[float], **extra: Any) -> dict[str, Any]:
    ratios = sorted(b / r for r, b in zip(rounds, base, strict=True))
    timing = {"ms": sorted(rounds)[len(rounds) // 2], "speedup": ratios[len(ratios) // 2], "rounds_ms": rounds}
    return {"status": "ok", "loads": True, "verified": True, "timing": {"1": timing}, **extra}


BASE = [10.0, 10.0, 10.0, 10.0, 10.0]


def record(**tools: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "path": "m.onnx", "threads": [1], "tools": {"ort": variant(BASE, BASE), **tools}}


def test_noise_is_not_a_win() -> None:
    noisy = variant([9.0, 10.5, 9.9, 10.2, 9.6], BASE)  # faster by 4% median, but in 3 of 5 rounds only
    assert beats(noisy, record()["tools"]["ort"], 1) is None
    assert best_tool(record(onnxsim=noisy), 1) == "ort"
    clear = variant([9.0, 9.1, 8.9, 9.2, 9.0], BASE)
    assert beats(clear, record()["tools"]["ort"], 1) is not None
    assert best_tool(record(onnxsim=noisy, onnxslim=clear), 1) == "onnxslim"


def test_a_peer_is_ahead_of_graphsub_only_beyond_the_noise() -> None:
    ours = variant(BASE, BASE)
    assert gap(record(graphsub=ours, onnxsim=variant([9.9, 9.8, 10.0, 9.9, 9.8], BASE)), 1) is None  # 1.01x
    name, theirs, mine = gap(record(graphsub=ours, onnxsim=variant([8.0, 8.1, 8.0, 7.9, 8.0], BASE)), 1) or ("", 0, 0)
    assert name == "onnxsim" and theirs > 1.2 and mine == 1.0


def test_composition_reports_graphsub_after_a_peer_against_that_peer() -> None:
    peer = variant([9.0] * 5, BASE)
    rec = record(onnxsim=peer, **{"graphsub+onnxsim": variant([9.6] * 5, BASE),
                                  "graphsub+onnxslim": variant([9.6] * 5, BASE, same_as="onnxslim"),
                                  "onnxslim": variant([9.6] * 5, BASE)})
    lines = composition([rec], [1])
    assert len(lines) == 1 and "SLOWER than onnxsim alone by 1.07x" in lines[0]  # same_as the peer: not listed
    rec["tools"]["graphsub+onnxsim"] = variant([8.0] * 5, BASE)
    assert "faster than onnxsim alone by 1.12x" in composition([rec], [1])[0]


def test_gaps_are_explained_by_the_ops_after_ort(tmp_path: Path) -> None:
    peer = {"ops": 38, "op_histogram": {"com.microsoft:Attention": 4, "MatMul": 12}}
    ours = {"ops": 150, "op_histogram": {"MatMul": 60, "Reshape": 64, "Softmax": 4, "Add": 22}}
    line = kernel_diff(peer, ours)
    assert line.startswith("Attention +4, Reshape -64, MatMul -48") and line.endswith("ops after ORT 38 vs 150")
    rec = record(graphsub=variant(BASE, BASE, **ours), onnxscript=variant([8.0] * 5, BASE, **peer))
    md = Path(write_tables([rec], tmp_path, "t", plots=False)["markdown"]).read_text()
    assert "m at 1 thread(s): side by side onnxscript 1.25x vs graphsub 1.00x -- Attention +4" in md
    assert "| onnxscript | behind onnxscript: 1.00x vs 1.25x |" in md


def test_what_graphsub_kept_and_family_means(tmp_path: Path) -> None:
    from graphsub.bench.suite.table import choices, family_geomeans, rule_family, time_to_result

    assert [rule_family(r) for r in ("ortsp_ln_sum", "ort_gelu", "alg_add_comm", "mf_merge_matmuls")] == [
        "ort-spelling", "ort", "algebra", "metaflow"]
    kept = {"name": "onnxscript+spelling", "speedup": 1.2, "rules": ["ortsp_ln_sum"]}
    ours = variant([8.0] * 5, BASE, chosen="onnxscript+spelling", chosen_base="onnxscript", threads=2, seconds=61.5,
                   candidates=[kept, {"name": "search", "speedup": 1.0, "rules": []}])
    recs = [record(graphsub=ours) | {"family": "transformer"},
            record(graphsub=variant(BASE, BASE) | {"status": "failed", "verified": False}) | {"family": "cnn"}]
    lines = choices(recs)
    assert lines[2] == ("| m | onnxscript+spelling | onnxscript | ort-spelling (1 rules) | 1.200x | 2 | 2 | 61.5 s |")
    assert time_to_result(recs) == ["- 1 runs of graphsub optimize: longest 61.5 s (m, 2 thread(s)), median 61.5 s; "
                                    "over 90 s: 0"]
    means = family_geomeans(recs, 1)
    assert "- transformer (1 models), graphsub: 1.250x" in means
    assert "- cnn (1 models), graphsub: 1.000x" in means  # a failed run counts as keeping the original


def test_a_record_is_done_only_for_its_provider() -> None:
    """Resuming with another provider runs the model again: a CPU record says nothing of CUDA."""
    from graphsub.bench.suite.runner import _done

    rec = {"tools": {"ort": {}, "graphsub": {}}, "threads": [1]}
    assert _done(rec, ["ort", "graphsub"], [1]) and not _done(rec, ["ort", "graphsub"], [1], "cuda")
    assert _done({**rec, "provider": "cuda"}, ["ort"], [1], "cuda")


def test_a_side_by_side_gap_the_head_to_head_does_not_confirm_is_a_tie() -> None:
    """Side by side a peer is 1.05x ahead in every round; head-to-head they tie: the column says tie, the list of
    gaps still shows the side-by-side numbers beside the head-to-head."""
    from graphsub.bench.suite.table import behind, speedup_table, versus_counts

    def ok(rounds: list[float], **timing: object) -> dict[str, object]:
        return {"status": "ok", "loads": True, "verified": True, "ops": 5, "fused_kernels": {},
                "timing": {"2": {"speedup": 2.0 / rounds[0], "rounds_ms": rounds, **timing}}}

    h2h = {"peer": "onnxslim", "same_file": False, "ratio": 1.01, "faster_rounds": 5 / 9,
           "rounds_graphsub_ms": [1.0] * 9, "rounds_peer_ms": [1.0] * 9}
    rec = {"model": "m", "family": "transformer", "tools": {
        BASELINE: ok([2.0] * 5), "onnxslim": ok([1.0] * 5), "graphsub": ok([1.05] * 5, head_to_head=h2h)}}
    row = speedup_table([rec], 2).splitlines()[-1]
    assert row.endswith("| tie with onnxslim: 1.01x head-to-head (5/9 rounds) |"), row
    [line] = behind([rec], [2])
    assert "side by side onnxslim 2.00x vs graphsub 1.90x; head-to-head: tie with onnxslim" in line
    assert versus_counts([rec], 2) == ["- transformer: ahead on 0, tie on 1, behind on 0 (of 1 models with a "
                                       "head-to-head)"]
    h2h.update(ratio=0.95, faster_rounds=1 / 9)  # now the head-to-head confirms it
    assert "behind onnxslim: 0.95x head-to-head (1/9 rounds)" in speedup_table([rec], 2)
