"""The OCGGS exact searches (Fang et al., VLDB 2020): Pruning (Algorithm 1) and DPP (Algorithm 2).

Both are depth-first over substitution sequences of length <= K, without a hash set and without
alpha, like ENU and the authors' code; they expand only **ordered** sequences (Corollary 1, the
pruning rule; the order of Definition 8 is in :mod:`graphsub.search.order`).  By Theorem 4 every
sequence has an equivalent ordered one, so the optimum is ENU's.

* ``pruning`` matches every rule afresh on every state (Algorithm 1, lines 4-5).
* ``dpp`` reuses the parent's child substitution set (Theorem 5): the parent's matches on nodes
  the last step left alone are carried over (re-checked for the non-local conditions), and only
  matches near the last step's new and rewired nodes -- the ones that can depend on it -- are
  searched anew (:func:`graphsub.rules.match.rematch`).  The order filter ``B`` of Theorem 6 is
  applied when a state is expanded; the stored set is the full ``Δ1 = Δ3 ∪ Δ4`` of Theorem 5, so
  DPP expands exactly the sequences Pruning expands and differs only in matching time.

Both also drop mirror-image matches of symmetric rules (:func:`drop_symmetric`), as the authors'
Pruning does for its list of symmetric rules; ENU keeps them.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from graphsub.cost.base import SumCostModel
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.rules.match import Match
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, ProgressFn, Search, SearchResult, State
from graphsub.search.order import ROOT, Labels


class LabelledSearch(Search):
    """:class:`Search` whose states carry node labels (Definition 6).

    ``mode`` picks which matches a state may apply: ``"ordered"`` (Definition 8 against the last
    step), ``"all"`` (no order check) or ``"dependent"`` (only substitutions depending on the last
    step, Definition 12 (1)).  ``incremental`` selects match reuse (DPP) over full matching;
    ``symmetric`` drops the mirror images of symmetric-rule matches (:func:`drop_symmetric`).
    """

    def __init__(self, name: str, graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, *,
                 incremental: bool, dedup: bool = False, mode: str = "ordered", symmetric: bool = False,
                 fingerprints: bool = False, progress: ProgressFn | None = None):
        super().__init__(name, graph, rules, cost, budget, dedup=dedup, fingerprints=fingerprints, progress=progress)
        self.incremental = incremental
        self.mode = mode
        self.symmetric = symmetric
        self.labels: weakref.WeakKeyDictionary[State, Labels] = weakref.WeakKeyDictionary()
        self.labels[self.root] = ROOT

    def label(self, state: State) -> Labels:
        return self.labels[state]

    def matches(self, state: State, parent: State | None = None) -> list[Match]:
        ms = super().matches(state, parent if self.incremental else None)
        return drop_symmetric(ms) if self.symmetric else ms

    def allowed(self, state: State, match: Match) -> bool:
        if self.mode == "all":
            return True
        lab = self.labels[state]
        ok = lab.follows(match) if self.mode == "ordered" else lab.depends_on_last(match)
        if not ok:
            self.stats.pruned += 1
        return ok

    def child(self, state: State, match: Match) -> State | None:
        ch = super().child(state, match)
        if ch is not None:
            self.labels[ch] = self.labels[state].extend(match, ch.graph)
        return ch


def drop_symmetric(matches: Sequence[Match]) -> list[Match]:
    """``matches`` without mirror images: of several matches of one rule on the same set of graph
    nodes, only the one with the smallest :attr:`~graphsub.rules.match.Match.key` is kept.

    Two such matches differ by an automorphism of the rule's source pattern (e.g. TASO's rule 77,
    ``x@W1 + y@W2 -> concat(x, y) @ concat(W1, W2)``, matched with x and y swapped); their results
    differ only in the order of concatenated operands, so they cost the same and admit the same
    continuations.  The authors' Pruning does this for a hard-coded list of 11 of the 157 rules
    ("symmetric rules", deduplicated by swapped source guids); this finds them by construction, and
    the choice does not depend on the order the matches came in (so DPP keeps Pruning's)."""
    best: dict[tuple[str, frozenset[int]], Match] = {}
    for m in matches:
        k = (m.rule.name, m.node_ids)
        cur = best.get(k)
        if cur is None or m.key < cur.key:
            best[k] = m
    if len(best) == len(matches):
        return list(matches)
    keep = {id(m) for m in best.values()}
    return [m for m in matches if id(m) in keep]


def _exact(name: str, graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget,
           incremental: bool, progress: ProgressFn | None) -> SearchResult:
    if budget.k is None:
        raise GraphsubError(f"{name} needs a maximum sequence length: Budget(k=...)")
    # Pruning keeps no match sets (nothing to reuse); DPP keeps them for its children
    return LabelledSearch(name, graph, rules, cost, budget, incremental=incremental, symmetric=True,
                          progress=progress).depth_first(keep_matches=incremental)


def pruning(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
            progress: ProgressFn | None = None) -> SearchResult:
    """Algorithm 1 (Pruning): exact search over ordered sequences up to ``budget.k`` (required);
    every state is matched from scratch.  ``seed`` is unused (deterministic)."""
    return _exact("pruning", graph, rules, cost, budget, incremental=False, progress=progress)


def dpp(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
        progress: ProgressFn | None = None) -> SearchResult:
    """Algorithm 2 (DP with pruning): Pruning with the child substitution set reused from the
    parent (Theorems 5-6).  ``budget.k`` is required; ``seed`` is unused (deterministic)."""
    return _exact("dpp", graph, rules, cost, budget, incremental=True, progress=progress)


__all__ = ["LabelledSearch", "dpp", "drop_symmetric", "pruning"]
