"""Time to cost every zoo model with the measured model, cold and warm, and the cache hit rate.

For each zoo model in order, against one fresh SQLite cache:
  cold  -- a new model instance costs the graph: profiles the ops the cache lacks (ops seen in
           earlier models are already there: the hit rate shows the sharing across models);
  warm  -- a second new instance (empty memory) costs it again: every op comes from SQLite;
  hot   -- the same instance once more: every op comes from memory.
Writes experiments/results/cost_profile.{json,csv}.
Run: .venv/bin/python experiments/cost/cost_profile.py [--threads 1] [--fused]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from graphsub import zoo
from graphsub.cost import get_model
from graphsub.cost.calibrate import cpu_busy, wait_for_quiet
from graphsub.cost.env import machine_key

OUT = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fused", action="store_true", help="profile the fusion-aware model (ORT_ENABLE_ALL) too")
    args = ap.parse_args()
    specs = ["measured", "fused"] if args.fused else ["measured"]
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "ops.sqlite"

        def quiet() -> float:  # others may use the cores we do not (a shared machine)
            return wait_for_quiet(max_busy=max(0.35, (os.cpu_count() or 1) - args.threads), max_wait_s=3)

        for spec in specs:
            for name in zoo.list_models():
                g = zoo.get(name)
                quiet()
                busy = cpu_busy(0.2)
                m = get_model(spec, threads=args.threads, cache=cache, progress=False, gate=quiet)
                t = time.perf_counter()
                stats = m.profile(g)
                cold_cost = m.graph_cost(g)
                cold = time.perf_counter() - t
                t = time.perf_counter()
                m.graph_cost(g)
                hot = time.perf_counter() - t
                m2 = get_model(spec, threads=args.threads, cache=cache, progress=False)
                t = time.perf_counter()
                s2 = m2.profile(g)
                warm_cost = m2.graph_cost(g)
                warm = time.perf_counter() - t
                assert s2.misses == 0 and abs(warm_cost.time_ms - cold_cost.time_ms) < 1e-9
                row = {"cost_model": spec, "model": name, "num_ops": g.num_ops, "keys": stats.signatures,
                       "cold_hits": stats.hits, "cold_misses": stats.misses, "cold_hit_rate": round(stats.hit_rate, 3),
                       "cold_s": round(cold, 3), "measure_s": round(m.stats.measure_s, 3),
                       "warm_hit_rate": s2.hit_rate, "warm_s": round(warm, 4), "hot_s": round(hot, 4),
                       "noise_median": round(stats.noise_median, 3), "predicted_ms": round(cold_cost.time_ms, 3),
                       "busy_cores": round(busy, 2)}
                rows.append(row)
                print(f"{spec:9} {name:15} keys {row['keys']:3}  cold {row['cold_s']:6.2f}s "
                      f"(hits {row['cold_hits']:3}/{row['keys']:3})  warm {row['warm_s'] * 1e3:7.1f}ms "
                      f"hot {row['hot_s'] * 1e3:6.1f}ms  predicted {row['predicted_ms']:8.2f}ms  "
                      f"noise {row['noise_median']:.2f}  busy {busy:.1f}", flush=True)
    meta = {"machine": machine_key(), "python": platform.python_version(), "threads": args.threads,
            "onnxruntime": __import__("onnxruntime").__version__,
            "totals": {spec: {k: round(sum(r[k] for r in rows if r["cost_model"] == spec), 3)
                              for k in ("keys", "cold_misses", "cold_s", "warm_s", "hot_s")} for spec in specs}}
    suffix = "" if args.threads == 1 else f"_t{args.threads}"
    (OUT / f"cost_profile{suffix}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    with open(OUT / f"cost_profile{suffix}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(json.dumps(meta["totals"], indent=2))


if __name__ == "__main__":
    main()
