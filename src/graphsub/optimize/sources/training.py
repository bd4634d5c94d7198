"""The sources of a training target (:class:`TrainingTarget`: the joint graph of
:func:`graphsub.optimize.training.optimize_training` is the model, and these know its forward graph and spec):

* ``backward-rules`` (:func:`backward_rules`): every match of the ``training`` rules the cost model prices cheaper,
  applied to the joint graph; only when the call's rules include them (:func:`uses_training_rules`). Estimate:
  :data:`BACKWARD_BASE_S` plus :data:`BACKWARD_S_PER_OP` per op of the joint graph (a cold measurement cache), at
  most :data:`BACKWARD_SHARE` of the budget, which is also its limit (its pricing stops there);
* ``forward-first`` (:func:`forward_first`): the forward graph searched with its weights as weights, then
  differentiated. Estimate and limit: the target's ``forward_s``, by default the main search's share of the budget
  (:data:`~graphsub.optimize.budget.SEARCH_SHARE`; :data:`~graphsub.optimize.config.DEFAULT_BUDGET_S` without one);
  ``forward_s=0`` leaves it out.

Turns 10 and 11 (first: their candidates are graphs the spelling pass then works on, as on the search's); no drop
rank (the planner never leaves them out: they are what a training target is optimized for, and the main search
gets the time that is left).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.optimize.budget import SEARCH_SHARE
from graphsub.optimize.candidates import ORIGINAL, Candidate, export_bytes
from graphsub.optimize.sources.base import Context, Source, register
from graphsub.optimize.target import Target
from graphsub.training import TrainingSpec

#: ``backward-rules`` is planned at this constant plus this much per op of the joint graph: pricing each match of the
#: ``training`` rules measures the kernels it makes, once per machine (cached across calls); on SqueezeNet's training
#: graph (194 ops) 10 s with a cold cache, 0.06 s warm (this 2-core machine, loaded); the estimate is the cold one...
BACKWARD_BASE_S, BACKWARD_S_PER_OP = 0.5, 0.05
#: ...and never asks for more than this share of the budget
BACKWARD_SHARE = 0.2


@dataclass(frozen=True)
class TrainingTarget(Target):
    """What a training target adds to an optimize call: the training graph's ``spec``, the ``forward`` graph it was
    built from (with data), the inputs of one real step (``feeds``: data, one-hot labels, the model's weights; the
    candidates are timed on them, since a training graph's kernels run at data-dependent speeds), and the seconds of
    the ``forward-first`` search (``forward_s``; None: the main search's share of the budget; 0: none)."""

    spec: TrainingSpec
    forward: Graph
    feeds: Mapping[str, np.ndarray] | None = None
    forward_s: float | None = None
    cleanup = False  # the weights are trained: none is folded into a constant or merged with an equal one


def _training(ctx: Context) -> bool:
    return isinstance(ctx.sources.target, TrainingTarget)


def forward_first(fwd: Graph, spec: TrainingSpec, *, budget_s: float, rules: Any = "default",
                  cost: str = "fused[min]", algo: str = "taso", seed: int = 0,
                  threads: int | None = None) -> tuple[str, Graph, tuple[Any, ...]] | None:
    """The portfolio candidate ``forward-first``: search the *forward* graph with its weights as weights (so the
    rules that transform weights -- merging convolutions by concatenating their kernels, enlarging a kernel -- can
    fire), then differentiate the result with the same trained weights. A transform of a trained weight stays an
    op of the training graph, computed every step and differentiated (concat's gradient is a split, enlarge's a
    slice): what is trained is unchanged, and the backward pass inherits the forward merges (one merged weight
    gradient instead of two). None when the search changed nothing or the result cannot be differentiated."""
    from graphsub.cost import get_model
    from graphsub.errors import GraphsubError
    from graphsub.rules.library import resolve_rules
    from graphsub.search import Budget, search
    from graphsub.training import build_training

    rule_list = resolve_rules(rules) if isinstance(rules, str) else rules
    result = search(fwd, rule_list, get_model(cost, threads=threads, progress=False), Budget(time_s=budget_s), seed,
                    algo=algo)
    if not result.sequence:
        return None
    try:
        g, _ = build_training(result.best, loss=spec.loss, params=spec.params, batchnorm=spec.batchnorm)
    except GraphsubError:
        return None
    return "forward-first", g, tuple(result.sequence)


def uses_training_rules(rules: Any) -> bool:
    """Whether a rule-set spec (or a rule list) includes the ``training`` rules (``default`` does)."""
    if isinstance(rules, str):
        return any(p.strip() in ("default", "training") for p in rules.split(","))
    return any(getattr(r, "name", None) == "trn_grad_w_gemm" for r in rules)


def backward_rules(joint: Graph, *, cost: str = "fused[min]", threads: int | None = None,
                   deadline_s: float | None = None) -> tuple[str, Graph, tuple[Any, ...]] | None:
    """The portfolio candidate ``backward-rules``: every match of the ``training`` rules
    (:mod:`graphsub.rules.library.training`: a convolution's weight gradient as one GEMM, its stride-1 input gradient
    as a convolution) that the cost model prices cheaper, applied. Each match rewrites one gradient kernel and none
    overlaps another, so pricing each against the joint graph and applying the cheaper ones is exact and takes
    seconds, where a search over the whole rule set may spend its budget elsewhere on a graph of thousands of ops
    (ResNet-50: 1,475). None when nothing is cheaper. ``deadline_s``: stop pricing after that many seconds."""
    from graphsub.cost import get_model
    from graphsub.rules.apply import apply
    from graphsub.rules.library import get_set
    from graphsub.rules.match import find_matches, still_valid
    from graphsub.search.base import Step

    t0 = time.perf_counter()
    cm = get_model(cost, threads=threads, progress=False)
    g, steps = joint, []
    for rule in get_set("training"):
        cheaper = []
        for m in find_matches(g, rule):
            if deadline_s is not None and time.perf_counter() - t0 > deadline_s:
                break
            if cm.scalar(cm.delta(g, apply(g, m).graph)) < 0:
                cheaper.append(m)
        for m in cheaper:  # disjoint single-kernel matches: each is still there after the others
            if still_valid(g, m):
                g = apply(g, m).graph
                steps.append(Step(rule.name, tuple(sorted(m.node_ids)), 0.0))
    return ("backward-rules", g, tuple(steps)) if steps else None


def _candidate(ctx: Context, made: tuple[str, Graph, tuple[Any, ...]] | None, t0: float) -> Candidate | None:
    """The candidate of ``(name, graph, steps)`` (None: none), finalized with the original's weights like the search's
    result; ``t0``: when making it started (a ``time.perf_counter()`` reading)."""
    from graphsub.optimize.verification import finalize

    if made is None:
        return None
    name, graph, steps = made
    fin = finalize(ctx.ref, graph, ctx.config.seed)
    return Candidate(name, export_bytes(fin), fin, ORIGINAL, steps, time.perf_counter() - t0)


def _backward_cap_s(ctx: Context) -> float:
    time_s = ctx.config.time_s
    return math.inf if time_s is None else BACKWARD_SHARE * time_s


def make_backward(ctx: Context, seconds: float) -> None:
    """Add ``backward-rules`` (:func:`backward_rules` on the joint graph, pricing for at most ``seconds``)."""
    cfg, t0 = ctx.config, time.perf_counter()
    ctx.attempt("backward-rules", "backward-rules", lambda: _candidate(ctx, backward_rules(
        ctx.ref, cost=cfg.cost, threads=cfg.threads, deadline_s=None if math.isinf(seconds) else seconds), t0))


def forward_s(ctx: Context) -> float:
    """The ``forward-first`` search's time: the target's ``forward_s``, else the main search's share of the budget."""
    from graphsub.optimize.config import DEFAULT_BUDGET_S

    target, time_s = ctx.sources.target, ctx.config.time_s
    if isinstance(target, TrainingTarget) and target.forward_s is not None:
        return target.forward_s
    return DEFAULT_BUDGET_S if time_s is None else SEARCH_SHARE * time_s


def make_forward(ctx: Context, seconds: float) -> None:
    """Add ``forward-first`` (:func:`forward_first` on the target's forward graph for ``seconds``)."""
    cfg, target, t0 = ctx.config, ctx.sources.target, time.perf_counter()
    assert isinstance(target, TrainingTarget)
    ctx.attempt("forward-first", "forward-first", lambda: _candidate(ctx, forward_first(
        target.forward, target.spec, budget_s=seconds, rules=cfg.rules, cost=cfg.cost, algo=cfg.algo, seed=cfg.seed,
        threads=cfg.threads), t0))


BACKWARD = register(Source(
    "backward-rules", make_backward, turns=(10,),
    estimate_s=lambda ctx: min(_backward_cap_s(ctx), BACKWARD_BASE_S + BACKWARD_S_PER_OP * ctx.ref.num_ops),
    applies=lambda ctx: _training(ctx) and uses_training_rules(ctx.config.rules),
    limit_s=_backward_cap_s, graphs=True))
FORWARD = register(Source(
    "forward-first", make_forward, turns=(11,), estimate_s=forward_s,
    applies=lambda ctx: _training(ctx) and forward_s(ctx) != 0.0, graphs=True))

__all__ = ["BACKWARD", "BACKWARD_BASE_S", "BACKWARD_SHARE", "BACKWARD_S_PER_OP", "FORWARD", "TrainingTarget",
           "backward_rules", "forward_first", "forward_s", "make_backward", "make_forward", "uses_training_rules"]
