"""``graphsub bench``: run an experiment grid (a preset with overrides) and report on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from graphsub.bench.harness import Run
from graphsub.bench.records import load_records
from graphsub.cli.common import Exit, JsonOpt, err, exits, fail, out, split_list, wide
from graphsub.spec import split_specs


def _parse_params(specs: list[str] | None) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = {}
    for spec in specs or []:
        lhs, sep, value = spec.partition("=")
        algo, dot, key = lhs.partition(".")
        if not sep or not dot or not algo or not key:
            raise ValueError(f"expected ALGO.KEY=VALUE (e.g. taso.alpha=1.01), got {spec!r}")
        try:
            params.setdefault(algo, {})[key] = json.loads(value)
        except json.JSONDecodeError:
            params.setdefault(algo, {})[key] = value
    return params


def _fmt(x: Any, spec: str = ".4g") -> str:
    return "-" if x is None else format(x, spec)


def _print_summary(rows: list[dict[str, Any]], title: str) -> None:
    from graphsub.bench.tables import ALGO_LABELS

    table = Table("model", "algo", "cost model", "K", "runs", "initial", "best", "gain", "time (s)", "mem (MB)",
                  "stopped by", title=title)
    for r in rows:
        runs = f"{r['ok']}" + (f"+{r['timeout']}t" if r["timeout"] else "") + (f"+{r['error']}e" if r["error"] else "")
        table.add_row(r["model"], ALGO_LABELS.get(r["algo"], r["algo"]), r["cost"], str(r["k"]), runs,
                      _fmt(r["initial_cost"]), _fmt(r["best_cost"]), _fmt(r["improvement"], ".1%"),
                      _fmt(r["search_time_s"], ".3g"), _fmt(r["peak_mem_mb"], ".0f"),
                      "error" if r["error"] and not r["ok"] else r["stopped_by"])
    wide().print(table)


def _list_presets(as_json: bool) -> None:
    from graphsub.bench.presets import PRESETS, registered_algorithms

    rows: list[dict[str, Any]] = [
        {"name": p.name, "description": p.description, "models": list(p.models), "k": list(p.ks),
         "costs": list(p.costs), "rules": p.rules, "cutoff_s": p.cutoff_s, "repeats": p.repeats,
         "algos": list(p.algos or registered_algorithms()), "reference": p.reference} for p in PRESETS.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("preset", "models", "K", "costs", "cut-off", "description")
    for r in rows:
        table.add_row(r["name"], ", ".join(r["models"]), ",".join(map(str, r["k"])), ", ".join(r["costs"]),
                      f"{r['cutoff_s']:g}s", r["description"])
    wide().print(table)


def bench_cmd(
    preset: Annotated[str | None, typer.Argument(help="Preset (table3, fig4, fig5, small-exact; see --list), suite "
                                                      "(the real-model suite with the peers), decode (the "
                                                      "decoders' greedy generation: every variant's token ids "
                                                      "against the plain export's, prefill ms and decode tokens/s), "
                                                      "or a results .jsonl to report on.")] = None,
    algos: Annotated[str | None, typer.Option("--algos", help="Algorithms, comma-separated (default: every "
                                                             "registered one).")] = None,
    models: Annotated[str | None, typer.Option("--models", help="Model specs, comma-separated: zoo NAME[:k=v] or "
                                                               ".onnx paths (e.g. resnet:blocks=4,sru); decode: "
                                                               "decoder families (llama, qwen2, gpt2; default "
                                                               "all).")] = None,
    costs: Annotated[str | None, typer.Option("--costs", help="Cost models, comma-separated (roofline:p100, "
                                                             "measured, flops, ...).")] = None,
    k: Annotated[str | None, typer.Option("--k", help="Maximum sequence lengths K, comma-separated.")] = None,
    rules: Annotated[str | None, typer.Option("--rules", help="Rule set (default ocggs157).")] = None,
    cutoff: Annotated[float | None, typer.Option("--cutoff", help="Per-run search time cut-off in seconds.")] = None,
    expansions: Annotated[int | None, typer.Option("--expansions", help="Graphs to expand per run at most.")] = None,
    memory_mb: Annotated[float | None, typer.Option("--memory-mb", help="Per-run search memory cap (MB).")] = None,
    repeats: Annotated[int | None, typer.Option("--repeats", help="Repetitions of every run.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of repeat 0 (repeat r uses seed + r).")] = 0,
    param: Annotated[list[str] | None, typer.Option("--param", help="Algorithm parameter ALGO.KEY=VALUE "
                                                                    "(repeatable), e.g. taso.alpha=1.01.")] = None,
    grace: Annotated[float, typer.Option("--grace", help="Kill a run this long after its cut-off "
                                                         "(at least; 10% of the cut-off if larger).")] = 10.0,
    threads: Annotated[str | None, typer.Option("--threads", help="onnxruntime threads for measured costs; for the "
                                                                  "suite and decode, the thread counts to time at "
                                                                  "(default 1,all).")] = None,
    peers: Annotated[str | None, typer.Option("--peers", help="suite: the peers to run, comma-separated (default: "
                                                              "all; graphsub runs alone and after each); decode: "
                                                              "the peers run on the plain export (default "
                                                              "onnxslim,onnxsim,onnxscript,ort-transformers-99; "
                                                              "none: no peer).")] = None,
    compose: Annotated[bool, typer.Option("--after-peers/--alone", help="suite: also run graphsub on each peer's "
                                                                         "output (default), or graphsub alone (its "
                                                                         "portfolio runs the peers itself).")] = True,
    build: Annotated[bool, typer.Option("--build", help="suite: export the suite's models first (needs "
                                                        "`pip install -e .[suite]`; cached).")] = False,
    half: Annotated[str | None, typer.Option("--half", help="suite: only the models of one half of the suite: "
                                                            "development (graphsub was tuned on them) or held-out "
                                                            "(see graphsub.bench.suite.halves).")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="suite, decode: graphsub optimize's --budget per "
                                                                 "run: the whole command's wall time (s; default: "
                                                                 "graphsub optimize's own, 100 s plus 400 s per GB "
                                                                 "of weights, so that its time is the user's).",
                                                  show_default=False)] = None,
    rounds: Annotated[int, typer.Option("--rounds", help="suite, decode: alternating timing rounds.")] = 7,
    size: Annotated[str, typer.Option("--size", help="decode: the decoders' size, tiny (tests), small (the "
                                                     "suite's: 4 layers, hidden 256), 100m (12 layers, hidden "
                                                     "768) or 1b (Llama only: 16 layers, hidden 2048, 4.4 GB "
                                                     "of weights, external data).")] = "small",
    exporter: Annotated[str, typer.Option("--exporter", help="decode: the PyTorch exporter of the plain export, "
                                                             "torchscript or dynamo.")] = "torchscript",
    tokens: Annotated[int, typer.Option("--tokens", help="decode: greedy tokens generated by every variant, "
                                                                "whose ids must equal the plain export's.")] = 64,
    variant: Annotated[list[str] | None, typer.Option("--variant", help="decode: an extra ONNX file to measure, "
                                                                        "NAME=FILE (repeatable; graphsub=FILE "
                                                                        "replaces graphsub optimize's run).")
                       ] = None,
    round_ms: Annotated[float, typer.Option("--round-ms", help="decode: time budget of one variant's round "
                                                               "(ms).")] = 300.0,
    provider: Annotated[str, typer.Option("--provider", help="suite: the onnxruntime execution provider every "
                                                             "variant is timed on and graphsub decides on: cpu, or "
                                                             "cuda (needs onnxruntime-gpu and an NVIDIA GPU).")
                        ] = "cpu",
    out_dir: Annotated[Path | None, typer.Option("--out", help="Output directory (default: results/ in the "
                                                               "current directory; for a .jsonl: its directory).")
                       ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Results file stem (default: the preset's name).")] = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Skip runs already recorded (default) or "
                                                                      "start the results file over.")] = True,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="On resume, run failed runs again.")] = False,
    report_only: Annotated[bool, typer.Option("--report-only", help="Only (re)write tables and plots from the "
                                                                    "results file.")] = False,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Draw the plots (matplotlib).")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the runs (and which are done) and exit.")] = False,
    list_presets: Annotated[bool, typer.Option("--list", help="List the presets and exit.")] = False,
    executor: Annotated[str, typer.Option("--executor", help="serial (one run or suite model after another, here) or "
                                                             "ray (one Ray task per run or suite model; a node times "
                                                             "one model at a time: suite models and runs with a "
                                                             "measured cost hold its timing unit; the model files "
                                                             "must be at the same path on every node).")] = "serial",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="--executor ray: the cluster (default: "
                                                    "$RAY_ADDRESS, else a local Ray).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run an experiment grid -- algorithms x models x cost models x K x repeats, one process per run --
    appending to OUT/NAME.jsonl (resumable), then write CSV, OCGGS-Table-3-style tables and plots.

    `graphsub bench suite` runs the real-model suite with the peers; `graphsub bench decode` the decoders'
    generation-level measure: per decoder (--models, --size, --exporter) the plain export under ONNX Runtime
    (ort), each peer's output, onnxruntime-genai's model builder on the same weights and graphsub optimize's output
    each generate --tokens greedy tokens, which must be the plain export's (and its prefill logits close); the
    prefill (128 tokens) and a decode step on a 128- and a 1,024-token cache are timed at each --threads count,
    side by side with an A/A arm and a verdict per variant (speedup, its 90% interval); results in OUT/NAME.jsonl
    and a Markdown table OUT/NAME.md.

    Exit 0 when the grid (or suite, or decode run) completed, even if some runs failed (the summary says so); 2 on
    bad arguments.
    """
    from graphsub.bench.presets import PRESETS

    if executor not in ("serial", "ray"):
        fail(Exit.USAGE, f"--executor: serial or ray, got {executor!r} (worker processes on one machine would "
                         "time models side by side)", as_json)
    if preset == "suite":
        from graphsub.cli.suite import suite

        suite(models=models, peers=peers, compose=compose, threads=threads, build=build, budget=budget, rounds=rounds,
              seed=seed, out_dir=out_dir, name=name, resume=resume, plots=plots, dry_run=dry_run, as_json=as_json,
              executor=executor, ray_address=ray_address, provider=provider, half=half)
        return
    if preset == "decode":
        from graphsub.cli.decode import decode

        decode(models=models, size=size, exporter=exporter, tokens=tokens, threads=threads, peers=peers,
               variants=variant, budget=budget, rounds=rounds, round_ms=round_ms, seed=seed, out_dir=out_dir,
               name=name, as_json=as_json)
        return
    if list_presets:
        _list_presets(as_json)
        return
    if preset is None:
        fail(Exit.USAGE, "give a preset (" + ", ".join(PRESETS) + ") or a results .jsonl; see --list", as_json)
    if preset.endswith(".jsonl"):
        _summarize_file(Path(preset), out_dir, name, plots, as_json)
        return
    if preset not in PRESETS:
        fail(Exit.USAGE, f"unknown preset {preset!r}; known: {', '.join(PRESETS)} (or a results .jsonl)", as_json)
    try:
        ks = None if k is None else [int(x) for x in split_list(k) or []]
        if ks is not None and (not ks or any(x < 0 for x in ks)):
            raise ValueError(f"--k must list non-negative integers, got {k!r}")
        if cutoff is not None and cutoff <= 0:
            raise ValueError("--cutoff must be positive")
        if repeats is not None and repeats < 1:
            raise ValueError("--repeats must be at least 1")
        runs = PRESETS[preset].runs(algos=split_list(algos), models=None if models is None else split_specs(models),
                                    costs=split_list(costs), ks=ks, cutoff_s=cutoff, repeats=repeats, rules=rules,
                                    expansions=expansions, memory_mb=memory_mb, seed=seed,
                                    params=_parse_params(param))
    except ValueError as e:
        fail(Exit.USAGE, str(e), as_json)
    _check_runs(runs, as_json)
    name = name or preset
    out_path = out_dir or Path("results")
    if dry_run:
        _dry_run(runs, out_path, name, resume, as_json)
    elif report_only:
        _summarize_file(out_path / f"{name}.jsonl", out_path, name, plots, as_json, preset=preset)
    else:
        _run(preset, runs, out_path, name, as_json=as_json, plots=plots, resume=resume, retry_errors=retry_errors,
             grace_s=grace, threads=_one_count(threads, as_json), executor=executor, ray_address=ray_address)


