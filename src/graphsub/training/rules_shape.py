"""Vector-Jacobian rules of the shape and data-movement operators (see :mod:`graphsub.training.vjp`).

Their gradients move the output gradient back: a reshape to the input's shape, the inverse permutation, a split
for a concatenation (and a concatenation for a split), zero padding for a slice (strided and backward slices
included: the gradient is spread out with a reshape and a pad, reversed with a step -1 slice), a slice for a
constant pad (and slices summed back onto the border for ``edge`` and ``reflect`` padding), a sum over the
broadcast axes for ``expand``, and the ``gather_grad`` scatter-add kernel for ``gather``.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphsub.ir.builder import Value
from graphsub.ops.layout import INT64_MIN, _slice_bounds
from graphsub.ops.registry import normalize_axis
from graphsub.training.vjp import Attrs, GOuts, Grad, GradientError, Ins, Outs, VjpCtx, register_vjp
from graphsub.training.vjp import out_grad as _g


def _slice1(ctx: VjpCtx, x: Value, axis: int, start: int, end: int, step: int = 1) -> Value:
    """``x[start:end:step]`` along one axis (``x`` itself for the whole axis)."""
    if step == 1 and start == 0 and end == x.shape[axis]:
        return x
    return ctx.op("slice", x, starts=(start,), ends=(end,), axes=(axis,), steps=(step,))


def _pad(ctx: VjpCtx, x: Value, lo: Sequence[int], hi: Sequence[int]) -> Value:
    """``x`` padded with zeros (``x`` itself when nothing is padded)."""
    if not any(lo) and not any(hi):
        return x
    return ctx.op("pad", x, pads=(*lo, *hi))


def _pad1(ctx: VjpCtx, x: Value, axis: int, before: int, after: int) -> Value:
    lo, hi = [0] * len(x.shape), [0] * len(x.shape)
    lo[axis], hi[axis] = before, after
    return _pad(ctx, x, lo, hi)


def _reverse(ctx: VjpCtx, x: Value, axis: int) -> Value:
    return ctx.op("slice", x, starts=(-1,), ends=(INT64_MIN,), axes=(axis,), steps=(-1,))


# ------------------------------------------------------------------------------------------------ views


@register_vjp("reshape", "flatten", "squeeze", "unsqueeze")
def _reshape(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [ctx.reshape(_g(gouts), ins[0].shape)]


@register_vjp("transpose")
def _transpose(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    perm = [int(p) for p in a["perm"]]
    inverse = tuple(perm.index(i) for i in range(len(perm)))
    g = _g(gouts)
    return [g if inverse == tuple(range(len(perm))) else ctx.op("transpose", g, perm=inverse)]


@register_vjp("expand")
def _expand(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    return [ctx.unbroadcast(_g(gouts), ins[0].shape)]


# ------------------------------------------------------------------------------------------------ concat / split


@register_vjp("concat")
def _concat(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    g = _g(gouts)
    if len(ins) == 1:
        return [g]
    axis = normalize_axis("concat", int(a["axis"]), len(g.shape))
    return list(ctx.b.op_multi("split", g, axis=axis, sizes=tuple(x.shape[axis] for x in ins)))


@register_vjp("split")
def _split(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """The output gradients concatenated; outputs without one contribute zeros (those at either end as zero
    padding, which stores no zero tensor)."""
    x = ins[0]
    axis = normalize_axis("split", int(a["axis"]), len(x.shape))
    sizes = [o.shape[axis] for o in outs]
    first = next(i for i, g in enumerate(gouts) if g is not None)
    last = max(i for i, g in enumerate(gouts) if g is not None)
    parts = [g if g is not None else ctx.zeros(o.shape, o.dtype)
             for o, g in zip(outs[first:last + 1], gouts[first:last + 1], strict=True)]
    mid = parts[0] if len(parts) == 1 else ctx.op("concat", *parts, axis=axis)
    return [_pad1(ctx, mid, axis, sum(sizes[:first]), sum(sizes[last + 1:]))]


# ------------------------------------------------------------------------------------------------ slice / pad


def _spread(ctx: VjpCtx, g: Value, axis: int, step: int) -> Value:
    """Along ``axis`` (length n): ``step - 1`` zeros after every element (length ``n * step``): an added axis of
    size 1 padded to ``step``, merged into ``axis``."""
    s = g.shape
    wide = _pad1(ctx, ctx.reshape(g, (*s[:axis + 1], 1, *s[axis + 1:])), axis + 1, 0, step - 1)
    return ctx.reshape(wide, (*s[:axis], s[axis] * step, *s[axis + 1:]))


@register_vjp("slice")
def _slice(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """Zeros with the gradient placed where the slice read: one zero pad; a strided axis first spreads the
    gradient out (:func:`_spread`, cut where it would run past the end), a backward one first reverses it."""
    x, y = ins[0], outs[0]
    if 0 in y.shape:
        return [ctx.zeros(x.shape, x.dtype)]
    g = _g(gouts)
    lo, hi = [0] * len(x.shape), [0] * len(x.shape)
    for axis, start, _end, step in _slice_bounds(x.type, a):
        n, d = y.shape[axis], x.shape[axis]
        first = start if step > 0 else start + (n - 1) * step  # lowest position read
        if n > 1 and step < 0:
            g = _reverse(ctx, g, axis)
        if n > 1 and abs(step) > 1:
            g = _spread(ctx, g, axis, abs(step))
        lo[axis], hi[axis] = first, d - first - g.shape[axis]
        if hi[axis] < 0:  # the spread's zeros after the last element run past the end
            g, hi[axis] = _slice1(ctx, g, axis, 0, d - first), 0
    return [_pad(ctx, g, lo, hi)]


def _edge_grad(ctx: VjpCtx, g: Value, axis: int, lo: int, hi: int, d: int) -> Value:
    """Edge padding repeats the border elements: their gradients collect the padding's."""
    if d == 1:
        return ctx.op("reduce_sum", g, axes=(axis,), keepdims=True)

    def border(start: int, end: int) -> Value:
        part = _slice1(ctx, g, axis, start, end)
        return part if end - start == 1 else ctx.op("reduce_sum", part, axes=(axis,), keepdims=True)

    parts = [border(0, lo + 1)]
    if d > 2:
        parts.append(_slice1(ctx, g, axis, lo + 1, lo + d - 1))
    parts.append(border(lo + d - 1, lo + d + hi))
    return ctx.op("concat", *parts, axis=axis)


