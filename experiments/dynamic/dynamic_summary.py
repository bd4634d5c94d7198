"""Render ``experiments/results/dynamic_bench.md`` from the JSON of ``graphsub dynamic bench``.

    .venv/bin/graphsub dynamic bench --batches 20 --workers 2 --json > experiments/results/dynamic_bench_treelstm.json
    .venv/bin/graphsub dynamic bench --batches 20 --workers 2 --workload seqlstm --no-tables --json \\
        > experiments/results/dynamic_bench_seqlstm.json
    .venv/bin/python experiments/dynamic/dynamic_summary.py
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results"
STAGES = ("preprocess", "trace", "optimize", "forward", "backward", "step", "full")


def main() -> None:
    lines = ["# Dynamic-graph reuse: thesis Table 6.4 layout on this machine", "",
             "Median ms per batch of 20 sentences (emb 300, hidden 150, dropout 0.5), first 3 batches left out, "
             "1 torch thread per process, 2-core VM. `full` = trace + optimize + forward + backward + optimizer "
             "step. Modes: `eager` plain per-node PyTorch; `traced` the lazy DAG run node by node; `reuse` the "
             "thesis (frequent depth-limited signatures, one generated function each); `reuse+batch` signature-keyed "
             "batching (nodes grouped by level and key while recording, one call per group); `prefetch` the same "
             "batching with the recording (and the preprocessing) done ahead by worker processes (its `trace` row is "
             "the main process's wait for a plan, its `full` the wall time between steps). Each mode runs all "
             "batches in a phase of its "
             "own, phases alternating between the modes for two rounds. "
             "Thesis (TF Eager, i7): full 2.97 s -> 2.20 s (1.35x), tracing 0.39-0.41 s per batch.", ""]
    for wl in ("treelstm", "seqlstm"):
        path = OUT / f"dynamic_bench_{wl}.json"
        if not path.exists():
            continue
        d = json.loads(path.read_text())
        modes = list(d["ms_per_batch"])
        lines += [f"## {wl} ({d['data']} data)", "",
                  "| stage | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
        for s in STAGES:
            lines.append(f"| {s} | " + " | ".join(f"{d['ms_per_batch'][m][s]:.1f}" for m in modes) + " |")
        for s in ("forward", "backward", "full"):
            lines.append(f"| speedup {s} | " + " | ".join(f"{d['speedup'][m][s]:.2f}x" for m in modes) + " |")
        cfg = d["config"]
        lines += ["", f"{cfg['batches']} batches, prefetch workers: {cfg.get('workers', 1)}, 1-minute load "
                  f"average before / after the modes {d.get('loadavg', '?')}.", "",
                  f"Best mode {d['best_mode']}: full step {d['speedup_full_step']:.2f}x eager; training "
                  f"equivalence ({d['training']['steps']} Adagrad steps, same seed and data): loss max |diff| "
                  f"{d['loss_max_abs_diff']:.2g}.", ""]
        if d.get("table_6_3"):
            lines += ["Table 6.3 (first 3 batches, P_Freq = 1):", "",
                      "| P_Depth | occurrences | frequent subgraphs | avg occurrence | avg op count | collisions |",
                      "|---|---|---|---|---|---|"]
            for r in d["table_6_3"]:
                lines.append(f"| {r['depth']} | {r['occurrences']} | {r['frequent']} | {r['avg_occurrence']:.1f} | "
                             f"{r['avg_op_count']:.2f} | {r['hash_collisions']} |")
            lines.append("")
    rep = OUT / "dynamic_bench_repeats.json"
    if rep.exists():
        runs = json.loads(rep.read_text())["runs"]
        lines += ["## Repeats (treelstm, SST, 16 batches, eager / reuse+batch / prefetch only)", "",
                  "The speed of this VM drifts from run to run (eager's full step: 340-640 ms in this session), so "
                  "the ratio is measured again on other seeds (other dropout masks, same trees) and with one or two "
                  "prefetch workers:", "",
                  "| seed | prefetch workers | load before / after | eager ms | reuse+batch | prefetch |",
                  "|---|---|---|---|---|---|"]
        for r in runs:
            lines.append(f"| {r['seed']} | {r['workers']} | {r['loadavg']} | {r['eager_full_ms']:.0f} | "
                         f"{r['speedup_reuse+batch']:.2f}x | {r['speedup_prefetch']:.2f}x |")
        sp = sorted(r["speedup_prefetch"] for r in runs)
        sb = sorted(r["speedup_reuse+batch"] for r in runs)
        lines += ["", f"prefetch: {sp[0]:.2f}x to {sp[-1]:.2f}x (median {sp[len(sp) // 2]:.2f}x); reuse+batch: "
                  f"{sb[0]:.2f}x to {sb[-1]:.2f}x.", ""]
    (OUT / "dynamic_bench.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT / 'dynamic_bench.md'}")


if __name__ == "__main__":
    main()
