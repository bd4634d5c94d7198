"""TASO's concat/split/pooling properties (Table 2, lower half) as ``algebra`` rules.

Rules are binary in concat (two operands), as in TASO.  Concat axes in patterns are canonical
(non-negative); the rules generalise TASO's fixed axes where the identity holds for any axis
(``concat(a, concat(b, ..)) <-> concat(b, concat(a, ..))`` for any ``a != b``, transposes for any
permutation, matmuls for any rank >= 2 with the axes moved accordingly, pooling over the batch and
channel axes).  Rules are made with the authoring kit (:mod:`graphsub.rules.library.kit`);
:mod:`graphsub.rules.library.algebra` adds them to the ``algebra`` set (this module does not import it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphsub.rules.library.kit import (
    F4,
    OPS,
    RuleFactory,
    W,
    conv_attrs,
    ex,
    min_rank,
    perm,
    same_attrs,
    same_rank,
)
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue, one_of
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("algebra")


def _ax(m: MatchView, name: str = "cat") -> int:
    """The axis of a matched concat."""
    return int(m.attr(name, "axis"))


def _except(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """``shape`` without ``axis``."""
    return shape[:axis] + shape[axis + 1:]


def _same_but_axis(a: str, b: str, node: str = "cat") -> W:
    """Where: ``a`` and ``b`` agree except along the axis of concat ``node``."""
    return (lambda m: _except(m.shape(a), _ax(m, node)) == _except(m.shape(b), _ax(m, node)),
            f"{a} and {b} agree except along the concat axis")


# ----------------------------------------------------------------------------- split / swap / unary


def _split_concat(p: PatternBuilder) -> dict[str, PValue]:
    cat = p.concat(p.var("x"), p.var("y"), name="cat")
    a, b = p.split(cat, outputs=2, name="sp")
    return {"cat": cat, "a": a, "b": b}


def _split_ok(m: MatchView) -> bool:
    ax = _ax(m)
    return _ax(m, "sp") == ax and tuple(m.attr("sp", "sizes")) == (m.shape("x")[ax], m.shape("y")[ax])


def _swap(p: PatternBuilder) -> dict[str, PValue]:
    i1 = p.concat(p.var("x"), p.var("y"), name="i1")
    return {"out": p.concat(i1, p.concat(p.var("z"), p.var("w"), name="i2"), name="cat")}


def _swap_ok(m: MatchView) -> bool | str:
    a, b = _ax(m), _ax(m, "i1")
    if _ax(m, "i2") != b or a == b:
        return "inner axes must be equal and differ from the outer axis"
    return m.shape("x")[b] == m.shape("z")[b] or "x and z differ along the inner axis"


def _basic() -> list[Rule]:
    def two(x: tuple[int, ...], y: tuple[int, ...], axis: int, **extra: Any) -> Example:
        return ex({"x": x, "y": y, **extra}, cat={"axis": axis})

    ex_un = [two((2, 3), (2, 5), 1), two((1, 4, 2, 2), (1, 2, 2, 2), 1), two((2, 3, 4), (1, 3, 4), 0)]
    ex_sm = [two((2, 3), (2, 5), 1, w=()), two((1, 4, 2, 2), (1, 2, 2, 2), 1, w=(1,)),
             two((2, 3, 4), (1, 3, 4), 0, w=(1, 1, 1))]
    return [
        rule("alg_split_concat", "split(concat(x, y, a), a, sizes of x and y) -> x, y (the concat stays only if "
             "something else reads it).", _split_concat,
             lambda t, m: {"cat": m.cat, "a": m.x, "b": m.y},
             [ex({"x": (2, 3), "y": (2, 5)}, cat={"axis": 1}, sp={"axis": 1, "sizes": (3, 5)}),
              ex({"x": (1, 4, 2, 2), "y": (1, 2, 2, 2)}, cat={"axis": 1}, sp={"axis": 1, "sizes": (4, 2)}),
              ex({"x": (2, 3, 4), "y": (1, 3, 4)}, cat={"axis": 0}, sp={"axis": 0, "sizes": (2, 1)})],
             [(_split_ok, "the split undoes the concat")]),
        rule("alg_concat_swap", "concat(a, concat(b, x, y), concat(b, z, w)) -> concat(b, concat(a, x, z), "
             "concat(a, y, w)) for a != b (TASO: a=0, b=1; self-inverse).", _swap,
             lambda t, m: {"out": t.concat(t.concat(m.x, m.z, axis=_ax(m)), t.concat(m.y, m.w, axis=_ax(m)),
                                           axis=_ax(m, "i1"))},
             [ex({"x": (2, 3), "y": (2, 4), "z": (1, 3), "w": (1, 4)}, cat={"axis": 0}, i1={"axis": 1},
                 i2={"axis": 1}),
              ex({"x": (1, 2, 2, 2), "y": (1, 3, 2, 2), "z": (1, 2, 2, 2), "w": (1, 3, 2, 2)}, cat={"axis": 0},
                 i1={"axis": 1}, i2={"axis": 1}),
              ex({"x": (2, 3, 4), "y": (1, 3, 4), "z": (2, 3, 1), "w": (1, 3, 1)}, cat={"axis": 2},
                 i1={"axis": 0}, i2={"axis": 0})], [(_swap_ok, "swappable")]),
        rule("alg_concat_relu_pull", "concat(a, relu(x), relu(y)) -> relu(concat(a, x, y)).",
             lambda p: {"out": p.concat(p.relu(p.var("x")), p.relu(p.var("y")), name="cat")},
             lambda t, m: {"out": t.relu(t.concat(m.x, m.y, axis=_ax(m)))}, ex_un),
        rule("alg_concat_relu_push", "relu(concat(a, x, y)) -> concat(a, relu(x), relu(y)).",
             lambda p: {"out": p.relu(p.concat(p.var("x"), p.var("y"), name="cat"))},
             lambda t, m: {"out": t.concat(t.relu(m.x), t.relu(m.y), axis=_ax(m))}, ex_un),
        rule("alg_concat_smul_pull", "concat(a, smul(x, w), smul(y, w)) -> smul(concat(a, x, y), w).",
             lambda p: {"out": p.concat(p.smul(p.var("x"), (w := p.var("w"))), p.smul(p.var("y"), w), name="cat")},
             lambda t, m: {"out": t.smul(t.concat(m.x, m.y, axis=_ax(m)), m.w)}, ex_sm),
        rule("alg_concat_smul_push", "smul(concat(a, x, y), w) -> concat(a, smul(x, w), smul(y, w)).",
             lambda p: {"out": p.smul(p.concat(p.var("x"), p.var("y"), name="cat"), p.var("w"))},
             lambda t, m: {"out": t.concat(t.smul(m.x, m.w), t.smul(m.y, m.w), axis=_ax(m))}, ex_sm),
    ]


# ----------------------------------------------------------------------------- binary elementwise


def _bin_ok(m: MatchView, axis: int) -> bool | str:
    """concat(a, op(x, y), op(z, w)) == op(concat(a, x, z), concat(a, y, w)) under broadcasting."""
    sx, sy, sz, sw = (m.shape(n) for n in ("x", "y", "z", "w"))
    if not len(sx) == len(sy) == len(sz) == len(sw):
        return "x, y, z, w must have equal ranks"
    if sx[axis] != sy[axis] or sz[axis] != sw[axis]:
        return "operands must not broadcast along the concat axis"
    if _except(sx, axis) != _except(sz, axis) or _except(sy, axis) != _except(sw, axis):
        return "x/z and y/w must agree off the concat axis"
    return True


def _binary() -> list[Rule]:
    ex_pull = [ex({"x": (2, 3), "y": (2, 3), "z": (2, 5), "w": (2, 5)}, cat={"axis": 1}),
               ex({"x": (1, 4, 3, 3), "y": (1, 4, 1, 1), "z": (1, 2, 3, 3), "w": (1, 2, 1, 1)}, cat={"axis": 1}),
               ex({"x": (2, 3, 4), "y": (2, 1, 4), "z": (1, 3, 4), "w": (1, 1, 4)}, cat={"axis": 0})]
    ex_push = [ex(e.types, c1=e.attrs["cat"], c2=e.attrs["cat"]) for e in ex_pull]

    def family(op: str) -> list[Rule]:
        f = OPS[op]
        return [
            rule(f"alg_concat_{op}_pull", f"concat(a, {op}(x, y), {op}(z, w)) -> {op}(concat(a, x, z), concat(a, y, "
                 "w)) (equal ranks; broadcasting only off the concat axis, consistently for x/z and y/w).",
                 lambda p: {"out": p.concat(f(p.var("x"), p.var("y")), f(p.var("z"), p.var("w")), name="cat")},
                 lambda t, m: {"out": f(t.concat(m.x, m.z, axis=_ax(m)), t.concat(m.y, m.w, axis=_ax(m)))},
                 ex_pull, [(lambda m: _bin_ok(m, _ax(m)), "concat and broadcasting commute")]),
            rule(f"alg_concat_{op}_push", f"{op}(concat(a, x, z), concat(a, y, w)) -> concat(a, {op}(x, y), {op}(z, "
                 "w)) (same conditions as the pull).",
                 lambda p: {"out": f(p.concat(p.var("x"), p.var("z"), name="c1"),
                                     p.concat(p.var("y"), p.var("w"), name="c2"))},
                 lambda t, m: {"out": t.concat(f(m.x, m.y), f(m.z, m.w), axis=_ax(m, "c1"))},
                 ex_push, [(lambda m: _ax(m, "c1") == _ax(m, "c2"), "equal concat axes"),
                           (lambda m: _bin_ok(m, _ax(m, "c1")), "concat and broadcasting commute")]),
        ]

    return [*family("add"), *family("mul")]


# ----------------------------------------------------------------------------- transpose / matmul


def _mm_concat_left_ok(m: MatchView) -> bool:
    return (m.shape("y")[:-1] == m.shape("z")[:-1] and _ax(m) == len(m.shape("cat")) - 1
            and m.attr("m1", "act") == m.attr("m2", "act"))


def _mm_concat_right_ok(m: MatchView) -> bool:
    sx, sy = m.shape("x"), m.shape("y")
    return (sx[:-2] == sy[:-2] and sx[-1] == sy[-1] and _ax(m) == len(m.shape("cat")) - 2
            and m.attr("m1", "act") == m.attr("m2", "act"))


def _mm_split_ok(m: MatchView) -> bool:
    sx, sy, sz, sw = (m.shape(n) for n in ("x", "y", "z", "w"))
    return sx[:-1] == sz[:-1] and sy[:-2] == sw[:-2] and sy[-1] == sw[-1]


def _act(m: MatchView, n: str = "mm") -> str:
    return str(m.attr(n, "act"))


def _transpose() -> list[Rule]:
    tr_pull = [ex({"x": (2, 3), "y": (4, 3)}, tx={"perm": (1, 0)}, ty={"perm": (1, 0)}, cat={"axis": 1}),
               ex({"x": (2, 3, 4), "y": (2, 5, 4)}, tx={"perm": (2, 0, 1)}, ty={"perm": (2, 0, 1)}, cat={"axis": 2}),
               ex({"x": (1, 3, 4, 5), "y": (1, 2, 4, 5)}, tx={"perm": (0, 2, 3, 1)}, ty={"perm": (0, 2, 3, 1)},
                  cat={"axis": 3})]
    tr_push = [ex({"x": (2, 3), "y": (4, 3)}, t={"perm": (1, 0)}, cat={"axis": 0}),
               ex({"x": (2, 3, 4), "y": (2, 5, 4)}, t={"perm": (2, 0, 1)}, cat={"axis": 1}),
               ex({"x": (1, 3, 4, 5), "y": (1, 2, 4, 5)}, t={"perm": (0, 2, 3, 1)}, cat={"axis": 1})]
    return [
        rule("alg_concat_transpose_pull", "concat(a, transpose(x, p), transpose(y, p)) -> transpose(concat(p[a], x, "
             "y), p) (TASO: 2-D, a=1).",
             lambda p: {"out": p.concat(p.transpose(p.var("x"), name="tx"), p.transpose(p.var("y"), name="ty"),
                                        name="cat")},
             lambda t, m: {"out": t.transpose(t.concat(m.x, m.y, axis=perm(m, "tx")[_ax(m)]), perm=perm(m, "tx"))},
             tr_pull, [(lambda m: perm(m, "tx") == perm(m, "ty"), "equal perms")]),
        rule("alg_concat_transpose_push", "transpose(concat(b, x, y), p) -> concat(p^-1[b], transpose(x, p), "
             "transpose(y, p)).",
             lambda p: {"out": p.transpose(p.concat(p.var("x"), p.var("y"), name="cat"), name="t")},
             lambda t, m: {"out": t.concat(t.transpose(m.x, perm=perm(m, "t")), t.transpose(m.y, perm=perm(m, "t")),
                                           axis=perm(m, "t").index(_ax(m)))}, tr_push),
    ]


def _matmul_concat() -> list[Rule]:
    """A concat of two matmuls' outputs as one matmul of a concatenated operand, and back."""
    left: list[tuple[dict[str, Any], int, str]] = [
        ({"x": (2, 3), "y": (3, 4), "z": (3, 5)}, 1, "none"), ({"x": (2, 2, 3), "y": (3, 4), "z": (3, 1)}, 2, "relu"),
        ({"x": (3,), "y": (2, 3, 4), "z": (2, 3, 2)}, 1, "none")]
    right: list[tuple[dict[str, Any], int, str]] = [
        ({"x": (2, 3), "y": (4, 3), "z": (3, 5)}, 0, "none"),
        ({"x": (2, 2, 3), "y": (2, 1, 3), "z": (3, 4)}, 1, "relu"),
        ({"x": (1, 3), "y": (2, 3), "z": (2, 3, 4)}, 1, "none")]
    return [
        rule("alg_concat_matmul_left_pull", "concat(last, matmul(x, y), matmul(x, z)) -> matmul(x, concat(last, y, "
             "z)) (y, z of rank >= 2 agreeing except the last axis; equal acts).",
             lambda p: {"out": p.concat(p.matmul((x := p.var("x")), p.var("y"), name="m1"),
                                        p.matmul(x, p.var("z"), name="m2"), name="cat")},
             lambda t, m: {"out": t.matmul(m.x, t.concat(m.y, m.z, axis=len(m.shape("y")) - 1), act=_act(m, "m1"))},
             [ex(ty, cat={"axis": a}, m1={"act": c}, m2={"act": c}) for ty, a, c in left],
             [min_rank(2, "y", "z"), same_rank("y", "z"), (_mm_concat_left_ok, "concat of the output columns")]),
        rule("alg_concat_matmul_left_push", "matmul(x, concat(last, y, z)) -> concat(last, matmul(x, y), matmul(x, "
             "z)) (rank(y) >= 2).",
             lambda p: {"out": p.matmul(p.var("x"), p.concat(p.var("y"), p.var("z"), name="cat"), name="mm")},
             lambda t, m: {"out": t.concat(t.matmul(m.x, m.y, act=_act(m)), t.matmul(m.x, m.z, act=_act(m)),
                                           axis=len(m.shape("mm")) - 1)},
             [ex(ty, cat={"axis": len(ty["y"]) - 1}, mm={"act": c}) for ty, _, c in left],
             [min_rank(2, "y"), (lambda m: _ax(m) == len(m.shape("y")) - 1, "concat along the last axis")]),
        rule("alg_concat_matmul_right_pull", "concat(rows, matmul(x, z), matmul(y, z)) -> matmul(concat(rows, x, "
             "y), z) (x, y of rank >= 2 agreeing except the row axis; rank(z) >= 2; equal acts).",
             lambda p: {"out": p.concat(p.matmul(p.var("x"), (z := p.var("z")), name="m1"),
                                        p.matmul(p.var("y"), z, name="m2"), name="cat")},
             lambda t, m: {"out": t.matmul(t.concat(m.x, m.y, axis=len(m.shape("x")) - 2), m.z, act=_act(m, "m1"))},
             [ex(ty, cat={"axis": a}, m1={"act": c}, m2={"act": c}) for ty, a, c in right],
             [min_rank(2, "x", "y", "z"), same_rank("x", "y"), (_mm_concat_right_ok, "concat of the output rows")]),
        rule("alg_concat_matmul_right_push", "matmul(concat(rows, x, y), z) -> concat(rows, matmul(x, z), "
             "matmul(y, z)) (rank(x), rank(z) >= 2).",
             lambda p: {"out": p.matmul(p.concat(p.var("x"), p.var("y"), name="cat"), p.var("z"), name="mm")},
             lambda t, m: {"out": t.concat(t.matmul(m.x, m.z, act=_act(m)), t.matmul(m.y, m.z, act=_act(m)),
                                           axis=len(m.shape("mm")) - 2)},
             [ex(ty, cat={"axis": len(ty["x"]) - 2}, mm={"act": c}) for ty, _, c in right],
             [min_rank(2, "x", "z"), (lambda m: _ax(m) == len(m.shape("x")) - 2, "concat along the row axis")]),
    ]


