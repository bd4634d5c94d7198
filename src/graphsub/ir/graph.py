"""The immutable :class:`Graph` value and its copy-on-write :class:`GraphEdit`.

Representation
--------------
A graph is an *arena*: a persistent hash map (HAMT, :mod:`immutables`) from integer node ids to
interned :class:`~graphsub.ir.node.Node` records, plus persistent indices that are updated in
place of being recomputed:

* ``consumers``: node id -> ``((consumer id, input slot), ...)``,
* ``by_op``: op name -> ids of the nodes with that op (the matcher's index),
* ``leaves``: input/weight name -> node id,
* ``params``: weight name -> numpy data (weights may also come without data).

A substitution (:meth:`Graph.edit` ... :meth:`GraphEdit.commit`) adds the new nodes, rewires
the consumers of replaced values and deletes what became dead.  It touches O(change) map
entries -- new nodes, rewired consumers, removed nodes -- and shares every other node record
and map subtree with its parent; nothing is copied.

The structural hash is a Merkle hash (op signature digest combined with the hashes of the
inputs), so it ignores node ids and construction order.  It is cached per graph and, for a
graph produced by an edit, recomputed only over the forward cone of the edit.

Invariants: every ``Ref`` in a node or in ``outputs`` names an existing node output; nodes
are reachable from an output unless they are inputs (dead code is removed by ``commit``);
leaf names are unique; the graph is acyclic when built by :class:`~graphsub.ir.builder.Builder`
(edits trust the caller -- the rule matcher -- to keep it so; :func:`graphsub.ir.validate.validate`
checks everything).

>>> from graphsub.ir.builder import Builder
>>> from graphsub.ir.node import Ref
>>> b = Builder()
>>> x = b.input("x", (2, 4))
>>> g = b.build(b.relu(b.relu(x)))
>>> e = g.edit()
>>> e.replace(g.outputs[0], e.op("sigmoid", Ref(g.inputs[0])))  # relu(relu(x)) -> sigmoid(x)
>>> g2 = e.commit()
>>> sorted(n.op for n in g2.nodes.values()), sorted(n.op for n in g.nodes.values())
(['input', 'sigmoid'], ['input', 'relu', 'relu'])
>>> g.structural_hash() != g2.structural_hash()
True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import immutables
import numpy as np

from graphsub.errors import GraphError, ShapeError
from graphsub.ir.edit import PARENT_MAPS_KEY, GraphEdit
from graphsub.ir.node import Node, Ref
from graphsub.ops.types import TensorType, dtype_of

LEAF_OPS = frozenset({"input", "weight"})
EMPTY_MAP: immutables.Map[Any, Any] = immutables.Map()


class Graph:
    """An immutable dataflow graph.  Build one with :class:`~graphsub.ir.builder.Builder`."""

    __slots__ = (
        "__weakref__",
        "_cache",
        "by_op",
        "consumers",
        "inputs",
        "leaves",
        "name",
        "next_id",
        "nodes",
        "output_names",
        "outputs",
        "params",
    )

    nodes: immutables.Map[int, Node]
    inputs: tuple[int, ...]
    outputs: tuple[Ref, ...]
    output_names: tuple[str, ...]
    params: immutables.Map[str, np.ndarray]
    consumers: immutables.Map[int, tuple[tuple[int, int], ...]]
    by_op: immutables.Map[str, immutables.Map[int, None]]
    leaves: immutables.Map[str, int]
    next_id: int
    name: str
    _cache: dict[str, Any]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arena(
        cls,
        nodes: Mapping[int, Node],
        inputs: Sequence[int],
        outputs: Sequence[Ref],
        output_names: Sequence[str] | None = None,
        params: Mapping[str, np.ndarray] | None = None,
        name: str = "graph",
    ) -> Graph:
        """Build a graph from an id -> node mapping, keeping only what the outputs reach
        (plus all inputs).  O(graph); used by the builder, parser and frontends."""
        outputs = tuple(Ref(*r) for r in outputs)
        for r in outputs:
            if r.node not in nodes or r.index >= len(nodes[r.node].sig.out_types):
                raise GraphError(f"output {r!r} does not name an existing node output")
        keep: set[int] = set(inputs)
        stack = [r.node for r in outputs]
        while stack:
            nid = stack.pop()
            if nid in keep and nodes[nid].sig.op != "input":
                continue
            keep.add(nid)
            node = nodes.get(nid)
            if node is None:
                raise GraphError(f"reference to missing node %{nid}")
            for r in node.inputs:
                if r.node not in nodes:
                    raise GraphError(f"node %{nid} ({node.op}) reads missing node %{r.node}")
                if r.node not in keep:
                    stack.append(r.node)
        nmap: dict[int, Node] = {nid: nodes[nid] for nid in sorted(keep)}
        cons: dict[int, list[tuple[int, int]]] = {}
        by_op: dict[str, dict[int, None]] = {}
        leaves: dict[str, int] = {}
        for nid, node in nmap.items():
            for slot, r in enumerate(node.inputs):
                cons.setdefault(r.node, []).append((nid, slot))
            by_op.setdefault(node.sig.op, {})[nid] = None
            if node.sig.op in LEAF_OPS:
                lname = node.sig.attr["name"]
                if lname in leaves:
                    raise GraphError(f"two leaves are named {lname!r}")
                leaves[lname] = nid
        for nid in inputs:
            if nmap[nid].sig.op != "input":
                raise GraphError(f"graph input %{nid} is a {nmap[nid].op}, not an input")
        if output_names is None:
            output_names = (
                ("output",) if len(outputs) == 1 else tuple(f"output_{i}" for i in range(len(outputs)))
            )
        if len(output_names) != len(outputs) or len(set(output_names)) != len(output_names):
            raise GraphError(f"output names {list(output_names)} must be unique, one per output")
        kept_params = {k: v for k, v in (params or {}).items() if k in leaves}
        return cls._make(
            nodes=immutables.Map(nmap),
            inputs=tuple(inputs),
            outputs=outputs,
            output_names=tuple(output_names),
            params=immutables.Map(kept_params),
            consumers=immutables.Map({k: tuple(v) for k, v in cons.items()}),
            by_op=immutables.Map({k: immutables.Map(v) for k, v in by_op.items()}),
            leaves=immutables.Map(leaves),
            next_id=max(nodes, default=-1) + 1,
            name=name,
        )

    @classmethod
    def _make(cls, **fields: Any) -> Graph:
        g = object.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(g, k, v)
        object.__setattr__(g, "_cache", {})
        return g

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Graph is immutable; use graph.edit()")

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {k: getattr(self, k) for k in self.__slots__ if k not in ("__weakref__", "_cache")}
        return (_restore_graph, (fields,))

    # ------------------------------------------------------------------ queries
    def node(self, nid: int) -> Node:
        try:
            return self.nodes[nid]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no node %{nid}") from None

    def type_of(self, ref: Ref | tuple[int, int]) -> TensorType:
        return self.node(ref[0]).sig.out_types[ref[1]]

    def users(self, nid: int) -> tuple[tuple[int, int], ...]:
        """``(consumer id, input slot)`` pairs reading any output of node ``nid``."""
        return self.consumers.get(nid, ())

    def ops_of(self, op: str) -> Iterable[int]:
        """Ids of the nodes whose op is ``op`` (ascending id order not guaranteed)."""
        return self.by_op.get(op, EMPTY_MAP).keys()

    def leaf(self, name: str) -> int:
        try:
            return self.leaves[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no input or weight named {name!r}") from None

    def is_output(self, nid: int) -> bool:
        return any(r.node == nid for r in self.outputs)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.nodes[i].sig.attr["name"] for i in self.inputs)

    @property
    def input_types(self) -> tuple[TensorType, ...]:
        return tuple(self.nodes[i].sig.out_types[0] for i in self.inputs)

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return tuple(self.type_of(r) for r in self.outputs)

    def weights(self) -> list[int]:
        """Ids of weight leaves, in canonical order."""
        return [nid for nid in self.topo_order() if self.nodes[nid].sig.op == "weight"]

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_ops(self) -> int:
        """Compute ops: every node except inputs, weights and zero-input constant generators."""
        n = 0
        for op, ids in self.by_op.items():
            if op in LEAF_OPS:
                continue
            if op.startswith("const_"):
                continue
            n += len(ids)
        return n

    def op_histogram(self) -> dict[str, int]:
        """Count of compute ops per op name, sorted by name."""
        return {
            op: len(ids)
            for op, ids in sorted(self.by_op.items())
            if op not in LEAF_OPS and not op.startswith("const_")
        }

    def edit_info(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
        """For a graph made by an edit: (added node ids, removed ids of the parent, touched ids).

        *Touched* nodes are the new nodes, the rewired consumers, and nodes that lost consumers;
        only matches near them can differ between parent and child (incremental matching).
        """
        if "touched" not in self._cache:
            return None
        return self._cache["added"], self._cache["removed"], self._cache["touched"]

    def drop_derived(self) -> None:
        """Forget every cached derived value (topological order, hashes, levels, analyses) and the
        parent's maps kept for incremental updates, so the next query recomputes it from scratch
        in O(graph); the edit provenance (:meth:`edit_info`) stays.  Results never change: this is
        for cold-cache measurements."""
        kept: dict[str, Any] = {k: self._cache[k] for k in ("added", "removed", "touched") if k in self._cache}
        self._cache.clear()
        self._cache.update(kept)

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[int]:
        return iter(self.topo_order())

    def __repr__(self) -> str:
        return (
            f"Graph({self.name!r}: {self.num_ops} ops, inputs={list(self.input_names)}, "
            f"outputs={list(self.output_names)})"
        )

    # ------------------------------------------------------------------ derived (cached)
    def topo_order(self) -> list[int]:
        """Canonical topological order of all node ids.

        Inputs come first in interface order; then a depth-first post-order from the outputs
        (in order), visiting each node's inputs in order.  Independent of node ids, so equal
        graphs list equal nodes in equal positions.  Raises GraphError on a cycle.
        """
        cached = self._cache.get("topo")
        if cached is not None:
            return list(cached)
        nodes = self.nodes
        order: list[int] = list(self.inputs)
        state: dict[int, int] = dict.fromkeys(self.inputs, 2)  # 1 = on stack, 2 = done
        for out in self.outputs:
            if state.get(out.node) == 2:
                continue
            stack: list[tuple[int, int]] = [(out.node, 0)]
            state[out.node] = 1
            while stack:
                nid, i = stack[-1]
                ins = nodes[nid].inputs
                if i < len(ins):
                    stack[-1] = (nid, i + 1)
                    src = ins[i].node
                    st = state.get(src)
                    if st is None:
                        state[src] = 1
                        stack.append((src, 0))
                    elif st == 1:
                        raise GraphError(f"cycle through node %{src} ({nodes[src].op})")
                else:
                    stack.pop()
                    state[nid] = 2
                    order.append(nid)
        if len(order) != len(nodes):
            missing = sorted(set(nodes) - set(order))[:5]
            raise GraphError(f"nodes not reachable from any output: {missing}")
        self._cache["topo"] = tuple(order)
        return order

    def structural_hash(self) -> int:
        """Merkle hash of the graph: equal structure => equal hash, whatever the node ids.

        O(graph) the first time for a built graph; O(forward cone of the edit) for a graph
        made by :meth:`GraphEdit.commit` from a parent whose hash is known.
        """
        h = self._cache.get("hash")
        if h is None:
            mk = self._merkle()
            outs = tuple((mk[r.node], r.index) for r in self.outputs)
            ins = tuple(mk[i] for i in self.inputs)
            h = hash(("graph", ins, outs, self.output_names))
            self._cache["hash"] = h
        return h

    def node_hash(self, nid: int) -> int:
        """Merkle hash of the sub-DAG rooted at node ``nid`` (id-independent)."""
        return self._merkle()[nid]

    def _merkle(self) -> immutables.Map[int, int]:
        """Per-node Merkle hashes ``hash((sig digest, h(in0), idx0, h(in1), idx1, ...))``."""
        return self._derived("merkle")

    def levels(self) -> immutables.Map[int, int]:
        """Per-node depth: 0 for leaves, else 1 + the maximum depth of the producers.

        A node can only reach nodes of greater depth, which bounds cycle checks.  Cached, and
        recomputed only over the forward cone of an edit, like the structural hash.
        """
        return self._derived("level")

    def _derived(self, kind: str) -> immutables.Map[int, int]:
        cached = self._cache.get(kind)
        if cached is not None:
            return cached
        combine = _DERIVED[kind]
        nodes = self.nodes
        h: dict[int, int] = {}
        parent_map = self._cache.get(PARENT_MAPS_KEY, {}).get(kind)
        edit = self._cache.get("edit")
        if parent_map is None or edit is None:
            for nid in self.topo_order():
                node = nodes[nid]
                h[nid] = combine(node, [(h[r.node], r.index) for r in node.inputs])
            result = immutables.Map(h)
        else:
            dirty, removed = edit
            cone: set[int] = set()  # forward cone of the edit: the only values that change
            stack = [n for n in dirty if n in nodes]
            while stack:
                nid = stack.pop()
                if nid not in cone:
                    cone.add(nid)
                    stack.extend(c for c, _ in self.consumers.get(nid, ()))
            for root in cone:
                if root in h:
                    continue
                stack = [root]
                while stack:
                    cur = stack[-1]
                    node = nodes[cur]
                    pending = [r.node for r in node.inputs if r.node in cone and r.node not in h]
                    if pending:
                        stack.extend(pending)
                        continue
                    stack.pop()
                    h[cur] = combine(node, [(h[r.node] if r.node in cone else parent_map[r.node], r.index)
                                            for r in node.inputs])
            mut = parent_map.mutate()
            for nid in removed:
                if nid in mut:
                    del mut[nid]
            for nid, v in h.items():
                mut[nid] = v
            result = mut.finish()
        self._cache[kind] = result
        return result

    def __hash__(self) -> int:
        return self.structural_hash()

    def __eq__(self, other: object) -> bool:
        """Structural equality (via the 64-bit Merkle hash and the interface)."""
        if not isinstance(other, Graph):
            return NotImplemented
        if other is self:
            return True
        return (
            self.structural_hash() == other.structural_hash()
            and self.output_names == other.output_names
            and self.num_nodes == other.num_nodes
        )

    # ------------------------------------------------------------------ editing
    def edit(self) -> GraphEdit:
        """Start a copy-on-write edit; :meth:`GraphEdit.commit` returns the new graph."""
        return GraphEdit(self)

    def with_params(self, params: Mapping[str, np.ndarray]) -> Graph:
        """Same structure with weight data attached/replaced (names must be weights)."""
        m = self.params.mutate()
        for k, v in params.items():
            nid = self.leaves.get(k)
            if nid is None or self.nodes[nid].sig.op != "weight":
                raise GraphError(f"no weight named {k!r}")
            t = self.nodes[nid].sig.out_types[0]
            arr = np.asarray(v)
            if tuple(arr.shape) != t.shape or dtype_of(arr) != t.dtype:
                raise ShapeError(f"weight {k!r}: data {arr.dtype}{list(arr.shape)} does not match {t}")
            m[k] = arr
        return self._replace_fields(params=m.finish())

    def renamed(self, name: str) -> Graph:
        return self._replace_fields(name=name)

    def _replace_fields(self, **changes: Any) -> Graph:
        fields = {k: getattr(self, k) for k in self.__slots__ if k not in ("__weakref__", "_cache")}
        fields.update(changes)
        g = Graph._make(**fields)
        for key in ("topo", "hash", "merkle", "level"):  # structure unchanged: derived data carries over
            if key in self._cache:
                g._cache[key] = self._cache[key]
        return g


def _merkle_combine(node: Node, ins: list[tuple[int, int]]) -> int:
    parts = [node.sig.digest]
    for h, idx in ins:
        parts.append(h)
        parts.append(idx)
    return hash(tuple(parts))


def _level_combine(node: Node, ins: list[tuple[int, int]]) -> int:
    return 1 + max(v for v, _ in ins) if ins else 0


_DERIVED = {"merkle": _merkle_combine, "level": _level_combine}


def _restore_graph(fields: dict[str, Any]) -> Graph:
    return Graph._make(**fields)


__all__ = ["LEAF_OPS", "Graph"]
