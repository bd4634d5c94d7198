"""Helpers shared by the hand-written rule modules (``builtin``, ``metaflow``, ``cpu``).

* ``where`` helpers return ``True`` or a reason string (see :class:`~graphsub.rules.rule.Where`);
* target helpers build weight transforms with ordinary ops on weight values (``mul``/``div``/
  ``sqrt``/``reshape``/``concat``/``enlarge``), so the rules stay exact without weight data;
* :func:`ex` is a short way to write an :class:`~graphsub.rules.rule.Example`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import RuleError
from graphsub.ir.node import Ref
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.match import MatchView
from graphsub.rules.rule import Example

#: the geometric conv attributes (everything but the fused activation)
GEOMETRY = ("strides", "pads", "dilations")
Check = bool | str


def ex(types: Mapping[str, Any], attrs: Mapping[str, Mapping[str, Any]] | None = None,
       data: Mapping[str, Any] | None = None, ops: Mapping[str, str] | None = None, note: str = "") -> Example:
    """An :class:`Example` (positional ``types``, then ``attrs``, ``data``, ``ops``)."""
    return Example(types=types, attrs=attrs or {}, ops=ops or {}, data=data or {}, note=note)


# ----------------------------------------------------------------------------- match checks


def conv_attrs(m: MatchView, conv: str, **override: Any) -> dict[str, Any]:
    """strides/pads/dilations/act of matched conv ``conv``, with ``override`` applied."""
    return {**m.attrs(conv, *GEOMETRY, "act"), **override}


def kernel(m: MatchView, w: str) -> tuple[int, int]:
    kh, kw = m.shape(w)[2:4]
    return kh, kw


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


def broadcasts_into(small: Sequence[int], shape: Sequence[int]) -> bool:
    """``small`` broadcasts against ``shape`` without changing it."""
    try:
        return tuple(np.broadcast_shapes(tuple(small), tuple(shape))) == tuple(shape)
    except ValueError:
        return False


def constant_value(m: MatchView, name: str, value: float) -> Check:
    """The weight bound to ``name`` is a constant equal to ``value`` everywhere (checked on its
    data; a ``const_one`` producer counts as all ones)."""
    if value == 1.0 and m.producer_op(name) == "const_one":
        return True
    data = m.data(name)
    if data is None:
        return f"${name} has no data (cannot tell it is all {value:g})"
    return bool(np.all(np.asarray(data) == value)) or f"${name} is not all {value:g}"


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


def geometry_check(enlarge: str, c1: str = "c1", w1: str = "w1", c2: str = "c2", w2: str = "w2") -> Any:
    """A ``where`` function wrapping :func:`merge_geometry`."""
    def fn(m: MatchView) -> Check:
        g = merge_geometry(m, c1, w1, c2, w2, enlarge=enlarge)
        return g if isinstance(g, str) else True

    return fn


# ----------------------------------------------------------------------------- target helpers


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


def fold_mul(t: TargetBuilder, m: MatchView, conv: str, s: str, bias: str | None = None) -> Ref:
    """``conv(x, w [, b]) * s`` as one conv with the scaled kernel (and bias)."""
    o = m.shape(conv)[1]
    w = t.mul(m.w, kernel_scale(t, m, s, o))
    ins = [m.x, w]
    if bias is not None:
        ins.append(t.mul(m[bias], t.reshape(m[s], shape=(o,)) if channel_operand(m, s, o) == "channel"
                         else t.reshape(m[s], shape=(1,))))
    return t.conv2d(*ins, **conv_attrs(m, conv))


def fold_add(t: TargetBuilder, m: MatchView, conv: str, s: str, bias: str | None = None) -> Ref:
    """``conv(x, w [, b]) + s`` as one conv whose bias absorbs ``s``."""
    o = m.shape(conv)[1]
    b = bias_vector(t, m, s, o) if bias is None else t.add(m[bias], bias_vector(t, m, s, o))
    return t.conv2d(m.x, m.w, b, **conv_attrs(m, conv))


def fold_batchnorm(t: TargetBuilder, m: MatchView, conv: str, bn: str, bias: str | None = None) -> Ref:
    """``batchnorm(conv(x, w [, b]))`` as one conv: with ``k = scale / sqrt(var + eps)``,
    ``w' = w * k`` per output channel and ``b' = (b - mean) * k + bias`` (``b`` = 0 if absent)."""
    o = m.shape(conv)[1]
    eps = t.const(m.attr(bn, "epsilon"))
    k = t.div(m.scale, t.sqrt(t.add(m.var, eps)))
    w = t.mul(m.w, t.reshape(k, shape=(o, 1, 1, 1)))
    centred = t.neg(m.mean) if bias is None else t.sub(m[bias], m.mean)
    b = t.add(t.mul(centred, k), m.bias)
    return t.conv2d(m.x, w, b, **conv_attrs(m, conv))


def merge_split(t: TargetBuilder, merged: Ref, axis: int, sizes: Sequence[int]) -> tuple[Ref, ...]:
    """``split`` of ``merged`` into consecutive pieces."""
    outs = t.split(merged, axis=axis, sizes=tuple(sizes))
    return outs if isinstance(outs, tuple) else (outs,)


__all__ = [
    "GEOMETRY", "all_checks", "bias_vector", "broadcasts_into", "channel_operand", "constant_value",
    "conv_attrs", "ex", "fit_kernel", "fold_add", "fold_batchnorm", "fold_mul", "geometry", "geometry_check",
    "in_order", "is_dense", "kernel", "kernel_scale", "merge_geometry", "merge_split", "per_channel",
]
