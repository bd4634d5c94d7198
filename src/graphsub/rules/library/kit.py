"""The rule-authoring kit: what every hand-written rule set (``builtin``, ``ocggs_faithful``,
``metaflow``, ``cpu``, ``algebra``, ``algebra_concat``, ``ort``, ``attention``) writes its rules with.

* :data:`rule` (a :class:`RuleFactory`) makes a ``hand-written`` :class:`~graphsub.rules.rule.Rule`
  located at the line that calls it; ``commute=True`` also returns the mirrored twin (the
  operands of the source's ``add``/``mul`` nodes swapped, see :func:`~graphsub.rules.rule.mirrored`);
* :func:`ex` writes an :class:`~graphsub.rules.rule.Example` (per-node attributes as keywords);
* ``where`` helpers come in two kinds: *checks* ``f(m, ...) -> True | reason`` to combine in a
  function (:func:`is_dense`, :func:`in_order`, :func:`per_channel`, :func:`merge_geometry`, ...)
  and ready *constraints* ``(fn, text)`` (:func:`same_shape`, :func:`min_rank`, :func:`same_attrs`,
  :func:`scalar_constant`, ...);
* attribute and permutation readers (:func:`conv_attrs`, :func:`perm`, :func:`composed_perm`,
  :func:`swap_last2`, ...);
* target helpers build weight transforms with ordinary ops on weight values (``mul``/``div``/
  ``sqrt``/``reshape``/``concat``/``enlarge``), so rules stay exact without weight data.

Sources and targets are both expressions: pattern values and target values support ``+ - * / @``
(:class:`~graphsub.rules.pattern.PValue`, :class:`~graphsub.rules.apply.TValue`).

>>> r = rule("demo_mul_comm", "mul(x, y) -> mul(y, x).",
...          lambda p: {"out": p.var("x") * p.var("y")},
...          lambda t, m: {"out": m.y * m.x},
...          [ex({"x": (2, 3), "y": (2, 3)}), ex({"x": (4,), "y": (3, 1)}), ex({"x": (1,), "y": ()})])
>>> r.name, r.origin, r.location.startswith("<doctest")
('demo_mul_comm', 'hand-written', True)
>>> a, b = rule("demo_relu_add", "relu(x) + y -> relu(x) + y.", lambda p: {"y": p.relu(p.var("x")) + p.var("z")},
...             lambda t, m: {"y": t.relu(m.x) + m.z}, [], commute=True, mirror="_rev")
>>> b.name, str(b.source).splitlines()[2]
('demo_relu_add_rev', 'add0 = add($z, relu0)')
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, overload

import numpy as np

from graphsub.errors import GraphsubError, RuleError
from graphsub.ir.node import Ref
from graphsub.ops.registry import REGISTRY
from graphsub.rules.apply import TargetBuilder, TargetView
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule, ViewTargetFn, Where, WhereFn, caller_location, make_rule, mirrored

#: a source pattern function
Source = Callable[[PatternBuilder], Mapping[str, PValue]]
#: a where constraint: ``(fn, text)`` or a :class:`~graphsub.rules.rule.Where`
W = tuple[WhereFn, str]
WhereArg = W | Where
#: a check result: True or the reason it fails
Check = bool | str
#: the geometric conv attributes (everything but the fused activation)
GEOMETRY = ("strides", "pads", "dilations")
#: a small NCHW input shape used by many examples
F4 = (1, 3, 6, 6)
#: the commutative elementwise ops as Python operators (which build nodes on pattern and target values)
OPS: dict[str, Callable[[Any, Any], Any]] = {"add": operator.add, "mul": operator.mul}

# ----------------------------------------------------------------------------- making rules


class RuleFactory:
    """Makes the hand-written rules of one set; ``tags`` are added to every rule's own tags.

    ``factory(name, doc, source, target, examples, where=(), *, tags=(), exact=True, reason="",
    commute=False, mirror="_r", mirror_doc=None)``: the rule, located at the calling line.  With
    ``commute`` (True: every ``add``/``mul`` node of the source; or a tuple of node names) it
    returns ``(rule, twin)``, the twin named ``name + mirror`` with those operands swapped (its
    doc ``mirror_doc``, default ``doc``).
    """

    def __init__(self, *tags: str) -> None:
        self.tags = tags

    @overload
    def __call__(self, name: str, doc: str, source: Source, target: ViewTargetFn, examples: Sequence[Example],
                 where: Sequence[WhereArg] = (), *, tags: Sequence[str] = (), exact: bool = True, reason: str = "",
                 commute: Literal[False] = False, mirror: str = "_r", mirror_doc: str | None = None) -> Rule: ...

    @overload
    def __call__(self, name: str, doc: str, source: Source, target: ViewTargetFn, examples: Sequence[Example],
                 where: Sequence[WhereArg] = (), *, tags: Sequence[str] = (), exact: bool = True, reason: str = "",
                 commute: Literal[True] | tuple[str, ...], mirror: str = "_r",
                 mirror_doc: str | None = None) -> tuple[Rule, Rule]: ...

    def __call__(self, name: str, doc: str, source: Source, target: ViewTargetFn, examples: Sequence[Example],
                 where: Sequence[WhereArg] = (), *, tags: Sequence[str] = (), exact: bool = True, reason: str = "",
                 commute: bool | tuple[str, ...] = False, mirror: str = "_r",
                 mirror_doc: str | None = None) -> Rule | tuple[Rule, Rule]:
        r = make_rule(name, source, target, where=where, doc=doc, examples=examples, tags=(*self.tags, *tags),
                      exact=exact, reason=reason, location=caller_location())
        if commute is False:
            return r
        return r, mirrored(r, name + mirror, None if commute is True else commute, mirror_doc)


#: the factory of sets whose rules carry their own tags
rule = RuleFactory()


def ex(types: Mapping[str, Any], *, data: Mapping[str, Any] | None = None, ops: Mapping[str, Any] | None = None,
       note: str = "", **attrs: Mapping[str, Any]) -> Example:
    """An :class:`~graphsub.rules.rule.Example`: variable types, then the attributes of pattern nodes as
    keywords (``conv={"pads": "SAME"}``), fixed weight ``data``, wildcard ``ops`` and a ``note``."""
    return Example(types=dict(types), attrs=attrs, ops=dict(ops or {}), data=dict(data or {}), note=note)


# ----------------------------------------------------------------------------- where constraints (fn, text)


def same_shape(*names: str) -> W:
    """Where: the named values have equal shapes."""
    return (lambda m: len({m.shape(n) for n in names}) == 1, f"shapes of {', '.join(names)} are equal")


def same_rank(*names: str) -> W:
    """Where: the named values have equal ranks."""
    return (lambda m: len({len(m.shape(n)) for n in names}) == 1, f"ranks of {', '.join(names)} are equal")


def same_dtype(*names: str) -> W:
    """Where: the named values have equal dtypes."""
    return (lambda m: len({m.type(n).dtype for n in names}) == 1, f"dtypes of {', '.join(names)} are equal")


def rank_le(a: str, b: str) -> W:
    """Where: rank(a) <= rank(b) (a scalar ``a`` can be ``smul``-ed onto ``b``)."""
    return (lambda m: len(m.shape(a)) <= len(m.shape(b)), f"rank({a}) <= rank({b})")


def min_rank(k: int, *names: str) -> W:
    """Where: every named value has rank >= k."""
    return (lambda m: all(len(m.shape(n)) >= k for n in names), f"{', '.join(names)} have rank >= {k}")


def same_attrs(a: str, b: str) -> W:
    """Where: two matched nodes have equal (canonical) attributes."""
    return (lambda m: m.attrs(a) == m.attrs(b), f"{a} and {b} have equal attributes")


def scalar_constant(name: str, into: str, out: str, nonzero: bool = False) -> W:
    """Where: ``name`` is a constant scalar weight (with data; non-zero if ``nonzero``, e.g. a divisor) and the node
    ``out`` combining it with ``into`` keeps ``into``'s shape (the scalar does not broadcast it up)."""
    def fn(m: MatchView) -> bool:
        v = scalar_value(m, name)
        return v is not None and (v != 0.0 or not nonzero) and m.shape(into) == m.shape(out)

    return fn, f"{name} is a constant scalar (with data{', non-zero' if nonzero else ''}) not broadcasting {into} up"