def _matmul_split() -> list[Rule]:
    """A matmul of concatenated operands as the sum of two matmuls, and back."""
    split: list[dict[str, Any]] = [
        {"x": (2, 3), "z": (2, 4), "y": (3, 5), "w": (4, 5)},
        {"x": (2, 2, 3), "z": (2, 2, 1), "y": (3, 4), "w": (1, 4)},
        {"x": (1, 3), "z": (1, 2), "y": (2, 3, 4), "w": (2, 2, 4)}]
    return [
        rule("alg_matmul_concat_split", "matmul(concat(last, x, z), concat(rows, y, w)) -> add(matmul(x, y), "
             "matmul(z, w)) (act none; rank >= 2; x's columns match y's rows).",
             lambda p: {"out": p.matmul(p.concat(p.var("x"), p.var("z"), name="c1"),
                                        p.concat(p.var("y"), p.var("w"), name="c2"), act="none")},
             lambda t, m: {"out": m.x @ m.y + m.z @ m.w},
             [ex(ty, c1={"axis": len(ty["x"]) - 1}, c2={"axis": len(ty["y"]) - 2}) for ty in split],
             [min_rank(2, "x", "y"),
              (lambda m: _ax(m, "c1") == len(m.shape("x")) - 1 and _ax(m, "c2") == len(m.shape("y")) - 2,
               "concats along x's columns and y's rows"),
              (lambda m: m.shape("x")[-1] == m.shape("y")[-2], "x's columns match y's rows")]),
        rule("alg_matmul_concat_merge", "add(matmul(x, y), matmul(z, w)) -> matmul(concat(last, x, z), concat(rows, "
             "y, w)) (acts none; x/z and y/w of equal ranks >= 2 agreeing off the concat axes).",
             lambda p: {"out": p.matmul(p.var("x"), p.var("y"), act="none")
                        + p.matmul(p.var("z"), p.var("w"), act="none")},
             lambda t, m: {"out": t.concat(m.x, m.z, axis=len(m.shape("x")) - 1)
                           @ t.concat(m.y, m.w, axis=len(m.shape("y")) - 2)},
             [ex(ty) for ty in split],
             [min_rank(2, "x", "y"), same_rank("x", "z"), same_rank("y", "w"), (_mm_split_ok, "mergeable")]),
    ]


