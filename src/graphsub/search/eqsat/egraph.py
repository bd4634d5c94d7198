"""An e-graph over graphsub's interned operator signatures.

An *e-node* is ``(head, children)``: ``head`` is an :class:`~graphsub.ir.node.OpSig` (the op, its
canonical attributes and input types) and ``children`` are e-class ids; or ``head`` is an ``int``
``i`` for the *projection* of output ``i`` of a multi-output e-node (``split``), whose single child
is that node's *tuple class* (Tensat's ``split_0`` / ``split_1``).  E-nodes are plain tuples, so
hash-consing is a dict lookup, and because signatures are interned with their input types, every
e-node of a class has the same output types -- the class's ``types`` (one type for a value class,
several for a tuple class).  Shapes and attributes are therefore invariant per e-class, which is
what lets a rule's ``where`` condition be evaluated once on a representative.

Analysis kept per class: ``wo`` -- the value depends on weights/constants only (free at run
time, matched by weight variables), and ``leaf`` -- the class holds a graph input or weight leaf.

Invariants after :meth:`EGraph.rebuild`: every e-node in ``hashcons`` and in a class's node list
is canonical (children are class representatives); congruent e-nodes are in one class; ``wo`` is
closed under the children relation.  Unions are deferred (egg's rebuild); matching must only run
on a rebuilt e-graph.

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> x = b.input("x", (2, 3))
>>> eg, roots = EGraph.from_graph(b.build(b.relu(b.relu(x))))
>>> eg.num_classes, eg.num_nodes
(3, 3)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig, Ref
from graphsub.ops.types import TensorType

#: ``(head, children)``: head an OpSig, or an int (projection index) with one child (a tuple class).
ENode = tuple[Any, tuple[int, ...]]


class EGraphError(GraphsubError):
    """An e-graph invariant was violated (e.g. a rule tried to union values of different types)."""


class EClass:
    """One equivalence class: its e-nodes, its users (``(parent e-node, parent class)``) and analysis."""

    __slots__ = ("id", "leaf", "nodes", "parents", "types", "wo")

    def __init__(self, cid: int, types: tuple[TensorType, ...], wo: bool, leaf: bool):
        self.id = cid
        self.nodes: dict[ENode, None] = {}
        self.parents: list[tuple[ENode, int]] = []
        self.types = types
        self.wo = wo
        self.leaf = leaf

    @property
    def is_tuple(self) -> bool:
        return len(self.types) != 1

    def __repr__(self) -> str:
        return f"EClass({self.id}: {len(self.nodes)} nodes, {list(self.types)}{', wo' if self.wo else ''})"


def is_proj(node: ENode) -> bool:
    return isinstance(node[0], int)


def node_op(node: ENode) -> str:
    """The op name of an e-node (``"#proj"`` for a projection)."""
    head = node[0]
    return "#proj" if isinstance(head, int) else head.op


class EGraph:
    """Union-find + hash-consing + deferred congruence repair (see the module docstring)."""

    def __init__(self) -> None:
        self._parent: list[int] = []
        self.hashcons: dict[ENode, int] = {}
        self.classes: dict[int, EClass] = {}
        self.params: dict[str, np.ndarray] = {}
        #: creation order of every e-node ever added (cycle filtering blacklists the newest)
        self.birth: dict[ENode, int] = {}
        self.blacklist: set[ENode] = set()
        #: which rule created an e-node (set while :attr:`tag` names the rule being applied)
        self.origin: dict[ENode, str] = {}
        self.tag: str | None = None
        self._pending: list[int] = []
        self.unions = 0

    # ------------------------------------------------------------------ union-find
    def find(self, cid: int) -> int:
        parent = self._parent
        root = cid
        while parent[root] != root:
            root = parent[root]
        while parent[cid] != root:  # path compression
            parent[cid], cid = root, parent[cid]
        return root

    def canon(self, node: ENode) -> ENode:
        find = self.find
        return (node[0], tuple(find(c) for c in node[1]))

    # ------------------------------------------------------------------ adding
    def _node_wo(self, node: ENode) -> bool:
        head, children = node
        if isinstance(head, int):
            return self.classes[self.find(children[0])].wo
        if head.op == "input":
            return False
        if not children:
            return head.op == "weight" or bool(head.opdef.weight_op)
        return all(self.classes[self.find(c)].wo for c in children)

    def add(self, head: Any, children: Iterable[int]) -> int:
        """The class of e-node ``(head, children)``, adding it if new."""
        node: ENode = (head, tuple(self.find(c) for c in children))
        hit = self.hashcons.get(node)
        if hit is not None:
            return self.find(hit)
        if isinstance(head, int):
            tup = self.classes[node[1][0]]
            if not tup.is_tuple or head >= len(tup.types):
                raise EGraphError(f"projection {head} of a class with types {list(tup.types)}")
            types: tuple[TensorType, ...] = (tup.types[head],)
            leaf = False
        else:
            sig: OpSig = head
            if tuple(self.classes[c].types[0] for c in node[1]) != sig.in_types or any(
                    self.classes[c].is_tuple for c in node[1]):
                raise EGraphError(f"{sig.op}: children types do not match the signature's inputs")
            types = sig.out_types
            leaf = sig.op in ("input", "weight")
        cid = len(self._parent)
        self._parent.append(cid)
        cls = EClass(cid, types, False, leaf)
        self.classes[cid] = cls
        cls.wo = self._node_wo(node)
        cls.nodes[node] = None
        self.hashcons[node] = cid
        self.birth[node] = len(self.birth)
        if self.tag is not None:
            self.origin[node] = self.tag
        for c in dict.fromkeys(node[1]):
            self.classes[c].parents.append((node, cid))
        return cid

    def value(self, cid: int, index: int) -> int:
        """Class of output ``index`` of class ``cid`` (itself for a value class)."""
        cid = self.find(cid)
        cls = self.classes[cid]
        if not cls.is_tuple:
            if index != 0:
                raise EGraphError(f"class {cid} has one output, not {index + 1}")
            return cid
        return self.add(index, (cid,))

    def lookup_value(self, cid: int, index: int) -> int | None:
        """Like :meth:`value` but never adds: None if the projection does not exist."""
        cid = self.find(cid)
        if not self.classes[cid].is_tuple:
            return cid if index == 0 else None
        hit = self.hashcons.get((index, (cid,)))
        return None if hit is None else self.find(hit)

    # ------------------------------------------------------------------ merging
    def union(self, a: int, b: int) -> bool:
        """Merge two classes (deferred repair); False if already equal."""
        a, b = self.find(a), self.find(b)
        if a == b:
            return False
        ca, cb = self.classes[a], self.classes[b]
        if ca.types != cb.types:
            raise EGraphError(f"union of classes with types {list(ca.types)} and {list(cb.types)}")
        if len(ca.nodes) + len(ca.parents) < len(cb.nodes) + len(cb.parents):
            a, b, ca, cb = b, a, cb, ca
        self._parent[b] = a
        ca.nodes.update(cb.nodes)
        ca.parents.extend(cb.parents)
        if cb.wo and not ca.wo:
            ca.wo = True
        ca.leaf = ca.leaf or cb.leaf
        del self.classes[b]
        self._pending.append(a)
        self.unions += 1
        return True

    def rebuild(self) -> None:
        """Restore the invariants (congruence closure, canonical nodes, ``wo`` propagation)."""
        while self._pending:
            todo = dict.fromkeys(self.find(c) for c in self._pending)
            self._pending.clear()
            for cid in todo:
                cid = self.find(cid)
                if cid in self.classes:
                    self._repair(cid)
        for cid, cls in self.classes.items():
            fresh: dict[ENode, None] = {}
            for n in cls.nodes:
                cn = self.canon(n)
                if cn not in fresh:
                    fresh[cn] = None
                    if cn != n:
                        self._inherit(n, cn)
            cls.nodes = fresh
            for n in fresh:
                self.hashcons[n] = cid

    def _inherit(self, old: ENode, new: ENode) -> None:
        """A canonicalised e-node keeps its birth order, origin and blacklisting."""
        if new not in self.birth:
            self.birth[new] = self.birth.get(old, len(self.birth))
        if new not in self.origin and old in self.origin:
            self.origin[new] = self.origin[old]
        if old in self.blacklist:
            self.blacklist.add(new)

    def _repair(self, cid: int) -> None:
        cls = self.classes[cid]
        seen: dict[ENode, int] = {}
        for pnode, pclass in cls.parents:
            self.hashcons.pop(pnode, None)
            cn = self.canon(pnode)
            pc = self.find(pclass)
            other = seen.get(cn)
            if other is not None and self.find(other) != pc:
                self.union(other, pc)  # congruence
                pc = self.find(pc)
            seen[cn] = pc
            self.hashcons[cn] = pc
            if cn != pnode:
                self._inherit(pnode, cn)
            pcls = self.classes[pc]
            if not pcls.wo and self._node_wo(cn):
                pcls.wo = True
                self._pending.append(pc)
        cls.parents = [(n, self.find(c)) for n, c in seen.items()]

    # ------------------------------------------------------------------ queries
    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def num_nodes(self) -> int:
        return sum(len(c.nodes) for c in self.classes.values())

    def nodes_of(self, cid: int) -> Iterator[ENode]:
        """Non-blacklisted e-nodes of a class."""
        bl = self.blacklist
        for n in self.classes[self.find(cid)].nodes:
            if n not in bl:
                yield n

    def by_op(self) -> dict[str, list[tuple[ENode, int]]]:
        """Non-blacklisted e-nodes per op name, with their classes (matcher's anchor index)."""
        out: dict[str, list[tuple[ENode, int]]] = {}
        bl = self.blacklist
        for cid, cls in self.classes.items():
            for n in cls.nodes:
                if n not in bl:
                    out.setdefault(node_op(n), []).append((n, cid))
        return out

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_graph(cls, graph: Graph) -> tuple[EGraph, list[int]]:
        """The e-graph of ``graph`` (one class per value) and the classes of its outputs."""
        eg = cls()
        eg.params.update(graph.params)
        value: dict[Ref, int] = {}
        for nid in graph.topo_order():
            node = graph.nodes[nid]
            cid = eg.add(node.sig, [value[r] for r in node.inputs])
            n_out = len(node.sig.out_types)
            for i in range(n_out):
                value[Ref(nid, i)] = eg.value(cid, i) if n_out > 1 else cid
        eg.rebuild()
        return eg, [eg.find(value[r]) for r in graph.outputs]


__all__ = ["EClass", "EGraph", "EGraphError", "ENode", "is_proj", "node_op"]
