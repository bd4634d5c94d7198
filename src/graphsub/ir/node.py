"""Hash-consed operator signatures and nodes.

Two interned, immutable value types make up every graph:

* :class:`OpSig` -- an operator application *without* its producers: op name, canonical
  attributes and input types.  Creating one runs the OpDef's validation and shape inference
  exactly once per distinct signature (TASO's ``get_or_create_*`` op cache), so
  ``sig.out_types`` is free afterwards and cost models can key their caches on the signature.
* :class:`Node` -- a signature plus its inputs, each a :class:`Ref` ``(node id, output
  index)``.  Ids are graph-local arena slots (see :mod:`graphsub.ir.graph`), which is what
  lets a substitution replace a node without rebuilding its descendants.

Both are interned: constructing an equal value returns the identical object, so equality is
identity and hashing is O(1).

>>> a = make_sig("input", {"name": "x", "shape": (1, 4), "dtype": "float32"}, ())
>>> b = make_sig("input", {"name": "x", "shape": [1, 4]}, ())
>>> a is b, a.out_types
(True, (f32[1,4],))
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from graphsub.errors import ShapeError
from graphsub.ops.registry import OpDef, get_op
from graphsub.ops.types import Attrs, TensorType, stable_digest


class Ref(NamedTuple):
    """A reference to output ``index`` of node ``node`` (an id in the graph's arena)."""

    node: int
    index: int = 0  # type: ignore[assignment]  # shadows tuple.index on purpose: (node, output index)

    def __repr__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}#{self.index}"


class OpSig:
    """Interned operator signature: ``(op, attrs, in_types) -> out_types``.

    Attributes
    ----------
    op, attrs, in_types, out_types:
        the signature; ``attrs`` is canonical (schema defaults filled in).
    attr:
        read-only dict view of ``attrs``.
    digest:
        stable 64-bit digest of ``(op, attrs, in_types)``; identical across processes.
    opdef:
        the registry record of ``op``.
    """

    __slots__ = ("__weakref__", "attr", "attrs", "digest", "in_types", "op", "opdef", "out_types")

    op: str
    attrs: Attrs
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    attr: Mapping[str, Any]
    digest: int
    opdef: OpDef

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs)
        return f"OpSig({self.op}[{attrs}] {list(self.in_types)} -> {list(self.out_types)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (make_sig, (self.op, dict(self.attrs), self.in_types))


_SIGS: weakref.WeakValueDictionary[tuple[Any, ...], OpSig] = weakref.WeakValueDictionary()


def make_sig(op: str, attrs: Mapping[str, Any], in_types: Sequence[TensorType]) -> OpSig:
    """The interned signature of ``op`` applied to inputs of ``in_types``.

    Validates arity and attributes, fills attribute defaults and runs shape inference
    (raising :class:`~graphsub.errors.ShapeError` / ``AttrError`` with the op name).
    """
    in_types = tuple(in_types)
    raw_key = (op, tuple(sorted(attrs.items())) if attrs else (), in_types)
    try:
        hit = _SIGS.get(raw_key)  # fast path for already-canonical attrs
    except TypeError:  # unhashable attribute values (lists): canonicalise first
        hit = None
    if hit is not None:
        return hit
    opdef = get_op(op)
    opdef.check_arity(len(in_types))
    cattrs = opdef.canonical_attrs(attrs)
    if opdef.canonicalize is not None:
        # malformed inputs make canonicalisation fail: shape inference reports the problem
        with contextlib.suppress(ValueError, IndexError, KeyError, TypeError):
            cattrs = opdef.canonical_attrs(opdef.canonicalize(dict(cattrs), in_types))
    key = (op, cattrs, in_types)
    hit = _SIGS.get(key)
    if hit is not None:
        return hit
    view = MappingProxyType(dict(cattrs))
    try:
        out_types = tuple(opdef.infer(in_types, view))
    except ShapeError:
        raise
    except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as e:
        raise ShapeError(f"{op}: cannot infer output types for inputs {list(in_types)}: {e}") from e
    for t in out_types:
        if not isinstance(t, TensorType):
            raise ShapeError(f"{op}: inference returned {t!r}, not a TensorType")
        if any(d < 0 for d in t.shape):
            raise ShapeError(f"{op}: inferred negative dimension {t} from inputs {list(in_types)}")
    sig = object.__new__(OpSig)
    sig.op = op
    sig.attrs = cattrs
    sig.in_types = in_types
    sig.out_types = out_types
    sig.attr = view
    sig.digest = stable_digest(op, cattrs, tuple((t.shape, t.dtype) for t in in_types))
    sig.opdef = opdef
    _SIGS[key] = sig
    if key != raw_key:
        with contextlib.suppress(TypeError):  # raw attrs may be unhashable (lists)
            _SIGS[raw_key] = sig
    return sig


class Node:
    """Interned node: a signature and the references feeding its inputs.

    ``Node(sig, inputs)`` always returns the same object for equal arguments; nodes are
    immutable (attribute assignment raises).  A node does not know its own id: ids belong
    to the graph arena that stores it.
    """

    __slots__ = ("__weakref__", "inputs", "sig")

    sig: OpSig
    inputs: tuple[Ref, ...]

    def __new__(cls, sig: OpSig, inputs: tuple[Ref, ...] = ()) -> Node:
        key = (sig, inputs)
        node = _NODES.get(key)
        if node is None:
            node = object.__new__(cls)
            object.__setattr__(node, "sig", sig)
            object.__setattr__(node, "inputs", inputs)
            _NODES[key] = node
        return node

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Node is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Node, (self.sig, self.inputs))

    @property
    def op(self) -> str:
        return self.sig.op

    @property
    def attr(self) -> Mapping[str, Any]:
        return self.sig.attr

    @property
    def out_types(self) -> tuple[TensorType, ...]:
        return self.sig.out_types

    @property
    def is_leaf(self) -> bool:
        return self.sig.opdef.leaf

    def __repr__(self) -> str:
        ins = ", ".join(map(repr, self.inputs))
        return f"Node({self.sig.op}({ins}) -> {list(self.sig.out_types)})"


_NODES: weakref.WeakValueDictionary[tuple[OpSig, tuple[Ref, ...]], Node] = (
    weakref.WeakValueDictionary()
)

__all__ = ["Node", "OpSig", "Ref", "make_sig"]
