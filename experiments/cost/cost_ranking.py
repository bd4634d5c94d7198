"""The cost models' within-model ranking of ``optimize``'s candidates against their measured latency.

For each suite model, ``graphsub.optimize`` runs as users run it (default portfolio, ``--threads``), and its
verified candidates keep their measured speedups over the original (side-by-side rounds; screening rounds for the
candidates that did not reach them).  Each candidate and the original are then priced by

* **before**: ``fused`` (:mod:`graphsub.cost.ort_fusion`, the search's default cost model: one-op and conv/matmul
  chain timings) on the candidate's graph (a peer's output is imported; its contrib ops are opaque nodes, timed
  alone);
* **after**: ``ort-kernels`` (:mod:`graphsub.cost.ort_kernels`: the kernels of onnxruntime's own optimized graph,
  each timed alone), raw (scale 1, no per-kernel term) and calibrated.

Reported per model: Spearman's rho and Kendall's tau between predicted and measured speedups, the share of
candidate pairs ordered as measured (pairs measured within 2% of each other not counted), and the regret of
each model's pick (measured speedup of the best candidate / of the candidate the cost model ranks first).  The
calibration (:data:`graphsub.cost.ort_kernels.CALIBRATION`) is fitted on the originals: ``measured ms - call
overhead ~ scale * sum of kernel ms + per_kernel_ms * kernels``.

Run alone on the machine (it times):
    .venv/bin/python experiments/cost/cost_ranking.py --models bert.dynamo.b1,vit.ts.b1 --threads all
Writes experiments/results/cost_ranking.{json,md} (``--refit`` re-scores the recorded runs without timing).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.cost.calibrate import pairwise_agreement, spearman

OUT = Path(__file__).resolve().parents[1] / "results"
SUITE = Path(os.environ.get("GRAPHSUB_SUITE_DIR", Path.home() / ".cache" / "graphsub" / "suite"))
TIE = 0.02


def kendall(a: list[float], b: list[float]) -> float:
    pairs = [(i, j) for i in range(len(a)) for j in range(i + 1, len(a))]
    if not pairs:
        return math.nan
    s = sum(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) for i, j in pairs)
    return float(s / len(pairs))


def _before_cost(cm: Any, cand: Any, data: bytes) -> float:
    import onnx

    from graphsub.frontends.onnx_import import from_onnx

    g = cand.graph if cand is not None and cand.graph is not None else from_onnx(onnx.load_from_string(data))
    return float(cm.graph_cost(g).time_ms)


def run_model(path: Path, threads: int, pricer: Any, fused: Any) -> dict[str, Any]:
    from graphsub.data import random_inputs
    from graphsub.optimize import optimize

    t0 = time.perf_counter()
    res = optimize(str(path), threads=threads)
    opt_s = time.perf_counter() - t0
    source = path.read_bytes()
    feeds = random_inputs(res.original, 0)
    rows: list[dict[str, Any]] = []
    entries: list[tuple[str, Any, bytes, float, str]] = [("original", None, source, 1.0, "side-by-side")]
    for c in res.candidates:
        if c.same_as or not c.verified:
            continue
        if c.speedup is not None:
            entries.append((c.name, c, c.data, c.speedup, "side-by-side"))
        elif c.screen_ratio is not None:
            entries.append((c.name, c, c.data, c.screen_ratio, "screening"))
    for name, cand, data, measured, how in entries:
        row: dict[str, Any] = {"candidate": name, "measured_speedup": measured, "measured_by": how}
        try:
            row["before_ms"] = _before_cost(fused, cand, data) if cand is not None else float(
                fused.graph_cost(res.original).time_ms)
        except Exception as e:  # the before model cannot price it: say so
            row["before_ms"], row["before_error"] = None, f"{type(e).__name__}: {e}"[:200]
        try:
            p = pricer.price(data, feeds)
            row.update(after_sum_ms=p.sum_ms, kernels=len(p.kernels), overhead_ms=p.overhead_ms,
                       kernel_counts=p.counts(), unpriced=p.unpriced, price_s=p.seconds)
        except Exception as e:
            row["after_sum_ms"], row["after_error"] = None, f"{type(e).__name__}: {e}"[:200]
        rows.append(row)
    orig_ms = res.latency_ms["all"]["before"] if res.latency_ms else None
    return {"model": path.name.removesuffix(".onnx"), "threads": threads, "optimize_s": opt_s,
            "chosen": res.chosen, "original_ms": orig_ms, "rows": rows}


def score(rec: dict[str, Any], key: str, calib: tuple[float, float] | None = None,
          side_by_side: bool = False) -> dict[str, Any]:
    """Ranking quality of one cost column over one model's candidates (predicted speedup = cost(orig)/cost(c));
    ``side_by_side``: only the candidates timed in the side-by-side rounds (not those the screening dropped)."""
    rows = [r for r in rec["rows"] if r.get(key) is not None
            and (not side_by_side or r["measured_by"] == "side-by-side")]
    if len(rows) < 2 or rows[0]["candidate"] != "original":
        return {"n": len(rows)}

    def cost(r: dict[str, Any]) -> float:
        if calib is None:
            return float(r[key])
        return calib[0] * r[key] + calib[1] * r["kernels"] + r["overhead_ms"]

    base = cost(rows[0])
    pred = [base / cost(r) if cost(r) > 0 else math.inf for r in rows]
    meas = [float(r["measured_speedup"]) for r in rows]
    ok, n = pairwise_agreement(pred, meas, tol=TIE)
    pick = max(range(len(rows)), key=lambda i: pred[i])
    rho = spearman(pred, meas) if len(rows) >= 3 else math.nan
    return {"n": len(rows), "spearman": rho, "kendall": kendall(pred, meas),
            "pairs_ok": ok, "pairs": n, "pick": rows[pick]["candidate"], "regret": max(meas) / meas[pick]}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="*.b1", help="suite model names or globs, comma-separated")
    ap.add_argument("--threads", default="all")
    ap.add_argument("--name", default="cost_ranking")
    ap.add_argument("--refit", action="store_true", help="only re-fit and re-score the recorded runs")
    args = ap.parse_args()
    from graphsub.cost.env import all_cores
    from graphsub.cost.ort_fusion import FusedMeasuredCostModel
    from graphsub.cost.ort_kernels import OrtKernelPricer, fit_calibration

    threads = all_cores() if args.threads == "all" else int(args.threads)
    out_json = OUT / f"{args.name}.json"
    recs: list[dict[str, Any]] = []
    load_avg: Any = os.getloadavg()
    if args.refit:  # the recorded runs and the load they were timed under
        old = json.loads(out_json.read_text())
        recs, load_avg = old["models"], old["load_avg"]
    else:
        names = sorted(p.name.removesuffix(".onnx") for p in SUITE.glob("*.onnx"))
        chosen = [n for n in names if any(fnmatch.fnmatch(n, pat) for pat in args.models.split(","))]
        pricer = OrtKernelPricer(threads=threads)
        fused = FusedMeasuredCostModel(threads=threads, progress=False)
        for n in chosen:
            print(f"{n} ...", flush=True)
            try:
                recs.append(run_model(SUITE / f"{n}.onnx", threads, pricer, fused))
            except Exception as e:
                recs.append({"model": n, "threads": threads, "error": f"{type(e).__name__}: {e}"[:300], "rows": []})
            print(json.dumps({k: v for k, v in recs[-1].items() if k != "rows"}), flush=True)
    points = [(r["rows"][0]["after_sum_ms"], r["rows"][0]["kernels"], r["original_ms"] - r["rows"][0]["overhead_ms"])
              for r in recs if r.get("original_ms") and r["rows"] and r["rows"][0].get("after_sum_ms") is not None]
    calib = fit_calibration(points)
    for r in recs:
        r["score"] = {"before": score(r, "before_ms"), "after_raw": score(r, "after_sum_ms"),
                      "after": score(r, "after_sum_ms", calib),
                      "before_finalists": score(r, "before_ms", side_by_side=True),
                      "after_raw_finalists": score(r, "after_sum_ms", side_by_side=True)}
    summary: dict[str, Any] = {}
    for col in ("before", "after_raw", "after", "before_finalists", "after_raw_finalists"):
        s = [r["score"][col] for r in recs if "score" in r and "spearman" in r["score"][col]]
        summary[col] = {
            "models": len(s),
            "median_spearman": statistics.median(x["spearman"] for x in s if not math.isnan(x["spearman"]))
            if any(not math.isnan(x["spearman"]) for x in s) else None,
            "pairs_ok": sum(x["pairs_ok"] for x in s), "pairs": sum(x["pairs"] for x in s),
            "geomean_regret": math.exp(statistics.fmean(math.log(x["regret"]) for x in s)) if s else None,
            "exact_picks": sum(x["regret"] <= 1 + 1e-9 for x in s)}
    fit_err = [abs(calib[0] * s + calib[1] * n - m) / m for s, n, m in points if m > 0]
    raw_err = [abs(s - m) / m for s, _, m in points if m > 0]
    doc = {"machine": platform.processor() or platform.machine(), "load_avg": load_avg, "threads": threads,
           "calibration": {"scale": calib[0], "per_kernel_ms": calib[1], "points": len(points),
                           "median_abs_rel_error": statistics.median(fit_err) if fit_err else None,
                           "median_abs_rel_error_raw": statistics.median(raw_err) if raw_err else None},
           "summary": summary, "models": recs}
    OUT.mkdir(exist_ok=True)
    out_json.write_text(json.dumps(doc, indent=1, default=str))
    lines = [f"# Cost models' within-model ranking of optimize's candidates ({threads} thread(s))", "",
             f"calibration on the originals' latency: scale {calib[0]:.3f}, per kernel {calib[1] * 1e3:.1f} us "
             f"({len(points)} originals; median |error| {_pct(doc['calibration']['median_abs_rel_error'])}, "
             f"raw sum {_pct(doc['calibration']['median_abs_rel_error_raw'])})", "",
             "Columns: *before* = `fused`, *after_raw* = ORT kernels summed, *after* = calibrated; *_finalists*: only "
             "the candidates timed side by side (5 rounds), not those ranked by the 3 screening rounds. Pairs "
             f"measured within {TIE:.0%} of each other are not counted.", "",
             "| cost model | models | median Spearman | pairs ordered right | picks = measured best | "
             "geomean regret |", "|---|---|---|---|---|---|"]
    for col, s in summary.items():
        rho = f"{s['median_spearman']:.2f}" if s["median_spearman"] is not None else "-"
        reg = f"{s['geomean_regret']:.3f}" if s["geomean_regret"] is not None else "-"
        lines.append(f"| {col} | {s['models']} | {rho} | {s['pairs_ok']}/{s['pairs']} | {s['exact_picks']} | {reg} |")
    lines += ["", "| model | candidates | before rho | after rho | before pick | after pick | measured best |",
              "|---|---|---|---|---|---|---|"]
    for r in recs:
        if "score" not in r or not r["rows"]:
            lines.append(f"| {r['model']} | error: {r.get('error', '')} | | | | | |")
            continue
        b, a = r["score"]["before"], r["score"]["after"]
        best = max(r["rows"], key=lambda x: x["measured_speedup"])

        def f(x: dict[str, Any]) -> str:
            return "-" if "spearman" not in x or math.isnan(x["spearman"]) else f"{x['spearman']:.2f}"

        lines.append(f"| {r['model']} | {len(r['rows'])} | {f(b)} | {f(a)} | {b.get('pick', '-')} | "
                     f"{a.get('pick', '-')} | {best['candidate']} ({best['measured_speedup']:.3f}x) |")
    (OUT / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
