"""Does the default ``graphsub optimize --training`` run find the training-graph wins? (issue 54, must-have 2)

Runs ``graphsub optimize zoo:MODEL --training --json`` with its default budget (75 s plus 400 s per GB) on MetaFlow's
training models (SqueezeNet, ResNet-50, Inception-v3) at 1 thread and at every core, each in a fresh process, one at
a time (timing: run it alone on the machine), and records per run: the budget, the time taken, the candidate kept,
optimize's own confirmation (fresh session groups with an A/A control: ``speedup``, ``speedup_ci``, ``aa_ratio``),
and which portfolio members were left out for time (notes ``skipped: ...``). Writes
``experiments/results/training_default.json`` and ``.md``.

  .venv/bin/python experiments/training/training_default.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "results"
GRAPHSUB = [sys.executable, "-m", "graphsub"]


def run(model: str, threads: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.onnx"
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = subprocess.run([*GRAPHSUB, "optimize", f"zoo:{model}", "--training", "--threads", str(threads), "--json",
                            "-o", str(out)], capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
    rec: dict[str, Any] = {"model": model, "threads": threads, "exit_code": p.returncode, "wall_s": wall,
                           "load_avg_1m": load}
    try:
        d = json.loads(p.stdout)
    except json.JSONDecodeError:
        rec["error"] = p.stderr[-2000:]
        return rec
    notes = list(d.get("portfolio_notes") or [])
    rec.update({k: d.get(k) for k in ("chosen", "decision", "speedup", "speedup_ci", "aa_ratio", "time_budget_s",
                                      "verified", "max_grad_abs_diff")})
    rec["candidates"] = {c.get("name"): c.get("speedup") for c in d.get("candidates") or []}
    rec["left_out_for_time"] = [n for n in notes if "skipped:" in n and "time" in n]
    rec["notes"] = notes
    return rec


def table(recs: list[dict[str, Any]]) -> str:
    lines = ["# The default `graphsub optimize --training` on MetaFlow's models", "",
             "Each a fresh process with the default budget; speedups are optimize's own confirmation (fresh session "
             "groups with an A/A control), not an independent re-timing.", "",
             "| model | threads | budget s | wall s | kept | speedup (CI) | A/A | left out for time |",
             "|---|---:|---:|---:|---|---|---:|---|"]
    for r in recs:
        ci = r.get("speedup_ci") or [None, None]
        sp = (f"{r['speedup']:.3f}x ({ci[0]:.3f}-{ci[1]:.3f})" if r.get("speedup") and ci[0] is not None
              else "-")
        aa = f"{r['aa_ratio']:.3f}" if r.get("aa_ratio") else "-"
        left = "; ".join(n.split(":")[0] for n in r.get("left_out_for_time", [])) or "-"
        lines.append(f"| {r['model']} | {r['threads']} | {r.get('time_budget_s') or 0:.0f} | {r['wall_s']:.0f} | "
                     f"{r.get('chosen')} | {sp} | {aa} | {left} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="squeezenet,resnet50,inception_v3")
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--name", default="training_default")
    args = ap.parse_args()
    recs = [run(m, int(t)) for m in args.models.split(",") for t in args.threads.split(",")]
    (OUT / f"{args.name}.json").write_text(json.dumps({"runs": recs}, indent=1))
    (OUT / f"{args.name}.md").write_text(table(recs))
    print(table(recs))


if __name__ == "__main__":
    main()
