"""Graph analyses shared by the cost models, the rule matcher and reports.

* **Weight-only status** -- does a value depend on weights/constants only (no graph input)?
  Such values are folded before run time (docs/architecture.md, "weights are data, not cost"), so the
  nodes computing them, like leaves, are *free* (:func:`is_free`).  One definition
  (:func:`_status`), one per-graph cache, two access patterns: the whole-graph map
  (:func:`weight_only_map`, :func:`weight_only_update`) for the cost models and a per-value
  query (:func:`is_weight_only`) for the matcher.
* **Weight bytes** (:func:`weight_bytes`) -- the bytes of the weight leaves.
* **Peak memory** (:func:`peak_memory`, :class:`MemoryProfile`) -- a liveness walk of the
  topological order.
* **Neighbourhoods** -- nodes within ``r`` hops of some nodes in one graph
  (:func:`neighbourhood`), or around seeds across a parent and its child (:func:`expand`).

Invariants.  Graphs are immutable, so a result cached on a graph never goes stale; results are
cached on the graph they describe and on no other.  The weight-only map of a graph made by
:meth:`~graphsub.ir.edit.GraphEdit.commit` is derived in O(change) from its parent's map -- the
one passed as ``parent``, or the one the edit kept when it was committed (the parent's map, not
the parent graph) -- and computed in O(graph) otherwise; a per-value query answers leaves and
zero-input constants from the node alone and everything else from that map.  :func:`weight_bytes`
is O(change) from an explicit ``parent``; :func:`peak_memory` is O(graph), once per graph.

>>> from graphsub.ir.builder import Builder
>>> b = Builder()
>>> x, w = b.input("x", (4,)), b.weight("w", (4,))
>>> g = b.build(b.add(x, b.relu(w)))
>>> relu = next(iter(g.ops_of("relu")))
>>> is_weight_only(g, relu), is_weight_only(g, g.outputs[0]), weight_bytes(g)
(True, False, 16)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import immutables

from graphsub.errors import GraphError
from graphsub.ir.edit import PARENT_MAPS_KEY, WEIGHT_ONLY_KEY
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref

_EMPTY: immutables.Map[int, bool] = immutables.Map()
WEIGHT_BYTES_KEY = "weight_bytes"  # Graph._cache keys of the analyses (WEIGHT_ONLY_KEY: see ir.edit)
PEAK_MEMORY_KEY = "peak_memory"

# ----------------------------------------------------------------------------- weight-only status


def _status(graph: Graph, nid: int, wo: Mapping[int, bool] | immutables.MapMutation[int, bool]) -> bool:
    """The definition: inputs are not weight-only; weights and zero-input constant generators
    (``weight_op``) are; any other node is iff all its inputs are (``wo`` holds their status)."""
    node = graph.nodes[nid]
    op = node.sig.op
    if op == "input":
        return False
    if not node.inputs:
        return op == "weight" or node.sig.opdef.weight_op
    return all(wo[r.node] for r in node.inputs)


def weight_only_map(graph: Graph, parent: Graph | None = None) -> immutables.Map[int, bool]:
    """Per node id: does its value depend on weights/constants only (no graph input)?

    Cached on the graph.  For a graph made by an edit it is derived in O(change) from the map of
    ``parent`` (computed if need be) or, without ``parent``, from the parent's map that the edit
    kept when it was committed (if the parent had one then); otherwise computed in O(graph).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> x = b.input("x", (2, 2))
    >>> g = b.build(b.matmul(x, b.transpose(b.weight("w", (2, 2)), perm=(1, 0))))
    >>> sorted((g.nodes[n].op, s) for n, s in weight_only_map(g).items())
    [('input', False), ('matmul', False), ('transpose', True), ('weight', True)]
    """
    cached: immutables.Map[int, bool] | None = graph._cache.get(WEIGHT_ONLY_KEY)
    if cached is not None:
        return cached
    if graph.edit_info() is not None:
        if parent is not None:
            return weight_only_update(parent, graph)[0]
        kept = graph._cache.get(PARENT_MAPS_KEY, {}).pop(WEIGHT_ONLY_KEY, None)
        if kept is not None:
            result, _ = _derive(kept, graph)
            return graph._cache.setdefault(WEIGHT_ONLY_KEY, result)
    wo: dict[int, bool] = {}
    for nid in graph.topo_order():
        wo[nid] = _status(graph, nid, wo)
    result = immutables.Map(wo)
    graph._cache[WEIGHT_ONLY_KEY] = result
    return result


def weight_only_update(parent: Graph, child: Graph) -> tuple[immutables.Map[int, bool], set[int]]:
    """The child's weight-only map and the ids (present in both) whose status changed.

    ``child`` must have been made by an edit of ``parent``.  Only the added and touched nodes are
    recomputed; a changed status propagates to consumers until nothing changes (in practice:
    never, except for constant-folding rewrites).  The cost models call this to re-cost nodes
    whose constness changed (O(change)).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> x, w = b.input("x", (3,)), b.weight("w", (3,))
    >>> g = b.build(b.relu(b.add(w, b.neg(x))))
    >>> neg = next(iter(g.ops_of("neg")))
    >>> e = g.edit()
    >>> e.replace((neg, 0), e.op("exp", (g.leaf("w"), 0)))   # relu(add(w, neg(x))) -> relu(add(w, exp(w)))
    >>> child = e.commit()
    >>> wo, changed = weight_only_update(g, child)
    >>> sorted(child.nodes[n].op for n in changed), wo[child.outputs[0].node]
    (['add', 'relu'], True)
    """
    if child.edit_info() is None:
        raise GraphError("weight_only_update needs a graph made by GraphEdit.commit()")
    result, changed = _derive(weight_only_map(parent), child)
    child._cache.setdefault(WEIGHT_ONLY_KEY, result)
    return result, {n for n in changed if n in parent.nodes}


def _derive(parent_map: immutables.Map[int, bool], child: Graph) -> tuple[immutables.Map[int, bool], set[int]]:
    """The child's map from its parent's (``child`` made by an edit): O(change)."""
    info = child.edit_info()
    assert info is not None
    added, removed, touched = info
    mut = parent_map.mutate()
    for nid in removed:
        if nid in mut:
            del mut[nid]
    for nid in sorted(added):  # new ids grow in creation order: a valid topological order
        mut[nid] = _status(child, nid, mut)
    changed: set[int] = set()
    work = [n for n in touched if n in child.nodes]
    while work:
        nid = work.pop()
        new = _status(child, nid, mut)
        if mut.get(nid) != new:
            mut[nid] = new
            changed.add(nid)
            work.extend(c for c, _ in child.users(nid))
    return mut.finish(), changed


def is_weight_only(graph: Graph, ref: Ref | int) -> bool:
    """Whether a value (or node ``ref``) depends on weights/constants only (no graph input).

    The matcher's query: O(1) once the graph's map is known; before that, a leaf or zero-input
    constant is decided from its node, and anything else builds :func:`weight_only_map` (O(change)
    for a graph made by an edit of a graph whose map was known, else O(graph)).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> x = b.input("x", (2,))
    >>> k = b.concat(b.weight("a", (2,)), b.weight("b", (2,)), axis=0)
    >>> g = b.build({"y": b.add(b.concat(x, x, axis=0), k), "k": k})
    >>> is_weight_only(g, g.outputs[1]), is_weight_only(g, g.outputs[0]), is_weight_only(g, g.leaf("a"))
    (True, False, True)
    """
    nid = ref if isinstance(ref, int) else ref.node
    wo: immutables.Map[int, bool] | None = graph._cache.get(WEIGHT_ONLY_KEY)
    if wo is None:
        if not graph.nodes[nid].inputs:
            return _status(graph, nid, _EMPTY)
        wo = weight_only_map(graph)
    return wo[nid]


def is_free(graph: Graph, nid: int, wo: Mapping[int, bool] | None = None) -> bool:
    """Leaves and weight-only nodes do no work at run time (``wo``: the graph's weight-only map).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> g = b.build(b.add(b.input("x", (2,)), b.neg(b.weight("w", (2,)))))
    >>> {g.nodes[n].op: is_free(g, n) for n in g.topo_order()}
    {'input': True, 'weight': True, 'neg': True, 'add': False}
    """
    node = graph.nodes[nid]
    if node.sig.opdef.leaf:
        return True
    return (wo if wo is not None else weight_only_map(graph))[nid]


# ----------------------------------------------------------------------------- weight bytes


def weight_bytes(graph: Graph, parent: Graph | None = None) -> int:
    """Total bytes of the graph's weight leaves; cached, and O(change) from ``parent`` for a graph
    made by an edit of it.

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> g = b.build(b.matmul(b.input("x", (1, 8)), b.weight("w", (8, 4))))   # 32 float32 values
    >>> weight_bytes(g)
    128
    """
    cached: int | None = graph._cache.get(WEIGHT_BYTES_KEY)
    if cached is not None:
        return cached
    info = graph.edit_info()
    if parent is not None and info is not None:
        added, removed, _ = info
        total = weight_bytes(parent)
        total += sum(graph.nodes[n].sig.out_types[0].nbytes for n in added if graph.nodes[n].sig.op == "weight")
        total -= sum(parent.nodes[n].sig.out_types[0].nbytes for n in removed
                     if n in parent.nodes and parent.nodes[n].sig.op == "weight")
    else:
        total = sum(graph.nodes[n].sig.out_types[0].nbytes for n in graph.ops_of("weight"))
    graph._cache[WEIGHT_BYTES_KEY] = total
    return total

# ----------------------------------------------------------------------------- peak memory


@dataclass(frozen=True)
class MemoryProfile:
    """``peak_bytes = const_bytes + activation_peak_bytes``.

    ``const_bytes``: the constants a run holds (weight-only values read by run-time nodes or
    returned, i.e. the folded weights); ``activation_peak_bytes``: the most bytes of graph
    inputs and intermediate values alive at once when nodes run in topological order and a
    value is freed after its last consumer (graph outputs are never freed).
    """

    peak_bytes: int
    const_bytes: int
    activation_peak_bytes: int


def peak_memory(graph: Graph) -> MemoryProfile:
    """Liveness walk of ``graph.topo_order()`` (O(graph); cached on the graph).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> x = b.input("x", (256,))                 # 1 KiB
    >>> y = b.relu(b.relu(b.relu(x)))            # at most two 1 KiB values alive at once
    >>> peak_memory(b.build(y))
    MemoryProfile(peak_bytes=2048, const_bytes=0, activation_peak_bytes=2048)
    >>> w = b.weight("w", (256,))                # a folded constant: held for the whole run
    >>> peak_memory(b.build(b.mul(y, b.neg(w)))).const_bytes
    1024
    """
    cached: MemoryProfile | None = graph._cache.get(PEAK_MEMORY_KEY)
    if cached is not None:
        return cached
    wo = weight_only_map(graph)
    order = graph.topo_order()
    pos = {nid: i for i, nid in enumerate(order)}
    outputs = {r.node for r in graph.outputs}
    const_refs: set[tuple[int, int]] = set()
    last_use: dict[int, int] = {}
    for nid in order:
        node = graph.nodes[nid]
        if is_free(graph, nid, wo):
            continue
        for r in node.inputs:
            if wo[r.node]:
                const_refs.add((r.node, r.index))
            else:
                last_use[r.node] = max(last_use.get(r.node, -1), pos[nid])
    for r in graph.outputs:
        if wo[r.node]:
            const_refs.add((r.node, r.index))
    const_bytes = sum(graph.type_of(r).nbytes for r in const_refs)
    frees: dict[int, list[int]] = {}
    for nid, last in last_use.items():
        if nid not in outputs:
            frees.setdefault(last, []).append(nid)
    live = sum(graph.type_of((i, 0)).nbytes for i in graph.inputs)
    peak = live
    for i, nid in enumerate(order):
        node = graph.nodes[nid]
        if node.sig.op == "input" or is_free(graph, nid, wo):
            continue
        live += sum(t.nbytes for t in node.sig.out_types)
        peak = max(peak, live)
        for dead in frees.get(i, ()):
            live -= sum(t.nbytes for t in graph.nodes[dead].sig.out_types)
    result = MemoryProfile(const_bytes + peak, const_bytes, peak)
    graph._cache[PEAK_MEMORY_KEY] = result
    return result


# ----------------------------------------------------------------------------- neighbourhoods


def neighbourhood(graph: Graph, nodes: Iterable[int], radius: int) -> set[int]:
    """Node ids within ``radius`` undirected hops of ``nodes`` (existing ones only).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> g = b.build(b.relu(b.neg(b.exp(b.input("x", (2,))))))   # x -> exp -> neg -> relu
    >>> neg = next(iter(g.ops_of("neg")))
    >>> sorted(g.nodes[n].op for n in neighbourhood(g, [neg, 999], 1))
    ['exp', 'neg', 'relu']
    """
    region = {n for n in nodes if n in graph.nodes}
    frontier = list(region)
    for _ in range(radius):
        nxt = []
        for nid in frontier:
            for r in graph.nodes[nid].inputs:
                if r.node not in region:
                    region.add(r.node)
                    nxt.append(r.node)
            for c, _ in graph.users(nid):
                if c not in region:
                    region.add(c)
                    nxt.append(c)
        frontier = nxt
    return region


def expand(parent: Graph, child: Graph, seeds: Iterable[int], hops: int) -> set[int]:
    """``seeds`` plus every node within ``hops`` producer/consumer edges in either graph
    (``child`` made by an edit of ``parent``; a path may use edges of both graphs).  Seeds
    present in neither graph (ids removed by the edit) stay in the result.

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> g = b.build(b.relu(b.neg(b.exp(b.input("x", (2,))))))   # x -> exp -> neg -> relu
    >>> neg = next(iter(g.ops_of("neg")))
    >>> e = g.edit()
    >>> e.replace((neg, 0), e.op("tanh", g.nodes[neg].inputs[0]))   # x -> exp -> tanh -> relu
    >>> child = e.commit()
    >>> added, removed, _ = child.edit_info()
    >>> region = expand(g, child, [*added, *removed], 1)
    >>> sorted({n: (child.nodes.get(n) or g.nodes[n]).op for n in region}.values())
    ['exp', 'neg', 'relu', 'tanh']
    """
    region = set(seeds)
    frontier = set(region)
    for _ in range(hops):
        nxt: set[int] = set()
        for g in (parent, child):
            for nid in frontier:
                node = g.nodes.get(nid)
                if node is None:
                    continue
                nxt.update(r.node for r in node.inputs)
                nxt.update(c for c, _ in g.users(nid))
        frontier = nxt - region
        region |= nxt
    return region


__all__ = [
    "MemoryProfile",
    "expand",
    "is_free",
    "is_weight_only",
    "neighbourhood",
    "peak_memory",
    "weight_bytes",
    "weight_only_map",
    "weight_only_update",
]
