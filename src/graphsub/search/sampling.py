"""OCGGS Sampling (Fang et al., VLDB 2020, Algorithm 3 and Definition 12).

Level by level: ``P_tmp`` = all children of the current sample ``P_{k-1}`` (match reuse as in DPP,
no order check), split by the cost change of their last substitution:

* ``P_des``: the last step does not increase the cost;
* ``P_inc``: **further-exploration sequences** -- the last step increases the cost and there are
  at most ``eta`` successive cost-increasing steps at the end.

Further-exploration sequences are not sampled directly: repeatedly, the ``Q/2`` with the best
**potential** (Definition 12) are extended by substitutions that depend on their last step
(Definition 12 (1)); the children join ``P_inc``, and those still further-exploration go round
again.  Then the sequences in ``P_inc`` ending with a cost increase are dropped, and
``P_k`` = the ``Q/2`` cheapest of ``P_des`` + the ``Q/2`` cheapest of ``P_inc``, counting only
sequences shorter than K (a K-long one is already offered as a result and cannot grow; letting it
hold a slot made Sampling stop early on BERT, 1.086 where greedy reaches 1.060 under roofline:p100).

Potential, as in the authors' code (``get_potential``): the cheapest cost reachable by one
dependent cost-decreasing substitution, or the sequence's own cost if there is none (a one-step
look-ahead of Definition 12; with the default ``eta = 1`` the chain of Definition 12 has exactly
one more step anyway).  Children are deduplicated by structural hash within each group (as the
authors do; see :func:`_unique`); alpha is not used (neither does the authors' code).  ``seed`` breaks ties between
equal costs/potentials (deterministic for a given seed).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from graphsub.cost.base import SumCostModel
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, ProgressFn, SearchResult, State
from graphsub.search.ocggs import LabelledSearch


@dataclass(eq=False)
class _Seq:
    """A sampled sequence: its state, its parent's state (for match reuse) and the number of
    successive cost-increasing substitutions at its end."""

    state: State
    parent: State | None
    run: int = 0
    potential: float = 0.0
    lookahead: list[_Seq] | None = field(default=None, repr=False)


class _Sampler:
    def __init__(self, s: LabelledSearch, q: int, eta: int, rng: random.Random):
        self.s, self.half, self.eta, self.rng = s, max(q // 2, 1), eta, rng

    def expand(self, seq: _Seq, mode: str) -> list[_Seq]:
        """Children of ``seq`` (``mode`` as in :class:`LabelledSearch`); each offered as best."""
        s = self.s
        if not s.can_extend(seq.state) or s.out_of_budget():
            return []
        s.mode = mode
        out = []
        for ch in s.children(seq.state, seq.parent):
            s.offer(ch)
            out.append(_Seq(ch, seq.state, seq.run + 1 if ch.value > seq.state.value else 0))
            if s.out_of_budget():
                break
        return out

    def further(self, seq: _Seq) -> bool:
        """Further-exploration sequence: last step increases the cost, at most eta in a row."""
        return 0 < seq.run <= self.eta

    def top(self, seqs: list[_Seq], key: str) -> list[_Seq]:
        """The ``Q/2`` best of ``seqs`` by ``value`` or ``potential`` (ties broken by the RNG)."""
        tagged = [(sq.state.value if key == "value" else sq.potential, self.rng.random(), i)
                  for i, sq in enumerate(seqs)]
        tagged.sort()
        return [seqs[i] for _, _, i in tagged[: self.half]]

    def potential(self, seq: _Seq) -> None:
        """Definition 12, one dependent step ahead (kept as ``lookahead`` for line 10)."""
        kids = self.expand(seq, "dependent")
        seq.lookahead = kids
        dec = [k.state.value for k in kids if k.state.value < seq.state.value]
        seq.potential = min(dec, default=seq.state.value)

    def level(self, sample: list[_Seq]) -> list[_Seq]:
        """One iteration of Algorithm 3's outer loop (lines 4-14)."""
        tmp = _unique([ch for sq in sample for ch in self.expand(sq, "all")])  # line 4-5
        inc = [sq for sq in tmp if self.further(sq)]  # line 6
        des = [sq for sq in tmp if sq.run == 0]  # line 7 (cost-increasing beyond eta dropped)
        frontier = inc
        while frontier and not self.s.out_of_budget():  # lines 8-12
            for sq in frontier:
                self.potential(sq)
            chosen = self.top(frontier, "potential")
            kids = [k for sq in chosen for k in (sq.lookahead or [])]
            for sq in frontier:
                sq.lookahead = None
            inc.extend(kids)
            frontier = [k for k in kids if self.further(k)]
        inc = _unique([sq for sq in inc if sq.run == 0])  # line 13
        # line 14; a sequence already K long has been offered as a result and cannot grow, so it does
        # not take one of the Q slots (else long increase-then-decrease sequences crowd out the short
        # ones that can still improve, and the search ends early)
        live = self.s.can_extend
        return self.top([sq for sq in des if live(sq.state)], "value") + \
            self.top([sq for sq in inc if live(sq.state)], "value")


def _unique(seqs: list[_Seq]) -> list[_Seq]:
    """``seqs`` without repeated graphs (first kept).  Duplicates are removed within a group, as
    the authors do: a global hash set would also drop a graph that was generated once and then
    not sampled (or only looked ahead at), losing it for good.

    "Repeated" is decided by the O(change) fingerprint every state carries -- like the authors'
    graph hash, a sum of per-node hashes: equal graphs always share it; two different graphs share
    it only if they differ by a rewiring between producers of identical signature, and then one of
    them is left out of the *sample* (the search stays sound; only its choice narrows).  Confirming
    every collision with the structural hash cost 45% of Sampling's time on NasRNN, where a third
    of the children are true duplicates (independent substitutions applied in either order)."""
    seen: set[int] = set()
    out = []
    for sq in seqs:
        if sq.state.fp not in seen:
            seen.add(sq.state.fp)
            out.append(sq)
    return out


def sampling(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
             q: int = 20, eta: int = 1, progress: ProgressFn | None = None) -> SearchResult:
    """Algorithm 3 with sample size ``q`` (default 20) and at most ``eta`` (default 1) successive
    cost-increasing substitutions; sequences are at most ``budget.k`` long when K is set."""
    if q < 1 or eta < 0:
        raise GraphsubError(f"sampling needs q >= 1 and eta >= 0 (got q={q}, eta={eta})")
    s = LabelledSearch("sampling", graph, rules, cost, budget, incremental=True, dedup=False, mode="all",
                       fingerprints=True, progress=progress)
    sampler = _Sampler(s, q, eta, random.Random(seed))
    sample = [_Seq(s.root, None)]
    while sample and not s.out_of_budget():  # line 3
        sample = sampler.level(sample)
    return s.result(q=q, eta=eta)


__all__ = ["sampling"]
