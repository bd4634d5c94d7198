"""Does the speedup ``graphsub optimize`` states hold up? Its claim next to an independent re-timing.

For every suite model (``graphsub bench suite --build`` first), ``graphsub optimize MODEL -o OUT --json`` runs as a
user runs it (its default budget, a fresh process). Where it wrote a candidate (not the original), the written file
is re-timed against the original in another fresh process by :func:`graphsub.optimize.decide.measure` with more
session groups than optimize used (``--groups``, three rounds each: at least 3 sessions per file and 9 rounds), and
the A/A control of that re-timing (the original against fresh sessions of itself) is reported beside it. Where
optimize kept the original, the row says so (nothing to re-time).

Per written model: the claim, its interval, the independent speedup, its interval and A/A, and ``claimed /
independent - 1``. The summary: the median of ``|claimed / independent - 1|`` and the written files that the
independent re-timing finds slower than the original beyond its A/A spread. Run it alone on the machine:

  .venv/bin/python experiments/optimize/calibration.py                      # every b1 model, all cores
  .venv/bin/python experiments/optimize/calibration.py --models bert.ts.b1,vit.dynamo.b1 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUITE = Path(os.environ.get("GRAPHSUB_SUITE_DIR", Path.home() / ".cache" / "graphsub" / "suite"))
OUT = Path(__file__).resolve().parents[1] / "results" / "calibration.json"

#: the independent re-timing, in a process of its own (argv: original, candidate, manifest entry as JSON, threads,
#: groups); prints the verdict's dict
RETIME = r"""
import json, sys
from graphsub.bench.suite.measure import make_feeds
from graphsub.optimize import decide
original, candidate, entry = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
threads, groups = int(sys.argv[4]), int(sys.argv[5])
feeds = make_feeds(entry["inputs"], 0)
v = decide.verdict(decide.measure(*decide.session_makers(original, candidate, feeds, threads=threads),
                                  budget_ms=200.0, groups=groups), min_speedup=decide.MIN_SPEEDUP)
d = v.to_dict()
print(json.dumps({k: d[k] for k in ("speedup", "speedup_ci", "aa_ratio", "aa_ci", "rounds", "sessions", "faster",
                                     "slower", "reason")}))
"""


def optimize(model: Path, out: Path, threads: int | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "graphsub", "optimize", str(model), "-o", str(out), "--json"]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        d = json.loads(r.stdout)
    except json.JSONDecodeError:
        d = {"error": (r.stderr or r.stdout)[-500:]}
    d["wall_s"] = round(time.time() - t, 1)
    return d


def retime(original: Path, candidate: Path, entry: dict[str, Any], threads: int, groups: int) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", RETIME, str(original), str(candidate), json.dumps(entry),
                        str(threads), str(groups)], capture_output=True, text=True, check=False)
    try:
        return dict(json.loads(r.stdout.strip().splitlines()[-1]))
    except (json.JSONDecodeError, IndexError):
        return {"error": (r.stderr or r.stdout)[-500:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="suite model ids, comma-separated (default: every b1 model)")
    ap.add_argument("--threads", default="all", help="a number, or all (every core)")
    ap.add_argument("--groups", type=int, default=6, help="session groups of the independent re-timing")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from graphsub.cost.env import all_cores

    manifest = {e["id"]: e for e in json.loads((SUITE / "manifest.json").read_text())["models"]}
    ids = args.models.split(",") if args.models else sorted(m for m in manifest if m.endswith(".b1"))
    threads = all_cores() if args.threads == "all" else int(args.threads)
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="graphsub-calibration-") as tmp:
        for mid in ids:
            entry = manifest[mid]
            src = SUITE / entry["path"]
            out = Path(tmp) / f"{mid}.onnx"
            d = optimize(src, out, None if args.threads == "all" else threads)
            row: dict[str, Any] = {"model": mid, "chosen": d.get("chosen"), "claimed": d.get("speedup"),
                                   "claimed_ci": d.get("speedup_ci"), "claimed_aa": d.get("aa_ratio"),
                                   "kept_original": d.get("kept_original"), "optimize_s": d["wall_s"],
                                   "decision": d.get("decision") or d.get("error")}
            if d.get("kept_original") is False and out.is_file():
                ind = retime(src, out, entry, threads, args.groups)
                row["independent"] = ind
                if ind.get("speedup") and row["claimed"]:
                    row["claimed_over_independent"] = row["claimed"] / ind["speedup"] - 1.0
            rows.append(row)
            load.append(os.getloadavg()[0])
            print(json.dumps({k: v for k, v in row.items() if k != "decision"}), flush=True)
    written = [r for r in rows if "claimed_over_independent" in r]
    errors = [abs(r["claimed_over_independent"]) for r in written]
    slower = [r["model"] for r in written if r["independent"].get("slower")]
    summary = {"models": len(rows), "written": len(written),
               "median_abs_claim_error": statistics.median(errors) if errors else None,
               "max_abs_claim_error": max(errors) if errors else None,
               "independently_slower_beyond_aa": slower}
    doc = {"what": __doc__.split("\n\n")[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
           "minutes": round((time.time() - t0) / 60, 1), "threads": threads, "cpus": os.cpu_count(),
           "load_avg_1min": {"min": min(load), "max": max(load)}, "retime_groups": args.groups, "summary": summary,
           "rows": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
