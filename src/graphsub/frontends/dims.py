"""Symbolic dimensions of a model's interface, kept symbolic in the models graphsub writes.

graphsub's IR has static shapes: the import fixes every symbolic dimension of an input (ONNX ``dim_param``, e.g. a
dynamic batch ``"batch"``) to what ``--input-shape`` says, or to 1.  A model exported from the IR then accepts
only those sizes, which would silently narrow what the original accepts.  So every write of a model made from an
original with symbolic dimensions goes through :func:`keep_symbolic`:

* dimensions the user fixed (``input_shapes``, the ``--input-shape`` option) stay static, as asked;
* the other (*free*) ones get the original's ``dim_param`` names back on the inputs and outputs, and the result is
  run beside the original in onnxruntime on random inputs at two other sizes of the free dimensions (each one
  above the imported size, then the free dimensions at distinct sizes); it is returned only when it computes what
  the original computes there (the tolerances of :mod:`graphsub.equivalence`);
* otherwise -- a rewrite, or the import's folding of shape arithmetic (``Shape -> Gather -> Reshape``), baked the
  imported size into the graph -- :class:`~graphsub.errors.VerificationError` says so and names the
  ``--input-shape`` that gives a static model instead.  Nothing is written.
* An original that declares symbolic dimensions but itself fails at the other sizes (an export that baked its
  sizes) cannot be compared there: the output keeps the declared dims, with a warning.

The information comes from the original file itself (:func:`interface`: its inputs and outputs, read without the
weights), so the IR, its hashes and the search carry none of it.  A name that an input the user fixed gives a size
binds the same name in the other inputs (:func:`bound_params`; the import uses it too), so ``--input-shape
input_ids=1x128`` fixes an ``attention_mask`` declared ``["batch", "sequence"]`` as well.  A decoder's key/value
cache interface (:attr:`Interface.cache`, :mod:`graphsub.frontends.cache`) relates three names, total = past +
sequence: the import and the check at other sizes keep that sum.

>>> from onnx import TensorProto, helper
>>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
>>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
>>> interface(m).free
('batch',)
>>> interface(m, {"x": (4, 8)}).free, interface(m, {"x": (4, 8)}).bound
((), {'batch': 4})
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import onnx

from graphsub.errors import VerificationError

if TYPE_CHECKING:
    from graphsub.frontends.cache import CacheDims

log = logging.getLogger("graphsub")

#: a declared dimension: its static size, or its ``dim_param`` name ("" for an anonymous dimension)
Dim = int | str
Model = TypeVar("Model", onnx.ModelProto, bytes)
Source = str | os.PathLike[str] | bytes | onnx.ModelProto


def _dims(vi: onnx.ValueInfoProto) -> tuple[Dim, ...] | None:
    """The declared dims of a tensor value, None without a shape (or not a tensor)."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim)


def _graph_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in inits]


def declared(graph: onnx.GraphProto) -> tuple[tuple[tuple[str, tuple[Dim, ...] | None], ...],
                                               tuple[tuple[str, tuple[Dim, ...] | None], ...]]:
    """The declared ``(name, dims)`` of the graph's inputs (initializers left out) and outputs."""
    return (tuple((vi.name, _dims(vi)) for vi in _graph_inputs(graph)),
            tuple((vi.name, _dims(vi)) for vi in graph.output))


