"""Which rule families can fire on training graphs (issue 22, "must show").

A training graph (:mod:`graphsub.training`) holds its trained weights as *inputs*: their values change every step,
so no rule may fold a transform of them into a constant. A rule whose source pattern has a weight variable
(``p.weight(...)``, bound only to weight-only values) therefore never matches a trained weight in the joint graph; it
can still match a constant (a scalar, a frozen batch-norm statistic). Through the ``forward-first`` candidate
(:func:`graphsub.optimize.training.forward_first`) the same rules fire on the forward graph, with the weight
transform kept as an op of every step and differentiated.

Static part: per rule set in ``default``, how many rules have a weight variable (never on trained weights in the
joint graph) and how many do not (any graph). Dynamic part: the rules applied by TASO's search (default rules,
``fused[min]``) on the joint graph and on the forward graph (the forward-first candidate) of the four training-bench
models, and the substitutions of the candidates chosen in ``experiments/results/training_bench.json``. Writes
``experiments/results/training_rules.json``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from graphsub.bench.training_run import prepare
from graphsub.cost import get_model
from graphsub.rules.library import SETS, get_set, resolve_rules
from graphsub.search import Budget, search
from graphsub.training import build_training

OUT = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="squeezenet,encoder,resnet50,inception_v3",
                    help="training-bench models whose joint and forward graphs are searched ('' for none)")
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per search")
    ap.add_argument("--cost", default="fused[min]", help="the cost model optimize uses")
    args = ap.parse_args()
    static = {}
    for name in ("builtin", "taso-pb", "metaflow", "algebra", "cpu", "ort", "ort-spelling"):
        rules = get_set(name)
        weighted = [r.name for r in rules if any(v.weight for v in r.source.vars)]
        static[name] = {"description": SETS[name][0], "rules": len(rules), "with_weight_variable": len(weighted),
                        "any_graph": len(rules) - len(weighted), "examples_weight_only": weighted[:8]}
        print(f"{name:14s} {len(rules):4d} rules: {len(rules) - len(weighted):4d} can match trained values, "
              f"{len(weighted):4d} need a weight-only operand")
    fired: dict[str, Counter[str]] = {}
    for name in args.models.split(",") if args.models else ():
        case = prepare(name, batch=8)
        joint_g, _ = build_training(case.forward)
        cm = get_model(args.cost, threads=1, progress=False)
        rules = resolve_rules("default")
        res = search(joint_g, rules, cm, Budget(time_s=args.budget), 0, algo="taso")
        fired[f"{name} / joint graph"] = Counter(s.rule for s in res.sequence)
        fwd = search(case.forward, rules, cm, Budget(time_s=args.budget), 0, algo="taso")
        fired[f"{name} / forward-first"] = Counter(s.rule for s in fwd.sequence)
    bench = OUT / "training_bench.json"
    if bench.exists():
        for case in json.loads(bench.read_text())["cases"]:
            key = f"{case['model']} / {case['runtime']} {case['threads']}t / chosen {case.get('chosen', '')}"
            fired.setdefault(key, Counter()).update(case["applied"])
    for k, v in fired.items():
        print(k, dict(v))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "training_rules.json").write_text(json.dumps({"static": static, "fired": {k: dict(v) for k, v in
                                                                                        fired.items()}}, indent=2))


if __name__ == "__main__":
    main()
