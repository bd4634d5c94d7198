"""Table 6.4 of Liu's thesis rerun with the module-capture modes beside the old ones, repeated (issue 24).

    .venv/bin/python experiments/dynamic/dynamic_table64.py --repeats 5

Each repeat is one ``graphsub dynamic bench`` run (SST, batch 20, 1 torch thread, 20 batches, two rounds: the
in-process modes taking turns in slices of 4 batches, each prefetch mode in a phase of its own after each round, the
first step of each slice or phase untimed), with seed ``k`` (other initial weights and dropout masks, the same trees).
The Tree-LSTM runs every mode (the thesis' table); the sequence LSTM and the Tree-GRU run eager and the batching
modes.  Writes ``experiments/results/dynamic_table64.json`` (every repeat's full result, after each repeat),
``dynamic_table64.md`` (per mode and stage the median over the repeats and the min-max spread; per mode the
full-step speedup over eager, median and spread, and the recording time per batch and per node) and
``dynamic_table64.png``.  Run it alone on the machine: it is a timing benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from graphsub.bench.dynamic import MODES, STAGES, BenchConfig, run_bench

OUT = Path(__file__).resolve().parents[1] / "results"
FAST_MODES = ("eager", "reuse+batch", "prefetch", "module+batch", "module+prefetch")
WORKLOADS = {"treelstm": MODES, "seqlstm": FAST_MODES, "treegru": FAST_MODES}


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and min-max of every (mode, stage) and of each mode's speedups and recording, over the repeats."""
    modes = list(runs[0]["ms_per_batch"])
    out: dict[str, Any] = {"repeats": len(runs), "modes": modes, "ms": {}, "speedup_full": {}, "recording": {},
                           "loss_max_abs_diff": [r.get("loss_max_abs_diff") for r in runs],
                           "best_mode": [r.get("best_mode") for r in runs], "loadavg": [r["loadavg"] for r in runs],
                           "host_probe_ms": [(r.get("host_probe_ms") or {}).get("median") for r in runs]}
    for m in modes:
        out["ms"][m] = {s: _spread([r["ms_per_batch"][m][s] for r in runs]) for s in STAGES}
        if m != "eager":
            out["speedup_full"][m] = _spread([r["speedup"][m]["full"] for r in runs])
        recs = [r["recording"][m] for r in runs if m in r.get("recording", {})]
        if recs:
            out["recording"][m] = {k: _spread([x[k] for x in recs]) for k in ("ms_per_batch", "nodes_per_batch",
                                                                              "us_per_node")}
    caches = [r.get("plan_cache", {}) for r in runs]
    out["plan_cache"] = {m: [c[m]["hit_rate"] for c in caches if m in c] for m in modes}
    return out


def _fmt(d: dict[str, float], spec: str = ".1f", suffix: str = "") -> str:
    return f"{d['median']:{spec}}{suffix} ({d['min']:{spec}}-{d['max']:{spec}})"


