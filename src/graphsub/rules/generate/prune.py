"""Step 2 of TASO's Algorithm 1 and its pruning: candidate pairs, testing, redundancy removal.

Stages (each count is reported by :class:`Stats`; compare TASO's Table 3, 28744 -> 17346 -> 743):

1. **candidates** -- graphs with equal fingerprints.  As in TASO, the first graph enumerated
   with a fingerprint is its representative and every later graph with it forms a pair
   with the representative.
2. **renaming** -- *input-tensor renaming*, on the output mapping the fingerprint input gives (per-output
   digests matched one to one; a pair without one is a collision): a pair is dropped if neither side uses the
   variables of a class in order (``x1`` before ``x2`` ...; TASO's ``variable_ordering``), and pairs that are the
   same up to a class-preserving renaming of variables (and swapping the sides) form one class
   (:func:`canonical_key`).
3. **confirmed** -- a class keeps its first pair whose outputs also agree, with the same mapping, on ``tests`` more
   random inputs (a pair that fails is a fingerprint collision, and the class offers its next pair).  This keeps
   exactly what testing every candidate and then deduplicating keeps, but tests about one pair per class (TASO
   tests every candidate: at n=3, 636,785 of them for 38,982 classes).
4. **common subgraph** -- dropped if both sides contain the same operator on the same variables
   (the rule would be a smaller rule in a context), or if a pair of mapped outputs is produced
   by the same template with all but at most one input the same variable (it follows from the
   smaller rule relating the differing inputs; TASO's ``find_same_supergraph``).

>>> from graphsub.rules.generate.enumerate import EnumConfig, GraphCode
>>> cfg = EnumConfig(templates=("add", "matmul"), max_ops=2)
>>> a = GraphCode(((0, (0, 1)),), 20, (1,))          # add(x1, x2)
>>> b = GraphCode(((0, (1, 2)),), 20, (1,))          # add(x2, x3): the same up to renaming
>>> canonical_key(cfg, Pair(a, a, ((20, 20),))) == canonical_key(cfg, Pair(b, b, ((20, 20),)))
True
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.rules.generate.enumerate import EnumConfig, GraphCode, PrefixEvaluator, decode
from graphsub.rules.generate.fingerprint import random_inputs


@dataclass(frozen=True)
class Pair:
    """Two graphs and their output mapping ``(tensor id in a, tensor id in b)``."""

    a: GraphCode
    b: GraphCode
    outputs: tuple[tuple[int, int], ...]

    def swapped(self) -> Pair:
        return Pair(self.b, self.a, tuple((y, x) for x, y in self.outputs))


@dataclass
class Stats:
    """Counts after each stage (see the module docstring) and what was dropped why."""

    graphs: int = 0
    fingerprints: int = 0
    candidates: int = 0
    confirmed: int = 0
    renaming: int = 0
    common_subgraph: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, why: str, n: int = 1) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + n


# ----------------------------------------------------------------------------- candidates


def candidate_pairs(fps: np.ndarray) -> list[tuple[int, int]]:
    """(representative index, member index) for every graph whose fingerprint ``fps[k]`` an earlier graph
    (in global order) already has."""
    if len(fps) == 0:
        return []
    order = np.argsort(fps, kind="stable")
    sf = fps[order]
    start = np.r_[True, sf[1:] != sf[:-1]]
    rep = order[np.flatnonzero(start)][np.cumsum(start) - 1]  # per sorted position: its group's first graph
    members, reps = order[~start], rep[~start]
    by_member = np.argsort(members, kind="stable")
    return list(zip(reps[by_member].tolist(), members[by_member].tolist(), strict=True))


@dataclass(frozen=True)
class CodeTable:
    """Graph codes as one byte array and offsets: sent to workers and Ray tasks as two numpy arrays (zero-copy in
    Ray's object store) instead of millions of ``bytes`` objects."""

    blob: np.ndarray  # uint8
    offs: np.ndarray  # int64, len(codes) + 1

    @staticmethod
    def of(codes: Sequence[bytes]) -> CodeTable:
        offs = np.zeros(len(codes) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in codes], out=offs[1:])
        return CodeTable(np.frombuffer(b"".join(codes), dtype=np.uint8), offs)

    def __getitem__(self, i: int) -> bytes:
        return self.blob[self.offs[i]:self.offs[i + 1]].tobytes()

    def __len__(self) -> int:
        return len(self.offs) - 1


