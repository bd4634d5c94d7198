"""``graphsub fuse``: partition a CNN into layer-fusion groups under an on-chip buffer.

The lead registers the command on the main app::

    app.command("fuse")(fuse_cmd)

Prints DRAM traffic (MB = 2**20 bytes), maximum buffer usage (KB = 1024 bytes), group count
and validity of the best plan found; ``--json`` prints one document with at least ``dram_mb``,
``mbu_kb``, ``num_groups``, ``valid``, ``evaluated_plans``, ``time_s``.  Exit codes as in
:mod:`graphsub.cli`: 2 for a usage error (malformed ``--buffer``, budget < 1, unknown scheme,
algorithm or repair, missing ``--model-weights``), 3 for a model that cannot be loaded (unknown zoo
name, unreadable file), 4 when the picture cannot be written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from graphsub.cli.common import Exit, JsonOpt, SeedOpt, confirm_output, exits, fail, load_graph, out

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2}


def parse_buffer(text: str) -> int:
    """Bytes in a buffer size: ``256KB``, ``256K``, ``1MB``, ``0.5MiB``, ``262144``.

    >>> parse_buffer("256KB"), parse_buffer("1 MB"), parse_buffer("4096")
    (262144, 1048576, 4096)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"malformed buffer size {text!r}; expected e.g. 256KB, 1MB or a byte count")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 1:
        raise ValueError(f"buffer size {text!r} must be at least 1 byte")
    return int(value)


