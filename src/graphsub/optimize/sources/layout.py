"""The ``layout`` source: ``layout`` (the original) and ``X+layout`` (each candidate ``X``) with their channels-last
MLPs (ConvNeXt's ``Transpose -> LayerNorm -> MatMul -> GELU -> MatMul -> Transpose``) written channels-first,
MatMuls as 1x1 convolutions, so that onnxruntime keeps its NCHWc layout through them
(:mod:`graphsub.frontends.onnx_layout`); only when the original has such a region (the other candidates come from
it and none of the passes makes one).

A derived source: turns 40 -- before the peers run, so that a budget the peers use up cannot drop the largest CNN
gain -- and 80 (the peers' candidates), each on the candidates made since its last turn. No estimate (cheap:
nothing is planned for it); each rewrite needs :data:`LAYOUT_EST_S` left before the tail, else it is skipped with a
note. A rewrite that fails (a model over protobuf's 2 GB) is a note, and ends the source.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from graphsub.optimize.candidates import ORIGINAL, Candidate
from graphsub.optimize.sources.base import Context, Source, register
from graphsub.search.base import Step

LAYOUT_RULE = "layout_channels_first_mlp"
LAYOUT_EST_S = 1.0  # one rewrite of a ConvNeXt-T-sized file (110 MB): parse, rewrite, serialize
_DONE = "no layout"  # its state once the original has no such region or a rewrite failed


def make(ctx: Context, seconds: float) -> None:
    """Add ``layout`` / ``X+layout`` for the original and each candidate not seen by an earlier turn."""
    from graphsub.frontends.onnx_layout import rewrite_bytes

    if ctx.state.get("layout") == _DONE:
        return
    for cand in ctx.fresh("layout"):
        base, data, steps = (ORIGINAL, ctx.source, ()) if cand is None else (cand.name, cand.data, cand.steps)
        name = "layout" if cand is None else f"{base}+layout"
        if ctx.left(LAYOUT_EST_S) < LAYOUT_EST_S:
            ctx.skipped(name)
            continue
        t = time.perf_counter()
        try:
            got = rewrite_bytes(data if isinstance(data, bytes) else Path(data).read_bytes())
        except Exception as e:  # an optional candidate never fails the call (e.g. a model over protobuf's 2 GB)
            ctx.portfolio.notes.append(f"{name}: not made ({type(e).__name__}: {e})")
            ctx.state["layout"] = _DONE
            return
        if got is None:
            if cand is None:
                ctx.state["layout"] = _DONE
                return
            continue
        blob, regions = got
        new = tuple(Step(LAYOUT_RULE, (), math.nan) for _ in range(regions))
        ctx.add("layout", Candidate(name, blob, None, base, steps + new, time.perf_counter() - t))


LAYOUT = register(Source("layout", make, turns=(40, 80), applies=lambda ctx: ctx.sources.layout))

__all__ = ["LAYOUT", "LAYOUT_EST_S", "LAYOUT_RULE", "make"]
