"""TASO's operator properties (SOSP'19 Table 2, plus concat associativity), written once, used twice.

Each :class:`Axiom` is an equation ``lhs == rhs`` over an *algebra* -- an object with one method
per operator (``ewadd``, ``matmul``, ``conv``, ...).  The same axiom is

* turned into a Z3 ``ForAll`` over uninterpreted tensors by :class:`~.smt.Z3Algebra`, to prove
  rules (:mod:`.smt`);
* evaluated on small concrete tensors with graphsub's numpy reference ops by
  :class:`NumpyAlgebra`, to check the axiom itself (:func:`check_axioms`) -- an axiom that
  is false on a concrete instance would make every proof using it worthless.

Operator vocabulary (parameters are ints): ``ewadd(x, y)``, ``ewmul(x, y)`` (equal shapes),
``smul(x, s)`` (``s`` a scalar), ``matmul(x, y)`` (2-D), ``transpose(x)`` (2-D), ``relu(x)``,
``conv(s, p, c, g, x, y)`` (stride ``s``, padding ``p`` in {SAME, VALID}, activation ``c`` in
{NONE, RELU}, ``g`` groups), ``pool_avg(k, s, p, x)`` / ``pool_max(k, s, p, x)`` (k x k,
average counting padding), ``concat(a, x, y)``, ``split0(a, n, m, t)`` / ``split1(...)``
(the two pieces of sizes ``n`` and ``m`` along axis ``a``), ``dim(a, x)``, ``enlarge(k, y)``,
constants ``cpool(k)``, ``iconv(k)``, ``imatmul()``, ``iewmul()``.  Grouped convolutions carry
their group count ``g``; axioms that only hold for dense convolutions say ``g == 1``.

>>> [a.name for a in AXIOMS][:3]
['ewadd_assoc', 'ewadd_comm', 'ewmul_assoc']
>>> all(r.ok for r in check_axioms(seed=0))
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.ops.conv import conv2d_ref
from graphsub.ops.registry import REGISTRY

SAME, VALID = 0, 1
NONE, RELU = 0, 2


@dataclass(frozen=True)
class Axiom:
    """``lhs(alg, **v) == rhs(alg, **v)`` for all tensors ``tensors`` and parameters ``params``;
    ``instances`` are the concrete shapes/parameters it is checked on."""

    name: str
    comment: str
    tensors: tuple[str, ...]
    params: tuple[str, ...]
    lhs: Callable[..., Any]
    rhs: Callable[..., Any]
    #: concrete instances: (tensor shapes, parameter values)
    instances: tuple[tuple[Mapping[str, tuple[int, ...]], Mapping[str, int]], ...] = field(default=())


def _ax(name: str, comment: str, tensors: str, params: str, lhs: Callable[..., Any], rhs: Callable[..., Any],
        instances: Sequence[tuple[Mapping[str, tuple[int, ...]], Mapping[str, int]]]) -> Axiom:
    return Axiom(name, comment, tuple(tensors.split()), tuple(params.split()), lhs, rhs, tuple(instances))


M2 = {"x": (2, 3), "y": (2, 3), "z": (2, 3)}
C4 = {"x": (1, 2, 5, 5), "y": (3, 2, 3, 3), "z": (3, 2, 3, 3)}

AXIOMS: tuple[Axiom, ...] = (
    _ax("ewadd_assoc", "ewadd is associative", "x y z", "", lambda A, x, y, z: A.ewadd(x, A.ewadd(y, z)),
        lambda A, x, y, z: A.ewadd(A.ewadd(x, y), z), [(M2, {})]),
    _ax("ewadd_comm", "ewadd is commutative", "x y", "", lambda A, x, y: A.ewadd(x, y),
        lambda A, x, y: A.ewadd(y, x), [(M2, {})]),
    _ax("ewmul_assoc", "ewmul is associative", "x y z", "", lambda A, x, y, z: A.ewmul(x, A.ewmul(y, z)),
        lambda A, x, y, z: A.ewmul(A.ewmul(x, y), z), [(M2, {})]),
    _ax("ewmul_comm", "ewmul is commutative", "x y", "", lambda A, x, y: A.ewmul(x, y),
        lambda A, x, y: A.ewmul(y, x), [(M2, {})]),
    _ax("ew_distrib", "distributivity", "x y z", "", lambda A, x, y, z: A.ewmul(A.ewadd(x, y), z),
        lambda A, x, y, z: A.ewadd(A.ewmul(x, z), A.ewmul(y, z)), [(M2, {})]),
    _ax("smul_assoc", "smul is associative", "x y w", "", lambda A, x, y, w: A.smul(A.smul(x, y), w),
        lambda A, x, y, w: A.smul(x, A.smul(y, w)), [({"x": (2, 3), "y": (), "w": ()}, {})]),
    _ax("smul_distrib", "distributivity", "x y w", "", lambda A, x, y, w: A.smul(A.ewadd(x, y), w),
        lambda A, x, y, w: A.ewadd(A.smul(x, w), A.smul(y, w)), [({"x": (2, 3), "y": (2, 3), "w": ()}, {})]),
    _ax("smul_ewmul", "operator commutativity", "x y w", "", lambda A, x, y, w: A.smul(A.ewmul(x, y), w),
        lambda A, x, y, w: A.ewmul(x, A.smul(y, w)), [({"x": (2, 3), "y": (2, 3), "w": ()}, {})]),
    _ax("transpose_inv", "transpose is its own inverse", "x", "", lambda A, x: A.transpose(A.transpose(x)),
        lambda A, x: x, [({"x": (2, 3)}, {})]),
    _ax("transpose_ewadd", "operator commutativity", "x y", "", lambda A, x, y: A.transpose(A.ewadd(x, y)),
        lambda A, x, y: A.ewadd(A.transpose(x), A.transpose(y)), [(M2, {})]),
    _ax("transpose_ewmul", "operator commutativity", "x y", "", lambda A, x, y: A.transpose(A.ewmul(x, y)),
        lambda A, x, y: A.ewmul(A.transpose(x), A.transpose(y)), [(M2, {})]),
    _ax("transpose_smul", "operator commutativity", "x w", "", lambda A, x, w: A.smul(A.transpose(x), w),
        lambda A, x, w: A.transpose(A.smul(x, w)), [({"x": (2, 3), "w": ()}, {})]),
    _ax("matmul_assoc", "matmul is associative", "x y z", "", lambda A, x, y, z: A.matmul(x, A.matmul(y, z)),
        lambda A, x, y, z: A.matmul(A.matmul(x, y), z), [({"x": (2, 3), "y": (3, 4), "z": (4, 2)}, {})]),
    _ax("matmul_smul", "matmul is linear", "x y w", "", lambda A, x, y, w: A.smul(A.matmul(x, y), w),
        lambda A, x, y, w: A.matmul(x, A.smul(y, w)), [({"x": (2, 3), "y": (3, 4), "w": ()}, {})]),
    _ax("matmul_ewadd", "matmul is linear", "x y z", "", lambda A, x, y, z: A.matmul(x, A.ewadd(y, z)),
        lambda A, x, y, z: A.ewadd(A.matmul(x, y), A.matmul(x, z)), [({"x": (2, 3), "y": (3, 4), "z": (3, 4)}, {})]),
    _ax("matmul_transpose", "matmul and transpose", "x y", "", lambda A, x, y: A.transpose(A.matmul(x, y)),
        lambda A, x, y: A.matmul(A.transpose(y), A.transpose(x)), [({"x": (2, 3), "y": (3, 4)}, {})]),
    _ax("conv_smul_move", "conv is bilinear", "x y w", "s p c g",
        lambda A, x, y, w, s, p, c, g: A.conv(s, p, c, g, A.smul(x, w), y),
        lambda A, x, y, w, s, p, c, g: A.conv(s, p, c, g, x, A.smul(y, w)),
        [({"x": (1, 2, 5, 5), "y": (3, 2, 3, 3), "w": ()}, {"s": 1, "p": SAME, "c": RELU, "g": 1})]),
    _ax("conv_smul_out", "conv is bilinear", "x y w", "s p g",
        lambda A, x, y, w, s, p, g: A.smul(A.conv(s, p, NONE, g, x, y), w),
        lambda A, x, y, w, s, p, g: A.conv(s, p, NONE, g, A.smul(x, w), y),
        [({"x": (1, 2, 5, 5), "y": (3, 2, 3, 3), "w": ()}, {"s": 2, "p": VALID, "g": 1})]),
    _ax("conv_ewadd_kernel", "conv is bilinear", "x y z", "s p g",
        lambda A, x, y, z, s, p, g: A.conv(s, p, NONE, g, x, A.ewadd(y, z)),
        lambda A, x, y, z, s, p, g: A.ewadd(A.conv(s, p, NONE, g, x, y), A.conv(s, p, NONE, g, x, z)),
        [(C4, {"s": 1, "p": SAME, "g": 1})]),
    _ax("conv_ewadd_input", "conv is bilinear", "x y z", "s p g",
        lambda A, x, y, z, s, p, g: A.conv(s, p, NONE, g, A.ewadd(x, y), z),
        lambda A, x, y, z, s, p, g: A.ewadd(A.conv(s, p, NONE, g, x, z), A.conv(s, p, NONE, g, y, z)),
        [({"x": (1, 2, 5, 5), "y": (1, 2, 5, 5), "z": (3, 2, 3, 3)}, {"s": 1, "p": SAME, "g": 1})]),
    _ax("conv_enlarge", "enlarge convolution kernel", "x y", "s c g k",
        lambda A, x, y, s, c, g, k: A.conv(s, SAME, c, g, x, y),
        lambda A, x, y, s, c, g, k: A.conv(s, SAME, c, g, x, A.enlarge(k, y)),
        [({"x": (1, 2, 5, 5), "y": (3, 2, 1, 3)}, {"s": 1, "c": RELU, "g": 1, "k": 3})]),
    _ax("conv_relu", "conv with A_relu applies relu", "x y", "s p g",
        lambda A, x, y, s, p, g: A.conv(s, p, RELU, g, x, y),
        lambda A, x, y, s, p, g: A.relu(A.conv(s, p, NONE, g, x, y)),
        [({"x": (1, 2, 5, 5), "y": (3, 2, 3, 3)}, {"s": 1, "p": SAME, "g": 1})]),
    _ax("relu_transpose", "operator commutativity", "x", "", lambda A, x: A.relu(A.transpose(x)),
        lambda A, x: A.transpose(A.relu(x)), [({"x": (2, 3)}, {})]),
    _ax("pool_by_conv", "pooling by conv. with Cpool", "x", "s p k",
        lambda A, x, s, p, k: A.conv(s, p, NONE, A.channels_of(x), x, A.cpool(k)),
        lambda A, x, s, p, k: A.pool_avg(k, s, p, x), [({"x": (1, 2, 5, 5)}, {"s": 1, "p": SAME, "k": 3})]),
    _ax("identity_kernel", "identity kernel", "x", "k", lambda A, x, k: A.conv(1, SAME, NONE, 1, x, A.iconv(k)),
        lambda A, x, k: x, [({"x": (1, 2, 5, 5)}, {"k": 3})]),
    _ax("identity_matrix", "identity matrix", "x", "", lambda A, x: A.matmul(x, A.imatmul()), lambda A, x: x,
        [({"x": (2, 3)}, {})]),
    _ax("ewmul_identity", "ewmul identity", "x", "", lambda A, x: A.ewmul(x, A.iewmul()), lambda A, x: x,
        [({"x": (2, 3)}, {})]),
    _ax("split0_def", "split definition", "x y", "a",
        lambda A, x, y, a: A.split0(a, A.dim(a, x), A.dim(a, y), A.concat(a, x, y)), lambda A, x, y, a: x,
        [({"x": (2, 3), "y": (2, 1)}, {"a": 1})]),
    _ax("split1_def", "split definition", "x y", "a",
        lambda A, x, y, a: A.split1(a, A.dim(a, x), A.dim(a, y), A.concat(a, x, y)), lambda A, x, y, a: y,
        [({"x": (2, 3), "y": (4, 3)}, {"a": 0})]),
    _ax("concat_geometry", "geometry of concatenation", "x y z w", "",
        lambda A, x, y, z, w: A.concat(0, A.concat(1, x, y), A.concat(1, z, w)),
        lambda A, x, y, z, w: A.concat(1, A.concat(0, x, z), A.concat(0, y, w)),
        [({"x": (2, 3), "y": (2, 1), "z": (1, 3), "w": (1, 1)}, {})]),
    # not in TASO's table (an extension, checked like the others): without it concat
    # associativity -- which the generator finds, its fingerprints ignoring TASO's split trees --
    # is not derivable
    _ax("concat_assoc", "concat is associative (graphsub extension)", "x y z", "a",
        lambda A, x, y, z, a: A.concat(a, A.concat(a, x, y), z),
        lambda A, x, y, z, a: A.concat(a, x, A.concat(a, y, z)),
        [({"x": (2, 3), "y": (2, 1), "z": (2, 2)}, {"a": 1})]),
    _ax("concat_smul", "operator commutativity", "x y w", "a",
        lambda A, x, y, w, a: A.concat(a, A.smul(x, w), A.smul(y, w)),
        lambda A, x, y, w, a: A.smul(A.concat(a, x, y), w), [({"x": (2, 3), "y": (2, 2), "w": ()}, {"a": 1})]),
    _ax("concat_ewadd", "operator commutativity", "x y z w", "a",
        lambda A, x, y, z, w, a: A.concat(a, A.ewadd(x, y), A.ewadd(z, w)),
        lambda A, x, y, z, w, a: A.ewadd(A.concat(a, x, z), A.concat(a, y, w)),
        [({"x": (2, 3), "y": (2, 3), "z": (1, 3), "w": (1, 3)}, {"a": 0})]),
    _ax("concat_ewmul", "operator commutativity", "x y z w", "a",
        lambda A, x, y, z, w, a: A.concat(a, A.ewmul(x, y), A.ewmul(z, w)),
        lambda A, x, y, z, w, a: A.ewmul(A.concat(a, x, z), A.concat(a, y, w)),
        [({"x": (2, 3), "y": (2, 3), "z": (2, 2), "w": (2, 2)}, {"a": 1})]),
    _ax("concat_relu", "operator commutativity", "x y", "a", lambda A, x, y, a: A.concat(a, A.relu(x), A.relu(y)),
        lambda A, x, y, a: A.relu(A.concat(a, x, y)), [({"x": (2, 3), "y": (2, 2)}, {"a": 1})]),
    _ax("concat_transpose", "concatenation and transpose", "x y", "",
        lambda A, x, y: A.concat(1, A.transpose(x), A.transpose(y)), lambda A, x, y: A.transpose(A.concat(0, x, y)),
        [({"x": (2, 3), "y": (1, 3)}, {})]),
    _ax("concat_matmul", "concatenation and matrix multiplication", "x y z", "",
        lambda A, x, y, z: A.concat(1, A.matmul(x, y), A.matmul(x, z)),
        lambda A, x, y, z: A.matmul(x, A.concat(1, y, z)), [({"x": (2, 3), "y": (3, 4), "z": (3, 1)}, {})]),
    _ax("matmul_concat_sum", "concatenation and matrix multiplication", "x y z w", "",
        lambda A, x, y, z, w: A.matmul(A.concat(1, x, z), A.concat(0, y, w)),
        lambda A, x, y, z, w: A.ewadd(A.matmul(x, y), A.matmul(z, w)),
        [({"x": (2, 3), "y": (3, 4), "z": (2, 1), "w": (1, 4)}, {})]),
    _ax("concat_conv_batch", "concatenation and conv.", "x y z", "s p c g",
        lambda A, x, y, z, s, p, c, g: A.concat(0, A.conv(s, p, c, g, x, z), A.conv(s, p, c, g, y, z)),
        lambda A, x, y, z, s, p, c, g: A.conv(s, p, c, g, A.concat(0, x, y), z),
        [({"x": (1, 2, 5, 5), "y": (2, 2, 5, 5), "z": (3, 2, 3, 3)}, {"s": 2, "p": SAME, "c": RELU, "g": 1})]),
    _ax("concat_conv_kernel", "concatenation and conv.", "x y z", "s p c",
        lambda A, x, y, z, s, p, c: A.concat(1, A.conv(s, p, c, 1, x, y), A.conv(s, p, c, 1, x, z)),
        lambda A, x, y, z, s, p, c: A.conv(s, p, c, 1, x, A.concat(0, y, z)),
        [({"x": (1, 2, 5, 5), "y": (3, 2, 3, 3), "z": (1, 2, 3, 3)}, {"s": 1, "p": VALID, "c": RELU})]),
    _ax("conv_concat_sum", "concatenation and conv.", "x y z w", "s p",
        lambda A, x, y, z, w, s, p: A.conv(s, p, NONE, 1, A.concat(1, x, z), A.concat(1, y, w)),
        lambda A, x, y, z, w, s, p: A.ewadd(A.conv(s, p, NONE, 1, x, y), A.conv(s, p, NONE, 1, z, w)),
        [({"x": (1, 2, 5, 5), "y": (3, 2, 3, 3), "z": (1, 1, 5, 5), "w": (3, 1, 3, 3)}, {"s": 1, "p": SAME})]),
    _ax("concat_pool_avg", "concatenation and pooling", "x y", "k s p",
        lambda A, x, y, k, s, p: A.concat(1, A.pool_avg(k, s, p, x), A.pool_avg(k, s, p, y)),
        lambda A, x, y, k, s, p: A.pool_avg(k, s, p, A.concat(1, x, y)),
        [({"x": (1, 2, 5, 5), "y": (1, 1, 5, 5)}, {"k": 3, "s": 1, "p": SAME})]),
    _ax("concat_pool_max0", "concatenation and pooling", "x y", "k s p",
        lambda A, x, y, k, s, p: A.concat(0, A.pool_max(k, s, p, x), A.pool_max(k, s, p, y)),
        lambda A, x, y, k, s, p: A.pool_max(k, s, p, A.concat(0, x, y)),
        [({"x": (1, 2, 5, 5), "y": (2, 2, 5, 5)}, {"k": 3, "s": 2, "p": SAME})]),
    _ax("concat_pool_max1", "concatenation and pooling", "x y", "k s p",
        lambda A, x, y, k, s, p: A.concat(1, A.pool_max(k, s, p, x), A.pool_max(k, s, p, y)),
        lambda A, x, y, k, s, p: A.pool_max(k, s, p, A.concat(1, x, y)),
        [({"x": (1, 2, 5, 5), "y": (1, 1, 5, 5)}, {"k": 3, "s": 1, "p": VALID})]),
)


# ----------------------------------------------------------------------------- concrete check


@dataclass(frozen=True)
class NVal:
    """A concrete tensor with the concat pieces recorded per axis (for split)."""

    v: np.ndarray
    split: Mapping[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Const:
    kind: str
    k: int = 0


class NumpyAlgebra:
    """The operator vocabulary on concrete tensors, using graphsub's numpy reference ops."""

    def _r(self, op: str, xs: Sequence[np.ndarray], **attrs: Any) -> np.ndarray:
        ref = REGISTRY[op].reference
        assert ref is not None
        return np.asarray(ref(list(xs), attrs)[0])

    def ewadd(self, x: NVal, y: NVal) -> NVal:
        return NVal(x.v + y.v)

    def ewmul(self, x: NVal, y: NVal | _Const) -> NVal:
        if isinstance(y, _Const):
            return NVal(x.v * np.ones_like(x.v))
        return NVal(x.v * y.v)

    def smul(self, x: NVal, w: NVal) -> NVal:
        return NVal(x.v * w.v)

    def matmul(self, x: NVal, y: NVal | _Const) -> NVal:
        if isinstance(y, _Const):
            y = NVal(np.eye(x.v.shape[1]))
        return NVal(x.v @ y.v)

    def transpose(self, x: NVal) -> NVal:
        return NVal(x.v.T.copy())

    def relu(self, x: NVal) -> NVal:
        return NVal(self._r("relu", [x.v]))

    def conv(self, s: int, p: int, c: int, g: int, x: NVal, y: NVal | _Const) -> NVal:
        ch = x.v.shape[1]
        if isinstance(y, _Const):
            if y.kind == "cpool":
                y = NVal(np.full((ch, 1, y.k, y.k), 1.0 / (y.k * y.k)))
            else:
                y = NVal(self._r("const_iconv", [], shape=(ch, ch, y.k, y.k)).astype(np.float64))
        assert ch // y.v.shape[1] == g, "instance groups disagree with the axiom's g"
        return NVal(conv2d_ref(x.v, y.v, None, (s, s), "SAME" if p == SAME else "VALID", (1, 1),
                               "relu" if c == RELU else "none"))

    def _pool(self, op: str, k: int, s: int, p: int, x: NVal) -> NVal:
        extra = {"count_include_pad": True} if op == "avgpool2d" else {}
        from graphsub.ir.node import make_sig
        from graphsub.ops.types import TensorType

        sig = make_sig(op, {"kernel": (k, k), "strides": (s, s), "pads": "SAME" if p == SAME else "VALID", **extra},
                       [TensorType(x.v.shape, "float64")])
        return NVal(self._r(op, [x.v], **dict(sig.attrs)))

    def pool_avg(self, k: int, s: int, p: int, x: NVal) -> NVal:
        return self._pool("avgpool2d", k, s, p, x)

    def pool_max(self, k: int, s: int, p: int, x: NVal) -> NVal:
        return self._pool("maxpool2d", k, s, p, x)

    def concat(self, a: int, x: NVal, y: NVal) -> NVal:
        return NVal(np.concatenate([x.v, y.v], axis=a), {a: (x.v.shape[a], y.v.shape[a])})

    def dim(self, a: int, x: NVal) -> int:
        return int(x.v.shape[a])

    def split0(self, a: int, n: int, m: int, t: NVal) -> NVal:
        assert t.split.get(a) == (n, m)
        return NVal(np.take(t.v, range(n), axis=a))

    def split1(self, a: int, n: int, m: int, t: NVal) -> NVal:
        assert t.split.get(a) == (n, m)
        return NVal(np.take(t.v, range(n, n + m), axis=a))

    def enlarge(self, k: int, y: NVal) -> NVal:
        return NVal(self._r("enlarge", [y.v], kernel=(k, k)))

    def cpool(self, k: int) -> _Const:
        return _Const("cpool", k)

    def iconv(self, k: int) -> _Const:
        return _Const("iconv", k)

    def imatmul(self) -> _Const:
        return _Const("imatmul")

    def iewmul(self) -> _Const:
        return _Const("iewmul")

    def channels_of(self, x: NVal) -> int:
        return int(x.v.shape[1])


