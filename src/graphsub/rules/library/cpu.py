"""CPU-relevant algebra and clean-ups.

On a CPU runtime (onnxruntime's MLAS kernels) the big wins are fewer, larger GEMMs and fewer
memory passes: merging the Q/K/V projections of an attention layer into one matmul, summing
weights instead of results (``x@W1 + x@W2 -> x@(W1+W2)``), turning ``matmul + bias`` into a
``gemm``, and removing layout no-ops (transpose/reshape/flatten chains, identity, relu of relu,
multiplying by ones or adding zeros) and the exported ``_safe_softmax`` guard behind a finite
attention mask.  Folding a per-channel mul/add into a conv that already has a bias (ONNX/PyTorch
convs) completes the bias-free folds of the ``builtin`` set.

Every rule is exact (the guard's: for finite activations, see its doc).  Rules that remove an op
map their output to the op's input (a pattern
variable), which :func:`~graphsub.rules.apply.apply` handles by redirecting the consumers.
The two-way matmul merge is MetaFlow's ``mf_merge_matmuls`` (the same :class:`Rule` object).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.types import FLOAT_DTYPES
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library import metaflow, recurrent
from graphsub.rules.library.kit import (
    broadcasts_into,
    composed_perm,
    constant_value,
    ex,
    fold_add,
    fold_mul,
    in_order,
    is_identity,
    merge_split,
    per_channel,
    perm,
    rule,
)
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

Out = dict[str, PValue]
QKV = ("q", "k", "v")


# ----------------------------------------------------------------------------- matmul algebra


def matmul_distribute() -> Rule:
    def src(p: PatternBuilder) -> Out:
        x = p.var("x")
        return {"y": p.add(p.matmul(x, p.weight("w1"), act="none", name="mm1"),
                           p.matmul(x, p.weight("w2"), act="none", name="mm2"), name="add")}

    return rule(
        "cpu_matmul_distribute",
        "x@W1 + x@W2 => x@(W1 + W2) for weight-only W1, W2 of one shape: one matmul instead of two plus an add (the "
        "weight sum is folded).  The pattern is symmetric, so it covers both orders of the add operands.",
        src, lambda t, m: {"y": m.x @ (m.w1 + m.w2)},
        [ex({"x": (4, 6), "w1": (6, 5), "w2": (6, 5)}), ex({"x": (2, 3, 4), "w1": (4, 2), "w2": (4, 2)}),
         ex({"x": (5,), "w1": (2, 5, 3), "w2": (2, 5, 3)})],
        [(lambda m: m.shape("w1") == m.shape("w2") or "weights differ in shape", "equal weight shapes")],
        tags=("matmul", "algebra"))


def matmul_factor_weight() -> Rule:
    def src(p: PatternBuilder) -> Out:
        w = p.var("w")
        return {"y": p.add(p.matmul(p.var("x"), w, act="none", name="mm1"),
                           p.matmul(p.var("z"), w, act="none", name="mm2"), name="add")}

    return rule(
        "cpu_matmul_factor_weight",
        "x@W + z@W => (x + z)@W: one matmul instead of two when both products share the right operand (x and z "
        "of one shape).",
        src, lambda t, m: {"y": (m.x + m.z) @ m.w},
        [ex({"x": (4, 6), "z": (4, 6), "w": (6, 5)}), ex({"x": (2, 3, 4), "z": (2, 3, 4), "w": (4, 2)}),
         ex({"x": (5,), "z": (5,), "w": (5, 3)})],
        [(lambda m: m.type("x") == m.type("z") or "left operands differ in type", "equal left operands")],
        tags=("matmul", "algebra"))


def merge_qkv() -> Rule:
    def compatible(m: MatchView) -> bool | str:
        shapes = [m.shape(f"w{n}") for n in QKV]
        if len(shapes[0]) < 2 or len({s[:-1] for s in shapes}) != 1:
            return f"right operands {shapes} differ before the last axis (or are vectors)"
        return len({m.attr(f"mm_{n}", "act") for n in QKV}) == 1 or "activations differ"

    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        w = t.concat(*(m[f"w{n}"] for n in QKV), axis=len(m.shape("wq")) - 1)
        y = t.matmul(m.x, w, act=m.attr("mm_q", "act"))
        return dict(zip(QKV, merge_split(t, y, len(m.shape("mm_q")) - 1, [m.shape(f"w{n}")[-1] for n in QKV]),
                        strict=True))

    return rule(
        "cpu_merge_qkv",
        "three matmuls sharing the left operand (attention's Q/K/V projections) with weight-only right operands => "
        "one matmul on the weights concatenated along the last axis, then a three-way split: one large GEMM "
        "instead of three.",
        lambda p: {n: p.matmul(p.var("x"), p.weight(f"w{n}"), name=f"mm_{n}") for n in QKV}, target,
        [ex({"x": (4, 6), "wq": (6, 3), "wk": (6, 3), "wv": (6, 2)}),
         ex({"x": (2, 3, 4), "wq": (4, 2), "wk": (4, 2), "wv": (4, 2)}, mm_q={"act": "relu"}, mm_k={"act": "relu"},
            mm_v={"act": "relu"}),
         ex({"x": (5,), "wq": (2, 5, 3), "wk": (2, 5, 1), "wv": (2, 5, 4)})],
        [(compatible, "right operands concatenable, equal activations"),
         (lambda m: in_order(m, "mm_q", "mm_k", "mm_v"), "one match per triple")],
        tags=("matmul", "merge", "attention"))


def merge_qkv_bias() -> tuple[Rule, Rule]:
    """x@Wq + bq, ... and its twin bq + x@Wq, ... (``_lhs``)."""
    def src(p: PatternBuilder) -> Out:
        x = p.var("x")
        return {n: p.add(p.matmul(x, p.weight(f"w{n}"), act="none", name=f"mm_{n}"), p.weight(f"b{n}"),
                         name=f"add_{n}") for n in QKV}

    def compatible(m: MatchView) -> bool | str:
        ws = [m.shape(f"w{n}") for n in QKV]
        if any(len(w) != 2 for w in ws) or len({w[0] for w in ws}) != 1:
            return f"right operands {ws} are not matrices with one row count"
        bs = [m.shape(f"b{n}") for n in QKV]
        if any(b != (w[1],) for b, w in zip(bs, ws, strict=True)):
            return f"biases {bs} are not vectors of the output widths"
        return True

    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        w = t.concat(*(m[f"w{n}"] for n in QKV), axis=1)
        b = t.concat(*(m[f"b{n}"] for n in QKV), axis=0)
        y = m.x @ w + b
        return dict(zip(QKV, merge_split(t, y, len(m.shape("mm_q")) - 1, [m.shape(f"w{n}")[-1] for n in QKV]),
                        strict=True))

    def doc(form: str) -> str:
        return (f"{form}: three linear layers on one input (attention's Q/K/V as PyTorch exports nn.Linear) => "
                "x@[Wq|Wk|Wv] + [bq|bk|bv], then a three-way split: one GEMM with a fusable bias instead of three.")

    return rule(
        "cpu_merge_qkv_bias", doc("x@Wq+bq, x@Wk+bk, x@Wv+bv"), src, target,
        [ex({"x": (4, 6), "wq": (6, 3), "wk": (6, 3), "wv": (6, 2), "bq": (3,), "bk": (3,), "bv": (2,)}),
         ex({"x": (2, 3, 4), "wq": (4, 2), "wk": (4, 2), "wv": (4, 2), "bq": (2,), "bk": (2,), "bv": (2,)}),
         ex({"x": (1, 5, 8), "wq": (8, 8), "wk": (8, 8), "wv": (8, 8), "bq": (8,), "bk": (8,), "bv": (8,)})],
        [(compatible, "matrix weights with one row count, bias vectors of the output widths"),
         (lambda m: in_order(m, "mm_q", "mm_k", "mm_v"), "one match per triple")],
        tags=("matmul", "merge", "attention"), commute=True, mirror="_lhs", mirror_doc=doc("bq+x@Wq, bk+x@Wk, bv+x@Wv"))


def _gemm_bias(m: MatchView) -> bool | str:
    a, b, c = m.shape("a"), m.shape("b"), m.shape("c")
    if len(a) != 2 or len(b) != 2:
        return f"operands {a} @ {b} are not matrices"
    out = m.shape("mm")
    if len(c) > 2 or not broadcasts_into(c, out):
        return f"bias {c} does not broadcast to {out}"
    return True


def matmul_bias_gemm() -> tuple[Rule, Rule]:
    """a@b + bias and its twin bias + a@b (``_lhs``)."""
    def doc(form: str) -> str:
        return (f"{form} with 2-D a, b and a weight-only bias broadcasting to the output => gemm(a, b, bias): one "
                "fused kernel (ONNX Gemm, beta = 1).")

    return rule(
        "cpu_matmul_bias_gemm", doc("a@b + bias"),
        lambda p: {"y": p.add(p.matmul(p.var("a"), p.var("b"), act="none", name="mm"), p.weight("c"), name="add")},
        lambda t, m: {"y": t.gemm(m.a, m.b, m.c)},
        [ex({"a": (3, 4), "b": (4, 5), "c": (5,)}), ex({"a": (2, 6), "b": (6, 3), "c": (2, 3)}),
         ex({"a": (4, 2), "b": (2, 2), "c": (4, 1)}), ex({"a": (1, 3), "b": (3, 7), "c": (1, 7)})],
        [(_gemm_bias, "2-D matmul, bias broadcasting to its output")],
        tags=("matmul", "fusion", "gemm"), commute=True, mirror="_lhs", mirror_doc=doc("bias + a@b"))


def _column_scale(m: MatchView) -> bool | str:
    """``s`` scales whole output columns of the linear (a scalar, or a last-axis vector) and keeps its shape."""
    w, sc, out = m.shape("w"), m.shape("s"), m.shape("add")
    if len(w) != 2:
        return f"weight {w} is not a matrix"
    if any(d != 1 for d in sc[:-1]) or (sc and sc[-1] not in (1, w[1])):
        return f"scale {sc} is neither a scalar nor one value per output column ({w[1]})"
    return m.shape("op") == out or f"the scale broadcasts the output up to {m.shape('op')}"


def _column_vector(t: TargetBuilder, m: Any) -> Any:
    sc = m.shape("s")
    return t.reshape(m.s, shape=(sc[-1] if sc else 1,))


def linear_scale_fold() -> tuple[Rule, Rule]:
    """(x@W + b) * s and its twin s * (x@W + b) (``_lhs``)."""
    def doc(form: str) -> str:
        return (f"{form} with weights W (K, N), b and a scale s that is a scalar or one value per output column => "
                "x@(W*s) + b*s: the multiply folds into the weights (exporters write attention's 1/sqrt(d) on the "
                "query projection this way, e.g. Hugging Face Whisper).")

    return rule(
        "cpu_linear_scale_fold", doc("(x@W + b) * s"),
        lambda p: {"y": p.mul(p.add(p.matmul(p.var("x"), p.weight("w"), act="none", name="mm"), p.weight("b"),
                                    name="add"), p.weight("s"), name="op")},
        lambda t, m: {"y": t.add(t.matmul(m.x, m.w * _column_vector(t, m), act="none"),
                                 m.b * _column_vector(t, m))},
        [ex({"x": (2, 5, 4), "w": (4, 6), "b": (6,), "s": (1,)}), ex({"x": (3, 4), "w": (4, 5), "b": (5,), "s": (5,)}),
         ex({"x": (1, 7, 8), "w": (8, 3), "b": (3,), "s": (1, 1, 3)})],
        [(_column_scale, "a scalar or per-column scale of a linear layer")],
        tags=("matmul", "fold", "mul"), commute=True, mirror="_lhs", mirror_doc=doc("s * (x@W + b)"))


# ----------------------------------------------------------------------------- layout clean-ups


def transpose_transpose(identity: bool) -> Rule:
    def check(m: MatchView) -> bool | str:
        p = composed_perm(m)
        return is_identity(p) == identity or f"composed perm {p} is {'not ' if identity else ''}the identity"

    return rule(
        f"cpu_transpose_transpose{'_identity' if identity else ''}",
        "transpose(transpose(x, p1), p2) => " + ("x (the permutations cancel)" if identity else
                                                 "transpose(x, p1[p2]) (one data movement instead of two)"),
        lambda p: {"y": p.transpose(p.transpose(p.var("x"), name="t1"), name="t2")},
        lambda t, m: {"y": m.x if identity else t.transpose(m.x, perm=composed_perm(m))},
        [ex({"x": (2, 3)}, t1={"perm": (1, 0)}, t2={"perm": (1, 0)}),
         ex({"x": (2, 3, 4)}, t1={"perm": (2, 0, 1)}, t2={"perm": (1, 2, 0)}),
         ex({"x": (1, 2, 3, 4)}, t1={"perm": (0, 2, 3, 1)}, t2={"perm": (0, 3, 1, 2)})] if identity else
        [ex({"x": (2, 3, 4)}, t1={"perm": (1, 0, 2)}, t2={"perm": (0, 2, 1)}),
         ex({"x": (1, 2, 3, 4)}, t1={"perm": (0, 2, 1, 3)}, t2={"perm": (0, 1, 3, 2)}),
         ex({"x": (2, 5, 3)}, t1={"perm": (2, 1, 0)}, t2={"perm": (1, 2, 0)})],
        [(check, "composed permutation " + ("is" if identity else "is not") + " the identity")],
        tags=("layout", "cleanup"))


def moves_only_unit_axes(shape: tuple[int, ...], p: tuple[int, ...]) -> bool:
    """Whether transposing ``shape`` by ``p`` keeps the axes longer than 1 in their order (then it moves no data:
    a reshape).

    >>> moves_only_unit_axes((7, 1, 4), (1, 0, 2)), moves_only_unit_axes((7, 2, 4), (1, 0, 2))
    (True, False)
    """
    big = [a for a in p if shape[a] != 1]
    return big == sorted(big)


def transpose_unit_reshape() -> Rule:
    def check(m: MatchView) -> bool | str:
        shape, p = m.shape("x"), perm(m, "t")
        return (not is_identity(p) and moves_only_unit_axes(shape, p)) or f"perm {p} moves data of shape {shape}"

    return rule(
        "cpu_transpose_unit_reshape",
        "transpose(x, p) that only moves axes of length 1 => reshape(x) to its result's shape (no data moves; the "
        "dynamo exporter's sequence-first attention at batch 1 transposes (L, 1, E) <-> (1, L, E)); reshape chains "
        "then merge (cpu_reshape_reshape).",
        lambda p: {"y": p.transpose(p.var("x"), name="t")},
        lambda t, m: {"y": t.reshape(m.x, shape=m.shape("t"))},
        [ex({"x": (5, 1, 8)}, t={"perm": (1, 0, 2)}), ex({"x": (1, 3, 1, 4)}, t={"perm": (2, 1, 3, 0)}),
         ex({"x": (6, 1)}, t={"perm": (1, 0)})],
        [(check, "moves only axes of length 1")], tags=("layout", "cleanup"))


def _to_shape(t: TargetBuilder, m: MatchView, out: str) -> Ref:
    """x reshaped to the shape of ``out`` (x itself when that is its shape)."""
    shape = m.shape(out)
    return m.x if shape == m.shape("x") else t.reshape(m.x, shape=shape)


def reshape_reshape() -> Rule:
    return rule(
        "cpu_reshape_reshape", "reshape(reshape(x, s1), s2) => reshape(x, s2), or x itself when s2 is x's shape.",
        lambda p: {"y": p.reshape(p.reshape(p.var("x"), name="r1"), name="r2")},
        lambda t, m: {"y": m.x if tuple(m.attr("r2", "shape")) == m.shape("x")
                      else t.reshape(m.x, shape=m.attr("r2", "shape"))},
        [ex({"x": (2, 3, 4)}, r1={"shape": (6, 4)}, r2={"shape": (4, 6)}),
         ex({"x": (24,)}, r1={"shape": (2, 12)}, r2={"shape": (3, 8)}),
         ex({"x": (1, 2, 3)}, r1={"shape": (6,)}, r2={"shape": (1, 2, 3)}, note="round trip")],
        tags=("layout", "cleanup"))


def _noop(op: str, doc: str, examples: list[Example]) -> Rule:
    return rule(
        f"cpu_{op}_noop" if op != "identity" else "cpu_identity_remove", doc,
        lambda p: {"y": p.op1(op, p.var("x"), name="op")}, lambda t, m: {"y": m.x}, examples,
        [(lambda m: m.shape("op") == m.shape("x") or f"changes the shape to {m.shape('op')}", "keeps the shape")],
        tags=("layout", "cleanup"))


def flatten_rules() -> list[Rule]:
    tags = ("layout", "cleanup")
    return [
        rule("cpu_flatten_reshape", "reshape(flatten(x)) => reshape(x) (flatten is a reshape to 2-D).",
             lambda p: {"y": p.reshape(p.flatten(p.var("x"), name="f"), name="r")},
             lambda t, m: {"y": _to_shape(t, m, "r")},
             [ex({"x": (2, 3, 4)}, f={"axis": 1}, r={"shape": (6, 4)}),
              ex({"x": (1, 8, 1, 1)}, f={"axis": 1}, r={"shape": (8,)}),
              ex({"x": (2, 2, 3)}, f={"axis": 2}, r={"shape": (2, 2, 3)}, note="round trip")], tags=tags),
        rule("cpu_reshape_flatten", "flatten(reshape(x)) => reshape(x) to the flattened shape (x itself if "
             "unchanged).",
             lambda p: {"y": p.flatten(p.reshape(p.var("x"), name="r"), name="f")},
             lambda t, m: {"y": _to_shape(t, m, "f")},
             [ex({"x": (2, 3, 4)}, r={"shape": (6, 4)}, f={"axis": 1}),
              ex({"x": (24,)}, r={"shape": (2, 3, 4)}, f={"axis": 2}),
              ex({"x": (4, 6)}, r={"shape": (4, 2, 3)}, f={"axis": 1}, note="round trip")],
             tags=tags),
        _noop("flatten", "flatten(x) whose result has x's shape (x already 2-D, axis 1) => x.",
              [ex({"x": (2, 3)}, op={"axis": 1}), ex({"x": (5, 1)}, op={"axis": 1}),
               ex({"x": (1, 7)}, op={"axis": 1})]),
    ]


# ----------------------------------------------------------------------------- elementwise clean-ups


def relu_relu() -> Rule:
    return rule(
        "cpu_relu_relu", "relu(relu(x)) => relu(x) (relu is idempotent).",
        lambda p: {"y": p.relu(p.relu(p.var("x"), name="r1"), name="r2")}, lambda t, m: {"y": m.r1},
        [ex({"x": (2, 3)}), ex({"x": (1, 4, 5, 5)}), ex({"x": (7,)})], tags=("elementwise", "cleanup"))


def neutral_element(op: str, value: float) -> tuple[Rule, ...]:
    """``x op c => x`` for a constant ``c`` that is all ``value``; for ``add``/``mul`` also the twin
    ``c op x`` (``_lhs``)."""
    var = "one" if value == 1.0 else "zero"

    def check(m: MatchView) -> bool | str:
        ok = constant_value(m, var, value)
        if ok is not True:
            return ok
        return m.type("op") == m.type("x") or f"the constant broadcasts x {m.shape('x')} up to {m.shape('op')}"

    shapes = [((2, 3), (2, 3)), ((1, 4, 5), (1,)), ((3,), ())]
    expr, c = {"mul": "*", "add": "+", "sub": "-"}[op], f"{value:g}"

    def doc(form: str) -> str:
        return (f"{form} => x, for a weight-only constant whose data is all {c} (a const_one counts as ones) and "
                "does not broadcast x up.")

    def src(p: PatternBuilder) -> Out:
        return {"y": p.op1(op, p.var("x"), p.weight(var), name="op")}

    name, examples = f"cpu_{op}_{var}s", [ex({"x": x, var: s}, data={var: np.full(s, value, np.float32)})
                                         for x, s in shapes]
    where, tags = [(check, f"the weight is all {c} and keeps x's shape")], ("elementwise", "cleanup")
    if op == "sub":
        return (rule(name, doc(f"x {expr} {c}"), src, lambda t, m: {"y": m.x}, examples, where, tags=tags),)
    return rule(name, doc(f"x {expr} {c}"), src, lambda t, m: {"y": m.x}, examples, where, tags=tags,
                commute=True, mirror="_lhs", mirror_doc=doc(f"{c} {expr} x"))


def fold_conv_bias(kind: str) -> Rule:
    fold = fold_mul if kind == "mul" else fold_add
    return rule(
        f"cpu_fold_conv_bias_{kind}",
        f"conv with a bias (any stride/padding, no activation) {'times' if kind == 'mul' else 'plus'} a weight-only "
        "scalar or per-channel (1,O,1,1)/(O,1,1) tensor => one conv with "
        + ("kernel and bias scaled per output channel." if kind == "mul" else "the addend folded into its bias."),
        lambda p: {"y": p.op1(kind, p.conv2d(p.var("x"), p.weight("w"), p.weight("b"), act="none", name="conv"),
                              p.weight("s"), name="op")},
        lambda t, m: {"y": fold(t, m, "conv", "s", "b")},
        [ex({"x": (1, 2, 6, 6), "w": (3, 2, 3, 3), "b": (3,), "s": (1, 3, 1, 1)}, conv={"pads": (1, 1, 1, 1)}),
         ex({"x": (2, 4, 7, 5), "w": (4, 2, 3, 3), "b": (4,), "s": (1,)}, conv={"strides": (2, 1)}),
         ex({"x": (1, 3, 8, 8), "w": (5, 3, 7, 7), "b": (5,), "s": (5, 1, 1)},
            conv={"strides": (2, 2), "pads": (3, 3, 3, 3)})],
        [(lambda m: per_channel(m, "s", "conv", "op"), "s is a scalar or per-channel weight")],
        tags=("conv", "fusion", kind))


# ----------------------------------------------------------------------------- exporter clean-ups

#: ops that keep every value of their (data) inputs finite: layout moves, casts to float, sums and products
_FINITE_PASS = frozenset({"expand", "reshape", "unsqueeze", "squeeze", "transpose", "flatten", "slice", "concat",
                          "add", "sub", "mul", "smul", "sum", "gather", "gather_nd"})


def bounded_mask(graph: Graph, ref: Ref, depth: int = 12) -> bool:
    """``ref`` holds only finite values whatever the model's inputs: finite constants, selections between them
    (``where``: its condition does not matter), casts to a float type, and layout moves or sums of such values."""
    node = graph.nodes[ref.node]
    op = node.sig.op
    if op == "weight":
        data = graph.params.get(node.sig.attr["name"])
        return data is not None and bool(np.all(np.isfinite(np.asarray(data, dtype=np.float64))))
    if op == "cast":
        return graph.type_of(node.inputs[0]).dtype not in FLOAT_DTYPES or (
            depth > 0 and bounded_mask(graph, node.inputs[0], depth - 1))
    if depth <= 0:
        return False
    if op == "where":
        return all(bounded_mask(graph, r, depth - 1) for r in node.inputs[1:])
    if op in _FINITE_PASS:
        data_inputs = node.inputs[:1] if op in ("expand", "reshape", "slice", "gather", "gather_nd") else node.inputs
        return all(bounded_mask(graph, r, depth - 1) for r in data_inputs)
    return False


def _finite_mask(m: MatchView) -> bool | str:
    return bounded_mask(m.graph, m["m"]) or (
        "the mask is not built from finite constants: a row of it may be all -inf, which the guard turns into zeros")


def _guard_src(p: PatternBuilder) -> Out:
    """where(isnan(s), z, s) with s = softmax(q @ k + m): torch's exported _safe_softmax after attention scores."""
    scores = p.matmul(p.var("q"), p.var("k"), act="none", name="qk")
    s = p.softmax(p.add(scores, p.var("m"), name="add"), name="sm")
    return {"y": p.where(p.isnan(s, name="nan"), p.var("z"), s, name="guard")}


