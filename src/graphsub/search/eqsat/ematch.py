"""Rule application on an e-graph, driven by graphsub's own rules.

Matching (:func:`ematch`) maps every node of a rule's source pattern to an e-node and every
variable to an e-class, in the order of the tree matcher's plan (:func:`graphsub.rules.match._plan`:
each pattern node is reached from an already matched neighbour), so multi-output and
multi-rooted (Tensat's "multi-pattern") sources need no special case: a second root is reached
through a shared variable's users.  Candidates come from class node lists (producers) and class
user lists (consumers), the first node from the per-op index.  Conditions of Definition 2 that
exist only because a graph is rewritten in place (values read outside the match must be source
outputs; no cycle) do not apply: the e-graph keeps every old node, and cycles are filtered later.

Applying (:func:`instantiate`): the match is written out as a small concrete
:class:`~graphsub.ir.graph.Graph` -- the matched e-nodes as nodes, each variable's class as a leaf
(the class's own input/weight/constant leaf when it has one, so ``m.data`` and ``m.producer_op``
see real weights; otherwise a placeholder weight or input of the class's type).  The rule's
``where`` conditions and target function then run unchanged on a
:class:`~graphsub.rules.match.MatchView` of it, through a
:class:`~graphsub.rules.apply.TargetBuilder`; shape inference of the target's ops rejects
shape-invalid instances (Tensat's ``CheckApply``).  The new nodes are added to the e-graph and each
target output is unioned with its source output's class.  Shapes and attributes are per-class
invariants, so checking on this representative is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from graphsub.errors import BudgetExceeded, GraphsubError
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, OpSig, Ref, make_sig
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.match import STOP_EVERY, MatchView, _plan, _Step
from graphsub.rules.pattern import WILDCARD, Pattern, PNode
from graphsub.rules.rule import Rule
from graphsub.search.eqsat.egraph import EGraph, ENode, node_op

_TARGET_ERRORS = (GraphsubError, ValueError, IndexError, KeyError, TypeError, ZeroDivisionError, ArithmeticError)


@dataclass(frozen=True)
class EMatch:
    """One occurrence: pattern node -> (e-node, class), variable -> class."""

    rule: Rule
    nodes: tuple[tuple[str, ENode, int], ...]
    vars: tuple[tuple[str, int], ...]

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.rule.name, tuple(n for _, n, _ in self.nodes), self.vars)


def _plans(pattern: Pattern, counts: Mapping[str, int]) -> tuple[_Step, ...]:
    """Top-down plan: anchored at a root of the pattern (a node no other pattern node reads; the
    rarest op among them), so further nodes come from class members (producer steps), which are
    few, rather than class users."""
    read = {r.node for n in pattern.nodes for r in n.inputs if r.node is not None}
    roots = [i for i, n in enumerate(pattern.nodes) if n.name not in read] or list(range(len(pattern.nodes)))
    anchor = min(roots, key=lambda i: (counts.get(pattern.nodes[i].op, 0)
                                       if pattern.nodes[i].op != WILDCARD else 1 << 30, i))
    return _plan(pattern, anchor)


class MatchIndex:
    """Per-iteration indices of a rebuilt e-graph (it does not change while matching): e-nodes per
    op, per class and op, and class users per (op, input slot); filled lazily."""

    def __init__(self, eg: EGraph):
        self.eg = eg
        self.by_op = eg.by_op()
        self.counts = {op: len(v) for op, v in self.by_op.items()}
        self._cls: dict[int, dict[str, list[ENode]]] = {}
        self._users: dict[int, dict[tuple[str, int], list[tuple[ENode, int]]]] = {}
        self._tuples: dict[tuple[int, int], list[int]] = {}

    def nodes(self, cid: int, op: str) -> list[ENode]:
        """E-nodes of class ``cid`` with op ``op`` (``*``: any non-leaf op)."""
        d = self._cls.get(cid)
        if d is None:
            d = {}
            for n in self.eg.nodes_of(cid):
                d.setdefault(node_op(n), []).append(n)
            self._cls[cid] = d
        if op == WILDCARD:
            return [n for o, ns in d.items() if o not in ("input", "weight", "#proj") for n in ns]
        return d.get(op, [])

    def users(self, cid: int, op: str, slot: int) -> list[tuple[ENode, int]]:
        """E-nodes with op ``op`` reading class ``cid`` at input ``slot``, with their classes."""
        d = self._users.get(cid)
        if d is None:
            d = {}
            eg = self.eg
            bl = eg.blacklist
            for n, c in eg.classes[cid].parents:
                if n in bl or isinstance(n[0], int):
                    continue
                for k, ch in enumerate(n[1]):
                    if eg.find(ch) == cid:
                        d.setdefault((n[0].op, k), []).append((n, eg.find(c)))
                        d.setdefault((WILDCARD, k), []).append((n, eg.find(c)))
            self._users[cid] = d
        return d.get((op, slot), [])

    def tuples(self, cid: int, index: int) -> list[int]:
        """Tuple classes whose output ``index`` is class ``cid``."""
        key = (cid, index)
        hit = self._tuples.get(key)
        if hit is None:
            hit = [self.eg.find(n[1][0]) for n in self.nodes(cid, "#proj") if n[0] == index]
            self._tuples[key] = hit
        return hit


class _EMatcher:
    def __init__(self, eg: EGraph, rule: Rule, index: MatchIndex, limit: int, stop: Callable[[], bool] | None = None):
        self.eg = eg
        self.rule = rule
        self.pattern = rule.source
        self.index = index
        self.limit = limit
        self.stop = stop
        self.tries = 0
        self.map: dict[str, tuple[ENode, int]] = {}
        self.vars: dict[str, int] = {}
        self.used: set[ENode] = set()
        self.found = 0

    def run(self) -> Iterator[EMatch]:
        steps = _plans(self.pattern, self.index.counts)
        for cand in self._candidates(steps[0]):
            yield from self._try(steps, 0, cand)
            if self.found >= self.limit:
                return

    def _value(self, pname: str, index: int) -> int | None:
        """Class of output ``index`` of the e-node matched to pattern node ``pname``."""
        _, cid = self.map[pname]
        return self.eg.lookup_value(cid, index)

    def _candidates(self, step: _Step) -> list[tuple[ENode, int]]:
        eg = self.eg
        ix = self.index
        p = step.node
        if step.how in ("anchor", "scan"):
            if p.op == WILDCARD:
                return [nc for op, lst in ix.by_op.items() if op not in ("input", "weight", "#proj")
                        for nc in lst]
            return ix.by_op.get(p.op, [])
        if step.how == "producer":
            qnode, _ = self.map[step.via]
            c = eg.find(qnode[1][step.slot])
            if p.num_outputs == 1:
                return [(n, c) for n in ix.nodes(c, p.op)] if step.index == 0 else []
            return [(n, t) for t in ix.tuples(c, step.index) for n in ix.nodes(t, p.op)]
        v = self._value(step.via, step.index) if step.how == "consumer" else self.vars[step.via]
        if v is None:
            return []
        return ix.users(eg.find(v), p.op, step.slot)

    def _try(self, steps: tuple[_Step, ...], k: int, cand: tuple[ENode, int]) -> Iterator[EMatch]:
        if self.stop is not None:
            self.tries += 1
            if self.tries % STOP_EVERY == 0 and self.stop():
                raise BudgetExceeded(f"e-matching {self.rule.name} stopped: budget exhausted")
        p = steps[k].node
        new_vars = self._bind(p, cand)
        if new_vars is None:
            return
        try:
            if k + 1 == len(steps):
                self.found += 1
                yield EMatch(self.rule, tuple((q.name, *self.map[q.name]) for q in self.pattern.nodes),
                             tuple((v.name, self.vars[v.name]) for v in self.pattern.vars))
                return
            for nxt in self._candidates(steps[k + 1]):
                yield from self._try(steps, k + 1, nxt)
                if self.found >= self.limit:
                    return
        finally:
            del self.map[p.name]
            self.used.discard(cand[0])
            for v in new_vars:
                del self.vars[v]

    def _bind(self, p: PNode, cand: tuple[ENode, int]) -> list[str] | None:
        node, cid = cand
        eg = self.eg
        head = node[0]
        if node in self.used or isinstance(head, int) or node in eg.blacklist:
            return None
        sig: OpSig = head
        if p.op == WILDCARD:
            if sig.opdef.leaf:
                return None
        elif sig.op != p.op:
            return None
        if len(node[1]) != len(p.inputs) or len(sig.out_types) != p.num_outputs:
            return None
        if p.check_attrs(sig) is not None:
            return None
        new_vars: list[str] = []
        ok = True
        for slot, r in enumerate(p.inputs):
            c = eg.find(node[1][slot])
            if r.var is not None:
                have = self.vars.get(r.var)
                if have is None:
                    if self.pattern.var(r.var).weight and not eg.classes[c].wo:
                        ok = False
                        break
                    self.vars[r.var] = c
                    new_vars.append(r.var)
                elif eg.find(have) != c:
                    ok = False
                    break
            elif r.node in self.map and self._value(r.node, r.index) != c:
                ok = False
                break
        if ok:
            for q in self.pattern.nodes:
                if q.name not in self.map:
                    continue
                qn = self.map[q.name][0]
                for slot, r in enumerate(q.inputs):
                    if r.node == p.name and eg.find(qn[1][slot]) != eg.lookup_value(cid, r.index):
                        ok = False
                        break
                if not ok:
                    break
        if not ok:
            for v in new_vars:
                del self.vars[v]
            return None
        self.map[p.name] = (node, eg.find(cid))
        self.used.add(node)
        return new_vars


def ematch(eg: EGraph, rule: Rule, index: MatchIndex | None = None, limit: int = 1 << 30, *,
           stop: Callable[[], bool] | None = None) -> Iterator[EMatch]:
    """Structural matches of ``rule``'s source in a rebuilt e-graph (``where`` not yet checked).
    Raises BudgetExceeded when ``stop()``, polled every :data:`~graphsub.rules.match.STOP_EVERY`
    candidates, says so (a rule with a disconnected source has quadratically many)."""
    return _EMatcher(eg, rule, index or MatchIndex(eg), limit, stop).run()


def symmetric_pair(rule: Rule) -> dict[str, str] | None:
    """The variable swap ``sigma`` if the rule's source is two same-op nodes over variables that
    it maps onto each other (``matmul(x, a), matmul(x, b)``: ``a <-> b``; ``relu(a), relu(b)``):
    every match then comes twice, once per order, and both orders build the same computation up
    to the order of a concat.  With ``symmetry=True`` the runner applies only the first of the two
    whose ``where`` conditions hold (halves what such multi-pattern rules add; not lossless: the
    concat order can matter to later rules)."""
    pat = rule.source
    if len(pat.nodes) != 2 or len(pat.outputs) != 2:
        return None
    a, b = pat.nodes
    if (a.op, a.attrs, a.num_outputs, len(a.inputs)) != (b.op, b.attrs, b.num_outputs, len(b.inputs)):
        return None
    if a.op == WILDCARD or any(r.var is None for r in (*a.inputs, *b.inputs)):
        return None
    sigma: dict[str, str] = {}
    for ra, rb in zip(a.inputs, b.inputs, strict=True):
        va, vb = str(ra.var), str(rb.var)
        if sigma.setdefault(va, vb) != vb or sigma.setdefault(vb, va) != va:
            return None
        if pat.var(va).weight != pat.var(vb).weight:
            return None
    if {str(r.node) for _, r in pat.outputs} != {a.name, b.name}:
        return None
    return sigma


def mirror_key(m: EMatch, sigma: dict[str, str]) -> tuple[Any, ...]:
    """The key of the mirrored match of a :func:`symmetric_pair` rule."""
    cls = dict(m.vars)
    nodes = tuple(n for _, n, _ in m.nodes)
    return (m.rule.name, nodes[::-1], tuple((v, cls[sigma.get(v, v)]) for v, _ in m.vars))


# ----------------------------------------------------------------------------- instantiation


@dataclass
class Instance:
    """A match written out as a small graph: ``graph``, the match view, and graph id -> class."""

    graph: Graph
    view: MatchView
    class_of: dict[int, int]


def instantiate(eg: EGraph, m: EMatch) -> Instance | str:
    """The concrete graph of a match with its ``where`` conditions checked (a reason string if
    one fails or the match cannot be written out)."""
    pattern = m.rule.source
    nodes: dict[int, Node] = {}
    class_of: dict[int, int] = {}
    leaf_of: dict[int, int] = {}  # class -> leaf node id
    inputs: list[int] = []
    params = {}
    for _name, cid in m.vars:
        cid = eg.find(cid)
        if cid in leaf_of:
            continue
        cls = eg.classes[cid]
        leaf = next((n for n in eg.nodes_of(cid) if not isinstance(n[0], int) and not n[1]), None)
        if leaf is not None:
            sig = leaf[0]
        else:
            t = cls.types[0]
            sig = make_sig("weight" if cls.wo else "input", {"name": f"__ec{cid}", "shape": t.shape,
                                                              "dtype": t.dtype}, ())
        nid = len(nodes)
        nodes[nid] = Node(sig, ())
        class_of[nid] = cid
        leaf_of[cid] = nid
        if sig.op == "input":
            inputs.append(nid)
        elif sig.op == "weight" and sig.attr["name"] in eg.params:
            params[sig.attr["name"]] = eg.params[sig.attr["name"]]
    var_ref = {name: Ref(leaf_of[eg.find(cid)], 0) for name, cid in m.vars}
    pid: dict[str, int] = {}
    matched = {name: (node, cid) for name, node, cid in m.nodes}
    for p in pattern.nodes:  # topological order
        node, cid = matched[p.name]
        ins = tuple(var_ref[r.var] if r.var is not None else Ref(pid[str(r.node)], r.index) for r in p.inputs)
        nid = len(nodes)
        nodes[nid] = Node(node[0], ins)
        class_of[nid] = eg.find(cid)
        pid[p.name] = nid
    outs = [Ref(pid[str(r.node)], r.index) for _, r in pattern.outputs]
    try:
        g = Graph.from_arena(nodes, inputs, outs, None, params, name=m.rule.name)
    except GraphsubError as e:
        return f"cannot write the match out: {e}"
    view = MatchView(g, pattern, dict(pid), dict(var_ref))
    for w in m.rule.where:
        why = w.check(view)
        if why is not None:
            return f"where: {why}"
    return Instance(g, view, class_of)


def apply_instance(eg: EGraph, m: EMatch, inst: Instance) -> tuple[bool, str]:
    """Build the rule's target into ``eg`` and union its outputs with the source outputs.

    Returns ``(changed, reason)``: whether any class changed, and why nothing was applied.
    """
    edit = inst.graph.edit()
    tb = TargetBuilder(edit, m.rule.name)
    try:
        produced = m.rule.target(tb, inst.view)
    except _TARGET_ERRORS as e:
        return False, f"target: {type(e).__name__}: {e}"
    if set(produced) != set(m.rule.source.output_names):
        return False, "target outputs differ from source outputs"
    new = edit._new
    new_params = edit._new_params
    memo: dict[int, int] = {}

    def class_of_node(nid: int) -> int:
        hit = memo.get(nid)
        if hit is not None:
            return hit
        if nid not in new:
            c = inst.class_of[nid]
        else:
            node = new[nid]
            if node.sig.op == "weight":
                lname = node.sig.attr["name"]
                if lname in new_params and lname not in eg.params:
                    eg.params[lname] = new_params[lname]
            c = eg.add(node.sig, [class_of_ref(r) for r in node.inputs])
        memo[nid] = c
        return c

    def class_of_ref(r: Ref) -> int:
        return eg.value(class_of_node(r.node), r.index)

    changed = False
    n0 = len(eg.hashcons)
    matched = {name: cid for name, _, cid in m.nodes}
    try:
        pairs = []
        for name, src in m.rule.source.outputs:
            old = eg.value(matched[str(src.node)], src.index)
            pairs.append((old, class_of_ref(Ref(*produced[name]))))
        for a, b in pairs:
            if eg.classes[eg.find(a)].types != eg.classes[eg.find(b)].types:
                return False, "target output type differs from the source output"
        for a, b in pairs:
            changed |= eg.union(a, b)
    except _TARGET_ERRORS as e:
        return False, f"building the target: {type(e).__name__}: {e}"
    return changed or len(eg.hashcons) != n0, ""


__all__ = ["EMatch", "Instance", "MatchIndex", "apply_instance", "ematch", "instantiate", "mirror_key",
           "symmetric_pair"]
