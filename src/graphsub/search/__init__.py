"""Search algorithms behind one interface.

``search(graph, rules, cost, budget, seed, algo=...)`` with ``algo`` in :data:`ALGORITHMS`:

============  ===========================================================================
``greedy``    steepest descent: best strictly improving substitution until none improves
``taso``      TASO/MetaFlow cost-based backtracking (alpha, hash dedup, size cap)
``metaflow``  MetaFlow: flow-based recursive split, backtracking per part, local search
``enum``      ENU: every sequence up to K (exact, exponential)
``pruning``   OCGGS Pruning (Alg. 1): ENU over ordered sequences only (Def. 8; exact, K required)
``dpp``       OCGGS DPP (Alg. 2): Pruning + child substitution sets reused from the parent (exact)
``sampling``  OCGGS Sampling (Alg. 3): Q/2 cheapest + Q/2 further-exploration (eta) per level
``eqsat``     Tensat: equality saturation over the rules, then greedy + exact (ILP) DAG extraction
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
from graphsub.search.base import Budget, ProgressFn, SearchFn, SearchResult, Step
from graphsub.search.enumerate import enumerate_all
from graphsub.search.eqsat.runner import eqsat as eqsat_search
from graphsub.search.greedy import greedy
from graphsub.search.metaflow import metaflow, split_graph
from graphsub.search.ocggs import dpp, pruning
from graphsub.search.order import is_ordered, labels_of
from graphsub.search.sampling import sampling

ALGORITHMS: dict[str, SearchFn] = {
    "greedy": greedy,
    "taso": backtrack,
    "metaflow": metaflow,
    "enum": enumerate_all,
    "pruning": pruning,
    "dpp": dpp,
    "sampling": sampling,
    "eqsat": eqsat_search,
}


def search(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget | None = None, seed: int = 0,
           *, algo: str = "taso", progress: ProgressFn | None = None, **params: Any) -> SearchResult:
    """Run search algorithm ``algo`` (see :data:`ALGORITHMS`); ``params`` go to the algorithm.

    ``progress(elapsed_s, best_cost)`` is called at the start with the initial cost, on every
    improvement of the best cost, and otherwise at most about 5 times a second (a heartbeat; see
    :class:`~graphsub.search.base.Progress`); it does not change the result."""
    fn = ALGORITHMS.get(algo)
    if fn is None:
        raise GraphsubError(f"unknown search algorithm {algo!r}; known: {', '.join(ALGORITHMS)}")
    stop = cost.stop
    try:
        return fn(graph, list(rules), cost, budget or Budget(), seed, progress=progress, **params)
    finally:
        cost.stop = stop  # also when the algorithm raised: the model measures again for the next caller


__all__ = ["ALGORITHMS", "Budget", "ProgressFn", "SearchResult", "Step", "is_ordered", "labels_of", "search",
           "split_graph"]
