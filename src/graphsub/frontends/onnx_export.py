"""Graph -> ONNX ModelProto.

Each IR node is written by its OpDef's exporter through :class:`ExportCtx`; leaves become
graph inputs and initializers; opaque nodes are re-emitted verbatim.  Value names are
deterministic: inputs, weights and outputs keep their names, intermediates are ``t<k>`` in
canonical topological order, so exporting equal graphs gives byte-identical models.

The default-domain opset is ``max(17, highest opset recorded on opaque nodes)`` unless given.
Opaque nodes are written back by :func:`opaque_node` (which also builds the one-node models that
run them in onnxruntime); every model gets its IR version capped by :func:`make_model`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphsub.errors import ExportError, GraphsubError
from graphsub.frontends.shared import SHARE_BYTES, can_hold, placeholder
from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig, Ref
from graphsub.ops.registry import ExportNode
from graphsub.ops.types import ONNX_DTYPE_CODES, TensorType

DEFAULT_OPSET = 17
PRODUCER = "graphsub"
#: the newest ONNX IR version onnxruntime reads (onnx's helpers may write a newer one)
MAX_IR_VERSION = 10


def _attr_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return numpy_helper.from_array(v)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, tuple):
        return [_attr_value(x) for x in v]
    return v


def value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, ONNX_DTYPE_CODES[t.dtype], list(t.shape))


#: constants up to this many elements are written once per value by :meth:`ExportCtx.const`
SHARED_CONST_ELEMENTS = 64


class ExportCtx:
    """Collects nodes and initializers; implements :class:`graphsub.ops.registry.OnnxExportCtx`."""

    def __init__(self, opset: int, taken: set[str]):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._taken = taken
        self._counter = 0
        self.domains: dict[str, int] = {}
        self._consts: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    def fresh(self, hint: str = "v") -> str:
        while True:
            self._counter += 1
            name = f"{hint}_{self._counter}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def emit(
        self,
        op_type: str,
        inputs: Sequence[str],
        attrs: Mapping[str, Any] | None = None,
        *,
        outputs: Sequence[str] | None = None,
        num_outputs: int = 1,
        domain: str = "",
    ) -> list[str]:
        outs = list(outputs) if outputs is not None else [self.fresh("t") for _ in range(num_outputs)]
        clean = {k: _attr_value(v) for k, v in (attrs or {}).items() if v is not None}
        node = helper.make_node(
            op_type, list(inputs), outs, name=f"{op_type}_{len(self.nodes)}", domain=domain or None, **clean
        )
        self.nodes.append(node)
        if domain and domain != "ai.onnx":
            self.domains.setdefault(domain, 1)
        return outs

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        """An initializer holding ``array``. A small one (shapes, axes, scalars) is written once per value: every
        node that asks for the same value reads the same initializer, so that onnxruntime's common subexpression
        elimination merges what those nodes compute from it (each layer's GroupQueryAttention computes the same
        lengths from the same shapes)."""
        a = np.asarray(array)
        key = (a.dtype.str, a.shape, a.tobytes()) if a.size <= SHARED_CONST_ELEMENTS else None
        if key is not None and key in self._consts:
            return self._consts[key]
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(a, name))
        if key is not None:
            self._consts[key] = name
        return name

    def emit_opaque(self, node: ExportNode) -> None:
        a = node.attrs
        names = {}
        for slot, t in embedded_tensors(a, "").items():  # constants of dtypes the IR does not hold: initializers
            t.name = names[slot] = self.fresh("embedded")
            self.initializers.append(t)
        self.nodes.append(opaque_node(a, node.inputs, node.outputs, name=f"{a['op_type']}_{len(self.nodes)}",
                                      embedded=names))
        if a["domain"] not in ("", "ai.onnx"):
            self.domains[a["domain"]] = max(self.domains.get(a["domain"], 1), a["version"] or 1)


def embedded_tensors(attrs: Mapping[str, Any], prefix: str) -> dict[int, TensorProto]:
    """The constant inputs an ``opaque`` node holds itself (``embedded``: of dtypes the IR has no type for, e.g. int4
    weights), by ONNX input position, named ``PREFIX<position>``."""
    out = {}
    for slot, data in attrs.get("embedded", ()):
        t = TensorProto.FromString(data)
        t.name = f"{prefix}{slot}"
        out[int(slot)] = t
    return out


def opaque_node(attrs: Mapping[str, Any], inputs: Sequence[str], outputs: Sequence[str], *,
                name: str = "", embedded: Mapping[int, str] | None = None) -> onnx.NodeProto:
    """The ONNX node an ``opaque`` IR node with attributes ``attrs`` stands for: its op type, domain
    and serialized attributes, with ``inputs``/``outputs`` (one value name per IR input/output) at
    their ONNX positions; absent optional positions are empty, trailing empty outputs dropped. The inputs after the
    slotted ones are the outer values its subgraphs read (``captures``): the subgraphs are written reading them under
    the names given here. ``embedded``: the value names of the node's own constants (:func:`embedded_tensors`), by
    ONNX input position."""
    slots = tuple(attrs["input_slots"])
    captured = dict(zip(attrs.get("captures", ()), inputs[len(slots):], strict=True))
    held = dict(embedded or {})
    if sorted(held) != sorted(int(slot) for slot, _ in attrs.get("embedded", ())):
        raise ExportError(f"opaque {attrs['op_type']}: its embedded constants need value names")
    ins = [""] * max(attrs["num_onnx_inputs"], len(slots), *(k + 1 for k in held))
    for value, slot in zip(inputs[:len(slots)], slots, strict=True):
        ins[slot] = value
    for slot, value in held.items():
        ins[slot] = value
    outs = [""] * max(attrs["num_onnx_outputs"], len(outputs))
    for value, slot in zip(outputs, attrs["output_slots"] or range(len(outputs)), strict=True):
        outs[slot] = value
    while outs and outs[-1] == "":
        outs.pop()
    node = onnx.NodeProto()
    if attrs["onnx_attrs"]:
        node.ParseFromString(attrs["onnx_attrs"])
    node.op_type = attrs["op_type"]
    node.domain = attrs["domain"]
    renames = {old: new for old, new in captured.items() if old != new}
    if renames:
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                rename_reads(sub, renames)
    if name:
        node.name = name
    node.input.extend(ins)
    node.output.extend(outs)
    return node


def outer_reads(graph: onnx.GraphProto) -> list[str]:
    """The values ``graph`` (a subgraph of If, Loop, Scan) reads from the scopes around it, nested subgraphs
    included, in the order they are first read."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    out: dict[str, None] = {}
    for n in graph.node:
        reads = [x for x in n.input if x]
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                reads += outer_reads(sub)
        out.update((x, None) for x in reads if x not in defined)
        defined.update(n.output)
    out.update((o.name, None) for o in graph.output if o.name not in defined)
    return list(out)