def _digests_of(ev: PrefixEvaluator, codes: CodeTable) -> Callable[[int, int, bool], dict[int, int]]:
    """Output digests of graph ``i`` on seed ``s``; representatives (``rep``: they recur in many pairs) cached."""
    cache: dict[tuple[int, int], dict[int, int]] = {}

    def digests(i: int, s: int, rep: bool) -> dict[int, int]:
        if not rep:
            return ev.digests(codes[i], s)
        if (i, s) not in cache:
            cache[(i, s)] = ev.digests(codes[i], s)
        return cache[(i, s)]

    return digests


Mapped = tuple[tuple[tuple[int, int], ...], tuple[tuple[str, str], ...] | None] | None


def map_chunk(context: tuple[EnumConfig, CodeTable], pairs: Sequence[tuple[int, int]]) -> list[Mapped]:
    """Per candidate pair (representative index, member index): ``((), None)`` when neither side uses its variables
    in order (decided first: no evaluation), None when its outputs cannot be matched one to one on the fingerprint
    input (a collision), else its output mapping and its renaming key (:func:`canonical_key`). A unit of work of
    :func:`confirm` (module-level: it runs in worker processes and Ray tasks)."""
    cfg, codes = context
    digests = _digests_of(PrefixEvaluator(cfg, {cfg.seed: random_inputs(cfg.variables, cfg.seed)}), codes)
    out: list[Mapped] = []
    for i, j in pairs:
        a, b = decode(codes[i]), decode(codes[j])
        if not (ordered(cfg, a) or ordered(cfg, b)):  # syntactic: decided before any evaluation
            out.append(((), None))
            continue
        da, db = digests(i, cfg.seed, True), digests(j, cfg.seed, False)
        inv = {d: t for t, d in db.items()}
        mapping = tuple((ta, inv[d]) for ta, d in da.items() if d in inv)
        if not len(mapping) == len(da) == len(db):
            out.append(None)
            continue
        out.append((mapping, canonical_key(cfg, Pair(a, b, mapping))))
    return out


def test_chunk(context: tuple[EnumConfig, CodeTable, int],
               items: Sequence[tuple[int, int, tuple[tuple[int, int], ...]]]) -> list[bool]:
    """Per (representative, member, output mapping): do the mapped outputs agree on ``context[2]`` further random
    inputs (seeds ``cfg.seed + 1 ...``)? A unit of work of :func:`confirm`."""
    cfg, codes, tests = context
    seeds = [cfg.seed + 1 + k for k in range(tests)]
    digests = _digests_of(PrefixEvaluator(cfg, {s: random_inputs(cfg.variables, s) for s in seeds}), codes)
    out: list[bool] = []
    for i, j, mapping in items:
        ok = True
        for s in seeds:
            ea, eb = digests(i, s, True), digests(j, s, False)
            if not all(ea[ta] == eb[tb] for ta, tb in mapping):
                ok = False
                break
        out.append(ok)
    return out


#: candidate pairs per unit of work of the parallel confirm stage
CONFIRM_CHUNK = 4096

Key = tuple[tuple[str, str], ...]