# ----------------------------------------------------------------------------- conv / pool


def _conv_ex(pairs: list[tuple[dict[str, Any], dict[str, Any]]], *names: str) -> list[Example]:
    """One example per (types, conv attributes) pair, the attributes given to each conv ``names``."""
    out = []
    for ty, a in pairs:
        attrs: dict[str, Any] = {n: dict(a) for n in names}
        out.append(ex(ty, **attrs))
    return out


def _conv() -> list[Rule]:
    ca = conv_attrs

    def spatial(m: MatchView, n: str) -> tuple[int, ...]:
        s = m.shape(n)
        return (s[0], *s[2:])

    s2: dict[str, Any] = {"strides": (2, 2), "act": "relu"}
    rl: dict[str, Any] = {"pads": (0, 1, 0, 1), "dilations": (2, 1)}
    p1: dict[str, Any] = {"pads": (1, 1, 1, 1)}
    batch: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"x": F4, "y": (2, 3, 6, 6), "z": (4, 3, 3, 3)}, p1),
        ({"x": (2, 4, 5, 5), "y": (1, 4, 5, 5), "z": (4, 2, 3, 3)}, s2),
        ({"x": (1, 2, 7, 5), "y": (1, 2, 7, 5), "z": (2, 1, 1, 3)}, rl)]
    outc: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"x": F4, "y": (4, 3, 3, 3), "z": (2, 3, 3, 3)}, p1),
        ({"x": (2, 4, 5, 5), "y": (4, 4, 3, 3), "z": (4, 4, 3, 3)}, s2),
        ({"x": (1, 2, 7, 5), "y": (2, 2, 1, 3), "z": (3, 2, 1, 3)}, rl)]
    inc: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"x": F4, "z": (1, 2, 6, 6), "y": (4, 3, 3, 3), "w": (4, 2, 3, 3)}, p1),
        ({"x": (2, 4, 5, 5), "z": (2, 4, 5, 5), "y": (4, 4, 3, 3), "w": (4, 4, 3, 3)}, {"strides": (2, 2)}),
        ({"x": (1, 2, 7, 5), "z": (1, 1, 7, 5), "y": (2, 2, 1, 3), "w": (2, 1, 1, 3)}, rl)]
    g1 = (lambda m: m.shape("y")[1] == m.shape("x")[1], "groups == 1")
    return [
        rule("alg_concat_conv_batch_pull", "concat(0, conv(x, z), conv(y, z)) -> conv(concat(0, x, y), z) (equal "
             "attributes; x, y agree except the batch).",
             lambda p: {"out": p.concat(p.conv2d(p.var("x"), (z := p.var("z")), name="c1"),
                                        p.conv2d(p.var("y"), z, name="c2"), axis=0)},
             lambda t, m: {"out": t.conv2d(t.concat(m.x, m.y, axis=0), m.z, **ca(m, "c1"))},
             _conv_ex(batch, "c1", "c2"), [same_attrs("c1", "c2"), (lambda m: m.shape("x")[1:] == m.shape("y")[1:],
                                                                    "x, y agree except the batch")]),
        rule("alg_concat_conv_batch_push", "conv(concat(0, x, y), z) -> concat(0, conv(x, z), conv(y, z)).",
             lambda p: {"out": p.conv2d(p.concat(p.var("x"), p.var("y"), axis=0), p.var("z"), name="c")},
             lambda t, m: {"out": t.concat(t.conv2d(m.x, m.z, **ca(m, "c")), t.conv2d(m.y, m.z, **ca(m, "c")), axis=0)},
             _conv_ex(batch, "c")),
        rule("alg_concat_conv_outch_pull", "concat(1, conv(x, y), conv(x, z)) -> conv(x, concat(0, y, z)) (groups "
             "1; equal attributes and kernel sizes).",
             lambda p: {"out": p.concat(p.conv2d((x := p.var("x")), p.var("y"), name="c1"),
                                        p.conv2d(x, p.var("z"), name="c2"), axis=1)},
             lambda t, m: {"out": t.conv2d(m.x, t.concat(m.y, m.z, axis=0), **ca(m, "c1"))},
             _conv_ex(outc, "c1", "c2"),
             [same_attrs("c1", "c2"), g1, (lambda m: m.shape("y")[1:] == m.shape("z")[1:], "equal kernel shapes")]),
        rule("alg_concat_conv_outch_push", "conv(x, concat(0, y, z)) -> concat(1, conv(x, y), conv(x, z)) "
             "(groups 1).",
             lambda p: {"out": p.conv2d(p.var("x"), p.concat(p.var("y"), p.var("z"), axis=0), name="c")},
             lambda t, m: {"out": t.concat(t.conv2d(m.x, m.y, **ca(m, "c")), t.conv2d(m.x, m.z, **ca(m, "c")), axis=1)},
             _conv_ex(outc, "c"), [g1]),
        rule("alg_conv_concat_split", "conv(concat(1, x, z), concat(1, y, w)) -> add(conv(x, y), conv(z, w)) (act "
             "none; groups 1).",
             lambda p: {"out": p.conv2d(p.concat(p.var("x"), p.var("z"), axis=1),
                                        p.concat(p.var("y"), p.var("w"), axis=1), act="none", name="c")},
             lambda t, m: {"out": t.conv2d(m.x, m.y, **ca(m, "c")) + t.conv2d(m.z, m.w, **ca(m, "c"))},
             _conv_ex(inc, "c"), [g1, (lambda m: m.shape("w")[1] == m.shape("z")[1], "groups == 1")]),
        rule("alg_conv_concat_merge", "add(conv(x, y), conv(z, w)) -> conv(concat(1, x, z), concat(1, y, w)) (acts "
             "none, equal attributes; groups 1; x/z and y/w agree off axis 1).",
             lambda p: {"out": p.add(p.conv2d(p.var("x"), p.var("y"), act="none", name="c1"),
                                     p.conv2d(p.var("z"), p.var("w"), act="none", name="c2"))},
             lambda t, m: {"out": t.conv2d(t.concat(m.x, m.z, axis=1), t.concat(m.y, m.w, axis=1), **ca(m, "c1"))},
             _conv_ex(inc, "c1", "c2"),
             [same_attrs("c1", "c2"), g1, (lambda m: m.shape("w")[1] == m.shape("z")[1], "groups == 1"),
              (lambda m: spatial(m, "x") == spatial(m, "z") and spatial(m, "y") == spatial(m, "w"),
               "x/z and y/w agree off axis 1")]),
    ]


