"""A rewritten graph written back over the ONNX model it was imported from: what the rewrites left alone is written
as the file has it, so that it keeps computing its sizes at run time (:func:`splice`).

graphsub's IR has static shapes: the import folds a file's shape arithmetic (``Shape -> Gather -> Concat ->
Reshape``, the causal mask a decoder builds from its lengths) into constants at the imported sizes, and
:func:`graphsub.frontends.onnx_io.to_onnx` writes those constants -- a model that runs at those sizes only.  The
import remembers where each IR node came from (:class:`Origin`, :func:`remember`); :func:`splice` writes a graph
derived from that import (node ids are kept by every edit) as follows:

* an op node the rewrites left as imported (same id, same signature; its inputs may have been rewired) is the file's
  own node, its inputs renamed to the values that feed it now: a Reshape reads its target from the file's shape
  arithmetic again;
* a weight the import folded from the file's nodes (shape arithmetic, a mask built from a length) is computed by
  those nodes again, as the file computes it;
* the file's nodes that such a node or weight reads and that the import folded are written too (never a node the
  rewrites removed: a value only such a node computes makes the node that reads it fall back to the next case);
* every other node (what the rewrites made) is exported as :func:`~graphsub.frontends.onnx_export.export_graph`
  exports it.

The result computes what the graph computes at the imported sizes; whether it does at others is for the caller to
check (:class:`graphsub.symbolic.SizeCheck`: ``optimize`` checks every candidate before it is timed).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphsub.frontends.onnx_export import (
    DEFAULT_OPSET,
    ExportCtx,
    _default_opset,
    _export_op,
    _Leaves,
    _op_output_names,
    _utf8,
    make_model,
    outer_reads,
    shares,
    value_info,
    weight_tensor,
)
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref

if TYPE_CHECKING:
    from graphsub.frontends.dims import Interface

ORIGIN_KEY = "onnx_origin"
#: initializers at most this many elements are kept by :class:`Origin` (shape arithmetic reads small ones)
SMALL = 4096
_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Origin:
    """What the import of an ONNX model keeps to write untouched parts back (:func:`splice`).

    ``nodes``: the imported model's nodes (after inlining and opset conversion), topologically ordered, in a graph
    of their own (the file's weights are not kept); ``imported``: IR node id -> (index in ``nodes``, the ONNX input
    slot of each IR input, the ONNX output slot of each IR output); ``producer``: value name -> index of the node
    computing it; ``small``: the file's small initializers (by name); ``initializers``: every initializer's name;
    ``opsets``: the file's opset imports."""

    nodes: onnx.GraphProto
    imported: Mapping[int, tuple[int, tuple[int, ...], tuple[int, ...]]]
    producer: Mapping[str, int]
    small: Mapping[str, onnx.TensorProto]
    initializers: frozenset[str]
    opsets: tuple[tuple[str, int], ...]
    free: bool = False  # whether the import left symbolic input dims free (the written model keeps them)

    @classmethod
    def of(cls, model: onnx.ModelProto, order: Sequence[onnx.NodeProto],
           imported: Mapping[int, tuple[onnx.NodeProto, tuple[int, ...], tuple[int, ...]]],
           free: bool = False) -> Origin:
        """The origin of an import of ``model`` whose nodes were ``order`` and whose IR nodes came from
        ``imported`` (IR node id -> (ONNX node, input slots, output slots)); ``free``: symbolic dims left free."""
        index = {id(n): k for k, n in enumerate(order)}
        nodes = onnx.GraphProto()
        nodes.node.extend(order)
        producer = {o: k for k, n in enumerate(order) for o in n.output if o}
        small = {}
        for t in model.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL and math.prod(t.dims) <= SMALL:
                kept = onnx.TensorProto()
                kept.CopyFrom(t)
                small[t.name] = kept
        return cls(nodes, {nid: (index[id(n)], ins, outs) for nid, (n, ins, outs) in imported.items()},
                   producer, small, frozenset(t.name for t in model.graph.initializer),
                   tuple((o.domain, o.version) for o in model.opset_import), free)

    @property
    def ir_nodes(self) -> frozenset[int]:
        """The indices of the nodes that became IR nodes (the others were folded, or are Constants)."""
        return frozenset(k for k, _, _ in self.imported.values())

    @property
    def opset(self) -> int:
        return next((v for d, v in self.opsets if d in _DEFAULT_DOMAINS), DEFAULT_OPSET)