def confirm(cfg: EnumConfig, codes: Sequence[bytes], pairs: Sequence[tuple[int, int]], tests: int,
            stats: Stats, progress: Callable[[str, int, int], None] | None = None,
            keys: list[Key] | None = None, *, executor: str = "serial", workers: int | None = None,
            ray_address: str | None = None) -> list[Pair]:
    """Stages 2 and 3 (module docstring): of the candidate ``pairs`` (indices into ``codes``), one pair per renaming
    class whose outputs agree on ``tests`` further random inputs -- the first such pair of the class, in candidate
    order, which is what confirming every pair and then deduplicating would keep; ``keys`` receives their keys.

    Renaming is decided first, on the fingerprint input's output mapping (:func:`map_chunk`), so that the test
    inputs are evaluated for about one pair per class, not for every candidate (:func:`test_chunk`; a class whose
    first pair fails offers its next one). Both passes run in pieces on ``executor``
    (:func:`graphsub.distributed.executors.map_ordered`); the result is the same on every executor."""
    from graphsub.distributed.executors import chunks, map_ordered

    par: dict[str, Any] = {"executor": executor, "workers": workers, "ray_address": ray_address}
    table = CodeTable.of(codes)
    pieces = chunks(pairs, CONFIRM_CHUNK)
    stage1, stage2 = "renaming (candidate pairs)", "confirm (one pair per class)"
    found = map_ordered(map_chunk, pieces, context=(cfg, table), **par,
                        on_done=(lambda k, r: progress(stage1, len(r), len(pairs))) if progress else None)
    classes: dict[Key, list[tuple[int, int, tuple[tuple[int, int], ...]]]] = {}
    for n, ((_i, j), m) in enumerate(zip(pairs, (x for xs in found for x in xs), strict=True)):
        if m is None:
            stats.drop("fingerprint collision (differs on a test input)")
        elif m[1] is None:
            stats.drop("renaming: neither side uses variables in order")
        else:
            classes.setdefault(m[1], []).append((n, j, m[0]))
    stats.renaming = len(classes)
    kept: dict[Key, tuple[int, int, tuple[tuple[int, int], ...]]] = {}
    offer = dict.fromkeys(classes, 0)  # the class's pair on offer
    failed = 0
    while offer:
        todo = [(k, classes[k][n]) for k, n in offer.items()]
        items = [(pairs[n][0], j, m) for _, (n, j, m) in todo]
        ok = [x for xs in map_ordered(test_chunk, chunks(items, CONFIRM_CHUNK), context=(cfg, table, tests), **par,
                                      on_done=(lambda k, r: progress(stage2, len(r), len(classes)))
                                      if progress else None) for x in xs]
        nxt: dict[Key, int] = {}
        for (k, item), passed in zip(todo, ok, strict=True):
            if passed:
                kept[k] = item
            else:
                failed += 1
                stats.drop("fingerprint collision (differs on a test input)")
                if offer[k] + 1 < len(classes[k]):
                    nxt[k] = offer[k] + 1
        offer = nxt
    # the pairs of a class after its kept one are not tested: they are dropped as renamings
    stats.drop("renaming: same as an earlier pair up to renaming", sum(map(len, classes.values())) - len(kept) - failed)
    order = sorted(kept, key=lambda k: kept[k][0])
    if keys is not None:
        keys.extend(order)
    stats.confirmed = len(order)
    return [Pair(decode(codes[pairs[kept[k][0]][0]]), decode(codes[kept[k][1]]), kept[k][2]) for k in order]


# ----------------------------------------------------------------------------- renaming


def _classes(cfg: EnumConfig) -> list[int]:
    """Variable index -> class id (variables with equal shape and weight flag)."""
    return cfg.classes


def ordered(cfg: EnumConfig, g: GraphCode) -> bool:
    """Each class's variables are used in index order (x1 before x2 ...) in ``g``."""
    cls = _classes(cfg)
    last: dict[int, int] = {}
    for v in g.variables_used():
        if v < last.get(cls[v], -1):
            return False
        last[cls[v]] = v
    return True


Plan = list[tuple[str, bool, tuple[int, ...], int]]


def _plan(cfg: EnumConfig, g: GraphCode) -> Plan:
    """Per op of ``g``: template name, whether its arguments commute, inputs, number of outputs."""
    temps = cfg.template_objs
    return [(temps[t].name, temps[t].symmetric, ins, n) for (t, ins), n in zip(g.ops, g.outputs_per_op, strict=True)]


def _render(plan: Plan, num_vars: int, name: Callable[[int], str]) -> list[str]:
    """Expression text of every tensor (variables first, then op outputs in order); arguments of symmetric
    templates sorted. ``name`` is asked only for the variables the ops read."""
    texts = [""] * num_vars
    for _, _, ins, _ in plan:
        for j in ins:
            if j < num_vars:
                texts[j] = name(j)
    for tname, sym, ins, n in plan:
        args = [texts[a] for a in ins]
        if sym:
            args.sort()
        s = f"{tname}({','.join(args)})"
        texts.extend((f"{s}#{k}" for k in range(n)) if n > 1 else (s,))
    return texts


