"""Finding rule matches in a graph (OCGGS Definition 2).

A :class:`Match` maps every pattern node to a distinct graph node and every pattern variable
to a graph value such that

1. op types (or a wildcard) and attribute constraints agree, arities agree;
2. every pattern edge is a graph edge with the same input slot and output index (the matched
   subgraph is isomorphic to the pattern, inputs in order);
3. variables bind to values produced outside the match, weight variables to weight-only
   values, and every value of a matched node read outside the match (by a node or as a graph
   output) is a source output of the rule;
4. the rule's ``where`` constraints hold, and applying it creates no cycle (no matched node
   reaches a variable's producer).

Search: pattern nodes are visited in a precomputed order in which each node is reached from an
already matched neighbour (its producer, a consumer, or a shared variable), so candidates come
from the graph's consumer lists instead of scans; the first node (the *anchor*) is drawn from
the graph's op index, choosing the pattern node whose op is rarest in the graph.

:func:`find_matches` enumerates all matches; :func:`matches_near` only those touching a region
(OCGGS DPP), :func:`rematch` updates a match list after an edit, and :func:`explain` reports
why a rule does not match at a given node (the deepest partial match and the failed check).

Matching can take long: a rule whose source is disconnected (two independent ``relu`` nodes, say)
has O(n^2) candidate pairs in a graph with n such ops.  The searching functions take a ``stop``
callable (e.g. a search's budget check), polled every :data:`STOP_EVERY` candidates; when it
returns True they raise :class:`~graphsub.errors.BudgetExceeded` instead of finishing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.errors import BudgetExceeded, RuleError
from graphsub.ir.analysis import is_weight_only, neighbourhood
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, Ref
from graphsub.ops.types import TensorType
from graphsub.rules.pattern import WILDCARD, Pattern, PNode
from graphsub.rules.rule import Rule

# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Match:
    """A rule occurrence: pattern node -> graph node id, variable -> graph value."""

    rule: Rule
    nodes: tuple[tuple[str, int], ...]
    vars: tuple[tuple[str, Ref], ...]

    @property
    def node_ids(self) -> frozenset[int]:
        return frozenset(n for _, n in self.nodes)

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        """Identity of the match (rule name + matched node ids in pattern order)."""
        return (self.rule.name, tuple(n for _, n in self.nodes))

    def node(self, name: str) -> int:
        for k, v in self.nodes:
            if k == name:
                return v
        raise RuleError(f"match of {self.rule.name} has no pattern node {name!r}")

    def __repr__(self) -> str:
        ns = ", ".join(f"{k}=%{v}" for k, v in self.nodes)
        return f"Match({self.rule.name}: {ns})"


class MatchView:
    """What ``where`` constraints and targets see: bound values and their properties."""

    def __init__(self, graph: Graph, pattern: Pattern, nodes: dict[str, int], vars: dict[str, Ref]):
        self.graph = graph
        self.pattern = pattern
        self._nodes = nodes
        self._vars = vars

    def __getitem__(self, name: str) -> Ref:
        """A variable's value, or output 0 of a pattern node (``"split0#1"`` for output 1)."""
        if name in self._vars:
            return self._vars[name]
        base, _, idx = name.partition("#")
        if base in self._nodes:
            return Ref(self._nodes[base], int(idx or 0))
        raise RuleError(f"no variable or pattern node {name!r} in this match")

    def __getattr__(self, name: str) -> Ref:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except RuleError as e:
            raise AttributeError(str(e)) from None

    def node(self, name: str) -> Node:
        return self.graph.nodes[self._nodes[name]]

    def attr(self, name: str, key: str) -> Any:
        return self.node(name).sig.attr[key]

    def attrs(self, name: str, *keys: str) -> dict[str, Any]:
        """Attributes of a matched node (all, or the given keys)."""
        a = self.node(name).sig.attr
        return {k: a[k] for k in (keys or a.keys())}

    def type(self, name: str) -> TensorType:
        return self.graph.type_of(self[name])

    def shape(self, name: str) -> tuple[int, ...]:
        return self.type(name).shape

    def data(self, name: str) -> np.ndarray | None:
        """Weight data of a variable bound to a weight leaf (None if not a leaf or no data)."""
        r = self[name]
        node = self.graph.nodes[r.node]
        if node.sig.op == "weight":
            return self.graph.params.get(node.sig.attr["name"])
        return None

    def producer(self, name: str) -> Node:
        """The node producing a bound value (e.g. to check that a variable is a constant op)."""
        return self.graph.nodes[self[name].node]

    def producer_op(self, name: str) -> str:
        return self.graph.nodes[self[name].node].sig.op


