"""``graphsub optimize``: search, verify, measure and write a faster equivalent ONNX model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from graphsub.cli.common import (
    Exit,
    JsonOpt,
    SeedOpt,
    ShapeOpt,
    confirm_output,
    err,
    exits,
    fail,
    out,
    parse_shapes,
    parse_spec,
    print_sequence,
)
from graphsub.errors import ExportError, ImportError_, VerificationError
from graphsub.optimize import OptimizeResult, ProgressFn, optimize
from graphsub.spec import ModelSpec

PHASES = {"load": "loading", "search": "searching", "verify": "verifying in onnxruntime",
          "bisect": "bisecting the substitutions", "time": "timing in onnxruntime", "write": "writing",
          "report": "writing the report"}


def optimize_cmd(
    model: Annotated[str, typer.Argument(help="The model: an .onnx file, zoo:NAME[:k=v,...], or a PyTorch "
                                              "module FILE.py:ClassName (with --input-shape).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the result (.onnx); never the "
                                                                 "input file.")],
    algo: Annotated[str, typer.Option("--algo", help="Search algorithm: taso | greedy | metaflow | enum.")] = "taso",
    rules: Annotated[str, typer.Option("--rules", help="Rule set(s), comma-separated (see `graphsub rules "
                                                       "list`).")] = "default",
    cost: Annotated[str, typer.Option("--cost", help="Cost model guiding the search: fused[min] (fusion-aware "
                                                     "measured ORT_ENABLE_ALL costs, minimum of repeats), fused "
                                                     "(median), measured, roofline:cpu, flops, ...")] = "fused[min]",
    budget: Annotated[float, typer.Option("--budget", help="Search time budget in seconds.")] = 30.0,
    k: Annotated[int | None, typer.Option("--k", help="Maximum number of substitutions applied.")] = None,
    threads: Annotated[int, typer.Option("--threads", help="onnxruntime threads for costs and timing.")] = 1,
    keep_slower: Annotated[bool, typer.Option("--keep-slower", help="Write the optimized model even when it is "
                                                                    "not faster under ORT_ENABLE_ALL.")] = False,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="Speedup under ORT_ENABLE_ALL needed to "
                                                                     "prefer the optimized model.")] = 1.03,
    seeds: Annotated[int, typer.Option("--seeds", help="Random input draws for verification.")] = 3,
    report_path: Annotated[Path | None, typer.Option("--report", help="Also write a self-contained HTML report "
                                                                      "(histograms, substitutions, cost, latency, "
                                                                      "search trace, changed regions), even when "
                                                                      "the model is not written.")] = None,
    input_shape: ShapeOpt = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Optimize an ONNX model: find an equivalent graph that onnxruntime runs faster.

    1. Search with the rule set and cost model (ops graphsub does not model are kept as they are).

    2. Verify against the input in onnxruntime on random inputs; on failure, name the bad substitution.

    3. Time both under ORT_ENABLE_ALL and ORT_DISABLE_ALL (median of repeats, fixed threads).

    4. Write OUTPUT atomically: the optimized model if faster under ORT_ENABLE_ALL, else the original.

    5. With --report FILE.html, write an HTML report of all of the above (also when nothing is written).

    Exit codes: 0 written (optimized, or the original by design); 1 not verified, nothing written;

    2 usage; 3 bad input (unreadable model, unknown zoo name); 4 cannot write.
    """
    from graphsub.search import ALGORITHMS, Budget

    if algo not in ALGORITHMS:
        fail(Exit.USAGE, f"unknown algorithm {algo!r}; known: {', '.join(ALGORITHMS)}", as_json)
    if budget <= 0 or threads < 1 or seeds < 1:
        fail(Exit.USAGE, "--budget, --threads and --seeds must be positive", as_json)
    spec = parse_spec(model, as_json)
    confirm_output(spec, output, as_json)
    if report_path is not None:
        confirm_output(spec, report_path, as_json)
        if report_path.resolve() == output.resolve():
            fail(Exit.USAGE, "--report and --output must be different files", as_json)
    _check_names(rules, cost, threads, as_json)
    shapes = parse_shapes(input_shape)
    kw: dict[str, Any] = {"output": output, "algo": algo, "rules": rules, "cost": cost, "seed": seed,
                          "budget": Budget(time_s=budget, k=k), "seeds": seeds, "threads": threads,
                          "keep_slower": keep_slower, "min_speedup": min_speedup}
    progress = _progress_bar(budget, as_json)
    with progress, exits(as_json, (VerificationError, Exit.NOT_EQUIVALENT), (ExportError, Exit.CANNOT_WRITE),
                         (OSError, Exit.CANNOT_WRITE)):
        kw["progress"] = _on_progress(progress, budget)
        res = _optimize_module(spec, shapes, kw) if spec.kind == "module" else optimize(spec.text, input_shapes=shapes,
                                                                                        **kw)
        if report_path is not None:
            kw["progress"]("report", 0.0, None)
            _write_report(res, report_path)
    code = Exit.OK if res.verified else Exit.NOT_EQUIVALENT
    if as_json:
        print(json.dumps({**res.to_dict(), "exit_code": int(code)}, indent=2))
    else:
        _print_human(res)
    raise typer.Exit(int(code))


