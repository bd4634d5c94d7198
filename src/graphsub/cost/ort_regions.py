"""What onnxruntime runs, priced inside a search: ORT's kernels region by region (cost spec ``ort-kernels``).

:class:`~graphsub.cost.ort_kernels.OrtKernelPricer` prices a whole model as onnxruntime runs it: ORT's own optimized
graph (its fusions, its NCHWc layout, its constant folding), each kernel timed alone and cached by a digest of what
its time depends on.  A search cannot afford that for every candidate -- a whole model per candidate is seconds --
so :class:`OrtKernelCostModel` prices the *region* an edit changes:

1. **The region.**  A substitution (``child.edit_info()``) adds, removes and rewires a few nodes; the region is those
   nodes and every run-time node within :data:`HOPS` producer/consumer edges of them, in either graph (what ORT may
   fuse with them: a bias, an activation, the transpose before a layer norm), and the elementwise chain that an
   elementwise node of it belongs to, up to :data:`CHAIN` nodes more (:func:`_elementwise_chains`): onnxruntime
   fuses such a chain whole (GELU's eight nodes into one ``FastGelu``), so a region that cut it would price an edit
   that breaks the fusion as a tie.
2. **The region as a model** (:func:`region_graph`): its run-time nodes, in order; a value it reads from a run-time
   node outside becomes a graph input (random data of its type, integer indices kept in range); a weight it reads
   becomes an initializer with the weight's data, and a weight-only computation it reads (a transposed kernel) comes
   with it, so that onnxruntime folds it as in the full model; every value read outside the region, or a graph
   output, is an output.
3. **Its price**: the region's model goes through the pricer -- ORT optimizes it at the search's thread count and
   every kernel of the result is timed alone, or read from the op-time cache -- and costs its calibrated estimate
   without the call overhead (:meth:`~graphsub.cost.ort_kernels.KernelPrice.estimate_ms`). A region whose weights
   exceed :data:`FILE_BYTES` (a layer of a 1 B decoder: 138 MB of MLP) goes through files instead of copies: its
   weights are placeholders in the weight pool (:mod:`graphsub.frontends.weight_pool`), which onnxruntime maps;
   its optimized graph keeps them in a file beside it (:func:`graphsub.frontends.ort.optimized_files`), which the
   run that records each kernel's inputs maps too; only a kernel timed for the first time reads its own weights.
4. **Cached by structure** (:func:`region_key`): a digest of the region's signatures, its wiring, the types of its
   boundary values and the values of its small integer weights (shapes, axes) -- not names, not float weights --
   so the same rule at the same place of twelve identical layers prices the region once.
5. **The delta** is ``price(child's region) - price(parent's region)``.  A kernel both regions run is one cached
   timing, so what they share cancels exactly and noise does not leak into a delta.

A region that cannot be priced this way -- onnxruntime refuses it alone, one of its kernels does not run alone
(control flow), it is larger than :data:`MAX_REGION` nodes -- is priced by the fallback model
(``fused[min]``: :mod:`graphsub.cost.ort_fusion`) and counted in :attr:`OrtKernelCostModel.stats`.  The whole graph
(``graph_cost``) is priced the same way as one region (the pricer on the whole model), or by the fallback.

Deltas are regional: ORT fusions wider than the region (a whole attention block) are not seen, and a kernel's time
in the region may differ from its time in the full model. So ``parent_cost + delta`` is the search's estimate, not
exactly ``graph_cost(child)``; the searches only ever add deltas to their start's cost.  How much a region costs to
price: one ORT optimization and one run of the region, plus one timing per kernel not seen before (20 ms); a few
tens of milliseconds once the kernels are cached (:attr:`RegionStats.seconds`).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.cost.base import Cost, Limits, Objective, SumCostModel
from graphsub.ir.analysis import is_free, weight_bytes, weight_only_map, weight_only_update
from graphsub.ir.builder import Builder, Value
from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig, Ref

#: producer/consumer edges around an edit that its region takes in
HOPS = 1
#: a region with more run-time nodes than this is priced by the fallback model. The rotary embedding's rule on the
#: 1 B decoder changes a region of 108 nodes (both rotations, the attention, their neighbours): at 96 the fallback,
#: which does not see the kernel's rotation, priced it and the search left all sixteen (2026-11-30)
MAX_REGION = 160
#: elementwise nodes a region takes in beyond :data:`HOPS`, along the chains its elementwise nodes belong to. The
#: search rewrote three of GPT-2's four tanh GELUs as ``0.5x * tanh(u) + 0.5x`` (a distributive rule, a tie within
#: a one-hop region), and onnxruntime then fused one FastGelu where it had fused four (2026-11-30)
CHAIN = 24
#: weight-only nodes brought along into a region (a longer weight computation: the fallback prices the edit)
MAX_CONE = 64
#: integer weights up to this many elements keep their values in a region's key (shapes, axes, indices)
SMALL_INT = 64
#: a region whose weights exceed this many bytes is priced through files (module docstring, point 3)
FILE_BYTES = 32 << 20
#: the gain (ms) below which a delta is a timing's rounding, not a gain (:attr:`SumCostModel.resolution`, for the
#: time objective): a kernel timed alone is resolved to about a microsecond. On the 1 B decoder the search took
#: sixteen operand swaps of a Mul at -0.03 us each after its real steps (-31 us and more; 2026-11-30)
RESOLUTION_MS = 1e-3


class RegionError(Exception):
    """A region that cannot be priced as a model of its own (the fallback prices it)."""


@dataclass
class RegionStats:
    """What pricing regions cost a search: regions priced, found in the memo, left to the fallback, seconds."""

    priced: int = 0
    hits: int = 0
    fallbacks: int = 0
    seconds: float = 0.0
    last_error: str = ""


def region_nodes(graph: Graph, nodes: Sequence[int] | set[int], wo: Mapping[int, bool]) -> list[int]:
    """The run-time nodes among ``nodes`` present in ``graph``, in a topological order (by level, then id)."""
    levels = graph.levels()
    live = [n for n in nodes if n in graph.nodes and not is_free(graph, n, wo)]
    return sorted(live, key=lambda n: (levels[n], n))


def _runtime_near(parent: Graph, child: Graph, seeds: set[int], hops: int, wo_p: Mapping[int, bool],
                  wo_c: Mapping[int, bool]) -> set[int]:
    """``seeds`` and the nodes within ``hops`` producer/consumer edges of them in either graph, through run-time
    nodes only: a weight or an input read all over the graph (a constant the clean-up merged, shared by every
    layer) does not pull every reader of it into the region."""
    region = set(seeds)
    frontier = set(seeds)
    for _ in range(hops):
        nxt: set[int] = set()
        for g, wo in ((parent, wo_p), (child, wo_c)):
            for nid in frontier:
                node = g.nodes.get(nid)
                if node is None or is_free(g, nid, wo):
                    continue
                nxt.update(r.node for r in node.inputs if not is_free(g, r.node, wo))
                nxt.update(c for c, _ in g.users(nid))
        frontier = nxt - region
        region |= nxt
    return region


def _elementwise(graph: Graph, nid: int, wo: Mapping[int, bool]) -> bool:
    node = graph.nodes.get(nid)
    return node is not None and node.sig.opdef.elementwise and not is_free(graph, nid, wo)


def _elementwise_chains(parent: Graph, child: Graph, region: set[int], limit: int, wo_p: Mapping[int, bool],
                        wo_c: Mapping[int, bool]) -> set[int]:
    """``region`` and, breadth first, the elementwise run-time nodes joined to an elementwise node of it through
    elementwise nodes in either graph, at most ``limit`` more (module docstring, point 1)."""
    out = set(region)
    frontier = sorted(region)
    added = 0
    while frontier and added < limit:
        nxt: list[int] = []
        for nid in frontier:
            for g, wo in ((parent, wo_p), (child, wo_c)):
                if not _elementwise(g, nid, wo):
                    continue
                node = g.nodes[nid]
                for m in [*(r.node for r in node.inputs), *(c for c, _ in g.users(nid))]:
                    if m not in out and added < limit and _elementwise(g, m, wo):
                        out.add(m)
                        nxt.append(m)
                        added += 1
        frontier = nxt
    return out


def edit_regions(parent: Graph, child: Graph, info: tuple[Sequence[int], Sequence[int], Sequence[int]],
                 changed: set[int], wo_p: Mapping[int, bool], wo_c: Mapping[int, bool], *, hops: int = HOPS,
                 chain: int = CHAIN) -> tuple[list[int], list[int]]:
    """The region an edit (``child.edit_info()``; ``changed``: nodes whose weight-only status it changed) prices, in
    the parent and in the child (module docstring, point 1)."""
    added, removed, touched = info
    seeds: set[int] = set(added) | set(removed) | set(touched) | changed
    near = _elementwise_chains(parent, child, _runtime_near(parent, child, seeds, hops, wo_p, wo_c), chain, wo_p,
                               wo_c)
    return region_nodes(parent, near, wo_p), region_nodes(child, near, wo_c)


def _weight_desc(graph: Graph, ref: Ref) -> tuple[Any, ...]:
    """How a weight read by a region enters its key: its type, and its value when it is a small integer tensor."""
    node = graph.nodes[ref.node]
    t = graph.type_of(ref)
    if node.sig.op == "weight":
        data = graph.params.get(node.sig.attr["name"])
        if data is not None and np.asarray(data).dtype.kind in "iub" and np.asarray(data).size <= SMALL_INT:
            return ("w", t.shape, t.dtype, np.ascontiguousarray(data).tobytes())
        return ("w", t.shape, t.dtype)
    return ("wc", graph.node_hash(ref.node), ref.index)  # a computed weight: its whole (weight-only) cone


def region_key(graph: Graph, region: Sequence[int], wo: Mapping[int, bool]) -> str:
    """A digest of a region's structure (module docstring, point 4): equal for structurally equal regions of any
    two graphs, whatever their nodes and weights are named and whatever ids they have. Each node is described by its
    signature and its inputs, an input from inside the region by its producer's description (a Merkle hash within
    the region), so the key does not depend on the order of nodes that no edge orders."""
    inside = set(region)
    local: dict[int, str] = {}
    for nid in region:  # topological: a producer inside the region is described before its consumers
        node = graph.nodes[nid]
        parts: list[Any] = [node.sig.digest]
        for r in node.inputs:
            if r.node in local:
                parts.append(("n", local[r.node], r.index))
            elif wo[r.node]:
                parts.append(_weight_desc(graph, r))
            else:
                t = graph.type_of(r)
                parts.append(("x", t.shape, t.dtype))
        outs = [s for s in range(len(node.sig.out_types))
                if graph.is_output(nid) or any(c not in inside for c, _ in graph.users(nid))]
        parts.append(("o", tuple(outs)))
        local[nid] = hashlib.sha256(repr(parts).encode()).hexdigest()[:24]
    h = hashlib.sha256(b"ort-region-v2")
    for d in sorted(local.values()):
        h.update(d.encode())
    return h.hexdigest()[:32]


def region_graph(graph: Graph, region: Sequence[int], wo: Mapping[int, bool]) -> Graph:
    """The region as a graph of its own (module docstring, point 2). Raises RegionError when it cannot be."""
    b = Builder("region")
    vals: dict[Ref, Value] = {}
    inside = set(region)
    cone = 0
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def weight(ref: Ref) -> Value:
        nonlocal cone
        hit = vals.get(ref)
        if hit is not None:
            return hit
        node = graph.nodes[ref.node]
        if node.sig.op == "weight":
            t = graph.type_of(ref)
            data = graph.params.get(node.sig.attr["name"])
            v = b.weight(fresh("w"), t.shape, data=data, dtype=t.dtype) if data is not None else \
                b.weight(fresh("w"), t.shape, dtype=t.dtype)
            vals[ref] = v
            return v
        cone += 1
        if cone > MAX_CONE:
            raise RegionError(f"a weight computation of more than {MAX_CONE} nodes")
        outs = _rebuild(b, node.sig, [weight(r) for r in node.inputs])
        for slot, v in enumerate(outs):
            vals[Ref(ref.node, slot)] = v
        return vals[ref]

    outputs: list[Value] = []
    for nid in region:
        node = graph.nodes[nid]
        ins: list[Value] = []
        for r in node.inputs:
            if r in vals:
                ins.append(vals[r])
            elif wo[r.node]:
                ins.append(weight(r))
            else:
                t = graph.type_of(r)
                v = b.input(fresh("x"), t.shape, t.dtype)
                vals[r] = v
                ins.append(v)
        outs = _rebuild(b, node.sig, ins)
        for slot, v in enumerate(outs):
            vals[Ref(nid, slot)] = v
        used_outside = graph.is_output(nid) or any(c not in inside for c, _ in graph.users(nid))
        if used_outside:
            outputs.extend(outs)
    if not outputs:  # every value stays inside (a dead region): its last node's outputs keep it alive
        outputs.extend(vals[Ref(region[-1], s)] for s in range(len(graph.nodes[region[-1]].sig.out_types)))
    return b.build(outputs)


def _rebuild(b: Builder, sig: OpSig, ins: list[Value]) -> tuple[Value, ...]:
    if sig.opdef.leaf:
        raise RegionError(f"a leaf {sig.op} inside a region")
    return b.op_multi(sig.op, *ins, **dict(sig.attrs))


class OrtKernelCostModel(SumCostModel):
    """Prices a search's graphs by the kernels onnxruntime runs for the region each edit changes (module docstring).

    ``fallback`` prices per node (``node_cost``, ``cost_in``, breakdowns) and every region this model cannot price;
    by default ``fused[min]`` at the same thread count, sharing the op-time cache."""

    def __init__(self, *, threads: int | None = None, cache: Any = None, hops: int = HOPS, chain: int = CHAIN,
                 fallback: SumCostModel | None = None, budget_ms: float = 20.0, clock: str = "auto",
                 objective: Objective = "time_ms", limits: Limits | None = None,
                 gate: Callable[[], object] | None = None, seed: int = 0, progress: bool = False) -> None:
        from graphsub.cost.measured import OpTimeCache
        from graphsub.cost.ort_fusion import FusedMeasuredCostModel
        from graphsub.cost.ort_kernels import OrtKernelPricer

        super().__init__(objective, limits)
        self.threads = int(threads or os.cpu_count() or 1)
        shared = cache if isinstance(cache, OpTimeCache) else OpTimeCache(cache)
        self.fallback = fallback if fallback is not None else FusedMeasuredCostModel(
            cache=shared, threads=self.threads, statistic="min", progress=progress, gate=gate)
        self.pricer = OrtKernelPricer(threads=self.threads, cache=shared, budget_ms=budget_ms, clock=clock, gate=gate)
        self.hops = hops
        self.chain = chain
        self.resolution = RESOLUTION_MS if objective == "time_ms" else 0.0
        self.seed = seed
        self.name = "ort-kernels"
        self.stats = RegionStats()
        self._regions: dict[str, float | None] = {}
        self._floats: dict[tuple[tuple[int, ...], str], np.ndarray] = {}

    # -- per node: the fallback's prices ------------------------------------------------
    def node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None = None) -> Cost:
        return self.fallback.node_cost(sig, consts)

    def cost_in(self, graph: Graph, nid: int, wo: Mapping[int, bool]) -> Cost:
        return self.fallback.cost_in(graph, nid, wo)

    def prepare(self, graph: Graph) -> None:
        self.fallback.prepare(graph)

    # -- regions ----------------------------------------------------------------------
    def region_ms(self, graph: Graph, region: Sequence[int], wo: Mapping[int, bool]) -> float | None:
        """The estimated time of ``region`` (run-time nodes of ``graph``, in order) as onnxruntime runs it; None when
        it cannot be priced as a model of its own."""
        if not region:
            return 0.0
        if len(region) > MAX_REGION:
            self.stats.last_error = f"a region of {len(region)} nodes (> {MAX_REGION})"
            return None
        key = region_key(graph, region, wo)
        if key in self._regions:
            self.stats.hits += 1
            return self._regions[key]
        self.check_stop("a region")
        t0 = time.perf_counter()
        try:
            ms: float | None = self._price(region_graph(graph, region, wo))
        except Exception as e:  # onnxruntime, the exporter or the builder refusing the region: the fallback prices it
            self.stats.last_error = f"{type(e).__name__}: {str(e)[:200]}"
            ms = None
        self.stats.seconds += time.perf_counter() - t0
        self.stats.priced += 1
        self._regions[key] = ms
        return ms

    def _price(self, sub: Graph) -> float | None:
        from graphsub.cost.ort_kernels import calibration
        from graphsub.data import materialize
        from graphsub.frontends.onnx_export import export_graph

        sub = materialize(sub, self.seed)
        data = export_graph(sub, share=weight_bytes(sub) > FILE_BYTES).SerializeToString()
        price = self.pricer.price(data, self._feeds(sub))
        if price.unpriced:
            self.stats.last_error = f"kernels not priced alone: {', '.join(sorted(set(price.unpriced)))}"
            return None
        scale, per_kernel = calibration(self.threads)
        return scale * price.sum_ms + per_kernel * len(price.kernels)

    def _feeds(self, sub: Graph) -> dict[str, np.ndarray]:
        """Inputs for a region: a float input is a constant array (kernel times do not depend on float values; one
        array per type, shared), integers and booleans are drawn in their valid range (gather indices)."""
        from graphsub.data import random_inputs

        feeds: dict[str, np.ndarray] = {}
        drawn: dict[str, np.ndarray] | None = None
        for nid in sub.inputs:
            sig = sub.nodes[nid].sig
            t = sig.out_types[0]
            if np.dtype(t.dtype).kind == "f":
                key = (t.shape, t.dtype)
                arr = self._floats.get(key)
                if arr is None:
                    arr = self._floats[key] = np.full(t.shape, 0.5, dtype=t.dtype)
                feeds[sig.attr["name"]] = arr
            else:
                drawn = drawn if drawn is not None else random_inputs(sub, self.seed)
                feeds[sig.attr["name"]] = drawn[sig.attr["name"]]
        return feeds

    # -- whole graphs and deltas ----------------------------------------------------------
    def graph_cost(self, graph: Graph) -> Cost:
        wo = weight_only_map(graph)
        region = region_nodes(graph, list(graph.nodes), wo)
        ms = self._whole_ms(graph, region, wo)
        if ms is None:
            return self.fallback.graph_cost(graph)
        total = Cost(time_ms=ms + self.pricer.overhead_ms(), launches=float(len(region)))
        return self.limits.check(graph, total) if self.limits else total

    def _whole_ms(self, graph: Graph, region: list[int], wo: Mapping[int, bool]) -> float | None:
        """The whole graph as one region (no size limit: priced once per search)."""
        key = "whole:" + region_key(graph, region, wo)
        if key not in self._regions:
            try:
                self._regions[key] = self._price(region_graph(graph, region, wo)) if region else 0.0
            except Exception as e:  # see region_ms
                self.stats.last_error = f"{type(e).__name__}: {str(e)[:200]}"
                self._regions[key] = None
        return self._regions[key]

    def delta(self, parent: Graph, child: Graph) -> Cost:
        """``price(child's region) - price(parent's region)`` for a child made by one edit (module docstring);
        the fallback's delta when either region cannot be priced; two whole-graph costs for a child not made by an
        edit."""
        info = child.edit_info()
        if info is None:
            return self.graph_cost(child) - self.graph_cost(parent)
        self.fallback.stop = self.stop
        wo_p = weight_only_map(parent)
        wo_c, changed = weight_only_update(parent, child)
        before, after = edit_regions(parent, child, info, changed, wo_p, wo_c, hops=self.hops, chain=self.chain)
        a = self.region_ms(parent, before, wo_p)
        b = self.region_ms(child, after, wo_c) if a is not None else None
        if a is None or b is None:
            self.stats.fallbacks += 1
            return self.fallback.delta(parent, child)
        d = Cost(time_ms=b - a, launches=float(len(after) - len(before)))
        if not self.limits:
            return d
        parent_total = self._unlimited_total(parent)
        self._totals[child] = child_total = parent_total + d
        return self.limits.check(child, child_total) - self.limits.check(parent, parent_total)

    def _unlimited_total(self, graph: Graph) -> Cost:
        hit = self._totals.get(graph)
        if hit is None:
            limits, self.limits = self.limits, None
            try:
                hit = self._totals[graph] = self.graph_cost(graph)
            finally:
                self.limits = limits
        return hit


__all__ = ["CHAIN", "HOPS", "MAX_CONE", "MAX_REGION", "RESOLUTION_MS", "OrtKernelCostModel", "RegionError",
           "RegionStats", "edit_regions", "region_graph", "region_key", "region_nodes"]
