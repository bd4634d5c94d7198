"""ONNX ModelProto -> Graph.

* Opsets 13+ of the default domain (older models are upgraded with onnx's version converter); model-local
  functions are inlined (as onnxruntime runs them).
* Inputs must get static shapes: symbolic dims come from ``input_shapes`` (a ``dim_param`` name it gives a size
  has that size in every input) or ``default_dim``; writes restore the others
  (:mod:`graphsub.frontends.dims`).
* Initializers and ``Constant`` nodes become weights (with data).  Shape arithmetic -- small
  all-constant subgraphs with integer results, such as ``Shape -> Gather -> Concat ->
  Reshape`` -- is folded (reference implementations, or onnxruntime for ops graphsub does not
  model), so shape-dependent ops get static attributes.  Float computations on weights are
  kept as ops: folding them is an optimization, not an import.
* Each node is imported by the first OpDef importer that accepts it; a node no importer
  accepts becomes an ``opaque`` node carrying its serialized attributes and the output types
  from ONNX shape inference, so it survives the round trip untouched; a constant it reads whose dtype the IR has
  no type for (int4, float8) stays inside it (``embedded``), written back as an initializer.
* Problems raise :class:`~graphsub.errors.ImportError_` naming the node and value -- and nothing
  else: hostile files are refused before anything is allocated or run.  Each tensor name must be
  defined once; default-domain nodes must fit their ONNX schema (attribute names and types, input and
  output counts); opset and IR version must be ones onnx knows; no value may need more than
  :func:`graphsub.data.tensor_limit` bytes.  A graph output's declared type gives way to the type the
  graph computes (a warning; a different dtype is an error).

The structural checks live in :mod:`graphsub.frontends.onnx_checks`, the value types (static inputs, shape
inference, its completion by one onnxruntime run) in :mod:`graphsub.frontends.onnx_types`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.inliner
from onnx import helper, numpy_helper

from graphsub.errors import GraphsubError, ImportError_, NotModelled, ShapeError
from graphsub.frontends.onnx_checks import check_schema, check_single_definitions, check_size, topological_nodes
from graphsub.frontends.onnx_export import make_model, outer_reads
from graphsub.frontends.onnx_types import FOLD_LIMIT, infer_types, static_inputs
from graphsub.frontends.shared import tensor_array
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, Ref, make_sig
from graphsub.ops.registry import ONNX_IMPORTERS, Imported, Unsupported
from graphsub.ops.types import DTYPES, FLOAT_DTYPES, TensorType, dtype_of

log = logging.getLogger("graphsub")

MIN_OPSET = 13
#: all-constant nodes whose outputs have at most this many elements are folded at import
_DEFAULT_DOMAINS = ("", "ai.onnx")


def _f32(v: float) -> float:
    """The shortest decimal that rounds to the same float32 (1e-3, not 0.0010000000474974513),
    so imported attributes equal the ones a user writes."""
    return float(str(np.float32(v)))


def _attr_to_python(a: onnx.AttributeProto) -> Any:
    v = helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.FLOAT:
        return _f32(v)
    if a.type == onnx.AttributeProto.FLOATS:
        return [_f32(x) for x in v]
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", errors="replace") for x in v]
    return v


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if a.name == "value":
            return numpy_helper.to_array(v)
        if a.name == "value_float":
            return np.asarray(v, dtype=np.float32)
        if a.name == "value_floats":
            return np.asarray(v, dtype=np.float32)
        if a.name == "value_int":
            return np.asarray(v, dtype=np.int64)
        if a.name == "value_ints":
            return np.asarray(v, dtype=np.int64)
        if a.name == "sparse_value":
            return _sparse_to_dense(v)
    raise NotModelled(f"Constant node {node.name!r}: unsupported value kind (string)")


def _ir_dtype(array: np.ndarray) -> bool:
    """Whether the IR has a type for ``array``'s dtype (not for int4, uint4, the float8 formats ...)."""
    return str(array.dtype) in DTYPES


