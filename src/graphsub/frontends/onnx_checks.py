"""Structural checks of an ONNX graph before :mod:`graphsub.frontends.onnx_import` builds anything from it:
each tensor name defined once, default-domain nodes within their ONNX schema, a valid node order (no cycle, no
undefined value), and no tensor larger than the machine can hold. Each failure is an
:class:`~graphsub.errors.ImportError_` naming the node or value, raised before anything is allocated or run."""

from __future__ import annotations

import onnx

from graphsub.errors import ImportError_, ShapeError
from graphsub.ops.types import TensorType

ATTR_TYPE_NAMES = {v: k for k, v in onnx.AttributeProto.AttributeType.items()}


def check_schema(node: onnx.NodeProto, opset: int) -> None:
    """ImportError_ when a node of the default domain breaks its ONNX schema in a way onnxruntime rejects: an
    attribute the operator does not define (it would be dropped silently) or of the wrong type, or a number of
    inputs/outputs out of range.  Operators without a schema are left to the opaque path."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:  # SchemaError: not an ONNX operator at this opset
        return
    where = f"{node.op_type} node {node.name!r}"
    for a in node.attribute:
        spec = schema.attributes.get(a.name)
        if spec is None:
            known = ", ".join(sorted(schema.attributes)) or "none"
            raise ImportError_(f"{where} has attribute {a.name!r}, which {node.op_type} (opset {opset}) does not "
                               f"define (its attributes: {known})")
        want = int(getattr(spec.type, "value", 0))  # a pybind enum; UNDEFINED (0) when unknown
        if want != onnx.AttributeProto.UNDEFINED and a.type != want:
            raise ImportError_(f"{where}: attribute {a.name!r} is {ATTR_TYPE_NAMES.get(a.type, a.type)}, "
                               f"{node.op_type} needs {ATTR_TYPE_NAMES.get(want, want)}")
    n_in = len(node.input)
    while n_in and not node.input[n_in - 1]:
        n_in -= 1  # trailing optional inputs left out
    if not schema.min_input <= n_in <= schema.max_input:
        raise ImportError_(f"{where} has {n_in} input(s); {node.op_type} takes {schema.min_input} to "
                           f"{schema.max_input}")
    if not schema.min_output <= len(node.output) <= schema.max_output:
        raise ImportError_(f"{where} has {len(node.output)} output(s); {node.op_type} gives {schema.min_output} "
                           f"to {schema.max_output}")


def check_single_definitions(graph: onnx.GraphProto) -> None:
    """Every tensor name is defined once -- by a graph input, an initializer (which may also be listed as an
    input, its default value) or one node output -- as ONNX requires (onnxruntime rejects the model otherwise);
    importing such a model would silently keep one definition and drop the other."""
    defined: dict[str, str] = {}

    def define(name: str, what: str) -> None:
        if name in defined:
            raise ImportError_(f"tensor {name!r} is defined twice, by {defined[name]} and by {what}: malformed "
                               "model (ONNX requires every tensor name to be defined once)")
        defined[name] = what

    init_names = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name not in init_names:
            define(vi.name, f"graph input {vi.name!r}")
    for t in graph.initializer:
        define(t.name, f"initializer {t.name!r}")
    for n in graph.node:
        for o in n.output:
            if o:
                define(o, f"{n.op_type} node {n.name!r}")


def topological_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Nodes in a valid order (ONNX requires one, but be lenient); errors on undefined inputs."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending = list(graph.node)
    order: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for n in pending:
            if all(x in available for x in n.input):
                order.append(n)
                available.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            n = rest[0]
            missing = [x for x in n.input if x not in available]
            produced = {o for m in rest for o in m.output}
            if all(m in produced for m in missing):
                raise ImportError_(f"the model's graph has a cycle through node {n.name!r} ({n.op_type})")
            raise ImportError_(
                f"{n.op_type} node {n.name!r} reads undefined value(s) {missing}: malformed model"
            )
        pending = rest
    return order


def check_size(what: str, t: TensorType) -> None:
    """ImportError_ when a tensor could not be allocated on this machine (:func:`graphsub.data.check_sizes`)."""
    from graphsub.data import check_sizes

    try:
        check_sizes([(what, t)])
    except ShapeError as e:
        raise ImportError_(str(e)) from None


__all__ = ["ATTR_TYPE_NAMES", "check_schema", "check_single_definitions", "check_size", "topological_nodes"]
