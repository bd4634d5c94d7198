"""Matches of every rule set on the zoo, and full vs incremental re-matching after a substitution.
Writes experiments/results/rule_matches.json.  Run: .venv/bin/python experiments/rules/rule_matches.py"""

from __future__ import annotations

import json
from pathlib import Path

from graphsub import zoo
from graphsub.bench.matching import distinct_results, incremental, match_counts
from graphsub.rules.library import get_set

OUT = Path(__file__).resolve().parents[1] / "results"
SETS = ("ocggs157", "taso151", "default")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    models = zoo.list_models()
    result: dict[str, object] = {"rules_per_set": {s: len(get_set(s)) for s in
                                                   ("builtin", "taso-pb", "taso151", "ocggs157",
                                                    "ocggs157-faithful", "metaflow", "algebra", "cpu",
                                                    "ort", "default")}}
    for s in SETS:
        result[s] = match_counts(models, get_set(s))
    result["distinct_length1"] = {
        f"{m}/{s}": distinct_results(m, get_set(s)) for m in ("nasnet_a", "nasrnn")
        for s in ("ocggs157", "ocggs157-faithful")}
    result["incremental_ocggs157"] = [incremental(m, get_set("ocggs157")) for m in ("nasnet_a", "inception_v3",
                                                                                    "nasrnn", "bert")]
    (OUT / "rule_matches.json").write_text(json.dumps(result, indent=2) + "\n")
    print("rules per set:", result["rules_per_set"])
    for s in SETS:
        print(f"{s}:")
        for m, r in result[s].items():  # type: ignore[attr-defined]
            print(f"  {m:15} ops={r['num_ops']:4} matches={r['total']:5} enumerate {r['seconds'] * 1e3:8.1f} ms")
    for k, v in result["distinct_length1"].items():  # type: ignore[attr-defined]
        print(f"length-1 substitutions {k:28} matches={v['matches']:4} unordered={v['unordered']:4} "
              f"distinct graphs={v['distinct_graphs']:4}")
    for r in result["incremental_ocggs157"]:  # type: ignore[attr-defined]
        print(f"incremental {r['model']:13} full {r['full_rematch_s'] * 1e3:7.1f} ms  incremental "
              f"{r['incremental_rematch_s'] * 1e3:6.2f} ms  ({r['speedup']:.0f}x, agree={r['agree']})")


if __name__ == "__main__":
    main()
