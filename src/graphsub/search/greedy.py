"""Greedy: apply the best strictly-improving substitution until none improves (what rule-based
optimizers such as TVM/TensorRT passes do, with a cost model deciding between rules).  Improving means cheaper by
more than the cost model's ``resolution`` (0 for a model that does not measure; a timer's resolution for one that
does: :attr:`graphsub.cost.base.SumCostModel.resolution`).

With ``batch=True`` each step's winning rule is then also taken at every other place where it improves the graph
(matched anew after each application, each priced by the cost model), before the next step looks at every rule
again.  A model with twelve identical layers then needs one full step, not twelve: what makes the difference when
every new region costs a measurement (:mod:`graphsub.cost.ort_regions`).

``compounds`` are moves made of many substitutions: each is a list of rules applied wherever they match
(:func:`graphsub.rules.everywhere.rewrite_everywhere`) as one move, priced as a whole (two whole-graph costs).  They
are for rewrites whose single steps go uphill until the last one pays -- the ``rows`` layout adds reshapes at each
projection and gains only once the reshapes between two projections cancel -- and are tried when no single
substitution improves the graph any more, the best improving one taken."""

from __future__ import annotations

import math
from collections.abc import Sequence

from graphsub.cost.base import SumCostModel
from graphsub.errors import BudgetExceeded
from graphsub.ir.graph import Graph
from graphsub.rules.everywhere import rewrite_everywhere
from graphsub.rules.match import find_matches
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, ProgressFn, Search, SearchResult, State, Step


def greedy(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
           batch: bool = False, compounds: Sequence[Sequence[Rule]] = (),
           progress: ProgressFn | None = None) -> SearchResult:
    """Steepest descent; ``seed`` is unused (deterministic: ties go to the first match); ``batch`` and ``compounds``:
    see the module docstring."""
    s = Search("greedy", graph, rules, cost, budget, dedup=False, progress=progress)
    state, parent = s.root, None
    while s.can_extend(state) and not s.out_of_budget():
        best = None
        for ch in s.children(state, parent):
            if _gains(s, ch.value, state.value) and (best is None or ch.value < best.value):
                best = ch
            if s.out_of_budget():
                break
        if best is None and compounds and not s.out_of_budget():
            best = _compound(s, state, compounds)
            if best is not None:
                parent = None
                s.offer(best)
                state = best
                continue
        if best is None:
            break
        parent, state = state, best
        s.offer(state)
        if batch:
            state = _everywhere(s, state, best.seq[-1].rule)
            if state is not best:
                parent = None  # several edits since the parent: its matches are no guide to the state's
    return s.result()


def _gains(s: Search, value: float, than: float) -> bool:
    """Whether ``value`` is cheaper than ``than`` by more than the cost model's resolution."""
    return value < than - getattr(s.cost, "resolution", 0.0)


def _compound(s: Search, state: State, compounds: Sequence[Sequence[Rule]]) -> State | None:
    """The best of the ``compounds`` applied everywhere to ``state`` that improves it, or None."""
    best = None
    for rules in compounds:
        if s.out_of_budget():
            break
        graph, steps = rewrite_everywhere(state.graph, rules, stop=s.out_of_budget)
        if not steps:
            continue
        try:
            cost = state.cost + (s.cost.graph_cost(graph) - s.cost.graph_cost(state.graph))
        except BudgetExceeded:
            s.out_of_budget()
            break
        value = s.cost.scalar(cost)
        if _gains(s, value, state.value) and (best is None or value < best.value):
            seq = (*state.seq, *(Step(r.rule, r.nodes, math.nan) for r in steps[:-1]),
                   Step(steps[-1].rule, steps[-1].nodes, value))
            best = State(graph, cost, value, seq)
    return best


def _everywhere(s: Search, state: State, rule_name: str) -> State:
    """``state`` with rule ``rule_name`` applied wherever it still improves it, one place at a time."""
    rule = next(r for r in s.rules if r.name == rule_name)
    improved = True
    while improved and s.can_extend(state) and not s.out_of_budget():
        improved = False
        for m in find_matches(state.graph, rule):
            ch = s.child(state, m)
            if ch is not None and _gains(s, ch.value, state.value):
                state, improved = ch, True
                s.offer(state)
                break
            if s.out_of_budget():
                break
    return state


__all__ = ["greedy"]
