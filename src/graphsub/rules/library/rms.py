"""A decoder's RMSNorm, as the PyTorch exporters spell it, rewritten into onnxruntime's kernels (``ms_rms_norm``,
``ms_skip_rms_norm[_sum]``: :mod:`graphsub.ops.msft_rms`): rule set ``decoder`` (tags ``"ort"``, ``"decoder"``), names
``ort_rms_*``.

Hugging Face's ``LlamaRMSNorm`` (Qwen2, Mistral and others copy it) is ``x * rsqrt(mean(x^2, -1) + eps) * g``; the
exporters write the inverse square root three ways, and onnxruntime's own graph optimizer fuses only the ``div`` one
(on this project's exports of the small Llama it fused none of the nine norms):

==========  ===================================================  ======================
spelling    the normalised ``x``                                  exporter
==========  ===================================================  ======================
``rsqrt``   ``mul(x, reciprocal(sqrt(d)))``                       dynamo
``div1``    ``mul(x, div(1, sqrt(d)))``                           TorchScript
``div``     ``div(x, sqrt(d))``                                   hand-written models
==========  ===================================================  ======================

with ``d = add(reduce_mean(pow(x, 2), last axis), eps)`` (``_sq``: ``mul(x, x)`` for the power), then times the
weight ``g`` of shape (D,) (``mul(g, n)``; ``_r``: ``mul(n, g)``; ``_xr``: the normalisation's product written
``mul(inv, x)``, as the search's commutations leave it). ``ort_rms_*`` writes it
``ms_rms_norm(x, g)`` (SimplifiedLayerNormalization); ``ort_rms_skip_*`` matches it on ``x = add(u, v)`` -- a
pre-norm decoder's residual sum -- and writes ``ms_skip_rms_norm_sum(u, v, g)`` (SkipSimplifiedLayerNormalization,
its sum output the residual), as onnxruntime-genai's builder does by hand. All rules are exact up to float rounding
(the kernel computes the same function in float32); examples are verified in float mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graphsub.ir.node import Ref
from graphsub.ops.msft import f32_attr
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import Check, RuleFactory, WhereArg, ex, scalar_value, skip_accepts
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort", "decoder")

#: the spellings of the normalised x (see the module docstring)
SPELLINGS = ("rsqrt", "div1", "div")


def _src(spelling: str, square: str, skip: bool, xr: bool) -> Callable[[PatternBuilder], dict[str, PValue]]:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        x = p.add(p.var("u"), p.var("v"), name="h") if skip else p.var("x")
        sq = p.pow(x, p.weight("two"), name="sq") if square == "pow" else p.mul(x, x, name="sq")
        root = p.sqrt(p.add(p.reduce_mean(sq, name="mean"), p.weight("eps"), name="d"), name="root")
        if spelling in ("rsqrt", "div1"):
            inv = p.reciprocal(root, name="inv") if spelling == "rsqrt" else p.div(p.weight("one"), root, name="inv")
            n = p.mul(inv, x, name="n") if xr else p.mul(x, inv, name="n")
        else:
            n = p.div(x, root, name="n")
        y = p.mul(p.weight("g"), n, name="y")
        return {"y": y, "h": x} if skip else {"y": y}

    return src


def _x(m: MatchView, skip: bool) -> str:
    return "h" if skip else "x"


def _skip_ok(m: MatchView) -> Check:
    """(u, v) is (x, skip) or (skip, x) for SkipSimplifiedLayerNormalization (x (B, S, D) or (N, D))."""
    return _split(m) is not None or "the sum is not x + skip of a shape SkipSimplifiedLayerNormalization accepts"


def _split(m: MatchView) -> tuple[Ref, Ref] | None:
    out = m.shape("h")
    for x, s in (("u", "v"), ("v", "u")):
        if m.shape(x) == out and skip_accepts(out, m.shape(s)):
            return m[x], m[s]
    return None


def _not_a_sum(m: MatchView) -> Check:
    """x is not a residual sum that ``ort_rms_skip_*`` takes (so that a pass applying the rules in any order leaves
    no sum to a plain norm: the skip rule of the next layer finds its sum again once the one before is rewritten)."""
    node = m.producer("x")
    if node.sig.op != "add" or len(node.inputs) != 2:
        return True
    out, shapes = m.shape("x"), [m.graph.type_of(r).shape for r in node.inputs]
    takes = any(a == out and skip_accepts(out, b) for a, b in (shapes, shapes[::-1]))
    return not takes or "x is a residual sum: ort_rms_skip_* takes it"


def _where(spelling: str, square: str, skip: bool) -> list[WhereArg]:
    def norm(m: MatchView) -> Check:
        x = m.shape(_x(m, skip))
        if m.type(_x(m, skip)).dtype != "float32" or not x:
            return "x is not a float32 tensor"
        axes = tuple(int(a) for a in m.attr("mean", "axes"))
        if axes not in ((len(x) - 1,), (-1,)) or m.shape("mean") != (*x[:-1], 1):
            return "the mean is not over the last axis with its dims kept"
        return (m.shape("g") == x[-1:] and m.shape("y") == x) or "the weight is not (D,)"

    def constants(m: MatchView) -> Check:
        eps = scalar_value(m, "eps")
        if eps is None or not np.isfinite(eps) or eps < 0 or m.shape("d") != m.shape("mean"):
            return "eps is not a scalar constant >= 0 added to the mean"
        if square == "pow" and scalar_value(m, "two") != 2.0:
            return "the power is not 2"
        if spelling == "div1" and (scalar_value(m, "one") != 1.0 or m.shape("inv") != m.shape("mean")):
            return "the numerator is not 1"
        return True

    out: list[WhereArg] = [(norm, "a float32 RMSNorm over the last axis with a (D,) weight"),
                           (constants, "2, eps >= 0 (and 1) are scalar constants")]
    if skip:
        out.append((_skip_ok, "the sum is x + skip, skip of x's shape (or (1, S, D), (S, D))"))
    else:
        out.append((_not_a_sum, "x is not a residual sum (ort_rms_skip_* takes those)"))
    return out


def _tgt(skip: bool) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        eps = scalar_value(m, "eps")
        assert eps is not None
        if not skip:
            return {"y": t.ms_rms_norm(m.x, m.g, epsilon=f32_attr(eps))}
        split = _split(m)
        assert split is not None
        y, h = t.ms_skip_rms_norm_sum(*split, m.g, epsilon=f32_attr(eps))
        return {"y": y, "h": h}

    return tgt


def _examples(spelling: str, square: str, skip: bool) -> list[Example]:
    out = []
    for k, (shape, other) in enumerate((((2, 5, 16), (2, 5, 16)), ((6, 8), (6, 8)), ((2, 3, 8), (3, 8)))):
        types: dict[str, Any] = {"g": shape[-1:], "eps": ()}
        types |= {"u": shape, "v": other} if skip else {"x": shape}
        data: dict[str, Any] = {"eps": np.float32([1e-6, 1e-5, 0.0][k])}
        if square == "pow":
            types["two"], data["two"] = (), np.float32(2.0)
        if spelling == "div1":
            types["one"], data["one"] = (1,) if k == 1 else (), np.ones((1,) if k == 1 else (), np.float32)
        out.append(ex(types, data=data, mean={"axes": (len(shape) - 1,), "keepdims": True}))
    return out


def _rules(spelling: str, square: str, skip: bool, xr: bool = False) -> tuple[Rule, Rule]:
    name = f"ort_rms_{'skip_' if skip else ''}{spelling}{'_sq' if square == 'mul' else ''}{'_xr' if xr else ''}"
    inner = {"rsqrt": "x * reciprocal(sqrt(d))", "div1": "x * (1 / sqrt(d))", "div": "x / sqrt(d)"}[spelling]
    doc = (f"RMSNorm spelled {inner}, d = mean(x^2, last axis) + eps, times a (D,) weight"
           + (", of a residual sum x = u + v" if skip else "") + " is onnxruntime's "
           + ("SkipSimplifiedLayerNormalization of (u, v) with its sum output" if skip
              else "SimplifiedLayerNormalization") + ".")
    if xr:
        doc = doc[:-1] + "; x multiplied last in the normalisation."
    return rule(name, doc, _src(spelling, square, skip, xr), _tgt(skip), _examples(spelling, square, skip),
                _where(spelling, square, skip), commute=("y",), mirror_doc=doc[:-1] + "; the weight multiplied last.")


def rules() -> list[Rule]:
    """The ``ort_rms_*`` rules, the residual sums' first (see the module docstring)."""
    return [r for skip in (True, False) for spelling in SPELLINGS for square in ("pow", "mul")
            for xr in ((False, True) if spelling != "div" else (False,)) for r in _rules(spelling, square, skip, xr)]


__all__ = ["SPELLINGS", "rules"]
