"""Sequence activations written as rows: :mod:`graphsub.frontends.onnx_rows` as rules (set ``rows``, names
``rows_*``, tag ``"rows"``).

Transformer exports carry activations as ``[batch, sequence, hidden]`` tensors. onnxruntime fuses a projection
(``MatMul`` by a constant plus a bias ``Add``) into ``Gemm``, which is two-dimensional, so on a rank-3 input it wraps
each one in ``Reshape -> Gemm -> Reshape``, and the CPU ``Reshape`` kernel copies. Every op between two attention
cores works on the last axis alone, so the same values can be computed on *rows*, ``[a, b, c]`` as ``[a * b, c]``:
merging the leading axes keeps the row-major order of the elements, and onnxruntime then makes plain ``Gemm`` nodes.

The rules write this as local steps that a search can chain and price. A *lift* ``L`` is a reshape of a rank-2 rows
tensor ``x [n, c]`` to a shape of rank >= 3 with the same last axis (``[a, b, c]``, ``n = a * b``); a *flatten*
``F`` is a reshape of a rank >= 3 tensor to its rows shape. ``R(v)`` (:func:`rows`) is ``v`` written as rows: ``v``
itself when it has that shape, the input of the reshape that made ``v`` (a reshape chain collapses on the spot), a
reshape of ``v`` the graph already has, or else a new reshape (an *entry*; free when ``v`` is weight-only, since
weight reshapes fold). A projection becomes a product on rows and a lift; the lift sinks through every last-axis op
towards the outputs, and an entry rises through them towards the inputs. Two lifts meeting at a binary op merge, and
a lift read by a flatten or by another reshape collapses into it (``R`` in the targets, or ``cpu_reshape_reshape`` of
the ``cleanup`` set), so between two projections the lifts cancel and only the reshapes at the boundary of a rows
region stay.

=================================  ================================================================================
rule                               rewrite (``L`` a lift to ``s = [a, b, c]``, ``F`` a flatten, ``R`` :func:`rows`)
=================================  ================================================================================
``rows_matmul``                    matmul(x[a,b,c], W[c,n]) (W weight-only, any fused act)  =>  reshape(matmul(
                                   R(x), W), [a, b, n])
``rows_linear[_lhs]``              matmul(x, W) + bias (bias over the last axis only)  =>  reshape(matmul(R(x), W)
                                   + bias, [a, b, n]): a 2-D MatMul + Add, which onnxruntime fuses into one Gemm
``rows_pointwise``                 f(L(x)) for a one-input pointwise f (erf, gelu, relu, tanh, cast, clip, ...)
                                   =>  L(f(x))
``rows_binary[_lhs]``              f(L(x), y) (``_lhs``: f(y, L(x))) for f in add, sub, mul, div, pow, sum, y of
                                   shape s (less leading 1s) or broadcast over the last axis only  =>  L(f(x, y'))
                                   with y' = R(y) or y as a vector (:func:`placement`)
``rows_binary_same``               f(L(x), L(x))  =>  L(f(x, x))  (one lift read twice, x * x)
``rows_softmax``                   softmax(L(x)) over the last axis  =>  L(softmax(x))
``rows_layernorm[_nobias]``        layernorm(L(x), g[, b]) over the last axis alone  =>  L(layernorm(x, g[, b]))
``rows_reduce``                    reduce_mean / reduce_sum(L(x)) over the last axis, keepdims  =>  L(reduce(x)),
                                   the lift of ``[n, 1]`` to ``[a, b, 1]``
``rows_split2``, ``rows_split3``    split(L(x)) over the last axis into 2 / 3 pieces  =>  each piece L(split(x))
``rows_hoist_unary``               F(f(u)) for a pointwise f or a softmax over the last axis  =>  f(R(u))
``rows_hoist_binary``              F(f(u, v)) for f in add, sub, mul, div, pow, sum  =>  f(u', v') (as above), when
                                   at most one operand needs a new reshape: no more reshapes than before
``rows_hoist_layernorm[_nobias]``  F(layernorm(u, g[, b])) over the last axis alone  =>  layernorm(R(u), g[, b])
=================================  ================================================================================

The sinking rules keep the lift they read as a source output mapped to itself, so a lift with other readers stays for
them and one read by no one else goes with the edit; the hoisting rules match only an op that the flatten alone
reads (not a graph output). No rule makes what another undoes (sinking makes lifts of rank-2 ops, hoisting makes
rank-2 ops on flattens), so applied everywhere (:func:`graphsub.rules.everywhere.rewrite_everywhere`) they reach a
fixed point. Every rule is exact: the rows computation is the same arithmetic on the same elements (checked
numerically on its examples like every rule).

What of the hand pass is expressed: the ops it takes (projections by a constant matrix, bias and residual additions
and the other elementwise binaries, LayerNormalization, Softmax and ReduceMean/ReduceSum over the last axis with
keepdims, pointwise ops and GELU, written out or as an op, the last-axis Split), its operand shapes
(``onnx_rows.rows_shape``: an operand of the full shape, one broadcast over the last axis only, ``[b, c]`` or
``[1, b, c]`` beside ``a == 1``) and its entries and exits (a reshape in where a value enters, a lift out where one
leaves; a reader that reshapes to a constant shape reads the rows tensor). Applied everywhere and followed by
:func:`graphsub.rules.cleanup.clean`, they leave as many or fewer Reshape kernels in onnxruntime than the hand pass
on the development half's BERT, ViT and Whisper encoder exports at batch 1 (``tests/rules/test_rows_rules.py`` checks
a feed-forward chain and an exported encoder).

What is not: the pass takes a connected part only when the reshapes it saves outnumber those it adds; a rule sees a
few ops, so that decision is the search's cost model's (``rows_matmul`` on a projection without bias whose
neighbours stay rank 3 adds two reshapes that onnxruntime would not run; ``rows_binary`` with a rank-3 operand that
has no rows form adds an entry). onnxruntime's ``SkipLayerNormalization`` fusion does not take the rank-2 ``Add ->
LayerNormalization`` pairs, as with the hand pass. The two-input ``com.microsoft`` GELUs (``ms_fast_gelu`` and
``ms_bias_gelu``, a bias input) and ops graphsub imports as opaque nodes are not covered; the opset check of the
pass has no counterpart (graphsub's IR has one softmax, over one axis, whatever the opset).

Whether the layout pays depends on the model and the machine, so the set is not part of ``default``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from graphsub.ir.analysis import is_weight_only
from graphsub.ir.node import Ref
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import Check, RuleFactory, WhereArg, ex
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("rows")
Shape = tuple[int, ...]
Out = dict[str, PValue]

#: one-input ops that map each element on its own (their attributes are copied as they are)
POINTWISE = frozenset({"abs", "cast", "clip", "erf", "exp", "gelu", "hardsigmoid", "hardswish", "identity",
                       "isnan", "leakyrelu", "log", "ms_gelu", "neg", "reciprocal", "relu", "sigmoid", "sqrt",
                       "tanh"})
#: two-input elementwise ops with numpy broadcasting
BINARY = frozenset({"add", "sub", "mul", "div", "pow", "sum"})
#: reductions that keep the reduced axis (keepdims) over the last axis
REDUCE = frozenset({"reduce_mean", "reduce_sum"})


# ----------------------------------------------------------------------------- checks and helpers


def rows_of(shape: Shape) -> Shape:
    """``shape`` (rank >= 2) with its leading axes merged: the rows shape.

    >>> rows_of((2, 5, 8)), rows_of((2, 3, 4, 6))
    ((10, 8), (24, 6))
    """
    return (math.prod(shape[:-1]), shape[-1])


def is_lift(m: MatchView, r: str, x: str) -> Check:
    """The matched reshape ``r`` of ``x`` is a lift: ``x`` is rank 2 ``[n, c]`` and ``r`` has rank >= 3 and last
    axis ``c``."""
    xs, ys = m.shape(x), m.shape(r)
    if len(xs) != 2:
        return f"${x} {xs} is not a rows tensor (rank 2)"
    if len(ys) < 3 or ys[-1] != xs[-1]:
        return f"reshape {xs} -> {ys} is not a lift (rank >= 3, the last axis kept)"
    return True


def _lifted(r: str = "r", x: str = "x") -> WhereArg:
    return (lambda m: is_lift(m, r, x), f"{r} lifts the rows tensor ${x} to rank >= 3, keeping its last axis")


def _last_axis(m: MatchView, node: str, key: str = "axis") -> Check:
    rank = len(m.shape("r"))
    have = m.attr(node, key)
    want: Any = (rank - 1,) if key == "axes" else rank - 1
    return have == want or f"{node}.{key} = {have!r} is not the last axis ({rank - 1})"


def last_axis_only(shape: Shape, lifted: Shape) -> bool:
    """``shape`` broadcasts against ``lifted`` along its last axis only (every other dimension 1).

    >>> last_axis_only((8,), (2, 5, 8)), last_axis_only((1, 1, 8), (2, 5, 8)), last_axis_only((5, 8), (2, 5, 8))
    (True, True, False)
    """
    return len(shape) <= len(lifted) and all(d == 1 for d in shape[:-1]) and (
        not shape or shape[-1] in (1, lifted[-1]))


def same_elements(shape: Shape, lifted: Shape) -> bool:
    """``shape`` broadcasts against ``lifted`` without repeating an element: it is ``lifted`` less leading axes of
    length 1 (then it is, as rows, the rows shape: ``onnx_rows.rows_shape``'s ``[b, c]`` beside ``[1, b, c]``).

    >>> same_elements((5, 8), (1, 5, 8)), same_elements((5, 8), (2, 5, 8)), same_elements((1, 5, 8), (1, 5, 8))
    (True, False, True)
    """
    k = len(lifted) - len(shape)
    return k >= 0 and tuple(lifted[k:]) == tuple(shape) and math.prod(lifted[:k]) == 1


def placement(m: MatchView, v: Ref, lifted: Shape) -> str:
    """How an operand ``v`` of an elementwise op whose output is ``lifted`` stands beside the rows tensor:
    ``"as-is"`` (rank <= 2, broadcast over the last axis only), ``"rows"`` (the same elements: :func:`rows` of it),
    ``"vector"`` (weight-only, broadcast over the last axis only: reshaped to a vector, which folds), else the reason
    it cannot."""
    vs = m.graph.type_of(v).shape
    if len(vs) <= 2 and last_axis_only(vs, lifted):
        return "as-is"
    if same_elements(vs, lifted):
        return "rows"
    if last_axis_only(vs, lifted):
        return "vector" if is_weight_only(m.graph, v) else f"operand {vs} is not weight-only (a run-time reshape)"
    return f"operand {vs} is neither {lifted} less leading 1s nor broadcast over its last axis only"


def _operand(m: MatchView, y: str, out: str) -> Check:
    """``y`` can stand beside the rows tensor (:func:`placement`) and the op's output keeps the lifted shape."""
    s = m.shape("r")
    if m.shape(out) != s:
        return f"{out} broadcasts {s} up to {m.shape(out)}"
    how = placement(m, m[y], s)
    return how in ("as-is", "rows", "vector") or how


def rows(t: TargetBuilder, m: MatchView, v: Ref, want: Shape | None = None) -> Ref:
    """``v`` written as rows ``want`` (default: its leading axes merged, :func:`rows_of`): ``v`` itself when it has
    that shape, else the input of the reshape that made it (reshaped again when that is not already ``want``), else a
    reshape of ``v`` to ``want`` that the graph has, else a new one."""
    g = m.graph
    want = rows_of(g.type_of(v).shape) if want is None else want
    if g.type_of(v).shape == want:
        return v
    node = g.nodes[v.node]
    if node.sig.op == "reshape":
        src = node.inputs[0]
        return src if g.type_of(src).shape == want else t.reshape(src, shape=want)
    for cid, _ in g.users(v.node):
        c = g.nodes[cid]
        if c.sig.op == "reshape" and c.inputs[0] == v and c.sig.out_types[0].shape == want:
            return Ref(cid, 0)
    return t.reshape(v, shape=want)


def has_rows(m: MatchView, v: Ref, want: Shape) -> bool:
    """Whether :func:`rows` of ``v`` adds no reshape that runs: ``v`` has the shape ``want``, is weight-only, is made
    by a reshape of a ``want`` tensor, or is read by a reshape to ``want``."""
    g = m.graph
    node = g.nodes[v.node]
    if g.type_of(v).shape == want or is_weight_only(g, v) or (
            node.sig.op == "reshape" and g.type_of(node.inputs[0]).shape == want):
        return True
    return any(g.nodes[c].sig.op == "reshape" and g.nodes[c].inputs[0] == v and
               g.nodes[c].sig.out_types[0].shape == want for c, _ in g.users(v.node))


def beside(t: TargetBuilder, m: MatchView, v: Ref, lifted: Shape) -> Ref:
    """Operand ``v`` as it stands beside the rows tensor (:func:`placement`)."""
    how = placement(m, v, lifted)
    if how == "rows":
        return rows(t, m, v, rows_of(lifted))
    return v if how == "as-is" else t.reshape(v, shape=m.graph.type_of(v).shape[-1:])


def _copy(t: TargetBuilder, m: MatchView, node: str, *inputs: Ref, **override: Any) -> Any:
    """Matched node ``node``'s op and attributes (with ``override``) on new inputs."""
    return t.op(m.node(node).sig.op, *inputs, **{**dict(m.node(node).sig.attrs), **override})


def _op_in(node: str, ops: frozenset[str]) -> WhereArg:
    return (lambda m: m.node(node).sig.op in ops or f"{node} is {m.node(node).sig.op}, not one of {sorted(ops)}",
            f"{node} is one of {', '.join(sorted(ops))}")


def _lift_src(p: PatternBuilder, x: str = "x", r: str = "r") -> PValue:
    return p.reshape(p.var(x), name=r)


# ----------------------------------------------------------------------------- projections


def _projection_shapes(m: MatchView) -> Check:
    xs, ws = m.shape("x"), m.shape("w")
    if len(xs) < 3 or len(ws) != 2:
        return f"$x {xs} @ $w {ws} is not a rank >= 3 input by a matrix"
    return True


def matmul() -> Rule:
    return rule(
        "rows_matmul",
        "matmul(x, W) of a rank >= 3 x [.., c] by a weight-only matrix W [c, n] => the product on rows, lifted: "
        "reshape(matmul(rows(x), W), x.shape[:-1] + (n,)) (any fused activation kept).",
        lambda p: {"y": p.matmul(p.var("x"), p.weight("w"), name="mm")},
        lambda t, m: {"y": t.reshape(t.matmul(rows(t, m, m.x), m.w, act=m.attr("mm", "act")),
                                     shape=m.shape("mm"))},
        [ex({"x": (2, 5, 8), "w": (8, 6)}), ex({"x": (1, 7, 4), "w": (4, 4)}, mm={"act": "relu"}),
         ex({"x": (3, 2, 2, 6), "w": (6, 5)})],
        [(_projection_shapes, "a rank >= 3 input by a matrix")])


def _bias_shape(m: MatchView) -> Check:
    s = m.shape("mm")
    if m.shape("add") != s:
        return f"the bias broadcasts the product {s} up to {m.shape('add')}"
    return last_axis_only(m.shape("b"), s) or f"bias {m.shape('b')} is not over the last axis only"


def _bias(t: TargetBuilder, m: MatchView) -> Ref:
    bs = m.shape("b")
    return m["b"] if len(bs) <= 2 else t.reshape(m["b"], shape=bs[-1:])


def linear() -> tuple[Rule, Rule]:
    def src(p: PatternBuilder) -> Out:
        return {"y": p.add(p.matmul(p.var("x"), p.weight("w"), act="none", name="mm"), p.weight("b"), name="add")}

    def tgt(t: TargetBuilder, m: Any, lhs: bool) -> dict[str, Ref]:
        y = t.matmul(rows(t, m, m.x), m.w, act="none")
        y = t.add(_bias(t, m), y) if lhs else t.add(y, _bias(t, m))
        return {"y": t.reshape(y, shape=m.shape("add"))}

    doc = ("{}: a projection with a bias over the last axis on a rank >= 3 x => the projection on rows, lifted: "
           "reshape(matmul(rows(x), W) + bias, x.shape[:-1] + (n,)); onnxruntime fuses the 2-D pair into one Gemm "
           "with no reshape of its own.")
    examples = [ex({"x": (2, 5, 8), "w": (8, 6), "b": (6,)}), ex({"x": (1, 7, 4), "w": (4, 3), "b": (1, 3)}),
                ex({"x": (3, 2, 6), "w": (6, 5), "b": (1, 1, 5)}), ex({"x": (2, 2, 3, 4), "w": (4, 2), "b": (1,)})]
    where = [(_projection_shapes, "a rank >= 3 input by a matrix"), (_bias_shape, "a bias over the last axis only")]
    plain = rule("rows_linear", doc.format("x@W + bias"), src, lambda t, m: tgt(t, m, False), examples, where)
    twin = rule("rows_linear_lhs", doc.format("bias + x@W"), lambda p: {"y": p.add(
        p.weight("b"), p.matmul(p.var("x"), p.weight("w"), act="none", name="mm"), name="add")},
        lambda t, m: tgt(t, m, True), examples, where)
    return plain, twin


# ----------------------------------------------------------------------------- sinking a lift


def pointwise() -> Rule:
    return rule(
        "rows_pointwise",
        "f(lift(x)) for a one-input pointwise op f (erf, gelu, relu, tanh, sigmoid, cast, clip, ...) => "
        "lift(f(x)): the op on rows, the lift after it.",
        lambda p: {"y": p.any(r := _lift_src(p), name="f"), "r": r},
        lambda t, m: {"y": t.reshape(_copy(t, m, "f", m.x), shape=m.shape("f")), "r": m.r},
        [ex({"x": (10, 8)}, ops={"f": "erf"}, r={"shape": (2, 5, 8)}),
         ex({"x": (7, 4)}, ops={"f": "gelu"}, r={"shape": (1, 7, 4)}, f={"approximate": "tanh"}),
         ex({"x": (12, 3)}, ops={"f": "clip"}, r={"shape": (2, 2, 3, 3)}, f={"min": -1.0, "max": 2.0}),
         ex({"x": (6, 5)}, ops={"f": "cast"}, r={"shape": (3, 2, 5)}, f={"to": "float64"})],
        [_lifted(), _op_in("f", POINTWISE)])


def _binary(lhs: bool) -> Rule:
    def src(p: PatternBuilder) -> Out:
        r, y = _lift_src(p), p.var("y")
        return {"out": p.any(*((y, r) if lhs else (r, y)), name="f"), "r": r}

    def tgt(t: TargetBuilder, m: Any) -> dict[str, Ref]:
        other = beside(t, m, m.y, m.shape("r"))
        z = _copy(t, m, "f", *((other, m.x) if lhs else (m.x, other)))
        return {"out": t.reshape(z, shape=m.shape("r")), "r": m.r}

    form = "f(y, lift(x))" if lhs else "f(lift(x), y)"
    return rule(
        "rows_binary" + ("_lhs" if lhs else ""),
        f"{form} for f in add, sub, mul, div, pow, sum, with y of the lifted shape (less leading 1s) or broadcast "
        "over its last axis only => lift(f) of x and y beside it: rows(y) (the input of the reshape that made y, a "
        "reshape of y the graph has, or a new one: an entry) or y as a vector (a residual, a bias, a scale).",
        src, tgt,
        [ex({"x": (10, 8), "y": (2, 5, 8)}, ops={"f": "add"}, r={"shape": (2, 5, 8)}),
         ex({"x": (7, 4), "y": (4,)}, ops={"f": "sub"}, r={"shape": (1, 7, 4)}),
         ex({"x": (12, 3), "y": ()}, ops={"f": "div"}, r={"shape": (2, 2, 3, 3)}),
         ex({"x": (6, 5), "y": (1, 5)}, ops={"f": "mul"}, r={"shape": (3, 2, 5)}),
         ex({"x": (6, 5), "y": (1, 1, 5)}, data={"y": [[[1.0, 2.0, -1.0, 3.0, 0.5]]]}, ops={"f": "mul"},
            r={"shape": (3, 2, 5)}, note="a weight broadcast over the last axis"),
         ex({"x": (6, 2), "y": (2, 3, 2)}, ops={"f": "sum"}, r={"shape": (2, 3, 2)}),
         ex({"x": (7, 4), "y": (7, 4)}, ops={"f": "pow"}, r={"shape": (1, 7, 4)}, note="[b, c] beside [1, b, c]")],
        [_lifted(), _op_in("f", BINARY), (lambda m: _operand(m, "y", "f"), "y has the lifted shape or broadcasts "
                                          "over the last axis only")])


def binary_same() -> Rule:
    return rule(
        "rows_binary_same", "f(lift(x), lift(x)) for f in add, sub, mul, div, pow, sum (one lift read twice, as in "
        "x * x) => lift(f(x, x)).",
        lambda p: {"y": p.any(r := _lift_src(p), r, name="f"), "r": r},
        lambda t, m: {"y": t.reshape(_copy(t, m, "f", m.x, m.x), shape=m.shape("r")), "r": m.r},
        [ex({"x": (10, 8)}, ops={"f": "mul"}, r={"shape": (2, 5, 8)}),
         ex({"x": (7, 4)}, ops={"f": "add"}, r={"shape": (1, 7, 4)}),
         ex({"x": (12, 3)}, ops={"f": "sub"}, r={"shape": (2, 2, 3, 3)})],
        [_lifted(), _op_in("f", BINARY)])


def softmax() -> Rule:
    return rule(
        "rows_softmax", "softmax(lift(x)) over the last axis => lift(softmax(x)).",
        lambda p: {"y": p.softmax(r := _lift_src(p), name="sm"), "r": r},
        lambda t, m: {"y": t.reshape(t.softmax(m.x, axis=-1), shape=m.shape("r")), "r": m.r},
        [ex({"x": (10, 8)}, r={"shape": (2, 5, 8)}, sm={"axis": 2}),
         ex({"x": (7, 4)}, r={"shape": (1, 7, 4)}, sm={"axis": -1}),
         ex({"x": (12, 3)}, r={"shape": (2, 2, 3, 3)}, sm={"axis": 3})],
        [_lifted(), (lambda m: _last_axis(m, "sm"), "over the last axis")])


def _ln_params(m: MatchView, names: tuple[str, ...]) -> Check:
    bad = [(n, m.shape(n)) for n in names if len(m.shape(n)) > 1]
    return not bad or f"scale/bias {bad} are not vectors over the last axis"


def layernorm(bias: bool) -> Rule:
    params = ("g", "b") if bias else ("g",)

    def src(p: PatternBuilder) -> Out:
        r = _lift_src(p)
        return {"y": p.layernorm(r, *(p.var(n) for n in params), name="ln"), "r": r}

    def tgt(t: TargetBuilder, m: Any) -> dict[str, Ref]:
        y = t.layernorm(m.x, *(m[n] for n in params), axis=-1, epsilon=m.attr("ln", "epsilon"))
        return {"y": t.reshape(y, shape=m.shape("r")), "r": m.r}

    def example(x: Shape, s: Shape, axis: int, eps: float) -> Example:
        return ex({"x": x} | {n: (x[-1],) for n in params}, r={"shape": s}, ln={"axis": axis, "epsilon": eps})

    return rule(
        "rows_layernorm" + ("" if bias else "_nobias"),
        f"layernorm(lift(x), g{', b' if bias else ''}) over the last axis alone (scale and bias vectors) => "
        f"lift(layernorm(x, g{', b' if bias else ''})).",
        src, tgt,
        [example((10, 8), (2, 5, 8), 2, 1e-5), example((7, 4), (1, 7, 4), -1, 1e-12),
         example((12, 3), (2, 2, 3, 3), 3, 1e-3)],
        [_lifted(), (lambda m: _last_axis(m, "ln"), "over the last axis"),
         (lambda m: _ln_params(m, params), "vector scale and bias")])


def _keepdims(m: MatchView) -> Check:
    return bool(m.attr("f", "keepdims")) or "keepdims is off (the result is not a lift of rows)"


def reduce() -> Rule:
    return rule(
        "rows_reduce", "reduce_mean / reduce_sum(lift(x)) over the last axis with keepdims => lift(reduce(x)), the "
        "lift of [n, 1] to the reduced shape (a layer norm written out, as older exports write it).",
        lambda p: {"y": p.any(r := _lift_src(p), name="f"), "r": r},
        lambda t, m: {"y": t.reshape(_copy(t, m, "f", m.x, axes=(-1,)), shape=m.shape("f")), "r": m.r},
        [ex({"x": (10, 8)}, ops={"f": "reduce_mean"}, r={"shape": (2, 5, 8)}, f={"axes": (2,), "keepdims": True}),
         ex({"x": (7, 4)}, ops={"f": "reduce_sum"}, r={"shape": (1, 7, 4)}, f={"axes": (-1,), "keepdims": True}),
         ex({"x": (12, 3)}, ops={"f": "reduce_mean"}, r={"shape": (2, 2, 3, 3)}, f={"axes": (3,), "keepdims": True})],
        [_lifted(), _op_in("f", REDUCE), (lambda m: _last_axis(m, "f", "axes"), "over the last axis"),
         (_keepdims, "keepdims")])


def split(pieces: int) -> Rule:
    names = tuple(f"y{k}" for k in range(pieces))

    def src(p: PatternBuilder) -> Out:
        r = _lift_src(p)
        outs = p.split(r, name="sp", outputs=pieces)
        return dict(zip(names, outs, strict=True)) | {"r": r}

    def tgt(t: TargetBuilder, m: Any) -> dict[str, Ref]:
        outs = t.op_multi("split", m.x, axis=-1, sizes=tuple(m.attr("sp", "sizes")))
        lead = m.shape("r")[:-1]
        return {n: t.reshape(o, shape=(*lead, t.shape(o)[-1])) for n, o in zip(names, outs, strict=True)} | {
            "r": m.r}

    sizes = [(3, 5), (2, 2), (1, 2)] if pieces == 2 else [(3, 3, 2), (1, 2, 1), (1, 1, 1)]
    return rule(
        f"rows_split{pieces}", f"split(lift(x)) over the last axis into {pieces} pieces => each piece lift(split(x)) "
        "(the pieces of a merged projection, e.g. cpu_merge_qkv_bias's).",
        src, tgt,
        [ex({"x": (10, sum(sizes[0]))}, r={"shape": (2, 5, sum(sizes[0]))}, sp={"axis": 2, "sizes": sizes[0]}),
         ex({"x": (7, sum(sizes[1]))}, r={"shape": (1, 7, sum(sizes[1]))}, sp={"axis": -1, "sizes": sizes[1]}),
         ex({"x": (12, sum(sizes[2]))}, r={"shape": (2, 2, 3, sum(sizes[2]))}, sp={"axis": 3, "sizes": sizes[2]})],
        [_lifted(), (lambda m: _last_axis(m, "sp"), "over the last axis")])


# ----------------------------------------------------------------------------- hoisting an entry


def is_flatten(m: MatchView, e: str, u: str) -> Check:
    """The matched reshape ``e`` of ``u`` writes it as rows: ``u`` has rank >= 3 and ``e`` its rows shape."""
    us = m.shape(u)
    return (len(us) >= 3 and m.shape(e) == rows_of(us)) or f"reshape {us} -> {m.shape(e)} does not merge the " \
        "leading axes into rows"


def _flattened(e: str = "e", f: str = "f") -> WhereArg:
    return (lambda m: is_flatten(m, e, f), f"{e} writes the output of {f} as rows")


def _unary_ok(m: MatchView) -> Check:
    op = m.node("f").sig.op
    if op == "softmax":
        rank = len(m.shape("f"))
        return m.attr("f", "axis") == rank - 1 or "softmax not over the last axis"
    return op in POINTWISE or f"f is {op}, neither pointwise nor a softmax"


def hoist_unary() -> Rule:
    def tgt(t: TargetBuilder, m: Any) -> dict[str, Ref]:
        extra = {"axis": -1} if m.node("f").sig.op == "softmax" else {}
        return {"y": _copy(t, m, "f", rows(t, m, m.u), **extra)}

    return rule(
        "rows_hoist_unary",
        "rows(f(u)) for a pointwise f or a softmax over the last axis, f read by nothing else => f(rows(u)): a "
        "rows region's entry moves up by one op (reusing a rows form of u the graph has).",
        lambda p: {"y": p.reshape(p.any(p.var("u"), name="f"), name="e")}, tgt,
        [ex({"u": (2, 5, 8)}, ops={"f": "erf"}, e={"shape": (10, 8)}),
         ex({"u": (1, 7, 4)}, ops={"f": "softmax"}, f={"axis": 2}, e={"shape": (7, 4)}),
         ex({"u": (2, 2, 3, 3)}, ops={"f": "gelu"}, f={"approximate": "tanh"}, e={"shape": (12, 3)})],
        [_flattened(), (_unary_ok, "pointwise, or a softmax over the last axis")])


def _binary_hoist_ok(m: MatchView) -> Check:
    s = m.shape("f")
    hows = [placement(m, m[v], s) for v in ("u", "v")]
    for how in hows:
        if how not in ("as-is", "rows", "vector"):
            return how
    if "rows" not in hows:
        return "no operand has f's elements (f broadcasts two vectors)"
    new = sum(how == "rows" and not has_rows(m, m[v], rows_of(s)) for how, v in zip(hows, ("u", "v"), strict=True))
    return new <= 1 or "both operands would need a new reshape (more reshapes than before)"


def hoist_binary() -> Rule:
    return rule(
        "rows_hoist_binary",
        "rows(f(u, v)) for f in add, sub, mul, div, pow, sum, f read by nothing else, each operand of f's shape "
        "(less leading 1s) or broadcast over the last axis only, at most one of them without a rows form (see "
        "has_rows) => f on rows: the entry moves up through a residual or bias addition without adding a reshape "
        "that runs.",
        lambda p: {"y": p.reshape(p.any(p.var("u"), p.var("v"), name="f"), name="e")},
        lambda t, m: {"y": _copy(t, m, "f", *(beside(t, m, m[v], m.shape("f")) for v in ("u", "v")))},
        [ex({"u": (2, 5, 8), "v": (8,)}, ops={"f": "add"}, e={"shape": (10, 8)}),
         ex({"u": (1, 7, 4), "v": (1, 7, 4)}, data={"v": [[[0.5, 1, 2, 3]] * 7]}, ops={"f": "sub"},
            e={"shape": (7, 4)}),
         ex({"u": (), "v": (2, 2, 3, 3)}, ops={"f": "div"}, e={"shape": (12, 3)}),
         ex({"u": (3, 2, 5), "v": (1, 5)}, ops={"f": "mul"}, e={"shape": (6, 5)}),
         ex({"u": (1, 6, 4), "v": (6, 4)}, ops={"f": "add"}, e={"shape": (6, 4)}, note="[b, c] beside [1, b, c]")],
        [_flattened(), _op_in("f", BINARY), (_binary_hoist_ok, "operands of f's shape or over its last axis, at "
                                             "most one new reshape")])


def hoist_layernorm(bias: bool) -> Rule:
    params = ("g", "b") if bias else ("g",)

    def src(p: PatternBuilder) -> Out:
        return {"y": p.reshape(p.layernorm(p.var("u"), *(p.var(n) for n in params), name="f"), name="e")}

    def tgt(t: TargetBuilder, m: Any) -> dict[str, Ref]:
        return {"y": t.layernorm(rows(t, m, m.u), *(m[n] for n in params), axis=-1, epsilon=m.attr("f", "epsilon"))}

    def example(u: Shape, axis: int) -> Example:
        return ex({"u": u} | {n: (u[-1],) for n in params}, f={"axis": axis, "epsilon": 1e-5},
                  e={"shape": rows_of(u)})

    def last(m: MatchView) -> Check:
        return m.attr("f", "axis") == len(m.shape("u")) - 1 or "not over the last axis"

    return rule(
        "rows_hoist_layernorm" + ("" if bias else "_nobias"),
        f"rows(layernorm(u, g{', b' if bias else ''})) over the last axis alone, read by nothing else => "
        f"layernorm(rows(u), g{', b' if bias else ''}).",
        src, tgt, [example((2, 5, 8), 2), example((1, 7, 4), -1), example((2, 2, 3, 3), 3)],
        [_flattened(), (last, "over the last axis"), (lambda m: _ln_params(m, params), "vector scale and bias")])


# ----------------------------------------------------------------------------- the set


def _inner(r: Rule) -> Rule:
    """``r`` never leaving its lift as a graph output (:attr:`Rule.inner`): onnxruntime copies a Reshape into a
    graph output's buffer (a decoder head's logits: 16 MB, 5% of a 128-token prefill of the small Llama)."""
    return dataclasses.replace(r, inner=tuple(k for k, _ in r.source.outputs if k != "r"))


def rules() -> list[Rule]:
    """The ``rows`` rule set (see the module docstring); the rules that make a lift never apply where it would be
    a graph output (:func:`_inner`)."""
    lifting = [matmul(), *linear(), pointwise(), _binary(False), _binary(True), binary_same(), softmax(),
               layernorm(True), layernorm(False), reduce(), split(2), split(3)]
    return [*map(_inner, lifting), hoist_unary(), hoist_binary(), hoist_layernorm(True), hoist_layernorm(False)]


__all__ = ["BINARY", "POINTWISE", "REDUCE", "is_lift", "last_axis_only", "rows", "rows_of", "rules"]