# ----------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class _Step:
    node: PNode
    how: str  # "anchor" | "producer" | "consumer" | "var" | "scan"
    via: str = ""  # pattern node (producer/consumer) or variable name
    slot: int = 0  # producer: slot of `via`'s inputs; consumer/var: slot of `node`'s inputs
    index: int = 0  # output index of the edge


def _plan(pattern: Pattern, anchor: int) -> tuple[_Step, ...]:
    nodes = list(pattern.nodes)
    first = nodes[anchor]
    steps = [_Step(first, "anchor")]
    planned = {first.name}
    bound = {r.var for r in first.inputs if r.var is not None}
    while len(planned) < len(nodes):
        step = None
        for q in (n for n in nodes if n.name in planned):
            for slot, r in enumerate(q.inputs):
                if r.node is not None and r.node not in planned:
                    step = _Step(pattern.node(r.node), "producer", q.name, slot, r.index)
                    break
            if step:
                break
        if step is None:
            for p in (n for n in nodes if n.name not in planned):
                for slot, r in enumerate(p.inputs):
                    if r.node is not None and r.node in planned:
                        step = _Step(p, "consumer", r.node, slot, r.index)
                        break
                    if r.var is not None and r.var in bound:
                        step = _Step(p, "var", r.var, slot)
                        break
                if step:
                    break
        if step is None:
            step = _Step(next(n for n in nodes if n.name not in planned), "scan")
        steps.append(step)
        planned.add(step.node.name)
        bound.update(r.var for r in step.node.inputs if r.var is not None)
    return tuple(steps)


_PLANS: dict[tuple[int, int], tuple[_Step, ...]] = {}


def _plan_cached(pattern: Pattern, anchor: int) -> tuple[_Step, ...]:
    key = (id(pattern), anchor)
    plan = _PLANS.get(key)
    if plan is None or plan[0].node is not pattern.nodes[anchor]:
        plan = _plan(pattern, anchor)
        _PLANS[key] = plan
    return plan


#: candidates tried between two polls of a matcher's ``stop`` callable
STOP_EVERY = 256

StopFn = Callable[[], bool]


def _op_ids(graph: Graph, op: str) -> Iterable[int]:
    if op == WILDCARD:
        return (n for n, node in graph.nodes.items() if not node.sig.opdef.leaf)
    return graph.ops_of(op)


def _op_count(graph: Graph, op: str) -> int:
    if op == WILDCARD:
        return len(graph.nodes)
    ids = graph.by_op.get(op)
    return len(ids) if ids is not None else 0


# ----------------------------------------------------------------------------- the search


@dataclass
class _Trace:
    """Best partial match seen (most pattern nodes mapped) and why it failed."""

    depth: int = -1
    mapping: dict[str, int] = field(default_factory=dict)
    reason: str = "no node of the anchor's op type"

    def fail(self, depth: int, mapping: dict[str, int], reason: str) -> None:
        if depth > self.depth:
            self.depth, self.mapping, self.reason = depth, dict(mapping), reason


