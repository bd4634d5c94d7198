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
``concat(f, f)`` on the last axis; a weight is checked on its data). The kernel's halves are then those maps on ``f``
(:func:`first_half`: no concatenation and no slice of it run), or a weight's first half. Examples are verified in
float mode.

``ort_gqa_rotary_kernel`` matches the same where q and k were rotated by onnxruntime's RotaryEmbedding already
(``ms_rotary`` by halves, :mod:`graphsub.rules.library.rotary`, with one ``cos`` and ``sin``), so that the kernel's
rotation moves into GroupQueryAttention whichever rule a search applies first.
"""

from __future__ import annotations

from collections.abc import Callable
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
#: ONNX ops that draw a new value each run: two of them on one input are not one value
_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "Dropout"})


def _rope(p: PatternBuilder, var: str, tag: str) -> PValue:
    t = p.transpose(p.reshape(p.var(var), name=f"r{tag}"), perm=(0, 2, 1, 3), name=f"t{tag}")
    rot = p.concat(p.neg(p.slice(t, name=f"hi{tag}"), name=f"n{tag}"), p.slice(t, name=f"lo{tag}"), axis=3,
                   name=f"c{tag}")
    x = p.add(p.mul(t, p.var("cos"), name=f"mc{tag}"), p.mul(rot, p.var("sin"), name=f"ms{tag}"), name=f"a{tag}")
    return p.reshape(p.transpose(x, perm=(0, 2, 1, 3), name=f"b{tag}"), name=f"o{tag}")


def _kernel_rope(p: PatternBuilder, var: str, tag: str) -> PValue:
    """The head split, onnxruntime's RotaryEmbedding (``ms_rotary`` by halves, :mod:`graphsub.rules.library.rotary`)
    and the merge back to rows: what ``_rope`` is once ``ort_rotary_half`` has rewritten it."""
    t = p.transpose(p.reshape(p.var(var), name=f"r{tag}"), perm=(0, 2, 1, 3), name=f"t{tag}")
    x = p.ms_rotary(t, p.var(f"cos{tag}"), p.var(f"sin{tag}"), interleaved=0, name=f"k{tag}")
    return p.reshape(p.transpose(x, perm=(0, 2, 1, 3), name=f"b{tag}"), name=f"o{tag}")


def _gqa_on(p: PatternBuilder, rope: Callable[[PatternBuilder, str, str], PValue]) -> dict[str, PValue]:
    outs = p.op_multi("ms_gqa", rope(p, "Q", "q"), rope(p, "K", "k"), p.var("V"), p.var("pk"), p.var("pv"),
                      p.var("ab"), name="gqa", outputs=3)
    return {"y": outs[0], "present_k": outs[1], "present_v": outs[2]}


def _src(p: PatternBuilder) -> dict[str, PValue]:
    return _gqa_on(p, _rope)


def _kernel_src(p: PatternBuilder) -> dict[str, PValue]:
    return _gqa_on(p, _kernel_rope)


def halves(g: Graph, ref: Ref, depth: int = 0) -> bool:
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
        return halves(g, node.inputs[0], depth + 1)
    return False


def first_half(t: TargetBuilder, g: Graph, ref: Ref, half: int, depth: int = 0) -> Ref | None:
    """The first ``half`` of ``ref``'s last axis computed without a slice, where ``ref`` is elementwise maps and
    unsqueezes of ``concat(f, f)`` on the last axis (the exporters' ``cos(cat(freqs, freqs))``, which :func:`halves`
    proves repeats its halves): the same maps on ``f``; None for any other ``ref`` (a weight: slice it)."""
    node = g.nodes[ref.node]
    op = node.sig.op
    if op == "concat":
        f = node.inputs[0] if len(node.inputs) == 2 and node.inputs[0] == node.inputs[1] else None
        rank = g.type_of(ref).rank
        return f if f is not None and node.sig.attr["axis"] in (-1, rank - 1) and \
            g.type_of(f).shape[-1:] == (half,) else None
    if depth >= 8 or len(node.inputs) != 1 or g.type_of(node.inputs[0]).shape[-1:] != g.type_of(ref).shape[-1:]:
        return None
    onnx_unary = op == "opaque" and node.sig.attr.get("op_type") in _KEEPS_HALVES_ONNX - {"Unsqueeze"} and \
        tuple(node.sig.attr.get("input_slots", ())) == (0,) and not node.sig.attr.get("captures")
    if op not in ("unsqueeze", "cast", "neg", "identity") and not onnx_unary:
        return None
    inner = first_half(t, g, node.inputs[0], half, depth + 1)
    if inner is None:
        return None
    if not onnx_unary:
        return t.copy(node, inner)
    attrs = dict(node.sig.attrs)
    ((shape, dtype),) = attrs["out_types"]
    return t.op("opaque", inner, **(attrs | {"out_types": (((*tuple(shape)[:-1], half), dtype),)}))


def _split(m: MatchView, tag: str) -> tuple[int, int, int, int] | None:
    """(B, S, H, hd) of one projection split into heads and merged back, or None when its shapes are not the
    pattern's."""
    r = m.shape(f"r{tag}")
    if len(r) != 4 or r[3] % 2 or m.shape(f"o{tag}") != (r[0], r[1], r[2] * r[3]):
        return None
    b, s, h, hd = r
    x = m.shape("Q" if tag == "q" else "K")
    return (b, s, h, hd) if len(x) == 3 and x[:2] == (b, s) else None


