"""Head-split attention rewritten into onnxruntime's MultiHeadAttention (``ms_mha``, :mod:`graphsub.ops.msft`): rule
set ``attention``, names ``ort_mha_*``, tags ``"ort"`` and ``"attention"``; the ``ort`` set includes them
(:mod:`graphsub.rules.library.ort`).

Each rule matches one attention block: the projections ``Q``, ``K``, ``V`` split into heads, per head
``softmax(logits, last axis) @ v``, the heads merged back; and writes it ``ms_mha(Q, K, V [, attention_bias])``.
The reshapes of the projections and of the output are kept as reshapes of ms_mha's inputs and output (dropped where
they are identities), so any projection shape works. Names spell the variant:
``ort_mha_<layout>[_<scale>][_guard | _keep][_ab[_lhs]]``.

=================  ================================================================================================
layout             head split (q and v / k) and merge
=================  ================================================================================================
``heads3d``        graphsub's ``bert_corrected``: reshape to (S, H, hd), perms q/v ``(1, 0, 2)``, k ``(1, 2, 0)``,
                   output perm ``(1, 0, 2)``; the target views Q/K/V as batch 1 (1, S, H*hd)
``batched``        ``view(B, S, H, hd).permute(0, 2, 1, 3)``, k's ``transpose(-1, -2)`` merged into its perm
                   ``(0, 2, 3, 1)`` (TorchScript exports; dynamo exports of eager attention); output perm
                   ``(0, 2, 1, 3)``, then a reshape
``dynamo``         as ``batched``, k as the dynamo exporter writes scaled_dot_product_attention's
                   ``k.transpose(-2, -1)``: perm ``(0, 2, 1, 3)``, reshape to (B*H, L, hd), perm ``(0, 2, 1)``,
                   reshape to (B, H, hd, L)
``single``         one head (SegFormer's first stage): the clean-up writes the unit-axis transposes of q and v as
                   reshapes to (B, 1, S, D); k ``transpose(reshape(K, (B, L, 1, D)), (0, 2, 3, 1))``; the output
                   a reshape of the product
``single_dynamo``  one head, k ``reshape(transpose(K, (0, 2, 1)), (B, 1, D, L))`` (the dynamo export)
=================  ================================================================================================

Scales (the logits): none (``q @ k``); ``mul`` / ``div``: the logits times / divided by a constant scalar; ``fmm``:
``ms_fused_matmul(q, k, alpha)`` (after ``ort_mm_scale_*``); ``qk``: PyTorch's scaled_dot_product_attention as
both exporters write it, the head-split q and the transposed k each times a constant scalar (``sqrt(scale)``; the
target's scale is the product). Around the softmax:

* ``_ab``: an additive attention bias ``add(logits, B)`` (``_lhs``: ``add(B, logits)``), B a weight or a run-time
  value broadcasting from the right to (B or 1, H or 1, S, L) without broadcasting the logits (T5's position bias,
  Hugging Face's masks, Swin's relative position bias): ms_mha's ``attention_bias``, reshaped to rank 4 and
  expanded over (S, L) where it broadcasts there (a padding mask (B, 1, 1, L));
* ``_guard``: the dynamo exporter's NaN guard ``where(isnan(p), z, p)`` on the probabilities of an attention
  without bias: finite logits give no NaN, so the guard is the identity (exact for finite activations, as
  ``cpu_softmax_nan_guard``, which removes the guard where a finite mask is added);
* ``_keep``: the probabilities times a per-query-row factor r ((B or 1, 1, S or 1, 1) from the right), what
  ``cpu_softmax_nan_guard_inf`` makes of the TorchScript exporter's guard against fully masked rows (BERT, GPT-2,
  BART, OPT): ``ms_mha(...) * r`` with r as (B or 1, S or 1, 1), the same factor for every head.

==================================================  ==============================================================
rules                                               variants
==================================================  ==============================================================
``ort_mha_{heads3d,batched}[_mul,_div,_fmm]``       no bias
``ort_mha_batched_qk``                              no bias
``ort_mha_batched[_mul,_div,_fmm,_qk]_ab[_lhs]``    attention bias, every scale
``ort_mha_batched[_qk]_keep_ab[_lhs]``              attention bias and row factor
``ort_mha_dynamo[_qk][_guard]``                     no bias
``ort_mha_dynamo[_qk][_keep]_ab[_lhs]``             attention bias (and row factor)
``ort_mha_single[_dynamo]_qk``                      one head, no bias
==================================================  ==============================================================

Not covered: Muls of the scale written ``mul(c, q)`` (neither exporter writes them), rotary embeddings between the
head split and the logits (Llama, Qwen2, Phi, GPT-NeoX), q/k/v split from one packed projection after the head split
(LeViT), DeBERTa's disentangled attention, sequence-first layouts (``nn.MultiheadAttention``'s export, which
scales q alone), dropout and past state (a decoder's attention with its key/value cache, rotary embedding included, is
GroupQueryAttention: :mod:`graphsub.rules.library.gqa`). All rules are exact (up to float rounding: the kernels
compute the same function); examples are verified in float mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.ir.node import Ref
from graphsub.ops.msft import f32_attr
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import Check, RuleFactory, WhereArg, broadcasts_into, ex, scalar_constant, scalar_value
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort", "attention")


@dataclass(frozen=True)
class _Layout:
    """How q, k, v are split into heads and the product merged back.

    ``split``: the perm after the reshape of q and v (None: the reshape alone); ``key``: ``"perm"`` (a transpose of
    the reshape), ``"dynamo"`` (perm ``(0, 2, 1, 3)``, then a batch-merged swap of the last two axes) or ``"t3"``
    (``reshape(transpose(K, (0, 2, 1)))``); ``kperm``: the perm of k's first transpose; ``out``: the perm before the
    final reshape (None: none); ``axis``: the softmax's; ``text``: the layout in a rule's doc."""

    split: tuple[int, ...] | None
    key: str
    kperm: tuple[int, ...]
    out: tuple[int, ...] | None
    axis: int
    text: str

    @property
    def q_head(self) -> str:
        """The pattern node of the head-split q."""
        return "rq" if self.split is None else "tq"

    @property
    def k_head(self) -> str:
        """The pattern node of the head-split, transposed k."""
        return {"perm": "tk", "dynamo": "rk4", "t3": "rk"}[self.key]


_B4 = (0, 2, 1, 3)
_LAYOUTS: dict[str, _Layout] = {
    "heads3d": _Layout((1, 0, 2), "perm", (1, 2, 0), (1, 0, 2), 2, "heads3d layout"),
    "batched": _Layout(_B4, "perm", (0, 2, 3, 1), _B4, 3, "batched layout"),
    "dynamo": _Layout(_B4, "dynamo", _B4, _B4, 3, "batched layout, k transposed as the dynamo exporter writes it"),
    "single": _Layout(None, "perm", (0, 2, 3, 1), None, 3, "one head"),
    "single_dynamo": _Layout(None, "t3", (0, 2, 1), None, 3, "one head, k transposed as the dynamo exporter writes it"),
}
_SCALE_TEXT = {"": "", "mul": ", logits times a constant", "div": ", logits divided by a constant",
               "fmm": ", logits from FusedMatMul(alpha)", "qk": ", q and k each times a constant"}
_POST_TEXT = {"": "", "guard": ", probabilities NaN-guarded", "keep": ", probabilities times a row factor"}


@dataclass(frozen=True)
class _Variant:
    """One rule: a layout of :data:`_LAYOUTS`, a scale (``""``, ``mul``, ``div``, ``fmm``, ``qk``), what follows the
    softmax (``""``, ``guard``, ``keep``) and whether an attention bias precedes it."""

    layout: str
    scale: str = ""
    post: str = ""
    bias: bool = False

    @property
    def lay(self) -> _Layout:
        return _LAYOUTS[self.layout]

    @property
    def name(self) -> str:
        parts = [self.layout, self.scale, self.post, "ab" if self.bias else ""]
        return "ort_mha_" + "_".join(p for p in parts if p)


# ----------------------------------------------------------------------------- source


def _split(p: PatternBuilder, lay: _Layout, var: str) -> PValue:
    """The head split of q or v (variable ``var``)."""
    n = var.lower()
    r = p.reshape(p.var(var), name=f"r{n}")
    return r if lay.split is None else p.transpose(r, perm=lay.split, name=f"t{n}")


def _key(p: PatternBuilder, lay: _Layout) -> PValue:
    """The head-split k with its last two axes swapped."""
    if lay.key == "t3":
        return p.reshape(p.transpose(p.var("K"), perm=lay.kperm, name="tk"), name="rk")
    k = p.transpose(p.reshape(p.var("K"), name="rk"), perm=lay.kperm, name="tk")
    if lay.key == "dynamo":
        k = p.reshape(p.transpose(p.reshape(k, name="rk3"), perm=(0, 2, 1), name="tk3"), name="rk4")
    return k


def _logits(p: PatternBuilder, q: PValue, k: PValue, scale: str) -> PValue:
    if scale == "qk":
        q, k = p.mul(q, p.weight("sq"), name="mq"), p.mul(k, p.weight("sk"), name="mk")
    if scale == "fmm":
        return p.ms_fused_matmul(q, k, trans_a=False, trans_b=False, name="qk")
    logits = p.matmul(q, k, act="none", name="qk")
    if scale in ("mul", "div"):
        logits = p.op1(scale, logits, p.weight("s"), name="sc")
    return logits


def _mha_src(v: _Variant) -> Callable[[PatternBuilder], dict[str, PValue]]:
    lay = v.lay

    def src(p: PatternBuilder) -> dict[str, PValue]:
        q, k, val = _split(p, lay, "Q"), _key(p, lay), _split(p, lay, "V")
        logits = _logits(p, q, k, v.scale)
        if v.bias:
            logits = p.add(logits, p.var("ab"), name="bias")
        probs = p.softmax(logits, axis=lay.axis, name="sm")
        if v.post == "guard":
            probs = p.where(p.isnan(probs, name="nan"), p.var("z"), probs, name="guard")
        elif v.post == "keep":
            probs = p.mul(probs, p.var("r"), name="keep")
        o = p.matmul(probs, val, act="none", name="pv")
        if lay.out is not None:
            o = p.transpose(o, perm=lay.out, name="to")
        return {"y": p.reshape(o, name="ro")}

    return src


# ----------------------------------------------------------------------------- where


Dims = tuple[int, int, int, int, int, int]


def _dims(m: MatchView, layout: str) -> Dims | None:
    """(B, S, L, H, hd, hdv) of a matched attention, or None when q, k, v are not split into the same heads."""
    q, k, v = m.shape("rq"), m.shape("rk"), m.shape("rv")
    if layout == "heads3d":
        ok = q[1] == k[1] == v[1] and q[2] == k[2] and k[0] == v[0]
        return (1, q[0], k[0], q[1], q[2], v[2]) if ok else None
    if layout.startswith("single"):
        if len(q) != 4 or len(v) != 4 or q[1] != 1 or v[1] != 1 or q[0] != v[0]:
            return None
        want = (q[0], 1, q[3], v[2]) if layout == "single_dynamo" else (q[0], v[2], 1, q[3])
        return (q[0], q[2], v[2], 1, q[3], v[3]) if k == want else None
    if not (q[0] == k[0] == v[0] and q[2] == k[2] == v[2] and q[3] == k[3] and k[1] == v[1]):
        return None
    b, s, length, h, hd, hdv = q[0], q[1], k[1], q[2], q[3], v[3]
    if layout == "dynamo" and (m.shape("rk3") != (b * h, length, hd) or m.shape("rk4") != (b, h, hd, length)):
        return None
    return b, s, length, h, hd, hdv


def _pad4(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (1,) * (4 - len(shape)) + shape


def _bias_ok(m: MatchView) -> Check:
    ab, logits = m.shape("ab"), m.shape("qk")
    if m.shape("bias") != logits:
        return f"the bias {ab} broadcasts the logits {logits} up"
    return (len(ab) <= 4 and broadcasts_into(ab, logits)) or f"the bias {ab} is not (B|1, H|1, S|1, L|1)"


def _keep_ok(m: MatchView) -> Check:
    r, probs = m.shape("r"), m.shape("sm")
    if len(r) > 4 or m.shape("keep") != probs or not broadcasts_into(r, probs):
        return f"the row factor {r} broadcasts the probabilities {probs} up"
    r4 = _pad4(r)
    return (r4[1] == 1 and r4[3] == 1) or f"the factor {r} is not one per query row (B|1, 1, S|1, 1)"


def _qk_ok(lay: _Layout) -> WhereArg:
    def fn(m: MatchView) -> Check:
        if scalar_value(m, "sq") is None or scalar_value(m, "sk") is None:
            return "the factors of q and k are not constant scalars"
        return (m.shape("mq") == m.shape(lay.q_head) and m.shape("mk") == m.shape(lay.k_head)) or \
            "a factor broadcasts q or k up"

    return fn, "q and k are each multiplied by a constant scalar (with data) not broadcasting them up"


def _mha_where(v: _Variant) -> list[WhereArg]:
    where: list[WhereArg] = [(lambda m: _dims(m, v.layout) is not None,
                              "q, k, v split into the same heads (and batch) with equal head sizes for q and k")]
    if v.scale in ("mul", "div"):
        where.append(scalar_constant("s", "qk", "sc", v.scale == "div"))
    if v.scale == "qk":
        where.append(_qk_ok(v.lay))
    if v.scale:
        where.append((lambda m: f32_attr(_scale(m, v.scale)) != 0.0,
                      "the scale is not 0 in float32 (ms_mha reads 0 as 1/sqrt(hd))"))
    if v.post == "guard":
        where.append((lambda m: m.shape("guard") == m.shape("sm"), "z does not broadcast the probabilities up"))
    if v.bias:
        where.append((_bias_ok, "the attention bias broadcasts to (B|1, H|1, S, L) from the right, not the logits"))
    if v.post == "keep":
        where.append((_keep_ok, "the probabilities are multiplied by a factor per query row (B|1, 1, S|1, 1)"))
    return where


# ----------------------------------------------------------------------------- target


def _reshaped(t: TargetBuilder, ref: Ref, shape: tuple[int, ...]) -> Ref:
    return ref if t.shape(ref) == shape else t.reshape(ref, shape=shape)


def _scale(m: MatchView, scale: str) -> float:
    if scale == "fmm":
        return float(m.attr("qk", "alpha"))
    if scale == "qk":
        sq, sk = scalar_value(m, "sq"), scalar_value(m, "sk")
        assert sq is not None and sk is not None
        return sq * sk
    if scale in ("mul", "div"):
        s = scalar_value(m, "s")
        assert s is not None
        return s if scale == "mul" else 1.0 / s
    return 1.0


def _attention_bias(t: TargetBuilder, m: MatchView, s: int, length: int) -> Ref:
    """The bias as ms_mha's (B|1, H|1, S, L)."""
    b4 = _pad4(m.shape("ab"))
    ref = _reshaped(t, m.ab, b4)
    return ref if b4[2:] == (s, length) else t.expand(ref, shape=(b4[0], b4[1], s, length))


