"""Plans cached by structure: a batch whose recorded DAG has the same shape as an earlier one reuses its plan.

A :class:`~graphsub.dynamic.plan.Plan`'s steps, row layout and gather programs depend only on the DAG's
structure -- which op key each node has, and which row of which step each input comes from -- not on the
data.  :func:`structure_key` describes that structure exactly (a tuple, compared in full on a hash match, so a
hit is never a collision), as the trace recorded it: before the regrouping (:func:`~graphsub.dynamic.schedule.relevel`,
passed as ``regroup``) and the layout change anything.  Equal keys mean the two DAGs match node for node by their
position (group, row), so on a hit the new nodes are put where the cached plan has their counterparts -- the
regrouping and the row layout are not computed again (~1 ms per Tree-LSTM batch) -- and only what carries data is
rebuilt: stacked data inputs (word ids, targets), deferred dropout masks, values computed by earlier runs,
member-by-member steps.

The cache is a bounded LRU (:class:`PlanCache`, ``size`` plans); :attr:`PlanCache.hits` / :attr:`misses`
give its hit rate.  Hits need repeated structure: the same batches again (an evaluation set, epochs without
reshuffling), inference on recurring shapes, sequence batches bucketed to equal lengths.  Random batches of
random trees almost never repeat, and then the key (one pass over the nodes) is pure cost -- which is why
the engines take a cache only when asked (``Reuse(plan_cache=N)``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from graphsub.dynamic.calls import DATA_KIDS, param_tok
from graphsub.dynamic.dag import Group
from graphsub.dynamic.lazy import LazyTensor
from graphsub.dynamic.plan import D, L, M, Plan, Step, build_plan, column, numbered, reference, run_index

_DATA = object()  # a data tensor input (its shape and dtype are part of the op key)
_EXT = object()  # a value computed outside this plan (an earlier run)
_ROW = 32
_ROWS = (1 << _ROW) - 1
"""A node's recorded place in a cache entry is one int, ``group << _ROW | row``."""


def structure_key(groups: Sequence[Group], out: LazyTensor) -> tuple[Any, ...]:
    """The exact structure of ``groups`` (in level order) and ``out``: per group its level, key id and size, per
    member where each input comes from (step, row, output part), a parameter's identity, a data marker, or the level
    of a value computed by an earlier run (levels are what the regrouping reads).

    Each group's step is put on the group while the key is built (:func:`~graphsub.dynamic.plan.numbered`): one
    attribute read per input instead of a lookup by identity."""
    parts: list[Any] = []
    add = parts.append
    with numbered(groups):
        for g in groups:
            ms = g.members
            add(g.level)
            add(g.kid)
            add(len(ms))
            for m in ms:
                for x in m.inputs:
                    if type(x) is LazyTensor:
                        part = x.part
                        c = x if part < 0 else x.inputs[0]
                        cg = c.grp
                        if cg is not None and cg.pos >= 0:
                            add((cg.pos, c.row, part))
                        else:
                            add(_DATA if c.kid in DATA_KIDS else (_EXT, c.level))
                    elif x.requires_grad:
                        add(param_tok(x))
                    else:
                        add(_DATA)
        c = out if out.part < 0 else out.inputs[0]
        add((c.grp.pos if c.grp is not None else -1, c.row, out.part))
    return tuple(parts)


Regroup = Callable[[list[Group]], list[Group]]
"""A regrouping of a trace's groups (:func:`~graphsub.dynamic.schedule.relevel`)."""


@dataclass
class _Cached:
    plan: Plan
    groups: list[int | tuple[int, int, list[int]]]
    """Per step of ``plan``: the index of the recorded group it runs as it is (same members, same order), or its
    ``(level, kid, members)``, each member by its recorded ``group << _ROW | row``."""


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
             layout: bool = False, regroup: Regroup | None = None) -> tuple[Plan, list[Group]]:
        """The plan computing ``out`` from a trace's recorded ``groups`` (in level order), regrouped by ``regroup``
        and built by :func:`~graphsub.dynamic.plan.build_plan`, or taken from the cache when their structure was
        planned before; and the groups it runs (one per step: the nodes' ``grp``, ``row`` and ``level`` are set)."""
        key = structure_key(groups, out)
        ent = self.entries.get(key)
        if ent is None:
            self.misses += 1
            for i, g in enumerate(groups):  # each node's recorded (group, row) as one int, read once planned
                at = i << _ROW
                for m in g.members:
                    m.at = at
                    at += 1
            steps = regroup(list(groups)) if regroup is not None else list(groups)
            plan = build_plan(steps, out, masks, layout)
            spec: list[int | tuple[int, int, list[int]]] = []
            for g in steps:
                pos = [m.at for m in g.members]
                p0 = pos[0]
                i = p0 >> _ROW
                same = p0 == i << _ROW and g.level == groups[i].level and len(groups[i].members) == len(pos) \
                    and pos == list(range(p0, p0 + len(pos)))
                spec.append(i if same else (g.level, g.kid, pos))
            self.entries[key] = _Cached(plan, spec)
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)
            return plan, steps
        self.hits += 1
        self.entries.move_to_end(key)
        steps = []
        for s in ent.groups:
            if isinstance(s, int):
                steps.append(groups[s])
                continue
            level, kid, pos = s
            g = Group(level, kid)
            ms = g.members
            for r, a in enumerate(pos):
                m = groups[a >> _ROW].members[a & _ROWS]
                m.grp = g
                m.row = r
                m.level = level
                ms.append(m)
            steps.append(g)
        return _refill(ent.plan, steps, out, masks or {}), steps


def _refill(cached: Plan, groups: Sequence[Group], out: LazyTensor, deferred: dict[int, Any]) -> Plan:
    """``cached`` with what carries data rebuilt from ``groups`` (already in the cached row order)."""
    with numbered(groups):
        return _refill_numbered(cached, groups, out, deferred)


def _refill_numbered(cached: Plan, groups: Sequence[Group], out: LazyTensor, deferred: dict[int, Any]) -> Plan:
    runs = [{} if st.chunks is None else run_index(st.chunks) for st in cached.steps]
    steps = []
    for st, g in zip(cached.steps, groups, strict=True):
        ms = g.members
        if not st.batched:
            cols: list[Any] = [[reference(x, deferred) for x in m.inputs] for m in ms]
        else:
            cols = []
            first = ms[0]
            for j, c in enumerate(st.cols):
                kind = c[0]
                if kind in (D, M) or (kind == L and any(p[0] < 0 for p in c[1])):
                    cols.append(column(j, first.inputs[j], ms, deferred, runs))
                else:
                    cols.append(c)
        steps.append(Step(st.kid, st.n, st.batched, cols, st.chunks, st.merged))
    plan = Plan(steps, cached.out, ops=cached.ops,
                masks=[m[1:] for m in sorted(deferred.values(), key=lambda m: m[0])])
    if cached.out is None:
        plan.value = reference(out, deferred)[1]
    return plan


__all__ = ["PlanCache", "structure_key"]