# ----------------------------------------------------------------------------- checks (True or a reason)


def is_dense(m: MatchView, x: str, w: str) -> Check:
    """The conv of input ``x`` and kernel ``w`` has one group."""
    return m.shape(x)[1] == m.shape(w)[1] or f"grouped conv ({m.shape(x)[1] // m.shape(w)[1]} groups)"


def in_order(m: MatchView, *nodes: str) -> Check:
    """Pattern nodes mapped to increasing node ids: one match per unordered set of symmetric nodes."""
    ids = [m[n].node for n in nodes]
    return ids == sorted(ids) or "symmetric match: taken in node-id order only"


def all_checks(*checks: Check) -> Check:
    """The first failing check's reason, else True."""
    for c in checks:
        if c is not True:
            return c
    return True


def skip_accepts(x: Sequence[int], skip: Sequence[int]) -> bool:
    """Whether onnxruntime's Skip(Simplified)LayerNormalization takes ``x + skip`` as (input, skip): ``x`` is
    (N, D) or (B, S, D), ``skip`` of its shape or, for a rank-3 ``x``, (S, D) or (1, S, D)."""
    x, skip = tuple(x), tuple(skip)
    return len(x) in (2, 3) and (skip == x or (len(x) == 3 and skip in (x[1:], (1, *x[1:]))))


