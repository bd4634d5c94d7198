"""n=4 rule generation: per-shard cost measured on a sample, wall time projected for 8, 64 and 512 cores (issue 23).

    .venv/bin/python experiments/rules/rulegen_n4_projection.py [--sample 8] [--n3-checkpoint DIR] [--workers 2]

What is measured, and what is arithmetic:

1. n=3 is enumerated (or loaded from ``--n3-checkpoint``, a ``rules generate --checkpoint`` directory of the same
   configuration with 64 shards) to get, for each of the 271 first operators, the number of n=3 graphs under it.
2. A sample of first operators, spread over the quantiles of that count (the largest included), is enumerated at
   n=4, one first operator per task in a fresh process (exactly the unit of work of ``run_shards`` with one first
   operator per shard): seconds, graphs, the process's peak RSS -- **measured**.
3. Per first operator not sampled, n=4 seconds are **projected** as ``n=3 graphs x (n=4 seconds per n=3
   graph)``, the ratio taken from the sample (sampled ones keep their measured seconds; the ratio's spread over
   the sample is reported: the projection is as good as that spread).
4. The enumeration's wall time on P cores is **simulated**: the 271 tasks scheduled longest first onto P cores
   (LPT list scheduling, what a pool or Ray does with a queue); on 512 cores the largest task bounds it.
5. The confirm stage is **arithmetic**: the candidate fraction at n=4 is the sample's within-subtree duplicate
   fraction times the n=3 ratio of global to within-subtree duplicates (both measured), times the measured n=3
   renaming + confirm cost per candidate, divided by P (its pieces are independent). The single-node merge
   (fingerprint sort and candidate pairing) is **arithmetic** from the n=3 load-and-merge rate, and its memory from
   bytes per record.

Writes ``experiments/results/rulegen_n4_projection.json``. Timing: run it alone on the machine.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.rules.generate.enumerate import EnumConfig, enumerate_shard, first_choices
from graphsub.rules.generate.parallel import merge, run_shards
from graphsub.rules.generate.templates import resolve_ops

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _one(args: tuple[EnumConfig, int, int]) -> dict[str, Any]:
    cfg, idx, n_first = args
    t0 = time.perf_counter()
    recs = enumerate_shard(cfg, idx, n_first)
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # a fresh process per task: its own peak
    graphs = sum(len(v) for v in recs.values())
    fps = [fp for v in recs.values() for fp, _ in v]
    return {"first_op": idx, "seconds": secs, "graphs": graphs, "fingerprints_within": len(set(fps)),
            "code_bytes": sum(len(c) for v in recs.values() for _, c in v), "peak_rss_mb": peak / 2**20}


def lpt_makespan(tasks: list[float], cores: int) -> float:
    """Longest-processing-time-first list scheduling of ``tasks`` on ``cores``: the finish time of the last core."""
    loads = [0.0] * min(cores, max(1, len(tasks)))
    heapq.heapify(loads)
    for t in sorted(tasks, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + t)
    return max(loads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=8)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--n3-checkpoint", type=Path, default=None)
    ap.add_argument("--reproject", action="store_true", help="project again from the saved sample")
    args = ap.parse_args()
    taso = resolve_ops(["taso"])
    cfg3, cfg4 = EnumConfig(templates=taso, max_ops=3), EnumConfig(templates=taso, max_ops=4)
    n_first = len(first_choices(cfg4))
    t0 = time.perf_counter()
    merged = merge(run_shards(cfg3, num_shards=64, executor="process", checkpoint=args.n3_checkpoint))
    n3_load_s = time.perf_counter() - t0
    per_first3 = np.bincount(merged.first, minlength=n_first)
    graphs3 = len(merged)
    # the sample: first operators at evenly spaced quantiles of the n=3 count, the largest included
    ranked = np.argsort(per_first3, kind="stable")
    picks = sorted({int(ranked[round(q * (n_first - 1))]) for q in np.linspace(0.2, 1.0, args.sample)})
    print(f"n=3: {graphs3} graphs under {n_first} first operators; sampling {picks}", flush=True)
    t1 = time.perf_counter()
    saved = RESULTS / "rulegen_n4_projection.json"
    if args.reproject:  # the projection again from the saved sample (no new measurement)
        prior = json.loads(saved.read_text())
        rows, sample_wall = prior["sample"], prior["sample_wall_s"]
    else:
        with ProcessPoolExecutor(max_workers=args.workers, max_tasks_per_child=1) as pool:
            rows = list(pool.map(_one, [(cfg4, i, n_first) for i in picks]))
        sample_wall = time.perf_counter() - t1
    for r in rows:
        r["n3_graphs"] = int(per_first3[r["first_op"]])
        r["s_per_n3_graph"] = r["seconds"] / max(1, r["n3_graphs"])
        r["n4_graphs_per_n3_graph"] = r["graphs"] / max(1, r["n3_graphs"])
        print(json.dumps(r), flush=True)
    ratio = sum(r["seconds"] for r in rows) / sum(r["n3_graphs"] for r in rows)  # ratio of sums
    growth = sum(r["graphs"] for r in rows) / sum(r["n3_graphs"] for r in rows)
    measured = {r["first_op"]: r["seconds"] for r in rows}
    per_first4 = [measured.get(i, float(c) * ratio) for i, c in enumerate(per_first3)]  # measured where sampled
    total_cpu = sum(per_first4)
    graphs4 = growth * graphs3
    # candidates: graphs whose fingerprint an earlier graph has. Within one first operator's subtree that fraction is
    # measured on the sample; at n=3 the global fraction is (global / within) times the within-subtree one (both
    # measured here), and that ratio is carried to n=4. The n=2 -> n=3 geometric extrapolation is given beside it.
    prev = {2: (670, 46559), 3: (636785, 6984195)}
    f2, f3 = prev[2][0] / prev[2][1], prev[3][0] / prev[3][1]
    within3 = sum(int(len(f) - len(np.unique(f))) for f in (merged.fps[merged.first == i] for i in range(n_first)))
    within3_frac = within3 / graphs3
    within4_frac = sum(r["graphs"] - r["fingerprints_within"] for r in rows) / sum(r["graphs"] for r in rows)
    cand_frac4 = min(1.0, within4_frac * f3 / within3_frac)
    cands4 = cand_frac4 * graphs4
    n3 = json.loads((RESULTS / "rulegen_executors_n3.json").read_text()) if (RESULTS / "rulegen_executors_n3.json"
                                                                               ).is_file() else None
    map_cpu_per_cand = None
    merge_s_per_graph = None
    if n3:
        proc = next(r for r in n3["runs"] if r["executor"] == "serial")
        map_cpu_per_cand = proc["seconds"]["confirm"] / prev[3][0]  # serial: wall = CPU (renaming + tests included)
        merge_s_per_graph = n3_load_s / graphs3 if args.n3_checkpoint else None
    bytes_per_record = 8 + 4 + sum(r["code_bytes"] for r in rows) / sum(r["graphs"] for r in rows) + 33 + 8
    proj: dict[str, Any] = {}
    for p in (8, 64, 512):
        enum_s = lpt_makespan(per_first4, p)
        confirm_s = cands4 * map_cpu_per_cand / p if map_cpu_per_cand else None
        proj[str(p)] = {"enumerate_s": enum_s, "enumerate_lower_bound_s": total_cpu / p,
                        "largest_task_s": max(per_first4), "confirm_s": confirm_s,
                        "hours_total_excluding_merge": (enum_s + (confirm_s or 0)) / 3600}
    out = {"what": "n=4 per-first-operator enumeration measured on a sample; the rest projected (see docstring)",
           "cpus_here": os.cpu_count(), "load_avg": os.getloadavg(), "first_ops": n_first, "n3_graphs": graphs3,
           "sample": rows, "sample_wall_s": sample_wall,
           "fit": {"n4_s_per_n3_graph": ratio, "spread_min_max": [min(r["s_per_n3_graph"] for r in rows),
                                                                  max(r["s_per_n3_graph"] for r in rows)],
                   "n4_graphs_per_n3_graph": growth},
           "projected": {"enumerate_cpu_s": total_cpu, "graphs": graphs4, "candidate_fraction": cand_frac4,
                         "candidate_fraction_basis": {"n3_global": f3, "n3_within_first_op": within3_frac,
                                                      "n4_within_first_op_sample": within4_frac,
                                                      "n2_n3_geometric": min(1.0, f3 * f3 / f2)},
                         "candidates": cands4, "confirm_cpu_s_per_candidate_n3": map_cpu_per_cand,
                         "merge_bytes_per_record": bytes_per_record,
                         "merge_memory_gb": graphs4 * bytes_per_record / 1e9,
                         "merge_s_single_node": graphs4 * merge_s_per_graph if merge_s_per_graph else None,
                         "per_cores": proj}}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rulegen_n4_projection.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out["fit"]), json.dumps(out["projected"], indent=1))


if __name__ == "__main__":
    main()