def softmax_nan_guard() -> tuple[Rule, Rule]:
    def example(q: tuple[int, ...], k: tuple[int, ...], mask: tuple[int, ...], fill: float) -> Example:
        rng = np.random.default_rng(len(q) + len(mask))  # a constant mask of 0 and fill, some rows all fill
        data = np.where(rng.random(mask) < 0.5, 0.0, fill).astype(np.float32)
        if data.ndim > 1:
            data[..., :1, :] = fill
        return ex({"q": q, "k": k, "m": mask, "z": ()}, data={"m": data})

    return rule(
        "cpu_softmax_nan_guard",
        "where(isnan(s), z, s) with s = softmax(q @ k + mask) => s, when the mask is built from finite constants "
        "(where(keep, 0, finfo.min), as the dynamo exporter writes Hugging Face's masks; see bounded_mask). The "
        "guard is torch's _safe_softmax as exported: it zeroes rows that a -inf mask fills entirely, which a finite "
        "mask never does; with finite scores no softmax row is NaN, so the guard returns s everywhere. (Exact for "
        "finite activations: a NaN or inf score gives NaN rows instead of zeros, as eager PyTorch's softmax does "
        "for NaN.)",
        _guard_src, lambda t, m: {"y": m.sm},
        [example((2, 4, 6, 8), (2, 4, 8, 6), (2, 1, 1, 6), -3.4028235e38),
         example((1, 2, 5, 3), (1, 2, 3, 5), (1, 1, 5, 5), -1e4), example((3, 4), (4, 7), (7,), -3.4028235e38)],
        [(_finite_mask, "the mask is built from finite constants")],
        tags=("attention", "cleanup"), commute=("add",), mirror="_lhs")


