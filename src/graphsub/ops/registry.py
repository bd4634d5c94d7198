"""The operator registry: one :class:`OpDef` record per operator.

An ``OpDef`` holds everything graphsub knows about an operator, in one place:

* its attribute schema (:class:`AttrSpec`: type, default, allowed values),
* shape/dtype inference (``infer``),
* a numpy reference implementation (``reference``),
* FLOPs and bytes moved (``flops`` / ``bytes_moved``),
* its ONNX mapping: importers keyed by ONNX ``op_type`` and one exporter,
* sample configurations (``samples``) on which the test-suite checks the reference
  implementation against onnxruntime through the exporter.

The ONNX mapping is written against two small protocols (:class:`OnnxImportCtx`,
:class:`OnnxExportCtx`) that the ONNX frontend implements; this module never imports onnx.

Example (how an op family registers an operator)::

    register(OpDef(
        name="relu", family="elementwise", doc="max(x, 0)",
        inputs=("x",), attrs=(),
        infer=same_as_input, reference=lambda xs, a: (np.maximum(xs[0], 0),),
        flops=flops_per_output(1),
        onnx_import={"Relu": simple_import("relu")},
        onnx_export=simple_export("Relu"),
        samples=(Sample((f32(2, 3),)),),
    ))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from graphsub.errors import AttrError, ShapeError
from graphsub.ops.types import DTYPES, Attrs, TensorType, freeze_value

# ----------------------------------------------------------------------------- attributes

REQUIRED: Any = object()  # sentinel: attribute without default

ATTR_KINDS = frozenset(
    {"int", "float", "str", "bool", "ints", "floats", "strs", "pads", "dtype", "bytes", "any"}
)


@dataclass(frozen=True)
class AttrSpec:
    """Schema of one attribute.

    ``kind`` is one of :data:`ATTR_KINDS`; ``pads`` accepts ``"SAME"``, ``"VALID"`` or four
    ints ``(top, left, bottom, right)``; ``choices`` restricts the allowed values.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    def coerce(self, op: str, value: Any) -> Any:
        """Validate and canonicalise ``value`` for this attribute (raises AttrError)."""
        v = freeze_value(value)
        k = self.kind
        ok = True
        if k == "int":
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif k == "float":
            if isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            ok = isinstance(v, float)
        elif k == "str":
            ok = isinstance(v, str)
        elif k == "bool":
            if isinstance(v, int) and v in (0, 1):
                v = bool(v)
            ok = isinstance(v, bool)
        elif k == "ints":
            ok = isinstance(v, tuple) and all(
                isinstance(x, int) and not isinstance(x, bool) for x in v
            )
        elif k == "floats":
            if isinstance(v, tuple):
                v = tuple(float(x) if isinstance(x, int) else x for x in v)
            ok = isinstance(v, tuple) and all(isinstance(x, float) for x in v)
        elif k == "strs":
            ok = isinstance(v, tuple) and all(isinstance(x, str) for x in v)
        elif k == "pads":
            if isinstance(v, str):
                v = v.upper()
                ok = v in ("SAME", "VALID")
            else:
                ok = isinstance(v, tuple) and len(v) == 4 and all(
                    isinstance(x, int) and x >= 0 for x in v
                )
        elif k == "dtype":
            ok = isinstance(v, str) and v in DTYPES
        elif k == "bytes":
            ok = isinstance(v, bytes)
        if not ok:
            raise AttrError(f"{op}: attribute {self.name!r} expects {k}, got {value!r}")
        if self.choices is not None and v not in self.choices:
            raise AttrError(
                f"{op}: attribute {self.name!r} must be one of {list(self.choices)}, got {v!r}"
            )
        return v


# ----------------------------------------------------------------------------- ONNX protocols


class Unsupported(Exception):
    """Raised by an ONNX importer when a node uses a feature the OpDef does not model.

    The frontend then keeps the node as an opaque node (it still round-trips untouched).
    """


@dataclass(frozen=True)
class Imported:
    """Result of an ONNX importer: IR op name, its attributes, which ONNX input positions
    become graph inputs of the IR node (the others were folded into attributes), and, where the
    IR op models only some of the node's outputs, the ONNX output position of each IR output
    (``None``: IR output ``k`` is ONNX output ``k``)."""

    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...] | None = None


