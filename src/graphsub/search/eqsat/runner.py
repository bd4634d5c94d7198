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
3. Stop on saturation (an iteration changes nothing), ``iter_limit``, ``node_limit`` e-nodes, or
   the saturation share of the time budget (``sat_frac`` of ``budget.time_s``).
4. Extraction: greedy tree cost first, then the ILP for the exact DAG cost with the rest of the
   time (``extract="greedy"`` skips it); the cheaper acyclic one is written back as a Graph and
   priced by the cost model itself (the reported cost is ``cost.graph_cost(best)``).  If it is
   not cheaper than the input the input is returned.
5. Anytime: while the e-graph has at most ``checkpoint_nodes`` e-nodes, each iteration ends with
   a short ILP extraction (<= 10% of the budget); the best graph so far warm-starts the final ILP
   and is kept if an e-graph grown too large for the ILP's time yields nothing better.

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

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from graphsub.cost.base import SumCostModel
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, SearchResult, Stats, Step, peak_rss_mb
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


def is_multi(rule: Rule) -> bool:
    """Multi-pattern rule: its source has several outputs (several roots in the e-graph)."""
    return len(rule.source.outputs) > 1


def saturate(graph: Graph, rules: Sequence[Rule], *, iter_limit: int = 15, node_limit: int = 50_000,
             time_limit_s: float = 30.0, multi_iters: int = 2, match_limit: int = 5_000,
             cycle_filter: bool = True, on_iteration: Callable[[EGraph, list[int]], None] | None = None,
             symmetry: bool = False) -> tuple[EGraph, list[int], dict[str, Any]]:
    """Build and saturate the e-graph of ``graph``; returns it, the output classes and a report.
    ``on_iteration(eg, roots)`` runs after each iteration's rebuild (its time counts)."""
    if iter_limit < 0 or node_limit < 1 or match_limit < 1 or multi_iters < 0:
        raise GraphsubError("eqsat limits must be positive (iter_limit, node_limit, match_limit, multi_iters >= 0)")
    t0 = time.perf_counter()
    eg, roots = EGraph.from_graph(graph)
    stop = "iterations"
    iters: list[dict[str, Any]] = []
    matches = applied = rejected = blacklisted = 0
    done: set[tuple[Any, ...]] = set()
    accepted: set[tuple[Any, ...]] = set()  # applied matches of symmetric rules (see symmetric_pair)

    def over() -> str:
        if time.perf_counter() - t0 > time_limit_s:
            return "time"
        if len(eg.hashcons) > node_limit:
            return "nodes"
        return ""

    for it in range(iter_limit):
        if (why := over()):
            stop = why
            break
        index = MatchIndex(eg)
        todo: list[tuple[EMatch, Any]] = []
        for rule in rules:
            if is_multi(rule) and it >= multi_iters:
                continue
            fresh = 0
            sym = symmetric_pair(rule) if symmetry else None
            for m in ematch(eg, rule, index):
                if m.key in done:
                    continue
                if sym is not None and mirror_key(m, sym) in accepted:
                    continue  # the mirrored match (same computation up to concat order) was applied
                if fresh >= match_limit:  # per rule and iteration; the rest wait for the next one
                    break
                fresh += 1
                done.add(m.key)
                matches += 1
                inst = instantiate(eg, m)
                if isinstance(inst, str):
                    rejected += 1
                else:
                    todo.append((m, inst))
                    if sym is not None:
                        accepted.add(m.key)
            if (why := over()):
                break
        changed = False
        for m, inst in todo:
            eg.tag = m.rule.name
            ok, _why = apply_instance(eg, m, inst)
            eg.tag = None
            changed |= ok
            applied += ok
            if over():
                break
        eg.rebuild()
        # keys of applied matches in canonical form again, so the next iteration skips them
        done = {(k[0], tuple(eg.canon(n) for n in k[1]), tuple((v, eg.find(c)) for v, c in k[2])) for k in done}
        accepted = {(k[0], tuple(eg.canon(n) for n in k[1]), tuple((v, eg.find(c)) for v, c in k[2]))
                    for k in accepted}
        if cycle_filter:
            blacklisted += filter_cycles(eg, roots)
        roots = [eg.find(r) for r in roots]
        if on_iteration is not None and changed and not over():
            on_iteration(eg, roots)
        iters.append({"iteration": it, "classes": eg.num_classes, "nodes": eg.num_nodes, "new_matches": len(todo),
                      "time_s": round(time.perf_counter() - t0, 4)})
        if (why := over()):
            stop = why
            break
        if not changed:
            stop = "saturated"
            break
    report = {"classes": eg.num_classes, "nodes": eg.num_nodes, "iterations": len(iters), "stop": stop,
              "matches": matches, "applied": applied, "rejected": rejected, "blacklisted": blacklisted,
              "time_s": time.perf_counter() - t0, "per_iteration": iters}
    return eg, roots, report


