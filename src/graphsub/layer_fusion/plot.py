"""Picture of a fusion plan: ops laid out by depth, coloured by group (matplotlib Figure API on
an Agg canvas; no pyplot, no global backend switch).

Ops are placed in rows by their longest-path depth from the inputs; edges inside a group are
drawn in the group's colour, cut edges (DRAM transfers) in light grey; unfusable ops are grey
crosses.
"""

from __future__ import annotations

from pathlib import Path

from graphsub.layer_fusion.cost import FusionCostModel
from graphsub.layer_fusion.plan import FusionPlan


def draw_plan(cost: FusionCostModel, plan: FusionPlan, path: str | Path, title: str = "") -> Path:
    """Write a PNG of ``plan`` to ``path``; returns the path."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fg = cost.fg
    n = fg.num_ops
    depth = [0] * n
    for v in range(n):
        depth[v] = 1 + max((depth[u] for u in fg.preds[v] if u < n), default=-1)
    slot: dict[int, int] = {}
    xs = [0.0] * n
    for v in range(n):
        xs[v] = slot.get(depth[v], 0)
        slot[depth[v]] = int(xs[v]) + 1
    for v in range(n):  # centre every row
        xs[v] -= (slot[depth[v]] - 1) / 2
    ys = [-d for d in depth]
    lab = plan.labels
    cmap = colormaps["tab20"]
    colour = [cmap(lab[v] % 20) for v in range(n)]
    height = max(4.0, 0.18 * (max(depth) + 1))
    fig = Figure(figsize=(8, height))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for u, v in fg.edges():
        same = lab[u] == lab[v]
        ax.plot([xs[u], xs[v]], [ys[u], ys[v]], color=colour[u] if same else "0.85",
                linewidth=1.6 if same else 0.6, zorder=1)
    fus = [v for v in range(n) if v not in cost.unfusable]
    ax.scatter([xs[v] for v in fus], [ys[v] for v in fus], c=[colour[v] for v in fus], s=18, zorder=2,
               edgecolors="black", linewidths=0.3)
    unf = sorted(cost.unfusable)
    if unf:
        ax.scatter([xs[v] for v in unf], [ys[v] for v in unf], c="0.5", marker="x", s=18, zorder=2,
                   label="unfusable")
        ax.legend(loc="lower right", fontsize=7)
    ax.set_axis_off()
    ax.set_title(title or f"{fg.name}: {len(plan)} groups", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    return out


__all__ = ["draw_plan"]
