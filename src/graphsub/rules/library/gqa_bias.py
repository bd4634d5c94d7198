"""The causal half of a decoder's attention bias left to GroupQueryAttention, which masks the later keys itself: rules
``ort_gqa_causal_bias*`` of the ``attention`` set (tags ``"ort"`` and ``"attention"``).

Both exporters build a decoder's bias as ``where(And(causal, padding), 0, lowest)``: ``causal`` (1|B, 1, S, T) from
ranges over the lengths (two Ranges, their unsqueezes, a LessOrEqual and an And: about fifteen kernels a step, shared
by every layer) and ``padding`` (B, 1, 1, T) from the attention mask. ``ms_gqa``'s kernel is causal -- query row ``i``
never reads a key after ``P + i`` -- so the bias's values there do not matter, and at every other key the causal
condition is true. So::

    ms_gqa(..., where(And(C, X), a, w), ...)  =>  ms_gqa(..., expand(where(X, a, w), (1, 1, S, 1)), ...)

exact where ``C`` (the And of the condition's constant operands: the import folds the exporters' causal mask into a
constant at the imported sizes) is true at every key up to each query row's position, ``X`` (the one operand
computed at run time) does not depend on the query row (its query axis is 1), and ``C`` is false somewhere (there is
a causal mask to drop). A bias that is a weight is written as its last query row expanded (exact where its rows agree
on every key up to each row's position); that is the form the rule's own examples check numerically, the ``And`` form
is checked on the exporters' decoders (``tests/optimize/test_decoder_gqa.py``) and, like every rewrite, in each
candidate ``optimize`` verifies. Where the TorchScript export's guard against fully masked rows still reads the
condition, ``ort_gqa_kept_rows*`` (:mod:`graphsub.rules.library.gqa_kept`) drops it on the new bias too.

One rule per kernel form (``ms_gqa``, ``ms_gqa_packed``, each with and without the rotary embedding inside). The bias
is shared by every layer, so dropping its causal half pays only once every layer reads the new one: the search priced
by onnxruntime takes these rules as a compound move (:func:`graphsub.optimize.sources.ort_search.compounds`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.msft_gqa import OP, PACKED
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.gqa import _future, causal_bias
from graphsub.rules.library.kit import Check, RuleFactory, ex
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Example, Rule

rule = RuleFactory("ort", "attention")

#: the kernel's inputs before the bias, per form
HEADS = {OP: ("q", "k", "v"), PACKED: ("qkv",)}
#: And operands looked through, at most (the exporters nest two)
_DEPTH = 4


def gqa_node(p: PatternBuilder, op: str, rotary: bool) -> tuple[PValue, ...]:
    """The kernel ``op`` (``ms_gqa`` or ``ms_gqa_packed``, with the rotary embedding inside or not) on variables
    named as its inputs (``q``, ``k``, ``v`` or ``qkv``; ``pk``, ``pv``, ``ab``; ``cos``, ``sin``), node ``gqa``."""
    extra = (p.var("cos"), p.var("sin")) if rotary else ()
    return p.op_multi(op, *(p.var(n) for n in HEADS[op]), p.var("pk"), p.var("pv"), p.var("ab"), *extra,
                      name="gqa", outputs=3)


def gqa_call(t: TargetBuilder, m: MatchView, op: str, rotary: bool, bias: Ref) -> tuple[Ref, Ref, Ref]:
    """:func:`gqa_node`'s kernel written again on the match's inputs with ``bias``."""
    rest = (m["pk"], m["pv"], bias, *((m["cos"], m["sin"]) if rotary else ()))
    y, pk, pv = t.op_multi(op, *(m[n] for n in HEADS[op]), *rest, **m.attrs("gqa"))
    return y, pk, pv


def gqa_types(op: str, rotary: bool, b: int, s: int, p: int, n: int, nkv: int, hd: int) -> dict[str, Any]:
    """Example types of :func:`gqa_node`'s variables but the bias."""
    types: dict[str, Any] = {"pk": (b, nkv, p, hd), "pv": (b, nkv, p, hd)}
    if op == PACKED:
        types["qkv"] = (b, s, (n + 2 * nkv) * hd)
    else:
        types |= {"q": (b, s, n * hd), "k": (b, s, nkv * hd), "v": (b, s, nkv * hd)}
    if rotary:
        types |= {"cos": (b, 1, s, hd // 2), "sin": (b, 1, s, hd // 2)}
    return types


def _src(op: str, rotary: bool) -> Callable[[PatternBuilder], dict[str, PValue]]:
    def src(p: PatternBuilder) -> dict[str, PValue]:
        outs = gqa_node(p, op, rotary)
        return {"y": outs[0], "present_k": outs[1], "present_v": outs[2]}

    return src


# ----------------------------------------------------------------------------- where


def _and_leaves(g: Graph, ref: Ref, depth: int = 0) -> list[Ref] | None:
    """The operands of the nest of ONNX ``And`` nodes that computes ``ref`` (``[ref]`` when it is no And); None
    when the nest is deeper than :data:`_DEPTH`."""
    node = g.nodes[ref.node]
    if node.sig.op != "opaque" or node.sig.attr.get("op_type") != "And" or node.sig.attr.get("domain", "") not in \
            ("", "ai.onnx"):
        return [ref]
    if depth >= _DEPTH or len(node.inputs) != 2:
        return None
    out: list[Ref] = []
    for r in node.inputs:
        leaves = _and_leaves(g, r, depth + 1)
        if leaves is None:
            return None
        out += leaves
    return out


def _bool_data(g: Graph, ref: Ref) -> np.ndarray | None:
    node = g.nodes[ref.node]
    data = g.params.get(node.sig.attr["name"]) if node.sig.op == "weight" else None
    return None if data is None or data.dtype != np.bool_ else np.asarray(data)


def _rows_agree(data: np.ndarray, s: int, t: int) -> bool:
    """Whether every query row of ``data`` (.., S|1, T) equals its last one at each key up to the row's position."""
    try:
        at = np.broadcast_to(data, (*data.shape[:-2], s, t))
    except ValueError:
        return False
    kept = ~_future(s, t)
    return bool((np.broadcast_to(at[..., -1:, :], at.shape) == at)[..., kept].all())


def _runtime_part(m: MatchView) -> Ref | np.ndarray | str:
    """What the bias becomes before its expand: ``X`` of ``where(And(C, X), a, w)`` (a Ref: the bias then
    ``where(X, a, w)``), or a weight bias's last query row (its data); else why neither (see the module docstring)."""
    g = m.graph
    s, t = m.shape("ab")[2:]
    if s < 2:
        return "the bias has one query row: no causal half to drop"
    node = m.producer("ab")
    if node.sig.op == "weight":
        data = m.data("ab")
        if data is None or not _rows_agree(np.asarray(data), s, t):
            return "the bias weight's query rows differ before a row's position (not a causal mask over one row)"
        last = np.ascontiguousarray(np.asarray(data)[..., -1:, :])
        if np.array_equal(np.broadcast_to(last, data.shape), data):
            return "the bias weight's query rows are all equal (no causal half to drop)"
        return last
    if node.sig.op != "where":
        return f"the bias is a {node.sig.op}, neither where(And(causal, x), a, w) nor a weight"
    return causal_part(g, node.inputs[0], s, t)


def causal_part(g: Graph, cond: Ref, s: int, t: int, exact: bool = False) -> Ref | str:
    """``X`` when ``cond`` is ``And(C, X)`` (a nest of ONNX And nodes) with ``C`` the And of its constant operands,
    true at every key up to each of the ``s`` query rows' position among ``t`` keys and false at some later one
    (``exact``: at every later one), and ``X`` the one operand computed at run time, with one query row; else why
    not."""
    leaves = _and_leaves(g, cond)
    if leaves is None:
        return "the bias's condition is a deeper nest of And nodes than the exporters write"
    consts = [d for d in (_bool_data(g, r) for r in leaves) if d is not None]
    runtime = [r for r in leaves if _bool_data(g, r) is None]
    if len(runtime) != 1 or not consts:
        return "the bias's condition is not the And of constant masks and one value computed at run time"
    x = runtime[0]
    xs = g.type_of(x).shape
    if len(xs) >= 2 and xs[-2] != 1:
        return f"the run-time part {xs} of the condition depends on the query row"
    try:
        causal = np.broadcast_to(np.logical_and.reduce(np.broadcast_arrays(*consts)), (1, 1, s, t)) \
            if max(c.ndim for c in consts) <= 4 else None
    except ValueError:
        causal = None
    if causal is None:
        return "the condition's constant masks do not broadcast to (1, 1, S, T)"
    future = _future(s, t)
    if not causal[..., ~future].all():
        return "the condition's constant masks drop a key before a row's position (not only a causal mask)"
    if causal.all() or (exact and causal[..., future].any()):
        return "the condition's constant masks are not the causal mask"
    return x


def _where(m: MatchView) -> Check:
    part = _runtime_part(m)
    return part if isinstance(part, str) else True


# ----------------------------------------------------------------------------- target


def _tgt(op: str, rotary: bool) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    def tgt(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        part = _runtime_part(m)
        assert not isinstance(part, str)
        if isinstance(part, np.ndarray):
            bias: Ref = t.const(part, str(part.dtype))
        else:
            _, a, w = m.producer("ab").inputs
            bias = t.where(part, a, w)
        shape, have = m.shape("ab"), t.shape(bias)
        if have != shape:  # broadcast up where it is 1 only: the written target reads no size it does not need
            have = (1,) * (len(shape) - len(have)) + have
            bias = t.expand(bias, shape=tuple(d if h == 1 and d != 1 else 1 for h, d in zip(have, shape, strict=True)))
        y, pk, pv = gqa_call(t, m, op, rotary, bias)
        return {"y": y, "present_k": pk, "present_v": pv}

    return tgt


# ----------------------------------------------------------------------------- examples

#: (B, S, P, N, Nkv, hd): a batch of chunks on a past, a prompt on an empty past, a chunk on a long past
_CASES = ((2, 3, 5, 4, 2, 16), (1, 4, 0, 2, 2, 32), (1, 2, 9, 4, 1, 16))


def _examples(op: str, rotary: bool) -> list[Example]:
    out = []
    for k, (b, s, p, n, nkv, hd) in enumerate(_CASES):
        t = p + s
        types = gqa_types(op, rotary, b, s, p, n, nkv, hd) | {"ab": ((b, 1, 1)[k], 1, s, t)}
        ab = causal_bias(types["ab"][0], s, t, [-np.inf, float(np.finfo(np.float32).min), -1e4][k], k)
        out.append(ex(types, data={"ab": ab}, gqa={"num_heads": n, "kv_num_heads": nkv, "scale": [0.35, 0.5, 0.3][k]}))
    return out


def _rule(op: str, rotary: bool) -> Rule:
    name = "ort_gqa_causal_bias" + ("_packed" if op == PACKED else "") + ("_rotary" if rotary else "")
    doc = (f"GroupQueryAttention{' on a packed projection' if op == PACKED else ''}"
           f"{' with the rotary embedding inside' if rotary else ''} with a bias where(And(causal, x), a, w) is "
           "GroupQueryAttention with where(x, a, w) expanded to the bias's shape: the kernel masks every later key "
           "itself, so the causal mask's computation goes.")
    return rule(name, doc, _src(op, rotary), _tgt(op, rotary), _examples(op, rotary),
                [(_where, "the bias is where(And(C, x), a, w) with C constant, true at every key up to a row's "
                          "position and false at some later one, x computed at run time with one query row; or a "
                          "weight whose query rows agree up to each row's position")])


def rules() -> list[Rule]:
    """The ``ort_gqa_causal_bias*`` rules (see the module docstring)."""
    return [_rule(op, rotary) for op in (OP, PACKED) for rotary in (True, False)]


__all__ = ["HEADS", "causal_part", "gqa_call", "gqa_node", "gqa_types", "rules"]
