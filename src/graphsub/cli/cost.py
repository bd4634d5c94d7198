"""``graphsub cost`` and ``graphsub profile``: price a model with a cost model, fill the op-time cache.

The lead registers the two command functions on the main app::

    app.command("cost")(cost_cmd)
    app.command("profile")(profile_cmd)

``cost`` prints the per-op costs grouped by operator signature (top N by the model's objective)
and the total; ``profile`` times every distinct op of a model that the SQLite cache lacks and
reports hits, misses and the time spent.  Both accept ``--json``.  Exit codes as in
:mod:`graphsub.cli` (2 usage, e.g. an unknown ``--model``; 3 bad input).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from graphsub.cli.common import Exit, JsonOpt, ShapeOpt, err, fail, load_graph, out, parse_shapes
from graphsub.errors import GraphsubError

ModelSpecOpt = Annotated[str, typer.Option(
    "--model", "-m",
    help="Cost model: flops, bytes, launches, roofline:cpu, roofline:v100, roofline:p100, measured, measured:all, "
         "fused (fusion-aware measured model for ORT_ENABLE_ALL); append \\[min] to a measured model to use the "
         "fastest of the repeats instead of the median. ort-kernels: the kernels of ONNX Runtime's own optimized "
         "graph (ORT_ENABLE_ALL, fused contrib ops included), each timed alone; it prices the file as ONNX Runtime "
         "runs it (a whole model at a time, so search does not use it).")]
ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", help="onnxruntime intra-op threads for measured models (default: all cores).")]
CacheOpt = Annotated[Path | None, typer.Option(
    "--cache", help="SQLite op-time cache (default: $GRAPHSUB_CACHE or ~/.cache/graphsub/op_times.sqlite).")]
TopOpt = Annotated[int, typer.Option("--top", "-n", help="Show the N most expensive op signatures (0: all).")]


def _fmt(dim: str, v: float) -> str:
    if dim == "time_ms":
        return f"{v:.4g} ms"
    for unit in ("", "K", "M", "G", "T"):
        if abs(v) < 1000:
            return f"{v:.3g}{unit}"
        v /= 1000
    return f"{v:.3g}P"


def _objective_dim(model: Any) -> str:
    obj = model.objective
    return obj if isinstance(obj, str) else max(obj, key=lambda k: obj[k])


def _make_model(spec: str, threads: int | None, cache: Path | None, as_json: bool) -> Any:
    from graphsub.cost import get_model

    try:
        return get_model(spec, threads=threads, cache=cache, progress=not as_json)
    except GraphsubError as e:
        fail(Exit.USAGE, str(e), as_json)


def cost_cmd(
    model: Annotated[str, typer.Argument(help="An .onnx file or zoo:NAME.")],
    cost_model: ModelSpecOpt = "flops",
    top: TopOpt = 15,
    threads: ThreadsOpt = None,
    cache: CacheOpt = None,
    input_shape: ShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a model's cost: per-op costs grouped by operator signature (top N) and the total."""
    g = load_graph(model, parse_shapes(input_shape), as_json)
    if cost_model == "ort-kernels":
        _ort_kernels(model, g, top, threads, cache, as_json)
        return
    m = _make_model(cost_model, threads, cache, as_json)
    t = time.perf_counter()
    try:
        rows = m.breakdown(g)
        total = m.graph_cost(g)
    except GraphsubError as e:
        fail(Exit.BAD_INPUT, str(e), as_json)
    seconds = time.perf_counter() - t
    dim = _objective_dim(m)
    scalar_total = m.scalar(total)
    shown = rows if top <= 0 else rows[:top]
    ops = [{"op": r.sig.op, "signature": r.label, "consts": "".join("c" if c else "x" for c in r.consts),
            "count": r.count, "cost": r.cost.as_dict(), "scalar": m.scalar(r.cost),
            "share": m.scalar(r.cost) / scalar_total if scalar_total else 0.0} for r in shown]
    data: dict[str, Any] = {"model": g.name, "cost_model": m.name, "objective": m.objective, "total": total.as_dict(),
                            "scalar": scalar_total, "num_signatures": len(rows), "seconds": seconds, "ops": ops}
    if hasattr(m, "stats"):
        s = m.stats
        data["cache"] = {"path": str(m.cache.path), "memory_hits": s.memory_hits, "db_hits": s.db_hits,
                         "misses": s.misses, "hit_rate": s.hit_rate, "measure_seconds": s.measure_s}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table("#", "op signature", "n", dim, "share", title=f"{g.name}: {m.name} (top {len(shown)} of {len(rows)})")
    table.columns[1].overflow = "fold"
    for i, row in enumerate(ops, 1):
        table.add_row(str(i), escape(row["signature"]), str(row["count"]), _fmt(dim, row["cost"][dim]),
                      f"{100 * row['share']:.1f}%")
    out.print(table)
    out.print("total: " + ", ".join(f"{k} {_fmt(k, v)}" for k, v in total.as_dict().items()))
    if "cache" in data:
        c = data["cache"]
        out.print(f"cache {c['path']}: hit rate {100 * c['hit_rate']:.0f}% ({c['misses']} measured in "
                  f"{c['measure_seconds']:.1f}s)")


