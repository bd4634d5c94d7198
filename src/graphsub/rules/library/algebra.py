"""TASO's operator properties (Jia et al., SOSP 2019, Table 2) as rewrite rules.

Each equality is a rule in the direction(s) useful to search -- usually both, as two rules
(``..._l2r`` / ``..._r2l``, ``..._push`` / ``..._pull``, ``..._expand`` / ``..._factor``);
self-inverse ones (commutativity, swapping nested concats) are a single rule.  Preconditions are
exact: elementwise rules allow numpy broadcasting only where it provably commutes with the
rewrite (associativity, commutativity, distributivity; same-rank broadcasting under transpose and
concat), scalar multiplication (``smul``) requires equal dtypes and a scalar rank the new
``smul`` accepts, ``matmul`` associativity/transpose rules require rank >= 2 operands (batch
broadcasting allowed), linearity rules equal shapes of the summed operands, conv
rules require the attributes they share to be equal and ``groups == 1`` where kernels are
concatenated.

This module holds the properties of single operators and their compositions (elementwise,
``smul``, transpose, matmul, conv, the constant ops); the properties of concat and split --
operators over *several* tensors along an axis -- are in
:mod:`graphsub.rules.library.algebra_concat`, which this module imports (never the reverse) to
assemble the set.  All rules are ``hand-written``, tagged ``algebra`` and named ``alg_*``;
:func:`rules` builds them once.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np

from graphsub.rules.library import algebra_concat
from graphsub.rules.library.kit import (
    F4,
    OPS,
    RuleFactory,
    activate,
    composed_perm,
    const_data,
    conv_attrs,
    ex,
    is_const,
    is_identity,
    min_rank,
    perm,
    rank_le,
    same_attrs,
    same_dtype,
    same_rank,
    same_shape,
    swap_last2,
    swaps_last2,
)
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Rule

rule = RuleFactory("algebra")

# ----------------------------------------------------------------------------- elementwise

_E3 = [ex({"x": (2, 3), "y": (2, 3), "z": (2, 3)}),
       ex({"x": (1, 4, 2, 2), "y": (4, 1, 1), "z": (2,)}),
       ex({"x": (3, 1), "y": (1, 5), "z": (3, 5)})]


def _elementwise() -> list[Rule]:
    def family(op: str) -> list[Rule]:
        f = OPS[op]
        return [
            rule(f"alg_{op}_assoc_l2r", f"{op}(x, {op}(y, z)) -> {op}({op}(x, y), z) (broadcasting is associative).",
                 lambda p: {"out": f(p.var("x"), f(p.var("y"), p.var("z")))},
                 lambda t, m: {"out": f(f(m.x, m.y), m.z)}, _E3),
            rule(f"alg_{op}_assoc_r2l", f"{op}({op}(x, y), z) -> {op}(x, {op}(y, z)).",
                 lambda p: {"out": f(f(p.var("x"), p.var("y")), p.var("z"))},
                 lambda t, m: {"out": f(m.x, f(m.y, m.z))}, _E3),
            rule(f"alg_{op}_comm", f"{op}(x, y) -> {op}(y, x) (self-inverse).",
                 lambda p: {"out": f(p.var("x"), p.var("y"))}, lambda t, m: {"out": f(m.y, m.x)},
                 [ex({"x": (2, 3), "y": (2, 3)}), ex({"x": (1, 4, 2, 2), "y": (4, 1, 1)}),
                  ex({"x": (5,), "y": (3, 1)})]),
        ]

    return [
        *family("add"), *family("mul"),
        rule("alg_mul_add_expand", "mul(add(x, y), z) -> add(mul(x, z), mul(y, z)) (distributivity; any "
             "broadcasting: both sides broadcast x, y, z to the same shape).",
             lambda p: {"out": (p.var("x") + p.var("y")) * p.var("z")},
             lambda t, m: {"out": m.x * m.z + m.y * m.z}, _E3),
        rule("alg_mul_add_factor", "add(mul(x, z), mul(y, z)) -> mul(add(x, y), z) (factor a common right factor).",
             lambda p: {"out": p.var("x") * (z := p.var("z")) + p.var("y") * z},
             lambda t, m: {"out": (m.x + m.y) * m.z}, _E3),
        rule("alg_mul_add_expand_left", "mul(z, add(x, y)) -> add(mul(z, x), mul(z, y)).",
             lambda p: {"out": p.var("z") * (p.var("x") + p.var("y"))},
             lambda t, m: {"out": m.z * m.x + m.z * m.y}, _E3),
        rule("alg_mul_add_factor_left", "add(mul(z, x), mul(z, y)) -> mul(z, add(x, y)).",
             lambda p: {"out": (z := p.var("z")) * p.var("x") + z * p.var("y")},
             lambda t, m: {"out": m.z * (m.x + m.y)}, _E3),
    ]


# ----------------------------------------------------------------------------- smul

_S3 = [ex({"x": (2, 3), "y": (2, 3), "w": ()}),
       ex({"x": (1, 4, 2, 2), "y": (4, 1, 1), "w": (1,)}),
       ex({"x": (3, 1), "y": (1, 5), "w": (1, 1)})]


def _smul() -> list[Rule]:
    sc = [ex({"x": (2, 3), "y": (), "w": ()}), ex({"x": (1, 4, 2, 2), "y": (1, 1), "w": (1,)}),
          ex({"x": (5,), "y": (1,), "w": (1,)})]
    return [
        rule("alg_smul_assoc_l2r", "smul(smul(x, y), w) -> smul(x, smul(y, w)) (y, w scalars; the inner smul "
             "takes the higher-rank scalar first; equal dtypes).",
             lambda p: {"out": p.smul(p.smul(p.var("x"), p.var("y")), p.var("w"))},
             lambda t, m: {"out": t.smul(m.x, t.smul(m.y, m.w) if len(m.shape("w")) <= len(m.shape("y"))
                                         else t.smul(m.w, m.y))},
             [*sc, ex({"x": (2, 2, 3), "y": (), "w": (1, 1)})], [same_dtype("x", "y", "w")]),
        rule("alg_smul_assoc_r2l", "smul(x, smul(y, w)) -> smul(smul(x, y), w) (equal dtypes).",
             lambda p: {"out": p.smul(p.var("x"), p.smul(p.var("y"), p.var("w")))},
             lambda t, m: {"out": t.smul(t.smul(m.x, m.y), m.w)}, sc, [same_dtype("x", "y", "w")]),
        rule("alg_smul_add_expand", "smul(add(x, y), w) -> add(smul(x, w), smul(y, w)) (rank(w) <= rank(x), "
             "rank(y); equal dtypes).",
             lambda p: {"out": p.smul(p.var("x") + p.var("y"), p.var("w"))},
             lambda t, m: {"out": t.smul(m.x, m.w) + t.smul(m.y, m.w)}, _S3,
             [rank_le("w", "x"), rank_le("w", "y"), same_dtype("x", "w")]),
        rule("alg_smul_add_factor", "add(smul(x, w), smul(y, w)) -> smul(add(x, y), w) (equal dtypes).",
             lambda p: {"out": p.smul(p.var("x"), (w := p.var("w"))) + p.smul(p.var("y"), w)},
             lambda t, m: {"out": t.smul(m.x + m.y, m.w)}, _S3, [same_dtype("x", "w")]),
        rule("alg_smul_mul_push", "smul(mul(x, y), w) -> mul(x, smul(y, w)) (rank(w) <= rank(y); equal dtypes).",
             lambda p: {"out": p.smul(p.var("x") * p.var("y"), p.var("w"))},
             lambda t, m: {"out": m.x * t.smul(m.y, m.w)}, _S3, [rank_le("w", "y"), same_dtype("x", "w")]),
        rule("alg_smul_mul_pull", "mul(x, smul(y, w)) -> smul(mul(x, y), w) (equal dtypes).",
             lambda p: {"out": p.var("x") * p.smul(p.var("y"), p.var("w"))},
             lambda t, m: {"out": t.smul(m.x * m.y, m.w)}, _S3, [same_dtype("x", "w")]),
    ]


# ----------------------------------------------------------------------------- transpose


def _transpose() -> list[Rule]:
    def tt(p: PatternBuilder) -> dict[str, PValue]:
        return {"out": p.transpose(p.transpose(p.var("x"), name="t1"), name="t2")}

    def perms(a: tuple[int, ...], b: tuple[int, ...]) -> dict[str, Any]:
        return {"t1": {"perm": a}, "t2": {"perm": b}}

    ex_bin = [ex({"x": (2, 3), "y": (2, 3)}, t={"perm": (1, 0)}),
              ex({"x": (2, 3, 4), "y": (1, 3, 1)}, t={"perm": (2, 0, 1)}),
              ex({"x": (1, 3, 4, 5), "y": (1, 3, 4, 5)}, t={"perm": (0, 2, 3, 1)})]
    ex_pull = [ex({"x": (2, 3), "y": (2, 3)}, tx={"perm": (1, 0)}, ty={"perm": (1, 0)}),
               ex({"x": (2, 3, 4), "y": (1, 3, 1)}, tx={"perm": (2, 0, 1)}, ty={"perm": (2, 0, 1)}),
               ex({"x": (1, 3, 4, 5), "y": (1, 3, 4, 5)}, tx={"perm": (0, 2, 3, 1)}, ty={"perm": (0, 2, 3, 1)})]

    def family(op: str) -> list[Rule]:
        f = OPS[op]
        return [
            rule(f"alg_transpose_{op}_push", f"transpose({op}(x, y), p) -> {op}(transpose(x, p), transpose(y, p)) "
                 "(x, y of equal rank: same-rank broadcasting commutes with permuting axes).",
                 lambda p: {"out": p.transpose(f(p.var("x"), p.var("y")), name="t")},
                 lambda t, m: {"out": f(t.transpose(m.x, perm=perm(m, "t")), t.transpose(m.y, perm=perm(m, "t")))},
                 ex_bin, [same_rank("x", "y")]),
            rule(f"alg_transpose_{op}_pull", f"{op}(transpose(x, p), transpose(y, p)) -> transpose({op}(x, y), p).",
                 lambda p: {"out": f(p.transpose(p.var("x"), name="tx"), p.transpose(p.var("y"), name="ty"))},
                 lambda t, m: {"out": t.transpose(f(m.x, m.y), perm=perm(m, "tx"))},
                 ex_pull, [(lambda m: perm(m, "tx") == perm(m, "ty"), "both perms are equal")]),
        ]

    ex_un = [ex({"x": (2, 3), "w": ()}, t={"perm": (1, 0)}), ex({"x": (2, 3, 4), "w": (1,)}, t={"perm": (2, 0, 1)}),
             ex({"x": (1, 3, 4, 5), "w": (1, 1, 1)}, t={"perm": (0, 2, 3, 1)})]
    ex_relu = [replace(e, types={"x": e.types["x"]}) for e in ex_un]
    return [
        rule("alg_transpose_cancel", "transpose(transpose(x, p1), p2) -> x when p2 undoes p1.", tt,
             lambda t, m: {"out": m.x},
             [ex({"x": (2, 3)}, **perms((1, 0), (1, 0))), ex({"x": (2, 3, 4)}, **perms((2, 0, 1), (1, 2, 0))),
              ex({"x": (1, 3, 4, 5)}, **perms((0, 2, 3, 1), (0, 3, 1, 2)))],
             [(lambda m: is_identity(composed_perm(m)), "the perms compose to the identity")]),
        rule("alg_transpose_compose", "transpose(transpose(x, p1), p2) -> transpose(x, p1[p2]) (not the identity).",
             tt, lambda t, m: {"out": t.transpose(m.x, perm=composed_perm(m))},
             [ex({"x": (2, 3, 4)}, **perms((1, 0, 2), (0, 2, 1))), ex({"x": (2, 3, 4)}, **perms((2, 0, 1), (2, 0, 1))),
              ex({"x": (1, 3, 4, 5)}, **perms((0, 2, 3, 1), (0, 2, 1, 3)))],
             [(lambda m: not is_identity(composed_perm(m)), "the perms do not compose to the identity")]),
        *family("add"), *family("mul"),
        rule("alg_transpose_smul_push", "transpose(smul(x, w), p) -> smul(transpose(x, p), w).",
             lambda p: {"out": p.transpose(p.smul(p.var("x"), p.var("w")), name="t")},
             lambda t, m: {"out": t.smul(t.transpose(m.x, perm=perm(m, "t")), m.w)}, ex_un),
        rule("alg_transpose_smul_pull", "smul(transpose(x, p), w) -> transpose(smul(x, w), p).",
             lambda p: {"out": p.smul(p.transpose(p.var("x"), name="t"), p.var("w"))},
             lambda t, m: {"out": t.transpose(t.smul(m.x, m.w), perm=perm(m, "t"))}, ex_un),
        rule("alg_transpose_relu_push", "transpose(relu(x), p) -> relu(transpose(x, p)).",
             lambda p: {"out": p.transpose(p.relu(p.var("x")), name="t")},
             lambda t, m: {"out": t.relu(t.transpose(m.x, perm=perm(m, "t")))}, ex_relu),
        rule("alg_transpose_relu_pull", "relu(transpose(x, p)) -> transpose(relu(x), p).",
             lambda p: {"out": p.relu(p.transpose(p.var("x"), name="t"))},
             lambda t, m: {"out": t.transpose(t.relu(m.x), perm=perm(m, "t"))}, ex_relu),
    ]


# ----------------------------------------------------------------------------- matmul


def _mm_act(m: MatchView) -> str:
    return str(m.attr("mm", "act"))


def _matmul_algebra() -> list[Rule]:
    """Associativity, scalar multiplication and distributivity of matmul."""
    ex_sc = [ex({"x": (2, 3), "y": (3, 4), "w": ()}), ex({"x": (2, 2, 3), "y": (3, 4), "w": (1, 1)}),
             ex({"x": (3,), "y": (3, 2), "w": (1,)})]
    ex_r = [ex({"x": (2, 3), "y": (3, 4), "z": (3, 4)}), ex({"x": (2, 2, 3), "y": (3, 4), "z": (3, 4)}),
            ex({"x": (3,), "y": (2, 3, 5), "z": (2, 3, 5)})]
    ex_l = [ex({"x": (2, 3), "y": (2, 3), "z": (3, 4)}), ex({"x": (2, 2, 3), "y": (2, 2, 3), "z": (3, 4)}),
            ex({"x": (1, 3), "y": (1, 3), "z": (2, 3, 5)})]
    ex_assoc = [ex({"x": (2, 3), "y": (3, 4), "z": (4, 5)}), ex({"x": (2, 2, 3), "y": (3, 4), "z": (1, 4, 2)}),
                ex({"x": (1, 3), "y": (3, 3), "z": (3, 2)}, mm={"act": "relu"})]
    return [
        rule("alg_matmul_assoc_l2r", "matmul(x, matmul(y, z)) -> matmul(matmul(x, y), z) (rank >= 2 operands, "
             "batch broadcasting allowed; inner act none, the outer act is kept).",
             lambda p: {"out": p.matmul(p.var("x"), p.matmul(p.var("y"), p.var("z"), act="none"), name="mm")},
             lambda t, m: {"out": t.matmul(m.x @ m.y, m.z, act=_mm_act(m))}, ex_assoc, [min_rank(2, "x", "y", "z")]),
        rule("alg_matmul_assoc_r2l", "matmul(matmul(x, y), z) -> matmul(x, matmul(y, z)) (rank >= 2 operands; "
             "inner act none, the outer act is kept).",
             lambda p: {"out": p.matmul(p.matmul(p.var("x"), p.var("y"), act="none"), p.var("z"), name="mm")},
             lambda t, m: {"out": t.matmul(m.x, m.y @ m.z, act=_mm_act(m))}, ex_assoc, [min_rank(2, "x", "y", "z")]),
        rule("alg_matmul_smul_push", "smul(matmul(x, y), w) -> matmul(x, smul(y, w)) (act none; rank(w) <= "
             "rank(y); equal dtypes).",
             lambda p: {"out": p.smul(p.matmul(p.var("x"), p.var("y"), act="none"), p.var("w"))},
             lambda t, m: {"out": m.x @ t.smul(m.y, m.w)}, ex_sc, [rank_le("w", "y"), same_dtype("x", "w")]),
        rule("alg_matmul_smul_pull", "matmul(x, smul(y, w)) -> smul(matmul(x, y), w) (act none; rank(w) <= "
             "rank of the product; equal dtypes).",
             lambda p: {"out": p.matmul(p.var("x"), p.smul(p.var("y"), p.var("w")), act="none", name="mm")},
             lambda t, m: {"out": t.smul(m.x @ m.y, m.w)},
             [ex({"x": (3,), "y": (3,), "w": ()}), *ex_sc[:2]], [rank_le("w", "mm"), same_dtype("x", "w")]),
        rule("alg_matmul_add_expand", "matmul(x, add(y, z)) -> add(matmul(x, y), matmul(x, z)) (act none; "
             "y, z of equal shape).",
             lambda p: {"out": p.matmul(p.var("x"), p.var("y") + p.var("z"), act="none")},
             lambda t, m: {"out": m.x @ m.y + m.x @ m.z}, ex_r, [same_shape("y", "z")]),
        rule("alg_matmul_add_factor", "add(matmul(x, y), matmul(x, z)) -> matmul(x, add(y, z)) (acts none; "
             "y, z of equal shape).",
             lambda p: {"out": p.matmul((x := p.var("x")), p.var("y"), act="none")
                        + p.matmul(x, p.var("z"), act="none")},
             lambda t, m: {"out": m.x @ (m.y + m.z)}, ex_r, [same_shape("y", "z")]),
        rule("alg_matmul_add_expand_left", "matmul(add(x, y), z) -> add(matmul(x, z), matmul(y, z)) (act none; "
             "x, y of equal shape).",
             lambda p: {"out": p.matmul(p.var("x") + p.var("y"), p.var("z"), act="none")},
             lambda t, m: {"out": m.x @ m.z + m.y @ m.z}, ex_l, [same_shape("x", "y")]),
        rule("alg_matmul_add_factor_left", "add(matmul(x, z), matmul(y, z)) -> matmul(add(x, y), z) (acts none; "
             "x, y of equal shape).",
             lambda p: {"out": p.matmul(p.var("x"), (z := p.var("z")), act="none")
                        + p.matmul(p.var("y"), z, act="none")},
             lambda t, m: {"out": (m.x + m.y) @ m.z}, ex_l, [same_shape("x", "y")]),
    ]


def _matmul_transpose() -> list[Rule]:
    """Transposes through matmul, and the identity matrix."""
    return [
        rule("alg_transpose_matmul_push", "transpose(matmul(x, y), p) -> matmul(transpose(y), transpose(x)) where "
             "p and the new transposes swap the last two axes (rank >= 2 operands; the act is kept).",
             lambda p: {"out": p.transpose(p.matmul(p.var("x"), p.var("y"), name="mm"), name="t")},
             lambda t, m: {"out": t.matmul(t.transpose(m.y, perm=swap_last2(len(m.shape("y")))),
                                           t.transpose(m.x, perm=swap_last2(len(m.shape("x")))), act=_mm_act(m))},
             [ex({"x": (2, 3), "y": (3, 4)}, t={"perm": (1, 0)}),
              ex({"x": (2, 2, 3), "y": (3, 4)}, t={"perm": (0, 2, 1)}),
              ex({"x": (1, 2, 3, 4), "y": (2, 4, 5)}, t={"perm": (0, 1, 3, 2)}, mm={"act": "relu"})],
             [min_rank(2, "x", "y"), (lambda m: swaps_last2(m, "t"), "p swaps the last two axes")]),
        rule("alg_transpose_matmul_pull", "matmul(transpose(y), transpose(x)) -> transpose(matmul(x, y)) where all "
             "transposes swap the last two axes (rank >= 2; the act is kept).",
             lambda p: {"out": p.matmul(p.transpose(p.var("y"), name="ty"), p.transpose(p.var("x"), name="tx"),
                                        name="mm")},
             lambda t, m: {"out": t.transpose(t.matmul(m.x, m.y, act=_mm_act(m)),
                                              perm=swap_last2(len(m.shape("mm"))))},
             [ex({"x": (2, 3), "y": (3, 4)}, tx={"perm": (1, 0)}, ty={"perm": (1, 0)}),
              ex({"x": (2, 2, 3), "y": (3, 4)}, tx={"perm": (0, 2, 1)}, ty={"perm": (1, 0)}),
              ex({"x": (1, 2, 3, 4), "y": (2, 4, 5)}, tx={"perm": (0, 1, 3, 2)}, ty={"perm": (0, 2, 1)},
                 mm={"act": "relu"})],
             [min_rank(2, "x", "y"), (lambda m: swaps_last2(m, "tx") and swaps_last2(m, "ty"),
                                      "both transposes swap the last two axes")]),
        rule("alg_matmul_identity", "matmul(x, I) -> x (I = const_imm(n) or a weight holding the identity "
             "matrix, n = last dim of x; a fused act becomes a separate op).",
             lambda p: {"out": p.matmul(p.var("x"), p.weight("k"), name="mm")},
             lambda t, m: {"out": activate(t, m.x, _mm_act(m))},
             [ex({"x": (2, 3), "k": (3, 3)}, data={"k": np.eye(3)}),
              ex({"x": (4,), "k": (4, 4)}, data={"k": np.eye(4)}),
              ex({"x": (2, 2, 5), "k": (5, 5)}, data={"k": np.eye(5)}, mm={"act": "relu"})],
             [(lambda m: is_const(m, "k", "const_imm", {"n": m.shape("x")[-1]}), "k is the identity matrix")]),
    ]


# ----------------------------------------------------------------------------- conv

_C3 = [ex({"x": F4, "y": (4, 3, 3, 3), "w": ()}, c={"pads": "SAME"}),
       ex({"x": (2, 4, 5, 5), "y": (4, 2, 3, 3), "w": (1,)}, c={"strides": (2, 2), "act": "relu"}),
       ex({"x": (1, 2, 7, 5), "y": (2, 1, 1, 3), "w": (1, 1, 1, 1)}, c={"pads": (0, 1, 0, 1), "dilations": (2, 1)})]
_C3N = [ex(e.types, c={**e.attrs["c"], "act": "none"}) for e in _C3]


def _conv_smul() -> list[Rule]:
    """A scalar moved between a conv's input, kernel and output."""
    ca = conv_attrs
    return [
        rule("alg_conv_smul_to_kernel", "conv(smul(x, w), y) -> conv(x, smul(y, w)) (any act; equal dtypes).",
             lambda p: {"out": p.conv2d(p.smul(p.var("x"), p.var("w")), p.var("y"), name="c")},
             lambda t, m: {"out": t.conv2d(m.x, t.smul(m.y, m.w), **ca(m, "c"))}, _C3, [same_dtype("x", "w")]),
        rule("alg_conv_smul_to_input", "conv(x, smul(y, w)) -> conv(smul(x, w), y) (any act; equal dtypes).",
             lambda p: {"out": p.conv2d(p.var("x"), p.smul(p.var("y"), p.var("w")), name="c")},
             lambda t, m: {"out": t.conv2d(t.smul(m.x, m.w), m.y, **ca(m, "c"))}, _C3, [same_dtype("x", "w")]),
        rule("alg_smul_conv_push", "smul(conv(x, y), w) -> conv(smul(x, w), y) (act none; equal dtypes).",
             lambda p: {"out": p.smul(p.conv2d(p.var("x"), p.var("y"), act="none", name="c"), p.var("w"))},
             lambda t, m: {"out": t.conv2d(t.smul(m.x, m.w), m.y, **ca(m, "c"))}, _C3N, [same_dtype("x", "w")]),
        rule("alg_smul_conv_pull", "conv(smul(x, w), y) -> smul(conv(x, y), w) (act none; equal dtypes).",
             lambda p: {"out": p.conv2d(p.smul(p.var("x"), p.var("w")), p.var("y"), act="none", name="c")},
             lambda t, m: {"out": t.smul(t.conv2d(m.x, m.y, **ca(m, "c")), m.w)}, _C3N, [same_dtype("x", "w")]),
        rule("alg_smul_conv_fold", "smul(conv(x, y), w) -> conv(x, smul(y, w)) (act none; equal dtypes; the "
             "scalar moves into the kernel).",
             lambda p: {"out": p.smul(p.conv2d(p.var("x"), p.var("y"), act="none", name="c"), p.var("w"))},
             lambda t, m: {"out": t.conv2d(m.x, t.smul(m.y, m.w), **ca(m, "c"))}, _C3N, [same_dtype("x", "w")]),
    ]


