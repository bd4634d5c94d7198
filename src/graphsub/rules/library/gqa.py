"""A decoder's attention with its key/value cache rewritten into onnxruntime's GroupQueryAttention (``ms_gqa``,
:mod:`graphsub.ops.msft_gqa`): rules ``ort_gqa_*`` of the ``attention`` set (tags ``"ort"`` and ``"attention"``).

Each rule matches the attention of one decoder layer as both PyTorch exporters write Hugging Face's
scaled_dot_product_attention with a cache (Llama, Qwen2, Mistral: grouped-query attention)::

    present_k = concat(past_k, K, axis=2)             present_v = concat(past_v, V, axis=2)
    kr = reshape(expand(unsqueeze(present_k, 2)))     vr = reshape(expand(unsqueeze(present_v, 2)))   (repeat-kv)
    logits = (Q * sq) @ (kT * sk) + bias,  kT = kr's last two axes swapped
    y = reshape(transpose(softmax(logits) [* r] @ vr, (0, 2, 1, 3)))

with ``Q`` (B, N, S, hd) and ``K``, ``V`` (B, Nkv, S, hd) the new tokens' heads (after the rotary embedding, which
stays as the export wrote it), and writes it ``ms_gqa`` on Q, K, V transposed back to (B, S, heads*hd), the pasts and
the bias; the presents are its outputs 1 and 2. ``kT``'s layouts: ``batched`` ``transpose(kr, (0, 1, 3, 2))``
(TorchScript), ``dynamo`` ``reshape(transpose(reshape(kr, (B*N, T, hd)), (0, 2, 1)), (B, N, hd, T))``. ``_norep``:
no repeat-kv, ``kr`` and ``vr`` the presents themselves (as many key/value heads as query heads: GPT-2). ``_keep``:
the probabilities times a per-query-row factor r, what ``cpu_softmax_nan_guard_inf`` makes of the TorchScript
exporter's guard against rows masked entirely (as in :mod:`graphsub.rules.library.attention`).

GroupQueryAttention is causal: query row ``i`` sees keys ``0 .. P + i`` only. The rule fires only where the bias
already masks every later key (``where``: the bias is a weight at -inf or float32's lowest there, or ``where(c, a,
w)`` with ``w`` such a scalar and ``c`` a boolean weight that is false there, or ``And`` of such a weight with any
value -- the exporters' causal mask and padding mask), so the kernel's causal mask changes nothing. A masked logit
at float32's lowest (the dynamo exporter's) adds nothing to a softmax that has any other key, as -inf does; a query
row that attends no key at all (a padding position of a left-padded batch) is 0 in onnxruntime's kernel, where the
source averages every value (lowest logits) or is NaN (-inf logits): the rule is exact on every row that attends
some key, which a generation loop's rows and every position of an unpadded batch do. Examples are verified in float
mode at a decode step, a batch of chunks on a past and a prompt on an empty past.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.msft import f32_attr
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import Check, RuleFactory, ex, scalar_value
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort", "attention")

#: a logit at or below this adds nothing to a softmax that has another key (float32's lowest; -inf too)
_LOWEST = float(np.finfo(np.float32).min)


@dataclass(frozen=True)
class _V:
    """One rule: the transposed keys' ``layout`` (``dynamo``, ``batched``), whether a row factor follows the softmax
    (``keep``) and whether the cache is repeated over query heads (``repeat``: grouped-query attention; without it,
    as many key/value heads as query heads, GPT-2's multi-head attention with a cache)."""

    layout: str
    keep: bool
    repeat: bool = True

    @property
    def name(self) -> str:
        return (f"ort_gqa_{self.layout}{'' if self.repeat else '_norep'}_qk" + ("_keep" if self.keep else "")
                + "_ab")


def _src(v: _V) -> Callable[[PatternBuilder], dict[str, PValue]]:
    layout, keep = v.layout, v.keep

    def src(p: PatternBuilder) -> dict[str, PValue]:
        ck = p.concat(p.var("pk"), p.var("K"), axis=2, name="ck")
        cv = p.concat(p.var("pv"), p.var("V"), axis=2, name="cv")
        kr, vr = ck, cv
        if v.repeat:
            kr = p.reshape(p.expand(p.unsqueeze(ck, axes=(2,), name="uk"), name="ek"), name="rk")
            vr = p.reshape(p.expand(p.unsqueeze(cv, axes=(2,), name="uv"), name="ev"), name="rv")
        if layout == "dynamo":
            kr3 = p.reshape(kr, name="rk3") if not v.repeat else kr  # with the repeat, its reshape is merged here
            kt = p.reshape(p.transpose(kr3, perm=(0, 2, 1), name="tk"), name="rk4")
        else:
            kt = p.transpose(kr, perm=(0, 1, 3, 2), name="tk")
        q, k = p.mul(p.var("Q"), p.weight("sq"), name="mq"), p.mul(kt, p.weight("sk"), name="mk")
        logits = p.add(p.matmul(q, k, act="none", name="qk"), p.var("ab"), name="bias")
        probs = p.softmax(logits, axis=3, name="sm")
        if keep:
            probs = p.mul(probs, p.var("r"), name="keep")
        o = p.transpose(p.matmul(probs, vr, act="none", name="pv_"), perm=(0, 2, 1, 3), name="to")
        return {"y": p.reshape(o, name="ro"), "present_k": ck, "present_v": cv}

    return src


# ----------------------------------------------------------------------------- where

Dims = tuple[int, int, int, int, int, int]


def _dims(m: MatchView, v: _V) -> Dims | None:
    """(B, S, P, N, Nkv, hd) of a matched attention, or None when the shapes are not a grouped-query attention."""
    q, k, val, pk, pv = (m.shape(n) for n in ("Q", "K", "V", "pk", "pv"))
    if len(q) != 4 or len(k) != 4:
        return None
    b, n, s, hd = q
    nkv, p = k[1], pk[2]
    t = p + s
    if k != (b, nkv, s, hd) or val != k or pk != (b, nkv, p, hd) or pv != pk or n % nkv or (not v.repeat and n != nkv):
        return None
    g = n // nkv
    if v.repeat and (m.shape("ek") != (b, nkv, g, t, hd) or m.shape("ev") != (b, nkv, g, t, hd)
                     or m.shape("rv") != (b, n, t, hd)):
        return None
    k3 = "rk" if v.repeat else "rk3"
    if v.layout == "dynamo" and (m.shape(k3) != (b * n, t, hd) or m.shape("rk4") != (b, n, hd, t)):
        return None
    if v.layout == "batched" and v.repeat and m.shape("rk") != (b, n, t, hd):
        return None
    return b, s, p, n, nkv, hd


def _scales_ok(m: MatchView, layout: str) -> Check:
    sq, sk = scalar_value(m, "sq"), scalar_value(m, "sk")
    if sq is None or sk is None:
        return "the factors of q and k are not constant scalars"
    if f32_attr(sq * sk) == 0.0:
        return "the scale is 0 in float32 (ms_gqa reads 0 as 1/sqrt(hd))"
    kt = "rk4" if layout == "dynamo" else "tk"
    return (m.shape("mq") == m.shape("Q") and m.shape("mk") == m.shape(kt)) or "a factor broadcasts q or k up"


def _future(s: int, t: int) -> np.ndarray:
    """(s, t): True at the keys after each query row's position (row i is at t - s + i)."""
    return np.arange(t)[None, :] > (t - s) + np.arange(s)[:, None]


def _at(data: np.ndarray, s: int, t: int) -> np.ndarray | None:
    """``data`` broadcast over its last two axes to (s, t) (None when it does not broadcast)."""
    if data.ndim < 2:
        return None
    try:
        return np.broadcast_to(data, (*data.shape[:-2], s, t))
    except ValueError:
        return None


def _false_later(g: Graph, ref: Ref, s: int, t: int) -> bool:
    """Whether the boolean ``ref`` is false at every later key for any run-time value: a weight false there, or
    ``And`` of a value that is."""
    node = g.nodes[ref.node]
    if node.sig.op == "weight":
        data = g.params.get(node.sig.attr["name"])
        at = None if data is None or data.dtype != np.bool_ else _at(data, s, t)
        return at is not None and not at[..., _future(s, t)].any()
    if node.sig.op == "opaque" and node.sig.attr.get("op_type") == "And":
        return any(_false_later(g, r, s, t) for r in node.inputs)
    return False


def _masks_later(m: MatchView) -> Check:
    """The bias masks every later key (see the module docstring)."""
    s, t = m.shape("qk")[2:]
    g = m.graph
    node = m.producer("ab")
    if node.sig.op == "weight":
        data = m.data("ab")
        at = None if data is None else _at(np.asarray(data, np.float32), s, t)
        return (at is not None and bool((at[..., _future(s, t)] <= _LOWEST).all())) or \
            "the bias weight is not -inf (or float32's lowest) at every later key"
    if node.sig.op != "where":
        return f"the bias is a {node.sig.op}, not a causal mask (a where of a causal condition, or a weight)"
    cond, _, fill = node.inputs
    fnode = g.nodes[fill.node]
    data = g.params.get(fnode.sig.attr["name"]) if fnode.sig.op == "weight" else None
    if data is None or np.asarray(data).size != 1 or float(np.asarray(data).reshape(-1)[0]) > _LOWEST:
        return "the masked value of the bias is not -inf or float32's lowest"
    return _false_later(g, cond, s, t) or "the bias's condition is not false at every later key (not causal)"


def _bias_ok(m: MatchView) -> Check:
    ab, logits = m.shape("ab"), m.shape("qk")
    if m.shape("bias") != logits or len(ab) != 4:
        return f"the bias {ab} is not rank 4 or broadcasts the logits {logits} up"
    b, _, s, t = logits
    return (ab[0] in (1, b) and ab[1] == 1 and ab[2:] == (s, t)) or f"the bias {ab} is not (B|1, 1, S, T)"


def _keep_ok(m: MatchView) -> Check:
    r, probs = m.shape("r"), m.shape("sm")
    r4 = (1,) * (4 - len(r)) + r
    if len(r) > 4 or m.shape("keep") != probs or r4[1] != 1 or r4[3] != 1 or r4[0] not in (1, probs[0]) or \
            r4[2] not in (1, probs[2]):
        return f"the row factor {r} is not one per query row (B|1, 1, S|1, 1)"
    return True


def _where(v: _V) -> list[tuple[Callable[[MatchView], Check], str]]:
    layout, keep = v.layout, v.keep
    out = [(lambda m: _dims(m, v) is not None,
            "q split into N heads, k and v into Nkv heads dividing N, appended to pasts of one length and repeated "
            "N/Nkv times as repeat-kv does"),
           (lambda m: _scales_ok(m, layout),
            "q and k are each multiplied by a constant scalar, the product not 0 in float32"),
           (_bias_ok, "the bias is (B|1, 1, S, T)"),
           (_masks_later, "the bias masks every later key (causal): GroupQueryAttention's own mask changes nothing")]
    if keep:
        out.append((_keep_ok, "the probabilities are multiplied by a factor per query row (B|1, 1, S|1, 1)"))
    return out


# ----------------------------------------------------------------------------- target


def _tgt(v: _V) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    keep = v.keep

    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        dims = _dims(m, v)
        assert dims is not None
        b, s, _, n, nkv, hd = dims
        sq, sk = scalar_value(m, "sq"), scalar_value(m, "sk")
        assert sq is not None and sk is not None

        def rows(ref: Ref, heads: int) -> Ref:
            split = _split_rows(m, ref, (b, s, heads * hd))
            return split if split is not None else t.reshape(t.transpose(ref, perm=(0, 2, 1, 3)),
                                                             shape=(b, s, heads * hd))

        y, present_k, present_v = t.ms_gqa(rows(m.Q, n), rows(m.K, nkv), rows(m.V, nkv), m.pk, m.pv, m.ab,
                                           num_heads=n, kv_num_heads=nkv, scale=f32_attr(sq * sk))
        if keep:
            r4 = (1,) * (4 - len(m.shape("r"))) + m.shape("r")
            y = t.mul(y, t.reshape(m.r, shape=(r4[0], r4[2], 1)))
        out = y if m.shape("ro") == (b, s, n * hd) else t.reshape(y, shape=m.shape("ro"))
        return {"y": out, "present_k": present_k, "present_v": present_v}

    return tgt


def _split_rows(m: MatchView, ref: Ref, rows: tuple[int, ...]) -> Ref | None:
    """The (B, S, heads*hd) rows ``ref`` (B, heads, S, hd) was split from -- ``transpose(reshape(x, (B, S, heads, hd)),
    (0, 2, 1, 3))`` with ``x`` of shape ``rows`` --, else None: the target reads them instead of transposing back."""
    g = m.graph
    node = g.nodes[ref.node]
    if node.sig.op != "transpose" or tuple(node.sig.attr["perm"]) != (0, 2, 1, 3):
        return None
    inner = g.nodes[node.inputs[0].node]
    if inner.sig.op != "reshape" or g.type_of(inner.inputs[0]).shape != rows:
        return None
    return inner.inputs[0]


# ----------------------------------------------------------------------------- examples

#: (B, S, P, N, Nkv, hd): a decode step, a batch of chunks on a past, a prompt on an empty past (one group)
_CASES = ((1, 1, 6, 4, 2, 8), (2, 3, 5, 4, 2, 4), (1, 4, 0, 2, 2, 8))


def causal_bias(b: int, s: int, t: int, fill: float, k: int) -> np.ndarray:
    """A causal mask at ``fill`` with one more masked key in batch row 0 (padding), no row masked entirely."""
    mask = np.where(_future(s, t), fill, 0.0).astype(np.float32)
    out = np.broadcast_to(mask, (b, 1, s, t)).copy()
    if t - s >= 1:
        out[0, 0, :, 0] = fill
    out += np.where(out == 0.0, np.float32(0.1 * k), np.float32(0.0))
    return out


def _examples(v: _V) -> list[Example]:
    layout, keep = v.layout, v.keep
    out = []
    for k, (b, s, p, n, nkv, hd) in enumerate(_CASES):
        nkv = nkv if v.repeat else n
        t, g = p + s, n // nkv
        types: dict[str, Any] = {"Q": (b, n, s, hd), "K": (b, nkv, s, hd), "V": (b, nkv, s, hd),
                                 "pk": (b, nkv, p, hd), "pv": (b, nkv, p, hd), "sq": (), "sk": (),
                                 "ab": (b if k else 1, 1, s, t)}
        data: dict[str, Any] = {"sq": np.float32(0.5946035), "sk": np.float32([0.5946035, 0.8, 0.7][k]),
                                "ab": causal_bias(types["ab"][0], s, t, [-np.inf, _LOWEST, -np.inf][k], k)}
        attrs: dict[str, Any] = {"ro": {"shape": (b, s, n * hd)}}
        if v.repeat:
            attrs |= {"ek": {"shape": (b, nkv, g, t, hd)}, "ev": {"shape": (b, nkv, g, t, hd)},
                      "rv": {"shape": (b, n, t, hd)}}
        if layout == "dynamo":
            attrs |= {"rk" if v.repeat else "rk3": {"shape": (b * n, t, hd)}, "rk4": {"shape": (b, n, hd, t)}}
        elif v.repeat:
            attrs["rk"] = {"shape": (b, n, t, hd)}
        if keep:
            types["r"] = [(b, 1, s, 1), (1, 1, s, 1), (s, 1)][k]
            r = np.ones(types["r"], np.float32)
            r.reshape(-1)[0] = 0.0
            data["r"] = r
        out.append(ex(types, data=data, **attrs))
    return out


def _rule(v: _V) -> Rule:
    layout, keep = v.layout, v.keep
    doc = (f"A decoder layer's attention with its key/value cache ({layout} layout of the transposed keys, "
           + ("the cache repeated over query heads, " if v.repeat else "as many key/value heads as query heads, ")
           + "q and k "
           "each times a constant, a causal attention bias" + (", probabilities times a row factor" if keep else "")
           + ") is onnxruntime's GroupQueryAttention with that bias, the cache concatenation inside"
           + (", times the row factor" if keep else "") + " (exact on every query row that attends some key).")
    return rule(v.name, doc, _src(v), _tgt(v), _examples(v), _where(v))


def rules() -> list[Rule]:
    """The ``ort_gqa_*`` rules (see the module docstring)."""
    return [_rule(_V(layout, keep, repeat)) for repeat in (True, False) for layout in ("dynamo", "batched")
            for keep in (False, True)]


__all__ = ["rules"]
