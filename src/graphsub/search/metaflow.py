"""MetaFlow's search: flow-based recursive graph split, backtracking per part, stitching, and a
local search across the split points (MetaFlow §4.3, Algorithm 2).

Split: a graph with more than ``threshold`` ops is cut at a minimum *vertex* cut whose capacity
is, per operator, the number of rule matches spanning it (so the cut goes where few
substitutions are lost); cut vertices are sought in the middle third of the topological order
(the first third is tied to the source, the last to the sink, keeping the parts balanced).  The
two sides are split recursively (networkx max-flow on the split-vertex network).

Search: every part is optimised in turn by TASO backtracking restricted to matches lying inside
the part (nodes created by the part's own substitutions belong to it); because node ids are
stable across copy-on-write edits, each part's best sequence is applied to the whole current
graph, which is the stitching.  Finally a backtracking search over the matches that span parts
(the ones the split excluded) improves the stitched graph around the split points.

Progress reports (``progress``) cover the whole search: the part searches report through the
outer search's :class:`~graphsub.search.base.Progress`, a part's improvement only when the outer
search will take it as its new best.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence

import networkx as nx

from graphsub.cost.base import SumCostModel
from graphsub.ir.graph import Graph
from graphsub.rules.match import Match
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, ProgressFn, Search, SearchResult, State, improves


def split_graph(graph: Graph, matches: Sequence[Match], threshold: int = 30,
                stop: Callable[[], bool] | None = None) -> list[set[int]]:
    """Partition the compute nodes into parts of at most ``threshold`` ops (recursive min
    vertex cuts weighted by the number of matches spanning each node).  Once ``stop()`` says so
    (a search's budget check), the remaining parts are cut in the middle of the topological order
    instead (linear time, no max-flow)."""
    span: dict[int, int] = {}
    for m in matches:
        for n in m.node_ids:
            span[n] = span.get(n, 0) + 1
    order = [n for n in graph.topo_order() if not graph.nodes[n].sig.opdef.leaf]
    parts: list[set[int]] = []
    stack = [order]
    while stack:
        nodes = stack.pop()
        if len(nodes) <= threshold:
            if nodes:
                parts.append(set(nodes))
            continue
        if stop is not None and stop():
            mid = len(nodes) // 2
            left, right = nodes[:mid], nodes[mid:]
        else:
            left, right = _cut(graph, nodes, span)
        stack.extend([right, left])
    return parts


def _cut(graph: Graph, nodes: list[int], span: dict[int, int]) -> tuple[list[int], list[int]]:
    """Split topologically ordered ``nodes`` in two at a minimum vertex cut."""
    members = set(nodes)
    third = max(1, len(nodes) // 3)
    head, tail = set(nodes[:third]), set(nodes[-third:])
    # finite "infinity": more than any cut of middle vertices, so those are preferred, and a
    # head node feeding a tail node directly still has a (very expensive) finite cut
    big = float(sum(1 + span.get(n, 0) for n in nodes) + 1)
    g = nx.DiGraph()
    for n in nodes:
        cap = big if n in head or n in tail else 1 + span.get(n, 0)
        g.add_edge(("in", n), ("out", n), capacity=cap)
        for r in graph.nodes[n].inputs:
            if r.node in members:
                g.add_edge(("out", r.node), ("in", n), capacity=big * big)
    for n in head:
        g.add_edge("s", ("in", n), capacity=big * big)
    for n in tail:
        g.add_edge(("out", n), "t", capacity=big * big)
    _, (reach, _) = nx.minimum_cut(g, "s", "t")
    cut = {n for n in nodes if ("in", n) in reach and ("out", n) not in reach}
    source_side = {n for n in nodes if ("out", n) in reach} | cut
    left = [n for n in nodes if n in source_side]
    right = [n for n in nodes if n not in source_side]
    if not left or not right:  # degenerate: fall back to the middle of the order
        mid = len(nodes) // 2
        return nodes[:mid], nodes[mid:]
    return left, right


class _PartSearch(Search):
    """Backtracking restricted by node ownership: ``part`` >= 0 = inside that part (plus new
    nodes), ``part`` == -1 = matches spanning several parts (or touching new nodes).  A state that
    :func:`~graphsub.search.base.improves` on ``whole_best`` is a new best of the whole search
    (reported as progress)."""

    owner: dict[int, int]
    part: int
    whole_best: float

    def allowed(self, state: State, match: Match) -> bool:
        parts = {self.owner.get(n, -1) for n in match.node_ids}
        if self.part >= 0:  # inside the part, or on nodes this part's substitutions created
            return parts <= {self.part, -1}
        return len(parts) > 1 or -1 in parts  # across split points, or on nodes created here


def _backtrack_from(s: _PartSearch, start: State, alpha: float, cap: float) -> State:
    """Backtracking search from ``start`` within ``s``'s budget; returns the best state."""
    best = start
    counter = itertools.count()
    queue: list[tuple[float, int, State, State | None]] = [(start.value, next(counter), start, None)]
    while queue and not s.out_of_budget():
        _, _, state, parent = heapq.heappop(queue)
        if not s.can_extend(state):
            continue
        for ch in s.children(state, parent):
            if ch.value < best.value:
                best = ch
                if s.reporter is not None and improves(ch.value, s.whole_best):
                    s.reporter.improved(time.perf_counter(), ch.value)
            if ch.value < alpha * best.value and ch.graph.num_ops < cap:
                heapq.heappush(queue, (ch.value, next(counter), ch, state))
            else:
                s.stats.pruned += 1
            if s.out_of_budget():
                break
    return best


def metaflow(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
             alpha: float = 1.05, threshold: int = 30, size_cap: float = 2.0,
             local_share: float = 0.25, progress: ProgressFn | None = None) -> SearchResult:
    """MetaFlow search (see module docstring).  ``local_share`` of the time/expansion budget is
    kept for the search across split points; the rest is divided evenly among the parts.  The
    matching and the split count against the budget (the matching stops with it)."""
    outer = Search("metaflow", graph, rules, cost, budget, progress=progress)
    matches = outer.matches(outer.root)
    parts = split_graph(graph, matches, threshold, stop=outer.out_of_budget)
    owner = {n: i for i, p in enumerate(parts) for n in p}
    cap = size_cap * max(graph.num_ops, 1)

    def share(frac: float) -> Budget:
        return Budget(
            time_s=None if budget.time_s is None else budget.time_s * frac,
            expansions=None if budget.expansions is None else max(1, int(budget.expansions * frac)),
            k=budget.k, memory_mb=budget.memory_mb)

    current = outer.root
    part_frac = (1 - local_share) / max(len(parts), 1)
    for i in [*range(len(parts)), -1]:  # every part, then the search across split points
        if outer.out_of_budget():
            break
        s = _PartSearch("metaflow", current.graph, rules, cost, share(part_frac if i >= 0 else local_share))
        s.owner, s.part, s.reporter, s.whole_best = owner, i, outer.reporter, outer.best.value
        s.root = State(current.graph, current.cost, current.value, (), current.matches, fp=s.root.fp)
        s.best = s.root
        remaining_k = None if budget.k is None else budget.k - len(current.seq)
        s.budget = Budget(s.budget.time_s, s.budget.expansions, remaining_k, s.budget.memory_mb)
        best = _backtrack_from(s, s.root, alpha, cap)
        s.release()
        _merge_stats(outer, s)
        if best.value < current.value:
            current = State(best.graph, best.cost, best.value, (*current.seq, *best.seq), best.matches)
            outer.offer(current)
        for n in current.graph.nodes:  # nodes this part created now belong to it
            owner.setdefault(n, i)
    return outer.result(alpha=alpha, threshold=threshold, parts=len(parts),
                        part_sizes=sorted(len(p) for p in parts))


def _merge_stats(outer: Search, inner: Search) -> None:
    for f in ("expanded", "generated", "deduplicated", "pruned", "matches", "time_match_s", "time_apply_s",
              "time_hash_s", "time_cost_s"):
        setattr(outer.stats, f, getattr(outer.stats, f) + getattr(inner.stats, f))


__all__ = ["metaflow", "split_graph"]
