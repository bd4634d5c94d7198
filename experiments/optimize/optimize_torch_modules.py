"""`graphsub.optimize_module` over the PyTorch modules of :mod:`graphsub.zoo.torch_modules`: latency
before/after under ORT_ENABLE_ALL and ORT_DISABLE_ALL, max abs difference (graph level and against the
module's own outputs), optimization time, geometric-mean speedup of the model kept.

    .venv/bin/python experiments/optimize/optimize_torch_modules.py --budget 30 [--modules EncoderBlock]

Writes ``experiments/results/optimize_torch.json`` and ``optimize_torch.md`` (the table of ``optimize_zoo.py`` in
this folder, imported from there: run this file as a script, so that its folder is on ``sys.path``).  Timings are
only as good as the machine is quiet: the load average at the start of each run is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

# the same table as the zoo models': experiments/optimize/optimize_zoo.py (this folder)
from optimize_zoo import markdown

from graphsub.optimize import optimize_module
from graphsub.search import Budget
from graphsub.zoo.torch_modules import EXAMPLES, MODULES

RESULTS = Path(__file__).resolve().parents[1] / "results"


def run_one(name: str, workdir: Path, budget_s: float, threads: int, seed: int, algo: str) -> dict[str, Any]:
    module = MODULES[name]()
    x = torch.randn(EXAMPLES[name], generator=torch.Generator().manual_seed(seed))
    load = os.getloadavg()[0]
    t = time.perf_counter()
    om = optimize_module(module, [x], output=workdir / f"{name}.onnx", budget=Budget(time_s=budget_s), time_s=None,
                         seed=seed, threads=threads, algo=algo)
    d = om.result.to_dict()
    d.update({"name": name, "optimize_time_s": time.perf_counter() - t, "load_avg_1m": load,
              "max_abs_diff_vs_module": om.max_abs_diff_vs_module,
              "kept_speedup_ort_all": 1.0 if om.result.kept_original else d["speedup_ort_all"]})
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(MODULES), help="comma-separated class names")
    ap.add_argument("--budget", type=float, default=30.0, help="search seconds per module")
    ap.add_argument("--algo", default="taso")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "optimize_torch"), help="output path stem")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.modules.split(","):
            row = run_one(name, Path(tmp), args.budget, args.threads, args.seed, args.algo)
            rows.append(row)
            print(f"{name}: ALL {row['speedup_ort_all']:.3f}x, DISABLE {row['speedup_ort_disabled']:.3f}x, "
                  f"vs module {row['max_abs_diff_vs_module']:.2g}; {row['decision']}", flush=True)
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1, default=str))
    md = markdown(rows)
    md += ("\nmax abs diff against the PyTorch module's own outputs: "
           + ", ".join(f"{r['name']} {r['max_abs_diff_vs_module']:.2g}" for r in rows) + "\n")
    Path(args.out + ".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