NEG_FILL = float(np.finfo(np.float32).min)


def _inf_mask(graph: Graph, ref: Ref) -> tuple[str, Any] | None:
    """How an additive mask holding -inf is built, when the rewrite below can spell it with finite values:
    ``("const", data)`` for a constant (finite or -inf entries), ``("where", (cond, keep_slot))`` for
    ``where(cond, a, b)`` with one branch all -inf and the other finite (``keep_slot``: the finite one, 1 or 2)."""
    node = graph.nodes[ref.node]
    if node.sig.op == "weight":
        data = graph.params.get(node.sig.attr["name"])
        if data is None:
            return None
        arr = np.asarray(data, dtype=np.float64)
        ok = np.isfinite(arr) | np.isneginf(arr)
        return ("const", np.asarray(data)) if bool(ok.all()) and bool(np.isneginf(arr).any()) else None
    if node.sig.op != "where":
        return None
    for keep, fill in ((1, 2), (2, 1)):
        f = graph.nodes[node.inputs[fill].node]
        data = graph.params.get(f.sig.attr["name"]) if f.sig.op == "weight" else None
        if data is not None and bool(np.all(np.isneginf(np.asarray(data, dtype=np.float64)))) and bounded_mask(
                graph, node.inputs[keep]):
            return "where", (node.inputs[0], keep)
    return None


