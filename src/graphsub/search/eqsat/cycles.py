"""Cycle filtering (Tensat's ``remove_cycle_by_order`` in its ``src/rewrites.rs``).

Rewrites such as ``x -> split(concat(x, y))#0`` put an e-node into a class its own descendants
belong to, so the e-graph has cycles, and an extraction that picks such nodes is not a graph.
After each iteration, :func:`filter_cycles` walks the e-graph from the roots (depth first, over
non-blacklisted e-nodes); on each back edge the e-nodes along the cycle are known, and the most
recently added one is blacklisted.  Passes repeat until a pass finds no cycle.  Blacklisted
e-nodes are neither matched nor extracted.  Extraction still checks acyclicity itself (the
filter only looks at the part reachable from the roots, and later unions can close new cycles).
"""

from __future__ import annotations

from collections.abc import Sequence

from graphsub.search.eqsat.egraph import EGraph, ENode


def _one_pass(eg: EGraph, roots: Sequence[int]) -> int:
    bl = eg.blacklist
    birth = eg.birth
    state: dict[int, int] = {}  # 1 = on the path, 2 = done
    found = 0
    for root in roots:
        root = eg.find(root)
        if state.get(root):
            continue
        # frame: class, its e-nodes, e-node index, child index; path_nodes parallel to frames
        frames: list[list[object]] = [[root, list(eg.nodes_of(root)), 0, 0]]
        state[root] = 1
        path_cls: list[int] = [root]
        while frames:
            fr = frames[-1]
            cid, nodes, i, j = fr[0], fr[1], fr[2], fr[3]
            assert isinstance(cid, int) and isinstance(nodes, list) and isinstance(i, int) and isinstance(j, int)
            if i >= len(nodes):
                frames.pop()
                path_cls.pop()
                state[cid] = 2
                continue
            node: ENode = nodes[i]
            if node in bl or j >= len(node[1]):
                fr[2], fr[3] = i + 1, 0
                continue
            fr[3] = j + 1
            ch = eg.find(node[1][j])
            st = state.get(ch)
            if st is None:
                state[ch] = 1
                frames.append([ch, list(eg.nodes_of(ch)), 0, 0])
                path_cls.append(ch)
            elif st == 1:
                k = path_cls.index(ch)
                cycle = [f[1][f[2]] for f in frames[k:]]  # type: ignore[index]
                newest = max(cycle, key=lambda n: birth.get(n, 0))
                bl.add(newest)
                found += 1
                if newest is node:
                    fr[2], fr[3] = i + 1, 0
    return found


def filter_cycles(eg: EGraph, roots: Sequence[int], max_passes: int = 20) -> int:
    """Blacklist e-nodes until no cycle is reachable from ``roots``; returns how many."""
    total = 0
    for _ in range(max_passes):
        n = _one_pass(eg, roots)
        total += n
        if n == 0:
            break
    return total


__all__ = ["filter_cycles"]