def render(results: dict[str, Any]) -> str:
    lines = ["# Table 6.4 rerun: dynamic-graph modes, median of repeats (min-max)", "",
             "SST train, batch 20, emb 300, hidden 150, 1 torch thread per process, 2-core VM; per repeat 20 batches "
             "for two rounds, the in-process modes taking turns in slices of 4 batches (the order rotating), each "
             "prefetch mode in a phase of its own after each round; each mode's first 3 batches and the first step "
             "of each slice or phase (it follows another mode's step) left out, "
             "seed = repeat index. `full` = preprocess + trace + optimize + forward + backward + step (prefetch "
             "modes: the wall time between steps; their `trace` is the wait for a plan). Produced by "
             f"`{results['command']}`; vocabulary: " + ("the whole SST train split's (16k words: eager pays a dense "
                                                       "embedding gradient per word)" if "vocab train" in
                                                       results["command"] else "the benched trees' words") + ".", ""]
    for wl, s in results["workloads"].items():
        modes = s["modes"]
        probes = ", ".join(f"{x:.2f}" for x in s.get("host_probe_ms", []) if x is not None) or "-"
        lines += [f"## {wl} ({s['repeats']} repeats, 1-minute load averages before/after: {s['loadavg']}; host probe "
                  f"per repeat, median ms of a fixed pure-Python loop before each turn: {probes})", "",
                  "| stage (ms) | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
        for st in STAGES:
            lines.append(f"| {st} | " + " | ".join(_fmt(s["ms"][m][st]) for m in modes) + " |")
        lines.append("| **speedup full** | 1.00x | " + " | ".join(
            _fmt(s["speedup_full"][m], ".2f", "x") for m in modes if m != "eager") + " |")
        lines += ["", "| recording | " + " | ".join(s["recording"]) + " |", "|---|" + "---|" * len(s["recording"])]
        for k, label in (("ms_per_batch", "ms per batch"), ("nodes_per_batch", "nodes per batch"),
                         ("us_per_node", "us per node")):
            lines.append(f"| {label} | " + " | ".join(_fmt(v[k], ".1f") for v in s["recording"].values()) + " |")
        hits = {m: v for m, v in s["plan_cache"].items() if v}
        lines += ["", "Plan cache hit rate per repeat (the second round repeats the first round's batches): "
                  + "; ".join(f"{m}: {', '.join(f'{h:.0%}' for h in v)}" for m, v in hits.items()) + ".",
                  f"Best mode per repeat: {s['best_mode']}; training equivalence (5 Adagrad steps, eager vs the "
                  f"best mode) loss max |diff| per repeat: {', '.join(f'{x:.1e}' for x in s['loss_max_abs_diff'])}.",
                  ""]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    wls = list(results["workloads"])
    fig, axes = plt.subplots(1, len(wls), figsize=(5 * len(wls), 4), squeeze=False)
    for ax, wl in zip(axes[0], wls, strict=True):
        sp = results["workloads"][wl]["speedup_full"]
        names = list(sp)
        med = [sp[m]["median"] for m in names]
        err = [[sp[m]["median"] - sp[m]["min"] for m in names], [sp[m]["max"] - sp[m]["median"] for m in names]]
        ax.bar(range(len(names)), med, yerr=err, capsize=3,
               color=["tab:orange" if m.startswith("module") else "tab:blue" for m in names])
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_ylabel("full training step, speedup over eager")
        ax.set_title(f"{wl} (median, min-max of repeats)")
        for target in (12.0, 15.0) if wl == "treelstm" else (5.0,):
            ax.axhline(target, ls=":", color="gray", lw=0.8)
            ax.text(len(names) - 0.5, target, f"target {target:g}x", fontsize=7, ha="right", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--workloads", default="treelstm,seqlstm,treegru")
    ap.add_argument("--modes", default="", help="comma-separated modes for every workload (default: the table's)")
    ap.add_argument("--vocab", default="batches", choices=("batches", "train"),
                    help="the benched trees' vocabulary (as the issue's targets were set) or the whole train split's "
                         "(written to dynamic_table64_vocab_train.*)")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    stem = "dynamic_table64" + ("" if args.vocab == "batches" else f"_vocab_{args.vocab}")
    path = OUT / f"{stem}.json"
    results: dict[str, Any] = {"command": f"experiments/dynamic/dynamic_table64.py --repeats {args.repeats} --batches "
                                          f"{args.batches} --workers {args.workers} --workloads {args.workloads}"
                                          + (f" --modes {args.modes}" if args.modes else "")
                                          + f" --vocab {args.vocab}", "runs": {}, "workloads": {}}
    for wl in args.workloads.split(","):
        runs: list[dict[str, Any]] = []
        for k in range(args.repeats):
            t0 = time.time()
            modes = tuple(args.modes.split(",")) if args.modes else WORKLOADS[wl]
            cfg = BenchConfig(batches=args.batches, data="sst", workload=wl, seed=k, modes=modes,
                              workers=args.workers, vocab=args.vocab)
            res = run_bench(cfg, tables=(wl == "treelstm" and k == 0))
            res["wall_s"] = time.time() - t0
            runs.append(res)
            results["runs"][wl] = runs
            results["workloads"][wl] = summarize(runs)
            path.write_text(json.dumps(results, indent=1, default=str))
            print(f"{wl} repeat {k}: " + ", ".join(f"{m} {v['full']:.2f}x" for m, v in res["speedup"].items()
                                                   if m != "eager") + f" ({res['wall_s']:.0f} s, load "
                                                                        f"{os.getloadavg()[0]:.2f})", flush=True)
    (OUT / f"{stem}.md").write_text(render(results))
    plot(results, OUT / f"{stem}.png")
    print(f"wrote {path}, {stem}.md and .png")


if __name__ == "__main__":
    main()
