"""Graph -> ONNX ModelProto.

Each IR node is written by its OpDef's exporter through :class:`ExportCtx`; leaves become
graph inputs and initializers; opaque nodes are re-emitted verbatim.  Value names are
deterministic: inputs, weights and outputs keep their names, intermediates are ``t<k>`` in
canonical topological order, so exporting equal graphs gives byte-identical models.

The default-domain opset is ``max(17, highest opset recorded on opaque nodes)`` unless given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphsub.errors import ExportError, GraphsubError
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ir.types import ONNX_DTYPE_CODES, TensorType
from graphsub.ops.registry import ExportNode

DEFAULT_OPSET = 17
PRODUCER = "graphsub"


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


class ExportCtx:
    """Collects nodes and initializers; implements :class:`graphsub.ops.registry.OnnxExportCtx`."""

    def __init__(self, opset: int, taken: set[str]):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._taken = taken
        self._counter = 0
        self.domains: dict[str, int] = {}

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
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def emit_opaque(self, node: ExportNode) -> None:
        a = node.attrs
        n_in = max(a["num_onnx_inputs"], len(node.inputs))
        ins = [""] * n_in
        for name, slot in zip(node.inputs, a["input_slots"], strict=True):
            ins[slot] = name
        n_out = max(a["num_onnx_outputs"], len(node.outputs))
        slots = a["output_slots"] or tuple(range(len(node.outputs)))
        outs = [""] * n_out
        for name, slot in zip(node.outputs, slots, strict=True):
            outs[slot] = name
        while outs and outs[-1] == "":
            outs.pop()
        proto = onnx.NodeProto()
        if a["onnx_attrs"]:
            proto.ParseFromString(a["onnx_attrs"])
        out = onnx.NodeProto()
        out.op_type = a["op_type"]
        out.domain = a["domain"]
        out.name = f"{a['op_type']}_{len(self.nodes)}"
        out.input.extend(ins)
        out.output.extend(outs)
        out.attribute.extend(proto.attribute)
        self.nodes.append(out)
        if a["domain"] not in ("", "ai.onnx"):
            self.domains[a["domain"]] = max(self.domains.get(a["domain"], 1), a["version"] or 1)


def export_graph(
    graph: Graph,
    *,
    opset: int | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    allow_missing_weights: bool = False,
    doc: str = "",
) -> onnx.ModelProto:
    """ONNX model of ``graph``.

    Weight data come from ``params`` then ``graph.params``; a weight without data raises
    :class:`ExportError` unless ``allow_missing_weights`` (then it becomes a graph input, useful
    to inspect structure).  Use :func:`graphsub.data.materialize` for random weights.
    """
    data = dict(graph.params)
    if params:
        data.update(params)
    if opset is None:
        opset = DEFAULT_OPSET
        for nid in graph.ops_of("opaque"):
            a = graph.nodes[nid].sig.attr
            if a["domain"] in ("", "ai.onnx"):
                opset = max(opset, a["version"])
    order = graph.topo_order()
    taken = {graph.nodes[n].sig.attr["name"] for n in graph.leaves.values()} | set(graph.output_names)
    ctx = ExportCtx(opset, taken)
    names: dict[Ref, str] = {}
    # graph outputs fed directly by an op output take the output name
    out_first: dict[Ref, str] = {}
    for ref, oname in zip(graph.outputs, graph.output_names, strict=True):
        if graph.nodes[ref.node].sig.op not in ("input", "weight") and ref not in out_first:
            out_first[ref] = oname
    inputs: list[onnx.ValueInfoProto] = []
    extra_inputs: list[onnx.ValueInfoProto] = []
    missing: list[str] = []
    for nid in order:
        node = graph.nodes[nid]
        sig = node.sig
        if sig.op in ("input", "weight"):
            name = sig.attr["name"]
            names[Ref(nid, 0)] = name
            t = sig.out_types[0]
            if sig.op == "input":
                inputs.append(value_info(name, t))
            elif name in data:
                arr = np.asarray(data[name])
                if arr.shape != t.shape:
                    raise ExportError(f"weight {name!r}: data shape {arr.shape} != declared {t.shape}")
                ctx.initializers.append(numpy_helper.from_array(arr, name))
            elif allow_missing_weights:
                extra_inputs.append(value_info(name, t))
            else:
                missing.append(name)
            continue
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
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise ExportError(
            f"{len(missing)} weight(s) have no data ({shown}); attach data or use "
            "graphsub.data.materialize(graph) for random weights"
        )
    outputs: list[onnx.ValueInfoProto] = []
    for ref, oname in zip(graph.outputs, graph.output_names, strict=True):
        src = names[ref]
        if src != oname:  # leaf output or a value already exported under another name
            ctx.emit("Identity", [src], outputs=[oname])
        outputs.append(value_info(oname, graph.type_of(ref)))
    g = helper.make_graph(
        ctx.nodes, graph.name, inputs + extra_inputs, outputs, initializer=ctx.initializers, doc_string=doc
    )
    opsets = [helper.make_opsetid("", opset)] + [
        helper.make_opsetid(d, v) for d, v in sorted(ctx.domains.items())
    ]
    model = helper.make_model(g, opset_imports=opsets, producer_name=PRODUCER)
    model.ir_version = min(model.ir_version, 10)
    return model


__all__ = ["DEFAULT_OPSET", "ExportCtx", "export_graph", "value_info"]
