"""Copy-on-write substitution on a :class:`~graphsub.ir.graph.Graph`.

See :class:`GraphEdit`; the cost of an edit is proportional to the change (new nodes, rewired
consumers, removed nodes), never to the size of the graph.  :meth:`GraphEdit.commit` runs four
steps on the base's persistent maps opened for mutation (:class:`_Arena`): add the new nodes,
rewire the consumers of replaced values, remove what became dead, and record the provenance
(:meth:`~graphsub.ir.graph.Graph.edit_info`) plus the base's per-node maps for O(change) derived
data.  The base never changes.  (This module needs :class:`Graph` only for type hints; it builds
the result through ``type(base)``, so ``graph.py`` can import it without an import cycle.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import immutables
import numpy as np

from graphsub.errors import GraphError, ShapeError
from graphsub.ir.node import Node, Ref, make_sig
from graphsub.ops.types import TensorType, dtype_of, make_type

if TYPE_CHECKING:
    from graphsub.ir.graph import Graph

_EMPTY: immutables.Map[int, None] = immutables.Map()

#: ``Graph._cache`` key under which a committed graph keeps its parent's per-node maps, and the
#: keys of those maps: ``merkle`` and ``level`` (:meth:`Graph._derived`) and the weight-only map
#: (:mod:`graphsub.ir.analysis`).  Each is derived for the child from the parent's in O(change).
PARENT_MAPS_KEY = "parent_maps"
WEIGHT_ONLY_KEY = "weight_only"
_INCREMENTAL_KEYS = ("merkle", "level", WEIGHT_ONLY_KEY)


def _del_consumer(cons: Any, src: int, item: tuple[int, int]) -> None:
    cur = cons.get(src, ())
    rest = tuple(c for c in cur if c != item)
    if rest:
        cons[src] = rest
    elif src in cons:
        del cons[src]


class GraphEdit:
    """A pending substitution on a base graph (copy-on-write; the base never changes).

    * :meth:`op` / :meth:`weight` add new nodes (ids continue the base's ``next_id``);
    * :meth:`replace` redirects every *pre-existing* consumer of a value (and graph outputs)
      to a new value of the same type -- new nodes keep the inputs they were given, so
      ``replace(x, relu(x))`` inserts a node after ``x``;
    * :meth:`commit` returns the new graph and removes nodes that became dead.

    Cost: O(new nodes + rewired consumers + removed nodes), independent of graph size.
    """

    def __init__(self, base: Graph):
        self.base = base
        self._new: dict[int, Node] = {}
        self._rewire: dict[Ref, Ref] = {}
        self._new_params: dict[str, np.ndarray] = {}
        self._new_leaves: dict[str, int] = {}
        self._next = base.next_id
        self._done = False

    def type_of(self, ref: Ref | tuple[int, int]) -> TensorType:
        nid, idx = ref
        node = self._new.get(nid) or self.base.nodes.get(nid)
        if node is None:
            raise GraphError(f"edit references missing node %{nid}")
        return node.sig.out_types[idx]

    def op(self, op: str, *inputs: Ref | tuple[int, int], **attrs: Any) -> Ref:
        """Add node ``op(*inputs, **attrs)``; returns output 0 (see :meth:`op_multi`)."""
        return self.op_multi(op, inputs, attrs)[0]

    def op_multi(
        self, op: str, inputs: Sequence[Ref | tuple[int, int]], attrs: Mapping[str, Any] | None = None
    ) -> tuple[Ref, ...]:
        """Add a node; returns a Ref per output (e.g. for ``split``)."""
        refs = tuple(Ref(*r) for r in inputs)
        sig = make_sig(op, attrs or {}, tuple(self.type_of(r) for r in refs))
        if sig.opdef.leaf:
            raise GraphError("use GraphEdit.weight() to add leaves")
        nid = self._next
        self._next += 1
        self._new[nid] = Node(sig, refs)
        return tuple(Ref(nid, i) for i in range(len(sig.out_types)))

    def weight(
        self,
        name: str,
        data: np.ndarray | None = None,
        *,
        shape: Sequence[int] | None = None,
        dtype: str = "float32",
    ) -> Ref:
        """Add a weight leaf (e.g. a folded constant); ``name`` must be new."""
        if name in self.base.leaves or name in self._new_leaves:
            raise GraphError(f"a leaf named {name!r} already exists")
        if data is not None:
            data = np.asarray(data)
            t = make_type(data.shape, dtype_of(data))
            self._new_params[name] = data
        else:
            if shape is None:
                raise GraphError("weight() needs data or a shape")
            t = make_type(shape, dtype)
        sig = make_sig("weight", {"name": name, "shape": t.shape, "dtype": t.dtype}, ())
        nid = self._next
        self._next += 1
        self._new[nid] = Node(sig, ())
        self._new_leaves[name] = nid
        return Ref(nid, 0)

    def replace(self, old: Ref | tuple[int, int], new: Ref | tuple[int, int]) -> None:
        """Redirect all existing uses of ``old`` (consumers and graph outputs) to ``new``."""
        old, new = Ref(*old), Ref(*new)
        if old.node not in self.base.nodes:
            raise GraphError(f"replace: {old!r} is not a value of the base graph")
        told, tnew = self.type_of(old), self.type_of(new)
        if told != tnew:
            raise ShapeError(f"replace: {old!r} has type {told} but replacement {new!r} has {tnew}")
        if old in self._rewire:
            raise GraphError(f"replace: {old!r} replaced twice in one edit")
        self._rewire[old] = new

    def find_leaf(self, name: str) -> int | None:
        """Id of the input or weight named ``name`` in the graph being built -- a leaf of the base
        or one added by this edit -- or None."""
        nid = self.base.leaves.get(name)
        return nid if nid is not None else self._new_leaves.get(name)

    def commit(self) -> Graph:
        """The edited graph: new nodes added, consumers rewired, dead nodes removed; O(change).

        The result also records its provenance (:meth:`~graphsub.ir.graph.Graph.edit_info`) and
        keeps the base's per-node maps (not the base) for incremental derived data.
        """
        if self._done:
            raise GraphError("GraphEdit.commit() called twice")
        self._done = True
        base = self.base
        arena = _Arena(base)
        dirty = self._add_new(arena)
        outputs = self._rewire_consumers(arena, dirty)
        removed = self._remove_dead(arena, outputs)
        g = type(base)._make(
            nodes=arena.nodes.finish(),
            inputs=base.inputs,
            outputs=outputs,
            output_names=base.output_names,
            params=arena.params.finish(),
            consumers=arena.cons.finish(),
            by_op=arena.by_op.finish(),
            leaves=arena.leaves.finish(),
            next_id=self._next,
            name=base.name,
        )
        self._record_provenance(g, dirty, removed)
        return g

    def _add_new(self, arena: _Arena) -> list[int]:
        """Step 1: add the new nodes, leaves and weight data; returns the new ids (dirty so far)."""
        nodes, cons, leaves, params = arena.nodes, arena.cons, arena.leaves, arena.params
        dirty: list[int] = []
        for nid, node in self._new.items():
            nodes[nid] = node
            arena.index_add(nid, node)
            for slot, r in enumerate(node.inputs):
                cons[r.node] = (*cons.get(r.node, ()), (nid, slot))
            dirty.append(nid)
        for lname, nid in self._new_leaves.items():
            leaves[lname] = nid
        for lname, arr in self._new_params.items():
            params[lname] = arr
        return dirty

    def _rewire_consumers(self, arena: _Arena, dirty: list[int]) -> tuple[Ref, ...]:
        """Step 2: point the base's consumers of replaced values at their replacements (appending
        them to ``dirty``); returns the new graph outputs."""
        base, rw = self.base, self._rewire
        nodes, cons = arena.nodes, arena.cons
        touched: dict[int, None] = {}
        for old in rw:
            for cid, slot in base.consumers.get(old.node, ()):
                if base.nodes[cid].inputs[slot] == old:
                    touched[cid] = None
        for cid in touched:
            node = base.nodes[cid]
            new_inputs = tuple(rw.get(r, r) for r in node.inputs)
            for slot, (a, b) in enumerate(zip(node.inputs, new_inputs, strict=True)):
                if a != b:
                    _del_consumer(cons, a.node, (cid, slot))
                    cons[b.node] = (*cons.get(b.node, ()), (cid, slot))
            nodes[cid] = Node(node.sig, new_inputs)
            dirty.append(cid)
        return tuple(rw.get(r, r) for r in base.outputs)

    def _remove_dead(self, arena: _Arena, outputs: tuple[Ref, ...]) -> list[int]:
        """Step 3: dead-code elimination, starting from replaced values and unused new nodes;
        returns the removed ids (graph inputs and outputs are never removed)."""
        nodes, cons, leaves, params = arena.nodes, arena.cons, arena.leaves, arena.params
        out_nodes = {r.node for r in outputs}
        input_set = set(self.base.inputs)
        removed: list[int] = []
        stack = [old.node for old in self._rewire]
        stack.extend(nid for nid in self._new if nid not in out_nodes)
        while stack:
            nid = stack.pop()
            if nid not in nodes or nid in input_set or nid in out_nodes or cons.get(nid):
                continue
            node = nodes[nid]
            del nodes[nid]
            arena.index_del(nid, node)
            removed.append(nid)
            if nid in cons:
                del cons[nid]
            if node.sig.op == "weight":
                lname = node.sig.attr["name"]
                del leaves[lname]
                if lname in params:
                    del params[lname]
            for slot, r in enumerate(node.inputs):
                _del_consumer(cons, r.node, (nid, slot))
                stack.append(r.node)
        return removed

    def _record_provenance(self, g: Graph, dirty: list[int], removed: list[int]) -> None:
        """Step 4: what incremental matching, costing and derived data need about this edit.

        A new node that nothing reads was removed by step 3; it is neither added nor removed.
        """
        base, new_nodes = self.base, self._new
        dropped = {n for n in removed if n in new_nodes}
        if dropped:
            removed = [n for n in removed if n not in dropped]
        g._cache["edit"] = (dirty, removed)
        parents = {k: base._cache[k] for k in _INCREMENTAL_KEYS if k in base._cache}
        if parents:  # keep the parent's per-node maps (not the parent graph) for incremental updates
            g._cache[PARENT_MAPS_KEY] = parents
        # every node whose inputs, consumers or output status changed: new and rewired nodes,
        # producers of replacement values (they gain consumers), replaced producers that survive
        # and producers that lost consumers to removed nodes
        touched_ids = set(dirty)
        touched_ids.update(r.node for nid in removed for r in base.nodes[nid].inputs)
        for old, new in self._rewire.items():
            touched_ids.update((old.node, new.node))
        touched_ids.intersection_update(g.nodes)
        g._cache["touched"] = tuple(sorted(touched_ids))
        g._cache["removed"] = tuple(removed)
        g._cache["added"] = tuple(n for n in new_nodes if n not in dropped)


class _Arena:
    """The base graph's persistent maps, opened for O(change) mutation by one commit."""

    __slots__ = ("by_op", "cons", "leaves", "nodes", "params")

    def __init__(self, base: Graph) -> None:
        self.nodes = base.nodes.mutate()
        self.cons = base.consumers.mutate()
        self.by_op = base.by_op.mutate()
        self.leaves = base.leaves.mutate()
        self.params = base.params.mutate()

    def index_add(self, nid: int, node: Node) -> None:
        op = node.sig.op
        self.by_op[op] = self.by_op.get(op, _EMPTY).set(nid, None)

    def index_del(self, nid: int, node: Node) -> None:
        op = node.sig.op
        ids = self.by_op[op].delete(nid)
        if len(ids):
            self.by_op[op] = ids
        else:
            del self.by_op[op]


__all__ = ["PARENT_MAPS_KEY", "WEIGHT_ONLY_KEY", "GraphEdit"]