def _conv_linear() -> list[Rule]:
    """Linearity of conv in its kernel and its input; relu fused or not."""
    ca = conv_attrs
    ex_k = [replace(e, types={"x": e.types["x"], "y": e.types["y"], "z": e.types["y"]}) for e in _C3N]
    ex_k2 = [ex(e.types, c1=e.attrs["c"], c2=e.attrs["c"]) for e in ex_k]
    ex_i = [replace(e, types={"x": e.types["x"], "y": e.types["x"], "z": e.types["y"]}) for e in _C3N]
    ex_i2 = [ex(e.types, c1=e.attrs["c"], c2=e.attrs["c"]) for e in ex_i]
    ex_relu = [ex({"x": e.types["x"], "w": e.types["y"]}, c={**e.attrs["c"], "act": "relu"}) for e in _C3]
    ex_reluf = [ex(e.types, c={**e.attrs["c"], "act": "none"}) for e in ex_relu]
    ex_b = [replace(e, types={**e.types, "b": (e.types["w"][0],)}) for e in ex_relu]
    ex_bf = [replace(e, types={**e.types, "b": (e.types["w"][0],)}) for e in ex_reluf]
    return [
        rule("alg_conv_kernel_add_expand", "conv(x, add(y, z)) -> add(conv(x, y), conv(x, z)) (act none; y, z of "
             "equal shape).",
             lambda p: {"out": p.conv2d(p.var("x"), p.var("y") + p.var("z"), act="none", name="c")},
             lambda t, m: {"out": t.conv2d(m.x, m.y, **ca(m, "c")) + t.conv2d(m.x, m.z, **ca(m, "c"))},
             ex_k, [same_shape("y", "z")]),
        rule("alg_conv_kernel_add_factor", "add(conv(x, y), conv(x, z)) -> conv(x, add(y, z)) (acts none, equal "
             "attributes; y, z of equal shape).",
             lambda p: {"out": p.conv2d((x := p.var("x")), p.var("y"), act="none", name="c1")
                        + p.conv2d(x, p.var("z"), act="none", name="c2")},
             lambda t, m: {"out": t.conv2d(m.x, m.y + m.z, **ca(m, "c1"))},
             ex_k2, [same_shape("y", "z"), same_attrs("c1", "c2")]),
        rule("alg_conv_input_add_expand", "conv(add(x, y), z) -> add(conv(x, z), conv(y, z)) (act none; x, y of "
             "equal shape).",
             lambda p: {"out": p.conv2d(p.var("x") + p.var("y"), p.var("z"), act="none", name="c")},
             lambda t, m: {"out": t.conv2d(m.x, m.z, **ca(m, "c")) + t.conv2d(m.y, m.z, **ca(m, "c"))},
             ex_i, [same_shape("x", "y")]),
        rule("alg_conv_input_add_factor", "add(conv(x, z), conv(y, z)) -> conv(add(x, y), z) (acts none, equal "
             "attributes; x, y of equal shape).",
             lambda p: {"out": p.conv2d(p.var("x"), (z := p.var("z")), act="none", name="c1")
                        + p.conv2d(p.var("y"), z, act="none", name="c2")},
             lambda t, m: {"out": t.conv2d(m.x + m.y, m.z, **ca(m, "c1"))},
             ex_i2, [same_shape("x", "y"), same_attrs("c1", "c2")]),
        rule("alg_conv_relu_unfuse", "conv(x, w, act=relu) -> relu(conv(x, w, act=none)).",
             lambda p: {"out": p.conv2d(p.var("x"), p.var("w"), act="relu", name="c")},
             lambda t, m: {"out": t.relu(t.conv2d(m.x, m.w, **ca(m, "c", act="none")))}, ex_relu),
        rule("alg_conv_relu_fuse", "relu(conv(x, w, act=none)) -> conv(x, w, act=relu).",
             lambda p: {"out": p.relu(p.conv2d(p.var("x"), p.var("w"), act="none", name="c"))},
             lambda t, m: {"out": t.conv2d(m.x, m.w, **ca(m, "c", act="relu"))}, ex_reluf),
        rule("alg_conv_bias_relu_unfuse", "conv(x, w, b, act=relu) -> relu(conv(x, w, b, act=none)).",
             lambda p: {"out": p.conv2d(p.var("x"), p.var("w"), p.var("b"), act="relu", name="c")},
             lambda t, m: {"out": t.relu(t.conv2d(m.x, m.w, m.b, **ca(m, "c", act="none")))}, ex_b),
        rule("alg_conv_bias_relu_fuse", "relu(conv(x, w, b, act=none)) -> conv(x, w, b, act=relu).",
             lambda p: {"out": p.relu(p.conv2d(p.var("x"), p.var("w"), p.var("b"), act="none", name="c"))},
             lambda t, m: {"out": t.conv2d(m.x, m.w, m.b, **ca(m, "c", act="relu"))}, ex_bf),
    ]


