"""Extraction: choose one e-node per needed e-class, minimising the cost of the resulting DAG.

* :func:`greedy_tree` -- per class, the e-node minimising ``own cost + sum of child class costs``
  (a fixpoint over the e-graph; egg's ``Extractor``).  It prices a *tree*: a class used twice is
  paid twice, so it misjudges graphs with sharing (Tensat's NasNet-A observation), but its choice
  is always acyclic and finite.
* :func:`ilp` -- the exact DAG cost as a 0/1 program (Tensat's ``extractor/extract.py``), solved
  with HiGHS (``highspy``) under a time limit, warm-started from the greedy choice: a binary
  ``x_n`` per e-node; each root class picks a node; a picked node needs a picked node in each
  child class; minimise ``sum cost_n x_n``.  Cycles are excluded *lazily*: the solution is
  checked, and each cycle found adds the cut ``sum_{n in cycle} x_n <= |cycle| - 1`` before
  solving again; if the limit runs out, the best acyclic solution seen (at worst the greedy one)
  is kept, so the result is always acyclic.
* :func:`dag_cost` prices a choice as a DAG (each reachable class once) and :func:`to_graph`
  writes it back as a graphsub :class:`~graphsub.ir.graph.Graph`.

Costs: ``cost.node_cost(sig, consts)`` of the model (consts = which children are weight-only);
leaves, projections and weight-only e-nodes are free (they are folded before run time).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.cost.base import SumCostModel
from graphsub.errors import BudgetExceeded, GraphsubError
from graphsub.interrupt import stop_requested
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, Ref
from graphsub.search.eqsat.egraph import EGraph, ENode

Choice = dict[int, ENode]

#: HiGHS primal-heuristic share (default 0.05): time-limited solves on large e-graphs find much
#: better incumbents with more (BERT, 30 s budget: 0.94 -> 0.81 ms, then proven optimal).
MIP_HEURISTIC_EFFORT = 0.3


#: the cost of an e-node a measured model did not price because the budget ran out: never extracted when
#: the input's own e-nodes (always priced) are an alternative
UNPRICED = 1e9


class NodeCosts:
    """Scalar run-time cost of each e-node under a per-op (sum) cost model, memoised (:data:`UNPRICED`
    when the model stops measuring, see :attr:`~graphsub.cost.base.SumCostModel.stop`)."""

    def __init__(self, eg: EGraph, cost: SumCostModel):
        if cost.context_radius:
            raise GraphsubError(f"eqsat needs a per-op cost model; {cost.name!r} prices ops in context "
                                "(use e.g. roofline:p100, flops or measured)")
        self.eg = eg
        self.cost = cost
        self._memo: dict[ENode, float] = {}

    def __call__(self, node: ENode) -> float:
        hit = self._memo.get(node)
        if hit is not None:
            return hit
        eg = self.eg
        head, children = node
        if isinstance(head, int) or head.opdef.leaf or (not children and head.opdef.weight_op):
            c = 0.0
        else:
            consts = tuple(eg.classes[eg.find(ch)].wo for ch in children)
            # weight-only nodes are folded before run time
            try:
                c = 0.0 if all(consts) else self.cost.scalar(self.cost.node_cost(head, consts))
            except BudgetExceeded:
                c = UNPRICED
        self._memo[node] = c
        return c


def _candidates(eg: EGraph, cid: int) -> list[ENode]:
    """E-nodes extraction may pick in a class: its leaf if it has one (graph inputs and weights
    stay themselves), else every non-blacklisted node."""
    nodes = list(eg.nodes_of(cid))
    if eg.classes[cid].leaf:
        leaves = [n for n in nodes if not isinstance(n[0], int) and n[0].opdef.leaf]
        if leaves:
            return leaves[:1]
    return nodes


def greedy_tree(eg: EGraph, costs: NodeCosts) -> tuple[Choice, dict[int, float]]:
    """Tree-cost greedy choice for every class that has a finite (acyclic) derivation."""
    best: dict[int, float] = {}
    choice: Choice = {}
    cands = {cid: _candidates(eg, cid) for cid in eg.classes}
    changed = True
    while changed:
        changed = False
        for cid, nodes in cands.items():
            cur = best.get(cid, math.inf)
            for n in nodes:
                total = costs(n)
                for ch in n[1]:
                    total += best.get(eg.find(ch), math.inf)
                    if total >= cur:
                        break
                if total < cur - 1e-15 * max(1.0, abs(cur) if cur < math.inf else 1.0):
                    cur = total
                    best[cid] = total
                    choice[cid] = n
                    changed = True
    return choice, best


def reachable(eg: EGraph, choice: Mapping[int, ENode], roots: Sequence[int]) -> list[int] | None:
    """Classes the choice uses, children before parents; None if the choice has a cycle or
    misses a class."""
    order: list[int] = []
    state: dict[int, int] = {}
    for root in roots:
        stack = [(eg.find(root), 0)]
        while stack:
            cid, i = stack[-1]
            if i == 0:
                st = state.get(cid)
                if st == 2:
                    stack.pop()
                    continue
                if st == 1:
                    return None
                state[cid] = 1
                if cid not in choice:
                    return None
            kids = choice[cid][1]
            if i < len(kids):
                stack[-1] = (cid, i + 1)
                ch = eg.find(kids[i])
                st = state.get(ch)
                if st == 1:
                    return None
                if st is None:
                    stack.append((ch, 0))
            else:
                stack.pop()
                state[cid] = 2
                order.append(cid)
    return order


def dag_cost(eg: EGraph, choice: Mapping[int, ENode], roots: Sequence[int], costs: NodeCosts) -> float:
    """Cost of the DAG a choice describes (each used class paid once); inf if cyclic."""
    order = reachable(eg, choice, roots)
    if order is None:
        return math.inf
    return sum(costs(choice[c]) for c in order)


def _find_cycle(eg: EGraph, choice: Mapping[int, ENode], roots: Sequence[int]) -> list[ENode] | None:
    """The e-nodes of one cycle of the choice (reachable from the roots), or None."""
    state: dict[int, int] = {}
    for root in roots:
        path: list[int] = []
        stack = [(eg.find(root), 0)]
        while stack:
            cid, i = stack[-1]
            if i == 0:
                if state.get(cid) == 2 or cid not in choice:
                    stack.pop()
                    continue
                state[cid] = 1
                path.append(cid)
            kids = choice[cid][1]
            if i < len(kids):
                stack[-1] = (cid, i + 1)
                ch = eg.find(kids[i])
                if state.get(ch) == 1:
                    return [choice[c] for c in path[path.index(ch):]]
                if state.get(ch) is None:
                    stack.append((ch, 0))
            else:
                stack.pop()
                path.pop()
                state[cid] = 2
    return None


def _undominated(eg: EGraph, nodes: list[ENode], costs: NodeCosts, keep: set[ENode]) -> list[ENode]:
    """Drop e-nodes that another e-node of the class dominates: no dearer and needing a subset of
    its child classes (any extraction using the dominated one can switch; e.g. ``add(a, b)`` vs
    ``add(b, a)``).  Nodes in ``keep`` (warm starts) stay.  Exact subset checks up to 64 nodes."""
    if len(nodes) < 2:
        return nodes
    keyed = sorted(((costs(n), len(set(n[1])), i, frozenset(eg.find(c) for c in n[1]), n)
                    for i, n in enumerate(nodes)), key=lambda t: (t[0], t[1], t[2]))
    kept: list[tuple[float, frozenset[int], ENode]] = []
    exact = len(nodes) <= 64
    seen: set[frozenset[int]] = set()
    for c, _, _, ch, n in keyed:
        if n not in keep:
            if ch in seen:
                continue
            if exact and any(kc <= c and kch <= ch for kc, kch, _ in kept):
                continue
        seen.add(ch)
        kept.append((c, ch, n))
    return [n for _, _, n in kept]


@dataclass
class IlpResult:
    choice: Choice
    cost: float
    status: str
    rounds: int = 0
    cuts: int = 0
    time_s: float = 0.0
    variables: int = 0
    constraints: int = 0
    gap: float | None = None
    log: list[str] = field(default_factory=list)


def ilp(eg: EGraph, roots: Sequence[int], costs: NodeCosts, *, warm: Choice | Sequence[Choice | None] | None = None,
        time_limit_s: float = 30.0, max_rounds: int = 50, tick: Callable[[float], None] | None = None) -> IlpResult:
    """Exact DAG extraction with HiGHS (see the module docstring).  ``warm``: starting choices (the
    cheapest acyclic one is the incumbent; the greedy choice is always a candidate).  ``tick(now)``
    is called with ``time.perf_counter()`` between rounds and at HiGHS's interrupt checks (a
    progress heartbeat; it does not change the result).  A stop request
    (:func:`graphsub.interrupt.stop_requested`) interrupts the solve at its next check and ends the
    rounds (``status == "interrupt"``; the best acyclic choice so far is returned)."""
    t0 = time.perf_counter()
    roots = [eg.find(r) for r in roots]
    greedy_choice, best = greedy_tree(eg, costs)
    starts: list[Choice] = [greedy_choice]
    if isinstance(warm, dict):
        starts.append(warm)
    elif warm is not None:
        starts.extend(w for w in warm if w is not None)
    first = min(range(len(starts)), key=lambda i: (dag_cost(eg, starts[i], roots, costs), i))
    incumbent = dict(starts[first])
    if stop_requested() or time_limit_s - (time.perf_counter() - t0) <= 0.05:  # no time to build and solve
        status = "interrupt" if stop_requested() else "time"
        return IlpResult(incumbent, dag_cost(eg, incumbent, roots, costs), status,
                         time_s=time.perf_counter() - t0)
    prog = _Program(eg, roots, costs, _needed(eg, roots, costs, best, starts))
    res = IlpResult(incumbent, dag_cost(eg, incumbent, roots, costs), "greedy", variables=prog.ncol,
                    constraints=prog.nrows)
    if tick is not None:
        prog.h.cbMipInterrupt.subscribe(lambda _event: tick(time.perf_counter()))
    prog.h.cbMipInterrupt.subscribe(_interrupt_on_stop)
    start = prog.indicator(res.choice)
    for rnd in range(max_rounds):
        now = time.perf_counter()
        if tick is not None:
            tick(now)
        if stop_requested():
            res.status = "interrupt"
            break
        left = time_limit_s - (now - t0)
        if left <= 0.05:
            res.status = "time"
            break
        res.rounds = rnd + 1
        cut = _round(prog, res, start, left, rnd)
        if cut is None:  # done (solved, or the solver gave up)
            break
        start = cut
    else:
        res.status = "max rounds"
    res.time_s = time.perf_counter() - t0
    return res


def _interrupt_on_stop(event: Any) -> None:
    """HiGHS callback: stop the solve when a stop was requested (the first Ctrl-C)."""
    if stop_requested():
        event.interrupt()


def _needed(eg: EGraph, roots: Sequence[int], costs: NodeCosts, best: Mapping[int, float],
            starts: Sequence[Choice]) -> dict[int, list[ENode]]:
    """The candidate e-nodes of every class reachable from ``roots`` through e-nodes whose children
    all have a derivation (a class in ``best``), undominated ones only (warm-start nodes stay)."""
    cls_nodes: dict[int, list[ENode]] = {}
    stack = list(dict.fromkeys(roots))
    while stack:
        cid = stack.pop()
        if cid in cls_nodes:
            continue
        nodes = _undominated(eg, [n for n in _candidates(eg, cid) if all(eg.find(c) in best for c in n[1])],
                             costs, keep={w[cid] for w in starts if cid in w})
        cls_nodes[cid] = nodes
        for n in nodes:
            for c in n[1]:
                c = eg.find(c)
                if c not in cls_nodes:
                    stack.append(c)
    return cls_nodes


class _Program:
    """The 0/1 program over ``cls_nodes`` in HiGHS: a binary column per e-node (cost + a tiny
    epsilon), a row per root class (pick a node) and per (node, child class) (a picked node needs
    a picked node in each child class); cycle cuts are added by :func:`_round`."""

    def __init__(self, eg: EGraph, roots: Sequence[int], costs: NodeCosts, cls_nodes: dict[int, list[ENode]]):
        import highspy

        self.eg, self.roots, self.costs = eg, roots, costs
        self.col: dict[ENode, int] = {}
        self.col_nodes: list[tuple[int, ENode]] = []
        for cid, nodes in cls_nodes.items():
            for n in nodes:
                self.col[n] = len(self.col_nodes)
                self.col_nodes.append((cid, n))
        h = self.h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        h.setOptionValue("mip_heuristic_effort", MIP_HEURISTIC_EFFORT)
        inf = highspy.kHighsInf
        ncol = self.ncol = len(self.col_nodes)
        obj = [costs(n) for _, n in self.col_nodes]
        pos = [c for c in obj if c > 0]
        eps = 1e-7 * (sum(pos) / len(pos) if pos else 1.0)  # discourages picking free nodes nobody needs
        self.obj = [c + eps for c in obj]
        h.addVars(ncol, [0.0] * ncol, [1.0] * ncol)
        h.changeColsCost(ncol, list(range(ncol)), self.obj)
        h.changeColsIntegrality(ncol, np.arange(ncol, dtype=np.int32),
                                np.full(ncol, highspy.HighsVarType.kInteger.value, dtype=np.uint8))
        self.nrows = 0
        for r in dict.fromkeys(roots):
            idx = [self.col[n] for n in cls_nodes[r]]
            h.addRow(1.0, inf, len(idx), idx, [1.0] * len(idx))
            self.nrows += 1
        for j, (_, n) in enumerate(self.col_nodes):
            for c in dict.fromkeys(eg.find(c) for c in n[1]):
                idx = [self.col[m] for m in cls_nodes[c]]
                # sum_{m in child class} x_m - x_n >= 0
                h.addRow(0.0, inf, len(idx) + 1, [*idx, j], [1.0] * len(idx) + [-1.0])
                self.nrows += 1

    def indicator(self, choice: Choice) -> list[float]:
        """The column values of ``choice`` (1 for the e-nodes it uses)."""
        start = [0.0] * self.ncol
        for cu in reachable(self.eg, choice, self.roots) or []:
            ju = self.col.get(choice[cu])
            if ju is not None:
                start[ju] = 1.0
        return start

    def picked(self, values: Sequence[float]) -> Choice:
        """The choice a solution describes (the cheapest picked e-node of each class)."""
        picked: Choice = {}
        for j, v in enumerate(values):
            if v > 0.5:
                cid, n = self.col_nodes[j]
                if cid not in picked or self.obj[j] < self.costs(picked[cid]):
                    picked[cid] = n
        return picked


def _round(prog: _Program, res: IlpResult, start: list[float], left: float, rnd: int) -> list[float] | None:
    """One solve from ``start`` within ``left`` seconds, recorded in ``res``; the next start if it
    found a cycle (cut off by a new row), None when done."""
    import highspy

    h, eg, roots, costs = prog.h, prog.eg, prog.roots, prog.costs
    h.setOptionValue("time_limit", float(left))
    sol = highspy.HighsSolution()
    sol.col_value = start
    sol.value_valid = True
    h.setSolution(sol)
    h.run()
    status = h.getModelStatus()
    values = list(h.getSolution().col_value)
    if len(values) != prog.ncol:
        res.status = f"solver: {h.modelStatusToString(status)}"
        return None
    picked = prog.picked(values)
    res.gap = h.getInfo().mip_gap
    cyc = _find_cycle(eg, picked, roots) if all(r in picked for r in roots) else None
    if cyc is None and reachable(eg, picked, roots) is not None:
        pc = dag_cost(eg, picked, roots, costs)
        if pc < res.cost - 1e-12 * max(1.0, abs(res.cost)):
            res.choice, res.cost = picked, pc
        optimal = status == highspy.HighsModelStatus.kOptimal
        res.status = "optimal" if optimal else f"solver: {h.modelStatusToString(status)}"
        return None
    if cyc is None:
        res.status = "incomplete solution"
        return None
    idx = sorted({prog.col[n] for n in cyc})
    h.addRow(-highspy.kHighsInf, len(idx) - 1.0, len(idx), idx, [1.0] * len(idx))
    res.cuts += 1
    res.log.append(f"round {rnd}: cycle of {len(idx)} e-nodes cut")
    return values


def choice_of_graph(eg: EGraph, graph: Graph) -> Choice | None:
    """The e-nodes that spell ``graph`` in ``eg`` (a graph the e-graph represents, e.g. the input or
    an earlier extraction), or None if one is missing or blacklisted."""
    cls_of: dict[Ref, int] = {}
    choice: Choice = {}
    for nid in graph.topo_order():
        node = graph.nodes[nid]
        try:
            en: ENode = (node.sig, tuple(eg.find(cls_of[r]) for r in node.inputs))
        except KeyError:
            return None
        cid = eg.hashcons.get(en)
        if cid is None or en in eg.blacklist:
            return None
        cid = eg.find(cid)
        if choice.setdefault(cid, en) != en:
            return None  # two nodes of the graph are one class now: not this graph any more
        n_out = len(node.sig.out_types)
        for i in range(n_out):
            if n_out == 1:
                cls_of[Ref(nid, 0)] = cid
                continue
            pn: ENode = (i, (cid,))
            pc = eg.hashcons.get(pn)
            if pc is None:
                return None
            pc = eg.find(pc)
            if choice.setdefault(pc, pn) != pn:
                return None
            cls_of[Ref(nid, i)] = pc
    return choice


def to_graph(eg: EGraph, choice: Mapping[int, ENode], roots: Sequence[int], like: Graph) -> Graph:
    """The graph a choice describes, with ``like``'s inputs, output names, name and weight data
    (plus constants created by rules)."""
    order = reachable(eg, choice, roots)
    if order is None:
        raise GraphsubError("the extraction has a cycle or misses a class")
    ref_of: dict[int, Ref] = {}
    nodes: dict[int, Node] = {}
    for cid in order:
        head, children = choice[cid]
        if isinstance(head, int):
            base = ref_of[eg.find(children[0])]
            ref_of[cid] = Ref(base.node, head)
            continue
        nid = len(nodes)
        nodes[nid] = Node(head, tuple(ref_of[eg.find(c)] for c in children))
        ref_of[cid] = Ref(nid, 0)
    by_name = {n.sig.attr["name"]: nid for nid, n in nodes.items() if n.sig.op == "input"}
    inputs = []
    for name in like.input_names:
        if name not in by_name:  # an input the optimized graph no longer reads: keep it
            nid = len(nodes)
            nodes[nid] = like.nodes[like.leaf(name)]
            by_name[name] = nid
        inputs.append(by_name[name])
    params = {**eg.params, **dict(like.params)}
    outputs = [ref_of[eg.find(r)] for r in roots]
    return Graph.from_arena(nodes, inputs, outputs, like.output_names, params, name=like.name)


__all__ = ["Choice", "IlpResult", "NodeCosts", "choice_of_graph", "dag_cost", "greedy_tree", "ilp", "reachable",
           "to_graph"]
