"""Verify every rule of every set numerically; write experiments/results/rule_verification.json.
Run: .venv/bin/python experiments/rules/rule_verification.py"""

from __future__ import annotations

import json
import time
from pathlib import Path

from graphsub.rules.library import get_set, set_names
from graphsub.rules.soundness.numeric import verify_rule

OUT = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    seen: dict[str, dict[str, object]] = {}
    per_set: dict[str, dict[str, object]] = {}
    t0 = time.perf_counter()
    for s in set_names():
        rules = get_set(s)
        for r in rules:
            if r.name not in seen:
                rep = verify_rule(r)
                seen[r.name] = {"passed": rep.passed, "exact": r.exact, "mode": rep.mode,
                                "examples": rep.examples, "reason": rep.reason, "why_not_exact": r.reason,
                                "origin": r.origin}
        rows = [seen[r.name] for r in rules]
        per_set[s] = {"rules": len(rules), "exact": sum(bool(x["exact"]) for x in rows),
                      "exact_passed": sum(bool(x["exact"] and x["passed"]) for x in rows),
                      "not_exact": sorted(r.name for r in rules if not r.exact)}
    result = {"seconds": time.perf_counter() - t0, "sets": per_set, "rules": seen}
    (OUT / "rule_verification.json").write_text(json.dumps(result, indent=2) + "\n")
    for s, v in per_set.items():
        print(f"{s:18} rules={v['rules']:4} exact={v['exact']:4} exact&passed={v['exact_passed']:4} "
              f"not exact={len(v['not_exact'])}")  # type: ignore[arg-type]
    bad = [k for k, v in seen.items() if v["exact"] and not v["passed"]]
    print(f"{len(seen)} distinct rules verified in {result['seconds']:.1f}s; exact rules failing: {bad or 'none'}")
    for k, v in seen.items():
        if not v["exact"]:
            print(f"  not exact: {k}: {v['why_not_exact']} (verification: {v['reason']})")


if __name__ == "__main__":
    main()