def _inf_guard_ok(m: MatchView) -> bool | str:
    if _inf_mask(m.graph, m["m"]) is None:
        return "the mask is not a constant with -inf entries nor where(cond, finite, -inf)"
    rank = len(m.shape("sm"))
    if m.attr("sm", "axis") % rank != rank - 1:
        return "the softmax is not over the last axis"
    return True


def _inf_guard_target(t: TargetBuilder, m: Any) -> dict[str, Ref]:
    kind, how = _inf_mask(m.graph, m["m"])  # type: ignore[misc]
    if kind == "const":  # the mask and its rows' "any key kept" are constants
        data = np.asarray(how, dtype=np.float32)
        mask = t.const(np.where(np.isneginf(data), np.float32(NEG_FILL), data))
        keep = t.const(np.any(~np.isneginf(data), axis=-1, keepdims=True).astype(np.float32))
    else:
        cond, slot = how
        node = m.graph.nodes[m["m"].node]
        fill_shape = m.graph.type_of(node.inputs[3 - slot]).shape
        fill = t.const(np.full(fill_shape, NEG_FILL, np.float32))
        branches = (node.inputs[1], fill) if slot == 1 else (fill, node.inputs[2])
        mask = t.where(cond, *branches)
        one, zero = t.const(np.ones((), np.float32)), t.const(np.zeros((), np.float32))
        kept = t.where(cond, one, zero) if slot == 1 else t.where(cond, zero, one)
        keep = t.clip(t.reduce_sum(kept, axes=(-1,), keepdims=True), min=0.0, max=1.0)
    probs = t.softmax(t.add(m.qk, mask), axis=m.attr("sm", "axis"))
    return {"y": t.mul(probs, keep)}


