"""A decoder's GroupQueryAttention fed by one packed projection (``ms_gqa_packed``, :mod:`graphsub.ops.msft_gqa`):
rules ``ort_gqa_packed_*`` of the ``attention`` set, applied after ``ort_gqa_*`` (:mod:`graphsub.rules.library.gqa`)
and ``ort_gqa_rotary`` (:mod:`graphsub.rules.library.gqa_rotary`) made the attention a GroupQueryAttention on the
projections themselves.

onnxruntime's kernel reads q, k and v either as three tensors or as one, side by side on the last axis (its key and
value inputs left empty). onnxruntime-genai's builder writes the second by hand: one MatMul for the three
projections and no Split. Three sources are matched, each with and without the rotary embedding inside the node
(``_rotary``: the cos and sin inputs):

* ``split``: ``ms_gqa(split(y)[0], split(y)[1], split(y)[2], ...)``, the split on the last axis at the node's own
  widths (``N*hd``, ``Nkv*hd``, ``Nkv*hd``) -- GPT-2's fused ``c_attn`` projection, or three projections that
  ``cpu_merge_qkv`` merged -- is ``ms_gqa_packed(y, ...)``;
* ``mm``: ``ms_gqa(x @ Wq, x @ Wk, x @ Wv, ...)`` with weight operands (Llama, Mistral) is
  ``ms_gqa_packed(x @ concat(Wq, Wk, Wv), ...)``, the concatenation folded as a weight;
* ``mm_bias``: ``ms_gqa(x @ Wq + bq, x @ Wk + bk, x @ Wv + bv, ...)`` (Qwen2) with the biases concatenated too.

Each is exact: the packed node computes the same attention on the same q, k and v (a concatenated product is the
products concatenated). Examples are verified in float mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graphsub.ir.node import Ref
from graphsub.ops.msft_gqa import PACKED
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.gqa import rule
from graphsub.rules.library.kit import Check, ex
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

#: the sources (module docstring)
FORMS = ("split", "mm", "mm_bias")
_QKV = ("q", "k", "v")
#: (B, S, P, N, Nkv, hd): a decode step, a batch of chunks on a past, a prompt on an empty past (one group)
_CASES = ((1, 1, 6, 4, 2, 16), (2, 3, 5, 4, 2, 16), (1, 4, 0, 2, 2, 32))


def _src(form: str, rotary: bool) -> Callable[[PatternBuilder], dict[str, PValue]]:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        if form == "split":
            parts = list(p.op_multi("split", p.var("y"), name="sp", outputs=3))
        else:
            x = p.var("x")
            parts = [p.matmul(x, p.weight(f"w{n}"), name=f"mm_{n}") for n in _QKV]
            if form == "mm_bias":
                parts = [p.add(mm, p.weight(f"b{n}"), name=f"add_{n}") for mm, n in zip(parts, _QKV, strict=True)]
        extra = (p.var("cos"), p.var("sin")) if rotary else ()
        outs = p.op_multi("ms_gqa", *parts, p.var("pk"), p.var("pv"), p.var("ab"), *extra, name="gqa", outputs=3)
        return {"y_": outs[0], "present_k": outs[1], "present_v": outs[2]}

    return src


def _widths(m: MatchView) -> tuple[int, int, int]:
    """The widths of q, k and v on the last axis (N*hd, Nkv*hd, Nkv*hd) for the matched node."""
    a = m.attrs("gqa")
    hd = m.shape("pk")[3]
    return a["num_heads"] * hd, a["kv_num_heads"] * hd, a["kv_num_heads"] * hd


def _ok(form: str) -> Callable[[MatchView], Check]:
    def ok(m: MatchView) -> Check:
        widths = _widths(m)
        if form == "split":
            a = m.attrs("sp")
            rank = len(m.shape("y"))
            if a["axis"] not in (-1, rank - 1) or tuple(a["sizes"]) != widths:
                return f"the split is not q, k and v's widths {widths} on the last axis"
            return True
        ws = [m.shape(f"w{n}") for n in _QKV]
        if any(len(w) != 2 for w in ws) or len({w[0] for w in ws}) != 1 or tuple(w[1] for w in ws) != widths:
            return f"the projections' weights {ws} are not matrices of one row count and q, k, v's widths {widths}"
        if any(m.attr(f"mm_{n}", "act") != "none" for n in _QKV):
            return "a projection has an activation"
        if form == "mm_bias" and any(m.shape(f"b{n}") != (w[1],) for n, w in zip(_QKV, ws, strict=True)):
            return "the biases are not vectors of the projections' widths"
        return True

    return ok


def _tgt(form: str, rotary: bool) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        if form == "split":
            qkv: Ref = m.y
        else:
            qkv = t.matmul(m.x, t.concat(*(m[f"w{n}"] for n in _QKV), axis=1), act="none")
            if form == "mm_bias":
                qkv = t.add(qkv, t.concat(*(m[f"b{n}"] for n in _QKV), axis=0))
        rest = [m[n] for n in ("pk", "pv", "ab", *(("cos", "sin") if rotary else ()))]
        y, present_k, present_v = t.op_multi(PACKED, qkv, *rest, **m.attrs("gqa"))
        return {"y_": y, "present_k": present_k, "present_v": present_v}

    return tgt


def _examples(form: str, rotary: bool) -> list[Example]:
    out = []
    for k, (b, s, p, n, nkv, hd) in enumerate(_CASES):
        t = p + s
        widths = (n * hd, nkv * hd, nkv * hd)
        types: dict[str, Any] = {"pk": (b, nkv, p, hd), "pv": (b, nkv, p, hd), "ab": (b, 1, s, t)}
        if rotary:
            types |= {"cos": (b, 1, s, hd // 2), "sin": (b, 1, s, hd // 2)}
        attrs: dict[str, Any] = {"gqa": {"num_heads": n, "kv_num_heads": nkv, "scale": [0.35, 0.5, 0.3][k]}}
        if form == "split":
            types["y"] = (b, s, sum(widths))
            attrs["sp"] = {"axis": [2, -1, 2][k], "sizes": widths}
        else:
            d = 24 + 8 * k
            types |= {"x": (b, s, d)} | {f"w{c}": (d, w) for c, w in zip(_QKV, widths, strict=True)}
            if form == "mm_bias":
                types |= {f"b{c}": (w,) for c, w in zip(_QKV, widths, strict=True)}
        out.append(ex(types, data={"ab": np.zeros((b, 1, s, t), np.float32)} if k == 2 else None, **attrs))
    return out


def _rule(form: str, rotary: bool) -> Rule:
    src = {"split": "split of one tensor at q, k and v's widths", "mm": "three projections of one input",
           "mm_bias": "three projections of one input with biases"}[form]
    doc = (f"GroupQueryAttention{' with the rotary embedding inside' if rotary else ''} on q, k and v from a {src} "
           "is GroupQueryAttention on the packed projection (key and value empty): one MatMul, no Split.")
    name = f"ort_gqa_packed_{form}" + ("_rotary" if rotary else "")
    return rule(name, doc, _src(form, rotary), _tgt(form, rotary), _examples(form, rotary),
                [(_ok(form), "q, k and v are one tensor's consecutive pieces of the node's widths")])


def rules() -> list[Rule]:
    """The ``ort_gqa_packed_*`` rules (see the module docstring)."""
    return [_rule(form, rotary) for form in FORMS for rotary in (True, False)]


__all__ = ["FORMS", "rules"]