def _mha_tgt(v: _Variant) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        dims = _dims(m, v.layout)
        assert dims is not None
        b, s, length, h, hd, hdv = dims
        ins = [_reshaped(t, m.Q, (b, s, h * hd)), _reshaped(t, m.K, (b, length, h * hd)),
               _reshaped(t, m.V, (b, length, h * hdv))]
        if v.bias:
            ins.append(_attention_bias(t, m, s, length))
        att = t.ms_mha(*ins, num_heads=h, scale=f32_attr(_scale(m, v.scale)))
        if v.post == "keep":
            r4 = _pad4(m.shape("r"))
            att = t.mul(att, _reshaped(t, m.r, (r4[0], r4[2], 1)))
        return {"y": _reshaped(t, att, m.shape("ro"))}

    return tgt


# ----------------------------------------------------------------------------- examples

#: per layout, three attentions: the shapes of Q, K, V, of their reshapes rq, rk, rv and of the output's ro
_CASES: dict[str, list[tuple[tuple[int, ...], ...]]] = {
    "heads3d": [((6, 8), (6, 8), (6, 8), (6, 2, 4), (6, 2, 4), (6, 2, 4), (6, 8)),
                ((5, 12), (7, 12), (7, 6), (5, 3, 4), (7, 3, 4), (7, 3, 2), (5, 6)),
                ((2, 2, 16), (4, 16), (4, 16), (4, 4, 4), (4, 4, 4), (4, 4, 4), (2, 32))],
    "batched": [((2, 5, 8), (2, 5, 8), (2, 5, 8), (2, 5, 2, 4), (2, 5, 2, 4), (2, 5, 2, 4), (2, 5, 8)),
                ((1, 3, 12), (1, 6, 12), (1, 6, 6), (1, 3, 3, 4), (1, 6, 3, 4), (1, 6, 3, 2), (1, 3, 6)),
                ((2, 4, 16), (2, 4, 16), (8, 16), (2, 4, 4, 4), (2, 4, 4, 4), (2, 4, 4, 4), (8, 16))],
    "single": [((2, 5, 8), (2, 3, 8), (2, 3, 8), (2, 1, 5, 8), (2, 3, 1, 8), (2, 1, 3, 8), (2, 5, 8)),
               ((6, 4), (1, 4, 4), (4, 6), (1, 1, 6, 4), (1, 4, 1, 4), (1, 1, 4, 6), (6, 6)),
               ((2, 3, 6), (2, 7, 6), (2, 7, 5), (2, 1, 3, 6), (2, 7, 1, 6), (2, 1, 7, 5), (6, 5))],
}


