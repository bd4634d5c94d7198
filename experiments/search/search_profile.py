"""Where search time goes (matching, applying, hashing, costing, other) for TASO backtracking on
BERT and NasNet-A, from the search's own timers in a plain run; plus the top functions from a
second run under cProfile (whose overhead inflates Python-heavy parts such as hashing, so its
percentages are not used for the breakdown).  Writes
experiments/results/search_profile.json.  Run: .venv/bin/python experiments/search/search_profile.py"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

from graphsub import zoo
from graphsub.cost import get_model
from graphsub.rules.library import get_set
from graphsub.search import Budget, SearchResult, search

OUT = Path(__file__).resolve().parents[1] / "results"


def profile(model: str, expansions: int, rules: str = "ocggs157", cost: str = "roofline:p100") -> dict[str, object]:
    g = zoo.get(model)

    def run() -> SearchResult:
        return search(g, get_set(rules), get_model(cost), Budget(time_s=600, expansions=expansions, k=10), algo="taso")

    r = run()
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    s = r.stats
    parts = {"matching": s.time_match_s, "applying": s.time_apply_s, "hashing": s.time_hash_s, "costing": s.time_cost_s}
    parts["other"] = max(r.wall_time_s - sum(parts.values()), 0.0)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    return {"model": model, "rules": rules, "cost": cost, "expansions": s.expanded, "generated": s.generated,
            "deduplicated": s.deduplicated, "wall_s": r.wall_time_s, "breakdown_s": parts,
            "breakdown_pct": {k: 100 * v / r.wall_time_s for k, v in parts.items()},
            "improvement": r.improvement, "top_functions": buf.getvalue().splitlines()[:40]}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rows = [profile("bert", n), profile("nasnet_a", n)]
    (OUT / "search_profile.json").write_text(json.dumps(rows, indent=2) + "\n")
    for r in rows:
        pct = ", ".join(f"{k} {v:.0f}%" for k, v in r["breakdown_pct"].items())  # type: ignore[attr-defined]
        print(f"{r['model']}: {r['expansions']} expansions, {r['generated']} children in {r['wall_s']:.1f}s: {pct}")


if __name__ == "__main__":
    main()
