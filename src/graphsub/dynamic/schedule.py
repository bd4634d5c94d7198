"""When each recorded node runs: its batch group's level, chosen per op key so that same-key nodes share steps.

The tracer levels nodes *as soon as possible* (one more than their inputs), which is what batches the cells of
a tree: every leaf at level 1, every node of height ``h`` at level ``h``.  It splits what comes after them,
though: the readout of a tree (dropout, output layer, loss) sits at its root's level, so 20 trees of 20
different heights give 20 readout steps of one row each.  Scheduled *as late as possible* (height below the
output subtracted from the deepest level) those nodes all land on the same level -- DyNet's agenda-based
autobatching reaches the same by delaying the nodes that can wait.

:func:`relevel` takes, per op key, whichever of the two gives its nodes fewer distinct levels (ties keep the
tracer's), then pushes every node after its inputs again (a node chosen late can only move its consumers
later), and regroups.  Values and gradients are unchanged; only the steps' membership is.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphsub.dynamic.dag import Group
from graphsub.dynamic.lazy import LazyTensor


def relevel(groups: Sequence[Group]) -> list[Group]:
    """``groups`` (one trace's pending groups) regrouped by the chosen levels (module docstring), by level then
    key id; the nodes' ``level``, ``grp`` and ``row`` are updated.  Returns the groups unchanged when no op key
    gains."""
    nodes = sorted((m for g in groups for m in g.members), key=lambda n: n.gid)
    inplan = {id(n) for n in nodes}
    height: dict[int, int] = {}
    for n in reversed(nodes):  # consumers come after their inputs: heights below the output, in one sweep
        h = height.get(id(n), 0) + 1
        for y in n.inputs:
            if type(y) is LazyTensor:
                c = y if y.part < 0 else y.inputs[0]
                if id(c) in inplan and height.get(id(c), 0) < h:
                    height[id(c)] = h
    top = max(n.level for n in nodes)
    asap: dict[int, set[int]] = {}
    alap: dict[int, set[int]] = {}
    for n in nodes:
        asap.setdefault(n.kid, set()).add(n.level)
        alap.setdefault(n.kid, set()).add(top - height.get(id(n), 0))
    late = {k for k in asap if len(alap[k]) < len(asap[k])}
    if not late:
        return list(groups)
    level: dict[int, int] = {}
    out: dict[int, Group] = {}
    for n in nodes:
        lv = top - height.get(id(n), 0) if n.kid in late else 1
        for y in n.inputs:
            if type(y) is LazyTensor:
                c = y if y.part < 0 else y.inputs[0]
                got = level.get(id(c))
                if got is not None and got >= lv:
                    lv = got + 1
        level[id(n)] = lv
        n.level = lv
        gk = lv * 4294967296 + n.kid
        g = out.get(gk)
        if g is None:
            g = out[gk] = Group(lv, n.kid)
        n.grp = g
        n.row = len(g.members)
        g.members.append(n)
    return [out[k] for k in sorted(out)]


__all__ = ["relevel"]
