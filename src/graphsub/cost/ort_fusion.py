"""Fusion-aware measured model for onnxruntime with ``ORT_ENABLE_ALL``.

With all graph optimizations on, onnxruntime fuses a convolution or matrix product with what
follows it: ``Conv+BatchNormalization`` (folded), ``Conv+Add(constant)`` (bias),
``Conv+Relu/Sigmoid/Tanh/LeakyRelu/Clip/HardSigmoid`` (``FusedConv``), a residual
``Conv+Add+Relu`` (the NCHWc ``Sum`` input), ``MatMul+Add`` (``Gemm``) and ``Gemm+activation``.
A sum of one-node timings cannot see this: it prices the ``relu`` after a ``conv2d`` as a
separate kernel, and a ``batchnorm`` that onnxruntime folds away as a full pass over memory.

:class:`FusedMeasuredCostModel` therefore times *fusion groups*: each anchor (``conv2d``,
``matmul``, ``gemm`` without a fused activation) together with its chain of sole consumers
that onnxruntime may fuse (see :func:`fusion_group`), as one small ONNX model under
``ORT_ENABLE_ALL``; onnxruntime decides what actually fuses, and the group's time is charged to
the anchor while the other members cost 0.  Ops outside groups are timed alone (also under
``ORT_ENABLE_ALL``).  Group timings share the SQLite cache (digest ``g<hex>``).

Invariants: every run-time node belongs to exactly one group (possibly a singleton); a group
is a chain ``anchor -> m1 -> ... `` where each link is the previous node's only consumer and the
previous node is not a graph output, with at most :data:`MAX_CHAIN` nodes.  Costs depend on
nodes up to ``MAX_CHAIN`` hops away; :meth:`FusedMeasuredCostModel.delta_region` re-costs exactly the
groups an edit can change.

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> x = b.input("x", (1, 8, 6, 6))
>>> y = b.relu(b.batchnorm(b.conv2d(x, b.weight("w", (8, 8, 3, 3)), pads="SAME"),
...            *(b.weight(n, (8,)) for n in ("s", "o", "m", "v"))))
>>> g = b.build(y)
>>> conv = next(iter(g.ops_of("conv2d")))
>>> [g.nodes[n].op for n in fusion_group(g, conv)]
['conv2d', 'batchnorm', 'relu']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from graphsub.cost.analytic import analytic_cost
from graphsub.cost.base import ZERO, Cost, Limits, Objective, canonical_operands, const_mask, describe_sig
from graphsub.cost.measured import MeasuredCostModel, OpTimeCache
from graphsub.ir.analysis import expand, is_free, weight_only_map
from graphsub.ir.builder import Builder, Value
from graphsub.ir.graph import Graph
from graphsub.ops.types import stable_digest

ANCHORS = frozenset({"conv2d", "matmul", "gemm"})
ACTIVATIONS = frozenset({"relu", "sigmoid", "tanh", "leakyrelu", "clip", "hardsigmoid"})
MAX_CHAIN = 4


def fusion_group(graph: Graph, anchor: int, wo: Mapping[int, bool] | None = None) -> tuple[int, ...]:
    """The chain onnxruntime may fuse starting at node ``anchor`` (``(anchor,)`` if none)."""
    wo = wo if wo is not None else weight_only_map(graph)
    node = graph.nodes[anchor]
    op = node.sig.op
    if op not in ANCHORS or node.sig.attr.get("act", "none") != "none" or is_free(graph, anchor, wo):
        return (anchor,)
    group = [anchor]
    cur = anchor
    seen_sum = seen_bias = False
    while len(group) < MAX_CHAIN:
        users = graph.users(cur)
        if len(users) != 1 or graph.is_output(cur) or len(graph.nodes[cur].sig.out_types) != 1:
            break
        cid, slot = users[0]
        cnode = graph.nodes[cid]
        cop = cnode.sig.op
        others = [r for i, r in enumerate(cnode.inputs) if i != slot]
        same_type = cnode.sig.out_types[0] == graph.nodes[cur].sig.out_types[0]
        if cop in ACTIVATIONS and slot == 0:
            group.append(cid)
            break
        folded_bn = (cop == "batchnorm" and slot == 0 and op == "conv2d" and len(group) == 1
                     and all(wo[r.node] for r in others))
        bias = cop in ("add", "mul") and same_type and len(others) == 1 and wo[others[0].node] and not seen_bias
        # a residual add joins one chain only: through slot 0 when both operands could chain
        residual = (cop == "add" and same_type and op == "conv2d" and not seen_sum and len(others) == 1
                    and (slot == 0 or not _may_chain(graph, others[0].node, wo)))
        if not (folded_bn or bias or residual):
            break
        seen_bias |= bias
        seen_sum |= residual and not bias
        group.append(cid)
        cur = cid
    return tuple(group)


def _sole_consumed(graph: Graph, nid: int, wo: Mapping[int, bool]) -> bool:
    """Whether ``nid`` is a run-time node whose only use is one consumer slot (so a chain may pass)."""
    return (not is_free(graph, nid, wo) and len(graph.users(nid)) == 1 and not graph.is_output(nid)
            and len(graph.nodes[nid].sig.out_types) == 1)


def _may_chain(graph: Graph, nid: int, wo: Mapping[int, bool]) -> bool:
    """Whether ``nid`` could end a fusion chain (decided locally, so costs stay local)."""
    node = graph.nodes[nid]
    op = node.sig.op
    if not _sole_consumed(graph, nid, wo):
        return False
    return (op in ANCHORS and node.sig.attr.get("act", "none") == "none") or op in ("batchnorm", "add", "mul")


def group_anchor(graph: Graph, nid: int, wo: Mapping[int, bool]) -> int | None:
    """The anchor of the (non-singleton) fusion group holding ``nid``, or None."""
    stack = [(nid, 0)]
    while stack:
        cur, depth = stack.pop()
        node = graph.nodes[cur]
        if node.sig.op in ANCHORS:
            group = fusion_group(graph, cur, wo)
            if len(group) > 1 and nid in group:
                return cur
        if depth < MAX_CHAIN - 1:
            stack.extend((r.node, depth + 1) for r in node.inputs
                         if not wo[r.node] and graph.users(r.node) == ((cur, node.inputs.index(r)),))
    return None


def group_graph(graph: Graph, group: Sequence[int], wo: Mapping[int, bool]) -> Graph:
    """The fusion group alone: chain edges kept, other inputs become weights (constants) or inputs."""
    b = Builder("fusion_group")
    prev: Value | None = None
    k = 0
    for i, nid in enumerate(group):
        node = graph.nodes[nid]
        ins: list[Value] = []
        for r in node.inputs:
            if i > 0 and r.node == group[i - 1] and prev is not None:
                ins.append(prev)
                continue
            t = graph.type_of(r)
            ins.append(b.weight(f"c{k}", t.shape, dtype=t.dtype) if wo[r.node] else b.input(f"x{k}", t.shape, t.dtype))
            k += 1
        outs = b.op_multi(node.sig.op, *ins, **dict(node.sig.attrs))
        prev = outs[0]
    assert prev is not None
    return b.build(prev)


def group_key(graph: Graph, group: Sequence[int], wo: Mapping[int, bool]) -> tuple[str, str]:
    """Stable cache key of a fusion group: digest of (sig digest, chain slot) per member, and masks."""
    parts = []
    masks = []
    for i, nid in enumerate(group):
        node = graph.nodes[nid]
        slot = -1 if i == 0 else next(s for s, r in enumerate(node.inputs) if r.node == group[i - 1])
        sig, mask, swapped = canonical_operands(node.sig, const_mask(graph, nid, wo))  # commuting is cost-neutral
        assert mask is not None
        if swapped and slot >= 0:
            slot = 1 - slot
        parts.append((sig.digest, slot))
        masks.append("".join("c" if c else "x" for c in mask))
    return f"g{stable_digest('fusion-group', tuple(parts)) & 0xFFFFFFFFFFFFFFFF:016x}", "|".join(masks)


class FusedMeasuredCostModel(MeasuredCostModel):
    """Measured model for ``ORT_ENABLE_ALL`` that times fusion groups as units (module docstring)."""

    context_radius = MAX_CHAIN

    def delta_region(self, parent: Graph, child: Graph, seeds: set[int]) -> set[int]:
        """Seeds, their 2-hop neighbourhood, and every fusion group (in either graph) passing
        through it: a group changes only if one of its nodes, or a producer/consumer of one,
        changed (O(change * degree^2 * MAX_CHAIN))."""
        near = expand(parent, child, seeds, 2)
        region = set(near)
        for g in (parent, child):
            wo = weight_only_map(g)
            for n in near:
                if n not in g.nodes:
                    continue
                stack, seen = [(n, 0)], {n}
                while stack:
                    cur, depth = stack.pop()
                    node = g.nodes[cur]
                    if node.sig.op in ANCHORS and not is_free(g, cur, wo):
                        region.update(fusion_group(g, cur, wo))
                    if depth < MAX_CHAIN - 1:
                        for r in node.inputs:
                            if r.node not in seen and not is_free(g, r.node, wo):
                                seen.add(r.node)
                                stack.append((r.node, depth + 1))
        return region

    def __init__(self, *, cache: OpTimeCache | str | os.PathLike[str] | None = None, threads: int | None = None,
                 optimization: str = "all", budget_ms: float = 60.0, warmup: int = 2, min_repeats: int = 5,
                 max_repeats: int = 200, seed: int = 0, progress: bool = True, objective: Objective = "time_ms",
                 limits: Limits | None = None, gate: Callable[[], object] | None = None,
                 clock: str = "auto", statistic: str = "median") -> None:
        super().__init__(cache=cache, threads=threads, optimization=optimization, budget_ms=budget_ms,
                         warmup=warmup, min_repeats=min_repeats, max_repeats=max_repeats, seed=seed,
                         progress=progress, objective=objective, limits=limits, gate=gate, clock=clock,
                         statistic=statistic)
        self.name = f"fused:{optimization}" + ("[min]" if statistic == "min" else "")
        self._groups: dict[tuple[str, str], Cost] = {}

    def cost_in(self, graph: Graph, nid: int, wo: Mapping[int, bool]) -> Cost:
        if is_free(graph, nid, wo):
            return ZERO
        anchor = group_anchor(graph, nid, wo)
        if anchor is None:
            node = graph.nodes[nid]
            if node.sig.op not in ANCHORS or node.sig.attr.get("act", "none") == "none":
                return super().cost_in(graph, nid, wo)
            # a conv/matmul/gemm with a fused activation is timed the way the same pair is timed as
            # a group (one small model, constants as weights): a fused and an unfused spelling of one
            # computation must cost the same, or the search chases the measurement difference
            anchor = nid
        elif anchor != nid:
            return ZERO
        group = fusion_group(graph, anchor, wo)
        key = group_key(graph, group, wo)
        hit = self._groups.get(key)
        if hit is None:
            timing = self._times.get(key)
            if timing is None:
                timing = self.cache.get(self.ctx, *key)
                if timing is None:
                    self.check_stop(self._label(graph, group))
                    self.stats.misses += 1
                    timing = self._measure_and_store(key, self._label(graph, group),
                                                     lambda: group_graph(graph, group, wo))
                else:
                    self.stats.db_hits += 1
                self._times[key] = timing
            else:
                self.stats.memory_hits += 1
            flops = sum(analytic_cost(graph.nodes[n].sig).flops for n in group)
            a = analytic_cost(graph.nodes[anchor].sig)
            ms = max(timing.stat(self.statistic) - self.overhead_ms(), 0.0)
            hit = Cost(time_ms=ms, flops=flops, bytes=a.bytes, launches=1.0)
            self._groups[key] = hit
        if self.is_cold(graph):
            const_bytes = sum(graph.type_of(r).nbytes for n in group for r in graph.nodes[n].inputs if wo[r.node])
            floor = self.cold_weight_ms(const_bytes)
            if floor > hit.time_ms:
                return Cost(floor, hit.flops, hit.bytes, hit.launches)
        return hit

    @staticmethod
    def _label(graph: Graph, group: Sequence[int]) -> str:
        return " -> ".join(describe_sig(graph.nodes[n].sig, 160) for n in group)

    def _add_items(self, graph: Graph, nid: int, wo: Mapping[int, bool],
                   out: dict[tuple[str, str], tuple[str, Any]]) -> None:
        """A node outside any group is timed alone; a group is timed once, at its anchor."""
        anchor = group_anchor(graph, nid, wo)
        if anchor is None:
            super()._add_items(graph, nid, wo, out)
        elif anchor == nid:
            group = fusion_group(graph, anchor, wo)
            key = group_key(graph, group, wo)
            if key not in out:
                out[key] = (self._label(graph, group), lambda g=graph, grp=group: group_graph(g, grp, wo))


__all__ = ["ACTIVATIONS", "ANCHORS", "MAX_CHAIN", "FusedMeasuredCostModel", "fusion_group", "group_anchor",
           "group_graph", "group_key"]