def _one_count(threads: str | None, as_json: bool) -> int | None:
    if threads is None:
        return None
    try:
        n = int(threads)
    except ValueError:
        fail(Exit.USAGE, f"--threads must be a positive integer for a grid, got {threads!r}", as_json)
    if n < 1:
        fail(Exit.USAGE, f"--threads must be a positive integer for a grid, got {threads!r}", as_json)
    return n


def _check_runs(runs: list[Run], as_json: bool) -> None:
    from graphsub.bench.harness import check_run

    problems = sorted({p for r in runs for p in check_run(r)})
    if problems or not runs:
        fail(Exit.USAGE, "; ".join(problems) or "the grid is empty", as_json)


def _dry_run(runs: list[Run], out_path: Path, name: str, resume: bool, as_json: bool) -> None:
    """List the runs of the grid and which of them are recorded already."""
    done = {r["id"] for r in load_records(out_path / f"{name}.jsonl")} if resume else set()
    listing = [{"id": r.id, "label": r.label, "done": r.id in done, **r.spec()} for r in runs]
    if as_json:
        print(json.dumps(listing, indent=2))
        return
    for x in listing:
        out.print(f"{x['id']} {'done' if x['done'] else 'todo'} {x['label']}", highlight=False)
    out.print(f"{len(listing)} runs, {sum(x['done'] for x in listing)} recorded in {out_path / name}.jsonl")