def _ort_kernels(model: str, g: Any, top: int, threads: int | None, cache: Path | None, as_json: bool) -> None:
    """``cost --model ort-kernels``: the kernels ONNX Runtime runs, by type (:mod:`graphsub.cost.ort_kernels`)."""
    from graphsub.cost.env import all_cores
    from graphsub.cost.ort_kernels import OrtKernelPricer
    from graphsub.data import random_inputs
    from graphsub.frontends.onnx_export import export_graph

    n = threads or all_cores()
    src: bytes | str = model if model.endswith(".onnx") else export_graph(g).SerializeToString()
    try:
        price = OrtKernelPricer(threads=n, cache=cache).price(src, random_inputs(g, 0))
    except GraphsubError as e:
        fail(Exit.BAD_INPUT, str(e), as_json)
    counts, by_op = price.counts(), price.by_op()
    total = price.estimate_ms(n)
    rows: list[dict[str, Any]] = [
        {"kernel": op, "count": counts[op], "ms": ms, "share": ms / price.sum_ms if price.sum_ms else 0.0}
        for op, ms in by_op.items()]
    shown = rows if top <= 0 else rows[:top]
    data = {"model": g.name, "cost_model": "ort-kernels", "threads": n, "estimate_ms": total, "sum_ms": price.sum_ms,
            "kernels": len(price.kernels), "unpriced": price.unpriced, "measured": price.measured,
            "seconds": price.seconds, "by_kernel": shown}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table("#", "kernel", "n", "time_ms", "share",
                  title=f"{g.name}: ONNX Runtime's kernels at {n} thread(s) (top {len(shown)} of {len(rows)} types)")
    for i, row in enumerate(shown, 1):
        table.add_row(str(i), escape(row["kernel"]), str(row["count"]), _fmt("time_ms", row["ms"]),
                      f"{100 * row['share']:.1f}%")
    out.print(table)
    out.print(f"estimate: {total:.4g} ms over {len(price.kernels)} kernels ({price.measured} timed now, "
              f"{price.seconds:.1f}s)" + (f"; not priced: {', '.join(price.unpriced)}" if price.unpriced else ""))


def profile_cmd(
    model: Annotated[str, typer.Argument(help="An .onnx file or zoo:NAME.")],
    threads: ThreadsOpt = None,
    cache: CacheOpt = None,
    optimization: Annotated[str, typer.Option(
        "--optimization", help="onnxruntime level of the one-node models: disable or all.")] = "disable",
    fused: Annotated[bool, typer.Option("--fused", help="Also time fusion groups (for ORT_ENABLE_ALL).")] = False,
    input_shape: ShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Time every op of a model missing from the op-time cache (shows hits, misses, time)."""
    g = load_graph(model, parse_shapes(input_shape), as_json)
    spec = "fused:" + optimization if fused else f"measured:{optimization}"
    m = _make_model(spec, threads, cache, as_json)
    try:
        stats = m.profile(g)
    except GraphsubError as e:
        fail(Exit.BAD_INPUT, str(e), as_json)
    data = {"model": g.name, "cost_model": m.name, "cache": str(m.cache.path), "threads": m.threads,
            "optimization": m.optimization, **stats.as_dict()}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    out.print(f"{g.name}: {stats.signatures} distinct ops, {stats.hits} cached, {stats.misses} measured in "
              f"{stats.seconds:.1f}s (hit rate {100 * stats.hit_rate:.0f}%, median noise IQR/median "
              f"{100 * stats.noise_median:.1f}%)")
    err.print(f"cache: {m.cache.path}")


__all__ = ["cost_cmd", "profile_cmd"]
