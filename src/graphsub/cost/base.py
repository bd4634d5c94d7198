"""Cost values, the :class:`CostModel` protocol, graph costs, O(change) deltas and hard limits.

A :class:`Cost` is multi-dimensional (MetaFlow §4.1): run time, FLOPs, bytes moved and kernel
launches, added up over the nodes of a graph.  A cost model prices one operator *signature*
(:class:`~graphsub.ir.node.OpSig`: op, canonical attributes, input types) -- plus, optionally,
which inputs are constants -- and :class:`SumCostModel` turns that into graph costs:

* ``graph_cost(g) = base + sum(cost of every node that is neither a leaf nor weight-only)``.
  Weight-only nodes (``concat`` of two kernels, ``enlarge``, ...) are folded before run time
  (docs/architecture.md, "weights are data, not cost"), so they are free; so are inputs and weights
  (:func:`graphsub.ir.analysis.is_free`).
* ``delta(parent, child)`` for a child made by one edit (``child.edit_info()``) re-costs only
  the added, removed and touched nodes (and, for context-dependent models, their
  neighbourhood): O(change).  Invariant: ``parent_cost + delta == graph_cost(child)`` (up to
  float rounding) whenever no limit is violated.
* :class:`Limits` are hard constraints: a graph whose peak memory
  (:func:`graphsub.ir.analysis.peak_memory`, O(graph)) or any cost dimension exceeds its limit
  costs :meth:`Cost.inf`.
* A *scalarization* (``objective``: weights per dimension) turns a cost into the number a
  search minimises (:meth:`Cost.scalar`); infinite costs scalarize to ``inf``.

>>> a = Cost(time_ms=1.0, flops=2e6, launches=1)
>>> b = a + a * 2
>>> b.time_ms, b.flops, b.launches
(3.0, 6000000.0, 3.0)
>>> b.scalar({"time_ms": 1.0, "launches": 0.01})
3.03
>>> (b + Cost.inf("peak memory")).scalar(), (b - a).scalar("flops")
(inf, 4000000.0)
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from graphsub.errors import BudgetExceeded, GraphsubError
from graphsub.ir.analysis import expand, is_free, peak_memory, weight_only_map, weight_only_update
from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig

#: Additive cost dimensions, in display order.
DIMS = ("time_ms", "flops", "bytes", "launches")

Objective = Mapping[str, float] | str


class CostModelError(GraphsubError):
    """A cost model was misconfigured or could not price an operator."""


@dataclass(frozen=True, slots=True)
class Cost:
    """A multi-dimensional, additive cost.

    Invariants: fields are floats; a cost is *infinite* (a violated hard limit, or the sum with
    one) iff any field is ``inf``; ``violation`` then says why.  Arithmetic is field-wise with
    one exception: ``inf - inf`` is ``0`` in every field (an infeasible graph that stays
    infeasible does not change cost), so a delta between two infeasible graphs is zero.
    """

    time_ms: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    launches: float = 0.0
    violation: str = ""

    def __post_init__(self) -> None:
        for d in DIMS:
            v = getattr(self, d)
            if type(v) is not float:
                object.__setattr__(self, d, float(v))

    @classmethod
    def inf(cls, reason: str = "limit exceeded") -> Cost:
        """The infinite cost of a graph that violates a hard limit."""
        i = math.inf
        return cls(i, i, i, i, reason)

    @property
    def is_inf(self) -> bool:
        return any(math.isinf(getattr(self, d)) for d in DIMS)

    def as_dict(self) -> dict[str, float]:
        return {d: getattr(self, d) for d in DIMS}

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.time_ms + other.time_ms, self.flops + other.flops, self.bytes + other.bytes,
                    self.launches + other.launches, self.violation or other.violation)

    def __radd__(self, other: Any) -> Cost:  # sum() starts from 0
        if other == 0:
            return self
        return NotImplemented

    def __neg__(self) -> Cost:
        return Cost(-self.time_ms, -self.flops, -self.bytes, -self.launches, self.violation)

    def __sub__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        if self.is_inf and other.is_inf:
            return Cost(violation=self.violation)
        return self + (-other)

    def __mul__(self, k: float) -> Cost:
        return Cost(self.time_ms * k, self.flops * k, self.bytes * k, self.launches * k, self.violation)

    __rmul__ = __mul__

    def scalar(self, objective: Objective = "time_ms") -> float:
        """Weighted sum of the dimensions (``objective``: a dimension name or weights)."""
        weights = {objective: 1.0} if isinstance(objective, str) else objective
        total = 0.0
        for dim, w in weights.items():
            if dim not in DIMS:
                raise CostModelError(f"unknown cost dimension {dim!r}; known: {', '.join(DIMS)}")
            if w:
                total += w * getattr(self, dim)
        if self.is_inf:
            return math.inf if total >= 0 or math.isnan(total) else -math.inf
        return total

    def __repr__(self) -> str:
        body = ", ".join(f"{d}={getattr(self, d):.4g}" for d in DIMS)
        return f"Cost({body}{', violation=' + repr(self.violation) if self.violation else ''})"


ZERO = Cost()


@dataclass(frozen=True)
class Limits:
    """Hard limits: a graph over any of them costs :meth:`Cost.inf`.

    ``peak_memory_bytes`` bounds :func:`~graphsub.ir.analysis.peak_memory` (folded constants +
    peak live activations); ``max_cost`` bounds additive dimensions of the graph cost (e.g.
    ``{"time_ms": 5.0}``).

    >>> Limits(peak_memory_bytes=1 << 20).active
    True
    """

    peak_memory_bytes: float | None = None
    max_cost: Mapping[str, float] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.peak_memory_bytes is not None or bool(self.max_cost)

    def check(self, graph: Graph, cost: Cost) -> Cost:
        """``cost`` unchanged if ``graph`` is within the limits, else :meth:`Cost.inf` with the reason."""
        for dim, bound in self.max_cost.items():
            if dim not in DIMS:
                raise CostModelError(f"unknown cost dimension {dim!r} in limits")
            if getattr(cost, dim) > bound:
                return Cost.inf(f"{dim} {getattr(cost, dim):.4g} > limit {bound:.4g}")
        if self.peak_memory_bytes is not None:
            peak = peak_memory(graph).peak_bytes
            if peak > self.peak_memory_bytes:
                return Cost.inf(f"peak memory {peak} B > limit {int(self.peak_memory_bytes)} B")
        return cost


# ----------------------------------------------------------------------------- constness


#: binary ops whose operands commute: priced the same in either order (:func:`canonical_operands`)
COMMUTATIVE = frozenset({"add", "mul", "sum"})


def _operand_key(sig: OpSig, consts: tuple[bool, ...] | None, i: int) -> tuple[Any, ...]:
    t = sig.in_types[i]
    return (bool(consts[i]) if consts else False, t.shape, str(t.dtype))


def canonical_operands(sig: OpSig, consts: tuple[bool, ...] | None) -> tuple[OpSig, tuple[bool, ...] | None, bool]:
    """``(sig, consts, swapped)`` with the two operands of a commutative op in canonical order (constants
    last, then by shape), so that ``add(x, y)`` and ``add(y, x)`` have one price: commuting is cost-neutral and no
    search step is spent on it.

    >>> from graphsub.ir.node import make_sig
    >>> from graphsub.ops.types import TensorType
    >>> a, b = TensorType((2, 3), "float32"), TensorType((3,), "float32")
    >>> canonical_operands(make_sig("add", {}, (a, b)), None)[0] is canonical_operands(make_sig("add", {}, (b, a)),
    ...                                                                                None)[0]
    True
    """
    if sig.op not in COMMUTATIVE or len(sig.in_types) != 2:
        return sig, consts, False
    if _operand_key(sig, consts, 1) >= _operand_key(sig, consts, 0):
        return sig, consts, False
    from graphsub.ir.node import make_sig

    return make_sig(sig.op, dict(sig.attrs), sig.in_types[::-1]), None if consts is None else consts[::-1], True


def const_mask(graph: Graph, nid: int, wo: Mapping[int, bool] | None = None) -> tuple[bool, ...]:
    """Per input slot of node ``nid``: is that input a (folded) constant?"""
    wo = wo if wo is not None else weight_only_map(graph)
    return tuple(wo[r.node] for r in graph.nodes[nid].inputs)


# ----------------------------------------------------------------------------- the protocol


@runtime_checkable
class CostModel(Protocol):
    """What a search needs from a cost model.

    ``node_cost(sig, consts)`` prices one operator signature (``consts``: per input slot,
    whether that input is a constant, or None for "unknown"); ``graph_cost`` sums it over the
    run-time nodes; ``delta(parent, child)`` is ``graph_cost(child) - graph_cost(parent)``
    computed in O(change) for a child made by an edit of ``parent``; ``scalar`` applies the
    model's ``objective``.
    """

    name: str
    objective: Objective
    limits: Limits | None

    def node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None = None) -> Cost: ...

    def graph_cost(self, graph: Graph) -> Cost: ...

    def delta(self, parent: Graph, child: Graph) -> Cost: ...

    def scalar(self, cost: Cost) -> float: ...


@dataclass(frozen=True)
class OpCostRow:
    """One line of :meth:`SumCostModel.breakdown`: nodes sharing a signature and constness."""

    sig: OpSig
    consts: tuple[bool, ...]
    count: int
    cost: Cost  # total over the ``count`` nodes

    @property
    def label(self) -> str:
        return describe_sig(self.sig)


def describe_sig(sig: OpSig, width: int = 100) -> str:
    """A short readable form ``op[attrs](in types)`` of a signature: attributes at their schema
    default are left out, tuples are written ``1,1``, long values clipped.

    >>> from graphsub.ir.node import make_sig
    >>> from graphsub.ops.types import TensorType
    >>> describe_sig(make_sig("conv2d", {"pads": "SAME", "act": "relu"},
    ...                       (TensorType((1, 8, 14, 14)), TensorType((16, 8, 3, 3)))))
    'conv2d[act=relu pads=1,1,1,1](f32[1,8,14,14], f32[16,8,3,3])'
    """
    skip = {"onnx_attrs", "out_types", "input_slots", "output_slots", "num_onnx_inputs", "num_onnx_outputs",
            "reason", "captures", "embedded"}
    defaults = {a.name: a.default for a in sig.opdef.attrs}
    parts = []
    for k, v in sig.attrs:
        if k in skip or defaults.get(k, object()) == v:
            continue
        text = ",".join(map(str, v)) if isinstance(v, tuple) else str(v)
        parts.append(f"{k}={text if len(text) <= 24 else text[:21] + '...'}")
    ins = ", ".join(str(t) for t in sig.in_types)
    s = f"{sig.op}[{' '.join(parts)}]({ins})" if parts else f"{sig.op}({ins})"
    return s if len(s) <= width else s[: width - 3] + "..."


class SumCostModel:
    """Base class: graph cost = ``base_cost()`` + sum of run-time node costs.

    Subclasses implement :meth:`node_cost`.  A model whose node costs depend on the
    neighbourhood (fusion with a producer, say) overrides :meth:`cost_in` and sets
    ``context_radius`` to the number of hops it looks at (a node's cost may depend on the nodes
    within that distance and on their consumer lists); :meth:`delta` then re-costs the changed
    nodes' neighbourhood up to ``context_radius + 1`` hops (O(change * degree^(r+1))).
    """

    name = "sum"
    context_radius = 0
    #: polled by models that measure, before each measurement (a search sets it to its budget check for its
    #: duration): when it returns True they raise BudgetExceeded instead of measuring (:meth:`check_stop`)
    stop: Callable[[], bool] | None = None
    #: the smallest gain of the scalar cost this model resolves: a model that measures sets it to its timer's
    #: resolution, and a steepest descent (:mod:`graphsub.search.greedy`) takes only steps that gain more, so that
    #: a rewrite which changes nothing onnxruntime runs (an operand swap) is not taken on a timing's rounding
    resolution: float = 0.0

    def __init__(self, objective: Objective = "time_ms", limits: Limits | None = None) -> None:
        self.objective: Objective = objective
        self.limits: Limits | None = limits if limits is not None and limits.active else None
        self._memo: dict[tuple[OpSig, tuple[bool, ...] | None], Cost] = {}
        # structurally equal graphs have equal costs, so a weak structural key is sound
        self._totals: weakref.WeakKeyDictionary[Graph, Cost] = weakref.WeakKeyDictionary()

    # -- per node ---------------------------------------------------------------------
    def node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None = None) -> Cost:
        sig, consts, _ = canonical_operands(sig, consts)
        key = (sig, consts)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._node_cost(sig, consts)
        return hit

    def _node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None) -> Cost:
        raise NotImplementedError

    def base_cost(self) -> Cost:
        """A per-graph constant (e.g. the cost of one session call); not part of deltas."""
        return ZERO

    def cost_in(self, graph: Graph, nid: int, wo: Mapping[int, bool]) -> Cost:
        """Cost of node ``nid`` inside ``graph`` (0 for free nodes)."""
        if is_free(graph, nid, wo):
            return ZERO
        return self.node_cost(graph.nodes[nid].sig, const_mask(graph, nid, wo))

    def prepare(self, graph: Graph) -> None:
        """Hook run before costing a whole graph (measured models fill their cache here)."""

    def check_stop(self, what: str) -> None:
        """Raise BudgetExceeded when :attr:`stop` says so (models call it before measuring ``what``)."""
        if self.stop is not None and self.stop():
            raise BudgetExceeded(f"{self.name}: not measuring {what}: the budget ran out")

    # -- whole graphs -----------------------------------------------------------------
    def node_costs(self, graph: Graph) -> dict[int, Cost]:
        """Cost of every run-time node, keyed by id (topological order)."""
        self.prepare(graph)
        wo = weight_only_map(graph)
        return {nid: self.cost_in(graph, nid, wo) for nid in graph.topo_order() if not is_free(graph, nid, wo)}

    def graph_cost(self, graph: Graph) -> Cost:
        total = sum(self.node_costs(graph).values(), self.base_cost())
        return self.limits.check(graph, total) if self.limits else total

    def delta(self, parent: Graph, child: Graph) -> Cost:
        """``graph_cost(child) - graph_cost(parent)``, in O(change) for a child made by an edit.

        Falls back to two full graph costs when ``child`` was not made by an edit of a graph.
        With limits, the result is ``limited(child) - limited(parent)``: ``inf`` when the child
        violates a limit the parent met, ``-inf`` for the reverse, 0 when both violate; the limit
        checks themselves are O(graph) (peak memory), and the parent's total is computed once.
        """
        info = child.edit_info()
        if info is None:
            return self.graph_cost(child) - self.graph_cost(parent)
        added, removed, touched = info
        wo_p = weight_only_map(parent)
        wo_c, changed = weight_only_update(parent, child)
        seeds: set[int] = set(added) | set(removed) | set(touched) | changed
        for nid in changed:
            seeds.update(c for c, _ in child.users(nid))
        region = self.delta_region(parent, child, seeds)
        after = [n for n in region if n in child.nodes]
        before = [n for n in region if n in parent.nodes]
        d = sum((self.cost_in(child, n, wo_c) for n in after), ZERO) - sum(
            (self.cost_in(parent, n, wo_p) for n in before), ZERO)
        if not self.limits:
            return d
        parent_total = self._unlimited_total(parent)
        child_total = parent_total + d
        self._totals[child] = child_total
        return self.limits.check(child, child_total) - self.limits.check(parent, parent_total)

    def delta_region(self, parent: Graph, child: Graph, seeds: set[int]) -> set[int]:
        """Node ids whose cost may differ between ``parent`` and ``child`` (``seeds``: added, removed,
        touched and re-typed nodes).  Default: ``context_radius + 1`` hops around the seeds."""
        return expand(parent, child, seeds, self.context_radius + 1) if self.context_radius else seeds

    def _unlimited_total(self, graph: Graph) -> Cost:
        hit = self._totals.get(graph)
        if hit is None:
            hit = self._totals[graph] = sum(self.node_costs(graph).values(), self.base_cost())
        return hit

    def scalar(self, cost: Cost) -> float:
        return cost.scalar(self.objective)

    def breakdown(self, graph: Graph) -> list[OpCostRow]:
        """Per (signature, constness) totals, most expensive first (by the objective)."""
        self.prepare(graph)
        wo = weight_only_map(graph)
        rows: dict[tuple[OpSig, tuple[bool, ...]], tuple[int, Cost]] = {}
        for nid in graph.topo_order():
            if is_free(graph, nid, wo):
                continue
            key = (graph.nodes[nid].sig, const_mask(graph, nid, wo))
            n, c = rows.get(key, (0, ZERO))
            rows[key] = (n + 1, c + self.cost_in(graph, nid, wo))
        out = [OpCostRow(sig, consts, n, c) for (sig, consts), (n, c) in rows.items()]
        out.sort(key=lambda r: (-self.scalar(r.cost), r.sig.op, r.sig.digest))
        return out


__all__ = [
    "COMMUTATIVE",
    "DIMS",
    "ZERO",
    "Cost",
    "CostModel",
    "CostModelError",
    "Limits",
    "OpCostRow",
    "SumCostModel",
    "canonical_operands",
    "const_mask",
    "describe_sig",
]
