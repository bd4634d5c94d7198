"""Spellings that steer onnxruntime's own fusions (rule set ``ort-spelling``, names ``ortsp_*``, tag
``"ort-spelling"``).

onnxruntime rewrites a graph at session creation (``ORT_ENABLE_ALL``); some of those fusions make CPU models
slower. Measured on this project's suite (``benchmarks/results/ort_fusion_ablation.json``): its
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
                                    bias]), g[, b]) over the last axis (undoes a peer's fusion)
==================================  ==========================================================================

Whether a spelling pays depends on the model, the machine and the thread count, so these rules are not part of
``default`` and no cost model decides them: :mod:`graphsub.optimize.portfolio` applies them everywhere to make extra
candidates and keeps one only when it is measured faster end to end.
"""

from __future__ import annotations

from graphsub.ir.node import Ref
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import RuleFactory, ex
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


def _unfuse_sln(n_inputs: int) -> Rule:
    names = ("x", "skip", "g", "be", "bias")[:n_inputs]

    def src(p: PatternBuilder) -> dict[str, PValue]:
        return {"y": p.ms_skip_layernorm(*(p.var(n) for n in names), name="sln")}

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        h = t.sum(m.x, m.skip, *([m.bias] if n_inputs > 4 else []))
        ins = [h, m.g] + ([m.be] if n_inputs > 3 else [])
        return {"y": t.layernorm(*ins, axis=-1, epsilon=m.attr("sln", "epsilon"))}

    def example(x: tuple[int, ...], skip: tuple[int, ...], eps: float) -> Example:
        d = (x[-1],)
        return ex({"x": x, "skip": skip} | {n: d for n in names[2:]}, sln={"epsilon": eps})

    name = "ortsp_unfuse_skip_layernorm" + {3: "_nobeta", 4: "", 5: "_bias"}[n_inputs]
    doc = ("onnxruntime's SkipLayerNormalization" + (" with a bias" if n_inputs > 4 else "") + " is layer "
           "normalisation over the last axis of sum(x, skip" + (", bias" if n_inputs > 4 else "") + ").")
    return rule(name, doc, src, tgt, [example((2, 5, 8), (2, 5, 8), 1e-5), example((2, 5, 8), (5, 8), 1e-3),
                                      example((6, 16), (6, 16), 1e-12)])


def rules() -> list[Rule]:
    """The ``ort-spelling`` rule set (see the module docstring)."""
    return [_ln_sum(True), _ln_sum(False), *(_unfuse_sln(n) for n in (3, 4, 5))]


__all__ = ["rules"]