def broadcasts_into(small: Sequence[int], shape: Sequence[int]) -> bool:
    """``small`` broadcasts against ``shape`` without changing it."""
    try:
        return tuple(np.broadcast_shapes(tuple(small), tuple(shape))) == tuple(shape)
    except ValueError:
        return False


def scalar_value(m: MatchView, name: str) -> float | None:
    """The value of ``name`` if it is a weight leaf holding one element, else None."""
    d = m.data(name)
    if d is None or np.asarray(d).size != 1:
        return None
    return float(np.asarray(d).reshape(-1)[0])


def constant_value(m: MatchView, name: str, value: float) -> Check:
    """The weight bound to ``name`` is a constant equal to ``value`` everywhere (checked on its
    data; a ``const_one`` producer counts as all ones)."""
    if value == 1.0 and m.producer_op(name) == "const_one":
        return True
    data = m.data(name)
    if data is None:
        return f"${name} has no data (cannot tell it is all {value:g})"
    return bool(np.all(np.asarray(data) == value)) or f"${name} is not all {value:g}"


def const_data(op: str, **attrs: Any) -> np.ndarray:
    """The value of constant op ``op`` (e.g. ``const_iconv``) for ``attrs``."""
    ref = REGISTRY[op].reference
    assert ref is not None
    return np.asarray(ref([], attrs)[0])


def is_const(m: MatchView, var: str, op: str, want: Mapping[str, Any]) -> bool:
    """``var`` is ``op(**want)``: the constant op itself, or a weight leaf holding exactly its value."""
    node = m.producer(var)
    if node.sig.op == op:
        attrs = node.sig.attr
        return all(tuple(attrs[k]) == tuple(v) if isinstance(v, tuple) else attrs[k] == v for k, v in want.items())
    data = m.data(var)
    if data is None:
        return False
    try:
        ref = const_data(op, **want)
    except (GraphsubError, ValueError, TypeError, KeyError):  # invalid constant attributes: no match
        return False
    return data.shape == ref.shape and bool(np.array_equal(data, ref))


def channel_operand(m: MatchView, s: str, channels: int) -> str | None:
    """How weight ``s`` broadcasts against a conv output with ``channels`` channels:
    ``"scalar"`` (one element, rank <= 4), ``"channel"`` ((1, O, 1, 1) or (O, 1, 1)), else None.
    A (O,) vector would broadcast along the *width*, so it is not per channel."""
    shape = m.shape(s)
    if int(np.prod(shape, dtype=np.int64)) == 1 and len(shape) <= 4:
        return "scalar"
    if shape in ((1, channels, 1, 1), (channels, 1, 1)):
        return "channel"
    return None


def per_channel(m: MatchView, s: str, conv: str, out: str) -> Check:
    """``s`` is a scalar or per-output-channel operand of ``conv`` and keeps its shape at ``out``."""
    o = m.shape(conv)[1]
    if channel_operand(m, s, o) is None:
        return f"${s} {m.shape(s)} is neither a scalar nor per channel (1,{o},1,1)/({o},1,1)"
    return m.shape(out) == m.shape(conv) or f"{out} broadcasts the conv output up to {m.shape(out)}"


# ----------------------------------------------------------------------------- attributes and permutations


