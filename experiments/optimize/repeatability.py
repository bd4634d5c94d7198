"""Does ``graphsub optimize`` keep the same candidate when run again? Five default runs per suite model.

Each run is ``graphsub optimize MODEL -o OUT --json`` in a fresh process with its defaults, as a user runs it, the
models taking turns (run 1 of every model, then run 2, ...), so that a slow minute of the machine does not fall on
one model's runs. Per model: the candidate kept in each run (or the original), its confirmed speedup with its
interval and A/A ratio, and whether one choice was kept in at least 4 of 5 runs. Run it alone on the machine:

  .venv/bin/python experiments/optimize/repeatability.py
  .venv/bin/python experiments/optimize/repeatability.py --models bert.ts.b1,gpt2.ts.b1 --runs 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

SUITE = Path(os.environ.get("GRAPHSUB_SUITE_DIR", Path.home() / ".cache" / "graphsub" / "suite"))
MODELS = ("bert.ts.b1", "distilbert.dynamo.b1", "gpt2.ts.b1", "vit.dynamo.b1", "convnext_tiny.ts.b1",
          "transformer_encoder.dynamo.b1")
OUT = Path(__file__).resolve().parents[1] / "results" / "repeatability.json"


def run(model: Path, out: Path, threads: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "graphsub", "optimize", str(model), "-o", str(out), "--json"]
    if threads != "all":
        cmd += ["--threads", threads]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        d = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"error": (r.stderr or r.stdout)[-500:], "wall_s": round(time.time() - t, 1)}
    return {"chosen": d.get("chosen"), "speedup": d.get("speedup"), "speedup_ci": d.get("speedup_ci"),
            "aa_ratio": d.get("aa_ratio"), "kept_original": d.get("kept_original"), "decision": d.get("decision"),
            "wall_s": round(time.time() - t, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", default="all")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    manifest = {e["id"]: e for e in json.loads((SUITE / "manifest.json").read_text())["models"]}
    ids = args.models.split(",")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in ids}
    t0 = time.time()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="graphsub-repeat-") as tmp:
        for k in range(args.runs):
            for mid in ids[k % len(ids):] + ids[:k % len(ids)]:
                rec = run(SUITE / manifest[mid]["path"], Path(tmp) / f"{mid}.{k}.onnx", args.threads)
                runs[mid].append(rec)
                load.append(os.getloadavg()[0])
                print(json.dumps({"model": mid, "run": k, **{x: y for x, y in rec.items() if x != "decision"}}),
                      flush=True)
    summary = {}
    for mid, recs in runs.items():
        choices = Counter(r.get("chosen") or "error" for r in recs)
        top, n = choices.most_common(1)[0]
        summary[mid] = {"choices": dict(choices), "most_common": top, "times": n, "repeatable": n >= 4}
    doc = {"what": __doc__.split("\n\n")[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
           "minutes": round((time.time() - t0) / 60, 1), "threads": args.threads, "cpus": os.cpu_count(),
           "load_avg_1min": {"min": min(load), "max": max(load)}, "summary": summary, "runs": runs}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