def _case_attrs(layout: str, case: tuple[tuple[int, ...], ...]) -> dict[str, Any]:
    """The reshapes' attributes of one case (and the dynamo layouts' extra reshapes of k)."""
    rq, rk, rv, ro = case[3:]
    attrs: dict[str, Any] = {n: {"shape": sh} for n, sh in zip(("rq", "rk", "rv", "ro"), (rq, rk, rv, ro),
                                                               strict=True)}
    if layout == "dynamo":
        b, length, h, hd = rk
        attrs |= {"rk3": {"shape": (b * h, length, hd)}, "rk4": {"shape": (b, h, hd, length)}}
    if layout == "single_dynamo":
        attrs["rk"] = {"shape": (rk[0], 1, rk[3], rk[1])}
    return attrs


def _logits_shape(layout: str, case: tuple[tuple[int, ...], ...]) -> tuple[int, int, int, int]:
    """(B, H, S, L) of a case."""
    rq, rk = case[3], case[4]
    if layout == "heads3d":
        return 1, rq[1], rq[0], rk[0]
    if layout.startswith("single"):
        return rq[0], 1, rq[2], rk[1]
    return rq[0], rq[2], rq[1], rk[1]


def _row_factor(shape: tuple[int, ...]) -> np.ndarray:
    """Ones with the first query row zero (a row masked entirely)."""
    r = np.ones(shape, np.float32)
    if len(shape) >= 2 and shape[-2] > 1:
        r[..., 0, :] = 0.0
    return r


