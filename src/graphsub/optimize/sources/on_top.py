"""The ``peer+search`` source: ``PEER+search``, graphsub's search (TASO backtracking with the call's rules and cost)
on top of each peer's output that graphsub could import.

Estimate: the config's ``on_top_s`` (2 s by default) for each peer; each search asks for ``on_top_s`` and needs
:data:`~graphsub.optimize.budget.ON_TOP_MIN_S` left before the tail, else it is skipped with a note. Turn 60 (after
the peers); drop rank :data:`~graphsub.optimize.budget.DROP_ON_TOP` (the first the planner leaves out).
"""

from __future__ import annotations

import functools

from graphsub.optimize.budget import DROP_ON_TOP, ON_TOP_MIN_S
from graphsub.optimize.sources.base import Context, Source, register


def make(ctx: Context, seconds: float) -> None:
    """Add ``PEER+search`` for each peer candidate with a graph not seen yet."""
    for cand in ctx.fresh("peer+search", lambda c: ctx.made_by.get(c.name) == "peers" and c.graph is not None,
                          original=False):
        assert cand is not None and cand.graph is not None
        graph, name = cand.graph, f"{cand.name}+search"
        budget_s = ctx.left(ctx.sources.on_top_s)
        if budget_s < ON_TOP_MIN_S:
            ctx.skipped(name)
            continue
        ctx.attempt("peer+search", name, functools.partial(ctx.search, name, cand.name, graph, budget_s, "taso"))


ON_TOP = register(Source("peer+search", make, turns=(60,),
                         estimate_s=lambda ctx: ctx.sources.on_top_s * len(ctx.sources.peers),
                         applies=lambda ctx: ctx.sources.on_top_s > 0 and bool(ctx.sources.peers),
                         min_s=ON_TOP_MIN_S, drop=DROP_ON_TOP, label="searches on top of the peers",
                         each_s=lambda ctx: ctx.sources.on_top_s))

__all__ = ["ON_TOP", "make"]