def softmax_nan_guard_inf() -> tuple[Rule, Rule]:
    def example(q: tuple[int, ...], k: tuple[int, ...], mask: tuple[int, ...]) -> Example:
        rng = np.random.default_rng(len(q) + len(mask))
        data = np.where(rng.random(mask) < 0.5, 0.0, -np.inf).astype(np.float32)
        data[..., :1] = 0.0
        if data.ndim > 1:
            data[..., :1, :] = -np.inf  # a fully masked row: the guard's zeros
        return ex({"q": q, "k": k, "m": mask, "z": ()}, data={"m": data, "z": np.zeros((), np.float32)})

    return rule(
        "cpu_softmax_nan_guard_inf",
        "where(isnan(s), 0, s) with s = softmax(q @ k + mask), the mask holding -inf (a constant, or where(cond, "
        "finite, -inf) as the TorchScript exporter writes Hugging Face's masks) => softmax(q @ k + mask') * keep: "
        "mask' is the mask with finfo.min for -inf, keep is 1 for rows with a key kept and 0 for rows masked "
        "entirely (a reduction of the mask's condition, computed once). Rows with a key kept are the same softmax "
        "(exp of finfo.min + a finite score is 0, as exp(-inf)); fully masked rows, NaN before the guard and 0 after "
        "it, are uniform times 0 = 0. (Exact for finite activations; one mul replaces isnan and where.)",
        _guard_src, _inf_guard_target,
        [example((2, 4, 6, 8), (2, 4, 8, 6), (2, 1, 6, 6)), example((1, 2, 5, 3), (1, 2, 3, 5), (1, 1, 5, 5)),
         example((3, 4), (4, 7), (3, 7))],
        [(_inf_guard_ok, "the mask holds -inf in a form this rewrite spells with finite values")],
        tags=("attention", "cleanup"), commute=("add",), mirror="_lhs")


