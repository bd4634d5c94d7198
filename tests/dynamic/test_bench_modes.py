"""The dynamic benchmark's library side (graphsub.bench.dynamic): the pattern backends, the vocabulary choice, and how
the modes take turns (``graphsub dynamic bench`` itself: tests/cli/test_cli_dynamic_bench.py)."""

from __future__ import annotations

import pytest


# slow: compiles the pattern with torch.compile (inductor) on top of the Python and fx backends; the only test of
# bench_backends, so it runs in `make test-all` (-m slow)
@pytest.mark.slow
def test_pattern_backends_agree_and_time() -> None:
    from graphsub.bench.dynamic import bench_backends

    rows = bench_backends(depth=3, hidden=8, emb=12, reps=3)
    assert {r["backend"] for r in rows} == {"python", "fx", "inductor"}


def test_bench_vocabulary_choice() -> None:
    """``--vocab train`` gives the model the whole SST train split's words (a larger embedding), ``batches`` only
    the benched trees'; anything else is an error (a usage error at the command line:
    tests/cli/test_cli_dynamic_bench.py)."""
    from graphsub.bench.dynamic import BenchConfig, load_workload
    from graphsub.dynamic.workloads.sst import find_sst_root

    root = find_sst_root()
    if root is None or not (root / "train.txt").is_file():
        pytest.skip("SST data not found ($GRAPHSUB_SST): the vocabulary choice needs the real train split")
    small = load_workload(BenchConfig(batches=1, batch_size=2, data="sst"))
    full = load_workload(BenchConfig(batches=1, batch_size=2, data="sst", vocab="train"))
    assert [repr(t) for t in small.trees] == [repr(t) for t in full.trees]
    assert len(full.vocab) > 10 * len(small.vocab)
    with pytest.raises(ValueError, match="vocabulary"):
        load_workload(BenchConfig(batches=1, batch_size=2, data="sst", vocab="all"))


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
