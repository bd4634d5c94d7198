"""GPU cost model on the lent CUDA machine: cold/warm profiling per zoo model, per-op sums vs eager
end-to-end GPU time for each model and rewritten variant (rank correlation), and the OCGGS
Figure-1 effect (merging/enlarging convs) as measured on the GPU.

Needs torch with CUDA; writes OUT/cuda_costs.json (default experiments/results).
Run: python experiments/cost/cuda_costs.py [--out DIR] [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from graphsub import zoo
from graphsub.cost import get_model
from graphsub.cost.calibrate import spearman
from graphsub.cost.cuda import e2e_ms, run_graph
from graphsub.cost.variants import merge_siblings, roundtrip
from graphsub.rules.library import get_set
from graphsub.search import Budget, search

MODELS = ("inception_v3", "resnet", "resnext50", "nasnet_a", "bert", "sru", "nasrnn", "squeezenet", "resnet50",
          "vgg16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--search", default="resnet:blocks=2,inception_v3,nasrnn",
                    help="zoo models to search with taso + measured:cuda (ocggs157, K=10)")
    ap.add_argument("--search-time", type=float, default=60.0)
    args = ap.parse_args()
    cache = Path(args.out) / "cuda_op_times.sqlite"
    rows, profile = [], []
    for name in args.models.split(","):
        g = zoo.get(name)
        variants = {"base": g, "unfused": roundtrip(g), "merge": merge_siblings(g),
                    "merge_enlarge": merge_siblings(g, enlarge=True)}
        for phase in ("cold", "warm"):
            m = get_model("measured:cuda", cache=cache, progress=False)
            t = time.perf_counter()
            s = m.profile(g)
            profile.append({"model": name, "phase": phase, "keys": s.signatures, "hits": s.hits,
                            "misses": s.misses, "seconds": time.perf_counter() - t})
        for variant, v in variants.items():
            if v is None or (variant != "base" and v.structural_hash() == g.structural_hash()):
                continue
            m = get_model("measured:cuda", cache=cache, progress=False)
            pred = m.scalar(m.graph_cost(v))
            roof = get_model("roofline:h100")
            try:
                run_graph(v)()  # also checks every op runs
                meas = e2e_ms(v)
            except Exception as e:
                rows.append({"model": name, "variant": variant, "error": str(e)})
                continue
            rows.append({"model": name, "variant": variant, "num_ops": v.num_ops, "predicted_ms": pred,
                         "roofline_h100_ms": roof.scalar(roof.graph_cost(v)), "eager_ms": meas,
                         "ratio": meas / pred if pred else None, "fallback_ops": m.fallbacks})
            print(f"{name}/{variant}: predicted {pred:.3f} ms, eager {meas:.3f} ms", flush=True)
    ok = [r for r in rows if "error" not in r]
    per_model_changes = []
    for r in ok:
        base = next((b for b in ok if b["model"] == r["model"] and b["variant"] == "base"), None)
        if base and r is not base:
            per_model_changes.append({"model": r["model"], "variant": r["variant"],
                                      "predicted_change": r["predicted_ms"] / base["predicted_ms"] - 1,
                                      "eager_change": r["eager_ms"] / base["eager_ms"] - 1})
    agree = sum((c["predicted_change"] < 0) == (c["eager_change"] < 0) for c in per_model_changes)
    searches = []
    for spec in filter(None, args.search.split(",")):
        name, _, kw = spec.partition(":")
        g = zoo.get(name, **{k: int(v) for k, v in (p.split("=") for p in filter(None, kw.split(",")))})
        for cost in ("measured:cuda", "roofline:h100"):
            r = search(g, get_set("ocggs157"), get_model(cost, cache=cache, progress=False),
                       Budget(time_s=args.search_time, k=10), algo="taso")
            searches.append({"model": spec, "cost": cost, **{k: v for k, v in r.to_dict().items() if k != "trace"}})
            print(f"search {spec} {cost}: {r.initial_cost:.4f} -> {r.best_cost:.4f} ms "
                  f"({[s.rule for s in r.sequence]})", flush=True)
    result = {
        "meta": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
                 "cpus": os.cpu_count()},
        "spearman_measured": spearman([r["predicted_ms"] for r in ok], [r["eager_ms"] for r in ok]),
        "spearman_roofline_h100": spearman([r["roofline_h100_ms"] for r in ok], [r["eager_ms"] for r in ok]),
        "variant_direction_agreement": [agree, len(per_model_changes)],
        "profile": profile, "rows": rows, "changes": per_model_changes, "searches": searches,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cuda_costs.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("meta", "spearman_measured", "spearman_roofline_h100",
                                             "variant_direction_agreement")}, indent=2))


if __name__ == "__main__":
    main()
