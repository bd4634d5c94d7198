"""A decoder's rotary position embedding, as the PyTorch exporters write it, rewritten into onnxruntime's
RotaryEmbedding kernel (``ms_rotary``, :mod:`graphsub.ops.msft_rotary`): rule set ``decoder`` (tags ``"ort"``,
``"decoder"``), for q and k where the attention is not GroupQueryAttention (which takes the rotation inside,
:mod:`graphsub.rules.library.gqa_rotary`, also from this kernel: ``ort_gqa_rotary_kernel``).

* ``ort_rotary_half`` -- Hugging Face's ``rotate_half`` (Llama, Qwen2, Mistral, GPT-NeoX)::

      add(mul(x, cos), mul(concat(neg(x[..., hd/2:]), x[..., :hd/2], axis=-1), sin))

  exact where ``cos`` and ``sin`` repeat their first half in their second (``emb = cat(freqs, freqs)``);
* ``ort_rotary_interleaved`` -- GPT-J's ``rotate_every_two`` (GPT-J, CodeGen)::

      add(mul(x, cos), mul(reshape(concat(unsqueeze(neg(x[..., 1::2]), -1), unsqueeze(x[..., ::2], -1), axis=-1)), sin))

  exact where ``cos`` and ``sin`` repeat each element once (``repeat_interleave(freqs, 2)``).

``x`` holds heads as (B, N, S, hd) with ``cos``, ``sin`` of (B, 1, S, hd) (Llama's layout), or as (B, S, N, hd) with
(B, S, 1, hd) (GPT-J's, which rotates before its head transpose: the kernel's input and output are transposed, and
the output's transpose cancels the model's own). Each token's angles go to the kernel as rows (its half of ``cos``,
or its even elements), so any position ids stay exact. The preconditions on ``cos`` and ``sin`` are proven from the
graph (elementwise maps and views of a ``concat(f, f)``, an interleaving ``expand`` or a stack of one value; a weight
is checked on its data); examples are verified in float mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.gqa_rotary import halved, halves
from graphsub.rules.library.kit import Check, RuleFactory, ex
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort", "decoder")

#: views and elementwise maps that keep "each element repeated once on the last axis"
_KEEPS_PAIRS = frozenset({"unsqueeze", "reshape", "expand", "cast", "neg", "identity"})
_KEEPS_PAIRS_ONNX = frozenset({"Cos", "Sin", "Cast", "Identity", "Unsqueeze"})
_SWAP = (0, 2, 1, 3)


def _rotated(p: PatternBuilder, rot: PValue, x: PValue) -> dict[str, PValue]:
    return {"y": p.add(p.mul(x, p.var("cos"), name="mc"), p.mul(rot, p.var("sin"), name="ms"), name="a")}


def _half_src(p: PatternBuilder) -> dict[str, PValue]:
    x = p.var("x")
    return _rotated(p, p.concat(p.neg(p.slice(x, name="hi"), name="n"), p.slice(x, name="lo"), name="c"), x)


def _pairs_src(p: PatternBuilder) -> dict[str, PValue]:
    x = p.var("x")
    odd = p.unsqueeze(p.neg(p.slice(x, name="odd"), name="n"), name="uo")
    even = p.unsqueeze(p.slice(x, name="even"), name="ue")
    return _rotated(p, p.reshape(p.concat(odd, even, name="c"), name="flat"), x)


def pairs(g: Graph, ref: Ref, depth: int = 0) -> bool:
    """Whether the value ``ref`` repeats each element of its last axis once (``[a, a, b, b, ...]``), for any
    run-time value."""
    node = g.nodes[ref.node]
    op = node.sig.op
    shape = g.type_of(ref).shape
    if op == "weight":
        data = g.params.get(node.sig.attr["name"])
        return data is not None and data.shape[-1] % 2 == 0 and bool(np.array_equal(data[..., 0::2],
                                                                                      data[..., 1::2]))
    if op == "reshape" and node.inputs:
        src = g.type_of(node.inputs[0]).shape
        # its last axis is whole (..., h, 2) blocks of the input, row-major, whatever it does to the others
        if len(src) >= 2 and src[-1] == 2 and src[-2] * 2 == shape[-1]:
            return _doubled(g, node.inputs[0])
    onnx_unary = op == "opaque" and node.sig.attr.get("op_type") in _KEEPS_PAIRS_ONNX and len(node.inputs) >= 1
    if (op in _KEEPS_PAIRS or onnx_unary) and depth < 8 and node.inputs and \
            g.type_of(node.inputs[0]).shape[-1:] == shape[-1:]:
        return pairs(g, node.inputs[0], depth + 1)
    return False


def _doubled(g: Graph, ref: Ref) -> bool:
    """Whether ``ref`` (..., h, 2) holds one value twice on its last axis: an ``expand`` of a (..., h, 1), or a
    ``concat`` of one (..., h, 1) value with itself."""
    node = g.nodes[ref.node]
    rank = g.type_of(ref).rank
    if node.sig.op == "expand":
        return g.type_of(node.inputs[0]).shape[-1:] == (1,)
    return node.sig.op == "concat" and len(node.inputs) == 2 and node.inputs[0] == node.inputs[1] and \
        node.sig.attr["axis"] in (-1, rank - 1) and g.type_of(node.inputs[0]).shape[-1:] == (1,)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _slices_ok(m: MatchView, specs: tuple[tuple[str, int, int, Callable[[int], bool]], ...]) -> bool:
    """Whether each named slice of ``x`` is on the last axis from ``start`` with ``step`` and its end passes."""
    for name, start, step, end_ok in specs:
        a = m.attrs(name)
        steps = tuple(a.get("steps") or (1,))
        if len(a["axes"]) != 1 or _axis(int(a["axes"][0]), 4) != 3 or tuple(a["starts"]) != (start,) or \
                steps != (step,) or len(a["ends"]) != 1 or not end_ok(int(a["ends"][0])):
            return False
    return True


def _heads_axis(m: MatchView) -> int | None:
    """1 when ``x`` is (B, N, S, hd) and cos, sin (B, 1, S, hd); 2 when (B, S, N, hd) and (B, S, 1, hd); else None."""
    x = m.shape("x")
    if len(x) != 4 or x[3] % 2 or m.shape("sin") != m.shape("cos"):
        return None
    for axis in (1, 2):
        if m.shape("cos") == tuple(1 if i == axis else d for i, d in enumerate(x)):
            return axis
    return None


def _common(m: MatchView, repeats: Callable[[Graph, Ref], bool], what: str) -> Check:
    if _heads_axis(m) is None:
        return "x is not (B, N, S, hd) with cos, sin (B, 1, S, hd), nor (B, S, N, hd) with (B, S, 1, hd)"
    if m.shape("mc") != m.shape("x") or m.shape("ms") != m.shape("x"):
        return "cos or sin broadcasts x up"
    if not (repeats(m.graph, m["cos"]) and repeats(m.graph, m["sin"])):
        return f"cos and sin are not shown to {what}"
    return m.graph.type_of(m["cos"]).dtype == m.graph.type_of(m["x"]).dtype or "cos is not x's type"


def _half_ok(m: MatchView) -> Check:
    hd = m.shape("x")[3] if len(m.shape("x")) == 4 else 0
    if not hd or not _slices_ok(m, (("hi", hd // 2, 1, lambda e: e >= hd), ("lo", 0, 1, lambda e: e == hd // 2))) \
            or _axis(m.attrs("c")["axis"], 4) != 3:
        return "x is not rotated by halves of its last axis"
    return _common(m, halves, "repeat their first half (rotate_half's cat(freqs, freqs))")


def _pairs_ok(m: MatchView) -> Check:
    hd = m.shape("x")[3] if len(m.shape("x")) == 4 else 0
    if not hd or not _slices_ok(m, (("odd", 1, 2, lambda e: e >= hd), ("even", 0, 2, lambda e: e >= hd - 1))) or \
            any(tuple(_axis(a, 5) for a in m.attrs(u)["axes"]) != (4,) for u in ("uo", "ue")) or \
            _axis(m.attrs("c")["axis"], 5) != 4 or m.shape("flat") != m.shape("x"):
        return "x is not rotated by its even and odd elements stacked back"
    return _common(m, pairs, "repeat each element (repeat_interleave(freqs, 2))")


def _target(interleaved: int) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        axis = _heads_axis(m)
        hd = m.shape("x")[3]
        if interleaved:
            own = dict(axes=(3,), starts=(0,), ends=(hd,), steps=(2,))
            cos, sin = t.slice(m.cos, **own), t.slice(m.sin, **own)
        else:  # the halves as computed (cos of the angles, not of them twice then sliced) where the graph shows it
            cos, sin = (halved(t, m.graph, m[c], hd // 2) for c in ("cos", "sin"))
        if axis == 1:
            return {"y": t.ms_rotary(m.x, cos, sin, interleaved=interleaved)}
        x, cos, sin = (t.transpose(v, perm=_SWAP) for v in (m.x, cos, sin))
        return {"y": t.transpose(t.ms_rotary(x, cos, sin, interleaved=interleaved), perm=_SWAP)}

    return tgt


#: (x's shape, heads axis): a decode step, a batch of prompts, GPT-J's layout, head size 8
_CASES = (((1, 4, 1, 16), 1), ((2, 3, 5, 16), 1), ((2, 5, 3, 16), 2), ((1, 2, 3, 8), 1))


def _angles(shape: tuple[int, ...], axis: int, interleaved: bool, k: int) -> tuple[np.ndarray, np.ndarray]:
    b, hd = shape[0], shape[3]
    s = shape[2] if axis == 1 else shape[1]
    rng = np.random.default_rng(k)
    freqs = np.arange(3, 3 + s, dtype=np.float32)[None, :, None] * rng.uniform(0.1, 1.0, (b, 1, hd // 2))
    emb = np.repeat(freqs, 2, axis=-1) if interleaved else np.concatenate([freqs, freqs], -1)
    emb = emb[:, None] if axis == 1 else emb[:, :, None]
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _examples(interleaved: bool) -> list[Example]:
    out = []
    for k, (shape, axis) in enumerate(_CASES):
        hd = shape[3]
        cos, sin = _angles(shape, axis, interleaved, k)
        types: dict[str, Any] = {"x": shape, "cos": cos.shape, "sin": sin.shape}
        if interleaved:
            attrs: dict[str, Any] = {
                "odd": {"axes": (3,), "starts": (1,), "ends": (2**63 - 1 if k else hd,), "steps": (2,)},
                "even": {"axes": (-1,), "starts": (0,), "ends": (2**63 - 1,), "steps": (2,)},
                "uo": {"axes": (4,)}, "ue": {"axes": (-1,)}, "c": {"axis": -1 if k % 2 else 4},
                "flat": {"shape": shape}}
        else:
            attrs = {"hi": {"axes": (3,), "starts": (hd // 2,), "ends": (hd if k else 2**63 - 1,), "steps": (1,)},
                     "lo": {"axes": (-1,), "starts": (0,), "ends": (hd // 2,), "steps": (1,)},
                     "c": {"axis": -1 if k % 2 else 3}}
        out.append(ex(types, data={"cos": cos, "sin": sin}, **attrs))
    return out


def rules() -> list[Rule]:
    """``ort_rotary_half`` and ``ort_rotary_interleaved`` (see the module docstring)."""
    half = ("x rotated by halves (rotate_half) with each token's cos and sin, their halves equal, is onnxruntime's "
            "RotaryEmbedding on x.")
    pairs_doc = ("x rotated by even and odd elements (rotate_every_two) with each token's cos and sin, each element "
                 "repeated, is onnxruntime's interleaved RotaryEmbedding on x.")
    return [rule("ort_rotary_half", half, _half_src, _target(0), _examples(False),
                 [(_half_ok, "x (B, N, S, hd) or (B, S, N, hd) rotated by halves; cos, sin repeat their halves")]),
            rule("ort_rotary_interleaved", pairs_doc, _pairs_src, _target(1), _examples(True),
                 [(_pairs_ok, "x rotated by even and odd elements; cos, sin repeat each element")])]


__all__ = ["pairs", "rules"]