class _Matcher:
    def __init__(self, graph: Graph, rule: Rule, trace: _Trace | None = None, stop: StopFn | None = None):
        self.g = graph
        self.rule = rule
        self.pattern = rule.source
        self.trace = trace
        self.stop = stop
        self.tries = 0
        self.map: dict[str, int] = {}
        self.vars: dict[str, Ref] = {}
        self.used: set[int] = set()
        self.out_refs = [r for _, r in self.pattern.outputs]

    def _fail(self, reason: str) -> None:
        if self.trace is not None:
            self.trace.fail(len(self.map), self.map, reason)

    def run(self, steps: Sequence[_Step], anchors: Iterable[int]) -> Iterator[Match]:
        first = steps[0].node
        for nid in anchors:
            yield from self._try(steps, 0, first, nid)

    def _candidates(self, step: _Step) -> Iterable[int]:
        g = self.g
        if step.how == "producer":
            r = g.nodes[self.map[step.via]].inputs[step.slot]
            return (r.node,) if r.index == step.index else ()
        if step.how == "consumer":
            src = self.map[step.via]
            return [c for c, s in g.users(src) if s == step.slot and g.nodes[c].inputs[s].index == step.index]
        if step.how == "var":
            v = self.vars[step.via]
            return [c for c, s in g.users(v.node) if s == step.slot and g.nodes[c].inputs[s] == v]
        return list(_op_ids(g, step.node.op))

    def _try(self, steps: Sequence[_Step], k: int, p: PNode, nid: int) -> Iterator[Match]:
        if self.stop is not None:
            self.tries += 1
            if self.tries % STOP_EVERY == 0 and self.stop():
                raise BudgetExceeded(f"matching {self.rule.name} stopped: budget exhausted")
        bound_here = self._bind(p, nid)
        if bound_here is None:
            return
        try:
            if k + 1 == len(steps):
                m = self._finish()
                if m is not None:
                    yield m
                return
            step = steps[k + 1]
            cands = self._candidates(step)
            found = False
            for cand in cands:
                found = True
                yield from self._try(steps, k + 1, step.node, cand)
            if not found:
                self._fail(f"no candidate for {step.node.name} ({step.node.op}) via {step.how} {step.via}")
        finally:
            self._unbind(p, nid, bound_here)

    def _bind(self, p: PNode, nid: int) -> list[str] | None:
        """Map pattern node ``p`` to ``nid`` if locally consistent; returns newly bound vars."""
        g = self.g
        if nid in self.used:
            self._fail(f"{p.name}: node %{nid} already matched by another pattern node")
            return None
        node = g.nodes.get(nid)
        if node is None:
            return None
        sig = node.sig
        if p.op == WILDCARD:
            if sig.opdef.leaf:
                self._fail(f"{p.name}: wildcard cannot match a {sig.op} leaf")
                return None
        elif sig.op != p.op:
            self._fail(f"{p.name}: %{nid} is {sig.op}, rule needs {p.op}")
            return None
        if len(node.inputs) != len(p.inputs):
            self._fail(f"{p.name}: %{nid} has {len(node.inputs)} inputs, rule needs {len(p.inputs)}")
            return None
        if len(sig.out_types) != p.num_outputs:
            self._fail(f"{p.name}: %{nid} has {len(sig.out_types)} outputs, rule needs {p.num_outputs}")
            return None
        why = p.check_attrs(sig)
        if why is not None:
            self._fail(why)
            return None
        new_vars: list[str] = []
        for slot, r in enumerate(p.inputs):
            actual = node.inputs[slot]
            if r.var is not None:
                have = self.vars.get(r.var)
                if have is None:
                    if self.pattern.var(r.var).weight and not is_weight_only(g, actual):
                        self._fail(f"{p.name}: input {slot} must be weight-only for ${r.var}")
                        break
                    self.vars[r.var] = actual
                    new_vars.append(r.var)
                elif have != actual:
                    self._fail(f"{p.name}: input {slot} is {actual!r} but ${r.var} is already {have!r}")
                    break
            elif r.node in self.map and actual != Ref(self.map[r.node], r.index):
                self._fail(f"{p.name}: input {slot} is {actual!r}, not {r.node}")
                break
        else:
            # edges from p to already-matched consumers
            for q in self.pattern.nodes:
                if q.name not in self.map:
                    continue
                qn = g.nodes[self.map[q.name]]
                for slot, r in enumerate(q.inputs):
                    if r.node == p.name and qn.inputs[slot] != Ref(nid, r.index):
                        self._fail(f"{q.name}: input {slot} is not {p.name} (%{nid})")
                        for v in new_vars:
                            del self.vars[v]
                        return None
            self.map[p.name] = nid
            self.used.add(nid)
            return new_vars
        for v in new_vars:
            del self.vars[v]
        return None

    def _unbind(self, p: PNode, nid: int, new_vars: list[str]) -> None:
        del self.map[p.name]
        self.used.discard(nid)
        for v in new_vars:
            del self.vars[v]

    def _finish(self) -> Match | None:
        g = self.g
        used = self.used
        for name, v in self.vars.items():
            if v.node in used:
                self._fail(f"${name} would be bound to a value produced inside the match")
                return None
        outs = {Ref(self.map[r.node], r.index) for r in self.out_refs if r.node is not None}
        for nid in used:
            for c, slot in g.users(nid):
                if c not in used:
                    read = g.nodes[c].inputs[slot]
                    if read not in outs:
                        self._fail(f"%{nid} ({g.nodes[nid].op}) is read by %{c} outside the match but is "
                                   "not a source output")
                        return None
        for r in g.outputs:
            if r.node in used and r not in outs:
                self._fail(f"graph output {r!r} is inside the match but not a source output")
                return None
        for key, pr in self.pattern.outputs:
            if key in self.rule.inner and pr.node is not None and Ref(self.map[pr.node], pr.index) in g.outputs:
                self._fail(f"source output {key!r} is a graph output, where this rule would leave a copy")
                return None
        view = MatchView(g, self.pattern, dict(self.map), dict(self.vars))
        for w in self.rule.where:
            why = w.check(view)
            if why is not None:
                self._fail(f"where: {why}")
                return None
        if self._creates_cycle():
            self._fail("applying it would create a cycle")
            return None
        names = [n.name for n in self.pattern.nodes]
        return Match(self.rule, tuple((n, self.map[n]) for n in names),
                     tuple((v.name, self.vars[v.name]) for v in self.pattern.vars))

    def _creates_cycle(self) -> bool:
        """True if a matched node reaches the producer of a variable (outside the match)."""
        levels = self.g.levels()
        lo = min(levels[n] for n in self.used)
        nodes = self.g.nodes
        seen: set[int] = set()
        stack = [v.node for v in self.vars.values() if levels[v.node] > lo]
        while stack:
            nid = stack.pop()
            if nid in self.used:
                return True
            if nid in seen:
                continue
            seen.add(nid)
            stack.extend(r.node for r in nodes[nid].inputs if levels[r.node] >= lo)
        return False