def _sparse_to_dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """The dense array of a ``SparseTensorProto``: its values at its indices (``[NNZ]`` linear ones or ``[NNZ, rank]``
    coordinates), zeros elsewhere."""
    values = numpy_helper.to_array(sparse.values).reshape(-1)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    check_size("a Constant's sparse_value", TensorType(dims, dtype_of(values)))  # before allocating it dense
    dense = np.zeros(dims, dtype=values.dtype)
    flat = indices.reshape(-1) if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims)
    dense.reshape(-1)[flat] = values
    return dense


class _NodeCtx:
    """:class:`graphsub.ops.registry.OnnxImportCtx` for one ONNX node."""

    def __init__(self, imp: _Importer, node: onnx.NodeProto):
        self._imp = imp
        self._node = node
        self.op_type = node.op_type
        self.domain = node.domain
        self.opset = imp.opset
        self.name = node.name
        self.num_inputs = len(node.input)
        self.num_outputs = len(node.output)
        self._attrs = {a.name: a for a in node.attribute}

    def attr(self, name: str, default: Any = ...) -> Any:
        a = self._attrs.get(name)
        if a is None:
            if default is ...:
                raise Unsupported(f"missing attribute {name!r}")
            return default
        return _attr_to_python(a)

    def has_input(self, i: int) -> bool:
        return i < len(self._node.input) and self._node.input[i] != ""

    def input_type(self, i: int) -> TensorType:
        return self._imp.type_of(self._node.input[i], self._node)

    def const_input(self, i: int) -> np.ndarray | None:
        if not self.has_input(i):
            return None
        return self._imp.consts.get(self._node.input[i])

    def output_used(self, i: int) -> bool:
        if i >= len(self._node.output) or not self._node.output[i]:
            return False
        return self._node.output[i] in self._imp.used


