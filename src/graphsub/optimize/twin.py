"""Which sizes of a candidate graph follow the input's symbolic dims, and how (:func:`sized`): the candidate's
substitutions replayed on a second import of its base at other sizes.

graphsub's IR has static shapes, so a reshape or an expand a rule makes has its target at the imported sizes.  The
import at other sizes (each free symbolic dim at another value, never 1) is the same graph with other sizes, and
node ids are kept by every edit, so the candidate's steps (:mod:`graphsub.rules.replay`) give the same graph there:
a target that differs between the two is a product of the symbolic dims times a constant (:func:`fit`), which
:func:`graphsub.frontends.splice.splice` writes as shape arithmetic on the graph inputs.  Any other difference (an
attribute of another op, a weight the rules made) means the candidate cannot be written so: None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from graphsub.errors import GraphsubError, RuleError
from graphsub.frontends.dims import GENERIC_SIZES, Interface
from graphsub.frontends.splice import Expr, Sized
from graphsub.ir.graph import Graph
from graphsub.rules.cleanup import CLEANUP
from graphsub.rules.rule import Rule, StepLike

#: products of at most this many symbolic dims are recognised in a size
MAX_FACTORS = 3


def fit(a: int, b: int, symbols: Mapping[str, tuple[int, int]]) -> Expr | None:
    """The size that is ``a`` at the first sizes and ``b`` at the second as ``(c, names)``: ``c`` times the product
    of the symbolic dims ``names`` (their values at the two sizes in ``symbols``), the fewest names that fit; None
    when none does.

    >>> fit(6, 20, {"batch": (2, 4), "seq": (3, 5)}), fit(16, 16, {"batch": (2, 4)}), fit(8, 12, {"batch": (2, 4)})
    ((1, ('batch', 'seq')), (16, ()), None)
    """
    if a == b:
        return a, ()
    names = sorted(symbols)
    for k in range(1, MAX_FACTORS + 1):
        for combo in combinations(names, k):
            p1 = p2 = 1
            for n in combo:
                p1, p2 = p1 * symbols[n][0], p2 * symbols[n][1]
            if a % p1 == 0 and (a // p1) * p2 == b:
                return a // p1, combo
    return None


def other_sizes(first: Mapping[str, int]) -> dict[str, int]:
    """Second sizes for :func:`sized`: each dim moved by a distinct amount, so that no product of dims keeps its
    value.

    >>> other_sizes({"batch": 2, "seq": 3})
    {'batch': 9, 'seq': 14}
    """
    return {n: v + GENERIC_SIZES[(i + 3) % len(GENERIC_SIZES)] for i, (n, v) in enumerate(first.items())}


_RULES: dict[str, Rule] = {}
_LOADED: list[str] = []


def _rule(name: str) -> Rule:
    """The library's rule ``name``: the sets are read one by one until it is found (the steps of any source name
    their rules; reading every set costs seconds, the first few hold the rules searches use). The ``generated``
    set (4,420 rules, 9 s to read) is read only for a name of its own (``gen_...``): a step that names no rule (the
    spelling source's rows layout, a pass over the file) had read it on every GPT-2 run, a third of the candidates'
    verification (2026-11-30)."""
    from graphsub.rules.library import get_set, set_names

    first = ("default", "cpu", "ort", "attention", "decoder", "ort-spelling", "rows", "channels-first", "cleanup",
             "algebra")
    for s in dict.fromkeys([*(n for n in first if n in set_names()), *set_names()]):
        if name in _RULES:
            break
        if s in _LOADED or (s == "generated" and not name.startswith("gen_")):
            continue
        _LOADED.append(s)
        for r in get_set(s):
            _RULES.setdefault(r.name, r)
    rule = _RULES.get(name)
    if rule is None:
        raise RuleError(f"no rule named {name!r}")
    return rule


def sized(final: Graph, steps: Sequence[StepLike], base: Graph, base_again: Graph, iface: Interface,
          first: Mapping[str, int], second: Mapping[str, int]) -> tuple[Graph, Sized] | None:
    """``(the candidate replayed from base, its sizes in symbols)`` for a candidate made from ``base`` by
    ``steps`` (imported at ``first``), given ``base_again``, the same file imported at ``second``; None when the
    steps do not replay, the two replays differ otherwise than in reshape and expand targets and in weights' sizes,
    or a target does not fit (:func:`fit`). The replay is the candidate, checked again at every size by the caller
    (:func:`graphsub.symbolic.keep_symbolic`); it need not have ``final``'s node ids (requiring them refused the small
    Llama's search priced by onnxruntime, 2026-11-30)."""
    from graphsub.rules.replay import replay

    try:
        rules = [_rule(n) for n in dict.fromkeys(s.rule for s in steps if s.rule != CLEANUP)]
        one = replay(base, rules, steps)
        two = replay(base_again, rules, steps)
    except GraphsubError:
        return None
    if set(one.nodes) != set(two.nodes) or one.outputs != two.outputs:
        return None
    symbols = {n: (first[n], second[n]) for n in first if n in second}
    cache = iface.cache
    if cache is not None and cache.total not in symbols and {cache.past, cache.sequence} <= set(symbols):
        p, s = symbols[cache.past], symbols[cache.sequence]
        symbols[cache.total] = (p[0] + s[0], p[1] + s[1])
    shapes: dict[int, tuple[Expr, ...]] = {}
    weights: set[str] = set()
    for nid, node in one.nodes.items():
        other = two.nodes[nid]
        if other.sig.op != node.sig.op or other.inputs != node.inputs:
            return None
        if other.sig.attr == node.sig.attr or node.sig.op == "input":
            continue
        if node.sig.op == "opaque" and {k for k in node.sig.attr if node.sig.attr[k] != other.sig.attr.get(k)} == {
                "out_types"}:
            continue  # written as the file has it: its sizes are the runtime's
        if node.sig.op == "weight":
            weights.add(node.sig.attr["name"])
            continue
        exprs = _target(node.sig.op, node.sig.attr, other.sig.attr, symbols)
        if exprs is None:
            return None
        shapes[nid] = exprs
    witnesses: dict[str, tuple[str, int]] = {}
    for name, dims in iface.inputs:
        for axis, d in enumerate(dims or ()):
            if isinstance(d, str) and d in symbols:
                witnesses.setdefault(d, (name, axis))
    if any(n not in witnesses for e in shapes.values() for _, names in e for n in names):
        return None
    return one, Sized(shapes, frozenset(weights), witnesses)


def _target(op: str, a: Mapping[str, Any], b: Mapping[str, Any],
            symbols: Mapping[str, tuple[int, int]]) -> tuple[Expr, ...] | None:
    """The target of a reshape or an expand in symbols, from its attributes at the two sizes; None for another op
    or another attribute that differs."""
    if op not in ("reshape", "expand") or {k for k in a if a[k] != b.get(k)} != {"shape"}:
        return None
    if len(a["shape"]) != len(b["shape"]):
        return None
    out = []
    for x, y in zip(a["shape"], b["shape"], strict=True):
        e = fit(int(x), int(y), symbols)
        if e is None:
            return None
        out.append(e)
    return tuple(out)


__all__ = ["MAX_FACTORS", "fit", "other_sizes", "sized"]