def _pool() -> list[Rule]:
    base: list[tuple[dict[str, Any], int, dict[str, Any]]] = [
        ({"x": F4, "y": (1, 2, 6, 6)}, 1, {"kernel": (3, 3), "pads": "SAME"}),
        ({"x": (2, 2, 7, 8), "y": (1, 2, 7, 8)}, 0, {"kernel": (2, 3), "strides": (2, 2)}),
        ({"x": (1, 4, 5, 5), "y": (1, 4, 5, 5)}, 1, {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                                     "ceil_mode": True, "act": "relu"})]
    out: list[Rule] = []

    def family(op: str, kind: str) -> list[Rule]:
        def attrs(a: Mapping[str, Any], op: str = op) -> dict[str, Any]:
            return {**a, "count_include_pad": True} if op == "avgpool2d" and "ceil_mode" in a else dict(a)

        return [
            rule(f"alg_concat_{kind}pool_pull", f"concat(a, {op}(x), {op}(y)) -> {op}(concat(a, x, y)) for a in "
                 "{0, 1} (equal attributes; x, y agree except along a).",
                 lambda p: {"out": p.concat(p.op1(op, p.var("x"), name="p1"), p.op1(op, p.var("y"), name="p2"),
                                            axis=one_of(0, 1), name="cat")},
                 lambda t, m: {"out": t.op(op, t.concat(m.x, m.y, axis=_ax(m)), **m.attrs("p1"))},
                 [ex(ty, cat={"axis": a}, p1=attrs(pa), p2=attrs(pa)) for ty, a, pa in base],
                 [same_attrs("p1", "p2"), _same_but_axis("x", "y")]),
            rule(f"alg_concat_{kind}pool_push", f"{op}(concat(a, x, y)) -> concat(a, {op}(x), {op}(y)) for a in "
                 "{0, 1}.",
                 lambda p: {"out": p.op1(op, p.concat(p.var("x"), p.var("y"), axis=one_of(0, 1), name="cat"),
                                         name="pool")},
                 lambda t, m: {"out": t.concat(t.op(op, m.x, **m.attrs("pool")), t.op(op, m.y, **m.attrs("pool")),
                                               axis=_ax(m))},
                 [ex(ty, cat={"axis": a}, pool=attrs(pa)) for ty, a, pa in base]),
        ]

    for op, kind in (("avgpool2d", "avg"), ("maxpool2d", "max")):
        out += family(op, kind)
    return out


def rules() -> list[Rule]:
    """The concat/split/pool ``algebra`` rules (cached by :func:`graphsub.rules.library.algebra.rules`)."""
    return [*_basic(), *_binary(), *_transpose(), *_matmul_concat(), *_matmul_split(), *_conv(), *_pool()]


__all__ = ["rules"]
