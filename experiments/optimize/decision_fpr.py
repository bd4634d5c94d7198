"""False positives of the decision "faster": twins that ONNX Runtime runs identically, decided again and again.

For each suite model (``graphsub bench suite --build`` first), the candidate is the original under another spelling
that ONNX Runtime runs identically: an Identity inserted on the first input, which ORT_ENABLE_ALL removes (the
script checks that the two optimized graphs have the same fingerprint, :mod:`graphsub.frontends.ort_signature`).
Every decision compares the original against its twin -- what a noise-driven "faster" would pass -- with

* ``decide``: :func:`graphsub.optimize.decide.compare`, as ``graphsub optimize`` confirms a leader (fresh session
  groups, an A/A control, a t-test over the groups; ``alpha`` 0.05, ``min_speedup`` 1.03);
* ``confirm``: :func:`graphsub.optimize.decide.confirm` with its second look always planned (``graphsub optimize``
  plans it where the time is left): the first five groups at half of ``alpha``, five more at the other half when the
  first look is neither faster nor at or below 1.0x;
* ``old``: the rule it replaced (one session a side, seven paired rounds in alternating blocks, faster when the
  median ratio is above 1.03 and the candidate is faster in 80% of the rounds; as many rounds again when the median
  says faster but the share does not), reproduced here for the comparison.

Decisions are interleaved: in every repeat, the models in rotating order, at each thread count, each rule. The
share of decisions declared faster comes with its 95% Clopper-Pearson interval. Run it alone on the machine:

  .venv/bin/python experiments/optimize/decision_fpr.py --repeats 13
  (8 models x 2 thread counts x 13 repeats = 208 decisions per rule; about 45 minutes here with the rules decide and
  old; ``--rules decide,confirm,old`` adds the two-look rule)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import onnx
from onnx import helper
from scipy import stats

from graphsub.bench.suite.measure import make_feeds
from graphsub.cost.env import all_cores
from graphsub.frontends.ort import optimized_model
from graphsub.frontends.ort_signature import signature
from graphsub.optimize import decide
from graphsub.optimize.timing import confirm_timer

SUITE = Path(os.environ.get("GRAPHSUB_SUITE_DIR", Path.home() / ".cache" / "graphsub" / "suite"))
MODELS = ("bert.ts.b1", "distilbert.dynamo.b1", "gpt2.ts.b1", "vit.dynamo.b1", "efficientnet_b0.ts.b1",
          "mobilenet_v3_large.dynamo.b1", "regnet_y_400mf.ts.b1", "lstm.ts.b1")
OUT = Path(__file__).resolve().parents[1] / "results" / "decision_fpr.json"


def twin(path: Path) -> bytes:
    """The model with an Identity on its first input: a different file that ORT_ENABLE_ALL runs identically."""
    m = onnx.load(str(path))
    first = m.graph.input[0].name
    alias = first + "__twin"
    for node in m.graph.node:
        node.input[:] = [alias if i == first else i for i in node.input]
    m.graph.node.insert(0, helper.make_node("Identity", [first], [alias], name="twin_identity"))
    return m.SerializeToString()


def old_rule(original: bytes, candidate: bytes, feeds: dict[str, Any], threads: int,
             budget_ms: float) -> dict[str, Any]:
    """The rule before graphsub.optimize.decide: one fresh session a side, 7 paired rounds in alternating blocks;
    faster iff the median ratio > 1.03 and >= 80% of the rounds faster; 7 more rounds when the median says faster
    but the share does not."""
    a = confirm_timer(original, feeds, threads=threads)
    b = confirm_timer(candidate, feeds, threads=threads)
    before: list[float] = []
    after: list[float] = []

    def rounds(n: int) -> None:
        for r in range(n):
            first, second = ((a, before), (b, after)) if (len(before) + r) % 2 == 0 else ((b, after), (a, before))
            first[1].append(first[0](budget_ms))
            second[1].append(second[0](budget_ms))

    def verdict() -> tuple[float, float, bool]:
        ratios = [x / y for x, y in zip(before, after, strict=True)]
        share = sum(r > 1 for r in ratios) / len(ratios)
        need = len(ratios) if len(ratios) < 5 else math.ceil(0.8 * len(ratios))
        return statistics.median(ratios), share, statistics.median(ratios) > 1.03 and sum(r > 1 for r in ratios) >= need

    rounds(7)
    med, share, faster = verdict()
    if med > 1.03 and not faster:
        rounds(7)
        med, share, faster = verdict()
    return {"speedup": med, "faster_share": share, "rounds": len(before), "faster": faster}


def share_ci(k: int, n: int) -> list[float]:
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return [ci.low, ci.high]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=13)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,all")
    ap.add_argument("--budget-ms", type=float, default=200.0)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--rules", default="decide,old", help="of decide, confirm, old: the rules compared")
    args = ap.parse_args()
    manifest = {e["id"]: e for e in json.loads((SUITE / "manifest.json").read_text())["models"]}
    threads = [all_cores() if t == "all" else int(t) for t in args.threads.split(",")]
    cases = []
    for mid in args.models.split(","):
        entry = manifest[mid]
        path = SUITE / entry["path"]
        data, twin_data = path.read_bytes(), twin(path)
        same = signature(optimized_model(data, threads=1)) == signature(optimized_model(twin_data, threads=1))
        cases.append({"model": mid, "data": data, "twin": twin_data, "feeds": make_feeds(entry["inputs"], 0),
                      "same_after_ort": same})
        print(f"{mid}: the twin runs identically after ORT's optimizations: {same}", flush=True)
    rules = args.rules.split(",")
    rows: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    t0 = time.time()
    for rep in range(args.repeats):
        k = rep % len(cases)
        for case in cases[k:] + cases[:k]:
            for n in threads:
                for rule in rules[rep % len(rules):] + rules[:rep % len(rules)]:
                    t = time.time()
                    if rule in ("decide", "confirm"):
                        makers = decide.session_makers(case["data"], case["twin"], case["feeds"], threads=n)
                        v = decide.compare(*makers, budget_ms=args.budget_ms, min_speedup=decide.MIN_SPEEDUP) \
                            if rule == "decide" else \
                            decide.confirm(*makers, budget_ms=args.budget_ms, min_speedup=decide.MIN_SPEEDUP,
                                           second=lambda need_s: False)
                        rec = {"speedup": v.speedup, "speedup_ci": v.speedup_ci, "aa_ratio": v.aa_ratio,
                               "p_value": v.p_value, "rounds": v.rounds, "groups": v.groups, "faster": v.faster,
                               "look": v.look, "reason": v.reason}
                    else:
                        rec = old_rule(case["data"], case["twin"], case["feeds"], n, args.budget_ms)
                    rows.append({"repeat": rep, "model": case["model"], "threads": n, "rule": rule,
                                 "seconds": round(time.time() - t, 2), **rec})
                    print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("reason",)}), flush=True)
            load.append(os.getloadavg()[0])
    summary: dict[str, Any] = {}
    for rule in rules:
        mine = [r for r in rows if r["rule"] == rule]
        k = sum(r["faster"] for r in mine)
        summary[rule] = {"decisions": len(mine), "declared_faster": k, "share": k / len(mine),
                         "share_ci95": share_ci(k, len(mine)),
                         "by_threads": {str(n): {"decisions": len([r for r in mine if r["threads"] == n]),
                                                 "declared_faster": sum(r["faster"] for r in mine
                                                                        if r["threads"] == n)} for n in threads},
                         "median_speedup": statistics.median(r["speedup"] for r in mine if r["speedup"])}
    doc = {"what": __doc__.split("\n\n")[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
           "minutes": round((time.time() - t0) / 60, 1), "cpus": os.cpu_count(), "threads": threads,
           "load_avg_1min": {"min": min(load), "max": max(load)},
           "models": [{"model": c["model"], "same_after_ort": c["same_after_ort"]} for c in cases],
           "alpha": decide.ALPHA, "min_speedup": decide.MIN_SPEEDUP, "groups": decide.GROUPS,
           "rounds_per_group": decide.ROUNDS_PER_GROUP, "budget_ms": args.budget_ms, "summary": summary,
           "rows": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for rule, s in summary.items():
        lo, hi = s["share_ci95"]
        print(f"{rule}: {s['declared_faster']} of {s['decisions']} twins declared faster "
              f"({s['share']:.1%}, 95% CI {lo:.1%}-{hi:.1%})")


if __name__ == "__main__":
    main()
