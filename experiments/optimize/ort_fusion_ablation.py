"""Which of ONNX Runtime's own graph fusions cost time on the suite's models?  Each model runs under ORT_ENABLE_ALL
as is and with one fusion disabled (``InferenceSession(..., disabled_optimizers=[name])``), at 1 thread and all
cores, in alternating rounds (order rotated each round, median per round, ratio per round).  A fusion whose
absence is faster is slack a rewriter can win back with a spelling ORT's fuser does not match (what
``graphsub.rules.library.ort_spelling`` does).  Needs the exported suite (``graphsub bench suite --build``).

Run alone on the machine:
  .venv/bin/python experiments/optimize/ort_fusion_ablation.py --models bert.dynamo.b1,vit.dynamo.b1 \
      --disable SkipLayerNormFusion,MatMulAddFusion
Writes experiments/results/ort_fusion_ablation.json (one row per model, thread count and disabled fusion)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

import onnxruntime as ort

from graphsub.bench.suite.catalog import example_inputs, load_suite
from graphsub.bench.suite.measure import all_cores
from graphsub.cost.measured import time_session

OUT = Path(__file__).resolve().parents[1] / "results"


def session(path: Path, threads: int, disabled: list[str]) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)


def ablate(path: Path, feeds: dict[str, Any], threads: int, fusions: list[str], rounds: int) -> list[dict[str, Any]]:
    variants = ["(none)", *fusions]
    sessions = {v: session(path, threads, [] if v == "(none)" else [v]) for v in variants}
    per_round: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        k = r % len(variants)
        for v in variants[k:] + variants[:k]:
            t = time_session(sessions[v], feeds, budget_ms=300, warmup=2, min_repeats=5, max_repeats=10_000)
            per_round[v].append(t.median_ms)
    base = per_round["(none)"]
    rows = []
    for v in fusions:
        ratios = [a / b for a, b in zip(base, per_round[v], strict=True)]
        rows.append({"threads": threads, "disabled": v, "ms_all": statistics.median(base),
                     "ms_disabled": statistics.median(per_round[v]), "speedup": statistics.median(ratios),
                     "faster_rounds": sum(x > 1 for x in ratios) / len(ratios), "rounds_ms": per_round[v],
                     "rounds_ms_all": base})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True, help="comma-separated suite model ids")
    ap.add_argument("--disable", default="SkipLayerNormFusion,MatMulAddFusion",
                    help="comma-separated ORT optimizer names, each disabled on its own")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    suite = {m.id: m for m in load_suite()}
    missing = [m for m in args.models.split(",") if m not in suite]
    if missing:
        raise SystemExit(f"not in the built suite: {', '.join(missing)} (graphsub bench suite --build)")
    rows = []
    load_before = os.getloadavg()
    for mid in args.models.split(","):
        m = suite[mid]
        for threads in sorted({1, all_cores()}):
            for row in ablate(m.path, example_inputs(m.inputs), threads, args.disable.split(","), args.rounds):
                rows.append({"model": mid, **row})
                print(f"{mid} threads={threads} without {row['disabled']}: {row['ms_all']:.2f} -> "
                      f"{row['ms_disabled']:.2f} ms, {row['speedup']:.3f}x, faster in "
                      f"{row['faster_rounds']:.0%} of rounds", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"onnxruntime": ort.__version__, "cores": all_cores(), "rounds": args.rounds,
              "load_avg_before": load_before, "load_avg_after": os.getloadavg(), "rows": rows}
    (OUT / "ort_fusion_ablation.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
