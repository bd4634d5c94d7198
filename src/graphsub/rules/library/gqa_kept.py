"""The TorchScript exporter's guard against fully masked rows, dropped after GroupQueryAttention: rules
``ort_gqa_kept_rows*`` of the ``attention`` set (tags ``"ort"`` and ``"attention"``).

``cpu_softmax_nan_guard_inf`` spells the exporter's guard (``where(isnan(p), 0, p)`` after a softmax over a -inf mask)
as the probabilities times ``keep``, 1 for a query row that keeps some key and 0 for a row masked entirely, and
``ort_gqa_*_keep_ab`` carries that factor past GroupQueryAttention: ``y * reshape(keep)``. onnxruntime's kernel (and
``ms_gqa``) already gives 0 for a row that sees no key -- every logit at float32's lowest or -inf, or after the
row's position --, so the product is ``y`` wherever ``keep`` is 1 on every row with a key kept by the bias::

    mul(ms_gqa(..., ab, ...)[0], r)  =>  ms_gqa(..., ab, ...)[0]

The where-clause proves that of ``r`` and the bias ``ab`` from the graph: either ``ab = where(c, a, w)`` with ``w`` a
scalar at or below float32's lowest and ``r`` a reshape of ``clip(reduce_sum(where(c, 1, 0), last axis), 0, 1)`` on
the same ``c`` (what the clean-up writes: a row whose ``c`` is false everywhere has every logit masked, and ``r`` is 1
on every other row; ``ab`` may also be ``expand(where(x, a, w))`` with ``c = And(causal, x)``, the bias once
:mod:`graphsub.rules.library.gqa_bias` left the causal mask to the kernel, which keeps the same keys), or both are
weights and ``r`` is 1 on every row where ``ab`` keeps a key. One rule per kernel
form: ``ms_gqa`` and ``ms_gqa_packed``, each with and without the rotary embedding inside. A row factor computed
once per step then no longer runs in every layer, nor does the reduction behind it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.msft_gqa import OP, PACKED
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.gqa_bias import causal_part, gqa_call, gqa_node, gqa_types
from graphsub.rules.library.kit import Check, RuleFactory, ex
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort", "attention")

#: a logit at or below this is masked by onnxruntime's kernel (float32's lowest; -inf too)
_LOWEST = float(np.finfo(np.float32).min)


def _src(op: str, rotary: bool) -> Callable[[PatternBuilder], dict[str, PValue]]:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        outs = gqa_node(p, op, rotary)
        return {"y": p.mul(outs[0], p.var("r"), name="keep"), "present_k": outs[1], "present_v": outs[2]}

    return src


def _tgt(op: str, rotary: bool) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        y, pk, pv = gqa_call(t, m, op, rotary, m["ab"])
        return {"y": y, "present_k": pk, "present_v": pv}

    return tgt


# ----------------------------------------------------------------------------- where


def _scalar(g: Graph, ref: Ref) -> float | None:
    """The value of a one-element weight, else None."""
    node = g.nodes[ref.node]
    data = g.params.get(node.sig.attr["name"]) if node.sig.op == "weight" else None
    return None if data is None or np.asarray(data).size != 1 else float(np.asarray(data).reshape(-1)[0])


def _through_views(g: Graph, ref: Ref) -> Ref:
    """``ref`` past the reshapes that produce it."""
    while g.nodes[ref.node].sig.op == "reshape":
        ref = g.nodes[ref.node].inputs[0]
    return ref


def _kept_rows_of(g: Graph, ref: Ref) -> Ref | None:
    """``c`` when ``ref`` is ``clip(reduce_sum(where(c, 1, 0), last axis, keepdims), 0, 1)``, else None."""
    clip = g.nodes[ref.node]
    if clip.sig.op != "clip" or (clip.sig.attr.get("min"), clip.sig.attr.get("max")) != (0.0, 1.0):
        return None
    red = g.nodes[clip.inputs[0].node]
    if red.sig.op != "reduce_sum" or not red.sig.attr.get("keepdims", True):
        return None
    rank = len(g.type_of(red.inputs[0]).shape)
    if tuple(a % rank for a in red.sig.attr.get("axes", ())) != (rank - 1,):
        return None
    kept = g.nodes[red.inputs[0].node]
    if kept.sig.op != "where" or [_scalar(g, r) for r in kept.inputs[1:]] != [1.0, 0.0]:
        return None
    return kept.inputs[0]


def _graph_form(m: MatchView) -> Check:
    g = m.graph
    ab = g.nodes[m["ab"].node]
    if ab.sig.op == "expand":  # the bias's causal half left to the kernel (graphsub.rules.library.gqa_bias)
        ab = g.nodes[ab.inputs[0].node]
    if ab.sig.op != "where":
        return f"the bias is a {ab.sig.op}, neither where(c, a, lowest) nor a weight"
    fill = _scalar(g, ab.inputs[2])
    if fill is None or fill > _LOWEST:
        return "the bias's masked value is not a scalar at or below float32's lowest"
    kept = _kept_rows_of(g, _through_views(g, m["r"]))
    if kept is None:
        return "the row factor is not clip(reduce_sum(where(c, 1, 0), last axis), 0, 1)"
    if kept == ab.inputs[0]:
        return True
    s, t = m.shape("ab")[2:]
    return causal_part(g, kept, s, t, exact=True) == ab.inputs[0] or \
        "the row factor reduces another condition than the bias's (or that and exactly the causal mask)"


def _one_on_kept_rows(m: MatchView) -> Check:
    ab, r = m.data("ab"), m.data("r")
    if ab is None or r is None:
        return _graph_form(m)
    rows = np.asarray(ab, np.float32).max(axis=-1) > _LOWEST  # (B|1, 1, S): a row with a key kept
    b, s = rows.shape[0], rows.shape[-1]
    r = np.asarray(r, np.float32)
    try:
        r_rows = np.broadcast_to(r.reshape(r.shape[0] if r.ndim == 3 else 1, -1), (b, s))
    except ValueError:
        return f"the row factor {r.shape} is not one per query row"
    return bool((r_rows[rows.reshape(b, s)] == 1.0).all()) or "the row factor is not 1 on a row with a key kept"


def _shapes(m: MatchView) -> Check:
    y, r = m.shape("keep"), m.shape("r")
    b, s = y[0], y[1]
    if m.shape("gqa") != y:
        return f"the row factor {r} broadcasts the output {m.shape('gqa')} up"
    if len(r) != 3 or r[0] not in (1, b) or r[1:] != (s, 1):
        return f"the row factor {r} is not (B|1, S, 1)"
    return True


# ----------------------------------------------------------------------------- examples

#: (B, S, P, N, Nkv, hd): a decode step on a past, a batch of chunks on a past, a prompt on an empty past
_CASES = ((1, 1, 6, 4, 2, 16), (2, 3, 5, 4, 2, 16), (1, 4, 0, 2, 2, 32))


def _examples(op: str, rotary: bool) -> list[Example]:
    out = []
    for k, (b, s, p, n, nkv, hd) in enumerate(_CASES):
        t = p + s
        rng = np.random.default_rng(k)
        ab = np.where(rng.random((b, 1, s, t)) < 0.3, np.float32(_LOWEST), np.float32(0.0)).astype(np.float32)
        ab[0, 0, 0, :] = [_LOWEST, -np.inf, _LOWEST][k]  # a row masked entirely
        ab[-1, 0, -1, 0] = 0.0  # and one that keeps a key
        r = (ab.max(axis=-1) > _LOWEST).astype(np.float32).reshape(b, s, 1)
        types = gqa_types(op, rotary, b, s, p, n, nkv, hd) | {"ab": (b, 1, s, t), "r": (b, s, 1)}
        out.append(ex(types, data={"ab": ab, "r": r},
                      gqa={"num_heads": n, "kv_num_heads": nkv, "scale": [0.35, 0.5, 0.3][k]}))
    return out


def _rule(op: str, rotary: bool) -> Rule:
    name = "ort_gqa_kept_rows" + ("_packed" if op == PACKED else "") + ("_rotary" if rotary else "")
    doc = (f"GroupQueryAttention{' on a packed projection' if op == PACKED else ''}"
           f"{' with the rotary embedding inside' if rotary else ''} times a row factor that is 1 on every query row "
           "with a key kept by its bias is GroupQueryAttention alone: the kernel gives 0 for a row that keeps no "
           "key (the TorchScript exporter's guard against fully masked rows, done by the kernel).")
    return rule(name, doc, _src(op, rotary), _tgt(op, rotary), _examples(op, rotary),
                [(_shapes, "the row factor is one per query row (B|1, S, 1)"),
                 (_one_on_kept_rows, "the row factor is 1 on every row the bias keeps a key of (proven from the graph: "
                                "the bias is where(c, a, lowest) and the factor clip(sum(where(c, 1, 0)), 0, 1))")])


def rules() -> list[Rule]:
    """The ``ort_gqa_kept_rows*`` rules (see the module docstring)."""
    return [_rule(op, rotary) for op in (OP, PACKED) for rotary in (True, False)]


__all__ = ["rules"]
