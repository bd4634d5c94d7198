"""Verification for :mod:`graphsub.optimize`: finalize a searched graph, check it against the input,
and bisect a failing substitution sequence to the first step that breaks equivalence.

Node ids are stable across copy-on-write edits, so a sequence found by a search is replayed from the
input graph by finding each step's match again by rule name and matched node ids (:func:`replay`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphsub.errors import ExecutionError, ExportError, GraphsubError, VerificationError
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.base import Step


@dataclass(frozen=True)
class Failure:
    """The first substitution that breaks equivalence (from bisection), or why none was named."""

    step: int  # 1-based position in the sequence; 0 when unknown
    rule: str
    nodes: tuple[int, ...]
    output: str
    max_abs_diff: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rule": self.rule, "nodes": list(self.nodes), "output": self.output,
                "max_abs_diff": self.max_abs_diff if math.isfinite(self.max_abs_diff) else None,
                "message": self.message}


def replay(graph: Graph, rules: Sequence[Rule], steps: Sequence[Step]) -> Graph:
    """Apply ``steps`` to ``graph`` again, re-finding each match by rule name and node ids."""
    from graphsub.rules.apply import apply
    from graphsub.rules.match import find_matches

    by_name = {r.name: r for r in rules}
    g = graph
    for i, step in enumerate(steps, 1):
        rule = by_name.get(step.rule)
        if rule is None:
            raise GraphsubError(f"step {i}: rule {step.rule!r} is not in the rule list")
        match = next((m for m in find_matches(g, rule) if tuple(n for _, n in m.nodes) == tuple(step.nodes)), None)
        if match is None:
            raise GraphsubError(f"step {i}: no match of {step.rule} at nodes {list(step.nodes)} to replay")
        g = apply(g, match).graph
    return g


def finalize(reference: Graph, candidate: Graph, seed: int) -> Graph:
    """``candidate`` with data for every weight (the reference's where shared) and weight-only
    subgraphs folded into constants: what gets exported."""
    from graphsub.data import random_weights
    from graphsub.rules.apply import fold_weights

    weights = random_weights(candidate, seed, known=dict(reference.params))
    return fold_weights(candidate.with_params({k: v for k, v in weights.items() if k in candidate.leaves}))


def check(reference: Graph, candidate: Graph, seeds: Sequence[int], *, rtol: float = 1e-4,
          atol: float = 1e-5, threads: int | None = None) -> tuple[bool, float, str]:
    """Compare ``candidate`` with ``reference`` (both with weight data) on random inputs for every
    seed: ``(equivalent, max abs diff, worst output)``.  A candidate with a different interface, or
    one that cannot be exported or run, fails (the third item then says why)."""
    from graphsub.verify import equivalent

    worst_diff, worst_out = 0.0, ""
    for s in seeds:
        try:
            rep = equivalent(reference, candidate, seed=s, trials=1, rtol=rtol, atol=atol, threads=threads)
        except (VerificationError, ExportError, ExecutionError) as e:
            return False, float("inf"), f"<{type(e).__name__}: {e}>"
        if rep.max_abs_diff >= worst_diff or not rep.equivalent:
            worst_diff, worst_out = max(worst_diff, rep.max_abs_diff), rep.worst_output
        if not rep.equivalent:
            return False, worst_diff, worst_out
    return True, worst_diff, worst_out


def bisect(graph: Graph, reference: Graph, rules: Sequence[Rule], steps: Sequence[Step], seeds: Sequence[int],
           seed: int, **tol: Any) -> Failure:
    """The first step of ``steps`` after which ``graph`` (replayed) no longer matches ``reference``.

    Assumes that the whole sequence fails and the empty one passes; O(log n) verifications.
    """
    lo, hi = 0, len(steps)
    diff, output = float("nan"), ""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            ok, d, o = check(reference, finalize(reference, replay(graph, rules, steps[:mid]), seed), seeds, **tol)
        except GraphsubError as e:
            s = steps[mid - 1]
            return Failure(mid, s.rule, s.nodes, "", float("nan"), f"replaying the sequence failed: {e}")
        if ok:
            lo = mid
        else:
            hi, diff, output = mid, d, o
    s = steps[hi - 1]
    if output == "":  # the full sequence: re-check it for the output name
        with contextlib.suppress(GraphsubError):
            _, diff, output = check(reference, finalize(reference, replay(graph, rules, steps[:hi]), seed), seeds,
                                    **tol)
    return Failure(hi, s.rule, s.nodes, output, diff,
                   f"substitution {hi}/{len(steps)} ({s.rule} at nodes {list(s.nodes)}) breaks output "
                   f"{output!r} (max abs diff {diff:.3g})")


__all__ = ["Failure", "bisect", "check", "finalize", "replay"]