def eqsat(graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget, seed: int = 0, *,
          iter_limit: int = 15, node_limit: int = 50_000, multi_iters: int = 2, match_limit: int = 5_000,
          extract: str = "ilp", sat_frac: float = 0.5, ilp_time_s: float | None = None,
          cycle_filter: bool = True, checkpoint_nodes: int = 10_000, symmetry: bool = False) -> SearchResult:
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
    initial_detail = cost.graph_cost(graph)
    initial = cost.scalar(initial_detail)
    trace: list[tuple[float, float]] = [(0.0, initial)]
    base = cost.scalar(cost.base_cost())
    best: dict[str, Any] = {"graph": graph, "value": initial, "detail": initial_detail, "by": "input",
                            "checkpoints": []}

    def offer(g: Graph, by: str) -> None:
        detail = cost.graph_cost(g)
        value = cost.scalar(detail)
        if value < best["value"] - 1e-12 * abs(best["value"]):
            best.update(graph=g, value=value, detail=detail, by=by)
            trace.append((time.perf_counter() - t0, value))

    def checkpoint(eg: EGraph, roots: list[int]) -> None:
        """Anytime extraction while the e-graph is small: the best graph so far survives an
        e-graph too large for the final ILP, and warm-starts it."""
        if eg.num_nodes > checkpoint_nodes:
            return
        t = time.perf_counter()
        costs = NodeCosts(eg, cost)
        res = ilp(eg, roots, costs, warm=[choice_of_graph(eg, best["graph"])],
                  time_limit_s=max(0.5, 0.1 * total_s))
        if res.cost + base < best["value"]:
            offer(to_graph(eg, res.choice, roots, graph), "checkpoint")
        best["checkpoints"].append({"nodes": eg.num_nodes, "cost": res.cost + base, "status": res.status,
                                    "time_s": time.perf_counter() - t})

    eg, roots, rep = saturate(graph, rules, iter_limit=iter_limit, node_limit=node_limit,
                              time_limit_s=total_s * sat_frac, multi_iters=multi_iters, match_limit=match_limit,
                              cycle_filter=cycle_filter, symmetry=symmetry,
                              on_iteration=checkpoint if checkpoint_nodes and extract == "ilp" else None)
    origin: dict[ENode, str] = eg.origin
    costs = NodeCosts(eg, cost)
    t_ex = time.perf_counter()
    g_choice, _ = greedy_tree(eg, costs)
    g_cost = dag_cost(eg, g_choice, roots, costs) + base
    prior = choice_of_graph(eg, best["graph"])
    extraction: dict[str, Any] = {"greedy_dag_cost": g_cost, "greedy_time_s": time.perf_counter() - t_ex,
                                  "checkpoints": best["checkpoints"]}
    choice: Choice = g_choice
    final_cost = g_cost
    if extract == "ilp":
        left = total_s - (time.perf_counter() - t0)
        limit = max(1.0, left) if ilp_time_s is None else ilp_time_s
        res = ilp(eg, roots, costs, warm=[g_choice, prior], time_limit_s=limit)
        extraction.update({"ilp_cost": res.cost + base, "ilp_status": res.status, "ilp_time_s": res.time_s,
                           "ilp_rounds": res.rounds, "ilp_cycle_cuts": res.cuts, "ilp_vars": res.variables,
                           "ilp_rows": res.constraints, "ilp_gap": res.gap})
        if res.cost + base < final_cost:
            choice, final_cost = res.choice, res.cost + base
    offer(to_graph(eg, choice, roots, graph), "ilp" if extract == "ilp" and choice is not g_choice else "greedy")
    extraction["chosen"] = best["by"]
    extraction["extracted_cost"] = best["value"]
    value, detail = best["value"], best["detail"]
    final = choice_of_graph(eg, best["graph"]) or {}
    used = Counter(origin[final[c]] for c in reachable(eg, final, roots) or () if final[c] in origin)
    sequence = tuple(Step(f"{r} x{n}", (), value) for r, n in sorted(used.items()))
    stats = Stats(expanded=rep["iterations"], generated=rep["applied"], matches=rep["matches"],
                  pruned=rep["rejected"], time_match_s=rep["time_s"])
    wall = time.perf_counter() - t0
    trace.append((wall, value))
    params = {"egraph": {k: v for k, v in rep.items() if k != "per_iteration"}, "per_iteration": rep["per_iteration"],
              "extraction": extraction, "iter_limit": iter_limit, "node_limit": node_limit,
              "multi_iters": multi_iters, "extract": extract}
    return SearchResult(algorithm="eqsat", best=best["graph"], best_cost=value, best_cost_detail=detail,
                        initial_cost=initial, sequence=sequence, stats=stats, wall_time_s=wall,
                        peak_mem_mb=peak_rss_mb(), trace=tuple(trace), stopped_by=rep["stop"], params=params)


__all__ = ["EXTRACTORS", "eqsat", "is_multi", "saturate"]