def _reflect_grad(ctx: VjpCtx, g: Value, axis: int, lo: int, hi: int, d: int) -> Value:
    """Reflect padding mirrors ``x[1:lo+1]`` before and ``x[d-1-hi:d-1]`` after: the padding's gradients,
    reversed, are added there."""
    out = _slice1(ctx, g, axis, lo, lo + d)
    if lo:
        left = ctx.op("slice", g, starts=(lo - 1,), ends=(INT64_MIN,), axes=(axis,), steps=(-1,))
        out = ctx.op("add", out, _pad1(ctx, left, axis, 1, d - 1 - lo))
    if hi:
        right = _slice1(ctx, g, axis, lo + d + hi - 1, lo + d - 1, -1)
        out = ctx.op("add", out, _pad1(ctx, right, axis, d - 1 - hi, 1))
    return out


@register_vjp("pad")
def _pad_rule(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    x, g = ins[0], _g(gouts)
    rank = len(x.shape)
    pads = [int(p) for p in a["pads"]]
    padded = [(ax, pads[ax], pads[rank + ax]) for ax in range(rank) if pads[ax] or pads[rank + ax]]
    mode = a["mode"]
    if mode == "constant":
        if not padded:
            return [g]
        return [ctx.op("slice", g, starts=tuple(lo for _, lo, _ in padded),
                       ends=tuple(lo + x.shape[ax] for ax, lo, _ in padded), axes=tuple(ax for ax, _, _ in padded))]
    if mode not in ("edge", "reflect"):
        raise GradientError(f"pad: no gradient for mode {mode!r}")
    fn = _edge_grad if mode == "edge" else _reflect_grad
    for ax, lo, hi in padded:
        g = fn(ctx, g, ax, lo, hi, x.shape[ax])
    return [g]


# ------------------------------------------------------------------------------------------------ gather


@register_vjp("gather")
def _gather(ctx: VjpCtx, ins: Ins, outs: Outs, gouts: GOuts, a: Attrs) -> list[Grad]:
    """Scatter-add of the gradient into zeros of the data's shape; the indices get none."""
    x, idx = ins
    axis = normalize_axis("gather", int(a["axis"]), len(x.shape))
    return [ctx.op("gather_grad", idx, _g(gouts), axis=axis, x_shape=x.shape), None]


__all__: list[str] = []
