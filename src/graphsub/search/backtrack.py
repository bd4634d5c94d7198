"""TASO's cost-based backtracking search (TASO Algorithm 2, MetaFlow Algorithm 1).

A priority queue ordered by cost; popping a graph expands it (one unit of TASO's ``budget``).  A
child is kept iff ``cost < alpha * best``, it has fewer than ``size_cap * |ops(original)|`` ops,
its structural hash is new (acyclicity holds by construction: the matcher rejects matches that
would create a cycle) and, with K set, its sequence is shorter than K.  ``alpha > 1`` lets the
search pass through graphs slightly worse than the best, the "relaxed" part.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from graphsub.cost.base import SumCostModel
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, ProgressFn, Search, SearchResult, State


def backtrack(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
              alpha: float = 1.05, size_cap: float = 2.0, name: str = "taso",
              progress: ProgressFn | None = None) -> SearchResult:
    """TASO backtracking (deterministic: ties broken by insertion order; ``seed`` unused)."""
    s = Search(name, graph, rules, cost, budget, progress=progress)
    cap = size_cap * max(graph.num_ops, 1)
    counter = itertools.count()
    queue: list[tuple[float, int, State, State | None]] = [(s.root.value, next(counter), s.root, None)]
    while queue and not s.out_of_budget():
        _, _, state, parent = heapq.heappop(queue)
        if not s.can_extend(state):
            continue
        for ch in s.children(state, parent):
            s.offer(ch)
            if ch.value < alpha * s.best.value and ch.graph.num_ops < cap:
                heapq.heappush(queue, (ch.value, next(counter), ch, state))
            else:
                s.stats.pruned += 1
            if s.out_of_budget():
                break
    return s.result(alpha=alpha, size_cap=size_cap)


__all__ = ["backtrack"]