def remember(graph: Graph, origin: Origin) -> None:
    """Attach ``origin`` to ``graph`` (an import); graphs derived from it by edits keep its node ids."""
    graph._cache[ORIGIN_KEY] = origin


def origin_of(graph: Graph) -> Origin | None:
    """The :class:`Origin` of ``graph`` when it is an import of an ONNX model, else None."""
    found = graph._cache.get(ORIGIN_KEY)
    return found if isinstance(found, Origin) else None


class _Plan:
    """Which imported nodes :func:`splice` writes as the file has them, and which of the file's values it can
    compute from the file's nodes."""

    def __init__(self, final: Graph, base: Graph, origin: Origin) -> None:
        self.final, self.origin = final, origin
        self.ir_nodes = origin.ir_nodes
        self.inputs = set(final.input_names)
        kept = {}
        for nid, entry in origin.imported.items():
            node, was = final.nodes.get(nid), base.nodes.get(nid)
            if node is not None and was is not None and node.sig == was.sig and node.sig.op != "opaque":
                kept[nid] = entry
        self.verbatim = dict(kept)
        while True:  # a node whose file inputs cannot be computed is exported: its outputs get other names
            self._memo: dict[str, bool] = {}
            self.live = {origin.nodes.node[k].output[s] for k, _, outs in self.verbatim.values() for s in outs}
            drop = [nid for nid, (k, ins, _) in self.verbatim.items() if not all(
                self.resolvable(x) for s, x in enumerate(origin.nodes.node[k].input) if x and s not in ins)]
            if not drop:
                break
            for nid in drop:
                del self.verbatim[nid]

    def resolvable(self, name: str, depth: int = 0) -> bool:
        """Whether the file's value ``name`` can be computed in the written model: a graph input, an initializer it
        keeps, an output of a node written verbatim, or computed by folded nodes from such values."""
        if name in self._memo:
            return self._memo[name]
        o = self.origin
        if name in self.inputs or name in self.live:
            ok = True
        elif name in o.initializers:
            ok = name in o.small or name in self.final.params
        elif (k1 := self.pass_through(name)) is not None:
            ok = depth < 200 and self.resolvable(o.nodes.node[k1].input[0], depth + 1)
        else:
            k = o.producer.get(name)
            ok = (k is not None and k not in self.ir_nodes and depth < 200
                  and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                              for a in o.nodes.node[k].attribute)
                  and all(self.resolvable(x, depth + 1) for x in o.nodes.node[k].input if x))
        self._memo[name] = ok
        return ok

    def pass_through(self, name: str) -> int | None:
        """The index of the file's node writing ``name`` when it is an IR node the edits removed that passes its one
        input on (a ``Concat`` of one tensor: the clean-up's ``cleanup_concat_noop``); a folded chain that reads
        ``name`` then reads that input (through an ``Identity``, which onnxruntime removes), not a copy of it."""
        k = self.origin.producer.get(name)
        if k is None or k not in self.ir_nodes:
            return None
        node = self.origin.nodes.node[k]
        one = node.op_type == "Concat" and node.domain in _DEFAULT_DOMAINS and len([x for x in node.input if x]) == 1
        return k if one and node.input[0] else None

    def computed(self, name: str) -> bool:
        """Whether the weight ``name`` is a value the file computes with folded nodes (then it is computed so)."""
        k = self.origin.producer.get(name)
        return (name not in self.origin.initializers and k is not None and k not in self.ir_nodes
                and self.resolvable(name))


#: a size in symbols: ``(c, names)`` is ``c`` times the product of the symbolic dims ``names`` (a static size when
#: ``names`` is empty)
Expr = tuple[int, tuple[str, ...]]


@dataclass(frozen=True)
class Sized:
    """What :func:`splice` needs to write sizes in symbols: ``shapes``: IR node id of a reshape or expand -> its
    target, one :data:`Expr` a dim; ``weights``: names of weights whose shape depends on the sizes (each must be one
    the file computes, :meth:`_Plan.computed`); ``witnesses``: symbolic dim name -> (graph input, axis) that has it."""

    shapes: Mapping[int, tuple[Expr, ...]]
    weights: frozenset[str]
    witnesses: Mapping[str, tuple[str, int]]