def fuse_cmd(
    model: Annotated[str, typer.Argument(help="An .onnx file or zoo:NAME (e.g. zoo:mobilenet_v2).")],
    scheme: Annotated[str, typer.Option("--scheme", help="Fusion scheme: lbdf or brr.")] = "lbdf",
    buffer: Annotated[str, typer.Option("--buffer", help="On-chip buffer size, e.g. 256KB or 1MB.")] = "256KB",
    algo: Annotated[str, typer.Option("--algo", help="Search: rs (random), ls (local), nsga2.")] = "ls",
    repair: Annotated[str, typer.Option(
        "--repair", help="Repair of invalid groups: random (baseline), or gnne / pg / rg (GNN explainer + "
                         "recursive greedy split).")] = "random",
    model_weights: Annotated[Path | None, typer.Option(
        "--model-weights", help="Validity-GNN weights (.pt, with a .json beside it) for gnne/pg/rg; default: "
                                "the packaged weights of the scheme.")] = None,
    budget: Annotated[int, typer.Option("--budget", help="Evaluated plans the search may spend.")] = 2000,
    bytes_per_elem: Annotated[int, typer.Option("--bytes-per-elem", help="Bytes per tensor element.")] = 1,
    weights_in_dram: Annotated[bool, typer.Option(
        "--weights-in-dram/--weights-as-config", help="Count weight loads as DRAM traffic.")] = True,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of the plan (groups coloured).")] = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Search a layer-fusion plan for a CNN and print its DRAM traffic, MBU and group count."""
    from graphsub.layer_fusion import CostConfig, cost_model, fusion_graph
    from graphsub.layer_fusion.search import cost_singletons, search

    buffer_bytes, repair_fn = _check_options(scheme, algo, buffer, repair, model_weights, budget, bytes_per_elem,
                                             plot, as_json)
    graph = load_graph(model, None, as_json)
    with exits(as_json):
        fg = fusion_graph(graph)
        cost = cost_model(fg, scheme, buffer_bytes, CostConfig(bytes_per_elem, weights_in_dram))
        result = search(cost, algo, budget, seed, repair_fn)
    base = cost.evaluate(cost_singletons(cost))
    data: dict[str, Any] = {
        "model": fg.name,
        "scheme": scheme,
        "buffer_kb": buffer_bytes / 1024,
        "bytes_per_elem": bytes_per_elem,
        "weights_in_dram": weights_in_dram,
        "num_ops": fg.num_ops,
        "unfusable_ops": len(cost.unfusable),
        "unfused_dram_mb": base.dram_mb,
        **result.to_dict(),
        "groups": [list(g) for g in result.plan.groups],
    }
    stats = getattr(repair_fn, "stats", None)
    if callable(stats):
        data["repair_stats"] = stats()
    if plot is not None:
        from graphsub.layer_fusion.plot import draw_plan

        try:
            draw_plan(cost, result.plan, plot, f"{fg.name} {scheme} {buffer} {algo}: "
                      f"{result.cost.dram_mb:.3f} MB, {len(result.plan)} groups")
        except OSError as e:
            fail(Exit.CANNOT_WRITE, f"{plot}: {e}", as_json)
        data["plot"] = str(plot)
    if as_json:
        print(json.dumps(data))
        return
    _print_plan(data, result, base, cost, buffer_bytes, algo, repair)


def _check_options(scheme: str, algo: str, buffer: str, repair: str, model_weights: Path | None, budget: int,
                   bytes_per_elem: int, plot: Path | None, as_json: bool) -> tuple[int, Any]:
    """Validate the options (usage errors, exit 2; a plot directory that does not exist, exit 4) before any
    work: ``(buffer bytes, repair function)``."""
    from graphsub.layer_fusion import SCHEMES
    from graphsub.layer_fusion.repair import get_repair
    from graphsub.layer_fusion.search import ALGORITHMS

    if scheme not in SCHEMES:
        fail(Exit.USAGE, f"unknown --scheme {scheme!r}; choose from {sorted(SCHEMES)}", as_json)
    if algo not in ALGORITHMS:
        fail(Exit.USAGE, f"unknown --algo {algo!r}; choose from {list(ALGORITHMS)}", as_json)
    if budget < 1:
        fail(Exit.USAGE, f"--budget must be at least 1 plan, got {budget}", as_json)
    if bytes_per_elem < 1:
        fail(Exit.USAGE, f"--bytes-per-elem must be at least 1, got {bytes_per_elem}", as_json)
    try:
        buffer_bytes = parse_buffer(buffer)
    except ValueError as e:
        fail(Exit.USAGE, str(e), as_json)
    if model_weights is not None and not (model_weights.is_file() and model_weights.with_suffix(".json").is_file()):
        fail(Exit.USAGE, f"--model-weights {model_weights}: need the .pt file and its .json beside it", as_json)
    with exits(as_json, default=Exit.USAGE):
        repair_fn = get_repair(repair, model_weights) if repair != "random" else get_repair(repair)
    if plot is not None:
        confirm_output(None, plot, as_json)
    return buffer_bytes, repair_fn


def _print_plan(data: dict[str, Any], result: Any, base: Any, cost: Any, buffer_bytes: int, algo: str,
                repair: str) -> None:
    scheme, name, num_ops = data["scheme"], data["model"], data["num_ops"]
    out.print(f"[bold]{name}[/] {scheme.upper()} buffer {buffer_bytes / 1024:g} KB, {algo} + {repair} repair, "
              f"{result.evaluated_plans} plans in {result.time_s:.2f}s")
    out.print(f"  DRAM      {result.cost.dram_mb:.3f} MB (no fusion: {base.dram_mb:.3f} MB)")
    out.print(f"  MBU       {result.cost.mbu_kb:.3f} KB")
    out.print(f"  groups    {result.cost.num_groups} ({num_ops} ops, {len(cost.unfusable)} unfusable)")
    out.print(f"  valid     {'yes' if result.cost.valid else 'NO'}")
    if "repair_stats" in data and data["repair_stats"]["groups_repaired"]:
        st = data["repair_stats"]
        out.print(f"  repair    {st['rectified']}/{st['groups_repaired']} invalid groups rectified by the "
                  f"explainer ({100 * st['rectify_rate']:.1f}%; {100 * st['one_cut_rate']:.1f}% by the first cut), "
                  f"{st['explain_split_s']:.2f}s explaining/splitting")
    if "plot" in data:
        out.print(f"  picture   {data['plot']}")


__all__ = ["fuse_cmd", "parse_buffer"]
