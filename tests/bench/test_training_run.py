"""``graphsub training bench``'s cases (:mod:`graphsub.bench.training_run`): every "faster" is a verdict of
:mod:`graphsub.optimize.decide` -- its interval, A/A ratio, rounds and session groups are in the record -- with the
timing faked through :class:`~graphsub.optimize.timing.Timers` (sessions for onnxruntime, the step timer for
PyTorch), and the command's table reads those records."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from graphsub.bench.training_run import Case, ort_case, torch_case
from helpers import fake_step_timer, fake_timers, step_timers

VERDICT_KEYS = {"faster", "speedup_train", "speedup_ci", "aa_ratio", "rounds", "sessions", "reason", "confirmation"}


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # a case sets its own


def _case() -> Case:
    from graphsub.frontends.torch_export import export_module
    from graphsub.spec import ModelSpec

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 1),
                                 torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                 torch.nn.Linear(8, 5))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    labels = np.eye(5, dtype=np.float32)[rng.integers(0, 5, size=4)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "net.onnx")
        export_module(module, [torch.from_numpy(x)], path, training=True)
        graph = ModelSpec.parse(path).load()
    return Case("net", module, [x], labels, graph.renamed("net"), 4, 8)


@pytest.mark.parametrize("ms", [5.0, 10.0])
def test_torch_case_reports_the_verdict(ms: float) -> None:
    """The optimized module's units report ``ms`` against the module's 10 ms: chosen (and faster, with an interval
    above 1.0x) at 5 ms; a twin at 10 ms is neither."""
    tm = step_timers(fake_step_timer({"module": 10.0, "optimized": ms}, run=False))
    rec = torch_case(_case(), threads=1, budget_s=2, groups=4, rounds=1, timers=tm)
    assert set(rec) >= VERDICT_KEYS and rec["sessions"] == 4 and rec["rounds"] == 4
    assert rec["faster"] == (ms < 10.0) == (rec["chosen"] == "optimized"), rec["decision"]
    assert rec["confirmation"]["faster"] == rec["faster"] and rec["reason"] in rec["decision"]
    lo, hi = rec["speedup_ci"]
    assert lo <= rec["speedup_train"] <= hi and (lo > 1.0) == rec["faster"]
    assert rec["aa_ratio"] == pytest.approx(1.0, abs=0.05) and rec["step_ms_optimized"] == pytest.approx(ms, rel=0.05)
    assert rec["speedup_emitted_original"] == pytest.approx(1.0, abs=0.05) and rec["emitted_original"]["sessions"]


def test_ort_case_reports_the_verdict() -> None:
    """onnxruntime sessions faked: the original training graph takes 10 ms, any rewrite of it 8 ms -- a candidate is
    chosen, and the record's verdict on it says faster (1.25x, the A/A control at 1.0x)."""
    from graphsub.bench.training_run import joint
    from graphsub.frontends.onnx_export import export_graph

    case = _case()
    original = export_graph(joint(case)[0]).SerializeToString()
    rec = ort_case(case, threads=1, budget_s=4, groups=3, rounds=1,
                   timers=fake_timers(lambda m: 10.0 if m == original else 8.0))
    assert rec["verified"] and set(rec) >= VERDICT_KEYS and rec["sessions"] == 3 and rec["rounds"] == 3
    assert rec["chosen"] != "original" and rec["faster"], (rec["decision"], rec["reason"])
    assert rec["speedup_train"] == pytest.approx(1.25) and rec["aa_ratio"] == 1.0
    assert set(rec["rounds_ms"]) == {"original", "optimized", "original_again"} and rec["step_ms_optimized"] == 8.0


def test_bench_table_reads_the_records(capsys: pytest.CaptureFixture[str]) -> None:
    from graphsub.cli.training import _print

    rec: dict[str, Any] = {"model": "net", "batch": 4, "runtime": "pytorch", "threads": 1, "step_ms_original": 10.0,
                           "step_ms_optimized": 5.0, "speedup_train": 2.0, "speedup_ci": [1.9, 2.1],
                           "aa_ratio": 1.01, "faster": True, "sessions": 5, "rounds": 10, "verified": True,
                           "max_grad_abs_diff": 0.0, "applied": ["r"], "reason": "faster: 2.000x",
                           "speedup_emitted_original": 1.0}
    _print([rec, {**rec, "runtime": "onnxruntime", "speedup_ci": None, "faster": False, "reason": ""}])
    out = capsys.readouterr()
    assert "1.900-2.100x" in out.out and "faster: 2.000x" in out.err and "emission alone" in out.err


def test_grad_agreement_gives_a_verdict_by_the_one_tolerance_policy() -> None:
    """The training graph in onnxruntime against ``torch.autograd``: the reported numbers and a verdict; held to a
    tolerance float32 cannot meet (rtol 1e-7), the agreement is settled in float64 -- graphsub's training graph by
    its reference executor against the module's autograd in double precision."""
    from graphsub.bench.training_run import grad_agreement

    case = _case()
    rec = grad_agreement(case, threads=1)
    assert rec["verified"] and rec["verified_in"] == "float32" and rec["error"] == "" and rec["float64"] == ""
    assert rec["grads_compared"] == 6 and rec["max_grad_abs_diff"] < 1e-4
    tight = grad_agreement(case, threads=1, rtol=1e-7, atol=1e-9)
    assert tight["verified"] and tight["verified_in"] == "float64", tight
    assert tight["float64"].startswith("verified in float64: float32 evaluation order moves ")
    assert not grad_agreement(case, threads=1, rtol=1e-7, atol=1e-9, float64=False)["verified"]