def _summarize_file(path: Path, out_dir: Path | None, name: str | None, plots: bool, as_json: bool,
                    preset: str | None = None) -> None:
    """Tables and plots of a results file (a .jsonl given as the preset, or ``--report-only``)."""
    from graphsub.bench.tables import summarize, write_summary

    if not path.is_file():
        fail(Exit.USAGE, f"no results file {path}", as_json)
    records = load_records(path)
    if records and all("tools" in r for r in records):  # a suite run's records: the suite's tables
        from graphsub.bench.suite.table import write_tables

        where = out_dir or path.parent
        where.mkdir(parents=True, exist_ok=True)
        tables = write_tables(records, where, name or path.stem, plots=plots)
        if as_json:
            print(json.dumps({"results": str(path), "models": len(records), "report": tables}, indent=2,
                             default=str))
        else:
            out.print(f"{path.name}: {len(records)} suite models; table: {tables['markdown']}")
        return
    files = write_summary(path, out_dir, name, plots=plots)
    rows = summarize(records)
    if preset is None:
        if as_json:
            print(json.dumps({"results": str(path), "summary": rows, "report": files}, indent=2, default=str))
        else:
            _print_summary(rows, f"{path.name}: {sum(r['n'] for r in rows)} runs")
            out.print(f"report: {files['report'][0]}")
        return
    counts = {s: sum(r.get("status") == s for r in records) for s in ("ok", "timeout", "error")}
    result = {"preset": preset, "jsonl": str(path), "counts": counts, "summary": rows, "report": files}
    _print_outcome(result, rows, counts, path, name or path.stem, as_json)


