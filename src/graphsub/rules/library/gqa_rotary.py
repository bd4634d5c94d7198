"""The rotary embedding of a decoder's q and k moved into its GroupQueryAttention (``ms_gqa`` with ``cos``/``sin``,
:mod:`graphsub.ops.msft_gqa`): rule ``ort_gqa_rotary`` of the ``attention`` set, applied after ``ort_gqa_*``
(:mod:`graphsub.rules.library.gqa`) made the attention a GroupQueryAttention on rows of the rotated heads.

It matches, for q and for k (with the same ``cos`` and ``sin``), Hugging Face's ``apply_rotary_pos_emb`` as both
exporters write it, between the head split and ``ms_gqa``'s rows::

    t = transpose(reshape(X, (B, S, H, hd)), (0, 2, 1, 3))
    r = add(mul(t, cos), mul(concat(neg(t[..., hd/2:]), t[..., :hd/2], axis=3), sin))
    ms_gqa(..., reshape(transpose(r, (0, 2, 1, 3)), (B, S, H*hd)), ...)

and writes ``ms_gqa`` on the projections ``X`` themselves with each token's ``cos`` and ``sin`` halves: the kernel
rotates q and k (``do_rotary``), so the rotation's seven ops per projection and both transposes go. It is exact
where ``cos`` and ``sin`` (B, 1, S, hd) repeat their first half in their second, which ``rotate_half`` embeddings
do (``emb = cat(freqs, freqs)``), and where the head size is a multiple of 16 (the only ones onnxruntime's kernel
rotates): ``where`` proves it from the graph (elementwise maps and unsqueezes of a
``concat(f, f)`` on the last axis; a weight is checked on its data). Examples are verified in float mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.msft_gqa import ROTARY_HEAD_MULTIPLE
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.gqa import causal_bias, rule
from graphsub.rules.library.kit import Check, ex
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

#: ops that keep "the last axis repeats its first half" (elementwise maps, and views that keep the last axis)
_KEEPS_HALVES = frozenset({"unsqueeze", "reshape", "expand", "cast", "neg", "identity"})
_KEEPS_HALVES_ONNX = frozenset({"Cos", "Sin", "Cast", "Identity", "Unsqueeze"})


def _rope(p: PatternBuilder, var: str, tag: str) -> PValue:
    t = p.transpose(p.reshape(p.var(var), name=f"r{tag}"), perm=(0, 2, 1, 3), name=f"t{tag}")
    rot = p.concat(p.neg(p.slice(t, name=f"hi{tag}"), name=f"n{tag}"), p.slice(t, name=f"lo{tag}"), axis=3,
                   name=f"c{tag}")
    x = p.add(p.mul(t, p.var("cos"), name=f"mc{tag}"), p.mul(rot, p.var("sin"), name=f"ms{tag}"), name=f"a{tag}")
    return p.reshape(p.transpose(x, perm=(0, 2, 1, 3), name=f"b{tag}"), name=f"o{tag}")


def _src(p: PatternBuilder) -> dict[str, PValue]:
    outs = p.op_multi("ms_gqa", _rope(p, "Q", "q"), _rope(p, "K", "k"), p.var("V"), p.var("pk"), p.var("pv"),
                      p.var("ab"), name="gqa", outputs=3)
    return {"y": outs[0], "present_k": outs[1], "present_v": outs[2]}


def _halves(g: Graph, ref: Ref, depth: int = 0) -> bool:
    """Whether the value ``ref`` repeats its last axis's first half in its second, for any run-time value."""
    node = g.nodes[ref.node]
    op = node.sig.op
    if op == "weight":
        data = g.params.get(node.sig.attr["name"])
        if data is None or data.shape[-1] % 2:
            return False
        h = data.shape[-1] // 2
        return bool(np.array_equal(data[..., :h], data[..., h:]))
    if op == "concat":
        rank = g.type_of(ref).rank
        return len(node.inputs) == 2 and node.inputs[0] == node.inputs[1] and node.sig.attr["axis"] in (-1, rank - 1)
    onnx_unary = op == "opaque" and node.sig.attr.get("op_type") in _KEEPS_HALVES_ONNX and len(node.inputs) >= 1
    if (op in _KEEPS_HALVES or onnx_unary) and depth < 8 and node.inputs and \
            g.type_of(node.inputs[0]).shape[-1:] == g.type_of(ref).shape[-1:]:
        return _halves(g, node.inputs[0], depth + 1)
    return False


def _heads(m: MatchView, tag: str) -> tuple[int, int, int, int] | None:
    """(B, S, H, hd) of one rotated projection, or None when its split, halves or merge are not the pattern's."""
    r = m.shape(f"r{tag}")
    if len(r) != 4 or r[3] % 2 or m.shape(f"o{tag}") != (r[0], r[1], r[2] * r[3]):
        return None
    b, s, h, hd = r
    x = m.shape("Q" if tag == "q" else "K")
    if len(x) != 3 or x[:2] != (b, s):
        return None
    half = hd // 2
    for name, start, ends in ((f"hi{tag}", half, lambda e: e >= hd), (f"lo{tag}", 0, lambda e: e == half)):
        a = m.attrs(name)
        steps = tuple(a.get("steps") or (1,))
        if tuple(a["axes"]) not in ((3,), (-1,)) or tuple(a["starts"]) != (start,) or steps != (1,) or \
                len(a["ends"]) != 1 or not ends(int(a["ends"][0])):
            return None
    return b, s, h, hd


