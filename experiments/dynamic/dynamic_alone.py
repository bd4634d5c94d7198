"""Each mode alone in its own process: eager PyTorch, module+batch and module+prefetch on the Tree-LSTM, as a user
runs one of them (issue 24's targets, a third view beside the Table 6.4 rerun and the optimizer runs).

    .venv/bin/python experiments/dynamic/dynamic_alone.py --repeats 5

In ``graphsub dynamic bench`` the modes share a process and take turns, which cancels this VM's drift but lets each
mode inherit the heap of the others: eager's step (400 dense 3 MB embedding gradients per backward) takes 554 ms in
the all-mode table's process and 396-541 ms beside the module modes only.  Here each repeat runs three processes
back to back, one per mode (``graphsub dynamic bench --modes <mode>``: SST, batch 20, 1 torch thread, 20 batches, two
rounds, the first 3 steps left out), the order rotating from one repeat to the next; the speedup of a repeat is
eager's full step over the mode's, both from that repeat.  Drift between the processes of a repeat is not cancelled,
so the spread is wide; the median over repeats is the number.  ``--loop-optimizer`` (default) or
``--fused-optimizer`` in every process.  Writes ``experiments/results/dynamic_alone.json`` (or ``--name``).  Run it
alone on the machine: it is a timing benchmark.

Each process is started by ``run_bench`` of ``dynamic_optimizers.py`` in this folder (imported from there: run
this file as a script, so that its folder is on ``sys.path``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

# the same one-process runner as the optimizer runs: experiments/dynamic/dynamic_optimizers.py (this folder)
from dynamic_optimizers import run_bench

OUT = Path(__file__).resolve().parents[1] / "results"
MODES = ("eager", "module+batch", "module+prefetch")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--optimizer", default="--loop-optimizer", choices=("--loop-optimizer", "--fused-optimizer"))
    ap.add_argument("--name", default="dynamic_alone", help="results file name (.json) under results/")
    args = ap.parse_args()
    full: dict[str, list[float]] = {m: [] for m in MODES}
    stages: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    load: list[list[float]] = []
    probe: dict[str, list[Any]] = {m: [] for m in MODES}  # each process's host probe (graphsub.bench.dynamic)
    for k in range(args.repeats):
        order = list(MODES[k % len(MODES):] + MODES[:k % len(MODES)])
        before = os.getloadavg()[0]
        for m in order:
            res = run_bench(args.optimizer, k, args.batches, modes=m)
            ms = res["ms_per_batch"][m]
            full[m].append(ms["full"])
            stages[m].append(ms)
            probe[m].append(res.get("host_probe_ms"))
        load.append([round(before, 2), round(os.getloadavg()[0], 2)])
        sp = {m: round(full["eager"][-1] / full[m][-1], 2) for m in MODES[1:]}
        print(f"repeat {k} ({' -> '.join(order)}): {sp} (eager {full['eager'][-1]:.1f} ms)", flush=True)
    out: dict[str, Any] = {
        "command": f"experiments/dynamic/dynamic_alone.py --repeats {args.repeats} --batches {args.batches} "
                   f"--optimizer={args.optimizer} --name {args.name}",
        "workload": "treelstm", "threads": 1, "batch_size": 20, "data": "sst", "loadavg": load,
        "full_ms": full, "ms_per_batch": stages, "host_probe_ms": probe,
    }
    for m in MODES[1:]:
        xs = [e / v for e, v in zip(full["eager"], full[m], strict=True)]
        out[m] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}
    OUT.mkdir(exist_ok=True)
    (OUT / f"{args.name}.json").write_text(json.dumps(out, indent=1))
    print({m: round(out[m]["median"], 2) for m in MODES[1:]},
          {m: round(statistics.median(full[m]), 1) for m in MODES})


if __name__ == "__main__":
    main()
