"""``graphsub dynamic bench --json`` on tiny synthetic sizes (issue 10)."""

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
    assert res["speedup_full_step"] > 0 and res["best_mode"] != "eager"
    assert res["loss_max_abs_diff"] < 1e-5
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
    assert res["best_mode"] == "reuse+batch" and res["loss_max_abs_diff"] < 1e-5
    r = CliRunner().invoke(app, ["dynamic", "bench", "--modes", "eager,bogus", "--json"])
    assert r.exit_code == 2 and "bogus" in r.stdout


@pytest.mark.slow
def test_pattern_backends_agree_and_time() -> None:
    from graphsub.bench.dynamic import bench_backends

    rows = bench_backends(depth=3, hidden=8, emb=12, reps=3)
    assert {r["backend"] for r in rows} == {"python", "fx", "inductor"}


def test_bench_vocabulary_choice() -> None:
    """``--vocab train`` gives the model the whole SST train split's words (a larger embedding), ``batches`` only
    the benched trees'; anything else is a usage error."""
    from graphsub.bench.dynamic import BenchConfig, load_workload
    from graphsub.dynamic.workloads.sst import find_sst_root

    root = find_sst_root()
    if root is None or not (root / "train.txt").is_file():
        pytest.skip("SST data not found (../shared/data/sst): the vocabulary choice needs the real train split")
    small = load_workload(BenchConfig(batches=1, batch_size=2, data="sst"))
    full = load_workload(BenchConfig(batches=1, batch_size=2, data="sst", vocab="train"))
    assert [repr(t) for t in small.trees] == [repr(t) for t in full.trees]
    assert len(full.vocab) > 10 * len(small.vocab)
    with pytest.raises(ValueError, match="vocabulary"):
        load_workload(BenchConfig(batches=1, batch_size=2, data="sst", vocab="all"))
    r = CliRunner().invoke(app, ["dynamic", "bench", "--vocab", "all", "--json"])
    assert r.exit_code == 2 and "vocabulary" in r.stdout


def test_run_modes_takes_turns_in_slices_and_times_steps_after_steps_of_the_same_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process modes take turns in slices of batches, the order rotating from slice to slice, and each mode's
    first step of a slice is left out of its medians; each prefetch mode runs all batches in a phase of its own after
    each round, its first step left out too."""
    from graphsub.bench import dynamic as bench

    calls: list[tuple[str, int]] = []

    class FakeRunner(bench.Runner):
        def __init__(self, mode: str, cfg: object, vocab: object) -> None:  # no model: only the bookkeeping
            self.mode = mode
            self.times = {s: [] for s in bench.STAGES}
            self.nodes = []
            self.cold = set()

        def step(self, raw: list[int]) -> float:
            calls.append((self.mode, raw[0]))
            for s, v in self.times.items():
                v.append(float(len(v) + 1) if s != "full" else 100.0 * raw[0] + len(v))
            return 0.0

    def fake_prefetch(r: FakeRunner, cfg: object, batches: list[list[int]]) -> None:
        for b in batches:
            r.step(b)

    monkeypatch.setattr(bench, "Runner", FakeRunner)
    monkeypatch.setattr(bench, "run_prefetch", fake_prefetch)
    cfg = bench.BenchConfig(modes=("eager", "module+batch", "prefetch", "reuse+batch"))
    work = bench.Workload(trees=[], vocab=None, data="synthetic", batches=[[0], [1], [2]])  # type: ignore[arg-type]
    probes: list[float] = []
    runners = bench.run_modes(cfg, work, rounds=2, slice_size=2, probes=probes)
    assert len(probes) == 2 * (2 + 1) and min(probes) > 0  # per round: two slices, one prefetch phase
    assert list(runners) == ["eager", "module+batch", "prefetch", "reuse+batch"]
    first_round = [("eager", 0), ("eager", 1), ("module+batch", 0), ("module+batch", 1), ("reuse+batch", 0),
                   ("reuse+batch", 1),
                   ("module+batch", 2), ("reuse+batch", 2), ("eager", 2),
                   ("prefetch", 0), ("prefetch", 1), ("prefetch", 2)]
    second_round = [("reuse+batch", 0), ("reuse+batch", 1), ("eager", 0), ("eager", 1), ("module+batch", 0),
                    ("module+batch", 1),
                    ("eager", 2), ("module+batch", 2), ("reuse+batch", 2),
                    ("prefetch", 0), ("prefetch", 1), ("prefetch", 2)]
    assert calls == first_round + second_round
    # every mode's step list: b0 b1 b2 b0 b1 b2; the first of each slice (or prefetch phase) is left out
    assert runners["eager"].cold == {0, 2, 3, 5}
    assert runners["prefetch"].cold == {0, 3}
    eager = runners["eager"]
    assert eager._kept(eager.times["full"], 0) == [101.0, 104.0]  # b1 of each round
    assert eager._kept(eager.times["full"], 2) == [104.0]  # after the warm-up steps
    assert eager._kept([1.0, 2.0], 5) == [1.0, 2.0]  # nothing left: every step rather than none
