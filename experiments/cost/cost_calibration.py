"""Calibrate the cost models against end-to-end onnxruntime latency, per zoo model and variant.

Variants per zoo model (those that apply): ``base``; ``bn`` (torchvision models with unfolded
batchnorm); ``unfused`` (ONNX round trip: activations as separate nodes); ``merge`` (sibling
convs/matmuls merged); ``merge_enlarge`` (1x1 siblings enlarged first, OCGGS Figure 1);
``rules`` (rules from graphsub.rules applied, when the library provides them).  Plus ``mbnet``,
a MobileNet-style network where batchnorm/relu matter (base = folded, unfused = separate relu,
bn = conv -> batchnorm -> relu; see graphsub.cost.variants.mbnet).

Predictions: flops, roofline:cpu, measured (sum of one-node timings, ORT_DISABLE_ALL),
measured:all (one-node models under ORT_ENABLE_ALL), fused (fusion groups under ORT_ENABLE_ALL);
each measured model twice: from the median of the repeats and (``[min]``) from the minimum.
Measured: end-to-end latency with ORT_DISABLE_ALL and ORT_ENABLE_ALL (interleaved rounds,
median and minimum of all runs, fixed thread count; one thread: thread CPU time).
Writes experiments/results/cost_calibration.{json,csv,png}.
Run: .venv/bin/python experiments/cost/cost_calibration.py [--threads 1] [--models resnet18,bert]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from graphsub import zoo
from graphsub.cost import get_model
from graphsub.cost.calibrate import GraphCase, calibrate, summarize, wait_for_quiet
from graphsub.cost.env import machine_key
from graphsub.cost.variants import mbnet, merge_siblings, roundtrip, rule_variant
from graphsub.ir.graph import Graph

OUT = Path(__file__).resolve().parents[1] / "results"
PAIRS = [("flops", "disable"), ("flops", "all"), ("roofline:cpu", "disable"), ("roofline:cpu", "all"),
         ("measured", "disable"), ("measured", "all"), ("measured:all", "all"), ("fused", "all")]
MIN_PAIRS = [(p if p in ("flops", "roofline:cpu") else p + "[min]", lvl) for p, lvl in PAIRS]


def cases_for(name: str, use_rules: bool) -> list[GraphCase]:
    g = zoo.get(name)
    out = [GraphCase(name, "base", g)]
    if zoo.MODELS[name].family == "torchvision":
        out.append(GraphCase(name, "bn", zoo.get(name, batchnorm=True)))
    seen = {g.structural_hash()}

    def add(variant: str, v: Graph | None) -> None:
        if v is not None and v.structural_hash() not in seen:
            seen.add(v.structural_hash())
            out.append(GraphCase(name, variant, v))

    add("unfused", roundtrip(g))
    merged = merge_siblings(g)
    add("merge", merged)
    add("merge_enlarge", merge_siblings(g, enlarge=True))
    if use_rules:
        add("rules", rule_variant(g))
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("measured", "disable", "median"), ("fused", "all", "median"), ("roofline:cpu", "disable", "median"),
              ("measured[min]", "disable", "min"), ("fused[min]", "all", "min"), ("flops", "all", "min")]
    fig, axes = plt.subplots(2, 3, figsize=(17, 11))
    models = sorted({r["model"] for r in rows})
    cmap = plt.get_cmap("tab20")
    markers = {"base": "o", "bn": "s", "unfused": "^", "merge": "D", "merge_enlarge": "P", "rules": "*"}
    for ax, (pred, lvl, stat) in zip(axes.flat, panels, strict=True):
        key = "min_ms" if stat == "min" else "measured_ms"
        xs = [r[key][lvl] for r in rows]
        ys = [r["predicted"][pred] for r in rows]
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.scatter(x, y, color=cmap(models.index(r["model"]) % 20), marker=markers.get(r["variant"], "x"),
                       s=40, alpha=0.85, edgecolors="black", linewidths=0.3)
        if pred == "flops":
            ax.set_ylabel("predicted GFLOP")
        else:
            lo, hi = min(xs + ys) * 0.7, max(xs + ys) * 1.4
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.set_ylabel(f"predicted by {pred} (ms)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured end-to-end, ORT {lvl}, {stat} of runs (ms)")
        ax.set_title(f"{pred} vs ORT {lvl} ({stat})")
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
    handles = [plt.Line2D([], [], color=cmap(i % 20), marker="o", ls="", label=m) for i, m in enumerate(models)]
    handles += [plt.Line2D([], [], color="gray", marker=mk, ls="", label=v) for v, mk in markers.items()]
    fig.legend(handles=handles, loc="lower center", ncol=11, fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="", help="comma-separated zoo models (default: all)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-ms", type=float, default=600.0, help="timed runs per graph and level, all rounds")
    ap.add_argument("--no-rules", action="store_true")
    ap.add_argument("--out", default="cost_calibration")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n and n != "mbnet"] if args.models else zoo.list_models()
    t0 = time.perf_counter()
    cases = [c for n in names for c in cases_for(n, not args.no_rules)]
    if not args.models or "mbnet" in args.models.split(","):
        cases += [GraphCase("mbnet", name, mbnet(v)) for name, v in (("base", "folded"), ("unfused", "relu"),
                                                                      ("bn", "bn"))]
    print(f"{len(cases)} graphs: " + ", ".join(f"{c.model}/{c.variant}" for c in cases), flush=True)
    max_busy = max(0.35, (os.cpu_count() or 1) - args.threads)

    def gate() -> float:  # before each end-to-end timing
        return wait_for_quiet(max_busy=max_busy, max_wait_s=3)

    def op_gate() -> float:  # before each one-op measurement (many: shorter wait)
        return wait_for_quiet(max_busy=max_busy, max_wait_s=1, interval=0.1)

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "ops.sqlite"
        common: dict[str, Any] = {"threads": args.threads, "cache": cache, "progress": False, "gate": op_gate}
        models = {"flops": get_model("flops"), "roofline:cpu": get_model("roofline:cpu")}
        for spec in ("measured", "measured:all", "fused", "measured[min]", "measured:all[min]", "fused[min]"):
            models[spec] = get_model(spec, **common)  # [min] variants reuse the cached timings
        calib = calibrate(cases, models, threads=args.threads, rounds=args.rounds, budget_ms=args.budget_ms,
                          gate=gate, log=lambda s: print(s, flush=True))
        stats = {k: {"hits": m.stats.memory_hits + m.stats.db_hits, "misses": m.stats.misses,
                     "measure_s": round(m.stats.measure_s, 1)}
                 for k, m in models.items() if hasattr(m, "stats")}
    rows = [r.as_dict() for r in calib]
    for r in rows:
        r["predicted"]["flops"] /= 1e9  # GFLOP
    summary = summarize(calib, PAIRS) + summarize(calib, MIN_PAIRS, stat="min")
    for s in summary:
        if s["prediction"] == "flops":  # GFLOP / ms is not a calibration ratio
            s.update(ratio_median=math.nan, ratio_min=math.nan, ratio_max=math.nan)
    meta = {"machine": machine_key(), "python": platform.python_version(), "threads": args.threads,
            "onnxruntime": __import__("onnxruntime").__version__, "rounds": args.rounds, "budget_ms": args.budget_ms,
            "seconds": round(time.perf_counter() - t0, 1), "cache_stats": stats,
            "roofline_cpu": vars(models["roofline:cpu"].device) if hasattr(models["roofline:cpu"], "device") else {}}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.out}.json").write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=2,
                                                     default=str) + "\n")
    fields = ["model", "variant", "num_ops", "gflops", "busy"]
    lvls = sorted({k for r in rows for k in r["measured_ms"]})
    preds = list(models)
    with open(OUT / f"{args.out}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields + [f"median_{lvl}_ms" for lvl in lvls] + [f"min_{lvl}_ms" for lvl in lvls]
                   + [f"noise_{lvl}" for lvl in lvls] + [f"pred_{p}" for p in preds])
        for r in rows:
            w.writerow([r[k] if not isinstance(r[k], float) else round(r[k], 4) for k in fields]
                       + [round(r["measured_ms"][lvl], 3) for lvl in lvls]
                       + [round(r["min_ms"][lvl], 3) for lvl in lvls]
                       + [round(r["noise"][lvl], 3) for lvl in lvls] + [round(r["predicted"][p], 4) for p in preds])
    plot(rows, OUT / f"{args.out}.png")
    print(f"\n{'model/variant':30} {'dis med':>8} {'dis min':>8} {'all med':>8} {'all min':>8} {'meas':>8} "
          f"{'meas[m]':>8} {'m:all':>8} {'fused':>8} {'fused[m]':>8} {'roof':>8}")
    for r in rows:
        p, m, lo = r["predicted"], r["measured_ms"], r["min_ms"]
        print(f"{r['model'] + '/' + r['variant']:30} {m['disable']:8.2f} {lo['disable']:8.2f} {m['all']:8.2f} "
              f"{lo['all']:8.2f} {p['measured']:8.2f} {p['measured[min]']:8.2f} {p['measured:all']:8.2f} "
              f"{p['fused']:8.2f} {p['fused[min]']:8.2f} {p['roofline:cpu']:8.2f}")
    print(f"\n{'prediction':18} {'level':8} {'stat':6} {'spearman':>8} {'ratio':>6} {'pairs ok':>9} "
          f"{'change err %':>12}")
    for s in summary:
        acc = "n/a" if math.isnan(s["pair_accuracy"]) else f"{s['pairs_agree']}/{s['pairs']}"
        ratio = "" if math.isnan(s["ratio_median"]) else f"{s['ratio_median']:6.2f}"
        print(f"{s['prediction']:18} {s['level']:8} {s['stat']:6} {s['spearman']:8.3f} {ratio:>6} {acc:>9} "
              f"{s['change_error']:12.1f}")
    print(f"total {meta['seconds']} s")


if __name__ == "__main__":
    main()
