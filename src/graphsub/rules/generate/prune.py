"""Step 2 of TASO's Algorithm 1 and its pruning: candidate pairs, testing, redundancy removal.

Stages (each count is reported by :class:`Stats`; compare TASO's Table 3, 28744 -> 17346 -> 743):

1. **candidates** -- graphs with equal fingerprints.  As in TASO, the first graph enumerated
   with a fingerprint is its representative and every later graph with it forms a pair
   with the representative.
2. **confirmed** -- the pair's outputs also agree on ``tests`` more random inputs, with the
   same output mapping (the mapping is found by matching per-output digests).
3. **renaming** -- *input-tensor renaming*: a pair is dropped if neither side uses the
   variables of a class in order (``x1`` before ``x2`` ...; TASO's ``variable_ordering``),
   and pairs that are the same up to a class-preserving renaming of variables (and swapping
   the sides) are kept once (:func:`canonical_key`).
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

import numpy as np

from graphsub.rules.generate.enumerate import EnumConfig, GraphCode, decode, output_digests
from graphsub.rules.generate.fingerprint import random_inputs
from graphsub.rules.generate.parallel import ShardResult


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

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1


# ----------------------------------------------------------------------------- candidates


def candidate_pairs(merged: ShardResult) -> list[tuple[int, int]]:
    """(representative index, member index) for every graph whose fingerprint an earlier graph
    (in global order) already has."""
    fps = merged.fps
    if len(fps) == 0:
        return []
    order = np.argsort(fps, kind="stable")
    sf = fps[order]
    starts = np.flatnonzero(np.r_[True, sf[1:] != sf[:-1]])
    ends = np.r_[starts[1:], len(sf)]
    out: list[tuple[int, int]] = []
    for s, e in zip(starts, ends, strict=True):
        if e - s > 1:
            rep = int(order[s])
            out.extend((rep, int(order[k])) for k in range(s + 1, e))
    out.sort(key=lambda p: p[1])
    return out


def confirm_chunk(context: tuple[EnumConfig, Sequence[bytes], int], pairs: Sequence[tuple[int, int]]
                  ) -> list[tuple[tuple[int, int], ...] | None]:
    """Per pair (representative index, member index) of graph codes ``context[1]``: its output mapping when the
    outputs agree on the fingerprint input and on ``context[2]`` further random inputs (seeds ``cfg.seed + 1 ...``),
    else None. A unit of work of :func:`confirm` (module-level: it runs in worker processes and Ray tasks)."""
    cfg, codes, tests = context
    seeds = [cfg.seed, *(cfg.seed + 1 + k for k in range(tests))]
    inputs = {s: random_inputs(cfg.variables, s) for s in seeds}
    # representatives recur in many pairs (cache them); members occur once (do not)
    cache: dict[tuple[int, int], dict[int, int]] = {}

    def rep_digests(i: int, s: int) -> dict[int, int]:
        key = (i, s)
        if key not in cache:
            cache[key] = output_digests(cfg, decode(codes[i]), inputs[s])
        return cache[key]

    out: list[tuple[tuple[int, int], ...] | None] = []
    for i, j in pairs:
        gj = decode(codes[j])
        da, db = rep_digests(i, seeds[0]), output_digests(cfg, gj, inputs[seeds[0]])
        inv = {d: t for t, d in db.items()}
        mapping = tuple((ta, inv[d]) for ta, d in da.items() if d in inv)
        ok = len(mapping) == len(da) == len(db)
        for s in seeds[1:]:
            if not ok:
                break
            ea, eb = rep_digests(i, s), output_digests(cfg, gj, inputs[s])
            ok = all(ea[ta] == eb[tb] for ta, tb in mapping)
        out.append(mapping if ok else None)
    return out


#: candidate pairs per unit of work of the parallel confirm stage
CONFIRM_CHUNK = 4096


def confirm(cfg: EnumConfig, merged: ShardResult, pairs: Sequence[tuple[int, int]], tests: int,
            stats: Stats, progress: Callable[[int], None] | None = None, *, executor: str = "serial",
            workers: int | None = None, ray_address: str | None = None) -> list[Pair]:
    """The pairs whose outputs agree, with one output mapping, on the fingerprint input and on
    ``tests`` further random inputs (seeds ``cfg.seed + 1 ...``): :func:`confirm_chunk` over pieces of ``pairs`` on
    ``executor`` (:func:`graphsub.distributed.executors.map_ordered`; the result is the same on every executor)."""
    from graphsub.distributed.executors import chunks, map_ordered

    pieces = chunks(pairs, CONFIRM_CHUNK)
    done = map_ordered(confirm_chunk, pieces, executor=executor, context=(cfg, merged.codes, tests),
                       workers=workers, ray_address=ray_address,
                       on_done=(lambda k, r: progress(len(r))) if progress is not None else None)
    out: list[Pair] = []
    for piece, maps in zip(pieces, done, strict=True):
        for (i, j), mapping in zip(piece, maps, strict=True):
            if mapping is not None:
                out.append(Pair(decode(merged.codes[i]), decode(merged.codes[j]), mapping))
            else:
                stats.drop("fingerprint collision (differs on a test input)")
    return out


# ----------------------------------------------------------------------------- renaming


def _classes(cfg: EnumConfig) -> list[int]:
    """Variable index -> class id (variables with equal shape and weight flag)."""
    ids: dict[tuple[tuple[int, ...], bool], int] = {}
    return [ids.setdefault((v.shape, v.weight), len(ids)) for v in cfg.variables]


def ordered(cfg: EnumConfig, g: GraphCode) -> bool:
    """Each class's variables are used in index order (x1 before x2 ...) in ``g``."""
    cls = _classes(cfg)
    last: dict[int, int] = {}
    for v in g.variables_used():
        if v < last.get(cls[v], -1):
            return False
        last[cls[v]] = v
    return True