def _exprs(cfg: EnumConfig, g: GraphCode, name: Callable[[int], str]) -> dict[int, str]:
    """Expression text of every op output of ``g``; arguments of symmetric templates sorted."""
    return dict(enumerate(_render(_plan(cfg, g), g.num_vars, name)[g.num_vars:], g.num_vars))


def pair_text(cfg: EnumConfig, p: Pair, name: Callable[[int], str] | None = None) -> tuple[tuple[str, str], ...]:
    """The pair as sorted (a output, b output) expression texts."""
    nm = name or (lambda v: cfg.variables[v].name)
    ea, eb = _exprs(cfg, p.a, nm), _exprs(cfg, p.b, nm)
    return tuple(sorted((ea[x], eb[y]) for x, y in p.outputs))


def canonical_key(cfg: EnumConfig, p: Pair) -> tuple[tuple[str, str], ...]:
    """A key equal for pairs that differ only by a class-preserving renaming of variables
    and/or the order of the sides: the smallest text over all renamings of the used variables
    onto the first slots of their classes, in both orientations."""
    cls = _classes(cfg)
    used = sorted(set(p.a.variables_used()) | set(p.b.variables_used()))
    by_cls: dict[int, list[int]] = {}
    for v in used:
        by_cls.setdefault(cls[v], []).append(v)
    groups = list(by_cls.items())
    plan_a, plan_b = _plan(cfg, p.a), _plan(cfg, p.b)
    best: tuple[tuple[str, str], ...] | None = None
    for perms in itertools.product(*(itertools.permutations(vs) for _, vs in groups)):
        ren: dict[int, str] = {}
        for (c, _), perm in zip(groups, perms, strict=True):
            for slot, v in enumerate(perm):
                ren[v] = f"c{c}_{slot}"
        ta, tb = _render(plan_a, p.a.num_vars, ren.__getitem__), _render(plan_b, p.b.num_vars, ren.__getitem__)
        for key in (tuple(sorted((ta[x], tb[y]) for x, y in p.outputs)),
                    tuple(sorted((tb[y], ta[x]) for x, y in p.outputs))):
            if best is None or key < best:
                best = key
    assert best is not None
    return best


# ----------------------------------------------------------------------------- common subgraph


def _common_op(p: Pair) -> bool:
    ops_a = {op for op in p.a.ops if all(j < p.a.num_vars for j in op[1])}
    return any(op in ops_a for op in p.b.ops if all(j < p.b.num_vars for j in op[1]))


def _common_final(p: Pair) -> bool:
    pa, pb = p.a.producer(), p.b.producer()
    for x, y in p.outputs:
        (ia, ka), (ib, kb) = pa[x], pb[y]
        (ta, insa), (tb, insb) = p.a.ops[ia], p.b.ops[ib]
        if ta != tb or ka != kb:
            continue
        differ = sum(1 for u, v in zip(insa, insb, strict=True) if u != v or u >= p.a.num_vars)
        if differ <= 1:
            return True
    return False


def prune_common(pairs: Sequence[Pair], stats: Stats, keys: Sequence[tuple[tuple[str, str], ...]] | None = None,
                 keys_out: list[tuple[tuple[str, str], ...]] | None = None) -> list[Pair]:
    """Stage 4 (see the module docstring); ``keys``/``keys_out``: the pairs' canonical keys in and out."""
    out: list[Pair] = []
    for n, p in enumerate(pairs):
        if _common_op(p):
            stats.drop("common subgraph: same op on the same variables on both sides")
        elif _common_final(p):
            stats.drop("common subgraph: same final op, at most one input differs")
        else:
            out.append(p)
            if keys is not None and keys_out is not None:
                keys_out.append(keys[n])
    return out


__all__ = ["CONFIRM_CHUNK", "CodeTable", "Pair", "Stats", "candidate_pairs", "canonical_key", "confirm", "map_chunk",
           "ordered", "pair_text", "prune_common", "test_chunk"]