# ----------------------------------------------------------------------------- constants


def _pool_ok(m: MatchView) -> bool | str:
    a = m.attrs("pool")
    if a["ceil_mode"]:
        return "ceil_mode pooling has partial windows"
    if not a["count_include_pad"] and any(a["pads"]):
        return "padded average pooling without count_include_pad divides by fewer cells"
    return m.type("x").dtype == "float32" or "const_pool is float32"


def _avg_kernel(m: MatchView) -> bool:
    o, i, kh, kw = m.shape("k")
    return (i == 1 and o == m.shape("x")[1] and m.attr("c", "dilations") == (1, 1)
            and is_const(m, "k", "const_pool", {"shape": (o, 1, kh, kw)}))


def _iconv_ok(m: MatchView) -> bool | str:
    o, i, kh, kw = m.shape("k")
    c = m.shape("x")[1]
    if o != c or i not in (c, 1) or m.attr("c", "strides") != (1, 1) or kh % 2 == 0 or kw % 2 == 0:
        return "needs O == C, I in (C, 1), odd kh, kw and stride 1"
    dh, dw = m.attr("c", "dilations")
    if m.attr("c", "pads") != (kh // 2 * dh, kw // 2 * dw, kh // 2 * dh, kw // 2 * dw):
        return "pads are not centred"
    return is_const(m, "k", "const_iconv", {"shape": (o, i, kh, kw)}) or "k is not an identity kernel"


def _ones(m: MatchView) -> bool:
    return m.shape("one") == m.shape("x") and is_const(
        m, "k", "const_one", {"shape": m.shape("k"), "dtype": m.type("k").dtype})


def _constants() -> list[Rule]:
    def pooldata(shape: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
        return {"k": const_data("const_pool", shape=shape)}

    def icdata(shape: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
        return {"k": const_data("const_iconv", shape=shape)}

    ones = [ex({"x": (2, 3), "k": (2, 3)}, data={"k": np.ones((2, 3))}),
            ex({"x": (1, 4, 2, 2), "k": (4, 1, 1)}, data={"k": np.ones((4, 1, 1))}),
            ex({"x": (5,), "k": ()}, data={"k": 1.0})]
    return [
        rule("alg_avgpool_to_conv", "avgpool(x) -> conv(x, const_pool((C, 1, kh, kw))) with the same strides, pads "
             "and act (depthwise; no ceil_mode; count_include_pad or no padding; float32).",
             lambda p: {"out": p.avgpool2d(p.var("x"), name="pool")},
             lambda t, m: {"out": t.conv2d(m.x, t.const_pool(shape=(m.shape("x")[1], 1, *m.attr("pool", "kernel"))),
                                           **m.attrs("pool", "strides", "pads", "act"))},
             [ex({"x": F4}, pool={"kernel": (3, 3), "pads": (1, 1, 1, 1), "count_include_pad": True}),
              ex({"x": (2, 2, 7, 8)}, pool={"kernel": (2, 3), "strides": (2, 2)}),
              ex({"x": (1, 4, 5, 5)}, pool={"kernel": (3, 3), "strides": (2, 2), "pads": "SAME",
                                            "count_include_pad": True, "act": "relu"})], [(_pool_ok, "poolable")]),
        rule("alg_conv_to_avgpool", "conv(x, K) -> avgpool(x, count_include_pad) for K = const_pool((C, 1, kh, "
             "kw)) or a weight holding its value (C = channels of x, no dilation; act kept).",
             lambda p: {"out": p.conv2d(p.var("x"), p.weight("k"), name="c")},
             lambda t, m: {"out": t.avgpool2d(m.x, kernel=m.shape("k")[2:], count_include_pad=True,
                                              **m.attrs("c", "strides", "pads", "act"))},
             [ex({"x": F4, "k": (3, 1, 3, 3)}, data=pooldata((3, 1, 3, 3)), c={"pads": (1, 1, 1, 1)}),
              ex({"x": (2, 2, 7, 8), "k": (2, 1, 2, 3)}, data=pooldata((2, 1, 2, 3)), c={"strides": (2, 2)}),
              ex({"x": (1, 4, 5, 5), "k": (4, 1, 3, 3)}, data=pooldata((4, 1, 3, 3)),
                 c={"strides": (2, 2), "pads": "SAME", "act": "relu"})], [(_avg_kernel, "k is an averaging kernel")]),
        rule("alg_conv_identity", "conv(x, I) -> x for I = const_iconv((C, C or 1, kh, kw)) or a weight holding "
             "it, stride 1 and centred pads (a fused act becomes a separate op).",
             lambda p: {"out": p.conv2d(p.var("x"), p.weight("k"), name="c")},
             lambda t, m: {"out": activate(t, m.x, m.attr("c", "act"))},
             [ex({"x": F4, "k": (3, 3, 3, 3)}, data=icdata((3, 3, 3, 3)), c={"pads": "SAME"}),
              ex({"x": (2, 4, 5, 5), "k": (4, 1, 3, 5)}, data=icdata((4, 1, 3, 5)), c={"pads": (1, 2, 1, 2)}),
              ex({"x": (1, 2, 7, 7), "k": (2, 2, 3, 3)}, data=icdata((2, 2, 3, 3)),
                 c={"dilations": (2, 2), "pads": (2, 2, 2, 2), "act": "relu"})], [(_iconv_ok, "identity conv")]),
        *rule("alg_mul_one", "mul(x, 1) -> x (1 = const_one or a weight of ones that does not broadcast x up).",
              lambda p: {"out": p.mul(p.var("x"), p.weight("k"), name="one")}, lambda t, m: {"out": m.x}, ones,
              [(_ones, "k is all ones and keeps x's shape")],
              commute=True, mirror="_left", mirror_doc="mul(1, x) -> x (see alg_mul_one)."),
    ]


# ----------------------------------------------------------------------------- all


@functools.lru_cache(maxsize=1)
def _all() -> tuple[Rule, ...]:
    return (*_elementwise(), *_smul(), *_transpose(), *_matmul_algebra(), *_matmul_transpose(), *_conv_smul(),
            *_conv_linear(), *_constants(), *algebra_concat.rules())


def rules() -> list[Rule]:
    """All ``algebra`` rules (built once; every call returns the same Rule objects)."""
    return list(_all())


__all__ = ["rules"]