# ----------------------------------------------------------------------------- the set


@functools.lru_cache(maxsize=1)
def _build() -> tuple[Rule, ...]:
    mf_merge = next(r for r in metaflow.rules() if r.name == "mf_merge_matmuls")
    return (
        matmul_distribute(), matmul_factor_weight(), merge_qkv(), *merge_qkv_bias(), mf_merge,
        *matmul_bias_gemm(), *linear_scale_fold(),
        transpose_transpose(False), transpose_transpose(True), transpose_unit_reshape(),
        reshape_reshape(),
        _noop("reshape", "reshape(x) to x's own shape => x.",
              [ex({"x": (2, 3)}, op={"shape": (2, 3)}), ex({"x": (1, 4, 5)}, op={"shape": (1, 4, 5)}),
               ex({"x": (6,)}, op={"shape": (6,)})]),
        _noop("identity", "identity(x) => x (a copy has no effect on values).",
              [ex({"x": (2, 3)}), ex({"x": (1, 4, 5, 5)}), ex({"x": (6,)})]),
        *flatten_rules(),
        relu_relu(),
        *neutral_element("mul", 1.0), *neutral_element("add", 0.0), *neutral_element("sub", 0.0),
        fold_conv_bias("mul"), fold_conv_bias("add"),
        *softmax_nan_guard(), *softmax_nan_guard_inf(),
        *recurrent.rules(),  # a projection into an LSTM/GRU's input weights
    )


def rules() -> list[Rule]:
    """The ``cpu`` set (names ``cpu_...``, plus MetaFlow's two-way matmul merge)."""
    return list(_build())


__all__ = [
    "QKV", "bounded_mask", "flatten_rules", "fold_conv_bias", "linear_scale_fold", "matmul_bias_gemm",
    "matmul_distribute", "matmul_factor_weight", "merge_qkv", "merge_qkv_bias", "moves_only_unit_axes",
    "neutral_element", "relu_relu", "reshape_reshape", "rules", "softmax_nan_guard", "softmax_nan_guard_inf",
    "transpose_transpose", "transpose_unit_reshape",
]
