"""Fusion plans: partitions of a :class:`~graphsub.layer_fusion.graph.FusionGraph`'s ops into groups.

A :class:`FusionPlan` is an immutable, hashable value (search memoizes on it).  A plan is
*well formed* for a graph (:func:`check_plan`) when

1. the groups partition ``0..n-1`` (every op in exactly one group);
2. every group is weakly connected through op-to-op edges;
3. the quotient graph (one node per group, an edge ``g -> h`` per graph edge from ``g`` to
   ``h``) is acyclic -- which implies every group is convex;
4. every op in ``fixed`` (the unfusable ops) is a group of its own.

Canonical form: each group is a sorted tuple of op ids, groups sorted by their smallest op;
equal partitions give equal plans whatever order they were built in.

>>> from graphsub import zoo
>>> from graphsub.layer_fusion.graph import fusion_graph
>>> fg = fusion_graph(zoo.get("resnet", blocks=1))   # 0 conv(x), 1 conv(x), 2 conv(1), 3 add(0, 2), 4 relu
>>> p = FusionPlan.singletons(fg.num_ops)
>>> len(p), check_plan(fg, p), FusionPlan([(4, 3), (2, 1, 0)]).groups
(5, [], ((0, 1, 2), (3, 4)))
>>> check_plan(fg, FusionPlan([(0, 2), (1,), (3, 4)]))
['group [0, 2] is not weakly connected']
>>> check_plan(fg, FusionPlan([(0, 1, 3), (2,), (4,)]))   # {0,1,3} connected only through 2
['quotient graph is cyclic (groups on or after a cycle: [0, 1, 2])', 'group [0, 1, 3] is not weakly connected']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from graphsub.errors import GraphError
from graphsub.layer_fusion.graph import FusionGraph

Group = tuple[int, ...]


class FusionPlan:
    """An immutable partition of op ids into fusion groups (canonical, hashable)."""

    __slots__ = ("_hash", "_labels", "groups")

    groups: tuple[Group, ...]
    _hash: int
    _labels: tuple[int, ...] | None

    def __init__(self, groups: Iterable[Iterable[int]]):
        gs = [tuple(sorted(g)) for g in groups]
        if any(not g for g in gs):
            raise GraphError("a fusion group cannot be empty")
        gs.sort(key=lambda g: g[0])
        object.__setattr__(self, "groups", tuple(gs))
        object.__setattr__(self, "_hash", hash(self.groups))
        object.__setattr__(self, "_labels", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("FusionPlan is immutable")

    @classmethod
    def singletons(cls, num_ops: int) -> FusionPlan:
        """Every op its own group (no fusion)."""
        return cls((v,) for v in range(num_ops))

    @classmethod
    def from_labels(cls, labels: Sequence[int]) -> FusionPlan:
        """Plan whose group of op ``v`` is ``labels[v]`` (any hashable label)."""
        by: dict[int, list[int]] = {}
        for v, lab in enumerate(labels):
            by.setdefault(lab, []).append(v)
        return cls(by.values())

    @property
    def labels(self) -> tuple[int, ...]:
        """Group index (position in ``groups``) of every op."""
        lab = self._labels
        if lab is None:
            out = [0] * sum(len(g) for g in self.groups)
            for i, g in enumerate(self.groups):
                for v in g:
                    out[v] = i
            lab = tuple(out)
            object.__setattr__(self, "_labels", lab)
        return lab

    def replace(self, old: Group, new: Iterable[Iterable[int]]) -> FusionPlan:
        """The plan with group ``old`` replaced by the groups ``new`` (same ops)."""
        return FusionPlan([g for g in self.groups if g != old] + [tuple(g) for g in new])

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self) -> Iterator[Group]:
        return iter(self.groups)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FusionPlan):
            return NotImplemented
        return self._hash == other._hash and self.groups == other.groups

    def __repr__(self) -> str:
        return f"FusionPlan({len(self.groups)} groups: {list(self.groups)[:6]}{'...' if len(self) > 6 else ''})"

    def __reduce__(self) -> tuple[object, ...]:
        return (FusionPlan, (self.groups,))


def is_connected(fg: FusionGraph, group: Iterable[int]) -> bool:
    """Whether ``group`` is weakly connected through op-to-op edges."""
    members = set(group)
    if not members:
        return False
    start = next(iter(members))
    seen = {start}
    stack = [start]
    n = fg.num_ops
    while stack:
        v = stack.pop()
        for u in fg.preds[v]:
            if u < n and u in members and u not in seen:
                seen.add(u)
                stack.append(u)
        for u in fg.consumers[v]:
            if u in members and u not in seen:
                seen.add(u)
                stack.append(u)
    return len(seen) == len(members)


def components(fg: FusionGraph, ops: Iterable[int]) -> list[Group]:
    """Weakly connected components of the subgraph induced by ``ops`` (sorted)."""
    members = set(ops)
    out: list[Group] = []
    n = fg.num_ops
    while members:
        start = min(members)
        members.discard(start)
        comp = [start]
        stack = [start]
        while stack:
            v = stack.pop()
            for u in (*[p for p in fg.preds[v] if p < n], *fg.consumers[v]):
                if u in members:
                    members.discard(u)
                    comp.append(u)
                    stack.append(u)
        out.append(tuple(sorted(comp)))
    return out


def quotient_cycle(fg: FusionGraph, labels: Sequence[int]) -> list[int] | None:
    """Groups left on a cycle of the quotient graph (Kahn's algorithm), or None if acyclic."""
    k = max(labels) + 1 if labels else 0
    succ: list[set[int]] = [set() for _ in range(k)]
    indeg = [0] * k
    for u, v in fg.edges():
        a, b = labels[u], labels[v]
        if a != b and b not in succ[a]:
            succ[a].add(b)
            indeg[b] += 1
    ready = [g for g in range(k) if indeg[g] == 0]
    done = 0
    while ready:
        g = ready.pop()
        done += 1
        for h in succ[g]:
            indeg[h] -= 1
            if indeg[h] == 0:
                ready.append(h)
    if done == k:
        return None
    return sorted(g for g in range(k) if indeg[g] > 0)


def check_plan(fg: FusionGraph, plan: FusionPlan, fixed: Iterable[int] = ()) -> list[str]:
    """Problems with ``plan`` on ``fg`` (empty list: well formed; see the module docstring)."""
    problems: list[str] = []
    seen: set[int] = set()
    for g in plan.groups:
        for v in g:
            if v in seen:
                problems.append(f"op {fg.label(v)} is in two groups")
            seen.add(v)
    if seen != set(range(fg.num_ops)):
        missing = sorted(set(range(fg.num_ops)) - seen)[:5]
        extra = sorted(seen - set(range(fg.num_ops)))[:5]
        problems.append(f"groups do not partition the ops (missing {missing}, unknown {extra})")
        return problems
    fixed_set = set(fixed)
    for g in plan.groups:
        if len(g) > 1 and fixed_set.intersection(g):
            problems.append(f"unfusable op(s) {sorted(fixed_set.intersection(g))} fused in group {g[:8]}")
        if not is_connected(fg, g):
            problems.append(f"group {list(g[:8])} is not weakly connected")
    cyc = quotient_cycle(fg, plan.labels)
    if cyc is not None:
        problems.insert(0, f"quotient graph is cyclic (groups on or after a cycle: {cyc[:8]})")
    return problems


def is_well_formed(fg: FusionGraph, plan: FusionPlan, fixed: Iterable[int] = ()) -> bool:
    return not check_plan(fg, plan, fixed)


__all__ = ["FusionPlan", "Group", "check_plan", "components", "is_connected", "is_well_formed", "quotient_cycle"]
