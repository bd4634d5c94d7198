"""``search(..., algo="eqsat")``: equality saturation and exact DAG extraction (Tensat, MLSys'21).

1. The input graph becomes an e-graph (:class:`~graphsub.search.eqsat.egraph.EGraph`).
2. Iterations: every rule's source is matched over the e-graph (:func:`ematch`), ``where``
   conditions are checked and targets built into new e-nodes through the rule's own target
   function (:mod:`graphsub.search.eqsat.ematch`), target outputs are unioned with the source
   outputs, then the e-graph is rebuilt and cycles reachable from the outputs are filtered.
   Rules with several source outputs (Tensat's multi-pattern rules, e.g. merging two matmuls
   that share an input) run only in the first ``multi_iters`` iterations, as Tensat's
   ``k_multi`` -- they grow the e-graph fastest.  ``symmetry=True`` applies two-node symmetric
   ones in one order only (:func:`~graphsub.search.eqsat.ematch.symmetric_pair`): smaller e-graphs
   (NasRNN-1: 6.6k instead of 25k e-nodes, same optimum) but not lossless -- the concat order can
   decide whether a later split/concat cancels (NasNet-A: 5.746 instead of 5.729 ms), so it is off
   by default.
3. Stop on saturation (an iteration changes nothing), ``iter_limit``, ``node_limit`` e-nodes,
   the saturation share of the time budget (``sat_frac`` of ``budget.time_s``), or a stop request
   (:func:`graphsub.interrupt.stop_requested`, the first Ctrl-C: ``stopped_by == "interrupt"``).
   The limits are checked between rules, every :data:`CHECK_EVERY` matches and inside e-matching.
4. Extraction: greedy tree cost first, then the ILP for the exact DAG cost with the rest of the
   time (at least 10% of the budget, at most 1 s, when saturation used it all; none after a stop
   request, and a running solve is interrupted by one) (``extract="greedy"`` skips it); the
   cheaper acyclic one is written back as a Graph and
   priced by the cost model itself (the reported cost is ``cost.graph_cost(best)``).  If it is
   not cheaper than the input the input is returned.
5. Anytime: while the e-graph has at most ``checkpoint_nodes`` e-nodes, each iteration ends with
   a short ILP extraction (<= 10% of the budget); the best graph so far warm-starts the final ILP
   and is kept if an e-graph grown too large for the ILP's time yields nothing better.
6. Progress (``progress``): the input's cost at the start, every better graph (checkpoint or
   final extraction), and heartbeats from saturation's budget checks and from the ILP (between
   rounds and at HiGHS's interrupt checks, which can be seconds apart in a large solve).

``budget.k`` does not apply (an extraction combines any number of rewrites); ``budget.expansions``
caps the iterations.  The result's ``sequence`` lists, per rule, how many e-nodes it created that
the extracted graph uses; ``params`` holds the e-graph size and extraction details.

>>> from graphsub import zoo
>>> from graphsub.cost import get_model
>>> from graphsub.rules import get_set
>>> r = eqsat(zoo.get("sru", length=1), get_set("ocggs157"), get_model("roofline:p100"), Budget(time_s=20))
>>> r.best_cost <= r.initial_cost, r.params["egraph"]["classes"] > 0
(True, True)
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from graphsub.cost.base import SumCostModel
from graphsub.errors import BudgetExceeded, GraphsubError
from graphsub.interrupt import stop_requested
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.base import (
    Budget,
    Progress,
    ProgressFn,
    SearchResult,
    Stats,
    Step,
    improves,
    peak_rss_mb,
    root_cost,
)
from graphsub.search.eqsat.cycles import filter_cycles
from graphsub.search.eqsat.egraph import EGraph, ENode
from graphsub.search.eqsat.ematch import (
    EMatch,
    MatchIndex,
    apply_instance,
    ematch,
    instantiate,
    mirror_key,
    symmetric_pair,
)
from graphsub.search.eqsat.extract import (
    Choice,
    NodeCosts,
    choice_of_graph,
    dag_cost,
    greedy_tree,
    ilp,
    reachable,
    to_graph,
)

EXTRACTORS = ("ilp", "greedy")
#: matches instantiated between two budget checks of saturation
CHECK_EVERY = 64


def is_multi(rule: Rule) -> bool:
    """Multi-pattern rule: its source has several outputs (several roots in the e-graph)."""
    return len(rule.source.outputs) > 1


def saturate(graph: Graph, rules: Sequence[Rule], *, iter_limit: int = 15, node_limit: int = 50_000,
             time_limit_s: float = 30.0, multi_iters: int = 2, match_limit: int = 5_000,
             cycle_filter: bool = True, on_iteration: Callable[[EGraph, list[int]], None] | None = None,
             symmetry: bool = False, tick: Callable[[float], None] | None = None,
             ) -> tuple[EGraph, list[int], dict[str, Any]]:
    """Build and saturate the e-graph of ``graph``; returns it, the output classes and a report.
    ``on_iteration(eg, roots)`` runs after each iteration's rebuild (its time counts); ``tick(now)``
    gets the ``time.perf_counter()`` reading of every budget check (a progress heartbeat)."""
    if iter_limit < 0 or node_limit < 1 or match_limit < 1 or multi_iters < 0:
        raise GraphsubError("eqsat limits must be positive (iter_limit, node_limit, match_limit, multi_iters >= 0)")
    sat = _Saturation(graph, node_limit, time_limit_s, match_limit, symmetry, tick)
    stop = "iterations"
    iters: list[dict[str, Any]] = []
    for it in range(iter_limit):
        if (why := sat.over()):
            stop = why
            break
        todo = sat.collect([r for r in rules if not (is_multi(r) and it >= multi_iters)])
        changed = sat.apply(todo)
        sat.rebuild(cycle_filter)
        if on_iteration is not None and changed and not sat.over():
            on_iteration(sat.eg, sat.roots)
        iters.append({"iteration": it, "classes": sat.eg.num_classes, "nodes": sat.eg.num_nodes,
                      "new_matches": len(todo), "time_s": round(time.perf_counter() - sat.t0, 4)})
        if (why := sat.over()):
            stop = why
            break
        if not changed:
            stop = "saturated"
            break
    eg = sat.eg
    report = {"classes": eg.num_classes, "nodes": eg.num_nodes, "iterations": len(iters), "stop": stop,
              "matches": sat.matches, "applied": sat.applied, "rejected": sat.rejected,
              "blacklisted": sat.blacklisted, "time_s": time.perf_counter() - sat.t0, "per_iteration": iters}
    return eg, sat.roots, report


class _Saturation:
    """The state of one :func:`saturate` run: the e-graph, its output classes, the keys of the
    matches applied so far (in canonical form after each rebuild, so no match is applied twice)
    and the counters of the report."""

    def __init__(self, graph: Graph, node_limit: int, time_limit_s: float, match_limit: int, symmetry: bool,
                 tick: Callable[[float], None] | None):
        self.t0 = time.perf_counter()
        self.node_limit, self.time_limit_s, self.match_limit = node_limit, time_limit_s, match_limit
        self.symmetry, self.tick = symmetry, tick
        self.eg, self.roots = EGraph.from_graph(graph)
        self.matches = self.applied = self.rejected = self.blacklisted = 0
        self.done: set[tuple[Any, ...]] = set()
        self.accepted: set[tuple[Any, ...]] = set()  # applied matches of symmetric rules (see symmetric_pair)

    def over(self) -> str:
        """Which limit ran out (``"interrupt"``, ``"time"``, ``"nodes"``), or ``""``."""
        now = time.perf_counter()
        if self.tick is not None:
            self.tick(now)
        if stop_requested():
            return "interrupt"
        if now - self.t0 > self.time_limit_s:
            return "time"
        if len(self.eg.hashcons) > self.node_limit:
            return "nodes"
        return ""

    def collect(self, rules: Sequence[Rule]) -> list[tuple[EMatch, Any]]:
        """New matches of ``rules`` that pass their conditions, with their instantiated targets
        (at most ``match_limit`` new ones per rule; the rest wait for the next iteration)."""
        eg = self.eg
        index = MatchIndex(eg)
        todo: list[tuple[EMatch, Any]] = []
        stop = self.over_bool
        for rule in rules:
            fresh = 0
            sym = symmetric_pair(rule) if self.symmetry else None
            try:
                for i, m in enumerate(ematch(eg, rule, index, stop=stop)):
                    if i % CHECK_EVERY == CHECK_EVERY - 1 and stop():
                        break
                    if m.key in self.done:
                        continue
                    if sym is not None and mirror_key(m, sym) in self.accepted:
                        continue  # the mirrored match (same computation up to concat order) was applied
                    if fresh >= self.match_limit:
                        break
                    fresh += 1
                    self.done.add(m.key)
                    self.matches += 1
                    inst = instantiate(eg, m)
                    if isinstance(inst, str):
                        self.rejected += 1
                    else:
                        todo.append((m, inst))
                        if sym is not None:
                            self.accepted.add(m.key)
            except BudgetExceeded:
                break
            if self.over():
                break
        return todo

    def over_bool(self) -> bool:
        return bool(self.over())

    def apply(self, todo: Sequence[tuple[EMatch, Any]]) -> bool:
        """Add the targets of ``todo`` to the e-graph (tagged with their rule); whether it changed."""
        changed = False
        for m, inst in todo:
            self.eg.tag = m.rule.name
            ok, _why = apply_instance(self.eg, m, inst)
            self.eg.tag = None
            changed |= ok
            self.applied += ok
            if self.over():
                break
        return changed

    def rebuild(self, cycle_filter: bool) -> None:
        """Restore congruence, re-canonicalise the applied matches' keys, filter cycles."""
        eg = self.eg
        eg.rebuild()
        self.done = {self._canon(k) for k in self.done}
        self.accepted = {self._canon(k) for k in self.accepted}
        if cycle_filter:
            self.blacklisted += filter_cycles(eg, self.roots)
        self.roots = [eg.find(r) for r in self.roots]

    def _canon(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        eg = self.eg
        return key[0], tuple(eg.canon(n) for n in key[1]), tuple((v, eg.find(c)) for v, c in key[2])


class _Anytime:
    """The best graph of one :func:`eqsat` run so far (initially the input), its trace and its
    progress reports; ``checkpoint`` extracts from a small e-graph during saturation."""

    def __init__(self, graph: Graph, cost: SumCostModel, t0: float, progress: ProgressFn | None):
        self.like, self.cost, self.t0 = graph, cost, t0
        self.graph, self.by = graph, "input"
        self.detail, self.priced = root_cost(cost, graph)
        self.value = self.initial = cost.scalar(self.detail)
        self.trace: list[tuple[float, float]] = [(0.0, self.value)]
        self.checkpoints: list[dict[str, Any]] = []
        self.reporter = None if progress is None else Progress(progress, t0, self.value)
        self.tick = None if self.reporter is None else self.reporter.tick

    def offer(self, g: Graph, by: str) -> None:
        """Keep ``g`` (found by ``by``) if it is cheaper under the cost model itself (not when a measured
        model ran out of budget pricing it)."""
        if self.priced:
            return
        try:
            detail = self.cost.graph_cost(g)
        except BudgetExceeded:
            return
        value = self.cost.scalar(detail)
        if improves(value, self.value):
            self.graph, self.value, self.detail, self.by = g, value, detail, by
            now = time.perf_counter()
            self.trace.append((now - self.t0, value))
            if self.reporter is not None:
                self.reporter.improved(now, value)

    def checkpoint(self, eg: EGraph, roots: list[int], *, max_nodes: int, base: float, time_limit_s: float,
                   end: float = math.inf) -> None:
        """Anytime extraction while the e-graph has at most ``max_nodes`` e-nodes: the best graph so
        far survives an e-graph too large for the final ILP, and warm-starts it.  The solve ends by
        ``end`` (a ``time.perf_counter()`` reading: the search's deadline) at the latest."""
        t = time.perf_counter()
        time_limit_s = min(time_limit_s, end - t)
        if eg.num_nodes > max_nodes or time_limit_s <= 0.05:
            return
        costs = NodeCosts(eg, self.cost)
        res = ilp(eg, roots, costs, warm=[choice_of_graph(eg, self.graph)], time_limit_s=time_limit_s, tick=self.tick)
        if res.cost + base < self.value:
            self.offer(to_graph(eg, res.choice, roots, self.like), "checkpoint")
        self.checkpoints.append({"nodes": eg.num_nodes, "cost": res.cost + base, "status": res.status,
                                 "time_s": time.perf_counter() - t})


def eqsat(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
          iter_limit: int = 15, node_limit: int = 50_000, multi_iters: int = 2, match_limit: int = 5_000,
          extract: str = "ilp", sat_frac: float = 0.5, ilp_time_s: float | None = None,
          cycle_filter: bool = True, checkpoint_nodes: int = 10_000, symmetry: bool = False,
          progress: ProgressFn | None = None) -> SearchResult:
    """Equality saturation + extraction (module docstring); ``seed`` is unused (deterministic)."""
    if extract not in EXTRACTORS:
        raise GraphsubError(f"unknown extractor {extract!r}; known: {', '.join(EXTRACTORS)}")
    if not 0.0 < sat_frac <= 1.0:
        raise GraphsubError(f"sat_frac must be in (0, 1], got {sat_frac}")
    t0 = time.perf_counter()
    total_s = budget.time_s if budget.time_s is not None else 3600.0
    if budget.expansions is not None:
        iter_limit = min(iter_limit, budget.expansions)
    NodeCosts(EGraph(), cost)  # rejects context-dependent cost models before any work
    prev_stop, end = cost.stop, t0 + total_s
    cost.stop = lambda: stop_requested() or time.perf_counter() > end  # a measured model stops measuring then
    try:
        best = _Anytime(graph, cost, t0, progress)
        base = cost.scalar(cost.base_cost())
        on_iteration = None
        if checkpoint_nodes and extract == "ilp":
            on_iteration = functools.partial(best.checkpoint, max_nodes=checkpoint_nodes, base=base,
                                             time_limit_s=max(0.5, 0.1 * total_s), end=t0 + total_s)
        eg, roots, rep = saturate(graph, rules, iter_limit=iter_limit, node_limit=node_limit,
                                  time_limit_s=max(0.0, total_s * sat_frac - (time.perf_counter() - t0)),
                                  multi_iters=multi_iters, match_limit=match_limit,
                                  cycle_filter=cycle_filter, symmetry=symmetry, on_iteration=on_iteration,
                                  tick=best.tick)

        def ilp_limit() -> float:  # the final ILP's time: what is left of the budget when it starts, by default
            if stop_requested():
                return 0.0
            floor = min(1.0, 0.1 * total_s)
            return max(floor, total_s - (time.perf_counter() - t0)) if ilp_time_s is None else ilp_time_s

        choice, by, extraction = _extract(eg, roots, NodeCosts(eg, cost), base, best,
                                          ilp_limit if extract == "ilp" else None)
        best.offer(to_graph(eg, choice, roots, graph), by)
        extraction["chosen"] = best.by
        extraction["extracted_cost"] = best.value
        stats = Stats(expanded=rep["iterations"], generated=rep["applied"], matches=rep["matches"],
                      pruned=rep["rejected"], time_match_s=rep["time_s"])
        wall = time.perf_counter() - t0
        best.trace.append((wall, best.value))
        params = {"egraph": {k: v for k, v in rep.items() if k != "per_iteration"},
                  "per_iteration": rep["per_iteration"], "extraction": extraction, "iter_limit": iter_limit,
                  "node_limit": node_limit, "multi_iters": multi_iters, "extract": extract,
                  **({"initial_cost": best.priced} if best.priced else {})}
        return SearchResult(algorithm="eqsat", best=best.graph, best_cost=best.value, best_cost_detail=best.detail,
                            initial_cost=best.initial, sequence=_rules_used(eg, roots, best.graph, best.value),
                            stats=stats, wall_time_s=wall, peak_mem_mb=peak_rss_mb(), trace=tuple(best.trace),
                            stopped_by=rep["stop"], params=params)
    finally:
        cost.stop = prev_stop


def _extract(eg: EGraph, roots: list[int], costs: NodeCosts, base: float, best: _Anytime,
             ilp_limit: Callable[[], float] | None) -> tuple[Choice, str, dict[str, Any]]:
    """Greedy tree extraction, then (with ``ilp_limit``, the ILP's time limit when it starts) the
    ILP warm-started from it and from ``best``'s graph; the cheaper choice, its extractor's name
    and the extraction report."""
    t_ex = time.perf_counter()
    g_choice, _ = greedy_tree(eg, costs)
    g_cost = dag_cost(eg, g_choice, roots, costs) + base
    prior = choice_of_graph(eg, best.graph)
    extraction: dict[str, Any] = {"greedy_dag_cost": g_cost, "greedy_time_s": time.perf_counter() - t_ex,
                                  "checkpoints": best.checkpoints}
    if ilp_limit is None:
        return g_choice, "greedy", extraction
    res = ilp(eg, roots, costs, warm=[g_choice, prior], time_limit_s=ilp_limit(), tick=best.tick)
    extraction.update({"ilp_cost": res.cost + base, "ilp_status": res.status, "ilp_time_s": res.time_s,
                       "ilp_rounds": res.rounds, "ilp_cycle_cuts": res.cuts, "ilp_vars": res.variables,
                       "ilp_rows": res.constraints, "ilp_gap": res.gap})
    if res.cost + base < g_cost:
        return res.choice, "ilp", extraction
    return g_choice, "greedy", extraction


def _rules_used(eg: EGraph, roots: list[int], graph: Graph, value: float) -> tuple[Step, ...]:
    """Per rule, how many e-nodes it created that ``graph`` (an extraction of ``eg``) uses, as
    result steps (in rule-name order, all with the final cost ``value``)."""
    final = choice_of_graph(eg, graph) or {}
    origin: dict[ENode, str] = eg.origin
    used = Counter(origin[final[c]] for c in reachable(eg, final, roots) or () if final[c] in origin)
    return tuple(Step(f"{r} x{n}", (), value) for r, n in sorted(used.items()))


__all__ = ["EXTRACTORS", "eqsat", "is_multi", "saturate"]
