"""Greedy: apply the best strictly-improving substitution until none improves (what rule-based
optimizers such as TVM/TensorRT passes do, with a cost model deciding between rules)."""

from __future__ import annotations

from collections.abc import Sequence

from graphsub.cost.base import SumCostModel
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, ProgressFn, Search, SearchResult


def greedy(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
           progress: ProgressFn | None = None) -> SearchResult:
    """Steepest descent; ``seed`` is unused (deterministic: ties go to the first match)."""
    s = Search("greedy", graph, rules, cost, budget, dedup=False, progress=progress)
    state, parent = s.root, None
    while s.can_extend(state) and not s.out_of_budget():
        best = None
        for ch in s.children(state, parent):
            if ch.value < state.value and (best is None or ch.value < best.value):
                best = ch
            if s.out_of_budget():
                break
        if best is None:
            break
        parent, state = state, best
        s.offer(state)
    return s.result()


__all__ = ["greedy"]
