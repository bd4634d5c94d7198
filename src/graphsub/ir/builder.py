"""The builder: write graphs (models, and later rule patterns) as Python expressions.

Every registered op is available as a method (``b.conv2d(x, w, strides=(2, 2))``), and values
support ``+ - * / @``.  Multi-output ops (``split``) return a tuple of values.

>>> b = Builder("mlp")
>>> x = b.input("x", (8, 16))
>>> w1, w2 = b.weight("w1", (16, 32)), b.weight("w2", (32, 4))
>>> y = b.matmul(b.matmul(x, w1, act="relu"), w2)
>>> g = b.build(y)
>>> g.num_ops, y.shape
(2, (8, 4))
>>> halves = b.split(x, axis=1, sizes=(8, 8))
>>> [h.shape for h in halves]
[(8, 8), (8, 8)]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import GraphError
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, Ref, make_sig
from graphsub.ops.registry import REGISTRY
from graphsub.ops.types import TensorType, dtype_of, make_type


class Arithmetic:
    """Infix operators for values under construction: ``a + b``, ``a - b``, ``a * b``, ``a / b`` and ``a @ b``
    (and their reflected forms) add the builder's ``add`` / ``sub`` / ``mul`` / ``div`` / ``matmul`` op with default
    attributes.  One definition for graph values (:class:`Value`), pattern values
    (:class:`~graphsub.rules.pattern.PValue`) and target values (:class:`~graphsub.rules.apply.TValue`): a subclass
    only needs a ``builder`` with ``op1(op_name, *inputs)``."""

    __slots__ = ()
    builder: Any

    def __add__(self, other: Any) -> Any:
        return self.builder.op1("add", self, other)

    def __radd__(self, other: Any) -> Any:
        return self.builder.op1("add", other, self)

    def __sub__(self, other: Any) -> Any:
        return self.builder.op1("sub", self, other)

    def __rsub__(self, other: Any) -> Any:
        return self.builder.op1("sub", other, self)

    def __mul__(self, other: Any) -> Any:
        return self.builder.op1("mul", self, other)

    def __rmul__(self, other: Any) -> Any:
        return self.builder.op1("mul", other, self)

    def __truediv__(self, other: Any) -> Any:
        return self.builder.op1("div", self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return self.builder.op1("div", other, self)

    def __matmul__(self, other: Any) -> Any:
        return self.builder.op1("matmul", self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return self.builder.op1("matmul", other, self)


class Value(Arithmetic):
    """A handle on one output of a node being built."""

    __slots__ = ("builder", "ref", "type")

    def __init__(self, builder: Builder, ref: Ref, type_: TensorType):
        self.builder = builder
        self.ref = ref
        self.type = type_

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def dim(self, i: int) -> int:
        return self.type.shape[i]

    @property
    def node(self) -> Node:
        return self.builder.nodes[self.ref.node]

    def __repr__(self) -> str:
        return f"Value({self.ref!r}: {self.type})"


class Builder:
    """Mutable graph construction; :meth:`build` freezes it into an immutable Graph."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: dict[int, Node] = {}
        self.params: dict[str, np.ndarray] = {}
        self.inputs: list[int] = []
        self._names: set[str] = set()
        self._next = 0
        self._consumed: set[Ref] = set()
        self._order: list[Value] = []

    # ------------------------------------------------------------------ leaves
    def _leaf(self, op: str, name: str, t: TensorType) -> Value:
        if name in self._names:
            raise GraphError(f"{self.name}: a leaf named {name!r} already exists")
        self._names.add(name)
        sig = make_sig(op, {"name": name, "shape": t.shape, "dtype": t.dtype}, ())
        nid = self._next
        self._next += 1
        self.nodes[nid] = Node(sig, ())
        return Value(self, Ref(nid, 0), t)

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Value:
        """A graph input (runtime data) of static shape."""
        v = self._leaf("input", name, make_type(shape, dtype))
        self.inputs.append(v.ref.node)
        return v

    def weight(
        self,
        name: str,
        shape: Sequence[int] | None = None,
        data: np.ndarray | None = None,
        dtype: str = "float32",
    ) -> Value:
        """A weight/constant: pass ``data`` (shape taken from it) or just a ``shape``."""
        if data is not None:
            arr = np.asarray(data)
            if shape is not None and tuple(shape) != arr.shape:
                raise GraphError(f"weight {name!r}: shape {tuple(shape)} != data shape {arr.shape}")
            v = self._leaf("weight", name, make_type(arr.shape, dtype_of(arr)))
            self.params[name] = arr
            return v
        if shape is None:
            raise GraphError(f"weight {name!r}: give a shape or data")
        return self._leaf("weight", name, make_type(shape, dtype))

    def const(self, name: str, value: Any, dtype: str | None = None) -> Value:
        """A weight holding ``value`` (a python number/list or array)."""
        arr = np.asarray(value, dtype=dtype)
        return self.weight(name, data=arr)

    # ------------------------------------------------------------------ ops
    def op_multi(self, op: str, *inputs: Value, **attrs: Any) -> tuple[Value, ...]:
        """Add ``op(*inputs, **attrs)``; returns one value per output."""
        for v in inputs:
            if not isinstance(v, Value) or v.builder is not self:
                raise GraphError(f"{op}: inputs must be values of this builder, got {v!r}")
        sig = make_sig(op, attrs, tuple(v.type for v in inputs))
        if sig.opdef.leaf:
            raise GraphError(f"use Builder.input()/weight() for {op}")
        nid = self._next
        self._next += 1
        refs = tuple(v.ref for v in inputs)
        self.nodes[nid] = Node(sig, refs)
        self._consumed.update(refs)
        outs = tuple(Value(self, Ref(nid, i), t) for i, t in enumerate(sig.out_types))
        self._order.extend(outs)
        return outs

    def op1(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        """Add a single-output op and return its value."""
        outs = self.op_multi(op, *inputs, **attrs)
        if len(outs) != 1:
            raise GraphError(f"{op} has {len(outs)} outputs; use op_multi()")
        return outs[0]

    def op(self, op: str, *inputs: Value, **attrs: Any) -> Value | tuple[Value, ...]:
        """Add an op; a single-output op returns its Value, a multi-output op a tuple."""
        outs = self.op_multi(op, *inputs, **attrs)
        return outs[0] if len(outs) == 1 else outs

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in REGISTRY and not REGISTRY[name].leaf:
            def call(*inputs: Value, **attrs: Any) -> Any:
                return self.op(name, *inputs, **attrs)

            call.__name__ = name
            call.__doc__ = REGISTRY[name].doc
            return call
        raise AttributeError(f"Builder has no attribute or op {name!r}")

    def dangling(self) -> list[Value]:
        """Op outputs nobody consumes, in creation order (TASO's implicit graph outputs)."""
        return [v for v in self._order if v.ref not in self._consumed]

    # ------------------------------------------------------------------ freeze
    def build(
        self,
        outputs: Value | Sequence[Value] | Mapping[str, Value] | None = None,
        name: str | None = None,
    ) -> Graph:
        """Freeze into a Graph with the given outputs (default: :meth:`dangling`).

        Nodes that no output reaches are dropped; all inputs are kept.
        """
        if outputs is None:
            outputs = self.dangling()
        if isinstance(outputs, Value):
            outs, names = [outputs], None
        elif isinstance(outputs, Mapping):
            names = list(outputs.keys())
            outs = list(outputs.values())
        else:
            outs, names = list(outputs), None
        if not outs:
            raise GraphError(f"{self.name}: a graph needs at least one output")
        return Graph.from_arena(
            self.nodes,
            self.inputs,
            [v.ref for v in outs],
            names,
            self.params,
            name=name or self.name,
        )


__all__ = ["Builder", "Value"]