def conv_attrs(m: MatchView, conv: str, **override: Any) -> dict[str, Any]:
    """strides/pads/dilations/act of matched conv ``conv``, with ``override`` applied."""
    return {**m.attrs(conv, *GEOMETRY, "act"), **override}


def kernel(m: MatchView, w: str) -> tuple[int, int]:
    """The spatial size of kernel ``w``."""
    kh, kw = m.shape(w)[2:4]
    return kh, kw


def perm(m: MatchView, transpose: str) -> tuple[int, ...]:
    """The permutation of a matched transpose."""
    return tuple(m.attr(transpose, "perm"))


def composed_perm(m: MatchView, first: str = "t1", second: str = "t2") -> tuple[int, ...]:
    """The single permutation equal to transpose ``first`` followed by ``second``."""
    p1, p2 = perm(m, first), perm(m, second)
    return tuple(p1[k] for k in p2)


def is_identity(p: Sequence[int]) -> bool:
    return tuple(p) == tuple(range(len(p)))


def swap_last2(rank: int) -> tuple[int, ...]:
    """The permutation exchanging the last two of ``rank`` axes."""
    return (*range(rank - 2), rank - 1, rank - 2)


def swaps_last2(m: MatchView, transpose: str) -> bool:
    """A matched transpose exchanges exactly the last two axes."""
    p = perm(m, transpose)
    return len(p) >= 2 and p == swap_last2(len(p))


# ----------------------------------------------------------------------------- merging two convs


