"""Recursive greedy tree-based split of invalid fusion groups (the paper's Algorithm 1).

The split knows nothing of plans or repairs: it maps one invalid group to valid pieces, guided by
anything that explains a group (``explain(cost, group) -> edges``).  The explainer-driven repairs
``gnne``, ``pg``, ``rg`` (:class:`graphsub.layer_fusion.repair.ExplainerRepair`) are built on it.

:meth:`GreedySplitter.split` takes an invalid group ``phi`` and

1. asks the explainer (:mod:`graphsub.layer_fusion.explain`) for the edges ``(i, j)`` most responsible
   for its invalidity;
2. turns every edge into candidate two-way cuts (*skip-connection handling*): ops are numbered
   topologically (op ids are a topological order), and a cut is a down-set ``A`` of ``phi``
   (closed under in-group predecessors) with ``i in A``, ``j not in A``; every edge from ``A``
   to ``B = phi - A`` is cut, so a skip connection over or under ``(i, j)`` is cut with it.
   Per edge the candidates are ``B = {j and its descendants}``, ``A = {i and its ancestors}``,
   and the two topological thresholds ``A = {v <= i}`` and ``A = {v < j}``; equal cuts are kept
   once (the paper's "minimal set of solutions").  Each side is split into its weakly connected
   components.  A down-set of a convex group and its complement are convex and no edge runs
   from ``B`` back to ``A``, so the plan stays acyclic;
3. sorts the candidates into the paper's categories: **1** every piece valid -> return the
   candidate with the least ``sum F_D`` (greedy: categories 2 and 3 are not looked at);
   **2** one side valid -> the candidate whose valid side has the most ops, recursing on the
   invalid pieces of the other side (the next candidate if that recursion fails); **3** both
   sides invalid -> recurse on every invalid piece of (at most ``max_cat3``, in explanation
   order) candidates and keep the cheapest result.

Results are memoized per group (``F_beta`` / ``F_D`` are memoized by the cost model), and so are
explanations.  ``split`` returns ``None`` when the explanation gives no usable cut (e.g. a group
without edges): the repair then falls back to the random split, and the group does not count as
*rectified* (the paper's Table V rate = rectified / invalid groups repaired).  Because every
explanation edge is widened into a full cut, Algorithm 1 with recursion rectifies nearly every
group; the repair therefore also counts *one-cut* rectifications, where the explanation's first
split is already category 1 (every piece valid with no recursion) -- the measure that tells
explainers apart (``one_cut_rate``).

>>> import random
>>> from graphsub import zoo
>>> from graphsub.layer_fusion import LBDFCost, check_plan, fusion_graph
>>> from graphsub.layer_fusion.plan import FusionPlan
>>> fg = fusion_graph(zoo.get("resnet18"))
>>> cost = LBDFCost(fg, 128 * 1024)
>>> class AllEdges:                       # an "explainer" proposing every edge
...     def explain(self, cost, group):
...         return [(u, v) for u, v in cost.fg.edges() if u in group and v in group]
>>> group = (0, 1, 2, 3, 4, 5, 6)
>>> cost.valid(group)
False
>>> pieces = GreedySplitter(AllEdges()).split(cost, group)
>>> sorted(v for g in pieces for v in g) == list(group), all(cost.valid(g) for g in pieces)
(True, True)
"""

from __future__ import annotations

import weakref
from typing import Protocol

from graphsub.layer_fusion.cost import FusionCostModel
from graphsub.layer_fusion.plan import Group, components

Edge = tuple[int, int]


class Explains(Protocol):
    def explain(self, cost: FusionCostModel, group: Group) -> list[Edge]: ...


def _closure(cost: FusionCostModel, members: set[int], start: int, down: bool) -> set[int]:
    """``start`` and its descendants (``down``) or ancestors inside ``members``."""
    fg = cost.fg
    seen = {start}
    stack = [start]
    while stack:
        v = stack.pop()
        nxt = fg.consumers[v] if down else fg.preds[v]
        for u in nxt:
            if u in members and u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


