"""The ``eqsat`` source: equality saturation over the call's rules (a different search from the main one, often a
different graph), priced op by op (``measured[min]``: the pipeline's ``search_fn`` picks it for ``algo="eqsat"``).

Estimate: the config's ``eqsat_s`` (5 s by default); it asks for that much, cut to leave the tail and the planned
sources after it (the peers and the searches on top of them) their time; at least
:data:`~graphsub.optimize.budget.EQSAT_MIN_S`. Turn 20 (after a training target's sources, before the passes over
candidates); drop rank :data:`~graphsub.optimize.budget.DROP_EQSAT` (left out after the searches on top of the peers).
"""

from __future__ import annotations

from graphsub.optimize.budget import DROP_EQSAT, EQSAT_MIN_S
from graphsub.optimize.candidates import ORIGINAL
from graphsub.optimize.sources.base import Context, Source, register


def make(ctx: Context, seconds: float) -> None:
    """Add ``eqsat``: equality saturation on the original for ``seconds`` (nothing when it changes nothing)."""
    ctx.attempt("eqsat", "eqsat", lambda: ctx.search("eqsat", ORIGINAL, ctx.ref, seconds, "eqsat"))


EQSAT = register(Source("eqsat", make, turns=(20,), estimate_s=lambda ctx: ctx.sources.eqsat_s,
                        applies=lambda ctx: ctx.sources.eqsat_s > 0, min_s=EQSAT_MIN_S, drop=DROP_EQSAT, graphs=True))

__all__ = ["EQSAT", "make"]
