"""Plans cached by structure: a batch whose recorded DAG has the same shape as an earlier one reuses its plan.

A :class:`~graphsub.dynamic.plan.Plan`'s steps, row layout and gather programs depend only on the DAG's
structure -- which op key each node has, and which row of which step each input comes from -- not on the
data.  :func:`structure_key` describes that structure exactly (a tuple, compared in full on a hash match, so a
hit is never a collision), before the layout reorders anything.  On a hit the cached plan's layout is applied
to the new groups (the same row permutation per step) and only what carries data is rebuilt: stacked data
inputs (word ids, targets), deferred dropout masks, values computed by earlier runs, member-by-member steps.

The cache is a bounded LRU (:class:`PlanCache`, ``size`` plans); :attr:`PlanCache.hits` / :attr:`misses`
give its hit rate.  Hits need repeated structure: the same batches again (an evaluation set, epochs without
reshuffling), inference on recurring shapes, sequence batches bucketed to equal lengths.  Random batches of
random trees almost never repeat, and then the key (one pass over the nodes) is pure cost -- which is why
the engines take a cache only when asked (``Reuse(plan_cache=N)``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphsub.dynamic.calls import DATA_KIDS, param_tok
from graphsub.dynamic.dag import Group
from graphsub.dynamic.lazy import LazyTensor
from graphsub.dynamic.plan import D, L, M, Plan, Step, build_plan, column, reference, run_index

_DATA = object()  # a data tensor input (its shape and dtype are part of the op key)
_EXT = object()  # a value computed outside this plan (an earlier run)


def structure_key(groups: Sequence[Group], out: LazyTensor) -> tuple[Any, ...]:
    """The exact structure of ``groups`` (in level order) and ``out``: per group its key id and size, per member
    where each input comes from (step, row, output part), a parameter's identity, or a data marker."""
    cur = {id(g): i for i, g in enumerate(groups)}
    parts: list[Any] = []
    for g in groups:
        ms = g.members
        parts.append(g.kid)
        parts.append(len(ms))
        for m in ms:
            for x in m.inputs:
                if type(x) is LazyTensor:
                    c = x if x.part < 0 else x.inputs[0]
                    st = cur.get(id(c.grp), -1)
                    parts.append((st, c.row, x.part) if st >= 0 else _DATA if c.kid in DATA_KIDS else _EXT)
                elif x.requires_grad:
                    parts.append(param_tok(x))
                else:
                    parts.append(_DATA)
    c = out if out.part < 0 else out.inputs[0]
    parts.append((cur.get(id(c.grp), -1), c.row, out.part))
    return tuple(parts)


@dataclass
class _Cached:
    plan: Plan
    perms: list[list[int] | None]  # per group: new member i is old member perms[i] (None: unchanged)


class PlanCache:
    """A bounded LRU of plans by :func:`structure_key` (module docstring)."""

    def __init__(self, size: int = 32):
        if size < 1:
            raise ValueError("PlanCache: size must be >= 1")
        self.size = size
        self.entries: OrderedDict[tuple[Any, ...], _Cached] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    def report(self) -> dict[str, Any]:
        return {"size": self.size, "entries": len(self.entries), "hits": self.hits, "misses": self.misses,
                "hit_rate": self.hit_rate}

    def plan(self, groups: Sequence[Group], out: LazyTensor, masks: dict[int, Any] | None = None,
             layout: bool = False) -> Plan:
        """The plan of ``groups`` computing ``out`` (as :func:`~graphsub.dynamic.plan.build_plan`), from the cache
        when their structure was planned before."""
        key = structure_key(groups, out)
        ent = self.entries.get(key)
        if ent is None:
            self.misses += 1
            before = [{id(m): i for i, m in enumerate(g.members)} for g in groups]
            plan = build_plan(groups, out, masks, layout)
            perms: list[list[int] | None] = []
            for g, pos in zip(groups, before, strict=True):
                perm = [pos[id(m)] for m in g.members]
                perms.append(None if perm == list(range(len(perm))) else perm)
            self.entries[key] = _Cached(plan, perms)
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)
            return plan
        self.hits += 1
        self.entries.move_to_end(key)
        for g, order in zip(groups, ent.perms, strict=True):
            if order is not None:
                ms = g.members
                g.members = [ms[i] for i in order]
                for r, m in enumerate(g.members):
                    m.row = r
        return _refill(ent.plan, groups, out, masks or {})


def _refill(cached: Plan, groups: Sequence[Group], out: LazyTensor, deferred: dict[int, Any]) -> Plan:
    """``cached`` with what carries data rebuilt from ``groups`` (already in the cached row order)."""
    cur = {id(g): i for i, g in enumerate(groups)}
    runs = [{} if st.chunks is None else run_index(st.chunks) for st in cached.steps]
    steps = []
    for st, g in zip(cached.steps, groups, strict=True):
        ms = g.members
        if not st.batched:
            cols: list[Any] = [[reference(x, cur, deferred) for x in m.inputs] for m in ms]
        else:
            cols = []
            first = ms[0]
            for j, c in enumerate(st.cols):
                kind = c[0]
                if kind in (D, M) or (kind == L and any(p[0] < 0 for p in c[1])):
                    cols.append(column(j, first.inputs[j], ms, cur, deferred, runs))
                else:
                    cols.append(c)
        steps.append(Step(st.kid, st.n, st.batched, cols, st.chunks))
    plan = Plan(steps, cached.out, ops=cached.ops,
                masks=[m[1:] for m in sorted(deferred.values(), key=lambda m: m[0])])
    if cached.out is None:
        plan.value = reference(out, cur, deferred)[1]
    return plan


__all__ = ["PlanCache", "structure_key"]