def splice(final: Graph, base: Graph, sized: Sized | None = None) -> onnx.ModelProto | None:
    """``final`` (a graph derived from ``base`` by edits, ``base`` an import of an ONNX model) written over that
    model (see the module docstring); None when ``base`` has no :class:`Origin` or no node of it is left.
    ``sized``: the targets of the reshapes and expands the edits made, in symbols, computed from the graph inputs'
    shapes at run time (None when a weight that depends on the sizes is not one the file computes)."""
    origin = origin_of(base)
    if origin is None:
        return None
    plan = _Plan(final, base, origin)
    if not plan.verbatim and not any(plan.computed(final.nodes[n].sig.attr["name"]) for n in final.weights()):
        return None
    if sized is not None and not all(plan.computed(w) for w in sized.weights):
        return None
    shape_of: dict[str, str] = {}  # symbolic dim -> the 1-element tensor holding it
    o = origin
    taken = ({final.nodes[n].sig.attr["name"] for n in final.leaves.values()} | set(final.output_names)
             | {x for n in o.nodes.node for x in [*n.input, *n.output] if x} | set(o.initializers))
    ctx = ExportCtx(max(_default_opset(final), o.opset), taken)
    names: dict[Ref, str] = {}
    out_first = _op_output_names(final)
    share = shares(final.params)  # a large model's weights stay out of the bytes (graphsub.frontends.shared)
    leaves = _Leaves(dict(final.params), False, share=share)
    needed: list[str] = []
    for nid in final.topo_order():
        node = final.nodes[nid]
        sig = node.sig
        if sig.op in ("input", "weight"):
            names[Ref(nid, 0)] = sig.attr["name"]
            if sig.op == "weight" and plan.computed(sig.attr["name"]):
                needed.append(sig.attr["name"])
            else:
                leaves.add(ctx, sig)
        elif nid in plan.verbatim:
            k, ins, outs = plan.verbatim[nid]
            proto = onnx.NodeProto()
            proto.CopyFrom(o.nodes.node[k])
            for j, slot in enumerate(ins):
                proto.input[slot] = names[node.inputs[j]]
            needed.extend(x for s, x in enumerate(proto.input) if x and s not in ins)
            for j, slot in enumerate(outs):
                names[Ref(nid, j)] = proto.output[slot]
            ctx.nodes.append(proto)
            if proto.domain not in _DEFAULT_DOMAINS:
                ctx.domains.setdefault(proto.domain, dict(o.opsets).get(proto.domain, 1))
        elif sized is not None and nid in sized.shapes and nid not in plan.verbatim:
            target = _shape_tensor(ctx, sized.shapes[nid], sized.witnesses, shape_of)
            out = out_first.get(Ref(nid, 0)) or ctx.fresh("t")
            names[Ref(nid, 0)] = out
            ctx.emit("Reshape" if sig.op == "reshape" else "Expand", [names[node.inputs[0]], target], outputs=[out])
        else:
            _export_op(ctx, final, nid, names, out_first)
    leaves.check()
    _emit_chains(ctx, plan, needed, {t.name for t in ctx.initializers}, share)
    outputs: list[onnx.ValueInfoProto] = []
    for ref, oname in zip(final.outputs, final.output_names, strict=True):
        if names[ref] != oname:
            ctx.emit("Identity", [names[ref]], outputs=[oname])
        outputs.append(value_info(oname, final.type_of(ref)))
    nodes = _topological(ctx.nodes, {*final.input_names, *(t.name for t in ctx.initializers)})
    if nodes is None:
        return None
    g = helper.make_graph(nodes, _utf8(final.name), leaves.inputs, outputs, initializer=ctx.initializers)
    opsets = {"": ctx.opset, **{d: v for d, v in o.opsets if d not in _DEFAULT_DOMAINS}}
    for d, v in ctx.domains.items():
        opsets[d] = max(opsets.get(d, 1), v)
    return make_model(g, [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())], producer_name="graphsub")


