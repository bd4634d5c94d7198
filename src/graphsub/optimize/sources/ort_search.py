"""The ``search-ort`` source: graphsub's search priced by what onnxruntime runs (:mod:`graphsub.cost.ort_regions`,
cost ``ort-kernels``), over the call's rules together with the rules that re-express the hand-written passes
(``ort-spelling``, ``channels-first``, ``rows``: :mod:`graphsub.rules.library`) and the ``attention`` rules, which
write the exporters' head-split attention as onnxruntime's MultiHeadAttention (:mod:`graphsub.rules.library.attention`;
``ort-spelling`` then packs one fed by projections of one input into its Attention, as onnxscript's fusion does).

The search is steepest descent (:mod:`graphsub.search.greedy`) with each step's rule taken wherever it pays
(``batch``), and the ``rows`` set as a compound move (:func:`compounds`) tried when no single substitution pays:
every region the search has not seen costs a measurement (tens of milliseconds), so it needs a search that expands
few graphs and meets the same regions again and again (twelve identical layers are priced once).

The main search prices a graph op by op with conv/matmul fusion chains (``fused[min]``), which cannot see most of
what onnxruntime does to a graph -- its attention and normalisation fusions, the ``Reshape`` copies around a rank-3
``Gemm``, its NCHWc layout -- and so cannot tell when a pass's rewrite pays. This search prices each substitution
by the kernels onnxruntime runs for the region it changes, so the passes' rules compete with every other rule on
one scale, in any order, and a pass's rewrite is taken where onnxruntime runs it faster.

Estimate: the config's ``ort_search_s`` (:data:`~graphsub.optimize.config.DEFAULT_ORT_SEARCH_S`); at least
:data:`ORT_SEARCH_MIN_S`. Turn 25: after eqsat, before the spelling and layout passes (which then also work on its
result) and before the peers. Drop rank :data:`~graphsub.optimize.budget.DROP_EQSAT` (left out with eqsat, after
the searches on top of the peers). Not a source of plain graphs (``graphs=False``): its rules include onnxruntime's
spellings (contrib ops), and its price is onnxruntime's, so a target that runs graphs elsewhere (a PyTorch module)
does not take it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from graphsub.ir.graph import Graph
from graphsub.optimize.budget import DROP_EQSAT
from graphsub.optimize.candidates import ORIGINAL, Candidate, export_bytes
from graphsub.optimize.sources.base import Context, Source, register
from graphsub.rules.rule import Rule

NAME = "search-ort"
#: steepest descent, each step's rule taken wherever it pays, compound moves when stuck (graphsub.search.greedy):
#: every region new to the search costs a measurement, so it takes few expansions, each cheap once priced
ALGO = "greedy"
ORT_SEARCH_MIN_S = 2.0  # pricing the start alone takes a second or two on a transformer
#: the rule sets that re-express the hand-written passes, and the attention fusion (added to the call's rules for
#: this search)
PASS_RULE_SETS = ("ort-spelling", "channels-first", "rows", "attention", "decoder")
#: the second candidate's name (:func:`unfused`)
UNFUSED_NAME = f"{NAME}+unfused"
#: the ``ort-spelling`` rules of :func:`unfused`: a residual sum before a LayerNorm written so that onnxruntime
#: keeps the two kernels (post-LN, BERT's). Not the ``_sum`` ones, which undo the pre-LN fusion that keeps the sum
#: as an output: that one onnxruntime does not make itself, and GPT-2's decode steps gain by it
UNFUSED_SKIP = ("ortsp_ln_sum", "ortsp_ln_sum_nobeta", "ortsp_unfuse_skip_layernorm",
                "ortsp_unfuse_skip_layernorm_nobeta", "ortsp_unfuse_skip_layernorm_bias")


def search_rules(rules: Sequence[Rule]) -> list[Rule]:
    """``rules`` and the rules of :data:`PASS_RULE_SETS` (a rule in both, once)."""
    from graphsub.rules.library import resolve_rules

    out = {r.name: r for r in rules}
    for r in resolve_rules(",".join(PASS_RULE_SETS)):
        out.setdefault(r.name, r)
    return list(out.values())


def compounds() -> tuple[tuple[Rule, ...], ...]:
    """The search's compound moves: the ``rows`` set with the clean-up's reshape rules that collapse what it leaves
    (its steps go uphill until the reshapes between two projections cancel, so no single step of it is taken)."""
    from graphsub.rules.library import get_set

    follow = tuple(r for r in get_set("cleanup") if r.name in ("cpu_reshape_reshape", "cpu_reshape_noop"))
    return ((*get_set("rows"), *follow),)


def unpriced(graph: Graph, steps: tuple[Any, ...]) -> tuple[Graph, tuple[Any, ...]]:
    """The search's result with the rules whose gain no price can see applied wherever they match: a decoder's
    attention bias without the causal mask GroupQueryAttention applies itself (:mod:`graphsub.rules.library.gqa_bias`).
    The import folds that mask into a constant at the imported sizes, so the graph the search prices has no kernel
    computing it, where the written file computes it again from the lengths at every step (about fifteen kernels:
    Ranges, Unsqueezes, a LessOrEqual, Ands); the rules only drop that work (exact: the kernel masks the same keys),
    and the candidate is timed whole like any other."""
    from graphsub.rules.everywhere import rewrite_everywhere
    from graphsub.rules.library import gqa_bias
    from graphsub.search.base import Step

    out, more = rewrite_everywhere(graph, gqa_bias.rules())
    return out, (*steps, *(Step(r.rule, r.nodes, math.nan) for r in more))


def unfused(cand: Candidate) -> Candidate | None:
    """``search-ort+unfused``: the search's result with its residual sums before a LayerNormalization spelled so that
    onnxruntime keeps the two kernels (:data:`UNFUSED_SKIP`: no SkipLayerNormalization); None where none matches.

    A second candidate, for the one move the search's price cannot judge: a region's kernels favour onnxruntime's
    SkipLayerNormalization, which a post-LN encoder runs slower whole (BERT, TorchScript, batch 1, 2 threads:
    search-ort's output 8.32 ms a run with its eight SkipLayerNormalizations, 7.81 ms without them, 6 alternating
    fresh sessions each). A price of the whole graph from its kernels differed by 0.7% only, within its noise, and
    the move taken on it was taken on ViT too, where the two run the same (2026-11-30, reverted). So the move is
    left to what decides every candidate, the side-by-side timing of the whole model; where the spelling source
    runs, ``search-ort+spelling`` has the same move and this one is not made (:func:`make`)."""
    from graphsub.rules.everywhere import rewrite_everywhere
    from graphsub.rules.library import get_set
    from graphsub.search.base import Step

    assert cand.graph is not None
    t = time.perf_counter()
    out, more = rewrite_everywhere(cand.graph, [r for r in get_set("ort-spelling") if r.name in UNFUSED_SKIP])
    if not more:
        return None
    steps = (*cand.steps, *(Step(r.rule, r.nodes, math.nan) for r in more))
    return Candidate(UNFUSED_NAME, export_bytes(out), out, cand.name, steps, time.perf_counter() - t)


def make(ctx: Context, seconds: float) -> None:
    """Add ``search-ort``: the ORT-priced search on the original for ``seconds`` (nothing when it changes nothing),
    and ``search-ort+unfused`` (:func:`unfused`) where the call's spelling rules do not make that move already."""
    fn = ctx.sources.ort_search_fn
    if fn is None:
        return

    def build() -> Candidate | None:
        t = time.perf_counter()
        best, steps = fn(ctx.ref, seconds, ALGO)
        if not steps:
            return None
        return Candidate(NAME, export_bytes(best), best, ORIGINAL, steps, time.perf_counter() - t)

    cand = ctx.attempt(NAME, NAME, build)
    spelled = {r.name for r in ctx.sources.spelling}
    if cand is not None and cand.graph is not None and not spelled.issuperset(UNFUSED_SKIP) and not ctx.spent():
        ctx.attempt(NAME, UNFUSED_NAME, lambda: unfused(cand))


ORT_SEARCH = register(Source(NAME, make, turns=(25,), estimate_s=lambda ctx: ctx.sources.ort_search_s,
                             applies=lambda ctx: ctx.sources.ort_search_s > 0,
                             min_s=ORT_SEARCH_MIN_S, drop=DROP_EQSAT, graphs=False, anytime=True,
                             label="the search priced by ORT's kernels"))

__all__ = ["ALGO", "NAME", "ORT_SEARCH", "ORT_SEARCH_MIN_S", "PASS_RULE_SETS", "UNFUSED_NAME", "UNFUSED_SKIP",
           "compounds", "make", "search_rules", "unfused", "unpriced"]