def _check_names(rules: str, cost: str, threads: int, as_json: bool) -> None:
    """Unknown rule sets and cost models are usage errors, found before any work."""
    from graphsub.cost import get_model
    from graphsub.rules.library import resolve_rules

    with exits(as_json, default=Exit.USAGE):
        resolve_rules(rules)
        get_model(cost, threads=threads, progress=False)


def _progress_bar(budget: float, as_json: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[best]}"),
                    TimeElapsedColumn(), console=err, transient=True, disable=as_json)


def _on_progress(progress: Progress, budget: float) -> ProgressFn:
    """The pipeline's progress callback, drawn on ``progress``: the bar fills with search time."""
    task = progress.add_task("loading", total=budget, best="")

    def note(phase: str, elapsed: float, best: float | None) -> None:
        fields: dict[str, Any] = {"description": PHASES.get(phase, phase)}
        if best is not None:
            fields["best"] = f"best cost {best:.6g}"
        if phase == "search":
            fields["completed"] = min(elapsed, budget)
        elif phase != "load":
            fields["completed"] = budget
        progress.update(task, **fields)

    return note


def _write_report(res: OptimizeResult, path: Path) -> None:
    """Write the HTML report (also when nothing was written); its time is not part of ``total_s``."""
    from graphsub.optimize.report import write_report

    t = time.perf_counter()
    write_report(res, path)
    res.timings_s["report_s"] = time.perf_counter() - t


def _optimize_module(spec: ModelSpec, shapes: dict[str, tuple[int, ...]], kw: dict[str, Any]) -> OptimizeResult:
    """``FILE.py:ClassName``: export the module on random inputs of the ``--input-shape`` shapes (in
    order), optimize, verify against the module itself."""
    from graphsub.frontends.torch_export import random_tensors
    from graphsub.optimize import optimize_module

    if not shapes:
        raise ImportError_("a FILE.py:ClassName model needs its input shapes: --input-shape x=1x3x32x32")
    return optimize_module(spec.load_module(), random_tensors(list(shapes.values()), kw["seed"]), **kw).result


def _print_human(res: OptimizeResult) -> None:
    r = res.search
    out.print(f"[bold]{res.model}[/] {r.algorithm}: cost {r.initial_cost:.6g} -> {r.best_cost:.6g} "
              f"({r.improvement:.1%} lower) in {r.wall_time_s:.1f}s; ops {res.original.num_ops} -> "
              f"{res.optimized.num_ops}, {len(r.sequence)} substitution(s)")
    print_sequence(r.sequence)
    if not res.verified:
        f = res.failure
        err.print(f"[bold red]verification failed[/]: {f.message if f else res.worst_output}; nothing written")
        if res.report:
            out.print(f"wrote the report to {res.report}")
        return
    out.print(f"verified on {len(res.seeds)} random input draw(s): max abs diff {res.max_abs_diff:.3g}")
    if res.latency_ms:
        table = Table("onnxruntime level", "before (ms)", "after (ms)", "speedup",
                      title=f"median latency, {res.threads} thread(s)")
        for level, label in (("all", "ORT_ENABLE_ALL"), ("disable", "ORT_DISABLE_ALL")):
            lat = res.latency_ms[level]
            table.add_row(label, f"{lat['before']:.3f}", f"{lat['after']:.3f}", f"{res.speedup(level):.3f}x")
        out.print(table)
    colour = "yellow" if res.kept_original else "green"
    out.print(f"[{colour}]{res.decision}[/]")
    if res.written:
        what = "the original model" if res.kept_original else "the optimized model"
        out.print(f"wrote {what} to {res.written}")
    if res.report:
        out.print(f"wrote the report to {res.report}")


__all__ = ["optimize_cmd"]