def rename_reads(graph: onnx.GraphProto, renames: Mapping[str, str]) -> None:
    """Rename, in place, the values ``graph`` and its nested subgraphs read (node inputs and outputs that pass an
    outer value through) by ``renames``; names are single-assignment in ONNX, so nothing inside defines them."""
    for n in graph.node:
        for i, x in enumerate(n.input):
            if x in renames:
                n.input[i] = renames[x]
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                rename_reads(sub, renames)
    for o in graph.output:
        if o.name in renames:
            o.name = renames[o.name]


def make_model(graph: onnx.GraphProto, opsets: Sequence[onnx.OperatorSetIdProto], **kw: Any) -> onnx.ModelProto:
    """``onnx.helper.make_model`` with the IR version capped at :data:`MAX_IR_VERSION`."""
    model = helper.make_model(graph, opset_imports=list(opsets), **kw)
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    return model


def export_graph(
    graph: Graph,
    *,
    opset: int | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    allow_missing_weights: bool = False,
    doc: str = "",
    share: bool | None = None,
) -> onnx.ModelProto:
    """ONNX model of ``graph``.

    Weight data come from ``params`` then ``graph.params``; a weight without data raises
    :class:`ExportError` unless ``allow_missing_weights`` (then it becomes a graph input, useful
    to inspect structure).  Use :func:`graphsub.data.materialize` for random weights. ``share``: whether the large
    weights are placeholders (:func:`shares`; by default, when the weights are large enough).
    """
    data = dict(graph.params)
    if params:
        data.update(params)
    if opset is None:
        opset = _default_opset(graph)
    taken = {graph.nodes[n].sig.attr["name"] for n in graph.leaves.values()} | set(graph.output_names)
    ctx = ExportCtx(opset, taken)
    names: dict[Ref, str] = {}
    out_first = _op_output_names(graph)
    leaves = _Leaves(data, allow_missing_weights, share=shares(data) if share is None else share)
    for nid in graph.topo_order():
        sig = graph.nodes[nid].sig
        if sig.op in ("input", "weight"):
            names[Ref(nid, 0)] = sig.attr["name"]
            leaves.add(ctx, sig)
        else:
            _export_op(ctx, graph, nid, names, out_first)
    leaves.check()
    outputs: list[onnx.ValueInfoProto] = []
    for ref, oname in zip(graph.outputs, graph.output_names, strict=True):
        src = names[ref]
        if src != oname:  # leaf output or a value already exported under another name
            ctx.emit("Identity", [src], outputs=[oname])
        outputs.append(value_info(oname, graph.type_of(ref)))
    try:
        g = helper.make_graph(ctx.nodes, _utf8(graph.name), leaves.inputs + leaves.extra, outputs,
                              initializer=ctx.initializers, doc_string=doc)
    except UnicodeError as e:  # a name read from a file that is not valid UTF-8 (protobuf refuses to write it)
        raise ExportError(f"the model has names that are not valid UTF-8 ({e})") from None
    opsets = [helper.make_opsetid("", opset)] + [
        helper.make_opsetid(d, v) for d, v in sorted(ctx.domains.items())
    ]
    return make_model(g, opsets, producer_name=PRODUCER)


