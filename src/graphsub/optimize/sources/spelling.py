"""The ``spelling`` source: ``X+spelling`` for every candidate ``X`` that is a graphsub graph (the original as
``spelling``): the ``ort-spelling`` rules (:mod:`graphsub.rules.library.ort_spelling`) applied everywhere, which
change only which of ONNX Runtime's own fusions happen (``Add -> LayerNormalization`` spelled with ``Sum``, so that it
stays a ``LayerNormalization``; a peer's ``SkipLayerNormalization`` undone), then the rows layout
(:mod:`graphsub.frontends.onnx_rows`): ``[batch, sequence, hidden]`` activations between attention cores written as
``[batch * sequence, hidden]``, so that onnxruntime's ``Gemm`` nodes need no ``Reshape`` copies.

A derived source: turns 30 (the original, the search's result, a training target's candidates, ``eqsat``,
``search-ort``), 55 (the peers' outputs, before the searches on top of them: a large model's spelled peer output is a
cheap, large win that the searches must not leave without time) and 70 (the searches on top of the peers), each on
the graph candidates made since its last turn. No estimate (cheap: nothing is planned for it): a candidate is not
started once the portfolio's time is spent (only the tail's is left), and a note says so.

An input whose symbolic dims stay free (a decoder with a cache) gets no rows layout: the layout writes its reshape
targets at the imported sizes, is no rule that :mod:`graphsub.optimize.twin` can replay at others, and every such
candidate was refused by the check at other sizes (five on GPT-2 with a cache, 1-2 s each, 2026-11-30); without it
the spelled candidate is made of rules alone and keeps the dims.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

from graphsub.frontends.splice import origin_of
from graphsub.ir.graph import Graph
from graphsub.optimize.candidates import ORIGINAL, Candidate, export_bytes, rewrite_everywhere
from graphsub.optimize.sources.base import Context, Source, Sources, register
from graphsub.search.base import Step

ROWS_RULE = "layout_rows_2d"


def make(ctx: Context, seconds: float) -> None:
    """Add ``X+spelling`` for each graph candidate ``X`` not seen by an earlier turn (see the module docstring)."""
    origin = origin_of(ctx.ref)
    free = origin is not None and origin.free  # symbolic dims left free: no rows layout (module docstring)
    for cand in ctx.fresh("spelling", lambda c: c.graph is not None):
        base, graph, steps = (ORIGINAL, ctx.ref, ()) if cand is None else (cand.name, cand.graph, cand.steps)
        assert graph is not None
        if ctx.spent():
            ctx.skipped(f"{base}+spelling")
            continue
        ctx.attempt("spelling", f"{base}+spelling",
                    functools.partial(spelled, base, graph, steps, ctx.sources, layout=not free, stop=ctx.spent))


def spelled(base: str, graph: Graph, steps: tuple[Step, ...], sources: Sources, layout: bool = True,
            stop: Callable[[], bool] | None = None) -> Candidate | None:
    """``X+spelling``: the ``ort-spelling`` rules everywhere, then (with ``sources.rows`` and ``layout``, where
    graphsub's types show a rank-3 projection) the rows layout of :mod:`graphsub.frontends.onnx_rows`; None when
    neither changes anything. ``stop``: when to give up (default: ``sources.spent``; a turn passes its context's,
    whose tail grows with the candidates made)."""
    t = time.perf_counter()
    stop = sources.spent if stop is None else stop
    layout = layout and sources.rows
    spelled_graph, new = rewrite_everywhere(graph, sources.spelling, stop=stop)
    if not new and not layout:
        return None
    data = export_bytes(spelled_graph)
    if layout and not stop() and _has_rows(spelled_graph):
        rows = _rows(data)
        if rows is not None:
            data = rows[0]
            new += tuple(Step(ROWS_RULE, (), math.nan) for _ in range(rows[1]))
    if not new:
        return None
    name = "spelling" if base == ORIGINAL else f"{base}+spelling"
    # the graph is graphsub's before the rows layout: a layout of the ONNX file that graphsub's graph does not model
    # (the same ops, some reshapes apart; re-importing the file would cost ~0.5 s a candidate on a 65 MB model)
    return Candidate(name, data, spelled_graph, base, steps + new, time.perf_counter() - t)


def _has_rows(graph: Graph) -> bool:
    """Whether ``graph`` has what the rows layout works on -- a projection of a rank-3 activation by a matrix, or a
    rank-3 reshape of a 2-D product -- read from graphsub's own types, so that a model without any (a CNN) does not
    pay for onnx's shape inference on every candidate."""
    for node in graph.nodes.values():
        sig = node.sig
        if sig.op == "matmul" and len(sig.in_types) == 2 and len(sig.in_types[0].shape) == 3 and \
                len(sig.in_types[1].shape) == 2:
            return True
        if sig.op == "reshape" and len(sig.in_types[0].shape) == 2 and len(sig.out_types[0].shape) == 3:
            return True
    return False


def _rows(data: bytes) -> tuple[bytes, int] | None:
    """``data`` with its sequence activations written as rows (:mod:`graphsub.frontends.onnx_rows`) and how many
    connected parts were; None when the pass finds nothing to do or fails (an optional part of a candidate never
    fails the call)."""
    from graphsub.frontends.onnx_rows import rewrite_bytes

    try:
        return rewrite_bytes(data)
    except Exception:  # e.g. onnx's shape inference refusing a graph onnxruntime runs: no rows, same candidate
        return None


SPELLING = register(Source("spelling", make, turns=(30, 55, 70),
                           applies=lambda ctx: bool(ctx.sources.spelling) or ctx.sources.rows))

__all__ = ["ROWS_RULE", "SPELLING", "make", "spelled"]