def _heads(m: MatchView, tag: str) -> tuple[int, int, int, int] | None:
    """(B, S, H, hd) of one rotated projection, or None when its split, halves or merge are not the pattern's."""
    heads = _split(m, tag)
    if heads is None:
        return None
    hd = heads[3]
    half = hd // 2
    for name, start, ends in ((f"hi{tag}", half, lambda e: e >= hd), (f"lo{tag}", 0, lambda e: e == half)):
        a = m.attrs(name)
        steps = tuple(a.get("steps") or (1,))
        if tuple(a["axes"]) not in ((3,), (-1,)) or tuple(a["starts"]) != (start,) or steps != (1,) or \
                len(a["ends"]) != 1 or not ends(int(a["ends"][0])):
            return None
    return heads


def _sized(m: MatchView, heads: Callable[[MatchView, str], tuple[int, int, int, int] | None]
           ) -> tuple[tuple[int, int, int, int] | None, Check]:
    """q's (B, S, H, hd) by ``heads`` and whether q and k have one batch, length and even head size the kernel
    rotates."""
    q, k = heads(m, "q"), heads(m, "k")
    if q is None or k is None or q[:2] != k[:2] or q[3] != k[3]:
        return q, "q and k are not split into heads of one even size, rotated by halves and merged back"
    hd = q[3]
    return q, hd % ROTARY_HEAD_MULTIPLE == 0 or \
        f"the head size {hd} is not a multiple of {ROTARY_HEAD_MULTIPLE} (onnxruntime's kernel rotates no other)"


def _ok(m: MatchView) -> Check:
    q, sizes = _sized(m, _heads)
    if sizes is not True or q is None:
        return sizes
    b, s, _, hd = q
    if m.shape("cos") != (b, 1, s, hd) or m.shape("sin") != (b, 1, s, hd):
        return f"cos and sin are not each token's (B, 1, S, hd) = {(b, 1, s, hd)}"
    if any(m.shape(f"m{c}{t}") != m.shape(f"t{t}") for c in "cs" for t in "qk"):
        return "cos or sin broadcasts q or k up"
    if not (halves(m.graph, m["cos"]) and halves(m.graph, m["sin"])):
        return "cos and sin are not shown to repeat their first half (rotate_half's cat(freqs, freqs))"
    return m.graph.type_of(m["cos"]).dtype == m.graph.type_of(m["Q"]).dtype or "cos is not q's type"


def _same(g: Graph, a: Ref, b: Ref, depth: int = 0) -> bool:
    """Whether ``a`` and ``b`` are one value: the same, one op with the same attributes on inputs that are one value
    (each rotation's own slice of one cos, or its own maps of one angle: :func:`first_half`), or weights of equal
    data."""
    if a == b:
        return True
    na, nb = g.nodes[a.node], g.nodes[b.node]
    if na.sig.op == "weight" == nb.sig.op:
        da, db = g.params.get(na.sig.attr["name"]), g.params.get(nb.sig.attr["name"])
        return da is not None and db is not None and bool(np.array_equal(da, db))
    if na.sig.op == "opaque" and na.sig.attr.get("op_type") in _RANDOM:
        return False
    return a.index == b.index and na.sig == nb.sig and len(na.inputs) == len(nb.inputs) and depth < 8 and \
        all(_same(g, x, y, depth + 1) for x, y in zip(na.inputs, nb.inputs, strict=True))


