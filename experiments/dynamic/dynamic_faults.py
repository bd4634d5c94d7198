"""Minor page faults per stage of a training step: eager PyTorch and module+batch on the SST Tree-LSTM (batch 20,
1 thread, for-loop Adagrad), counted with ``getrusage`` around each stage of each step.

    .venv/bin/python experiments/dynamic/dynamic_faults.py

Stages: ``record`` (the lazy trace; eager: its forward), ``plan_forward`` (the plan built and run; eager: none),
``backward`` and ``step`` (the optimizer).  Medians over two rounds of 20 batches, the first 3 steps left out.
Writes ``experiments/results/dynamic_faults.json``.  Counts, not times: it need not run alone.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import statistics
from pathlib import Path
from typing import Any

import torch

from graphsub.bench.dynamic import BenchConfig, Runner, load_workload, loss_fn
from graphsub.dynamic import build, lazy
from graphsub.dynamic.workloads.sst import encode_tree

OUT = Path(__file__).resolve().parents[1] / "results"
STAGES = ("record", "plan_forward", "backward", "step")


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    torch.set_num_threads(1)
    cfg = BenchConfig(batches=20, data="sst", workload="treelstm", plan_cache=0)
    work = load_workload(cfg)
    loss = loss_fn(cfg)
    result: dict[str, Any] = {"command": "experiments/dynamic/dynamic_faults.py", "workload": "treelstm",
                              "batch_size": 20, "data": work.data, "threads": 1,
                              "loadavg": [round(os.getloadavg()[0], 2)]}
    for mode in ("module+batch", "eager"):
        r = Runner(mode, cfg, work.vocab)
        rows: list[list[int]] = []
        for _ in range(2):
            for raw in work.batches:
                torch.manual_seed(cfg.seed + 1)
                batch = [encode_tree(t, work.vocab) for t in raw]
                r.opt.zero_grad()
                marks = [_faults()]
                if mode == "eager":
                    out = loss(r.model, batch)
                    marks += [_faults(), _faults()]
                else:
                    with lazy(r.engine, examples=len(batch)):
                        lazy_out = loss(r.model, batch)
                    marks.append(_faults())
                    out = build(lazy_out)
                    marks.append(_faults())
                out.backward()
                marks.append(_faults())
                r.opt.step()
                marks.append(_faults())
                rows.append([b - a for a, b in itertools.pairwise(marks)])
        kept = rows[3:]
        result[mode] = {s: statistics.median(row[k] for row in kept) for k, s in enumerate(STAGES)}
        print(mode, result[mode], flush=True)
    result["loadavg"].append(round(os.getloadavg()[0], 2))
    OUT.mkdir(exist_ok=True)
    (OUT / "dynamic_faults.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