class _Importer:
    def __init__(self, model: onnx.ModelProto, opset: int, inferred: Mapping[str, TensorType]):
        self.model = model
        self.opset = opset
        self.inferred = dict(inferred)
        #: graph outputs whose type only the file's declaration gives (ONNX shape inference did not): what graphsub
        #: computes for them wins over the declaration, which may be wrong
        self.declared_only: set[str] = set()
        self.consts: dict[str, np.ndarray] = {}
        self.env: dict[str, Ref] = {}
        self.types: dict[str, TensorType] = {}
        self.nodes: dict[int, Node] = {}
        self.params: dict[str, np.ndarray] = {}
        self.inputs: list[int] = []
        self.graph_outputs: set[str] = {o.name for o in model.graph.output}
        self.used_by_nodes: set[str] = set()
        for n in model.graph.node:
            self.used_by_nodes.update(x for x in n.input if x)
        self.used = self.graph_outputs | self.used_by_nodes
        self._next = 0
        self.opaque_reasons: dict[str, int] = {}
        self.initializers: dict[str, onnx.TensorProto] = {}  # by name, as the file has them
        #: IR node id -> (ONNX node, the ONNX input slot of each IR input, the ONNX output slot of each IR output):
        #: what :mod:`graphsub.frontends.splice` writes back verbatim where a rewrite left the node as it was
        self.origin: dict[int, tuple[onnx.NodeProto, tuple[int, ...], tuple[int, ...]]] = {}

    # -- arena --------------------------------------------------------------------------
    def add(self, op: str, attrs: Mapping[str, Any], inputs: Sequence[Ref]) -> int:
        sig = make_sig(op, attrs, tuple(self.nodes[r.node].sig.out_types[r.index] for r in inputs))
        nid = self._next
        self._next += 1
        self.nodes[nid] = Node(sig, tuple(inputs))
        return nid

    def type_of(self, name: str, node: onnx.NodeProto | None = None) -> TensorType:
        if name in self.env:
            r = self.env[name]
            return self.nodes[r.node].sig.out_types[r.index]
        if name in self.consts:
            c = self.consts[name]
            return TensorType(tuple(c.shape), dtype_of(c))
        t = self.inferred.get(name)
        if t is None:
            where = f" (input of {node.op_type} node {node.name!r})" if node is not None else ""
            raise NotModelled(f"the type/shape of value {name!r}{where} is unknown")
        return t

    def ref(self, name: str, node: onnx.NodeProto) -> Ref:
        """Ref of a value, materializing constants as weight leaves."""
        r = self.env.get(name)
        if r is not None:
            return r
        if name in self.consts:
            arr = self.consts[name]
            nid = self.add("weight", {"name": name, "shape": arr.shape, "dtype": dtype_of(arr)}, ())
            self.params[name] = arr
            self.env[name] = Ref(nid, 0)
            return self.env[name]
        raise ImportError_(
            f"{node.op_type} node {node.name!r} reads {name!r}, which no earlier node produces"
        )

    # -- nodes --------------------------------------------------------------------------
    def import_node(self, node: onnx.NodeProto) -> None:
        domain_default = node.domain in _DEFAULT_DOMAINS
        if domain_default:
            check_schema(node, self.opset)
        if domain_default and node.op_type == "Constant":
            self.consts[node.output[0]] = _constant_value(node)
            return
        present = [x for x in node.input if x]
        if domain_default and node.op_type == "Identity" and self._alias_leaf_output(node):
            return
        if domain_default and node.op_type == "Shape" and self._fold_shape(node):
            return
        if domain_default and present and all(x in self.consts for x in present) and self._fold(node):
            return
        ctx = _NodeCtx(self, node)
        reason = f"no importer for {node.domain + '::' if node.domain else ''}{node.op_type}"
        for op, fn in ONNX_IMPORTERS.get(("" if domain_default else node.domain, node.op_type), []):
            try:
                imported = fn(ctx)
            except Unsupported as e:
                reason = f"{node.op_type}: {e}"
                continue
            except GraphsubError as e:
                reason = f"{node.op_type}: {e}"
                continue
            except (ValueError, TypeError, KeyError, IndexError, ArithmeticError) as e:  # malformed attributes
                reason = f"{node.op_type}: malformed attributes ({type(e).__name__}: {e})"
                continue
            if self._add_imported(node, imported):
                return
            reason = f"{node.op_type}: imported as {op} but types disagree with ONNX shape inference"
        self._add_opaque(node, reason)

    def _alias_leaf_output(self, node: onnx.NodeProto) -> bool:
        """``Identity(leaf) -> graph output`` is how a leaf is exported as an output: alias it."""
        src, dst = node.input[0], node.output[0]
        if dst not in self.graph_outputs or dst in self.used_by_nodes:
            return False
        r = self.env.get(src)
        if r is None and src in self.consts:
            r = self.ref(src, node)
        if r is None or self.nodes[r.node].sig.op not in ("input", "weight"):
            return False
        self.env[dst] = r
        return True

    def _add_imported(self, node: onnx.NodeProto, imp: Imported) -> bool:
        try:
            refs = [self.ref(node.input[i], node) for i in imp.inputs]
            sig = make_sig(imp.op, imp.attrs, tuple(self.nodes[r.node].sig.out_types[r.index] for r in refs))
        except ShapeError as e:
            log.debug("import of %s as %s failed: %s", node.name, imp.op, e)
            return False
        slots = [k for k in (imp.outputs or range(len(sig.out_types))) if k < len(node.output)]
        for k, out in enumerate(node.output):
            if k not in slots and out and out in self.used:
                return False  # an output the IR op does not produce is used
        for j, k in enumerate(slots):
            t = self.inferred.get(node.output[k])
            mine = sig.out_types[j]
            if t is not None and t != mine and node.output[k] in self.declared_only:
                if t.dtype != mine.dtype:
                    raise ImportError_(f"graph output {node.output[k]!r} is declared {t.dtype} but {node.op_type} "
                                       f"node {node.name!r} computes {mine.dtype}: malformed model")
                log.warning("graph output %r is declared %s but %s node %r computes %s; using %s", node.output[k], t,
                            node.op_type, node.name, mine, mine)
            elif t is not None and t != mine:
                log.warning(
                    "%s node %r: graphsub infers %s for %r but ONNX inferred %s; keeping it opaque",
                    node.op_type, node.name, mine, node.output[k], t,
                )
                return False
        nid = self._next
        self._next += 1
        self.nodes[nid] = Node(sig, tuple(refs))
        for j, k in enumerate(slots):
            if node.output[k]:
                self.env[node.output[k]] = Ref(nid, j)
        if len(slots) == len(sig.out_types):
            self.origin[nid] = (node, tuple(imp.inputs), tuple(slots))
        return True

    def _add_opaque(self, node: onnx.NodeProto, reason: str) -> None:
        captures: dict[str, None] = {}  # the outer values its subgraphs read: extra IR inputs, so data flows
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                captures.update((x, None) for x in outer_reads(sub))
        embedded = tuple((i, self._held_constant(x)) for i, x in enumerate(node.input)
                         if x and x not in self.env and x in self.consts and not _ir_dtype(self.consts[x]))
        held = {i for i, _ in embedded}  # constants of dtypes the IR has no type for (int4 ...): the node keeps them
        slots = [i for i, x in enumerate(node.input) if x and i not in held]
        refs = [self.ref(node.input[i], node) for i in slots] + [self.ref(x, node) for x in captures]
        out_slots = [k for k, x in enumerate(node.output) if x]
        out_types = []
        for k in out_slots:
            t = self.inferred.get(node.output[k])
            if t is None:
                raise NotModelled(
                    f"{node.op_type} node {node.name!r} is not modelled by graphsub ({reason}) and "
                    f"ONNX shape inference could not determine the shape of its output "
                    f"{node.output[k]!r}; give static input shapes or add value_info to the model"
                )
            out_types.append((t.shape, t.dtype))
        holder = onnx.NodeProto()
        holder.attribute.extend(node.attribute)
        version = self.opset if node.domain in _DEFAULT_DOMAINS else next(
            (o.version for o in self.model.opset_import if o.domain == node.domain), 1
        )
        attrs = {
            "op_type": node.op_type,
            "domain": node.domain,
            "version": version,
            "onnx_attrs": holder.SerializeToString(deterministic=True) if node.attribute else b"",
            "out_types": tuple(out_types),
            "input_slots": tuple(slots),
            "num_onnx_inputs": len(node.input),
            "output_slots": tuple(out_slots),
            "num_onnx_outputs": len(node.output),
            "reason": reason,
            "captures": tuple(captures),
        }
        if embedded:
            attrs["embedded"] = embedded
        nid = self.add("opaque", attrs, refs)
        for j, k in enumerate(out_slots):
            self.env[node.output[k]] = Ref(nid, j)
        self.opaque_reasons[reason] = self.opaque_reasons.get(reason, 0) + 1

    def _held_constant(self, name: str) -> bytes:
        """A constant an opaque node keeps itself, serialized (the initializer as the file has it)."""
        t = self.initializers.get(name)
        if t is None:
            t = numpy_helper.from_array(self.consts[name])
        held = onnx.TensorProto()
        held.CopyFrom(t)
        held.name = ""
        return held.SerializeToString(deterministic=True)

    def _fold_shape(self, node: onnx.NodeProto) -> bool:
        try:
            t = self.type_of(node.input[0], node)
        except ImportError_:
            return False
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        dims = list(t.shape)
        start, end = int(attrs.get("start", 0)), attrs.get("end")
        sel = dims[start:] if end is None else dims[start:int(end)]
        self.consts[node.output[0]] = np.asarray(sel, dtype=np.int64)
        return True

    def _fold(self, node: onnx.NodeProto) -> bool:
        """Evaluate an all-constant node with the reference implementation if it is small."""
        ctx = _NodeCtx(self, node)
        for op, fn in ONNX_IMPORTERS.get(("", node.op_type), []):
            try:
                imp = fn(ctx)
                in_arrays = [self.consts[node.input[i]] for i in imp.inputs]
                sig = make_sig(imp.op, imp.attrs, tuple(TensorType(a.shape, dtype_of(a)) for a in in_arrays))
            except (Unsupported, GraphsubError, ValueError, TypeError, KeyError, IndexError, ArithmeticError):
                continue
            if sum(t.numel for t in sig.out_types) > FOLD_LIMIT or sig.opdef.reference is None:
                return False
            if any(t.dtype in FLOAT_DTYPES for t in sig.out_types):
                return False  # only shape arithmetic is folded; float compute on weights stays
            if op == "opaque":
                return False
            try:
                outs = sig.opdef.reference(in_arrays, sig.attr)
            except Exception as e:  # hostile constants (a Reshape to a wrong size ...): leave it to the runtime
                log.debug("not folding %s node %r: %s", node.op_type, node.name, e)
                return False
            for k, arr in enumerate(outs):
                if k < len(node.output) and node.output[k]:
                    self.consts[node.output[k]] = np.asarray(arr)
            return True
        return self._fold_with_ort(node)

    def _fold_with_ort(self, node: onnx.NodeProto) -> bool:
        """Fold an all-constant node no OpDef models (Mod, Range, Where, ...) with onnxruntime."""
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return False
        if any(self.consts[x].size > FOLD_LIMIT for x in node.input if x):
            return False
        from graphsub.frontends.ort import make_session, run_session

        ins = [x for x in node.input if x]
        g = helper.make_graph(
            [node], "fold",
            [helper.make_tensor_value_info(x, onnx.helper.np_dtype_to_tensor_dtype(self.consts[x].dtype),
                                           list(self.consts[x].shape)) for x in dict.fromkeys(ins)],
            [helper.make_empty_tensor_value_info(o) for o in node.output if o],
        )
        try:
            outs = run_session(make_session(make_model(g, [helper.make_opsetid("", self.opset)])),
                               {x: self.consts[x] for x in ins})
        except GraphsubError:
            return False
        if sum(o.size for o in outs) > FOLD_LIMIT or any(o.dtype.kind == "f" for o in outs):
            return False
        for name, arr in zip([o for o in node.output if o], outs, strict=True):
            self.consts[name] = np.asarray(arr)
        return True


