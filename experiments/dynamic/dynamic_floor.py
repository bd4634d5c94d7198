"""Where an in-process captured training step's time goes, and what it could be with no tracer and no Python
overhead at all (issue 24: why the Tree-LSTM's 12x in-process target is missed).

    .venv/bin/python experiments/dynamic/dynamic_floor.py --batches 20

SST train, batch 20, 1 torch thread, the bench's model and optimizer (``graphsub.bench.dynamic``).  Per batch,
interleaved: one eager step, one ``module+batch`` step split by stage, and the *recording floor*: the model's own
Python on the batch inside the same capturing ``lazy()`` context, with every captured module call answered from a
memo at no cost (the user's tree walk, ``torch.tensor`` for the word ids and the embedding's ``.device`` through
the lazy mode, the router's pass; what no tracer can avoid).  Then, profiled with ``torch.profiler`` over the same
batches, the self time of every aten op of forward + backward (their sum is the work the plan asks of PyTorch; the
GEMMs are ``aten::mm`` / ``aten::addmm``).  The *floor step* adds the preprocessing, the recording floor, that op
time and the optimizer step: the step of a tracer and executor with zero overhead of their own.

Writes ``experiments/results/dynamic_floor.json``.  Run it alone: it is a timing benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from graphsub.bench.dynamic import BenchConfig, Runner, load_workload, loss_fn
from graphsub.dynamic import build, capture, lazy
from graphsub.dynamic.workloads.sst import encode_tree

OUT = Path(__file__).resolve().parents[1] / "results"


def _memo_router(model: Any) -> Any:
    """A stand-in for capture's module router: a captured module's call is recorded once and then answered from a
    memo (the top-level model, which capture refuses, runs its own Python as always)."""
    real = capture._module_call
    memo: dict[int, Any] = {}

    def router(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self is model:
            return real(self, *args, **kwargs)
        got = memo.get(id(self))
        if got is None:
            got = memo[id(self)] = real(self, *args, **kwargs)
        return got

    return router


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--workload", default="treelstm")
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = BenchConfig(batches=args.batches, data="sst", workload=args.workload, plan_cache=0)
    work = load_workload(cfg)
    eager, cap = Runner("eager", cfg, work.vocab), Runner("module+batch", cfg, work.vocab)
    loss = loss_fn(cfg)
    floor: list[float] = []
    real_router = capture._module_call
    for k, raw in enumerate(work.batches * 2):  # two rounds, each batch: eager, captured, recording floor
        eager.step(raw)
        cap.step(raw)
        batch = [encode_tree(t, work.vocab) for t in raw]
        capture._module_call = _memo_router(cap.model)  # read when lazy() opens
        try:
            t0 = time.perf_counter()
            with lazy(cap.engine, examples=len(batch)):
                loss(cap.model, batch)
            if k >= args.warmup:
                floor.append(time.perf_counter() - t0)
        finally:  # (the swap outlives a capturing context: put torch's own back, the next trace swaps in its own)
            capture._module_call = real_router
            torch.nn.Module.__call__ = capture._ORIG_CALL  # type: ignore[method-assign]
    em, cm = eager.medians(args.warmup), cap.medians(args.warmup)
    # forward + backward as PyTorch runs them: aten self time, profiled over the batches once more
    lazies = []
    for raw in work.batches:
        with lazy(cap.engine, examples=len(raw)):
            lazies.append(loss(cap.model, [encode_tree(t, work.vocab) for t in raw]))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for ll in lazies:
            build(ll).backward()
    n = len(lazies)
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    op_ms = sum(e.self_cpu_time_total for e in events) / n / 1000
    gemm_ms = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm", "aten::bmm",
                                                                     "aten::addmv", "aten::mv")) / n / 1000
    floor_ms = 1000 * statistics.median(floor)
    best = cm["preprocess"] + floor_ms + op_ms + cm["step"]
    res = {
        "command": f"experiments/dynamic/dynamic_floor.py --batches {args.batches} --workload {args.workload}",
        "workload": args.workload, "batches": args.batches, "batch_size": cfg.batch_size, "threads": 1,
        "loadavg": list(os.getloadavg()[:2]),
        "eager_ms": em,
        "module_batch_ms": cm,
        "recording_floor_ms": floor_ms,
        "fwd_bwd_aten_self_ms": op_ms,
        "fwd_bwd_gemm_ms": gemm_ms,
        "floor_step_ms": best,
        "speedup_now": em["full"] / cm["full"],
        "speedup_floor": em["full"] / best,
        "overhead_ms": {"tracer (recording - floor)": cm["trace"] - floor_ms, "planning": cm["optimize"],
                        "executor (forward + backward - aten self time)": cm["forward"] + cm["backward"] - op_ms},
    }
    OUT.mkdir(exist_ok=True)
    (OUT / f"dynamic_floor_{args.workload}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k not in ("eager_ms", "module_batch_ms")}, indent=1))


if __name__ == "__main__":
    main()
