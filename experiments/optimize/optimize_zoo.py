"""`graphsub optimize` over zoo models exported to ONNX: latency before/after under ORT_ENABLE_ALL and
ORT_DISABLE_ALL, max abs difference, optimization time, and the geometric-mean speedup of the model
actually kept (1.0 where the original was kept).

    .venv/bin/python experiments/optimize/optimize_zoo.py --budget 30 [--models squeezenet,nasrnn] [--threads 1]

Writes ``experiments/results/optimize_zoo.json`` and ``optimize_zoo.md`` (``--out`` changes the stem).
Timings are only as good as the machine is quiet: run it alone.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from graphsub import zoo
from graphsub.data import materialize
from graphsub.frontends.onnx_io import save
from graphsub.optimize import optimize
from graphsub.search import Budget

RESULTS = Path(__file__).resolve().parents[1] / "results"


def run_one(name: str, workdir: Path, budget_s: float, threads: int, seed: int) -> dict[str, Any]:
    src = workdir / f"{name}.onnx"
    save(materialize(zoo.get(name), seed), src)
    t = time.perf_counter()
    res = optimize(src, output=workdir / f"{name}_opt.onnx", budget=Budget(time_s=budget_s), time_s=None, seed=seed,
                   threads=threads)
    d = res.to_dict()
    d.update({"name": name, "optimize_time_s": time.perf_counter() - t,
              "kept_speedup_ort_all": 1.0 if res.kept_original else d["speedup_ort_all"]})
    return d


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | ops | substitutions | ALL before (ms) | ALL after (ms) | ALL speedup | DISABLE before (ms) | "
             "DISABLE after (ms) | DISABLE speedup | max abs diff | kept | time (s) |",
             "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r['name']} | {r['ops_before']} | {len(r['applied'])} | {_f(r['latency_ms_before'])} | "
                     f"{_f(r['latency_ms_after'])} | {_f(r['speedup_ort_all'])} | "
                     f"{_f(r['latency_ms_before_disabled'])} | {_f(r['latency_ms_after_disabled'])} | "
                     f"{_f(r['speedup_ort_disabled'])} | {_f(r['max_abs_diff'], '.2g')} | "
                     f"{'original' if r['kept_original'] else 'optimized'} | {r['optimize_time_s']:.1f} |")
    kept = [r["kept_speedup_ort_all"] for r in rows if r["kept_speedup_ort_all"]]
    if kept:
        gm = math.exp(sum(math.log(x) for x in kept) / len(kept))
        lines.append(f"\nGeometric-mean speedup under ORT_ENABLE_ALL of the model kept: {gm:.3f}x "
                     f"({len(kept)} models; the original counts 1.0 where it was kept)")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo.list_models()), help="comma-separated zoo names")
    ap.add_argument("--budget", type=float, default=30.0, help="search seconds per model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "optimize_zoo"), help="output path stem")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            row = run_one(name, Path(tmp), args.budget, args.threads, args.seed)
            rows.append(row)
            print(f"{name}: ALL {_f(row['speedup_ort_all'])}x, DISABLE {_f(row['speedup_ort_disabled'])}x; "
                  f"{row['decision']}", flush=True)
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1, default=str))
    Path(args.out + ".md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
