"""The suite sequentially and on a local Ray cluster: the same decisions? wall time of both (issue 23).

    .venv/bin/python experiments/infra/suite_on_ray.py [--models gru.ts.b1,mha_block.ts.b1,...] [--budget 12]

Runs ``graphsub bench suite`` twice as a user would, on the same models, tools (ORT alone and graphsub, whose
portfolio runs the peers itself) and thread count (all cores): first ``--executor serial``, then ``--executor ray``
(no address: a local Ray for the command, one node offering the timing unit once, so -- as on any node -- one model
is timed at a time), then ``serial`` again. Compares per model what graphsub decided (the candidate kept, whether it
kept the original, the rules applied, verification, the verified candidates and their rules) between the
sequential and the Ray run, and between the two sequential runs: graphsub decides by timing its candidates, so the
second sequential run shows which differences are timing noise rather than the executor. Writes
``experiments/results/suite_on_ray.json`` (``--out``); the three suite runs it compares are written to a temporary
folder (``--keep-runs DIR`` keeps them). Timing: run it alone on the machine.

On one machine Ray cannot be faster than the sequential run -- a node times one model at a time, and here every
model's work is timing-bound (graphsub's own decision times candidates) -- so this measures Ray's overhead and
checks that nothing changes; the gain comes with more nodes (each times its own models).
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

RESULTS = Path(__file__).resolve().parents[1] / "results"
MODELS = "gru.ts.b1,mha_block.ts.b1,lstm.ts.b1,transformer_encoder.ts.b1"


def run(executor: str, label: str, args: argparse.Namespace, out: Path
        ) -> tuple[float, list[dict[str, Any]], list[float]]:
    name = f"suite_on_ray_{label}"
    (out / f"{name}.jsonl").unlink(missing_ok=True)
    cmd = [str(Path(sys.executable).with_name("graphsub")), "bench", "suite", "--models", args.models, "--peers", "ort",
           "--alone", "--threads", "all", "--budget", str(args.budget), "--out", str(out), "--name", name,
           "--executor", executor, "--no-plots", "--json"]
    load = list(os.getloadavg())
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    recs = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
    return wall, recs, load


def decision(rec: dict[str, Any]) -> dict[str, Any]:
    g = rec["tools"].get("graphsub", {})
    timing = g.get("timing", {})
    cands = {c["name"]: c.get("same_as") or sorted(c.get("rules") or []) for c in g.get("candidates", [])
             if c.get("verified")}
    return {"verified": g.get("verified"), "kept_original": g.get("kept_original"), "chosen": g.get("chosen"),
            "candidates": cands,
            "rules": g.get("rules"), "ops": g.get("graphsub_ops"), "node": rec.get("node"),
            "speedup": {n: t.get("speedup") for n, t in timing.items()} if isinstance(timing, dict) else None,
            "wall_s": rec.get("wall_time_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--budget", type=float, default=12.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "suite_on_ray.json", help="the comparison (JSON)")
    ap.add_argument("--keep-runs", type=Path, help="folder for the three suite runs (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.keep_runs or Path(tmp)
        runs.mkdir(parents=True, exist_ok=True)
        res = compare_runs(args, runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(res["same"], indent=1))


def compare_runs(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The three suite runs (into ``out``) and what graphsub decided in each."""
    rows: dict[str, Any] = {}
    labels = ["serial", "ray", "serial_again"]  # interleaved; the second sequential run measures the decision noise
    for label in labels:
        ex = label.removesuffix("_again")
        wall, recs, load = run(ex, label, args, out)
        rows[label] = {"executor": ex, "wall_s": wall, "load_avg_before": load,
                       "models": {r["id"]: decision(r) for r in recs}}
        print(label, f"{wall:.0f} s", flush=True)
    keys = ("verified", "kept_original", "chosen", "rules", "candidates")

    def compare(a: str, b: str) -> dict[str, dict[str, bool]]:
        return {m: {k: rows[a]["models"][m][k] == rows[b]["models"].get(m, {}).get(k) for k in keys}
                for m in rows[a]["models"]}

    same = {"serial_vs_ray": compare("serial", "ray"), "serial_vs_serial_again": compare("serial", "serial_again")}
    return {"models": args.models.split(","), "budget_s": args.budget, "cpus": os.cpu_count(), "runs": rows,
            "same": same}


if __name__ == "__main__":
    main()