@dataclass(frozen=True)
class AxiomCheck:
    name: str
    ok: bool
    instances: int
    max_abs_diff: float
    reason: str = ""


def check_axiom(ax: Axiom, seed: int = 0) -> AxiomCheck:
    """Evaluate both sides of ``ax`` on its concrete instances (random normal data)."""
    rng = np.random.default_rng(seed)
    A = NumpyAlgebra()
    worst = 0.0
    for shapes, params in ax.instances:
        vals = {k: NVal(rng.standard_normal(s) if s else np.asarray(rng.standard_normal())) for k, s in shapes.items()
                if k in ax.tensors}
        try:
            lhs, rhs = ax.lhs(A, **vals, **params), ax.rhs(A, **vals, **params)
        except (AssertionError, ValueError) as e:
            return AxiomCheck(ax.name, False, len(ax.instances), float("inf"), f"cannot evaluate: {e}")
        if lhs.v.shape != rhs.v.shape:
            return AxiomCheck(ax.name, False, len(ax.instances), float("inf"), f"shapes {lhs.v.shape} != {rhs.v.shape}")
        d = float(np.max(np.abs(lhs.v - rhs.v))) if lhs.v.size else 0.0
        worst = max(worst, d)
        if not np.allclose(lhs.v, rhs.v, rtol=1e-9, atol=1e-9):
            return AxiomCheck(ax.name, False, len(ax.instances), worst, f"sides differ by {d:.3g}")
    return AxiomCheck(ax.name, True, len(ax.instances), worst)


def check_axioms(seed: int = 0, axioms: Sequence[Axiom] = AXIOMS) -> list[AxiomCheck]:
    """:func:`check_axiom` for every axiom."""
    return [check_axiom(a, seed) for a in axioms]


__all__ = ["AXIOMS", "NONE", "RELU", "SAME", "VALID", "Axiom", "AxiomCheck", "NVal", "NumpyAlgebra", "check_axiom",
           "check_axioms"]
