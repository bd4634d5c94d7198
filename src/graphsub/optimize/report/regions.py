"""The changed regions of a substitution sequence: replay it step by step, and draw each step's
neighbourhood before and after.

:func:`replay_changes` re-applies a search's sequence to the input graph (by rule name and node ids,
:mod:`graphsub.rules.replay`) and records, per step, the graph before and after, the
matched, removed and added node ids.  :func:`draw_change` draws one step as two panels: the removed
nodes (red; matched nodes that stay, orange) in the graph before the step, and the added nodes
(green) and the consumers rewired to new values (blue) in the graph after it, each with its 1-hop
context greyed, laid out left to right by topological depth within the drawn subgraph.

>>> from graphsub.ir.builder import Builder
>>> from graphsub.rules.library import find_rule
>>> b = Builder()
>>> x = b.input("x", (2, 4))
>>> g = b.build(b.relu(b.identity(x)))
>>> rule = find_rule("cpu_identity_remove")
>>> from graphsub.rules.replay import first_step
>>> changes, error = replay_changes(g, [rule], [first_step(g, rule)])
>>> error, [(c.rule, [g.nodes[n].op for n in c.removed], [c.after.nodes[n].op for n in c.rewired]) for c in changes]
('', [('cpu_identity_remove', ['identity'], ['relu'])])
>>> draw_change(changes[0]).startswith("data:image/png;base64,")
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from graphsub.errors import GraphsubError, RuleError
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node
from graphsub.optimize.report.plots import FONT, data_uri, new_figure, png_bytes
from graphsub.rules.cleanup import replay_cleanup
from graphsub.rules.replay import StepLike, replay_steps
from graphsub.rules.rule import Rule

REMOVED = "#f4b6b0"  # fill colours; edges of the boxes are darker versions
MATCHED = "#fbd9a5"
ADDED = "#b9e4b3"
REWIRED = "#cfe0f6"
CONTEXT = "#eeeeee"
EDGE = {REMOVED: "#b3362b", MATCHED: "#c07d12", ADDED: "#2e7d32", REWIRED: "#2f6fb3", CONTEXT: "#9e9e9e"}
MAX_CONTEXT = 24  # context nodes drawn per panel at most


@dataclass(frozen=True)
class Change:
    """One replayed substitution: ``before`` -> ``after`` by ``rule`` matched at ``matched`` (ids in
    ``before``), removing ``removed`` (ids in ``before``), adding ``added`` (ids in ``after``) and
    rewiring the inputs of ``rewired`` (kept nodes, same ids in both)."""

    index: int  # 1-based step number
    rule: str
    before: Graph
    after: Graph
    matched: tuple[int, ...]
    removed: tuple[int, ...]
    added: tuple[int, ...]
    rewired: tuple[int, ...] = ()


def replay_changes(graph: Graph, rules: Sequence[Rule], steps: Sequence[StepLike]) -> tuple[list[Change], str]:
    """Replay ``steps`` from ``graph``: the changes replayed, and why replay stopped early ('' if it
    did not).  Rules are looked up in ``rules`` by name, then in the rule library. A leading clean-up step
    (:data:`graphsub.rules.cleanup.CLEANUP_STEP`) is replayed as a whole and has no change of its own."""
    known = {r.name: r for r in rules}
    for step in steps:
        if step.rule not in known:
            try:
                from graphsub.rules.library import find_rule

                known[step.rule] = find_rule(step.rule)
            except GraphsubError:
                pass  # replay_steps names the unknown rule
    changes: list[Change] = []
    graph, rest = replay_cleanup(graph, steps)  # the clean-up step as a whole: no picture, the steps after it have
    first = len(steps) - len(rest)
    try:
        for i, sub in replay_steps(graph, list(known.values()), rest):
            i += first
            info = sub.graph.edit_info()
            g = sub.parent
            rewired = tuple(sorted(n for n in (info[2] if info else ()) if n in g.nodes and n in sub.graph.nodes
                                   and g.nodes[n] is not sub.graph.nodes[n]))
            changes.append(Change(i, sub.rule, g, sub.graph, tuple(steps[i - 1].nodes), tuple(sub.removed),
                                  tuple(sub.added), rewired))
    except RuleError as e:
        return changes, str(e)
    return changes, ""


def op_name(node: Node) -> str:
    """The op, with its fused activation if any (``conv2d+relu``): part of what rules change."""
    act = node.attr.get("act", "none")
    return node.op if act in ("none", None) else f"{node.op}+{act}"


def describe(graph: Graph, nids: Iterable[int]) -> str:
    """``"matmul %80, add %82"``: op and id of each node (ids that are not in ``graph`` as ``%id``)."""
    return ", ".join(f"{op_name(graph.nodes[n])} %{n}" if n in graph.nodes else f"%{n}" for n in nids)


def _label(graph: Graph, nid: int, focus: bool) -> str:
    node = graph.nodes[nid]
    shape = "\u00d7".join(map(str, node.out_types[0].shape)) if node.out_types else ""
    if node.op in ("input", "weight"):
        name = str(node.attr.get("name", ""))
        name = name if len(name) <= 14 else name[:13] + "\u2026"
        return f"{node.op} {name}\n{shape}"
    return f"{op_name(node)}\n%{nid}" + (f"  {shape}" if focus and shape else "")


def neighbourhood(graph: Graph, focus: Iterable[int], max_context: int = MAX_CONTEXT) -> tuple[list[int], int]:
    """``focus`` plus up to ``max_context`` of its producers and consumers (nearest ids first, in
    ascending id order): ``(ids, context nodes left out)``."""
    fset = [n for n in dict.fromkeys(focus) if n in graph.nodes]
    ctx: dict[int, None] = {}
    for n in fset:
        for r in graph.nodes[n].inputs:
            ctx[r.node] = None
        for c, _ in graph.users(n):
            ctx[c] = None
    extra = sorted(c for c in ctx if c not in set(fset))
    return sorted(fset) + extra[:max_context], max(0, len(extra) - max_context)


def layered_positions(nodes: Sequence[int], edges: Sequence[tuple[int, int]],
                      sweeps: int = 2) -> dict[int, tuple[float, float]]:
    """Left-to-right layout: x = topological generation within the subgraph; each column is ordered
    to reduce crossings (barycenter heuristic: ``sweeps`` passes left to right by the mean row of a
    node's producers, then right to left by its consumers; ties by id), centred on y = 0.

    >>> sorted(layered_positions([1, 2, 3, 4], [(1, 4), (2, 3)]).items())  # 4 beside 1, 3 beside 2
    [(1, (0.0, 0.5)), (2, (0.0, -0.5)), (3, (1.0, -0.5)), (4, (1.0, 0.5))]
    """
    import networkx as nx

    dg = nx.DiGraph()
    dg.add_nodes_from(nodes)
    dg.add_edges_from(edges)
    cols = [sorted(gen) for gen in nx.topological_generations(dg)]
    row = {n: float(i) for col in cols for i, n in enumerate(col)}

    def reorder(col: list[int], neighbours: Callable[[int], Iterable[int]]) -> None:
        def key(n: int) -> tuple[float, float, int]:
            rs = [row[m] for m in neighbours(n)]
            return (sum(rs) / len(rs) if rs else row[n], row[n], n)

        col.sort(key=key)
        row.update({n: float(i) for i, n in enumerate(col)})

    for _ in range(sweeps):
        for col in cols[1:]:
            reorder(col, dg.predecessors)
        for col in reversed(cols[:-1]):
            reorder(col, dg.successors)
    return {n: (float(x), (len(col) - 1) / 2 - i) for x, col in enumerate(cols) for i, n in enumerate(col)}


@dataclass
class _Layout:
    ids: list[int]
    edges: list[tuple[int, int]]
    outs: list[tuple[str, int]]  # (output marker, producer)
    pos: dict[int | str, tuple[float, float]]
    left_out: int

    @property
    def size(self) -> tuple[int, float]:
        """``(columns, rows)`` spanned."""
        xs = [p[0] for p in self.pos.values()] or [0.0]
        ys = [p[1] for p in self.pos.values()] or [0.0]
        return int(max(xs)) + 1, max(ys) - min(ys) + 1


def _layout(graph: Graph, colours: dict[int, str]) -> _Layout:
    """Positions of the coloured nodes, their 1-hop context, and a marker for each graph output the
    drawn nodes produce (next column, nearest free row)."""
    ids, left_out = neighbourhood(graph, colours)
    idset = set(ids)
    edges = sorted({(r.node, n) for n in ids for r in graph.nodes[n].inputs if r.node in idset})
    outs = [(f"out:{name}", r.node) for name, r in zip(graph.output_names, graph.outputs, strict=True)
            if r.node in idset]
    pos: dict[int | str, tuple[float, float]] = {}
    for n, xy in layered_positions(ids, edges).items():
        pos[n] = xy
    for name, src in outs:
        x, y = pos[src][0] + 1, pos[src][1]
        taken = [q[1] for q in pos.values() if q[0] == x]
        y = next(y + d for k in range(len(taken) + 1) for d in ((-k, k) if k else (0,))
                 if all(abs(y + d - t) > 0.5 for t in taken))
        pos[name] = (x, y)
    return _Layout(ids, edges, outs, pos, left_out)


def _panel(ax: Any, graph: Graph, colours: dict[int, str], title: str) -> None:
    """Draw the neighbourhood of the coloured nodes of ``graph`` on ``ax``."""
    lay = _layout(graph, colours)
    pos = lay.pos
    artists: dict[int | str, Any] = {}
    for n in lay.ids:
        fill = colours.get(n, CONTEXT)
        focus = n in colours
        artists[n] = ax.text(
            *pos[n], _label(graph, n, focus), ha="center", va="center", fontsize=FONT if focus else FONT - 1,
            fontweight="bold" if focus else "normal", color="#222222" if focus else "#757575", zorder=3,
            bbox={"boxstyle": "round,pad=0.35", "facecolor": fill, "edgecolor": EDGE[fill],
                  "linewidth": 1.2 if focus else 0.7})
    for name, _ in lay.outs:
        artists[name] = ax.text(*pos[name], name.split(":", 1)[1], ha="center", va="center",
                                fontsize=FONT - 1, style="italic", color="#444444", zorder=3,
                                bbox={"boxstyle": "rarrow,pad=0.3", "facecolor": "white", "edgecolor": "#888888",
                                      "linewidth": 0.7})
    arrow = {"arrowstyle": "-|>", "color": "#8a8a8a", "linewidth": 0.8, "shrinkA": 1, "shrinkB": 1,
             "mutation_scale": 8}
    links: list[tuple[int | str, int | str]] = [*lay.edges, *((src, name) for name, src in lay.outs)]
    for a, b in links:
        ax.annotate("", xy=(0.0, 0.5), xycoords=artists[b], xytext=(1.0, 0.5),
                    textcoords=artists[a], arrowprops=arrow, zorder=2)
    ncols, _ = lay.size
    ys = [p[1] for p in pos.values()] or [0.0]
    ax.set_xlim(-0.6, ncols - 0.4)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.set_axis_off()
    more = f" (+{lay.left_out} context nodes not drawn)" if lay.left_out else ""
    ax.set_title(title + more, fontsize=FONT, loc="left")


def draw_change(change: Change, *, dpi: int = 90) -> str:
    """One substitution as a PNG data URI: before (removed red, matched-but-kept orange) | after (added
    green, consumers rewired blue)."""
    before = {n: REMOVED for n in change.removed}
    before.update({n: MATCHED for n in change.matched if n not in before and n in change.before.nodes})
    after = {n: ADDED for n in change.added}
    after.update({n: REWIRED for n in change.rewired if n not in after})
    (c1, r1), (c2, r2) = _layout(change.before, before).size, _layout(change.after, after).size if after else (1, 1)
    width = min(14.0, 1.25 * (c1 + c2) + 0.8)
    fig = new_figure(width, max(1.9, 0.62 * max(r1, r2) + 0.7))
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[max(c1, 1), max(c2, 1)])
    _panel(ax1, change.before, before, f"before step {change.index}: removed")
    if after:
        what = ", ".join(w for w, ids in (("added", change.added), ("rewired", change.rewired)) if ids)
        _panel(ax2, change.after, after, f"after step {change.index}: {what}")
    else:
        ax2.set_axis_off()
        ax2.text(0.5, 0.5, "nothing added or rewired", ha="center", va="center",
                 fontsize=FONT, color="#555555", transform=ax2.transAxes)
    return data_uri(png_bytes(fig, dpi))


__all__ = ["Change", "describe", "draw_change", "layered_positions", "neighbourhood", "op_name", "replay_changes"]
