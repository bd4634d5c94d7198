"""``graphsub search``: run one search algorithm on a model and optionally write the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from graphsub.cli.common import (
    Exit,
    JsonOpt,
    SeedOpt,
    ShapeOpt,
    check_names,
    confirm_output,
    describe_dims,
    err,
    exits,
    fail,
    load_graph,
    log,
    out,
    parse_shapes,
    parse_spec,
    print_sequence,
    write_graph,
)
from graphsub.interrupt import graceful
from graphsub.ir.graph import Graph
from graphsub.spec import ModelSpec, Shapes


def search_cmd(
    model: Annotated[str, typer.Argument(help="An .onnx file or zoo:NAME.")],
    algo: Annotated[str, typer.Option("--algo", help="greedy | taso | metaflow | enum | pruning | dpp | "
                                                     "sampling | eqsat (enum, pruning and dpp need --k).")] = "taso",
    rules: Annotated[str, typer.Option("--rules", help="Rule set (see `graphsub rules list`); "
                                                       "comma-separated sets are combined.")] = "default",
    cost: Annotated[str, typer.Option("--cost", help="Cost model: flops, bytes, roofline:cpu|p100|v100, "
                                                     "measured, fused.")] = "roofline:cpu",
    time_s: Annotated[float, typer.Option("--time", help="Wall-time budget in seconds.")] = 60.0,
    expansions: Annotated[int | None, typer.Option("--expansions", help="Graphs to expand at most.")] = None,
    k: Annotated[int | None, typer.Option("--k", help="Maximum substitution-sequence length K.")] = None,
    memory_mb: Annotated[float | None, typer.Option("--memory-mb", help="Stop above this RSS growth.")] = None,
    alpha: Annotated[float, typer.Option(help="Relaxation for taso/metaflow: keep graphs < alpha*best.")] = 1.05,
    q: Annotated[int, typer.Option("--q", help="Sample size Q for sampling.")] = 20,
    eta: Annotated[int, typer.Option("--eta", help="Successive cost increases for sampling.")] = 1,
    iter_limit: Annotated[int, typer.Option("--iter-limit", help="eqsat: saturation iterations at most.")] = 15,
    node_limit: Annotated[int, typer.Option("--node-limit", help="eqsat: e-nodes at most.")] = 50_000,
    multi_iters: Annotated[int, typer.Option("--multi-iters", help="eqsat: iterations that apply "
                                                                   "multi-pattern rules (Tensat's k_multi).")] = 2,
    extract: Annotated[str, typer.Option("--extract", help="eqsat: ilp (exact DAG cost, HiGHS) or greedy "
                                                           "(tree cost).")] = "ilp",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the optimized model (.onnx) "
                                                                       "after verifying it.")] = None,
    threads: Annotated[int | None, typer.Option(help="onnxruntime threads for measured costs.")] = None,
    input_shape: ShapeOpt = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Search for a cheaper equivalent graph with one algorithm and print what it found."""
    from graphsub.cost import get_model
    from graphsub.deadline import command_started, left_of_command
    from graphsub.rules.library import resolve_rules
    from graphsub.search import Budget, search

    started = command_started()  # --time bounds the whole command (start-up, loading, the rule set included)
    check_names(as_json, rules=rules, cost=cost, algo=algo, threads=threads, k=k, extract=extract)
    spec = parse_spec(model, as_json)
    if output is not None:
        confirm_output(spec, output, as_json)
    g = load_graph(spec, parse_shapes(input_shape), as_json)
    params: dict[str, Any] = {"alpha": alpha} if algo in ("taso", "metaflow") else {}
    if algo == "sampling":
        params = {"q": q, "eta": eta}
    if algo == "eqsat":
        params = {"iter_limit": iter_limit, "node_limit": node_limit, "multi_iters": multi_iters, "extract": extract}
    with exits(as_json):
        rule_list = resolve_rules(rules)
        cm = get_model(cost, threads=threads, progress=not as_json)
        what = f"searching {g.name} with {algo} ({len(rule_list)} rules, {cost})"
        with graceful(notify=lambda msg: err.print(escape(msg))), err.status(escape(what)):
            log.info("%s; Ctrl-C stops it with the best graph found so far", what)
            result = search(g, rule_list, cm, Budget(time_s=left_of_command(time_s, started), expansions=expansions,
                                                     k=k, memory_mb=memory_mb), seed, algo=algo, **params)
    report = None
    if output is not None:
        report = _write_verified(g, result.best, output, seed, as_json, spec, parse_shapes(input_shape))
    data = result.to_dict()
    data.update({"model": g.name, "rules": rules, "cost_model": cost, "initial_ops": g.num_ops})
    if report is not None:
        data["verification"] = report
    code = Exit.INTERRUPTED if result.stopped_by == "interrupt" else Exit.OK
    if as_json:
        print(json.dumps(data, indent=2))
        raise typer.Exit(int(code))
    out.print(f"[bold]{escape(g.name)}[/] {algo}: cost {result.initial_cost:.6g} -> {result.best_cost:.6g} "
              f"({result.improvement:.1%} lower) in {result.wall_time_s:.2f}s, {result.stats.expanded} graphs "
              f"expanded, stopped by {result.stopped_by}; ops {g.num_ops} -> {result.best.num_ops}")
    if algo == "eqsat":
        eg_, x = result.params["egraph"], result.params["extraction"]
        out.print(f"e-graph: {eg_['classes']} classes, {eg_['nodes']} e-nodes, {eg_['iterations']} iterations "
                  f"({eg_['stop']}); extraction: greedy {x['greedy_dag_cost']:.6g}"
                  + (f", ilp {x['ilp_cost']:.6g} ({x['ilp_status']})" if "ilp_cost" in x else "")
                  + f", chosen {x['chosen']}")
    print_sequence(result.sequence)
    if output is not None:
        dims = describe_dims(report["symbolic_dims"])  # type: ignore[index]
        out.print(f"wrote {escape(str(output))} (verified: max abs diff {report['max_abs_diff']:.3g}"  # type: ignore[index]
                  + (f"; {escape(dims)}" if dims else "") + ")")
    if code == Exit.INTERRUPTED:
        err.print("interrupted: the result above is the best found before Ctrl-C"
                  + ("" if output is None else " (verified and written)"))
    raise typer.Exit(int(code))


def _write_verified(original: Graph, best: Graph, output: Path, seed: int, as_json: bool, source: ModelSpec,
                    shapes: Shapes) -> dict[str, Any]:
    """Attach weights, fold weight-only subgraphs, verify against the original, write atomically (symbolic dims of
    the source kept symbolic, see :func:`graphsub.cli.common.write_graph`)."""
    from graphsub.data import materialize
    from graphsub.equivalence import equivalent
    from graphsub.optimize.verification import finalize

    with exits(as_json):  # a model onnxruntime cannot run is bad input
        ref = materialize(original, seed)
        final = finalize(ref, best, seed)
        report = equivalent(ref, final, seed=seed, trials=3)
    if not report.equivalent:
        fail(Exit.NOT_EQUIVALENT, f"the optimized graph failed verification ({report.worst_output}: max abs diff "
             f"{report.max_abs_diff:.3g}); nothing written", as_json)
    dims = write_graph(final, output, as_json, seed=seed, source=source, shapes=shapes, original=ref)
    return {"equivalent": report.equivalent, "max_abs_diff": report.max_abs_diff, "output": str(output),
            "symbolic_dims": dims}


__all__ = ["search_cmd"]
