"""``graphsub bench suite``: the real-model suite with the peers side by side (see :mod:`graphsub.bench.suite`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from graphsub.cli.common import Exit, err, exits, fail, out, split_list
from graphsub.spec import split_specs


def _models(models: str | None, build: bool, as_json: bool, half: str | None = None) -> list[Any]:
    """The suite's models (built first with ``--build``: only ``half``'s architectures when given) and the selection
    of ``--models`` and ``--half``."""
    from graphsub.bench.suite.halves import check_half
    from graphsub.bench.suite.halves import half as half_of
    from graphsub.bench.suite.select import select

    if half is not None:
        try:
            check_half(half)
        except ValueError as e:
            fail(Exit.USAGE, f"--half: {e}", as_json)

    patterns = None if models is None else split_specs(models)
    user_files_only = patterns is not None and all(p.endswith(".onnx") for p in patterns)
    suite: list[Any] = []
    if build or not user_files_only:
        try:
            from graphsub.bench.suite.catalog import ARCHITECTURES, build_suite, load_suite
        except ImportError as e:  # the export dependencies are an optional extra
            fail(Exit.USAGE, f"the suite needs `pip install -e .[suite]` ({e})", as_json)
        archs = None if half is None else [a for a in ARCHITECTURES if half_of(a) == half]
        with exits(as_json):
            suite = build_suite(archs=archs, progress=not as_json) if build else load_suite()
    with exits(as_json, default=Exit.USAGE):
        chosen = select(patterns, suite, half)
    if not chosen:
        fail(Exit.USAGE, "no models: build the suite with `graphsub bench suite --build`, or give --models a.onnx",
             as_json)
    return chosen


def _tools(peers: str | None, as_json: bool, compose: bool = True) -> list[str]:
    from graphsub.bench.suite.runner import default_tools
    from graphsub.optimize.peers import PEERS

    names = split_list(peers) or list(PEERS)
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        fail(Exit.USAGE, f"unknown peer(s) {unknown}; known: {', '.join(PEERS)}", as_json)
    if "ort" not in names:
        names.insert(0, "ort")  # the baseline every speedup is measured against
    tools = default_tools(names)
    return tools if compose else [t for t in tools if "+" not in t]


def suite(*, models: str | None, peers: str | None, compose: bool = True, threads: str | None, build: bool,
          budget: float | None, rounds: int, seed: int, out_dir: Path | None, name: str | None, resume: bool,
          plots: bool, dry_run: bool, as_json: bool, executor: str = "serial", ray_address: str | None = None,
          provider: str = "cpu", half: str | None = None) -> None:
    """Run the suite and print (or ``--json``) its table; writes ``OUT/NAME.jsonl``, ``.md`` and ``.png``."""
    from graphsub.bench.suite.measure import parse_threads
    from graphsub.bench.suite.runner import run_suite
    from graphsub.bench.suite.table import json_rows, speedup_table, write_tables

    try:
        counts = parse_threads(threads or "1,all")
    except ValueError as e:
        fail(Exit.USAGE, f"--threads: {e}", as_json)
    if (budget is not None and budget <= 0) or rounds < 1:
        fail(Exit.USAGE, "--budget must be positive and --rounds at least 1", as_json)
    if provider != "cpu":
        from graphsub.frontends.ort import require_provider

        with exits(as_json, default=Exit.USAGE):
            require_provider(provider)
    tools = _tools(peers, as_json, compose)
    chosen = _models(models, build, as_json, half)
    name = name or "suite"
    out_path = out_dir or Path("results")
    if dry_run:
        listing = [{"model": m.id, "path": str(m.path), "tools": tools, "threads": counts} for m in chosen]
        if as_json:
            print(json.dumps(listing, indent=2))
        else:
            for m in chosen:
                out.print(f"{m.id}: {m.path}", highlight=False)
        return
    progress = Progress(TextColumn("[bold]suite[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=True, disable=as_json)
    with progress, exits(as_json, (OSError, Exit.CANNOT_WRITE)):
        task = progress.add_task(chosen[0].id, total=len(chosen))

        def advance(rec: dict[str, Any]) -> None:
            progress.advance(task)
            progress.update(task, description=rec["id"])

        records = run_suite(chosen, tools, counts, out_path, name=name, resume=resume, on_model=advance,
                            graphsub_budget_s=budget, rounds=rounds, seed=seed, executor=executor,
                            ray_address=ray_address, provider=provider)
        files = write_tables(records, out_path, name, plots=plots)
    if as_json:
        print(json.dumps({"results": str(out_path / f"{name}.jsonl"), "files": files, "threads": counts,
                          "rows": json_rows(records)}, indent=2, default=str))
        return
    for n in counts:
        on = "" if provider == "cpu" else f", {provider} provider"
        out.print(f"[bold]speedup over ORT_ENABLE_ALL, {n} thread(s){on}[/]")
        out.print(speedup_table(records, n), highlight=False, markup=False, soft_wrap=True)
    out.print(f"results: {out_path / name}.jsonl; table: {files['markdown']}", soft_wrap=True)


__all__ = ["suite"]
