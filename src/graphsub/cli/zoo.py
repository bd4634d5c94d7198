"""``graphsub zoo list|export``: the built-in benchmark models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from graphsub.cli.common import JsonOpt, SeedOpt, confirm_output, err, load_graph, out, write_graph

zoo_app = typer.Typer(help="Built-in benchmark models (TASO/OCGGS set and classic CNNs).", no_args_is_help=True)


@zoo_app.command("list")
def zoo_list(as_json: JsonOpt = False) -> None:
    """List the built-in models with their default op counts."""
    from graphsub import zoo

    rows: list[dict[str, Any]] = []
    for name in zoo.list_models():
        m = zoo.MODELS[name]
        g = zoo.get(name)
        rows.append({"name": m.name, "num_ops": g.num_ops, "description": m.description,
                     "params": dict(m.params)})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("name", "ops", "defaults", "description")
    for r in rows:
        table.add_row(r["name"], str(r["num_ops"]), ", ".join(f"{k}={v}" for k, v in r["params"].items()),
                      r["description"])
    out.print(table)


@zoo_app.command("export")
def zoo_export(
    name: Annotated[str, typer.Argument(help="Model name, optionally with arguments: resnet:blocks=4.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the .onnx file.")],
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Export a zoo model to ONNX (random weights drawn from --seed)."""
    confirm_output(None, output, as_json)
    g = load_graph(name if name.startswith("zoo:") else f"zoo:{name}", None, as_json)
    with err.status(f"exporting {escape(g.name)} ({g.num_ops} ops)"):
        write_graph(g, output, as_json, seed=seed)
    if as_json:
        print(json.dumps({"name": g.name, "num_ops": g.num_ops, "output": str(output)}))
    else:
        out.print(f"wrote {output} ({g.num_ops} ops)")


__all__ = ["zoo_app"]
