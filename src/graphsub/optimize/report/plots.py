"""Charts for the optimization report, drawn with matplotlib's object-oriented API on the Agg canvas.

No pyplot and no global backend switch: each chart is a :class:`matplotlib.figure.Figure` attached to
its own :class:`~matplotlib.backends.backend_agg.FigureCanvasAgg`, rendered to PNG bytes without the
``Software`` metadata (so equal inputs give byte-identical images) and embedded as a ``data:`` URI.
matplotlib is imported inside the functions, so importing :mod:`graphsub` stays fast.

>>> uri = histogram_png({"add": 3, "matmul": 4}, {"add": 1, "matmul": 4, "concat": 1})
>>> uri.startswith("data:image/png;base64,")
True
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

BEFORE_COLOUR = "#9aa5b1"
AFTER_COLOUR = "#2f6fb3"
FONT = 9


def new_figure(width_in: float, height_in: float) -> Any:
    """A Figure on an Agg canvas (``width_in`` x ``height_in`` inches), not registered with pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Any, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (no ``Software`` metadata, so the bytes depend only on the drawing)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` for PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def histogram_png(before: Mapping[str, int], after: Mapping[str, int], *, dpi: int = 100) -> str:
    """Grouped horizontal bar chart of op counts before vs after (ops sorted by name, the first at
    the top), as a data URI; each bar is labelled with its count."""
    ops = sorted(set(before) | set(after))
    fig = new_figure(7.5, max(1.6, 0.42 * len(ops) + 1.0))
    ax = fig.add_subplot()
    h = 0.38
    ys = range(len(ops))
    b = [before.get(o, 0) for o in ops]
    a = [after.get(o, 0) for o in ops]
    bars_b = ax.barh([y - h / 2 for y in ys], b, height=h, color=BEFORE_COLOUR, label="before")
    bars_a = ax.barh([y + h / 2 for y in ys], a, height=h, color=AFTER_COLOUR, label="after (search result)")
    ax.bar_label(bars_b, padding=2, fontsize=FONT - 1)
    ax.bar_label(bars_a, padding=2, fontsize=FONT - 1)
    ax.set_yticks(list(ys), ops, fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlabel("number of ops", fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT - 1)
    ax.set_xlim(0, max([*b, *a, 1]) * 1.15)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=FONT - 1, loc="lower right", frameon=False)
    return data_uri(png_bytes(fig, dpi))


def trace_png(trace: Sequence[tuple[float, float]], *, initial: float, best: float, dpi: int = 100) -> str:
    """Best cost found vs search time (a step line through the improvements), as a data URI."""
    fig = new_figure(7.5, 3.2)
    ax = fig.add_subplot()
    pts = sorted(p for p in trace if math.isfinite(p[1])) or [(0.0, initial if math.isfinite(initial) else 0.0)]
    if not math.isfinite(initial):  # e.g. the input breaks a cost model limit: start the axis at the first finite
        initial = pts[0][1]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    ax.plot(xs, ys, drawstyle="steps-post", color=AFTER_COLOUR, linewidth=1.8)
    ax.plot(xs[:-1] if len(xs) > 1 else xs, ys[:-1] if len(ys) > 1 else ys, "o", color=AFTER_COLOUR,
            markersize=3.5, label="new best")
    ax.axhline(initial, color=BEFORE_COLOUR, linestyle="--", linewidth=1, label=f"initial {initial:.6g}")
    label = f"best {best:.6g}" if math.isfinite(best) else "no finite cost"
    ax.annotate(label, (xs[-1], ys[-1]), textcoords="offset points", xytext=(0, -5), ha="right",
                va="top", fontsize=FONT - 1, color=AFTER_COLOUR)  # below the last (lowest) plateau
    lo, hi = min(ys), max(max(ys), initial)
    pad = (hi - lo) * 0.12 or abs(hi) * 0.01 or 1.0
    ax.set_ylim(lo - 1.6 * pad, hi + pad)
    ax.set_xlim(0, max(xs[-1], 1e-3) * 1.02)
    ax.set_xlabel("search time (s)", fontsize=FONT)
    ax.set_ylabel("best cost", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(True, color="#e6e6e6", linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=FONT - 1, loc="upper right", frameon=False)
    return data_uri(png_bytes(fig, dpi))


__all__ = ["data_uri", "histogram_png", "new_figure", "png_bytes", "trace_png"]