def from_onnx(
    model: onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    default_dim: int | None = 1,
    name: str | None = None,
    sizes: Mapping[str, int] | None = None,
) -> Graph:
    """Convert an ONNX model into a :class:`Graph` (see the module docstring); ``sizes``: the sizes free symbolic
    dims (by ``dim_param`` name) are imported at, where not ``default_dim``.

    Every problem with the model raises ImportError_ naming the node or value (never another exception type):
    hostile files (duplicate tensor definitions, cycles, dimensions no machine can allocate, malformed
    attributes) are refused here, before anything is allocated or run."""
    try:
        return _from_onnx(model, input_shapes=input_shapes, default_dim=default_dim, name=name, sizes=sizes)
    except ImportError_:
        raise
    except GraphsubError as e:
        raise ImportError_(str(e)) from e
    except RecursionError as e:
        raise ImportError_(f"cannot import the model: it nests too deeply ({e})") from e
    except Exception as e:  # onnx / protobuf / numpy errors on malformed content
        raise ImportError_(f"cannot import the model: {type(e).__name__}: {e}") from e


def _from_onnx(
    model: onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None,
    default_dim: int | None,
    name: str | None,
    sizes: Mapping[str, int] | None = None,
) -> Graph:
    if not isinstance(model, onnx.ModelProto) or not model.HasField("graph"):
        raise ImportError_("not an ONNX model: no graph")
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), None)
    if opset is None:
        raise ImportError_("the model declares no opset for the default ONNX domain")
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise ImportError_(f"the model's opset {opset} is newer than {newest}, the newest that onnx "
                           f"{onnx.__version__} defines: its operators' meaning is unknown")
    if not model.graph.output:
        raise ImportError_("the model's graph has no outputs: it computes nothing")
    if model.ir_version > onnx.IR_VERSION:
        raise ImportError_(f"the model's IR version {model.ir_version} is newer than {onnx.IR_VERSION}, the "
                           f"newest that onnx {onnx.__version__} reads")
    if model.functions:  # model-local functions (the dynamo exporter's modules): onnxruntime inlines them too
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:
            raise NotModelled(f"the model's local functions cannot be inlined: {e}") from e
    if opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as e:
            raise NotModelled(
                f"opset {opset} is older than {MIN_OPSET} and the ONNX version converter failed: {e}"
            ) from e
        opset = MIN_OPSET
    graph = model.graph
    check_single_definitions(graph)
    static = static_inputs(graph, input_shapes or {}, default_dim, sizes)
    order = topological_nodes(graph)
    inferred, declared_only = infer_types(model, static)
    inferred.update(static)
    imp = _Importer(model, opset, inferred)
    imp.declared_only = declared_only - set(static)
    for t in graph.initializer:
        try:
            arr = tensor_array(t)  # a held weight (frontends.shared) is not copied
        except Exception as e:
            raise ImportError_(f"initializer {t.name!r} cannot be read (missing external data?): {e}") from e
        imp.consts[t.name] = arr
        imp.initializers[t.name] = t
    for vi in graph.input:
        if vi.name in static:
            t = static[vi.name]
            nid = imp.add("input", {"name": vi.name, "shape": t.shape, "dtype": t.dtype}, ())
            imp.inputs.append(nid)
            imp.env[vi.name] = Ref(nid, 0)
            imp.consts.pop(vi.name, None)
    for node in order:
        try:
            imp.import_node(node)
        except ImportError_:
            raise
        except GraphsubError as e:
            raise ImportError_(f"{node.op_type} node {node.name!r}: {e}") from e
        except Exception as e:  # malformed attributes or constants
            raise ImportError_(f"{node.op_type} node {node.name!r} cannot be imported: {type(e).__name__}: "
                               f"{e}") from e
        for o in node.output:
            if o in imp.env:
                check_size(f"{node.op_type} node {node.name!r}: output {o!r}", imp.type_of(o))
    outputs = []
    for o in graph.output:
        if o.name not in imp.env and o.name not in imp.consts:
            raise ImportError_(f"graph output {o.name!r} is not produced by any node")
        outputs.append(imp.ref(o.name, onnx.NodeProto(op_type="Output", name=o.name)))
    if imp.opaque_reasons:
        for reason, count in sorted(imp.opaque_reasons.items()):
            log.info("kept %d node(s) opaque: %s", count, reason)
    try:
        g = Graph.from_arena(
            imp.nodes, imp.inputs, outputs, [o.name for o in graph.output], imp.params,
            name=name or _text(graph.name) or "model",
        )
    except GraphsubError as e:
        raise ImportError_(str(e)) from e
    from graphsub.frontends.splice import Origin, remember

    inits = {t.name for t in graph.initializer}
    free = any(not d.HasField("dim_value") for vi in graph.input if vi.name not in inits
               and vi.name not in (input_shapes or {}) for d in vi.type.tensor_type.shape.dim)
    remember(g, Origin.of(model, order, imp.origin, free))
    return g




def _text(value: str | bytes) -> str:
    """A string field of the file as text: protobuf hands one that is not valid UTF-8 (a damaged file) as bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

__all__ = ["FOLD_LIMIT", "MIN_OPSET", "from_onnx"]
