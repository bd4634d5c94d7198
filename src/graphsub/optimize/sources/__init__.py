"""The candidate sources of :func:`graphsub.optimize.optimize`'s portfolio, one module per family, each registering
its sources (:func:`register`) when imported; :func:`graphsub.optimize.portfolio.collect` runs them turn by turn
(:func:`run`) within the planner's shares (:func:`graphsub.optimize.budget.plan_parts`).

| source | module | estimate (planned) | turns | drop rank |
| --- | --- | --- | --- | --- |
| ``backward-rules`` | :mod:`.training` | 0.5 s + 50 ms per op, at most 20% of the budget | 10 | never |
| ``forward-first`` | :mod:`.training` | ``forward_s`` (16% of the budget) | 11 | never |
| ``eqsat`` | :mod:`.eqsat` | ``eqsat_s`` (5 s) | 20 | 2 |
| ``search-ort`` | :mod:`.ort_search` | ``ort_search_s`` (10 s) | 25 | 2 |
| ``spelling`` (``X+spelling``) | :mod:`.spelling` | none: while time is left | 30, 70 | never |
| ``layout`` (``layout``, ``X+layout``) | :mod:`.layout` | none: 1 s a rewrite while time is left | 40, 80 | never |
| ``peers`` (``PEER``) | :mod:`.peers` | ``PEERS_EST_S`` (8 s) for all | 50 | 3 |
| ``peer+search`` (``PEER+search``) | :mod:`.on_top` | ``on_top_s`` (2 s) per peer | 60 | 1 |

The training sources apply only to a training target (:class:`.training.TrainingTarget`); the others to every
model, when their settings ask for them. Adding a source is one module that calls :func:`register` (see
docs/guides/candidate-source.md) and one import line below.
"""

from __future__ import annotations

# each module registers its sources when imported
from graphsub.optimize.sources import eqsat, layout, on_top, ort_search, peers, spelling, training  # noqa: F401
from graphsub.optimize.sources.base import (
    Context,
    SearchFn,
    Source,
    Sources,
    parts,
    register,
    registered,
    run,
    unregister,
)

__all__ = ["Context", "SearchFn", "Source", "Sources", "parts", "register", "registered", "run", "unregister"]
