"""Random plans, random group splits and the local-search moves (shift, merge, split).

Every function here returns a *well-formed* plan (see :func:`graphsub.layer_fusion.plan.check_plan`)
when given one, and never fuses an op of ``fixed`` (the unfusable ops).  Randomness comes only
from the ``random.Random`` passed in, so equal seeds give equal plans.

* :func:`random_plan` sweeps the ops in topological order; each fusable op joins, with
  probability ``p``, the group of a random producer whose group it can join without closing a
  cycle in the quotient graph, or opens a new group.
* :func:`random_split` cuts a group at a random point of a random topological order of its ops
  and splits both sides into weakly connected components: a down-set of a convex group is
  convex, so the pieces keep the plan acyclic.
* :func:`mutate` applies one move: *shift* an op across a group boundary, *merge* two adjacent
  groups, or *split* a group (:func:`random_split`); infeasible proposals are retried.

>>> import random
>>> from graphsub import zoo
>>> from graphsub.layer_fusion.graph import fusion_graph
>>> from graphsub.layer_fusion.plan import check_plan
>>> fg = fusion_graph(zoo.get("mobilenet_v2"))
>>> rng = random.Random(0)
>>> p = random_plan(fg, rng, p=0.8)
>>> q = mutate(fg, p, rng)
>>> check_plan(fg, p), check_plan(fg, q), p != q
([], [], True)
"""

from __future__ import annotations

import random
from collections.abc import Collection

from graphsub.layer_fusion.graph import FusionGraph
from graphsub.layer_fusion.plan import FusionPlan, Group, components, is_connected, quotient_cycle

MOVES = ("shift", "merge", "split")


def _reaches(succ: dict[int, set[int]], src: int, dst: int) -> bool:
    """Whether group ``dst`` is reachable from group ``src`` in the quotient ``succ``."""
    stack = [src]
    seen = {src}
    while stack:
        g = stack.pop()
        if g == dst:
            return True
        for h in succ.get(g, ()):
            if h not in seen:
                seen.add(h)
                stack.append(h)
    return False


def random_plan(fg: FusionGraph, rng: random.Random, p: float | None = None,
                fixed: Collection[int] = ()) -> FusionPlan:
    """A random well-formed plan (see the module docstring); ``p=None`` draws ``p`` in [0, 1)."""
    if p is None:
        p = rng.random()
    n = fg.num_ops
    label = [-1] * n
    succ: dict[int, set[int]] = {}
    next_label = 0
    for v in range(n):
        preds = [u for u in fg.preds[v] if u < n]
        choice = -1
        if v not in fixed and preds and rng.random() < p:
            cands = sorted({label[u] for u in preds if u not in fixed})
            rng.shuffle(cands)
            for g in cands:
                # v joins g: a cycle appears iff another producer's group h is reachable from g
                others = {label[u] for u in preds} - {g}
                if not any(_reaches(succ, g, h) for h in others):
                    choice = g
                    break
        if choice < 0:
            choice = next_label
            next_label += 1
        label[v] = choice
        for u in preds:
            if label[u] != choice:
                succ.setdefault(label[u], set()).add(choice)
    return FusionPlan.from_labels(label)


def random_topo_order(fg: FusionGraph, group: Group, rng: random.Random) -> list[int]:
    """A uniformly chosen next-ready topological order of the ops of ``group``."""
    members = set(group)
    indeg = {v: sum(1 for u in fg.preds[v] if u in members) for v in group}
    ready = [v for v in group if indeg[v] == 0]
    order: list[int] = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        for c in fg.consumers[v]:
            if c in members:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
    return order


def random_split(fg: FusionGraph, group: Group, rng: random.Random) -> list[Group]:
    """Split ``group`` (>= 2 ops) into >= 2 convex, weakly connected pieces at random."""
    if len(group) < 2:
        return [group]
    order = random_topo_order(fg, group, rng)
    k = rng.randrange(1, len(order))
    return components(fg, order[:k]) + components(fg, order[k:])


def _boundary_edge(fg: FusionGraph, labels: tuple[int, ...], rng: random.Random,
                   fixed: Collection[int]) -> tuple[int, int] | None:
    """A random edge between two groups (neither end in ``fixed``), or ``None`` if there is none."""
    edges = [(u, v) for u, v in fg.edges() if labels[u] != labels[v] and u not in fixed and v not in fixed]
    return edges[rng.randrange(len(edges))] if edges else None


def _acyclic(fg: FusionGraph, labels: list[int]) -> FusionPlan | None:
    """The plan of ``labels`` if its quotient graph is acyclic, else ``None``."""
    cand = FusionPlan.from_labels(labels)
    return cand if quotient_cycle(fg, cand.labels) is None else None


def _shift(fg: FusionGraph, plan: FusionPlan, rng: random.Random, fixed: Collection[int]) -> FusionPlan | None:
    lab = plan.labels
    edge = _boundary_edge(fg, lab, rng, fixed)
    if edge is None:
        return None
    u, v = edge
    mover, target = (u, lab[v]) if rng.random() < 0.5 else (v, lab[u])
    src = plan.groups[lab[mover]]
    rest = tuple(x for x in src if x != mover)
    if rest and not is_connected(fg, rest):
        return None
    new = list(lab)
    new[mover] = target
    return _acyclic(fg, new)


def _merge(fg: FusionGraph, plan: FusionPlan, rng: random.Random, fixed: Collection[int]) -> FusionPlan | None:
    lab = plan.labels
    edge = _boundary_edge(fg, lab, rng, fixed)
    if edge is None:
        return None
    a, b = lab[edge[0]], lab[edge[1]]
    return _acyclic(fg, [a if x == b else x for x in lab])


def _split(fg: FusionGraph, plan: FusionPlan, rng: random.Random, fixed: Collection[int]) -> FusionPlan | None:
    big = [g for g in plan.groups if len(g) > 1]
    if not big:
        return None
    g = big[rng.randrange(len(big))]
    return plan.replace(g, random_split(fg, g, rng))


_MOVE_FNS = {"shift": _shift, "merge": _merge, "split": _split}


def mutate(fg: FusionGraph, plan: FusionPlan, rng: random.Random, fixed: Collection[int] = (),
           moves: tuple[str, ...] = MOVES, tries: int = 20) -> FusionPlan:
    """One random 1-edit move of ``plan`` (shift / merge / split); ``plan`` itself if no move
    is feasible after ``tries`` proposals."""
    for _ in range(tries):
        move = moves[rng.randrange(len(moves))]
        cand = _MOVE_FNS[move](fg, plan, rng, fixed)
        if cand is not None and cand != plan:
            return cand
    return plan


def crossover(fg: FusionGraph, a: FusionPlan, b: FusionPlan, rng: random.Random) -> FusionPlan:
    """Child taking ``a``'s groups on the ops ``< k`` and ``b``'s on the rest (``k`` random),
    each cut into weakly connected components.  Ops ``< k`` form a down-set, so the child is
    well formed when both parents are."""
    n = fg.num_ops
    k = rng.randrange(1, n) if n > 1 else n
    groups: list[Group] = []
    for g in a.groups:
        head = [v for v in g if v < k]
        if head:
            groups.extend(components(fg, head))
    for g in b.groups:
        tail = [v for v in g if v >= k]
        if tail:
            groups.extend(components(fg, tail))
    return FusionPlan(groups)


__all__ = ["MOVES", "crossover", "mutate", "random_plan", "random_split", "random_topo_order"]
