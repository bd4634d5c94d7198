"""Applying a match: build the target in a copy-on-write edit and redirect the source outputs.

:func:`apply` returns a :class:`Substitution`: the new graph (sharing every untouched node
with the old one), the ids of the nodes it added and removed -- which is all a cost model
needs for the incremental delta ``cost(new) = cost(old) - cost(removed) + cost(added)``
(:meth:`Substitution.cost_delta`).

Targets read like sources: the values a target sees (``m.x``, ``m["conv"]``) and the values it
builds are :class:`TValue` -- :class:`~graphsub.ir.node.Ref` s that know their builder -- so
``m.x * m.z + m.y`` builds ``add(mul(x, z), y)`` as ``t.add(t.mul(m.x, m.z), m.y)`` would
(:func:`~graphsub.rules.rule.make_rule` hands targets a :class:`TargetView`).

>>> from graphsub.ir import Builder
>>> from graphsub.rules.match import find_matches
>>> from graphsub.rules.rule import make_rule
>>> factor = make_rule("factor", lambda p: {"y": p.var("x") * (z := p.var("z")) + p.var("y") * z},
...                    lambda t, m: {"y": (m.x + m.y) * m.z})
>>> b = Builder("g")
>>> x, y, z = b.input("x", (2, 3)), b.input("y", (2, 3)), b.input("z", (2, 3))
>>> g = b.build(b.add(b.mul(x, z), b.mul(y, z)))
>>> sorted(apply(g, find_matches(g, factor)[0]).graph.op_histogram().items())
[('add', 1), ('mul', 1)]

Weights: targets compute new weights with ordinary ops on weight values (``concat`` of two
kernels, ``enlarge``, ...), so a rule stays exact even when weights have no data.  Such
weight-only subgraphs are free at run time: :func:`fold_weights` evaluates those whose leaves
have data into new constant weights (before export), and cost models skip weight-only nodes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.errors import GraphsubError, RuleError
from graphsub.ir.analysis import is_weight_only
from graphsub.ir.builder import Arithmetic
from graphsub.ir.edit import GraphEdit
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, Ref
from graphsub.ops.registry import REGISTRY
from graphsub.ops.types import TensorType, array_digest, dtype_of
from graphsub.rules.match import Match, MatchView


class TValue(Arithmetic, Ref):
    """A value built or bound in a target: a :class:`~graphsub.ir.node.Ref` (it compares, hashes and
    unpacks as one) that knows its :class:`TargetBuilder`, so ``a + b``, ``a - b``, ``a * b``,
    ``a / b`` and ``a @ b`` build ``add`` / ``sub`` / ``mul`` / ``div`` / ``matmul`` nodes (default
    attributes), as :class:`~graphsub.rules.pattern.PValue` does in sources.

    Invariant: a TValue never reaches a graph -- :class:`~graphsub.ir.edit.GraphEdit` stores plain
    Refs (``Ref(*value)``)."""

    builder: TargetBuilder

    def __new__(cls, builder: TargetBuilder, ref: Ref) -> TValue:
        self = tuple.__new__(cls, (ref[0], ref[1]))
        self.builder = builder
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles are plain Refs
        return Ref, (self.node, self.index)


class TargetBuilder:
    """Builds target nodes into a :class:`~graphsub.ir.edit.GraphEdit`; op methods like the builder.

    Every op method returns :class:`TValue` s (a tuple of them for multi-output ops)."""

    def __init__(self, edit: GraphEdit, rule_name: str):
        self.edit = edit
        self.rule_name = rule_name

    def view(self, m: MatchView) -> TargetView:
        """``m`` as targets see it: bound values are :class:`TValue` s of this builder."""
        return m if isinstance(m, TargetView) and m.builder is self else TargetView(m, self)

    def type(self, ref: Ref) -> TensorType:
        return self.edit.type_of(ref)

    def shape(self, ref: Ref) -> tuple[int, ...]:
        return self.edit.type_of(ref).shape

    def op_multi(self, op: str, *inputs: Ref, **attrs: Any) -> tuple[TValue, ...]:
        return tuple(TValue(self, r) for r in self.edit.op_multi(op, inputs, attrs))

    def op1(self, op: str, *inputs: Ref, **attrs: Any) -> TValue:
        """A single-output op."""
        return self.op_multi(op, *inputs, **attrs)[0]

    def op(self, op: str, *inputs: Ref, **attrs: Any) -> Any:
        outs = self.op_multi(op, *inputs, **attrs)
        return outs[0] if len(outs) == 1 else outs

    def const(self, value: Any, dtype: str = "float32") -> TValue:
        """A new constant weight holding ``value`` (named from its content)."""
        return TValue(self, self._const_ref(value, dtype))

    def _const_ref(self, value: Any, dtype: str) -> Ref:
        arr = np.asarray(value, dtype=dtype)
        name = f"c{array_digest(arr) & 0xFFFFFFFFFFFF:012x}"
        existing = self.edit.find_leaf(name)  # in the graph, or the same constant twice in one target
        return Ref(existing, 0) if existing is not None else self.edit.weight(name, arr)

    def copy(self, node: Node, *inputs: Ref) -> Any:
        """A node with the same op and attributes as ``node`` on new inputs (wildcards)."""
        return self.op(node.sig.op, *inputs, **dict(node.sig.attrs))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in REGISTRY and not REGISTRY[name].leaf:
            def call(*inputs: Ref, **attrs: Any) -> Any:
                return self.op(name, *inputs, **attrs)

            return call
        raise AttributeError(f"TargetBuilder has no attribute or op {name!r}")


class TargetView(MatchView):
    """A :class:`~graphsub.rules.match.MatchView` whose bound values are :class:`TValue` s of
    ``builder`` (what targets made with :func:`~graphsub.rules.rule.make_rule` receive)."""

    def __init__(self, view: MatchView, builder: TargetBuilder):
        super().__init__(view.graph, view.pattern, view._nodes, view._vars)
        self.builder = builder

    def __getitem__(self, name: str) -> TValue:
        return TValue(self.builder, super().__getitem__(name))

    def __getattr__(self, name: str) -> TValue:
        return TValue(self.builder, super().__getattr__(name))


@dataclass(frozen=True)
class Substitution:
    """The result of applying one match."""

    rule: str
    match: Match
    graph: Graph
    parent: Graph
    added: tuple[int, ...]
    removed: tuple[int, ...]

    def cost_delta(self, node_cost: Callable[[Node], float]) -> float:
        """``sum(cost(added)) - sum(cost(removed))`` for a per-node cost function."""
        return sum(node_cost(self.graph.nodes[n]) for n in self.added) - sum(
            node_cost(self.parent.nodes[n]) for n in self.removed)


def apply(graph: Graph, match: Match) -> Substitution:
    """Apply ``match`` (found in ``graph``) and return the substitution."""
    rule = match.rule
    view = MatchView(graph, rule.source, dict(match.nodes), dict(match.vars))
    edit = graph.edit()
    tb = TargetBuilder(edit, rule.name)
    try:
        produced = rule.target(tb, view)
    except GraphsubError as e:
        raise RuleError(f"rule {rule.name}: target construction failed at {match}: {e}") from e
    names = set(rule.source.output_names)
    if set(produced) != names:
        raise RuleError(f"rule {rule.name}: target outputs {sorted(produced)} != source outputs {sorted(names)}")
    for name, src in rule.source.outputs:
        old = Ref(view._nodes[str(src.node)], src.index)
        new = Ref(*produced[name])
        if new != old:
            edit.replace(old, new)
    g2 = edit.commit()
    info = g2.edit_info()
    assert info is not None
    added, removed, _ = info
    return Substitution(rule.name, match, g2, graph, added, removed)


def weight_only_nodes(graph: Graph) -> list[int]:
    """Non-leaf nodes whose value depends on weights/constants only (free at run time)."""
    return [n for n in graph.topo_order()
            if not graph.nodes[n].sig.opdef.leaf and is_weight_only(graph, n)]


#: ONNX ops whose weight-only outputs are never folded, nor anything computed from them: a ``DequantizeLinear`` of a
#: constant is how a QDQ model states a quantized weight, which onnxruntime runs fused with its consumer as a quantized
#: kernel (its own constant folding leaves them too); folded, the model would compute in float, with other values
UNFOLDED = frozenset({"DequantizeLinear"})


def fold_weights(graph: Graph, *, only_with_data: bool = True) -> Graph:
    """Replace every weight-only value consumed by a run-time node (or a graph output) by a
    constant weight holding its value, computed with the reference implementations (all in one run).

    Values whose leaves lack data are left as they are (``only_with_data``), and so are the outputs of the
    :data:`UNFOLDED` ops and what is computed from them (a quantized weight stays quantized).  The result is
    numerically identical; its structure is what an exporter should write.
    """
    from graphsub.execute import run

    kept: set[int] = set()  # weight-only nodes that stay: an UNFOLDED op or something computed from one

    def foldable(ref: Ref) -> bool:
        return not graph.nodes[ref.node].sig.opdef.leaf and ref.node not in kept and is_weight_only(graph, ref)

    targets: list[Ref] = []
    for nid in graph.topo_order():
        node = graph.nodes[nid]
        if node.sig.opdef.leaf:
            continue
        if (node.sig.op == "opaque" and node.sig.attr.get("op_type") in UNFOLDED) or \
                any(r.node in kept for r in node.inputs):
            kept.add(nid)
        elif is_weight_only(graph, nid):
            continue
        targets.extend(r for r in node.inputs if foldable(r))
    targets.extend(r for r in graph.outputs if foldable(r))
    targets = list(dict.fromkeys(targets))
    if not targets:
        return graph
    values = _evaluate(graph, targets, only_with_data, run)
    if not values:
        return graph
    edit = graph.edit()
    for ref, value in values.items():
        digest = array_digest(value)
        arr = _one_copy(digest, value)
        name = f"folded_{digest & 0xFFFFFFFFFFFF:012x}"
        existing = edit.find_leaf(name)
        new = Ref(existing, 0) if existing is not None else edit.weight(name, arr)
        edit.replace(ref, new)
    return edit.commit()


#: the folded values still held by some graph, by digest: the candidates of one model fold the same values (a
#: decoder's merged projections: gigabytes on a 1 B model), and they share one array each
_FOLDED: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def _one_copy(digest: int, value: np.ndarray) -> np.ndarray:
    """``value``, or the equal array folded before and still held (:data:`_FOLDED`)."""
    known = _FOLDED.get(digest)
    if known is not None and known.dtype == value.dtype and known.shape == value.shape and \
            np.array_equal(known, value):
        return known
    _FOLDED[digest] = value
    return value


def _evaluate(graph: Graph, refs: list[Ref], only_with_data: bool, run: Any) -> dict[Ref, np.ndarray]:
    """The values of ``refs`` (weight-only), all in one run of the reference executor; with ``only_with_data``
    those that depend on a weight without data are left out. O(graph): a graph with thousands of folded values
    (a TorchScript export's per-layer constants) is evaluated once, not once per value."""
    if only_with_data:
        missing: set[int] = set()
        for nid in graph.topo_order():
            node = graph.nodes[nid]
            if (node.sig.op == "weight" and node.sig.attr["name"] not in graph.params) or \
                    any(r.node in missing for r in node.inputs):
                missing.add(nid)
        refs = [r for r in refs if r.node not in missing]
    if not refs:
        return {}
    names = [f"v{i}" for i in range(len(refs))]
    sub = Graph.from_arena(dict(graph.nodes), (), refs, names, graph.params)
    values = run(sub, {})
    out: dict[Ref, np.ndarray] = {}
    for ref, name in zip(refs, names, strict=True):
        arr = np.asarray(values[name])
        if dtype_of(arr) != graph.type_of(ref).dtype:
            raise RuleError(f"folding {ref!r}: dtype changed")
        out[ref] = arr
    return out


__all__ = ["Substitution", "TValue", "TargetBuilder", "TargetView", "apply", "fold_weights", "weight_only_nodes"]