def bound_params(graph: onnx.GraphProto, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """``dim_param`` name -> size, for the names the inputs in ``input_shapes`` declare (the first input giving a
    name a size wins)."""
    bound: dict[str, int] = {}
    for vi in _graph_inputs(graph):
        dims = _dims(vi)
        if vi.name not in input_shapes or dims is None:
            continue
        for d, size in zip(dims, input_shapes[vi.name], strict=False):
            if isinstance(d, str) and d:
                bound.setdefault(d, int(size))
    return bound


@dataclass(frozen=True)
class Metadata:
    """What a model says of itself: ``metadata_props`` (key, value pairs in order), ``doc_string``, ``model_version``,
    ``domain``."""

    props: tuple[tuple[str, str], ...] = ()
    doc_string: str = ""
    model_version: int = 0
    domain: str = ""

    @classmethod
    def of(cls, model: onnx.ModelProto) -> Metadata:
        return cls(tuple((p.key, p.value) for p in model.metadata_props), model.doc_string, model.model_version,
                   model.domain)

    def __bool__(self) -> bool:
        return bool(self.props or self.doc_string or self.model_version or self.domain)


@dataclass(frozen=True)
class Interface:
    """The declared inputs and outputs of a model (``(name, dims)`` pairs; dims None where no shape is declared),
    the shapes the user gave inputs and the ``dim_param`` names they bind (:func:`bound_params`), and the model's own
    description (``metadata``: its ``metadata_props``, ``doc_string``, ``model_version`` and ``domain``, which a
    drop-in replacement keeps: :func:`with_metadata`)."""

    inputs: tuple[tuple[str, tuple[Dim, ...] | None], ...]
    outputs: tuple[tuple[str, tuple[Dim, ...] | None], ...]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    bound: dict[str, int] = field(default_factory=dict)
    metadata: Metadata = field(default_factory=lambda: Metadata())
    #: initializers the original also lists as graph inputs (IR version 3's style, opset 9 exports): overridable
    #: defaults that graphsub reads as the weights they are, so an optimized model keeps them as weights only
    overridable: tuple[str, ...] = ()

    @property
    def fixed(self) -> tuple[str, ...]:
        """The inputs the user gave shapes."""
        return tuple(self.shapes)

    def free_axes(self, name: str) -> tuple[int, ...]:
        """The axes of input ``name`` that are symbolic and not fixed by the user."""
        if name in self.fixed:
            return ()
        dims = dict(self.inputs).get(name) or ()
        return tuple(a for a, d in enumerate(dims) if isinstance(d, str) and (not d or d not in self.bound))

    def free_key(self, name: str, axis: int) -> str:
        """The name of a free input dimension: its ``dim_param``, or ``NAME[axis]`` when anonymous."""
        d = dict(self.inputs)[name]
        assert d is not None
        return str(d[axis]) or f"{name}[{axis}]"

    @property
    def free(self) -> tuple[str, ...]:
        """The free symbolic dimensions of the inputs (see :meth:`free_key`), in declaration order."""
        keys = [self.free_key(n, a) for n, _ in self.inputs for a in self.free_axes(n)]
        return tuple(dict.fromkeys(keys))

    @property
    def cache(self) -> CacheDims | None:
        """The dimension names of a key/value cache interface (past + sequence = total), None without one."""
        from graphsub.frontends.cache import cache_dims

        return cache_dims(self.inputs, self.outputs)

    @property
    def free_outputs(self) -> bool:
        """Whether an output declares a named symbolic dimension that no input declares: one known only at run time
        (a Loop's iteration count, NonZero's count), which a written model declares as the original does."""
        on_inputs = {d for _, dims in self.inputs for d in dims or () if isinstance(d, str)}
        return any(isinstance(d, str) and d and d not in on_inputs and d not in self.bound
                   for _, dims in self.outputs for d in dims or ())

    @property
    def fixed_dims(self) -> dict[str, int]:
        """The symbolic dimensions the user fixed: name (``NAME[axis]`` when anonymous) -> size."""
        out = dict(self.bound)
        for name, dims in self.inputs:
            for a, d in enumerate(dims or ()):
                if name in self.shapes and isinstance(d, str) and not d and a < len(self.shapes[name]):
                    out[f"{name}[{a}]"] = self.shapes[name][a]
        return out

    def summary(self) -> dict[str, Any]:
        """For ``--json``: the symbolic dimensions kept symbolic and those fixed (name -> size)."""
        return {"kept": list(self.free), "fixed": self.fixed_dims}


def interface(original: Source, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Interface:
    """The :class:`Interface` of ``original`` (a path, serialized bytes or a ModelProto; a file is read without its
    weights) with ``input_shapes`` as given to the import."""
    shapes = dict(input_shapes or {})
    if isinstance(original, onnx.ModelProto):
        model = original
    elif isinstance(original, bytes):
        model = onnx.load_from_string(original)
    else:
        model = onnx.load(os.fspath(original), load_external_data=False)
    g = model.graph
    inputs, outputs = declared(g)
    return Interface(
        inputs=inputs,
        outputs=outputs,
        shapes={n: tuple(int(d) for d in v) for n, v in shapes.items() if any(vi.name == n for vi in g.input)},
        bound=bound_params(g, shapes),
        metadata=Metadata.of(model),
        overridable=overridable_inputs(g),
    )


#: the sizes free symbolic dims are imported at by ``optimize`` unless ``--sizes`` says otherwise, in declaration
#: order: distinct and never 1, so that no rewrite relies on a size that varies (a transpose of unit dims read as a
#: reshape, a broadcast of a 1) and every symbolic size can be told from the others when a reshape target is
#: rewritten in symbols (:func:`graphsub.frontends.splice.resymbolize`)
GENERIC_SIZES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47)


def import_sizes(iface: Interface, given: Mapping[str, int] | None = None) -> dict[str, int]:
    """The size each free named symbolic dim of ``iface`` is imported at: ``given`` (name -> size), else the next of
    :data:`GENERIC_SIZES` (a key/value cache's total length is left out: it is past + sequence).  A name in
    ``given`` that is not a free symbolic dim raises ValueError.

    >>> from graphsub.frontends.dims import Interface
    >>> iface = Interface(inputs=(("ids", ("batch", "seq")), ("mask", ("batch", "seq"))), outputs=())
    >>> import_sizes(iface), import_sizes(iface, {"seq": 128})
    ({'batch': 2, 'seq': 3}, {'batch': 2, 'seq': 128})
    """
    given = dict(given or {})
    unknown = ", ".join(repr(n) for n in given if n not in iface.free)
    if unknown:
        raise ValueError(f"sizes name {unknown}, not a free symbolic dimension of the model's inputs "
                         f"({', '.join(iface.free) or 'none'})")
    cache = iface.cache
    names = [n for n in iface.free if "[" not in n and not (cache is not None and n == cache.total)]
    generic = iter(GENERIC_SIZES)
    return {n: given[n] if n in given else next(generic, 2) for n in names}


def overridable_inputs(graph: onnx.GraphProto) -> tuple[str, ...]:
    """The initializers ``graph`` also lists as inputs, in input order (a caller may feed them, overriding the stored
    value; models of IR version < 4 had to list every weight so)."""
    inits = {t.name for t in graph.initializer}
    return tuple(vi.name for vi in graph.input if vi.name in inits)


def with_metadata(candidate: Model, metadata: Metadata) -> Model:
    """``candidate`` (a ModelProto or serialized bytes, in the same form) with the original's ``metadata``: its
    ``metadata_props`` first (a key the candidate also has takes the original's value; the candidate's other keys
    follow), its ``doc_string``, ``model_version`` and ``domain`` where it has them. ``candidate`` itself when the
    original has none or the candidate already says the same."""
    if not metadata:
        return candidate
    parsed: onnx.ModelProto = onnx.load_from_string(candidate) if isinstance(candidate, bytes) else candidate
    if Metadata.of(parsed) == metadata:
        return candidate
    model = onnx.ModelProto()
    model.CopyFrom(parsed)  # the caller's proto is not changed
    keys = {k for k, _ in metadata.props}
    props: dict[str, str] = dict(metadata.props)
    for entry in parsed.metadata_props:
        if entry.key not in keys:
            props[entry.key] = entry.value
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, props)
    for name in ("doc_string", "model_version", "domain"):
        value = getattr(metadata, name)
        if value:
            setattr(model, name, value)
    return as_candidate(model, candidate)


