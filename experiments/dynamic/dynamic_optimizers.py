"""The Tree-LSTM's full training step against eager PyTorch with either Adagrad: torch's fused CPU kernel or its
default for-loop implementation (issue 24's in-process and prefetch targets), repeated.

    .venv/bin/python experiments/dynamic/dynamic_optimizers.py --repeats 5

Each repeat is two ``graphsub dynamic bench`` processes (SST, batch 20, 1 torch thread, 20 batches; eager and
module+batch taking turns in slices of 4 batches, module+prefetch in a phase of its own after each of two rounds),
one per optimizer, the order of the two alternating between repeats; seed = repeat index.  The optimizer is the same
in every mode of a run, eager included.
Writes ``experiments/results/dynamic_optimizers.json`` (or ``--name``): per optimizer and mode the full-step
speedup over eager (median, min, max, every run), eager's full step, the stage medians of each run, and the 1-minute
load average before and after each run.  Run it alone on the machine: it is a timing benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "results"
MODES = ("module+batch", "module+prefetch")


def run_bench(flag: str, seed: int, batches: int, modes: str = "eager," + ",".join(MODES)) -> dict[str, Any]:
    """One ``graphsub dynamic bench --json`` process on the SST Tree-LSTM (``modes`` comma-separated, ``flag``:
    ``--fused-optimizer`` or ``--loop-optimizer``)."""
    exe = Path(sys.executable).with_name("graphsub")
    cmd = [str(exe), "dynamic", "bench", "--data", "sst", "--batches", str(batches), "--seed", str(seed),
           "--modes", modes, "--no-tables", flag, "--json"]
    got = subprocess.run(cmd, check=True, capture_output=True, text=True)
    res: dict[str, Any] = json.loads(got.stdout)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--name", default="dynamic_optimizers", help="results file name (.json) under results/")
    args = ap.parse_args()
    flags = {"fused-optimizer": "--fused-optimizer", "loop-optimizer": "--loop-optimizer"}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in flags}
    load: dict[str, list[list[float]]] = {k: [] for k in flags}
    for k in range(args.repeats):
        order = list(flags) if k % 2 == 0 else list(reversed(flags))
        for name in order:
            before = os.getloadavg()[0]
            res = run_bench(flags[name], k, args.batches)
            load[name].append([round(before, 2), round(os.getloadavg()[0], 2)])
            runs[name].append(res)
            sp = {m: round(res["speedup"][m]["full"], 2) for m in MODES}
            print(f"repeat {k} {name}: {sp} (eager {res['ms_per_batch']['eager']['full']:.1f} ms)", flush=True)
    out: dict[str, Any] = {
        "command": f"experiments/dynamic/dynamic_optimizers.py --repeats {args.repeats} --batches {args.batches} "
                   f"--name {args.name}",
        "workload": "treelstm", "threads": 1, "batch_size": 20, "data": "sst",
    }
    for name, rs in runs.items():
        entry: dict[str, Any] = {}
        for m in MODES:
            xs = [r["speedup"][m]["full"] for r in rs]
            entry[m] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}
        entry["eager_full_ms"] = [r["ms_per_batch"]["eager"]["full"] for r in rs]
        entry["ms_per_batch"] = [r["ms_per_batch"] for r in rs]
        entry["recording"] = [r.get("recording") for r in rs]
        entry["loss_max_abs_diff"] = [r.get("loss_max_abs_diff") for r in rs]
        entry["loadavg"] = load[name]
        entry["host_probe_ms"] = [r.get("host_probe_ms") for r in rs]
        out[name] = entry
    OUT.mkdir(exist_ok=True)
    (OUT / f"{args.name}.json").write_text(json.dumps(out, indent=1))
    for name in flags:
        print(name, {m: round(out[name][m]["median"], 2) for m in MODES})


if __name__ == "__main__":
    main()
