"""``graphsub optimize``: search, verify, measure and write a faster equivalent ONNX model."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from graphsub.cli.common import (
    CheckSizesOpt,
    Exit,
    JsonOpt,
    SeedOpt,
    ShapeOpt,
    SizesOpt,
    check_names,
    confirm_output,
    err,
    exits,
    fail,
    out,
    parse_check_sizes,
    parse_shapes,
    parse_spec,
    print_sequence,
    wide,
)
from graphsub.errors import ExportError, ImportError_, NotModelled, ReferenceFailed, VerificationError
from graphsub.optimize import OptimizeResult, ProgressFn, optimize
from graphsub.optimize.budget import DEFAULT_TIME_S, PER_GB_S, scaled_time_s
from graphsub.optimize.config import OptimizeConfig
from graphsub.optimize.decide import MIN_SPEEDUP
from graphsub.spec import ModelSpec

PHASES = {"load": "loading", "cleanup": "cleaning up", "search": "searching",
          "portfolio": "building candidates (eqsat, peers, spelling)", "verify": "verifying in onnxruntime",
          "bisect": "bisecting the substitutions", "time": "timing in onnxruntime", "write": "writing",
          "report": "writing the report"}


def _checked_sizes(spec: ModelSpec, shapes: dict[str, tuple[int, ...]], sizes: list[dict[str, int]],
                   as_json: bool, option: str = "--check-sizes") -> list[dict[str, int]]:
    """``--check-sizes`` (or ``--sizes``: ``option``) once each name is a free symbolic dim of the ONNX file's inputs
    (else exit 2)."""
    if not sizes:
        return sizes
    from graphsub.frontends.dims import interface
    from graphsub.symbolic import unknown_dims

    if spec.kind != "onnx":
        fail(Exit.USAGE, f"{option} applies to an ONNX file's symbolic dims only", as_json)
    with exits(as_json):
        iface = interface(spec.name, shapes)
    unknown = unknown_dims(iface, sizes)
    if unknown:
        fail(Exit.USAGE, f"{option} names {unknown}: not a free symbolic dimension of the model's inputs "
                         f"({', '.join(iface.free) or 'none'})", as_json)
    return sizes


def _checked_spec(model: str, output: Path, report_path: Path | None, *, peers: str, provider: str,
                  as_json: bool) -> ModelSpec:
    """The model's spec once the peers, the provider and the output files are usable (usage errors exit 2)."""
    from graphsub.optimize.portfolio import resolve_peers

    with exits(as_json, default=Exit.USAGE):
        resolve_peers(peers)
        if provider != "cpu":
            from graphsub.frontends.ort import require_provider

            require_provider(provider)
    spec = parse_spec(model, as_json)
    confirm_output(spec, output, as_json)
    if report_path is not None:
        confirm_output(spec, report_path, as_json)
        if report_path.resolve() == output.resolve():
            fail(Exit.USAGE, "--report and --output must be different files", as_json)
    return spec


def _check_training(loss: str, batchnorm: str, as_json: bool) -> None:
    """Usage errors of --training's --loss and --batchnorm."""
    from graphsub.training import BATCHNORM_MODES, LOSSES

    if loss not in (*LOSSES, "output"):
        fail(Exit.USAGE, f"unknown --loss {loss!r}; choose one of {', '.join((*LOSSES, 'output'))}", as_json)
    if batchnorm not in BATCHNORM_MODES:
        fail(Exit.USAGE, f"unknown --batchnorm {batchnorm!r}; choose one of {', '.join(BATCHNORM_MODES)}", as_json)