# ----------------------------------------------------------------------------- API


def find_matches(graph: Graph, rule: Rule, *, stop: StopFn | None = None) -> list[Match]:
    """All matches of ``rule`` in ``graph`` (deterministic order).  BudgetExceeded when ``stop()``
    (polled every :data:`STOP_EVERY` candidates) says so."""
    pattern = rule.source
    anchor = min(range(len(pattern.nodes)), key=lambda i: (_op_count(graph, pattern.nodes[i].op), i))
    steps = _plan_cached(pattern, anchor)
    anchors = sorted(_op_ids(graph, pattern.nodes[anchor].op))
    return list(_Matcher(graph, rule, stop=stop).run(steps, anchors))


def find_all(graph: Graph, rules: Iterable[Rule], *, stop: StopFn | None = None) -> list[Match]:
    """Matches of every rule, rule by rule (BudgetExceeded as :func:`find_matches`)."""
    out: list[Match] = []
    for r in rules:
        out.extend(find_matches(graph, r, stop=stop))
    return out


def matches_near(graph: Graph, rules: Iterable[Rule], nodes: Iterable[int], radius: int, *,
                 stop: StopFn | None = None) -> list[Match]:
    """Matches (of any of ``rules``) that map some pattern node to a node within ``radius``
    undirected hops of ``nodes`` (OCGGS DPP's region-restricted matching).  With ``radius=0``
    and ``nodes`` = the nodes an edit touched, these are all matches that can be new.
    BudgetExceeded when ``stop()`` says so (see :func:`find_matches`)."""
    region = neighbourhood(graph, nodes, radius)
    by_op: dict[str, list[int]] = {}
    for n in sorted(region):
        sig = graph.nodes[n].sig
        if not sig.opdef.leaf:
            by_op.setdefault(sig.op, []).append(n)
    every = sorted(n for ids in by_op.values() for n in ids)
    out: list[Match] = []
    for rule in rules:
        seen: set[tuple[str, tuple[int, ...]]] = set()
        pattern = rule.source
        for a, pn in enumerate(pattern.nodes):
            anchors = every if pn.op == WILDCARD else by_op.get(pn.op)
            if not anchors:
                continue
            for m in _Matcher(graph, rule, stop=stop).run(_plan_cached(pattern, a), anchors):
                if m.key not in seen:
                    seen.add(m.key)
                    out.append(m)
    return out