def _run(preset: str, runs: list[Run], out_path: Path, name: str, *, as_json: bool, plots: bool,
         **grid_opts: Any) -> None:
    """Run the grid, then write and print its tables."""
    from graphsub.bench.harness import run_grid
    from graphsub.bench.tables import write_summary

    if not as_json:
        err.print(f"[bold]{preset}[/]: {len(runs)} runs -> {out_path / name}.jsonl")
    with exits(as_json):  # e.g. no Ray, or no cluster at --ray-address
        grid = run_grid(runs, out_path, name=name, progress=not as_json, **grid_opts)
    files = write_summary(grid.jsonl, out_path, name, plots=plots)
    counts = grid.counts
    result: dict[str, Any] = {"preset": preset, **grid.to_dict(), "report": files}
    done = (f"grid complete: {len(grid.records)} runs ({grid.executed} run now, {grid.skipped} already recorded): "
            f"{counts['ok']} ok, {counts['timeout']} timed out, {counts['error']} failed")
    _print_outcome(result, grid.summary, counts, grid.jsonl, name, as_json, done=done)


def _print_outcome(result: dict[str, Any], rows: list[dict[str, Any]], counts: dict[str, int], jsonl: Path,
                   name: str, as_json: bool, done: str | None = None) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    _print_summary(rows, f"{name}: " + ", ".join(f"{v} {s}" for s, v in counts.items()))
    if done:
        out.print(done, soft_wrap=True)
    if counts["error"]:
        out.print(f"[yellow]{counts['error']} run(s) failed[/]: their errors are in the results file (status "
                  "\"error\") and the report", soft_wrap=True)
    out.print(f"results: {jsonl}; report: {result['report']['report'][0]}", soft_wrap=True)


__all__ = ["bench_cmd"]