def _set_dims(vi: onnx.ValueInfoProto, dims: Sequence[Dim], axes: Sequence[int], what: str) -> None:
    """Make ``axes`` of ``vi`` symbolic as in ``dims`` (the original's declaration)."""
    shape = vi.type.tensor_type.shape
    if not vi.type.tensor_type.HasField("shape") or len(shape.dim) != len(dims):
        have = len(shape.dim) if vi.type.tensor_type.HasField("shape") else "no"
        raise VerificationError(f"{what} {vi.name!r} has {have} dimensions where the original declares {len(dims)}")
    for a in axes:
        dim = shape.dim[a]
        dim.Clear()
        if dims[a]:
            dim.dim_param = str(dims[a])


def restore(model: onnx.ModelProto, iface: Interface) -> bool:
    """Give the inputs and outputs of ``model`` (in place) the free symbolic dims of ``iface``: the free input axes,
    and every output axis the original declares symbolic except those named by a fixed name (an output the original
    declares without a shape gets its rank only, no sizes: onnx.checker wants a shape on graph outputs); drops the
    graph's ``value_info`` (shape hints at the static sizes). Whether anything was free (an input dim, or an output
    dim: :attr:`Interface.free_outputs`)."""
    if not iface.free and not iface.free_outputs:
        return False
    orig_in = dict(iface.inputs)
    for vi in _graph_inputs(model.graph):
        dims, axes = orig_in.get(vi.name), iface.free_axes(vi.name)
        if dims is not None and axes:
            _set_dims(vi, dims, axes, "input")
    orig_out = dict(iface.outputs)
    by_name = all(vi.name in orig_out for vi in model.graph.output)
    if not by_name and len(model.graph.output) != len(iface.outputs):
        raise VerificationError(f"the model has {len(model.graph.output)} outputs, the original {len(iface.outputs)}")
    for k, vi in enumerate(model.graph.output):
        dims = orig_out[vi.name] if by_name else iface.outputs[k][1]
        if dims is None:  # the original declares no shape: the output declares its rank only (not the sizes)
            for dim in vi.type.tensor_type.shape.dim:
                dim.Clear()
            continue
        out_axes = [a for a, d in enumerate(dims) if isinstance(d, str) and (not d or d not in iface.bound)]
        if out_axes:
            _set_dims(vi, dims, out_axes, "output")
    del model.graph.value_info[:]
    return True