def optimize_cmd(
    model: Annotated[str, typer.Argument(help="The model: an .onnx file, zoo:NAME[:k=v,...], or a PyTorch "
                                              "module FILE.py:ClassName (with --input-shape); for the latter, "
                                              "graphsub imports and runs FILE.py as Python, so give only files you "
                                              "trust (an existing file whose name merely contains '.py:' is read as "
                                              "ONNX, never run).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the result (.onnx; .py for "
                                                                 "--training with a PyTorch module); never the "
                                                                 "input file.")],
    algo: Annotated[str, typer.Option("--algo", help="Search algorithm: taso | greedy | metaflow | enum.")] = "taso",
    rules: Annotated[str, typer.Option("--rules", help="Rule set(s), comma-separated (see `graphsub rules "
                                                       "list`).")] = "default",
    cost: Annotated[str, typer.Option("--cost", help="Cost model guiding the search: fused[min] (fusion-aware "
                                                     "measured ORT_ENABLE_ALL costs, minimum of repeats), fused "
                                                     "(median), measured, roofline:cpu, flops, ...")] = "fused[min]",
    budget: Annotated[float | None, typer.Option("--budget", help="Wall-time budget of the whole command in "
                                                                 "seconds (loading, search, portfolio, "
                                                                 "verification, timing, writing; the main search "
                                                                 "gets 12%, 45% is kept for timing; eqsat and the "
                                                                 "peers run while they fit). Default: 100 s plus "
                                                                 "400 s per GB of the model's weights.",
                                                  show_default=False)] = None,
    k: Annotated[int | None, typer.Option("--k", help="Maximum number of substitutions applied.")] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="onnxruntime intra-op threads the model is "
                                                                  "timed and chosen at (default: every core, "
                                                                  "as onnxruntime itself).")] = None,
    peers: Annotated[str, typer.Option("--peers", help="Peers whose passes make portfolio candidates: auto (the "
                                                       "installed ones of onnxscript, onnxslim, onnxsim, "
                                                       "onnxoptimizer), none, or a comma-separated list.")] = "auto",
    eqsat_budget: Annotated[float, typer.Option("--eqsat-budget", help="Seconds of equality saturation for a "
                                                                       "portfolio candidate (0: none), within "
                                                                       "--budget.")] = 5.0,
    on_top_budget: Annotated[float, typer.Option("--on-top-budget", help="Seconds of search on top of each "
                                                                         "peer's output (0: none), within "
                                                                         "--budget.")] = 2.0,
    ort_search_budget: Annotated[float, typer.Option("--ort-search-budget", help="Seconds of the search priced by "
                                                                                "the kernels onnxruntime runs, "
                                                                                "over the rules and the passes' "
                                                                                "rules (0: none), within "
                                                                                "--budget.")] = 10.0,
    provider: Annotated[str, typer.Option("--provider", help="onnxruntime execution provider the candidates are "
                                                             "timed and chosen on: cpu, or cuda (needs "
                                                             "onnxruntime-gpu and an NVIDIA GPU).")] = "cpu",
    spelling: Annotated[bool, typer.Option("--spelling/--no-spelling", help="The hand-ordered passes: also try "
                                                                            "each candidate with the ort-spelling "
                                                                            "rules (steer onnxruntime's own "
                                                                            "fusions) and its (batch, sequence, "
                                                                            "hidden) activations written as rows "
                                                                            "(no Reshape copies around Gemm), and, "
                                                                            "where the model has channels-last MLPs "
                                                                            "(ConvNeXt), written channels-first. "
                                                                            "--no-spelling leaves these rewrites "
                                                                            "to the search priced by onnxruntime's "
                                                                            "kernels (their rules)."),
                        ] = True,
    cleanup: Annotated[bool, typer.Option("--cleanup/--no-cleanup", help="Start every search from the model "
                                                                          "cleaned up: constants folded, repeated "
                                                                          "subexpressions merged, no-op and chained "
                                                                          "layout ops removed (the cleanup rules, "
                                                                          "in linear time).")] = True,
    keep_slower: Annotated[bool, typer.Option("--keep-slower", help="Write the optimized model even when it is "
                                                                    "not faster under ORT_ENABLE_ALL.")] = False,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="Smallest speedup under ORT_ENABLE_ALL worth "
                                                                     "keeping a candidate for (its interval must "
                                                                     "also be above 1.0x and its gain above what "
                                                                     "the A/A control reads).")] = MIN_SPEEDUP,
    seeds: Annotated[int, typer.Option("--seeds", help="Random input draws for verification.")] = 3,
    training: Annotated[bool, typer.Option("--training", help="Optimize the training graph instead (MetaFlow "
                                                              "Sec. 6.3): forward and backward as one graph whose "
                                                              "outputs are the loss and the gradient of every "
                                                              "trained weight (ONNX in, ONNX out; see --loss, "
                                                              "--params, --batchnorm). For FILE.py:ClassName: "
                                                              "optimized for PyTorch, the faster emitted module "
                                                              "written as -o OUT.py (weights: OUT.pt); with -o "
                                                              "OUT.onnx, the module is exported as it trains and "
                                                              "its ONNX training graph optimized.")] = False,
    loss: Annotated[str, typer.Option("--loss", help="--training: cross_entropy (against soft/one-hot 'labels' "
                                                     "of the output's shape, batch mean), mse (against 'target'), "
                                                     "or output (the model's output is the loss).")] = "cross_entropy",
    params: Annotated[str | None, typer.Option("--params", help="--training: the weights to train, "
                                                                "comma-separated (default: every floating-point "
                                                                "weight of more than one element that is not a "
                                                                "batch-norm running statistic).")] = None,
    batchnorm: Annotated[str, typer.Option("--batchnorm", help="--training: batch (normalise with the batch's "
                                                               "statistics, as train() does) or frozen (the "
                                                               "running statistics, as eval() does).")] = "batch",
    report_path: Annotated[Path | None, typer.Option("--report", help="Also write a self-contained HTML report "
                                                                      "(histograms, substitutions, cost, latency, "
                                                                      "search trace, changed regions), even when "
                                                                      "the model is not written.")] = None,
    input_shape: ShapeOpt = None,
    check_sizes: CheckSizesOpt = None,
    dim_sizes: SizesOpt = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Optimize an ONNX model: find an equivalent graph that onnxruntime runs faster.

    1. Clean up (fold constants, merge repeated subexpressions, remove no-op and chained layout ops), then search
    with the rule set and cost model (ops graphsub does not model are kept as they are).

    2. Verify against the input in onnxruntime on random inputs; on failure, name the bad substitution.

    3. Portfolio: more candidates from equality saturation, a second search priced by the kernels onnxruntime runs
    for the region each substitution changes (search-ort: the rules plus the ones that re-express the passes below,
    ort-spelling, channels-first and rows, so the search decides where they pay; --ort-search-budget), the installed
    peers (with graphsub's search on top), the ort-spelling pass (with transformer activations (batch, sequence,
    hidden) written as rows (batch * sequence, hidden), so that onnxruntime's Gemms need no Reshape copies) and, for
    channels-last MLPs between convolutions (ConvNeXt), the same written channels-first with 1x1 convolutions; each
    is verified against the input, and the verified ones are timed side by side under ORT_ENABLE_ALL at --threads
    (rounds in rotating order; a short screening round first when there are many). A candidate that onnxruntime runs
    exactly as the input or an earlier candidate (the same graph after its own optimizations) is not timed: a tie
    that timing noise must not pass off as a gain.

    4. Decide: the leaders (at most two) are measured anew against the input in fresh session groups (new
    sessions of each file per group, paired rounds in balanced orders) with an A/A control (the input against
    fresh sessions of itself), and a one-sided test over the groups decides, its false-positive rate bounded
    (5%, shared between the leaders): a candidate is faster only when its interval is above 1.0x, its speedup
    above --min-speedup and above what the A/A control reads. The line and --json report the speedup with its
    interval (speedup_ci), the A/A ratio (aa_ratio), rounds and sessions.

    5. Write OUTPUT atomically: the fastest candidate the decision declares faster, else the original (the
    decision says why in one line).

    6. With --report FILE.html, write an HTML report of all of the above (also when nothing is written).

    With --training, all of the above runs on the training graph: the model is differentiated (every
    gradient written with ordinary ops, so the same rules apply to the backward pass), the trained weights
    become inputs (no rule folds them; their step-0 values are the output's initializers), and every output,
    gradients included, is verified and timed. The output's inputs are the data, 'labels' (or 'target')
    and the weights; its outputs 'loss' and 'grad.<weight>'. --json adds max_grad_abs_diff (on the model's
    own weights) and speedup_train (forward + backward per step). Ops without a gradient: exit 3, named.

    Time: --budget (default 100 s, plus 400 s per GB of weights: what grows with the model, sessions, the peers'
    passes, each candidate's verification and timing) bounds the whole command, from its start to the written file: 12%
    for the search (12 s by default), eqsat, the peers and the searches on top of them while
    they fit (search-ort: 10 s), 45% kept for verifying and timing the candidates. With a small budget the portfolio
    shrinks (on-top searches, then eqsat, then the peers are left out) and the search gets their time;
    timing stops at the deadline, and a candidate not confirmed in time is not written (the original is).
    The overshoot is a few seconds at most: the interpreter's start and imports (about 1 s) and one
    step that cannot be interrupted (e.g. creating an onnxruntime session, or writing the output).

    A valid model graphsub cannot represent (a part it cannot type, e.g. a Reshape whose target shape is a graph
    input) is written back unchanged when onnxruntime runs it (exit 0, the decision says why); one onnxruntime
    rejects is bad input (exit 3).

    Ctrl-C: the first one finishes early with what is there (the search's best graph, the candidates
    verified so far; a candidate is written only if it was confirmed faster, otherwise nothing is
    written) and exits 130 after printing the result; a second one aborts at once.

    Symbolic dims of the input that --input-shape leaves free stay symbolic in the output; they are searched and
    timed at --sizes (by default at distinct sizes 2, 3, 5, ...: never 1). Every candidate is checked against the
    input at other sizes (two larger ones, --check-sizes, and a decoder's with a key/value cache: see
    --check-sizes) before it is timed; one of graphsub's that loses them is written again over the input's own
    nodes (its shape arithmetic runs again) and checked again; one that still does not keep them is dropped
    (noted).

    Exit codes: 0 written (optimized, or the original by design); 1 not verified, nothing written;

    2 usage; 3 bad input (unreadable model, unknown zoo name); 4 cannot write; 130 interrupted.
    """
    from graphsub.deadline import command_started
    from graphsub.search import Budget

    started = command_started()  # --budget bounds the whole command (start-up, checks, loading included)
    check_names(as_json, algo=algo, k=k)  # numeric options: checked by graphsub.cli.validate before this runs
    from graphsub.optimize.pipeline import default_threads

    threads = threads or default_threads()
    spec = _checked_spec(model, output, report_path, peers=peers, provider=provider, as_json=as_json)
    check_names(as_json, rules=rules, cost=cost, threads=threads)
    if training:
        _check_training(loss, batchnorm, as_json)
    shapes = parse_shapes(input_shape)
    sizes = _checked_sizes(spec, shapes, parse_check_sizes(check_sizes), as_json)
    at = _checked_sizes(spec, shapes, parse_check_sizes([dim_sizes] if dim_sizes else [], "--sizes"), as_json,
                        "--sizes")
    from graphsub.cli import train_module

    pytorch_route = train_module.torch_route(training, spec, output)
    if pytorch_route:
        train_module.check_options(spec, output, loss=loss, params=params, batchnorm=batchnorm, as_json=as_json)
    from graphsub.cli.common import log
    from graphsub.interrupt import EXIT_INTERRUPTED, graceful

    per_gb_s = PER_GB_S if budget is None else 0.0  # a budget given is the budget
    budget = DEFAULT_TIME_S if budget is None else budget
    cfg = OptimizeConfig(algo=algo, rules=rules, cost=cost, seed=seed, budget=Budget(time_s=None, k=k), time_s=budget,
                         time_per_gb_s=per_gb_s,
                         started=started, seeds=seeds, threads=threads, keep_slower=keep_slower,
                         min_speedup=min_speedup, peers=peers, eqsat_s=eqsat_budget, on_top_s=on_top_budget,
                         ort_search_s=ort_search_budget, spelling=spelling, cleanup=cleanup, provider=provider,
                         input_shapes=shapes, check_sizes=sizes, sizes=at[0] if at else None)
    # the bar's total: the file's size, its external data included, stands for the weights' (the library scales by
    # the weights once loaded)
    from graphsub.frontends.shared import file_bytes

    size = file_bytes(spec.name) if spec.kind == "onnx" and os.path.isfile(spec.name) else 0
    shown = scaled_time_s(budget, per_gb_s, size) or budget
    progress = _progress_bar(shown, as_json)
    with progress, exits(as_json, (ReferenceFailed, Exit.BAD_INPUT), (VerificationError, Exit.NOT_EQUIVALENT),
                         (ExportError, Exit.CANNOT_WRITE), (OSError, Exit.CANNOT_WRITE)), graceful(notify=_notify):
        log.info("optimizing %s within %g s; Ctrl-C stops it with the best verified result so far", spec.text, shown)
        cfg = dataclasses.replace(cfg, progress=_on_progress(progress, shown, started))
        extra: dict[str, Any] = {}
        if pytorch_route:
            train_module.run(spec, shapes, cfg, output, as_json)  # exits
        if training:
            tres = _optimize_training(spec, shapes, cfg, output, loss=loss, params=params, batchnorm=batchnorm)
            res, extra = tres.result, tres.to_dict()
        elif spec.kind == "module":
            res = _optimize_module(spec, shapes, cfg, output)
        else:
            try:
                res = optimize(spec.text, output=output, config=cfg)
            except NotModelled as e:
                if spec.kind != "onnx" or not _runs_in_onnxruntime(spec.name):
                    raise  # not a model onnxruntime runs: bad input
                _write_unmodelled(spec, output, e, as_json, report_path)  # exits
        if report_path is not None:
            assert cfg.progress is not None
            cfg.progress("report", 0.0, None)
            _write_report(res, report_path)
    code = EXIT_INTERRUPTED if res.interrupted else Exit.OK if res.verified else Exit.NOT_EQUIVALENT
    if as_json:
        print(json.dumps({**res.to_dict(), **extra, "exit_code": int(code)}, indent=2))
    else:
        _print_human(res)
        if extra:
            _print_training(extra)
    raise typer.Exit(int(code))


def _runs_in_onnxruntime(path: str) -> bool:
    """Whether onnxruntime loads the model at ``path`` (a model graphsub cannot import may still be valid)."""
    from graphsub.errors import GraphsubError
    from graphsub.frontends.ort import make_session

    try:
        make_session(path, optimization="disable", threads=1, prepack=False)
    except GraphsubError:
        return False
    return True


def _write_unmodelled(spec: ModelSpec, output: Path, error: NotModelled, as_json: bool,
                      report_path: Path | None) -> None:
    """A model onnxruntime runs but graphsub cannot import (a part it cannot type: a Reshape whose target shape is a
    graph input): nothing can be rewritten or verified, so the original is written unchanged, as every run that
    keeps the original writes it, and the command succeeds (exit 0), saying why."""
    from graphsub.optimize.output import write_original

    write_original(spec.name, output)
    decision = (f"kept the original: graphsub cannot model this graph ({error}); onnxruntime runs it, so it is "
                "written unchanged")
    if report_path is not None:
        err.print(f"no report: {decision}", style="yellow", markup=False, highlight=False)
    if as_json:
        print(json.dumps({"model": spec.text, "verified": True, "kept_original": True, "chosen": "original",
                          "decision": decision, "written": str(output), "modelled": False,
                          "exit_code": int(Exit.OK)}, indent=2))
    else:
        out.print(decision, markup=False, highlight=False)
        out.print(f"wrote {output}", markup=False, highlight=False)
    raise typer.Exit(int(Exit.OK))


def _notify(message: str) -> None:
    """What the first Ctrl-C prints (stderr)."""
    err.print(message, style="yellow", markup=False, highlight=False)


def _progress_bar(budget: float, as_json: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[best]}"),
                    TimeElapsedColumn(), console=err, transient=True, disable=as_json)


def _on_progress(progress: Progress, budget: float, started: float) -> ProgressFn:
    """The pipeline's progress callback, drawn on ``progress``: the bar fills with the command's wall time since
    ``started`` (a ``time.perf_counter()`` reading), out of ``budget`` seconds."""
    task = progress.add_task("loading", total=budget, best="")

    def note(phase: str, elapsed: float, best: float | None) -> None:
        fields: dict[str, Any] = {"description": PHASES.get(phase, phase),
                                  "completed": min(time.perf_counter() - started, budget)}
        if best is not None:
            fields["best"] = f"best cost {best:.6g}"
        progress.update(task, **fields)

    return note


def _write_report(res: OptimizeResult, path: Path) -> None:
    """Write the HTML report (also when nothing was written); its time is not part of ``total_s``."""
    from graphsub.optimize.report import write_report

    t = time.perf_counter()
    write_report(res, path)
    res.timings_s["report_s"] = time.perf_counter() - t


def _optimize_module(spec: ModelSpec, shapes: dict[str, tuple[int, ...]], cfg: OptimizeConfig,
                     output: Path) -> OptimizeResult:
    """``FILE.py:ClassName``: export the module on random inputs of the ``--input-shape`` shapes (in
    order), optimize, verify against the module itself."""
    from graphsub.frontends.torch_export import random_tensors
    from graphsub.optimize import optimize_module

    if not shapes:
        raise ImportError_("a FILE.py:ClassName model needs its input shapes: --input-shape x=1x3x32x32")
    module = spec.load_module()
    return optimize_module(module, random_tensors(list(shapes.values()), cfg.seed), output=output,
                           config=dataclasses.replace(cfg, input_shapes=None)).result


def _optimize_training(spec: ModelSpec, shapes: dict[str, tuple[int, ...]], cfg: OptimizeConfig, output: Path, *,
                       loss: str, params: str | None, batchnorm: str) -> Any:
    """``--training``: the training graph of the model (a PyTorch module is exported as it trains first)."""
    import tempfile

    from graphsub.optimize.training import optimize_training

    names = None if params is None else [p.strip() for p in params.split(",") if p.strip()]
    opts: dict[str, Any] = {"loss": loss, "params": names, "batchnorm": batchnorm}
    if spec.kind != "module":
        return optimize_training(spec.text, output=output, config=cfg, **opts)
    from graphsub.frontends.torch_export import export_module, random_tensors

    if not shapes:
        raise ImportError_("a FILE.py:ClassName model needs its input shapes: --input-shape x=1x3x32x32")
    with tempfile.TemporaryDirectory(prefix="graphsub-train-") as tmp:
        path = Path(tmp) / "module.onnx"
        export_module(spec.load_module(), random_tensors(list(shapes.values()), cfg.seed), path, training=True)
        return optimize_training(str(path), output=output, config=dataclasses.replace(cfg, input_shapes=None),
                                 **opts)


def _print_training(d: dict[str, Any]) -> None:
    """The training graph's own lines: what was trained, and the gradients' agreement on the model's weights."""
    def f(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3g}"

    out.print(f"training graph: loss {d['loss']}, batch norm {d['batchnorm']}, {d['params']} trained weight(s); "
              f"on the model's own weights: loss |diff| {f(d['max_loss_abs_diff'])}, gradients max |diff| "
              f"{f(d['max_grad_abs_diff'])} (largest gradient {f(d['max_abs_grad'])})", highlight=False)


def _print_human(res: OptimizeResult) -> None:
    r = res.search
    out.print(f"[bold]{res.model}[/] {r.algorithm}: cost {r.initial_cost:.6g} -> {r.best_cost:.6g} "
              f"({r.improvement:.1%} lower) in {r.wall_time_s:.1f}s; ops {res.original.num_ops} -> "
              f"{res.search.best.num_ops}, {len(r.sequence)} substitution(s)")
    if not res.candidates or not res.verified:
        print_sequence(r.sequence)
    if not res.verified:
        f = res.failure
        err.print(f"[bold red]verification failed[/]: {f.message if f else res.worst_output}; nothing written")
        if res.report:
            out.print(f"wrote the report to {res.report}")
        return
    out.print(f"verified on {len(res.seeds)} random input draw(s): max abs diff {res.max_abs_diff:.3g}")
    if res.candidates:
        _print_candidates(res)
    else:
        for n in res.portfolio_notes:  # what the budget left out (printed with the candidates otherwise)
            err.print(f"[yellow]portfolio[/]: {n}")
        if res.latency_ms:
            lat = res.latency_ms["all"]
            out.print(f"median latency under ORT_ENABLE_ALL, {res.threads} thread(s): {lat['before']:.3f} ms -> "
                      f"{lat['after']:.3f} ms ({res.speedup('all'):.3f}x)")
    chosen = res.chosen_candidate
    if chosen is not None and chosen.steps:
        counts = Counter(s.rule for s in chosen.steps)
        out.print(f"{chosen.name}: " + ", ".join(f"{rule} x{n}" if n > 1 else rule for rule, n in counts.items()),
                  highlight=False)
    t = res.timings_s
    parts = [f"{k.removesuffix('_s').replace('_', ' ')} {v:.1f}s" for k, v in t.items() if k != "total_s"]
    out.print(f"time: {', '.join(parts)}; total {t.get('total_s', 0.0):.1f}s", highlight=False)
    if res.budget_stop or res.interrupted:
        what = "interrupted" if res.interrupted else f"the {res.time_budget_s or 0:g} s budget ran out"
        err.print(f"[yellow]{what}[/]: finished with the candidates verified and timed so far")
    colour = "yellow" if res.kept_original else "green"
    out.print(f"[{colour}]{res.decision}[/]")
    if res.written:
        what = "the original model" if res.kept_original else "the optimized model"
        out.print(f"wrote {what} to {res.written}")
    elif res.interrupted:
        err.print("[yellow]nothing written[/] (interrupted before a candidate was confirmed faster)")
    if res.report:
        out.print(f"wrote the report to {res.report}")


def _print_candidates(res: OptimizeResult) -> None:
    """The portfolio: per candidate, where it came from, whether it verified, and its speed."""
    table = Table(title=f"candidates under ORT_ENABLE_ALL, {res.threads} thread(s) "
                        f"(original: {res.latency_ms['all']['before']:.3f} ms)" if res.latency_ms else "candidates")
    table.add_column("candidate", no_wrap=True)
    for head in ("substitutions", "verified", "ms", "side by side", "confirmed (interval; A/A)"):
        table.add_column(head, justify="right")
    for c in res.candidates:
        d = c.to_dict()
        if c.same_as:
            speed = (f"same file as {c.same_as}", "", "")
        elif d["ms"] is not None:
            v = c.confirmation
            conf = ("" if v is None or v.speedup is None or v.speedup_ci is None or v.aa_ratio is None else
                    f"{v.speedup:.3f}x ({v.speedup_ci[0]:.3f}-{v.speedup_ci[1]:.3f}; {v.aa_ratio:.3f}x)"
                    + (" faster" if v.faster else ""))
            speed = (f"{d['ms']:.3f}", f"{c.speedup:.3f}x", conf)
        elif c.screen_ratio is not None:
            speed = ("", f"~{c.screen_ratio:.2f}x (screened)", "")
        else:
            speed = ("", "", "")
        mark = "[green]yes[/]" if c.verified else ("[red]no[/]" if c.verified is False else "")
        name = f"[bold]{c.name}[/]" if c.name == res.chosen else c.name
        table.add_row(name, str(len(c.steps)), mark, *speed)
    wide(140).print(table)
    for c in res.candidates:
        if c.verified is False and not c.same_as:
            err.print(f"[yellow]{c.name}[/]: not verified, not timed: {c.error}")
    for n in res.portfolio_notes:
        err.print(f"[yellow]portfolio[/]: {n}")


__all__ = ["optimize_cmd"]