def _shape_tensor(ctx: ExportCtx, exprs: Sequence[Expr], witnesses: Mapping[str, tuple[str, int]],
                  shape_of: dict[str, str]) -> str:
    """An int64 tensor computing the sizes ``exprs`` from the graph inputs' shapes (``Shape`` slices, ``Mul``,
    ``Concat``); ``shape_of`` caches the slice of each symbolic dim."""
    pieces: list[str] = []
    static: list[int] = []
    for c, syms in exprs:
        if not syms:
            static.append(c)
            continue
        if static:
            pieces.append(ctx.const(np.asarray(static, dtype=np.int64), "dims"))
            static = []
        t = ""
        for sym in syms:
            if sym not in shape_of:
                name, axis = witnesses[sym]
                shape_of[sym] = ctx.emit("Shape", [name], {"start": axis, "end": axis + 1})[0]
            t = shape_of[sym] if not t else ctx.emit("Mul", [t, shape_of[sym]])[0]
        if c != 1:
            t = ctx.emit("Mul", [t, ctx.const(np.asarray([c], dtype=np.int64), "dims")])[0]
        pieces.append(t)
    if static:
        pieces.append(ctx.const(np.asarray(static, dtype=np.int64), "dims"))
    return pieces[0] if len(pieces) == 1 else ctx.emit("Concat", pieces, {"axis": 0})[0]


def _emit_chains(ctx: ExportCtx, plan: _Plan, needed: Sequence[str], have: set[str], share: bool) -> None:
    """Write the file's folded nodes (and small initializers) that compute the ``needed`` values (``share``: large
    weights as placeholders, :func:`graphsub.frontends.onnx_export.weight_tensor`)."""
    o = plan.origin
    done: set[int] = set()
    stack = list(needed)
    while stack:
        name = stack.pop()
        if name in have or name in plan.inputs or name in plan.live:
            continue
        if name in o.initializers:
            t = onnx.TensorProto()
            if name in o.small:
                t.CopyFrom(o.small[name])
            else:
                t.CopyFrom(weight_tensor(plan.final.params[name], name, share))
            ctx.initializers.append(t)
            have.add(name)
            continue
        k = o.producer[name]
        if k in done:
            continue
        done.add(k)
        node = onnx.NodeProto()
        node.CopyFrom(o.nodes.node[k])
        if plan.pass_through(name) is not None:
            node = helper.make_node("Identity", [node.input[0]], [name])
        ctx.nodes.append(node)
        have.update(x for x in node.output if x)
        stack.extend(x for x in node.input if x)


def _topological(nodes: Sequence[onnx.NodeProto], ready: set[str]) -> list[onnx.NodeProto] | None:
    """``nodes`` in an order where each reads only what is ``ready`` or written before; None when a value is
    written twice or some node can never run."""
    reads = [_reads(n) for n in nodes]
    made: dict[str, int] = {}
    for k, n in enumerate(nodes):
        for x in n.output:
            if x and (x in made or x in ready):
                return None
            if x:
                made[x] = k
    waiting = [sum(1 for x in r if x in made) for r in reads]
    users: dict[str, list[int]] = {}
    for k, r in enumerate(reads):
        for x in r:
            if x in made:
                users.setdefault(x, []).append(k)
    queue = deque(k for k, w in enumerate(waiting) if w == 0)
    out: list[onnx.NodeProto] = []
    while queue:
        k = queue.popleft()
        out.append(nodes[k])
        for x in nodes[k].output:
            for u in users.get(x, ()):
                waiting[u] -= 1
                if waiting[u] == 0:
                    queue.append(u)
    return out if len(out) == len(nodes) else None


def _reads(node: onnx.NodeProto) -> set[str]:
    """The values ``node`` reads: its inputs and what its subgraphs read from the enclosing graph."""
    got = {x for x in node.input if x}
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            got.update(outer_reads(sub))
    return got