def _extras(v: _Variant, k: int, logits: tuple[int, int, int, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The types and data of example ``k``'s scale, bias, guard and row factor."""
    b, h, s, length = logits
    types: dict[str, Any] = {}
    data: dict[str, Any] = {}
    if v.scale in ("mul", "div"):
        types["s"] = [(), (1,), (1, 1)][k]
        data["s"] = np.full(types["s"], [0.5, 0.35355338, 2.0][k], np.float32)
    if v.scale == "qk":
        types |= {"sq": [(), (1,), ()][k], "sk": [(), (), (1, 1)][k]}
        data |= {"sq": np.full(types["sq"], [0.5946035, 0.5, 1.25][k], np.float32),
                 "sk": np.full(types["sk"], [0.5946035, 0.8, 0.7][k], np.float32)}
    if v.bias:  # a run-time value, a weight (a position bias), a padding mask broadcast over heads and queries
        types["ab"] = [(b, h, s, length), (1, h, s, length), (b, 1, 1, length)][k]
        if k == 1:
            data["ab"] = np.random.default_rng(k).standard_normal(types["ab"]).astype(np.float32)
    if v.post == "guard":
        types["z"] = ()
        data["z"] = np.zeros((), np.float32)
    if v.post == "keep":
        types["r"] = [(b, 1, s, 1), (1, 1, s, 1), (s, 1)][k]
        data["r"] = _row_factor(types["r"])
    return types, data


def _mha_examples(v: _Variant) -> list[Example]:
    cases = _CASES[{"dynamo": "batched", "single_dynamo": "single"}.get(v.layout, v.layout)]
    out = []
    for k, case in enumerate(cases):
        types: dict[str, Any] = {"Q": case[0], "K": case[1], "V": case[2]}
        if v.layout == "single_dynamo":
            types["K"] = (case[4][0], case[4][1], case[4][3])  # transposed as (0, 2, 1): rank 3
        more, data = _extras(v, k, _logits_shape(v.layout, case))
        attrs = _case_attrs(v.layout, case)
        if v.scale == "fmm":
            attrs["qk"] = {"alpha": [0.5, 0.25, 1.5][k]}
        out.append(ex(types | more, data=data, **attrs))
    return out


# ----------------------------------------------------------------------------- rules


def _mha_rule(v: _Variant) -> list[Rule]:
    doc = (f"Head-split attention ({v.lay.text}{_SCALE_TEXT[v.scale]}"
           + (", an additive attention bias" if v.bias else "") + f"{_POST_TEXT[v.post]}) is onnxruntime's "
           "MultiHeadAttention" + (" with that attention bias" if v.bias else "")
           + (", times the row factor" if v.post == "keep" else "")
           + (" (exact for finite activations: without a bias no probability is NaN)" if v.post == "guard" else "")
           + ".")
    args = (v.name, doc, _mha_src(v), _mha_tgt(v), _mha_examples(v), _mha_where(v))
    if not v.bias:
        return [rule(*args)]
    return list(rule(*args, commute=("bias",), mirror="_lhs", mirror_doc=doc[:-1] + "; the bias added first."))


#: the variants, in rule order: the no-bias layouts and scales of the first attention rules, then the exporters'
#: spellings (see the module docstring)
_VARIANTS: tuple[_Variant, ...] = (
    *(_Variant(layout, scale) for layout in ("heads3d", "batched") for scale in ("", "mul", "div", "fmm")),
    _Variant("batched", "qk"),
    *(_Variant("batched", scale, bias=True) for scale in ("", "mul", "div", "fmm", "qk")),
    *(_Variant("batched", scale, "keep", True) for scale in ("", "qk")),
    *(_Variant("dynamo", scale, post) for scale in ("", "qk") for post in ("", "guard")),
    *(_Variant("dynamo", scale, post, True) for scale in ("", "qk") for post in ("", "keep")),
    _Variant("single", "qk"), _Variant("single_dynamo", "qk"),
)


def rules() -> list[Rule]:
    """The ``attention`` rule set (see the module docstring): the MultiHeadAttention rules, then a decoder's attention
    with its key/value cache as GroupQueryAttention (:mod:`graphsub.rules.library.gqa`), the rotary embedding moved
    into it (:mod:`graphsub.rules.library.gqa_rotary`), fed one packed projection
    (:mod:`graphsub.rules.library.gqa_packed`), and without the row factor of a fully masked row's guard
    (:mod:`graphsub.rules.library.gqa_kept`), and its bias without the causal mask the kernel applies itself
    (:mod:`graphsub.rules.library.gqa_bias`)."""
    from graphsub.rules.library import gqa, gqa_bias, gqa_kept, gqa_packed, gqa_rotary

    return ([r for v in _VARIANTS for r in _mha_rule(v)] + gqa.rules() + gqa_rotary.rules() + gqa_packed.rules()
            + gqa_kept.rules() + gqa_bias.rules())


__all__ = ["rules"]