class OnnxImportCtx(Protocol):
    """What an importer may ask about the ONNX node being imported."""

    op_type: str
    domain: str
    opset: int
    name: str
    num_inputs: int
    num_outputs: int

    def attr(self, name: str, default: Any = ...) -> Any:
        """Attribute value as python data (tensors as numpy); ``default`` if absent."""
        ...

    def has_input(self, i: int) -> bool:
        """Whether input position ``i`` exists and is not the empty string."""
        ...

    def input_type(self, i: int) -> TensorType: ...

    def const_input(self, i: int) -> np.ndarray | None:
        """Value of input ``i`` if it is a constant (initializer / folded), else None."""
        ...

    def output_used(self, i: int) -> bool:
        """Whether output ``i`` is present and consumed (or a graph output)."""
        ...


class OnnxExportCtx(Protocol):
    """What an exporter may do: emit ONNX nodes and constants."""

    opset: int

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
        """Append a node; returns its output names (fresh ones unless ``outputs`` given)."""
        ...

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        """Add an initializer holding ``array``; returns its value name."""
        ...


@dataclass(frozen=True)
class ExportNode:
    """The IR node handed to an exporter: value names and static information."""

    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    name: str = ""


AttrMap = Mapping[str, Any]
InferFn = Callable[[Sequence[TensorType], AttrMap], tuple[TensorType, ...]]
RefFn = Callable[[Sequence[np.ndarray], AttrMap], Sequence[np.ndarray]]
CostFn = Callable[[Sequence[TensorType], Sequence[TensorType], AttrMap], int]
ImportFn = Callable[[OnnxImportCtx], Imported]
ExportFn = Callable[[OnnxExportCtx, ExportNode], None]


def default_bytes(ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: AttrMap) -> int:
    """Bytes read + written, assuming each input and output crosses memory once."""
    return sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)


def zero_cost(ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: AttrMap) -> int:
    return 0


@dataclass(frozen=True)
class Sample:
    """A configuration on which the reference implementation is checked against onnxruntime.

    ``roles`` overrides random-data roles per input (see :attr:`OpDef.input_roles`).
    """

    in_types: tuple[TensorType, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] | None = None
    note: str = ""


#: Data roles used to generate meaningful random inputs: ``"any"`` (normal), ``"positive"``
#: (e.g. variances), ``"index:<k>"`` (integer indices in range of dimension ``k`` of input 0 along
#: the op's axis), ``"nonzero"`` (divisors), ``"unit"`` (in (0, 1]).
ROLES = ("any", "positive", "nonzero", "unit", "index")


@dataclass(frozen=True)
class OpDef:
    """Everything graphsub knows about one operator.  See the module docstring.

    Invariants (checked by ``tests/ops/test_registry.py``): every non-leaf OpDef has infer,
    reference, flops, bytes_moved, an exporter, at least one importer or ``onnx_import_note``
    explaining why not, and at least one sample that agrees with onnxruntime.
    """

    name: str
    family: str
    doc: str
    inputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...]
    infer: InferFn
    reference: RefFn | None
    flops: CostFn
    onnx_export: ExportFn | None
    onnx_import: Mapping[str, ImportFn] = field(default_factory=dict)
    bytes_moved: CostFn = default_bytes
    min_inputs: int | None = None  # default: len(inputs)
    variadic: bool = False  # last input may repeat
    samples: tuple[Sample, ...] = ()
    input_roles: tuple[str, ...] = ()
    #: leaf ops (input, weight) have no inputs and their value comes from outside the graph
    leaf: bool = False
    #: weight transforms (enlarge, merge_gconv) and constant generators: free at run time
    #: once folded, because they only ever see weights.
    weight_op: bool = False
    #: output 0 equals input 0 elementwise up to a monotone/pointwise map (used by rules)
    elementwise: bool = False
    onnx_import_note: str = ""
    #: rewrites equivalent attribute spellings into one canonical form, given the input types
    #: (e.g. pads "SAME" -> explicit, axis -1 -> rank-1); see graphsub.ops.common
    canonicalize: Callable[[dict[str, Any], Sequence[TensorType]], dict[str, Any]] | None = None
    _attr_index: Mapping[str, AttrSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_attr_index", MappingProxyType({a.name: a for a in self.attrs}))

    # -- arity ---------------------------------------------------------------------------
    @property
    def arity(self) -> tuple[int, int | None]:
        lo = len(self.inputs) if self.min_inputs is None else self.min_inputs
        hi = None if self.variadic else len(self.inputs)
        return lo, hi

    def check_arity(self, n: int) -> None:
        lo, hi = self.arity
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}..{hi}" if hi is not None and hi != lo else (f">={lo}" if hi is None else str(lo))
            raise ShapeError(f"{self.name}: expects {want} inputs, got {n}")

    # -- attributes ----------------------------------------------------------------------
    def canonical_attrs(self, attrs: Mapping[str, Any]) -> Attrs:
        """Validate ``attrs`` against the schema and fill defaults; sorted frozen tuple."""
        out: dict[str, Any] = {}
        for key in attrs:
            if key not in self._attr_index:
                known = ", ".join(self._attr_index) or "none"
                raise AttrError(f"{self.name}: unknown attribute {key!r} (known: {known})")
        for spec in self.attrs:
            if spec.name in attrs and attrs[spec.name] is not None:
                out[spec.name] = spec.coerce(self.name, attrs[spec.name])
            elif spec.default is REQUIRED:
                raise AttrError(f"{self.name}: missing required attribute {spec.name!r}")
            else:
                out[spec.name] = spec.default
        return tuple(sorted(out.items()))

    def role(self, i: int) -> str:
        if not self.input_roles:
            return "any"
        if i < len(self.input_roles):
            return self.input_roles[i]
        return self.input_roles[-1] if self.variadic else "any"


