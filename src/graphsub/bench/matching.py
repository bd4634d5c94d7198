"""Rule-matching measurements: matches per rule per model, full vs incremental re-matching."""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from graphsub import zoo
from graphsub.rules.apply import apply
from graphsub.rules.match import find_matches, rematch
from graphsub.rules.rule import Rule


def match_counts(models: list[str], rules: list[Rule]) -> dict[str, Any]:
    """Per model: matches per rule (non-zero ones), total, and enumeration time."""
    out: dict[str, Any] = {}
    for name in models:
        g = zoo.get(name)
        t0 = time.perf_counter()
        counts = {r.name: len(find_matches(g, r)) for r in rules}
        seconds = time.perf_counter() - t0
        out[name] = {"num_ops": g.num_ops, "total": sum(counts.values()), "seconds": seconds,
                     "per_rule": {k: v for k, v in counts.items() if v}}
    return out


def distinct_results(model: str, rules: list[Rule]) -> dict[str, int]:
    """Matches; matches up to mirror images (same rule, same node set: OCGGS prunes symmetric
    rules this way); and distinct graphs they produce."""
    g = zoo.get(model)
    matches = [m for r in rules for m in find_matches(g, r)]
    hashes = {apply(g, m).graph.structural_hash() for m in matches}
    unordered = {(m.rule.name, m.node_ids) for m in matches}
    return {"matches": len(matches), "unordered": len(unordered), "distinct_graphs": len(hashes)}


def incremental(model: str, rules: list[Rule], steps: int = 10, seed: int = 0) -> dict[str, Any]:
    """Apply ``steps`` random matches one after the other; time a full re-match and the
    incremental :func:`rematch` after each step (medians), and check they agree."""
    g = zoo.get(model)
    matches = [m for r in rules for m in find_matches(g, r)]
    rng = random.Random(seed)
    full_t, inc_t, agree = [], [], True
    for _ in range(steps):
        if not matches:
            break
        g = apply(g, rng.choice(matches)).graph
        t0 = time.perf_counter()
        inc = rematch(g, rules, matches)
        t1 = time.perf_counter()
        full = [m for r in rules for m in find_matches(g, r)]
        t2 = time.perf_counter()
        inc_t.append(t1 - t0)
        full_t.append(t2 - t1)
        agree &= sorted(m.key for m in inc) == sorted(m.key for m in full)
        matches = inc
    return {"model": model, "steps": len(full_t), "full_rematch_s": statistics.median(full_t),
            "incremental_rematch_s": statistics.median(inc_t), "agree": agree,
            "speedup": statistics.median(full_t) / statistics.median(inc_t)}


__all__ = ["distinct_results", "incremental", "match_counts"]
