"""Leaf and opaque operators: ``input``, ``weight``, ``opaque``.

* ``input``/``weight`` have no inputs; their type is in their attributes (``name``, ``shape``,
  ``dtype``).  Weight data, when present, lives in ``Graph.params`` under the same name.
* ``opaque`` stands for an ONNX node graphsub does not model.  It keeps the node's op type,
  domain, serialized attributes and inferred output types, so it round-trips untouched.  It has
  no numpy reference: the reference executor (:mod:`graphsub.execute`) runs it in onnxruntime
  through the ONNX frontend.  ``graphsub.ops`` never imports a frontend (frontends import ops).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graphsub.errors import ShapeError
from graphsub.ops.registry import (
    AttrSpec,
    ExportNode,
    OnnxExportCtx,
    OpDef,
    register,
    zero_cost,
)
from graphsub.ops.types import TensorType


def _leaf_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    return (TensorType(tuple(a["shape"]), a["dtype"]),)


_LEAF_ATTRS = (
    AttrSpec("name", "str", doc="unique name (ONNX value name)"),
    AttrSpec("shape", "ints", doc="static shape"),
    AttrSpec("dtype", "dtype", "float32"),
)

register(OpDef(
    name="input", family="leaf", doc="A graph input: data supplied at run time.",
    inputs=(), attrs=_LEAF_ATTRS, infer=_leaf_infer, reference=None,
    flops=zero_cost, bytes_moved=zero_cost, onnx_export=None, leaf=True,
    onnx_import_note="graph inputs are imported by the frontend itself",
))
register(OpDef(
    name="weight", family="leaf",
    doc="A weight or constant (ONNX initializer / Constant); data optional.",
    inputs=(), attrs=_LEAF_ATTRS, infer=_leaf_infer, reference=None,
    flops=zero_cost, bytes_moved=zero_cost, onnx_export=None, leaf=True,
    onnx_import_note="initializers and Constant nodes are imported by the frontend itself",
))

# ----------------------------------------------------------------------------- opaque


def _opaque_infer(ins: Sequence[TensorType], a: Mapping[str, Any]) -> tuple[TensorType, ...]:
    want = len(a["input_slots"]) + len(a.get("captures", ()))
    if len(ins) != want:
        raise ShapeError(
            f"opaque {a['op_type']}: {len(ins)} inputs but {len(a['input_slots'])} input slots and "
            f"{len(a.get('captures', ()))} captured value(s)"
        )
    return tuple(TensorType(tuple(s), d) for s, d in a["out_types"])


def _opaque_export(ctx: OnnxExportCtx, node: ExportNode) -> None:
    exporter = getattr(ctx, "emit_opaque", None)
    if exporter is None:
        raise ShapeError("this exporter cannot write opaque nodes")
    exporter(node)


register(OpDef(
    name="opaque", family="leaf",
    doc="An ONNX node graphsub does not model; kept verbatim (attributes serialized).",
    inputs=("inputs",), min_inputs=0, variadic=True,
    attrs=(
        AttrSpec("op_type", "str"),
        AttrSpec("domain", "str", ""),
        AttrSpec("version", "int", 0, doc="opset version of the node's domain"),
        AttrSpec("onnx_attrs", "bytes", b"", doc="serialized NodeProto holding the attributes"),
        AttrSpec("out_types", "any", doc="((shape, dtype), ...) from ONNX shape inference"),
        AttrSpec("input_slots", "ints", (), doc="ONNX input position of each IR input"),
        AttrSpec("num_onnx_inputs", "int", 0),
        AttrSpec("output_slots", "ints", (), doc="ONNX output position of each IR output"),
        AttrSpec("num_onnx_outputs", "int", 0),
        AttrSpec("reason", "str", "", doc="why the node is opaque"),
        AttrSpec("captures", "strs", (), doc="outer values its subgraphs read (If/Loop/Scan), by their name in the "
                 "subgraphs; the IR inputs after the slotted ones"),
        AttrSpec("embedded", "any", (), doc="((ONNX input position, serialized TensorProto), ...): constant inputs "
                 "of a dtype the IR does not hold (int4, float8 ...), written back as initializers"),
    ),
    infer=_opaque_infer, reference=None, flops=zero_cost,
    onnx_export=_opaque_export,
    onnx_import_note="any node without an importer becomes opaque",
))

__all__: list[str] = []