# ----------------------------------------------------------------------------- the registry

REGISTRY: dict[str, OpDef] = {}
#: (domain, onnx op_type) -> list of (OpDef name, importer); tried in registration order.
ONNX_IMPORTERS: dict[tuple[str, str], list[tuple[str, ImportFn]]] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an OpDef to the registry (names are unique)."""
    if opdef.name in REGISTRY:
        raise ValueError(f"op {opdef.name!r} registered twice")
    REGISTRY[opdef.name] = opdef
    for op_type, fn in opdef.onnx_import.items():
        domain, _, typ = op_type.rpartition("::")
        ONNX_IMPORTERS.setdefault((domain, typ), []).append((opdef.name, fn))
    return opdef


def get_op(name: str) -> OpDef:
    """The OpDef called ``name`` (raises ShapeError with the known names otherwise)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ShapeError(f"unknown op {name!r}; known ops: {', '.join(sorted(REGISTRY))}") from None


# ----------------------------------------------------------------------------- helpers for families


def f32(*shape: int) -> TensorType:
    """Shorthand used in samples: a float32 TensorType."""
    return TensorType(tuple(shape), "float32")


def i64(*shape: int) -> TensorType:
    return TensorType(tuple(shape), "int64")


def same_as_input(ins: Sequence[TensorType], attrs: AttrMap) -> tuple[TensorType, ...]:
    return (ins[0],)


def flops_per_output(k: int) -> CostFn:
    """FLOPs = k * number of output elements (summed over outputs)."""

    def fn(ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: AttrMap) -> int:
        return k * sum(t.numel for t in outs)

    return fn


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy/ONNX multidirectional broadcasting; ShapeError on mismatch."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"{op}: shapes {list(shapes)} are not broadcastable")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{op}: axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def simple_import(op: str, attr_names: Mapping[str, str] | None = None) -> ImportFn:
    """Importer for 1:1 ops: copies the listed ONNX attributes (onnx name -> IR name)."""

    def fn(ctx: OnnxImportCtx) -> Imported:
        attrs: dict[str, Any] = {}
        for onnx_name, ir_name in (attr_names or {}).items():
            v = ctx.attr(onnx_name, None)
            if v is not None:
                attrs[ir_name] = v
        return Imported(op, attrs, tuple(i for i in range(ctx.num_inputs) if ctx.has_input(i)))

    return fn


def simple_export(op_type: str, attr_names: Mapping[str, str] | None = None) -> ExportFn:
    """Exporter for 1:1 ops: copies the listed IR attributes (IR name -> ONNX name)."""

    def fn(ctx: OnnxExportCtx, node: ExportNode) -> None:
        attrs = {onnx: node.attrs[ir] for ir, onnx in (attr_names or {}).items()}
        ctx.emit(op_type, node.inputs, attrs, outputs=node.outputs)

    return fn


__all__ = [
    "ATTR_KINDS",
    "ONNX_IMPORTERS",
    "REGISTRY",
    "REQUIRED",
    "AttrSpec",
    "ExportNode",
    "Imported",
    "OnnxExportCtx",
    "OnnxImportCtx",
    "OpDef",
    "Sample",
    "Unsupported",
    "broadcast_shapes",
    "default_bytes",
    "f32",
    "flops_per_output",
    "get_op",
    "i64",
    "normalize_axis",
    "numel",
    "register",
    "same_as_input",
    "simple_export",
    "simple_import",
    "zero_cost",
]
