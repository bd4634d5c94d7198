"""ENU: brute-force enumeration of every substitution sequence of length <= K (OCGGS's exact
baseline).  Depth-first, no hash set and no alpha, as in the authors' code -- so equal graphs
reached by different orders are all expanded; the optimum over all sequences is exact."""

from __future__ import annotations

from collections.abc import Sequence

from graphsub.cost.base import SumCostModel
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, ProgressFn, Search, SearchResult


def enumerate_all(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget,
                  seed: int = 0, *, progress: ProgressFn | None = None) -> SearchResult:
    """Exhaustive search up to ``budget.k`` (required) substitutions."""
    if budget.k is None:
        raise GraphsubError("ENU needs a maximum sequence length: Budget(k=...)")
    return Search("enum", graph, rules, cost, budget, dedup=False, progress=progress).depth_first()


__all__ = ["enumerate_all"]