def max_radius(rules: Iterable[Rule]) -> int:
    """Largest pattern diameter + 1: all nodes of a match lie within this many hops of any of them."""
    return max((r.source.diameter() for r in rules), default=0) + 1


def still_valid(graph: Graph, match: Match) -> bool:
    """Re-check the non-local conditions of a match kept from a parent graph: weight-only
    variables and acyclicity (an edit elsewhere can add a dependency path)."""
    vars_ = dict(match.vars)
    for v in match.rule.source.vars:
        if v.weight and not is_weight_only(graph, vars_[v.name]):
            return False
    m = _Matcher(graph, match.rule)
    m.used = set(match.node_ids)
    m.vars = vars_
    return not m._creates_cycle()


def rematch(graph: Graph, rules: Sequence[Rule], old: Sequence[Match], *,
            stop: StopFn | None = None) -> list[Match]:
    """Matches of ``rules`` in ``graph`` (made by an edit) from the parent's matches ``old``.

    Parent matches that avoid every node the edit removed or touched are kept (after
    :func:`still_valid`); every match containing a touched node is found afresh by anchoring the
    search at the touched nodes.  Cost: O(touched nodes x rules + kept matches).
    BudgetExceeded when ``stop()`` says so (see :func:`find_matches`).
    """
    info = graph.edit_info()
    if info is None:
        raise RuleError("rematch needs a graph produced by GraphEdit.commit()")
    _, removed, touched = info
    hit = set(removed) | set(touched)
    kept = []
    for i, m in enumerate(old):
        if stop is not None and i % STOP_EVERY == STOP_EVERY - 1 and stop():
            raise BudgetExceeded("re-matching stopped: budget exhausted")
        if not (m.node_ids & hit) and still_valid(graph, m):
            kept.append(m)
    return kept + matches_near(graph, rules, touched, 0, stop=stop)


@dataclass(frozen=True)
class Explanation:
    matched: bool
    partial: dict[str, int]
    reason: str

    def __str__(self) -> str:
        if self.matched:
            return "matches"
        part = ", ".join(f"{k}=%{v}" for k, v in self.partial.items()) or "nothing"
        return f"no match; best partial match: {part}; failed: {self.reason}"


def explain(graph: Graph, rule: Rule, at: int) -> Explanation:
    """Why ``rule`` does (not) match with some pattern node mapped to node ``at``."""
    if at not in graph.nodes:
        raise RuleError(f"graph has no node %{at}")
    trace = _Trace()
    for a, pn in enumerate(rule.source.nodes):
        if pn.op not in (WILDCARD, graph.nodes[at].sig.op):
            trace.fail(0, {}, f"%{at} is {graph.nodes[at].sig.op}; no pattern node of that op "
                       f"(rule ops: {[n.op for n in rule.source.nodes]})")
            continue
        for m in _Matcher(graph, rule, trace).run(_plan_cached(rule.source, a), [at]):
            return Explanation(True, dict(m.nodes), "")
    return Explanation(False, trace.mapping, trace.reason)


__all__ = [
    "STOP_EVERY", "Explanation", "Match", "MatchView", "StopFn", "explain", "find_all", "find_matches",
    "matches_near", "max_radius", "rematch",
]
