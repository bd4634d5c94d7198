"""``graphsub optimize-many``: many models (a list or folders), one after another or as Ray tasks over a cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from graphsub.cli.common import Exit, JsonOpt, SeedOpt, err, exits, fail, out
from graphsub.errors import GraphsubError
from graphsub.optimize.budget import DEFAULT_TIME_S


def optimize_many_cmd(
    models: Annotated[list[str], typer.Argument(help="ONNX files, zoo:NAME models, or folders (their .onnx files).")],
    out_dir: Annotated[Path, typer.Option("-o", "--out-dir", help="Folder for the results (created): "
                                                                  "NNN-<name>.onnx per model, and results.json.")],
    executor: Annotated[str, typer.Option("--executor", help="serial (one model after another, here) or ray (one "
                                                             "Ray task per model; a node times one model at a "
                                                             "time).")] = "serial",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="--executor ray: the cluster (default: "
                                                    "$RAY_ADDRESS, else a local Ray started for this command). "
                                                    "Its nodes must offer the resource graphsub_timing=1.")] = None,
    budget: Annotated[float, typer.Option("--budget", help="Seconds per model (the whole optimize call), plus 400 s "
                                                          "per GB of the model's weights as optimize's default.")
                      ] = DEFAULT_TIME_S,
    threads: Annotated[int | None, typer.Option("--threads", help="Intra-op threads the models are timed and "
                                                                  "chosen at (default: every core).")] = None,
    rules: Annotated[str, typer.Option("--rules", help="Rule set(s), as for `graphsub optimize`.")] = "default",
    peers: Annotated[str, typer.Option("--peers", help="Peers for portfolio candidates: auto, none, or a "
                                                       "comma-separated list.")] = "auto",
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Optimize many models, each as `graphsub optimize` would, and report one line per model.

    A model that fails (a malformed file, a budget exceeded, a worker lost) is reported with its error; the others
    are kept. On Ray, each model is one task holding the graphsub_timing resource, which every node offers once, so
    a node never times two models side by side; the results say which node ran each model.

    Exit codes: 0 every model verified, 1 some model failed or was not verified, 2 usage error.
    """
    from graphsub.optimize.many import optimize_many

    if executor not in ("serial", "ray"):
        fail(Exit.USAGE, f"--executor: serial or ray, got {executor!r} (worker processes on one machine would time "
                         "models side by side)", as_json)
    kw: dict[str, Any] = {"time_s": budget, "seed": seed, "rules": rules, "peers": peers}
    if threads is not None:
        kw["threads"] = threads
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=as_json) as progress:
        task = progress.add_task("optimizing", total=len(models))
        with exits(as_json, (GraphsubError, Exit.USAGE)):
            recs = optimize_many(models, out_dir, executor=executor, ray_address=ray_address,
                                 on_done=lambda r: progress.update(task, advance=1), **kw)
    summary = {"out_dir": str(out_dir), "executor": executor, "models": recs}
    from graphsub.optimize.output import write_bytes

    with exits(as_json, (OSError, Exit.CANNOT_WRITE), (GraphsubError, Exit.CANNOT_WRITE)):
        write_bytes(json.dumps(summary, indent=2).encode(), out_dir / "results.json", suffix=".json")
    ok = all(r.get("ok") and r.get("verified") for r in recs)
    code = Exit.OK if ok else Exit.NOT_EQUIVALENT
    if as_json:
        print(json.dumps({**summary, "exit_code": int(code)}, indent=2))
    else:
        table = Table("model", "node", "s", "result", title=f"{len(recs)} model(s) -> {out_dir}")
        for r in recs:
            res = (f"[red]{r['error']}[/]" if not r.get("ok") else
                   f"{r.get('chosen')}: {r.get('decision', '')}")
            table.add_row(r["model"], str(r.get("node") or "-"), f"{r.get('seconds', 0.0):.1f}", res)
        out.print(table)
    raise typer.Exit(int(code))