def candidate_cuts(cost: FusionCostModel, group: Group, edges: list[Edge]) -> list[tuple[Group, ...]]:
    """Down-sets ``A`` (sorted tuples) of ``group`` cutting each edge of ``edges``, deduplicated,
    in explanation order (see the module docstring)."""
    members = set(group)
    out: dict[Group, None] = {}
    for i, j in edges:
        if i not in members or j not in members:
            continue
        cands = [
            members - _closure(cost, members, j, down=True),
            _closure(cost, members, i, down=False),
            {v for v in group if v <= i},
            {v for v in group if v < j},
        ]
        for a in cands:
            if i in a and j not in a and 0 < len(a) < len(group):
                out.setdefault(tuple(sorted(a)), None)
    return [(a,) for a in out]


class GreedySplitter:
    """Algorithm 1 over an explainer (anything with ``explain(cost, group) -> edges``)."""

    def __init__(self, explainer: Explains, max_cat3: int = 4):
        self.explainer = explainer
        self.max_cat3 = max_cat3
        # per cost model (weakly: a dead model's entries go with it, never reused by a new one)
        self._memo: weakref.WeakKeyDictionary[FusionCostModel, dict[Group, tuple[Group, ...] | None]] = \
            weakref.WeakKeyDictionary()
        self.calls = 0
        # category (1, 2, 3; 0 = no usable cut) of the first split of each group split
        self.category: weakref.WeakKeyDictionary[FusionCostModel, dict[Group, int]] = weakref.WeakKeyDictionary()

    def _pieces(self, cost: FusionCostModel, group: Group, a: Group) -> tuple[list[Group], list[Group]]:
        aset = set(a)
        return components(cost.fg, a), components(cost.fg, [v for v in group if v not in aset])

    def _dram(self, cost: FusionCostModel, pieces: list[Group] | tuple[Group, ...]) -> float:
        return sum(cost.fd(g) for g in pieces)

    def _finish(self, cost: FusionCostModel, pieces: list[Group]) -> list[Group] | None:
        """Valid pieces kept, invalid ones split recursively (``None`` if any cannot be)."""
        out: list[Group] = []
        for g in pieces:
            if cost.valid(g):
                out.append(g)
                continue
            sub = self.split(cost, g)
            if sub is None:
                return None
            out.extend(sub)
        return out

    def split(self, cost: FusionCostModel, group: Group) -> list[Group] | None:
        """Valid groups covering ``group`` exactly, or ``None`` (see the module docstring)."""
        if cost.valid(group):
            return [group]
        memo = self._memo.setdefault(cost, {})
        if group in memo:
            hit = memo[group]
            return None if hit is None else list(hit)
        memo[group] = None  # guards re-entry; overwritten below
        self.calls += 1
        result = self._split(cost, group)
        memo[group] = None if result is None else tuple(result)
        return result

    def _split(self, cost: FusionCostModel, group: Group) -> list[Group] | None:
        if len(group) < 2:
            return None
        edges = self.explainer.explain(cost, group)
        cat1: list[tuple[float, list[Group]]] = []
        cat2: list[tuple[int, int, list[Group], list[Group]]] = []
        cat3: list[tuple[list[Group], list[Group]]] = []
        for rank, (a,) in enumerate(candidate_cuts(cost, group, edges)):
            side_a, side_b = self._pieces(cost, group, a)
            ok_a = all(cost.valid(g) for g in side_a)
            ok_b = all(cost.valid(g) for g in side_b)
            if ok_a and ok_b:
                cat1.append((self._dram(cost, side_a + side_b), side_a + side_b))
            elif cat1:
                continue  # greedy: once a category-1 cut exists, others are not considered
            elif ok_a or ok_b:
                valid, other = (side_a, side_b) if ok_a else (side_b, side_a)
                cat2.append((-sum(len(g) for g in valid), rank, valid, other))
            else:
                cat3.append((side_a, side_b))
        cats = self.category.setdefault(cost, {})
        cats[group] = 1 if cat1 else 2 if cat2 else 3 if cat3 else 0
        if cat1:
            return min(cat1, key=lambda t: t[0])[1]
        for _, _, valid, other in sorted(cat2, key=lambda t: (t[0], t[1])):
            rest = self._finish(cost, other)
            if rest is not None:
                return valid + rest
        best: list[Group] | None = None
        for side_a, side_b in cat3[: self.max_cat3]:
            done = self._finish(cost, side_a + side_b)
            if done is not None and (best is None or self._dram(cost, done) < self._dram(cost, best)):
                best = done
        return best


__all__ = ["Edge", "Explains", "GreedySplitter", "candidate_cuts"]