def _ok(m: MatchView) -> Check:
    q, k = _heads(m, "q"), _heads(m, "k")
    if q is None or k is None or q[:2] != k[:2] or q[3] != k[3]:
        return "q and k are not split into heads of one even size, rotated by halves and merged back"
    b, s, _, hd = q
    if hd % ROTARY_HEAD_MULTIPLE:
        return f"the head size {hd} is not a multiple of {ROTARY_HEAD_MULTIPLE} (onnxruntime's kernel rotates no other)"
    if m.shape("cos") != (b, 1, s, hd) or m.shape("sin") != (b, 1, s, hd):
        return f"cos and sin are not each token's (B, 1, S, hd) = {(b, 1, s, hd)}"
    if any(m.shape(f"m{c}{t}") != m.shape(f"t{t}") for c in "cs" for t in "qk"):
        return "cos or sin broadcasts q or k up"
    if not (_halves(m.graph, m["cos"]) and _halves(m.graph, m["sin"])):
        return "cos and sin are not shown to repeat their first half (rotate_half's cat(freqs, freqs))"
    return m.graph.type_of(m["cos"]).dtype == m.graph.type_of(m["Q"]).dtype or "cos is not q's type"


def _tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
    q, k = _heads(m, "q"), _heads(m, "k")
    assert q is not None and k is not None
    b, s, n, hd = q
    half = dict(axes=(3,), starts=(0,), ends=(hd // 2,), steps=(1,))

    def rows(ref: Ref, heads: int) -> Ref:
        return ref if t.shape(ref) == (b, s, heads * hd) else t.reshape(ref, shape=(b, s, heads * hd))

    a = m.attrs("gqa")
    y, present_k, present_v = t.ms_gqa(rows(m.Q, n), rows(m.K, k[2]), m.V, m.pk, m.pv, m.ab,
                                       t.slice(m.cos, **half), t.slice(m.sin, **half), **a)
    return {"y": y, "present_k": present_k, "present_v": present_v}


#: (B, S, P, N, Nkv, hd): a decode step, a batch of chunks on a past, a prompt on an empty past
_CASES = ((1, 1, 6, 4, 2, 16), (2, 3, 5, 4, 2, 16), (1, 4, 0, 2, 2, 32))


def _examples() -> list[Example]:
    out = []
    for k, (b, s, p, n, nkv, hd) in enumerate(_CASES):
        t = p + s
        rng = np.random.default_rng(k)
        freqs = np.arange(p, p + s, dtype=np.float32)[None, :, None] * rng.uniform(0.1, 1.0, hd // 2)
        emb = np.broadcast_to(np.concatenate([freqs, freqs], -1), (b, s, hd)).reshape(b, 1, s, hd)
        types: dict[str, Any] = {"Q": (b, s, n * hd), "K": (b, s, nkv * hd), "V": (b, s, nkv * hd),
                                 "pk": (b, nkv, p, hd), "pv": (b, nkv, p, hd), "ab": (b, 1, s, t),
                                 "cos": (b, 1, s, hd), "sin": (b, 1, s, hd)}
        data = {"ab": causal_bias(b, s, t, -np.inf, k), "cos": np.cos(emb).astype(np.float32),
                "sin": np.sin(emb).astype(np.float32)}
        attrs: dict[str, Any] = {"gqa": {"num_heads": n, "kv_num_heads": nkv, "scale": [0.35, 0.5, 0.3][k]}}
        for tag, heads in (("q", n), ("k", nkv)):
            attrs |= {f"r{tag}": {"shape": (b, s, heads, hd)}, f"o{tag}": {"shape": (b, s, heads * hd)},
                      f"hi{tag}": {"axes": (3,), "starts": (hd // 2,), "ends": (hd if k else 2**63 - 1,),
                                   "steps": (1,)},
                      f"lo{tag}": {"axes": (3,), "starts": (0,), "ends": (hd // 2,), "steps": (1,)}}
        out.append(ex(types, data=data, **attrs))
    return out


def rules() -> list[Rule]:
    """``ort_gqa_rotary`` (see the module docstring)."""
    doc = ("GroupQueryAttention on rows of q and k rotated by a rotate_half embedding (each token's cos and sin, "
           "their halves equal) is GroupQueryAttention on the projections with the rotation inside (do_rotary).")
    return [rule("ort_gqa_rotary", doc, _src, _tgt, _examples(),
                 [(_ok, "q and k rotated by halves with each token's cos and sin, which repeat their first half")])]


__all__ = ["rules"]
