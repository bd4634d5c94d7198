"""Spellings that steer onnxruntime's own fusions (rule set ``ort-spelling``, names ``ortsp_*``, tag
``"ort-spelling"``).

onnxruntime rewrites a graph at session creation (``ORT_ENABLE_ALL``); some of those fusions make CPU models
slower. Measured on this project's suite (``experiments/results/ort_fusion_ablation.json``): its
``SkipLayerNormFusion``, which turns ``Add -> LayerNormalization`` into ``SkipLayerNormalization``, costs
1.10-1.13x on BERT-family encoders at 1 and 2 threads. Users cannot switch it off in the file they ship, but the
fusion looks for the op ``Add``: the same sum spelled as ONNX ``Sum`` (:mod:`graphsub.ops.elementwise`'s ``sum``)
is left alone. These rules change only the spelling, never the arithmetic: each is an identity of real numbers
(``add(u, v) == sum(u, v)``; ``SkipLayerNormalization(x, skip, g, b, bias) == LayerNormalization(x + skip + bias,
g, b)`` over the last axis, by its definition), checked numerically on its examples like every rule.

==================================  ==========================================================================
rule                                rewrite
==================================  ==========================================================================
``ortsp_ln_sum[_nobeta]``           add(u, v) -> layernorm  =>  sum(u, v) -> layernorm (ORT keeps
                                    LayerNormalization instead of fusing SkipLayerNormalization)
``ortsp_unfuse_skip_layernorm*``    ms_skip_layernorm(x, skip, g[, b[, bias]])  =>  layernorm(sum(x, skip[,
                                    bias]), g[, b]) over the last axis (undoes a peer's fusion); the
                                    ``_sum`` rules do the same for ms_skip_layernorm_sum, whose second
                                    output (the residual of pre-LN transformers) becomes the sum
``ortsp_attention_*[_ab][_lhs]``    ms_mha(q, k, v[, attention_bias]) of one input's projections =>
                                    ms_attention (onnxruntime's Attention) on the packed weight [Wq|Wk|Wv]
                                    and bias; the infix spells q, k, v: ``b`` x@W + b, ``n`` x@W (zero
                                    bias), ``s`` (x@W + b) * s for q (s joins the attention scale);
                                    ``_lhs``: biases added first
==================================  ==========================================================================

The attention packings fire only where a graph already has MultiHeadAttention (a peer's fusion, e.g. onnxscript's
``optimize_for_ort``), so they add no new contrib-op dependency. onnxruntime's CPU Attention kernel pre-packs the
weight and runs the three projections as one GEMM: on the suite's ViT (vit.ts.b1 through onnxscript, 2 threads) it
was about 4% faster than MultiHeadAttention on separate projections (1.041x and 1.044x in two runs of 15 paired
rounds); whole-model results are in ``experiments/results/suite.md``. They hold through batched matmuls
and softmax, outside the 2-D axioms of :mod:`graphsub.rules.soundness.smt`: proof "unknown", checked numerically on
their examples like every rule.

Whether a spelling pays depends on the model, the machine and the thread count, so these rules are not part of
``default`` and no cost model decides them: :mod:`graphsub.optimize.portfolio` applies them everywhere to make extra
candidates and keeps one only when it is measured faster end to end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphsub.ir.node import Ref
from graphsub.ops.msft import f32_attr
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import RuleFactory, WhereArg, ex, scalar_value
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort-spelling")


def _ln_sum(beta: bool) -> Rule:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        h = p.add(p.var("u"), p.var("v"), name="add")
        ins = [h, p.var("g")] + ([p.var("be")] if beta else [])
        return {"y": p.layernorm(*ins, name="ln"), "h": h}

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        h = t.sum(m.u, m.v)
        ins = [h, m.g] + ([m.be] if beta else [])
        return {"y": t.layernorm(*ins, axis=m.attr("ln", "axis"), epsilon=m.attr("ln", "epsilon")), "h": h}

    def example(u: tuple[int, ...], v: tuple[int, ...], axis: int) -> Example:
        norm = tuple(max(a, b) for a, b in zip((1,) * (len(v) - len(u)) + u, (1,) * (len(u) - len(v)) + v,
                                               strict=True))[axis:]
        return ex({"u": u, "v": v, "g": norm} | ({"be": norm} if beta else {}), ln={"axis": axis, "epsilon": 1e-5})

    name = "ortsp_ln_sum" + ("" if beta else "_nobeta")
    doc = ("add(u, v) feeding a layer normalisation is spelled sum(u, v): the same value, but onnxruntime does not "
           "fuse the pair into SkipLayerNormalization.")
    return rule(name, doc, src, tgt, [example((2, 5, 8), (2, 5, 8), 2), example((2, 5, 8), (5, 8), 2),
                                      example((6, 16), (6, 16), 1), example((2, 3, 4), (2, 3, 4), 1)])


def _unfuse_sln(n_inputs: int, with_sum: bool = False) -> Rule:
    names = ("x", "skip", "g", "be", "bias")[:n_inputs]
    op = "ms_skip_layernorm_sum" if with_sum else "ms_skip_layernorm"

    def src(p: PatternBuilder) -> dict[str, PValue]:
        outs = p.op_multi(op, *(p.var(n) for n in names), name="sln", outputs=2 if with_sum else 1)
        return {"y": outs[0]} | ({"h": outs[1]} if with_sum else {})

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        h = t.sum(m.x, m.skip, *([m.bias] if n_inputs > 4 else []))
        ins = [h, m.g] + ([m.be] if n_inputs > 3 else [])
        return {"y": t.layernorm(*ins, axis=-1, epsilon=m.attr("sln", "epsilon"))} | ({"h": h} if with_sum else {})

    def example(x: tuple[int, ...], skip: tuple[int, ...], eps: float) -> Example:
        d = (x[-1],)
        return ex({"x": x, "skip": skip} | {n: d for n in names[2:]}, sln={"epsilon": eps})

    name = "ortsp_unfuse_skip_layernorm" + ("_sum" if with_sum else "") + {3: "_nobeta", 4: "", 5: "_bias"}[n_inputs]
    bias = ", bias" if n_inputs > 4 else ""
    doc = ("onnxruntime's SkipLayerNormalization" + (" with a bias" if n_inputs > 4 else "") + " is layer "
           f"normalisation over the last axis of sum(x, skip{bias})" +
           (" (its sum output, the residual of pre-LN transformers, is that sum)." if with_sum else "."))
    return rule(name, doc, src, tgt, [example((2, 5, 8), (2, 5, 8), 1e-5), example((2, 5, 8), (5, 8), 1e-3),
                                      example((6, 16), (6, 16), 1e-12)])


#: projection spellings of the attention rules: bias after the product (``b``), none (``n``), and for the
#: query, bias then a constant scalar factor (``s``, Whisper's ``q * head_dim**-0.5``)
_PROJ = {"b": "x@W + b", "n": "x@W", "s": "(x@W + b) * s"}


def _projection(p: PatternBuilder, x: PValue, n: str, kind: str) -> PValue:
    y = p.matmul(x, p.weight(f"w{n}"), act="none", name=f"mm_{n}")
    if kind == "n":
        return y
    y = p.add(y, p.weight(f"b{n}"), name=f"add_{n}")
    return p.mul(y, p.weight("s"), name="mul_q") if kind == "s" else y


def _attention(kinds: str, bias: bool = False) -> list[Rule]:
    qkv = "qkv"

    def src(p: PatternBuilder) -> dict[str, PValue]:
        x = p.var("x")
        ab = [p.var("ab")] if bias else []
        return {"y": p.ms_mha(*(_projection(p, x, n, k) for n, k in zip(qkv, kinds, strict=True)), *ab, name="mha")}

    def shapes_ok(m: MatchView) -> bool | str:
        x, ws = m.shape("x"), [m.shape(f"w{n}") for n in qkv]
        if len(x) != 3 or any(len(w) != 2 or w[0] != x[2] for w in ws):
            return f"input {x} and weights {ws} are not x[B,S,D] with matrices of D rows"
        for n, k, w in zip(qkv, kinds, ws, strict=True):
            if k != "n" and m.shape(f"b{n}") != (w[1],):
                return f"bias of {n} {m.shape(f'b{n}')} is not a vector of width {w[1]}"
        return True

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        ws = [m[f"w{n}"] for n in qkv]
        widths = tuple(m.shape(f"w{n}")[1] for n in qkv)
        bs = [m[f"b{n}"] if k != "n" else t.const(np.zeros(d), m.type(f"w{n}").dtype)
              for n, k, d in zip(qkv, kinds, widths, strict=True)]
        factor = scalar_value(m, "s") if kinds[0] == "s" else None
        scale = m.attr("mha", "scale") * (1.0 if factor is None else factor)
        y = t.ms_attention(m.x, t.concat(*ws, axis=1), t.concat(*bs, axis=0), *([m.ab] if bias else []),
                           num_heads=m.attr("mha", "num_heads"), scale=f32_attr(scale), qkv_hidden_sizes=widths)
        return {"y": y}

    def example(x: tuple[int, ...], d: tuple[int, int, int], heads: int, scale: float) -> Example:
        types: dict[str, Any] = {"x": x} | {f"w{n}": (x[2], w) for n, w in zip(qkv, d, strict=True)}
        types |= {f"b{n}": (w,) for n, k, w in zip(qkv, kinds, d, strict=True) if k != "n"}
        if bias:
            types["ab"] = (x[0] if heads > 1 else 1, heads, x[1], x[1])
        data = {}
        if kinds[0] == "s":
            types["s"] = ()
            data["s"] = np.float32(0.125)
        return ex(types, data=data, mha={"num_heads": heads, "scale": scale})

    where: list[WhereArg] = [(shapes_ok, "x[B,S,D] projected by D-row matrices, biases of their widths")]
    if kinds[0] == "s":
        where.append((lambda m: scalar_value(m, "s") is not None or "the query factor is not a constant scalar",
                      "the query's factor is a constant scalar"))
    adds = tuple(f"add_{n}" for n, k in zip(qkv, kinds, strict=True) if k != "n")
    text = ", ".join(f"{n} = {_PROJ[k].replace('W', 'W' + n).replace('b', 'b' + n)}" for n, k in zip(qkv, kinds,
                                                                                                       strict=True))
    doc = (f"MultiHeadAttention of one input's projections ({text})" + (" with an attention bias" if bias else "")
           + " is onnxruntime's Attention on the packed weight [Wq|Wk|Wv] and bias [bq|bk|bv]"
           + (" (a missing bias is zeros)" if "n" in kinds else "")
           + ("; the query's factor s joins the attention scale" if kinds[0] == "s" else "") + ".")
    examples = [example((2, 5, 8), (8, 8, 8), 2, 0.5), example((1, 7, 6), (8, 8, 12), 4, 1.0),
                example((1, 4, 16), (16, 16, 16), 1, 0.25)]
    name = f"ortsp_attention_{kinds}" + ("_ab" if bias else "")
    if not adds:
        return [rule(name, doc, src, tgt, examples, where)]
    return list(rule(name, doc, src, tgt, examples, where, commute=adds, mirror="_lhs",
                     mirror_doc=doc[:-1] + "; biases added first."))


def rules() -> list[Rule]:
    """The ``ort-spelling`` rule set (see the module docstring)."""
    return [_ln_sum(True), _ln_sum(False), *(_unfuse_sln(n, with_sum) for with_sum in (False, True) for n in (3, 4, 5)),
            *(r for bias in (False, True) for kinds in ("bbb", "snb", "sbb", "nnn") for r in _attention(kinds, bias))]


__all__ = ["rules"]
