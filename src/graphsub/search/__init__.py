"""Search algorithms behind one interface.

``search(graph, rules, cost, budget, seed, algo=...)`` with ``algo`` in :data:`ALGORITHMS`:

============  ===========================================================================
``greedy``    steepest descent: best strictly improving substitution until none improves
``taso``      TASO/MetaFlow cost-based backtracking (alpha, hash dedup, size cap)
``metaflow``  MetaFlow: flow-based recursive split, backtracking per part, local search
``enum``      ENU: every sequence up to K (exact, exponential)
============  ===========================================================================

>>> from graphsub import zoo
>>> from graphsub.cost import get_model
>>> from graphsub.rules import get_set
>>> r = search(zoo.get("resnet", blocks=1), get_set("builtin"), get_model("roofline:v100"),
...            Budget(time_s=10, k=3), algo="greedy")
>>> r.best_cost <= r.initial_cost
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphsub.cost.base import SumCostModel
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.backtrack import backtrack
from graphsub.search.base import Budget, SearchFn, SearchResult, Step
from graphsub.search.enumerate import enumerate_all
from graphsub.search.greedy import greedy
from graphsub.search.metaflow import metaflow, split_graph

ALGORITHMS: dict[str, SearchFn] = {
    "greedy": greedy,
    "taso": backtrack,
    "metaflow": metaflow,
    "enum": enumerate_all,
}


def search(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget | None = None, seed: int = 0,
           *, algo: str = "taso", **params: Any) -> SearchResult:
    """Run search algorithm ``algo`` (see :data:`ALGORITHMS`); ``params`` go to the algorithm."""
    fn = ALGORITHMS.get(algo)
    if fn is None:
        raise GraphsubError(f"unknown search algorithm {algo!r}; known: {', '.join(ALGORITHMS)}")
    return fn(graph, list(rules), cost, budget or Budget(), seed, **params)


__all__ = ["ALGORITHMS", "Budget", "SearchResult", "Step", "search", "split_graph"]