def merge_geometry(m: MatchView, c1: str, w1: str, c2: str, w2: str, *,
                   enlarge: str = "none") -> tuple[tuple[int, int], tuple[int, int, int, int]] | str:
    """Common (kernel, pads) of two convs computed as one conv on the same input.

    ``enlarge``: ``"none"`` (kernels and pads must be equal), ``"first"`` (kernel 1 fits centered in
    kernel 2, which is kept) or ``"both"`` (both centered in their elementwise maximum).  Strides,
    dilations and activation must agree; enlarging needs dilations 1 and, after adding half the
    kernel growth to each side, equal pads (so each conv still reads the same input window).
    """
    a1, a2 = conv_attrs(m, c1), conv_attrs(m, c2)
    for key in ("strides", "dilations", "act"):
        if a1[key] != a2[key]:
            return f"{key} differ: {a1[key]} vs {a2[key]}"
    k1, k2 = kernel(m, w1), kernel(m, w2)
    if enlarge == "none" or k1 == k2:
        if k1 != k2:
            return f"kernels differ: {k1} vs {k2}"
        return (k2, a2["pads"]) if a1["pads"] == a2["pads"] else f"pads differ: {a1['pads']} vs {a2['pads']}"
    if enlarge == "first" and not (k1[0] <= k2[0] and k1[1] <= k2[1]):
        return f"kernel {k1} does not fit in {k2}"
    big = (max(k1[0], k2[0]), max(k1[1], k2[1]))
    if a1["dilations"] != (1, 1):
        return "enlarging a dilated kernel"
    pads = []
    for k, a in ((k1, a1), (k2, a2)):
        dh, dw = big[0] - k[0], big[1] - k[1]
        if dh % 2 or dw % 2:
            return f"kernel {k} cannot be centered in {big}"
        t, left, b, r = a["pads"]
        pads.append((t + dh // 2, left + dw // 2, b + dh // 2, r + dw // 2))
    if pads[0] != pads[1]:
        return f"pads disagree once enlarged to {big}: {pads[0]} vs {pads[1]}"
    return big, pads[0]


def geometry(m: MatchView, enlarge: str, c1: str = "c1", w1: str = "w1", c2: str = "c2",
             w2: str = "w2") -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """:func:`merge_geometry` in a target (its ``where`` has already accepted the match)."""
    g = merge_geometry(m, c1, w1, c2, w2, enlarge=enlarge)
    if isinstance(g, str):
        raise RuleError(f"merge geometry: {g}")
    return g


def geometry_check(enlarge: str, c1: str = "c1", w1: str = "w1", c2: str = "c2", w2: str = "w2") -> WhereFn:
    """A ``where`` function wrapping :func:`merge_geometry`."""
    def fn(m: MatchView) -> Check:
        g = merge_geometry(m, c1, w1, c2, w2, enlarge=enlarge)
        return g if isinstance(g, str) else True

    return fn


# ----------------------------------------------------------------------------- target helpers


def activate(t: TargetBuilder, ref: Ref, act: str) -> Ref:
    """``ref`` followed by the fused activation ``act`` as a separate op."""
    return ref if act == "none" else t.op(act, ref)


def fit_kernel(t: TargetBuilder, m: MatchView, w: str, k: tuple[int, int]) -> Ref:
    """Kernel ``w`` zero-padded (centered) to ``k``; ``w`` itself if it already has that size."""
    return m[w] if kernel(m, w) == k else t.enlarge(m[w], kernel=k)


def kernel_scale(t: TargetBuilder, m: MatchView, s: str, o: int) -> Ref:
    """``s`` reshaped to multiply a kernel (O, I, kh, kw) per output channel (or as a scalar)."""
    kind = channel_operand(m, s, o)
    return t.reshape(m[s], shape=(o, 1, 1, 1) if kind == "channel" else (1, 1, 1, 1))


def bias_vector(t: TargetBuilder, m: MatchView, s: str, o: int) -> Ref:
    """``s`` as a (O,) bias vector (a scalar is broadcast)."""
    if channel_operand(m, s, o) == "channel":
        return t.reshape(m[s], shape=(o,))
    return t.expand(t.reshape(m[s], shape=(1,)), shape=(o,))


def fold_mul(t: TargetBuilder, m: TargetView, conv: str, s: str, bias: str | None = None) -> Ref:
    """``conv(x, w [, b]) * s`` as one conv with the scaled kernel (and bias)."""
    o = m.shape(conv)[1]
    ins = [m.x, m.w * kernel_scale(t, m, s, o)]
    if bias is not None:
        ins.append(m[bias] * t.reshape(m[s], shape=(o,) if channel_operand(m, s, o) == "channel" else (1,)))
    return t.conv2d(*ins, **conv_attrs(m, conv))


def fold_add(t: TargetBuilder, m: TargetView, conv: str, s: str, bias: str | None = None) -> Ref:
    """``conv(x, w [, b]) + s`` as one conv whose bias absorbs ``s``."""
    o = m.shape(conv)[1]
    b = bias_vector(t, m, s, o) if bias is None else m[bias] + bias_vector(t, m, s, o)
    return t.conv2d(m.x, m.w, b, **conv_attrs(m, conv))


def fold_batchnorm(t: TargetBuilder, m: TargetView, conv: str, bn: str, bias: str | None = None) -> Ref:
    """``batchnorm(conv(x, w [, b]))`` as one conv: with ``k = scale / sqrt(var + eps)``,
    ``w' = w * k`` per output channel and ``b' = (b - mean) * k + bias`` (``b`` = 0 if absent)."""
    o = m.shape(conv)[1]
    k = m.scale / t.sqrt(m.var + t.const(m.attr(bn, "epsilon")))
    w = m.w * t.reshape(k, shape=(o, 1, 1, 1))
    centred = t.neg(m.mean) if bias is None else m[bias] - m.mean
    return t.conv2d(m.x, w, centred * k + m.bias, **conv_attrs(m, conv))


def merge_split(t: TargetBuilder, merged: Ref, axis: int, sizes: Sequence[int]) -> tuple[Ref, ...]:
    """``split`` of ``merged`` into consecutive pieces."""
    return t.op_multi("split", merged, axis=axis, sizes=tuple(sizes))


__all__ = [
    "F4",
    "GEOMETRY",
    "OPS",
    "Check",
    "RuleFactory",
    "Source",
    "W",
    "WhereArg",
    "activate",
    "all_checks",
    "bias_vector",
    "broadcasts_into",
    "channel_operand",
    "composed_perm",
    "const_data",
    "constant_value",
    "conv_attrs",
    "ex",
    "fit_kernel",
    "fold_add",
    "fold_batchnorm",
    "fold_mul",
    "geometry",
    "geometry_check",
    "in_order",
    "is_const",
    "is_dense",
    "is_identity",
    "kernel",
    "kernel_scale",
    "merge_geometry",
    "merge_split",
    "min_rank",
    "per_channel",
    "perm",
    "rank_le",
    "rule",
    "same_attrs",
    "same_dtype",
    "same_rank",
    "same_shape",
    "scalar_constant",
    "scalar_value",
    "skip_accepts",
    "swap_last2",
    "swaps_last2",
]