def _shapes(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Value name -> dims (an int, a dim_param, or None when unknown) from ONNX shape inference with data
    propagation."""
    from graphsub.frontends.onnx_types import light_copy

    inferred = onnx.shape_inference.infer_shapes(light_copy(model), data_prop=True)
    out: dict[str, list[int | str | None]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    return out


def _symbolic_target(dims: Sequence[int | str | None], values: Sequence[int],
                     target: Sequence[int]) -> list[int] | None:
    """A Reshape target valid at every size for an input whose dims are ``dims`` (symbolic where a str or None) and
    ``values`` at the imported sizes, reshaped to ``target`` there; None when constants cannot say it.

    Trailing static dims equal on both sides stay; of what is left, a single output dim takes every symbolic dim
    (-1); else symbolic dims that keep their place and size are copied (0) and one more output dim takes the rest
    (-1): the flatten, split-heads and merge-heads reshapes of the exporters.

    >>> _symbolic_target(["b", "s", 64], [1, 1, 64], [1, 64])
    [-1, 64]
    >>> _symbolic_target(["b", "s", 64], [1, 1, 64], [1, 1, 4, 16])
    [0, 0, 4, 16]
    >>> _symbolic_target(["b", "s", 4, 16], [1, 1, 4, 16], [1, 1, 64])
    [0, 0, 64]
    """
    symbolic = [not isinstance(d, int) for d in dims]
    if not any(symbolic) or any(t <= 0 for t in target):
        return None
    a, b = len(dims), len(target)
    while a > 0 and b > 0 and not symbolic[a - 1] and values[a - 1] == target[b - 1]:
        a, b = a - 1, b - 1
    out = list(target)
    if b == 0:
        return None
    if b == 1:
        out[0] = -1
        return out
    copy: set[int] = set()
    pin, pout = 1, 1
    for i in range(min(a, b)):
        if symbolic[i] and values[i] == target[i] and pin == pout:
            copy.add(i)
        pin, pout = pin * values[i], pout * target[i]
    for i in copy:
        out[i] = 0
    if any(symbolic[i] and i not in copy for i in range(a)):
        free = [j for j in range(b) if j not in copy]
        if not free:
            return None
        out[free[0]] = -1
    return out


def resymbolize(static: onnx.ModelProto, model: onnx.ModelProto, rounds: int = 8) -> onnx.ModelProto:
    """``model`` (``static`` with symbolic input dims) with each constant Reshape target that bakes in a symbolic
    size rewritten by :func:`_symbolic_target` (round by round, as ONNX shape inference finds the dims of the next
    ones); the result is for the caller to check at other sizes."""
    values = _shapes(static)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name: t for t in out.graph.initializer}
    done: set[int] = set()
    for _ in range(rounds):
        dims = _shapes(out)
        changed = False
        for k, node in enumerate(out.graph.node):
            if k in done or node.op_type != "Reshape" or node.domain not in _DEFAULT_DOMAINS or len(node.input) < 2:
                continue
            t = inits.get(node.input[1])
            d, v = dims.get(node.input[0]), values.get(node.input[0])
            if t is None or d is None or v is None or not all(isinstance(x, int) for x in v):
                continue
            if all(isinstance(x, int) for x in d):
                continue  # static as far as inference sees: maybe once the reshapes before it are rewritten
            target = numpy_helper.to_array(t).tolist()
            if not isinstance(target, list) or any(x in (0, -1) for x in target):
                done.add(k)
                continue
            new = _symbolic_target(d, [int(x) for x in v if isinstance(x, int)], [int(x) for x in target])
            done.add(k)
            if new is None:
                continue
            name = f"{node.input[1]}_sym_{k}"
            out.graph.initializer.append(numpy_helper.from_array(np.asarray(new, dtype=np.int64), name))
            node.input[1] = name
            changed = True
        if not changed:
            break
    return out


def splice_symbolic(final: Graph, base: Graph, iface: Interface, sized: Sized | None = None) -> onnx.ModelProto | None:
    """:func:`splice` with the free symbolic dims of ``iface`` on its inputs and outputs and its own constant
    reshape targets made symbolic (``sized`` where given, else :func:`resymbolize`); None when it cannot be written
    so."""
    from graphsub.frontends.dims import restored

    model = splice(final, base, sized)
    if model is not None and sized is not None:
        return restored(model, iface)
    if model is None:
        return None
    try:
        return resymbolize(model, restored(model, iface))
    except (onnx.shape_inference.InferenceError, ValueError):
        return None


__all__ = ["ORIGIN_KEY", "Expr", "Origin", "Sized", "origin_of", "remember", "resymbolize", "splice", "splice_symbolic"]
