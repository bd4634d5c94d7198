"""General clean-up rules: operations that do nothing on the values they are given, and chains of layout or
conversion ops that collapse into one. The ``cleanup`` set is these plus the clean-ups of the ``cpu`` set (identity,
reshape/flatten/transpose chains, neutral elements, relu of relu); :mod:`graphsub.rules.cleanup` applies them
everywhere in one linear-time pass, and the searches and equality saturation combine them with every other rule.

Exporters write these no-ops wherever a size is computed at run time: a ``Pad`` by ``(H % 7)`` that is 0 on a
224-pixel input (Swin's window padding), a ``Slice`` to ``x.shape[i]`` that keeps the whole axis, an ``Expand`` to
the shape the value already has, a ``Cast`` to the type it already is. Once graphsub's import has folded the shape
arithmetic into attributes, each is visibly a no-op, and ONNX Runtime -- which folds constants but removes none of
these -- no longer runs them.

Every rule is exact (the where-clauses say when); each maps its output to a pattern variable or a smaller op.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from graphsub.ir.node import Ref
from graphsub.ops.types import FLOAT_DTYPES
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import W, ex, rule
from graphsub.rules.match import MatchView
from graphsub.rules.rule import Example, Rule

TAGS = ("cleanup", "layout")
INT64_MAX = 2**63 - 1

#: casts that are exact in both directions through the middle type: ``cast(cast(x, mid), back)`` is ``x`` when
#: ``x``'s type is ``back`` and ``mid`` holds every value of it
_WIDENS = {
    "float16": ("float32", "float64"), "bfloat16": ("float32", "float64"), "float32": ("float64",),
    "int8": ("int16", "int32", "int64", "float32", "float64"), "uint8": ("int16", "int32", "int64", "float32",
                                                                        "float64"),
    "int16": ("int32", "int64", "float32", "float64"), "int32": ("int64", "float64"), "bool": (
        "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"),
}


def _keeps(m: MatchView) -> bool | str:
    """Where: the op's output has its input's type."""
    return m.type("op") == m.type("x") or f"changes {m.type('x')} into {m.type('op')}"


def _noop(op: str, doc: str, examples: Sequence[Example], extra: tuple[W, ...] = ()) -> Rule:
    return rule(f"cleanup_{op}_noop", doc, lambda p: {"y": p.op1(op, p.var("x"), name="op")},
                lambda t, m: {"y": m.x}, examples, [(_keeps, "keeps the input's type"), *extra], tags=TAGS)


def _pads_zero(m: MatchView) -> bool | str:
    pads = tuple(m.attr("op", "pads"))
    return all(v == 0 for v in pads) or f"pads {pads}"


def _steps_one(m: MatchView) -> bool | str:
    steps = m.attr("op", "steps")
    return steps is None or all(s == 1 for s in steps) or f"steps {tuple(steps)}"


def _cast_round_trip(m: MatchView) -> bool | str:
    x, mid, back = m.type("x").dtype, m.attr("c1", "to"), m.attr("c2", "to")
    if back != x:
        return f"casts {x} to {back}"
    return mid in _WIDENS.get(x, ()) or f"{x} -> {mid} loses values"


def _cast_cast_float(m: MatchView) -> bool | str:
    """cast(cast(x, mid), out) == cast(x, out) for floats when mid is at least as wide as x: the first cast is
    exact, so the second rounds the same value the direct cast rounds."""
    x, mid, out = m.type("x").dtype, m.attr("c1", "to"), m.attr("c2", "to")
    order = {"float16": 0, "bfloat16": 0, "float32": 1, "float64": 2}
    if not {x, mid, out} <= set(FLOAT_DTYPES) or x in ("bfloat16",) or out in ("bfloat16",):
        return f"{x} -> {mid} -> {out} is not a float widening"
    return order[mid] >= order[x] or f"{x} -> {mid} rounds"


#: ops that only reinterpret the shape of a contiguous tensor
VIEWS = frozenset({"reshape", "squeeze", "unsqueeze", "flatten"})


def _view_chain(m: MatchView) -> bool | str:
    ops = (m.node("v1").sig.op, m.node("v2").sig.op)
    if not set(ops) <= VIEWS:
        return f"{ops[0]} then {ops[1]}"
    return ops != ("reshape", "reshape") or "two reshapes (cpu_reshape_reshape)"


def _view_target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
    shape = m.shape("v2")
    return {"y": m.x if shape == m.shape("x") else t.reshape(m.x, shape=shape)}


def unit_axes(out: tuple[int, ...], x: tuple[int, ...]) -> tuple[int, ...] | None:
    """The axes of ``out`` that ``unsqueeze`` inserts into ``x`` to give ``out`` (``x``'s dims in order, 1 at the
    rest), else None.

    >>> unit_axes((2, 1, 1, 8, 1), (2, 8)), unit_axes((2, 8), (8, 2))
    ((1, 2, 4), None)
    """
    axes, k = [], 0
    for i, d in enumerate(out):
        if k < len(x) and d == x[k]:
            k += 1
        elif d == 1:
            axes.append(i)
        else:
            return None
    return tuple(axes) if k == len(x) else None


def _rows_in_order(m: MatchView) -> bool | str:
    """The indices are 0, 1, ..., N-1 in order over flatten's N rows: the gather reads the flattened ``x`` as it is,
    with unit axes inserted."""
    w = m.data("w")
    rows = m.shape("fl")[0]
    if w is None or np.asarray(w).size != rows or not np.array_equal(np.asarray(w).reshape(-1), np.arange(rows)):
        return f"the indices are not 0 .. {rows - 1} in order"
    return unit_axes(m.shape("g"), m.shape("x")) is not None or \
        f"{m.shape('g')} is not {m.shape('x')} with unit axes inserted"


def _pairs_in_order(m: MatchView) -> bool | str:
    """The index tuples are every position of ``x``'s first k axes in row-major order: the lookup reads ``x`` as it
    is, with unit axes inserted."""
    w, x = m.data("w"), m.shape("x")
    k = m.shape("w")[-1]
    if w is None:
        return "the indices are not constant"
    every = np.indices(x[:k]).reshape(k, -1).T
    if np.asarray(w).size != every.size or not np.array_equal(np.asarray(w).reshape(-1, k), every):
        return f"the indices are not every position of {x[:k]} in order"
    return unit_axes(m.shape("g"), x) is not None or f"{m.shape('g')} is not {x} with unit axes inserted"


def _rules() -> list[Rule]:
    out: list[Rule] = [
        _noop("pad", "pad(x) with every pad 0 => x.",
              [ex({"x": (2, 3)}, op={"pads": (0, 0, 0, 0)}),
               ex({"x": (1, 4, 5, 5)}, op={"pads": (0,) * 8, "mode": "reflect"}),
               ex({"x": (6,)}, op={"pads": (0, 0), "value": 2.0})], ((_pads_zero, "every pad is 0"),)),
        _noop("slice", "slice(x) with steps 1 that keeps every element => x.",
              [ex({"x": (2, 3)}, op={"starts": [0], "ends": [INT64_MAX], "axes": [1], "steps": [1]}),
               ex({"x": (1, 4, 5)}, op={"starts": [0, -5], "ends": [1, 5], "axes": [0, 2], "steps": [1, 1]}),
               ex({"x": (6,)}, op={"starts": [-100], "ends": [100], "axes": [0], "steps": [1]})],
              ((_steps_one, "every step is 1"),)),
        _noop("expand", "expand(x) to x's own shape => x.",
              [ex({"x": (2, 3)}, op={"shape": (2, 3)}), ex({"x": (1, 4, 5)}, op={"shape": (1, 1, 5)}),
               ex({"x": (6,)}, op={"shape": (1,)})]),
        _noop("concat", "concat(x) of one input => x (the TorchScript exporter's torch.cat of a one-tensor list: the "
              "decoders' first past key, copied every step).",
              [ex({"x": (2, 3)}, op={"axis": 1}), ex({"x": (1, 2, 5, 4)}, op={"axis": -2}),
               ex({"x": ((6,), "int64")}, op={"axis": 0})]),
        _noop("cast", "cast(x) to x's own dtype => x.",
              [ex({"x": (2, 3)}, op={"to": "float32"}), ex({"x": ((4,), "int64")}, op={"to": "int64"}),
               ex({"x": ((1, 5), "float16")}, op={"to": "float16"})]),
        rule("cleanup_cast_round_trip", "cast(cast(x, mid), dtype of x) => x when mid holds every value of x's "
             "dtype (float32 -> float64 -> float32, int32 -> int64 -> int32, bool -> anything -> bool).",
             lambda p: {"y": p.op1("cast", p.op1("cast", p.var("x"), name="c1"), name="c2")},
             lambda t, m: {"y": m.x},
             [ex({"x": (2, 3)}, c1={"to": "float64"}, c2={"to": "float32"}),
              ex({"x": ((4,), "int32")}, c1={"to": "int64"}, c2={"to": "int32"}),
              ex({"x": ((1, 5), "float16")}, c1={"to": "float32"}, c2={"to": "float16"})],
             [(_cast_round_trip, "the middle type holds every value of x's")], tags=TAGS),
        rule("cleanup_cast_cast", "cast(cast(x, mid), out) => cast(x, out) for floats when mid is at least as wide "
             "as x (the first cast is exact, so only the second rounds, the same value).",
             lambda p: {"y": p.op1("cast", p.op1("cast", p.var("x"), name="c1"), name="c2")},
             lambda t, m: {"y": t.op("cast", m.x, to=m.attr("c2", "to"))},
             [ex({"x": ((2, 3), "float16")}, c1={"to": "float64"}, c2={"to": "float32"}),
              ex({"x": (4,)}, c1={"to": "float64"}, c2={"to": "float16"}),
              ex({"x": ((1, 5), "float16")}, c1={"to": "float32"}, c2={"to": "float64"})],
             [(_cast_cast_float, "the middle float is at least as wide as x"),
              (lambda m: m.attr("c2", "to") != m.type("x").dtype or "a round trip (cleanup_cast_round_trip)",
               "not a round trip")], tags=TAGS),
        rule("cleanup_view_chain", "a chain of two views (reshape, squeeze, unsqueeze, flatten; not two reshapes, "
             "which cpu_reshape_reshape covers) => one reshape to the last shape, or x itself when that is x's shape.",
             lambda p: {"y": p.any(p.any(p.var("x"), name="v1"), name="v2")}, _view_target,
             [ex({"x": (2, 3, 4)}, ops={"v1": "unsqueeze", "v2": "reshape"}, v1={"axes": (0,)},
                 v2={"shape": (6, 4)}),
              ex({"x": (1, 8, 1)}, ops={"v1": "squeeze", "v2": "unsqueeze"}, v1={"axes": (0, 2)},
                 v2={"axes": (0, 2)}, note="round trip"),
              ex({"x": (2, 2, 3)}, ops={"v1": "flatten", "v2": "squeeze"}, v1={"axis": 0}, v2={"axes": (0,)})],
             [(_view_chain, "two views, not both reshapes")], tags=TAGS),
        rule("cleanup_gather_rows_in_order", "gather(flatten(x), idx, axis=0) with idx 0, 1, ..., N-1 over the N "
             "rows in order => unsqueeze(x): x's elements as they are, with unit axes (the TorchScript exporter's "
             "x[b, j] lookup of an attention mask by a row-major index, b*T + j, built from its sizes at run time).",
             lambda p: {"y": p.gather(p.flatten(p.var("x"), name="fl"), p.weight("w"), axis=0, name="g")},
             lambda t, m: {"y": t.unsqueeze(m.x, axes=unit_axes(m.shape("g"), m.shape("x")))},
             [ex({"x": (2, 8), "w": ((2, 1, 1, 8), "int64")}, fl={"axis": 2},
                 data={"w": np.arange(16, dtype=np.int64).reshape(2, 1, 1, 8)}),
              ex({"x": (3, 4, 5), "w": ((3, 1, 4), "int64")}, fl={"axis": 2},
                 data={"w": np.arange(12, dtype=np.int64).reshape(3, 1, 4)}),
              ex({"x": (1, 6), "w": ((1, 6), "int64")}, fl={"axis": 2},
                 data={"w": np.arange(6, dtype=np.int64).reshape(1, 6)})],
             [(_rows_in_order, "the indices are the rows in order")], tags=TAGS),
        rule("cleanup_gather_nd_in_order", "gather_nd(x, idx) with idx every position of x's first k axes in "
             "row-major order => unsqueeze(x): x's elements as they are, with unit axes (the dynamo exporter's "
             "x[b, j] lookup of an attention mask at the (batch, key) pairs of two broadcast ranges).",
             lambda p: {"y": p.gather_nd(p.var("x"), p.weight("w"), name="g")},
             lambda t, m: {"y": t.unsqueeze(m.x, axes=unit_axes(m.shape("g"), m.shape("x")))},
             [ex({"x": (2, 8), "w": ((2, 1, 1, 8, 2), "int64")},
                 data={"w": np.indices((2, 8)).transpose(1, 2, 0).reshape(2, 1, 1, 8, 2)}),
              ex({"x": (3, 4, 5), "w": ((3, 1, 4, 2), "int64")},
                 data={"w": np.indices((3, 4)).transpose(1, 2, 0).reshape(3, 1, 4, 2)}),
              ex({"x": (4, 6), "w": ((4, 1, 1), "int64")}, data={"w": np.arange(4).reshape(4, 1, 1)})],
             [(_pairs_in_order, "the indices are every position in order")], tags=TAGS),
    ]
    return out


@functools.lru_cache(maxsize=1)
def _build() -> tuple[Rule, ...]:
    from graphsub.rules.library import cpu

    return (*_rules(), *(r for r in cpu.rules() if "cleanup" in r.tags))


def rules() -> list[Rule]:
    """The ``cleanup`` set (see the module docstring)."""
    return list(_build())


__all__ = ["TAGS", "rules"]
