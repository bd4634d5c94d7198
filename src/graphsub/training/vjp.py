"""Vector-Jacobian products: one rule per operator, written with ordinary IR ops.

A rule gets the builder of the training graph under construction (through :class:`VjpCtx`), the values of the
node's inputs and outputs in that graph, the gradients flowing into its outputs (``None`` for an output nothing
downstream differentiates), and the node's attributes. It returns one gradient per input: a
:class:`~graphsub.ir.builder.Value` of the input's type, or ``None`` where the input gets no gradient (integer
indices, shape arguments, or an input the rule does not differentiate). JAX writes its transpose rules the same
way, per primitive, so the backward pass is a graph of the same ops as the forward one, and every rule, search
and cost model applies to it unchanged.

Rules register with :func:`register_vjp`; :data:`VJPS` maps op name -> rule. Ops that have no rule make
:func:`graphsub.training.training_graph` refuse the graph, naming them.

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> ctx = VjpCtx(b)
>>> x = b.input("x", (2, 3))
>>> ctx.unbroadcast(x, (1, 3)).shape, ctx.unbroadcast(x, (3,)).shape
((1, 3), (3,))
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import GraphsubError
from graphsub.ir.builder import Builder, Value

Grad = Value | None
VjpFn = Callable[["VjpCtx", Sequence[Value], Sequence[Value], Sequence[Grad], Mapping[str, Any]], Sequence[Grad]]

#: op name -> its vector-Jacobian product
VJPS: dict[str, VjpFn] = {}

#: ops whose outputs never carry a gradient (integer results, or values that do not depend on the inputs'
#: values); the reverse sweep stops at them without needing a rule
NO_GRADIENT_OPS = frozenset({"shape", "isnan", "const_one", "const_imm", "const_iconv", "const_pool"})


#: ops whose output is their input reinterpreted with another shape (row-major order unchanged)
_VIEW_OPS = frozenset({"reshape", "flatten", "squeeze", "unsqueeze"})


#: the argument types of a rule
Ins = Sequence[Value]
Outs = Sequence[Value]
GOuts = Sequence[Grad]
Attrs = Mapping[str, Any]


def out_grad(gouts: GOuts, i: int = 0) -> Value:
    """The gradient flowing into output ``i`` (the sweep calls a rule only when one of its outputs has one; a
    single-output rule can rely on it)."""
    g = gouts[i]
    assert g is not None, "the sweep calls a single-output rule only with a gradient"
    return g


class GradientError(GraphsubError):
    """The graph cannot be differentiated: an op has no gradient rule, or the loss is not a float scalar."""


def register_vjp(*ops: str) -> Callable[[VjpFn], VjpFn]:
    """Decorator: ``fn`` is the vector-Jacobian product of every op in ``ops``."""

    def deco(fn: VjpFn) -> VjpFn:
        for op in ops:
            if op in VJPS:
                raise ValueError(f"VJP of {op!r} registered twice")
            VJPS[op] = fn
        return fn

    return deco


class VjpCtx:
    """What a rule may use to build its gradient: the builder ``b`` and a few helpers."""

    def __init__(self, b: Builder, prefix: str = "grad_const") -> None:
        self.b = b
        self._prefix = prefix
        self._ids = itertools.count()
        self._consts: dict[tuple[str, tuple[int, ...], bytes], Value] = {}

    # -- constants ------------------------------------------------------------------------------------------
    def const(self, value: Any, dtype: str = "float32") -> Value:
        """A constant (a weight with data); equal constants are shared."""
        arr = np.asarray(value, dtype=dtype)
        key = (str(arr.dtype), arr.shape, arr.tobytes())
        hit = self._consts.get(key)
        if hit is None:
            hit = self.b.weight(f"{self._prefix}_{next(self._ids)}", data=arr)
            self._consts[key] = hit
        return hit

    def scalar(self, value: float, like: Value) -> Value:
        """A rank-0 constant of ``like``'s dtype."""
        return self.const(np.asarray(value), like.dtype)

    def zeros(self, shape: Sequence[int], dtype: str = "float32") -> Value:
        """Zeros of ``shape``: a scalar zero expanded (no large constant is stored)."""
        z = self.const(np.zeros((), dtype=dtype), dtype)
        return self.b.op1("expand", z, shape=tuple(shape)) if tuple(shape) else z

    # -- arithmetic -----------------------------------------------------------------------------------------
    def op(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        """A single-output op."""
        return self.b.op1(op, *inputs, **attrs)

    def scale(self, x: Value, factor: float) -> Value:
        """``x * factor`` (``x`` itself when the factor is 1)."""
        if factor == 1.0:
            return x
        if factor == -1.0:
            return self.b.op1("neg", x)
        return self.b.op1("mul", x, self.scalar(factor, x))

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        """``x`` reshaped (itself when the shape already matches); a reshape of a reshape reshapes the original
        value, so that no chain of views builds up."""
        shape = tuple(shape)
        while x.shape != shape:
            node = self.b.nodes[x.ref.node]
            if node.sig.op not in _VIEW_OPS:
                return self.b.op1("reshape", x, shape=shape)
            src = node.inputs[0]
            x = Value(self.b, src, self.b.nodes[src.node].sig.out_types[src.index])
        return x

    def unbroadcast(self, g: Value, shape: Sequence[int]) -> Value:
        """Sum ``g`` over the axes that broadcasting added or stretched so that it gets ``shape`` (the gradient of
        an operand that was broadcast)."""
        shape = tuple(shape)
        if g.shape == shape:
            return g
        lead = len(g.shape) - len(shape)
        stretched = [lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1]
        if lead or stretched:
            # keepdims=False drops the added axes; keep the stretched ones unless they are all there is, so
            # that the common cases (a bias, a broadcast batch) need no reshape after the sum
            g = self.b.op1("reduce_sum", g, axes=(*range(lead), *stretched), keepdims=not lead)
        return self.reshape(g, shape)

    def add(self, a: Grad, b: Grad) -> Grad:
        """``a + b`` where either may be missing."""
        if a is None:
            return b
        if b is None:
            return a
        return self.b.op1("add", a, b)

    def transpose_last2(self, x: Value) -> Value:
        """Swap the last two axes."""
        r = len(x.shape)
        perm = (*range(r - 2), r - 1, r - 2)
        return self.b.op1("transpose", x, perm=perm)


def vjp_of(op: str) -> VjpFn:
    """The rule of ``op`` (GradientError if there is none)."""
    try:
        return VJPS[op]
    except KeyError:
        raise GradientError(f"no gradient rule for op {op!r}") from None


__all__ = ["NO_GRADIENT_OPS", "VJPS", "Attrs", "GOuts", "Grad", "GradientError", "Ins", "Outs", "VjpCtx", "VjpFn",
           "out_grad", "register_vjp", "vjp_of"]
