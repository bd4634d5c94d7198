"""Which rule families can fire on training graphs (issue 22, "must show").

A training graph (:mod:`graphsub.training`) holds its trained weights as *inputs*: their values change every step,
so no rule may fold a transform of them into a constant. A rule whose source pattern has a weight variable
(``p.weight(...)``, bound only to weight-only values) therefore never matches a trained weight in the joint graph; it
can still match a constant (a scalar, a frozen batch-norm statistic). Through the ``forward-first`` candidate
(:func:`graphsub.optimize.training.forward_first`) the same rules fire on the forward graph, with the weight
transform kept as an op of every step and differentiated.

Static part: per rule set in ``default``, how many rules have a weight variable (never on trained weights in the
joint graph) and how many do not (any graph). Dynamic part: the rules applied by the searches on the four
training-bench models, from ``benchmarks/results/training_bench.json`` when it exists. Writes
``benchmarks/results/training_rules.json``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from graphsub.rules.library import SETS, get_set

OUT = Path(__file__).parent / "results"


def main() -> None:
    static = {}
    for name in ("builtin", "taso-pb", "metaflow", "algebra", "cpu", "ort", "ort-spelling"):
        rules = get_set(name)
        weighted = [r.name for r in rules if any(v.weight for v in r.source.vars)]
        static[name] = {"description": SETS[name][0], "rules": len(rules), "with_weight_variable": len(weighted),
                        "any_graph": len(rules) - len(weighted), "examples_weight_only": weighted[:8]}
        print(f"{name:14s} {len(rules):4d} rules: {len(rules) - len(weighted):4d} can match trained values, "
              f"{len(weighted):4d} need a weight-only operand")
    fired: dict[str, Counter[str]] = {}
    bench = OUT / "training_bench.json"
    if bench.exists():
        for case in json.loads(bench.read_text())["cases"]:
            key = f"{case['model']} / {case['runtime']} / {case.get('chosen', '')}"
            fired.setdefault(key, Counter()).update(case["applied"])
    for k, v in fired.items():
        print(k, dict(v))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "training_rules.json").write_text(json.dumps({"static": static, "fired": {k: dict(v) for k, v in
                                                                                        fired.items()}}, indent=2))


if __name__ == "__main__":
    main()