def _exprs(cfg: EnumConfig, g: GraphCode, name: Callable[[int], str]) -> dict[int, str]:
    """Expression text of every tensor of ``g``; arguments of symmetric templates sorted."""
    temps = cfg.template_objs
    prod = g.producer()
    memo: dict[int, str] = {}

    def expr(j: int) -> str:
        if j < g.num_vars:
            return name(j)
        if j in memo:
            return memo[j]
        i, k = prod[j]
        t, ins = g.ops[i]
        args = [expr(a) for a in ins]
        if temps[t].symmetric:
            args.sort()
        s = f"{temps[t].name}({','.join(args)})" + (f"#{k}" if g.outputs_per_op[i] > 1 else "")
        memo[j] = s
        return s

    return {j: expr(j) for j in range(g.num_vars, g.num_vars + sum(g.outputs_per_op))}


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
    best: tuple[tuple[str, str], ...] | None = None
    for perms in itertools.product(*(itertools.permutations(vs) for _, vs in groups)):
        ren: dict[int, str] = {}
        for (c, _), perm in zip(groups, perms, strict=True):
            for slot, v in enumerate(perm):
                ren[v] = f"c{c}_{slot}"
        for q in (p, p.swapped()):
            key = pair_text(cfg, q, ren.__getitem__)
            if best is None or key < best:
                best = key
    assert best is not None
    return best


def renaming_keys(cfg: EnumConfig, pairs: Sequence[Pair]) -> list[tuple[tuple[str, str], ...] | None]:
    """Per pair: its :func:`canonical_key`, or None when neither side uses its variables in order (the costly part
    of :func:`prune_renaming`, a unit of work of its parallel form)."""
    return [canonical_key(cfg, p) if ordered(cfg, p.a) or ordered(cfg, p.b) else None for p in pairs]


def prune_renaming(cfg: EnumConfig, pairs: Sequence[Pair], stats: Stats,
                   keys: list[tuple[tuple[str, str], ...]] | None = None, *, executor: str = "serial",
                   workers: int | None = None, ray_address: str | None = None) -> list[Pair]:
    """Stage 3 (see the module docstring); ``keys`` receives the canonical key of each pair kept. The keys are
    computed on ``executor`` (:func:`graphsub.distributed.executors.map_ordered`), the pairs kept in order here."""
    from graphsub.distributed.executors import chunks, map_ordered

    pieces = chunks(pairs, CONFIRM_CHUNK)
    found = map_ordered(renaming_keys, pieces, executor=executor, context=cfg, workers=workers,
                        ray_address=ray_address)
    out: list[Pair] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for p, key in zip(pairs, (k for ks in found for k in ks), strict=True):
        if key is None:
            stats.drop("renaming: neither side uses variables in order")
            continue
        if key in seen:
            stats.drop("renaming: same as an earlier pair up to renaming")
            continue
        seen.add(key)
        out.append(p)
        if keys is not None:
            keys.append(key)
    return out


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


__all__ = ["CONFIRM_CHUNK", "Pair", "Stats", "candidate_pairs", "canonical_key", "confirm", "confirm_chunk",
           "ordered", "pair_text", "prune_common", "prune_renaming", "renaming_keys"]