def restored(candidate: Model, iface: Interface) -> onnx.ModelProto:
    """A copy of ``candidate`` (a ModelProto or serialized bytes) with the free symbolic dims of ``iface`` restored
    (:func:`restore`)."""
    model = onnx.ModelProto()
    if isinstance(candidate, bytes):
        model.ParseFromString(candidate)
    else:
        model.CopyFrom(candidate)
    restore(model, iface)
    return model


def as_candidate(model: onnx.ModelProto, like: Model) -> Model:
    """``model`` in the form of ``like``: serialized when ``like`` is bytes."""
    return model.SerializeToString() if isinstance(like, bytes) else model


def source_for_session(original: Source) -> bytes | str:
    """``original`` as :func:`graphsub.frontends.ort.make_session` takes it (serialized bytes or a path)."""
    if isinstance(original, onnx.ModelProto):
        return original.SerializeToString()
    return original if isinstance(original, bytes) else os.fspath(original)


def as_proto(original: Source) -> onnx.ModelProto:
    """``original`` (a path, serialized bytes or a ModelProto) as a ModelProto, weights included (a file's
    external data held as memory maps: :func:`graphsub.frontends.shared.hold_external`)."""
    if isinstance(original, onnx.ModelProto):
        return original
    if isinstance(original, bytes):
        return onnx.load_from_string(original)
    from graphsub.frontends.shared import hold_external

    model = onnx.load(os.fspath(original), load_external_data=False)
    hold_external(model, Path(os.fspath(original)).parent)
    return model


def display_name(original: Source) -> str:
    """A file's name, else "the model"."""
    return Path(os.fspath(original)).name if isinstance(original, str | os.PathLike) else "the model"


__all__ = ["GENERIC_SIZES", "Dim", "Interface", "Metadata", "Model", "Source", "as_candidate", "as_proto",
           "bound_params", "declared", "display_name", "import_sizes", "interface", "restore", "restored",
           "source_for_session", "with_metadata"]