def _kernel_ok(m: MatchView) -> Check:
    q, sizes = _sized(m, _split)
    if sizes is not True or q is None:
        return sizes
    b, s, _, hd = q
    if not (_same(m.graph, m["cosq"], m["cosk"]) and _same(m.graph, m["sinq"], m["sink"])):
        return "q and k are not rotated by one cos and sin"
    return m.shape("cosq") == (b, 1, s, hd // 2) or f"cos and sin are not each token's (B, 1, S, hd/2) = " \
                                                    f"{(b, 1, s, hd // 2)}"


def _gqa_tgt(t: TargetBuilder, m: MatchView, q: tuple[int, int, int, int], nkv: int, cos: Ref,
             sin: Ref) -> dict[str, Ref]:
    b, s, n, hd = q

    def rows(ref: Ref, heads: int) -> Ref:
        return ref if t.shape(ref) == (b, s, heads * hd) else t.reshape(ref, shape=(b, s, heads * hd))

    y, present_k, present_v = t.ms_gqa(rows(m.Q, n), rows(m.K, nkv), m.V, m.pk, m.pv, m.ab, cos, sin,
                                       **m.attrs("gqa"))
    return {"y": y, "present_k": present_k, "present_v": present_v}


def _tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
    q, k = _heads(m, "q"), _heads(m, "k")
    assert q is not None and k is not None
    return _gqa_tgt(t, m, q, k[2], *(halved(t, m.graph, m[c], q[3] // 2) for c in ("cos", "sin")))


def halved(t: TargetBuilder, g: Graph, ref: Ref, half: int) -> Ref:
    """The first ``half`` of ``ref``'s last axis (rank 4): :func:`first_half`, else a slice."""
    got = first_half(t, g, ref, half)
    return got if got is not None else t.slice(ref, axes=(3,), starts=(0,), ends=(half,), steps=(1,))


def _kernel_tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
    q, k = _split(m, "q"), _split(m, "k")
    assert q is not None and k is not None
    return _gqa_tgt(t, m, q, k[2], m.cosq, m.sinq)


#: (B, S, P, N, Nkv, hd): a decode step, a batch of chunks on a past, a prompt on an empty past
_CASES = ((1, 1, 6, 4, 2, 16), (2, 3, 5, 4, 2, 16), (1, 4, 0, 2, 2, 32))


def _examples(kernel: bool = False) -> list[Example]:
    """The rule's examples; ``kernel``: the rotation already onnxruntime's (cos and sin their halves, any values)."""
    out = []
    for k, (b, s, p, n, nkv, hd) in enumerate(_CASES):
        t = p + s
        rng = np.random.default_rng(k)
        freqs = np.arange(p, p + s, dtype=np.float32)[None, :, None] * rng.uniform(0.1, 1.0, hd // 2)
        emb = np.broadcast_to(np.concatenate([freqs, freqs], -1), (b, s, hd)).reshape(b, 1, s, hd)
        width = hd // 2 if kernel else hd
        types: dict[str, Any] = {"Q": (b, s, n * hd), "K": (b, s, nkv * hd), "V": (b, s, nkv * hd),
                                 "pk": (b, nkv, p, hd), "pv": (b, nkv, p, hd), "ab": (b, 1, s, t),
                                 **({f"{c}{tag}": (b, 1, s, width) for c in ("cos", "sin") for tag in "qk"} if kernel
                                    else {"cos": (b, 1, s, width), "sin": (b, 1, s, width)})}
        angles = rng.uniform(0, 6, (b, 1, s, hd // 2))  # the kernel's halves: any angles
        data = {"ab": causal_bias(b, s, t, -np.inf, k)} | ({
            f"{c}{tag}": f(angles).astype(np.float32) for c, f in (("cos", np.cos), ("sin", np.sin)) for tag in "qk"}
            if kernel else {"cos": np.cos(emb).astype(np.float32), "sin": np.sin(emb).astype(np.float32)})
        attrs: dict[str, Any] = {"gqa": {"num_heads": n, "kv_num_heads": nkv, "scale": [0.35, 0.5, 0.3][k]}}
        for tag, heads in (("q", n), ("k", nkv)):
            attrs |= {f"r{tag}": {"shape": (b, s, heads, hd)}, f"o{tag}": {"shape": (b, s, heads * hd)}}
            if not kernel:
                attrs |= {f"hi{tag}": {"axes": (3,), "starts": (hd // 2,), "ends": (hd if k else 2**63 - 1,),
                                       "steps": (1,)},
                          f"lo{tag}": {"axes": (3,), "starts": (0,), "ends": (hd // 2,), "steps": (1,)}}
        out.append(ex(types, data=data, **attrs))
    return out


def rules() -> list[Rule]:
    """``ort_gqa_rotary`` and ``ort_gqa_rotary_kernel`` (see the module docstring)."""
    doc = ("GroupQueryAttention on rows of q and k rotated by a rotate_half embedding (each token's cos and sin, "
           "their halves equal) is GroupQueryAttention on the projections with the rotation inside (do_rotary).")
    kernel = ("GroupQueryAttention on rows of q and k rotated by onnxruntime's RotaryEmbedding by halves (one cos and "
              "sin for both) is GroupQueryAttention on the projections with the rotation inside (do_rotary).")
    return [rule("ort_gqa_rotary", doc, _src, _tgt, _examples(),
                 [(_ok, "q and k rotated by halves with each token's cos and sin, which repeat their first half")]),
            rule("ort_gqa_rotary_kernel", kernel, _kernel_src, _kernel_tgt, _examples(kernel=True),
                 [(_kernel_ok, "q and k rotated by RotaryEmbedding with one cos and sin of each token's halves")])]


__all__ = ["first_half", "halved", "halves", "rules"]