def _weight_bytes(data: Mapping[str, Any]) -> int:
    return sum(int(getattr(a, "nbytes", 0)) for a in data.values())


def shares(data: Mapping[str, Any]) -> bool:
    """Whether a graph whose weights are ``data`` exports its large ones as placeholders (above
    :data:`~graphsub.frontends.shared.SHARE_BYTES`: :mod:`graphsub.frontends.shared`)."""
    return _weight_bytes(data) > SHARE_BYTES


def weight_tensor(array: np.ndarray, name: str, share: bool) -> onnx.TensorProto:
    """The initializer ``name`` of ``array``: a placeholder when ``share`` (:func:`shares`) and it can be one, else
    its data inline."""
    return placeholder(array, name) if share and can_hold(array) else numpy_helper.from_array(array, name)


def _utf8(text: str | bytes) -> str:
    """``text`` with what is not valid UTF-8 replaced (protobuf hands a damaged file's string as bytes, or with
    surrogates): for the graph's name, which nothing refers to."""
    if isinstance(text, bytes):
        return text.decode("utf-8", "replace")
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _default_opset(graph: Graph) -> int:
    """:data:`DEFAULT_OPSET`, or the highest default-domain opset recorded on an opaque node."""
    opset = DEFAULT_OPSET
    for nid in graph.ops_of("opaque"):
        a = graph.nodes[nid].sig.attr
        if a["domain"] in ("", "ai.onnx"):
            opset = max(opset, a["version"])
    return opset


def _op_output_names(graph: Graph) -> dict[Ref, str]:
    """Graph outputs fed directly by an op output: that output takes the graph output's name
    (the first one, if it feeds several)."""
    out_first: dict[Ref, str] = {}
    for ref, oname in zip(graph.outputs, graph.output_names, strict=True):
        if graph.nodes[ref.node].sig.op not in ("input", "weight") and ref not in out_first:
            out_first[ref] = oname
    return out_first


@dataclass
class _Leaves:
    """The exported leaves: graph inputs, weights without data exported as inputs (``extra``,
    with ``allow_missing``) and the names of weights without data (an error otherwise)."""

    data: Mapping[str, np.ndarray]
    allow_missing: bool
    share: bool = False
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    extra: list[onnx.ValueInfoProto] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def add(self, ctx: ExportCtx, sig: OpSig) -> None:
        """Export an ``input`` (graph input) or ``weight`` (initializer) leaf."""
        name = sig.attr["name"]
        t = sig.out_types[0]
        if sig.op == "input":
            self.inputs.append(value_info(name, t))
        elif name in self.data:
            value = self.data[name]
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)  # a memory map stays one (shared)
            if arr.shape != t.shape:
                raise ExportError(f"weight {name!r}: data shape {arr.shape} != declared {t.shape}")
            ctx.initializers.append(weight_tensor(arr, name, self.share))  # a large model's: out of the bytes
        elif self.allow_missing:
            self.extra.append(value_info(name, t))
        else:
            self.missing.append(name)

    def check(self) -> None:
        """Raise :class:`ExportError` if weights have no data."""
        if self.missing:
            shown = ", ".join(self.missing[:5]) + (" ..." if len(self.missing) > 5 else "")
            raise ExportError(
                f"{len(self.missing)} weight(s) have no data ({shown}); attach data or use "
                "graphsub.data.materialize(graph) for random weights"
            )


def _export_op(ctx: ExportCtx, graph: Graph, nid: int, names: dict[Ref, str], out_first: Mapping[Ref, str]) -> None:
    """Export op node ``nid`` through its OpDef's exporter, naming its outputs in ``names``."""
    node = graph.nodes[nid]
    sig = node.sig
    outs = []
    for i in range(len(sig.out_types)):
        r = Ref(nid, i)
        nm = out_first.get(r) or ctx.fresh("t")
        names[r] = nm
        outs.append(nm)
    enode = ExportNode(
        op=sig.op,
        attrs=sig.attr,
        inputs=tuple(names[r] for r in node.inputs),
        outputs=tuple(outs),
        in_types=sig.in_types,
        out_types=sig.out_types,
        name=f"{sig.op}_{nid}",
    )
    exporter = sig.opdef.onnx_export
    if exporter is None:
        raise ExportError(f"op {sig.op!r} has no ONNX exporter")
    try:
        exporter(ctx, enode)
    except GraphsubError as e:
        raise ExportError(f"cannot export {sig.op} node: {e}") from e


__all__ = ["DEFAULT_OPSET", "MAX_IR_VERSION", "ExportCtx", "embedded_tensors", "export_graph", "make_model",
           "opaque_node", "outer_reads", "rename_reads", "shares", "value_info", "weight_tensor"]
