"""The ``graphsub`` command line: a thin layer over the library.

Exit codes: 0 success; 1 models not equivalent (``verify``) or verification failed; 2 usage
error; 3 bad input (unreadable/malformed model, unknown zoo name, impossible shape);
4 cannot write output.  ``--json`` prints one JSON document on stdout for scripts.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.logging import RichHandler
from rich.table import Table

from graphsub import __version__
from graphsub.cli_common import (
    Exit,
    JsonOpt,
    SeedOpt,
    ShapeOpt,
    _confirm_not_input,
    _fail,
    _load_or_exit,
    _parse_shapes,
    _write,
    err,
    load_model,
    log,
    out,
)
from graphsub.errors import ExportError, GraphsubError, VerificationError

app = typer.Typer(
    name="graphsub",
    help=(
        "graphsub speeds up deep-learning models by rewriting their computation graphs with "
        "equivalent substitutions, checking every result numerically in onnxruntime.\n\n"
        "MODEL arguments are an .onnx file or a built-in benchmark model written zoo:NAME "
        "(e.g. zoo:resnext50, zoo:resnet:blocks=4); see `graphsub zoo list`.\n\n"
        "Start with `graphsub optimize model.onnx -o faster.onnx`.\n\n"
        "Exit codes: 0 ok, 1 not equivalent, 2 usage error, 3 bad input, 4 cannot write output."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
zoo_app = typer.Typer(help="Built-in benchmark models (TASO/OCGGS set and classic CNNs).", no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")

def _setup_logging(verbose: bool) -> None:
    if not log.handlers:
        handler = RichHandler(console=err, show_time=False, show_path=False)
        log.addHandler(handler)
    log.setLevel(logging.INFO if verbose else logging.WARNING)


def _version(value: bool) -> None:
    if value:
        print(f"graphsub {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show informational messages.")] = False,
    version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", callback=_version, is_eager=True)
    ] = False,
) -> None:
    _setup_logging(verbose)


# ----------------------------------------------------------------------------- info


def graph_info(graph: Any) -> dict[str, Any]:
    """Summary used by ``graphsub info``: op histogram, FLOPs, parameters, shapes."""
    flops = 0
    nbytes = 0
    opaque: dict[str, int] = {}
    for node in graph.nodes.values():
        sig = node.sig
        if sig.opdef.leaf:
            continue
        flops += sig.opdef.flops(sig.in_types, sig.out_types, sig.attr)
        nbytes += sig.opdef.bytes_moved(sig.in_types, sig.out_types, sig.attr)
        if sig.op == "opaque":
            key = sig.attr["op_type"]
            opaque[key] = opaque.get(key, 0) + 1
    weights = [graph.nodes[n].sig.out_types[0] for n in graph.ops_of("weight")]
    return {
        "name": graph.name,
        "num_ops": graph.num_ops,
        "num_nodes": graph.num_nodes,
        "op_histogram": graph.op_histogram(),
        "opaque_ops": dict(sorted(opaque.items())),
        "flops": flops,
        "bytes_moved": nbytes,
        "params": sum(t.numel for t in weights),
        "param_bytes": sum(t.nbytes for t in weights),
        "weights_with_data": len(graph.params),
        "num_weights": len(weights),
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype}
                   for n, t in zip(graph.input_names, graph.input_types, strict=True)],
        "outputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype}
                    for n, t in zip(graph.output_names, graph.output_types, strict=True)],
        "structural_hash": f"{graph.structural_hash() & 0xFFFFFFFFFFFFFFFF:016x}",
    }


def _human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g}P"


@app.command()
def info(
    model: Annotated[str, typer.Argument(help="An .onnx file or zoo:NAME.")],
    input_shape: ShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a model's op histogram, FLOPs, parameter count and input/output shapes."""
    g = _load_or_exit(model, _parse_shapes(input_shape), as_json)
    data = graph_info(g)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    out.print(f"[bold]{data['name']}[/]: {data['num_ops']} ops, {_human(data['flops'])}FLOPs, "
              f"{_human(data['params'])} params ({_human(data['param_bytes'])}B)")
    for kind in ("inputs", "outputs"):
        for v in data[kind]:
            out.print(f"  {kind[:-1]:6} {v['name']}: {v['dtype']}{v['shape']}")
    table = Table("op", "count", title="op histogram")
    for op, n in data["op_histogram"].items():
        table.add_row(op, str(n))
    out.print(table)
    if data["opaque_ops"]:
        out.print(f"opaque (kept verbatim): {data['opaque_ops']}")


# ----------------------------------------------------------------------------- zoo


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
    g = _load_or_exit(name if name.startswith("zoo:") else f"zoo:{name}", None, as_json)
    with err.status(f"exporting {g.name} ({g.num_ops} ops)"):
        _write(g, output, as_json, seed=seed)
    if as_json:
        print(json.dumps({"name": g.name, "num_ops": g.num_ops, "output": str(output)}))
    else:
        out.print(f"wrote {output} ({g.num_ops} ops)")


# ----------------------------------------------------------------------------- convert / verify


@app.command()
def convert(
    model: Annotated[str, typer.Argument(help="Input .onnx file (or zoo:NAME).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Output .onnx file (never the input).")],
    input_shape: ShapeOpt = None,
    verify: Annotated[bool, typer.Option(help="Check the written model against the input first.")] = True,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Import a model into graphsub's IR and export it again (the ONNX round trip)."""
    _confirm_not_input(model, output, as_json)
    g = _load_or_exit(model, _parse_shapes(input_shape), as_json)
    from graphsub.data import materialize
    from graphsub.frontends.onnx_io import from_onnx, to_onnx

    g = materialize(g, seed)
    report = None
    if verify:
        from graphsub.verify import equivalent

        with err.status("verifying the round trip in onnxruntime"):
            try:
                report = equivalent(g, from_onnx(to_onnx(g)), seed=seed)
            except GraphsubError as e:
                _fail(Exit.NOT_EQUIVALENT, f"verification failed: {e}", as_json)
        if report is not None and not report.equivalent:
            _fail(Exit.NOT_EQUIVALENT, f"round trip differs (max abs diff {report.max_abs_diff:.3g}); "
                  "nothing written", as_json)
    _write(g, output, as_json, seed=seed)
    result = {"output": str(output), "num_ops": g.num_ops,
              "max_abs_diff": None if report is None else report.max_abs_diff}
    if as_json:
        print(json.dumps(result))
    else:
        out.print(f"wrote {output} ({g.num_ops} ops" +
                  ("" if report is None else f", round trip max abs diff {report.max_abs_diff:.3g}") + ")")


@app.command("verify")
def verify_cmd(
    model_a: Annotated[str, typer.Argument(help="Reference model (.onnx or zoo:NAME).")],
    model_b: Annotated[str, typer.Argument(help="Candidate model.")],
    seed: SeedOpt = 0,
    trials: Annotated[int, typer.Option(help="Number of random input draws.")] = 3,
    rtol: Annotated[float, typer.Option(help="Relative tolerance.")] = 1e-4,
    atol: Annotated[float, typer.Option(help="Absolute tolerance.")] = 1e-5,
    input_shape: ShapeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check two models compute the same function on random inputs (exit 0 iff equivalent)."""
    from graphsub.verify import equivalent

    shapes = _parse_shapes(input_shape)
    a = _load_or_exit(model_a, shapes, as_json)
    b = _load_or_exit(model_b, shapes, as_json)
    try:
        with err.status("running both models in onnxruntime"):
            report = equivalent(a, b, seed=seed, trials=trials, rtol=rtol, atol=atol)
    except VerificationError as e:
        _fail(Exit.NOT_EQUIVALENT, str(e), as_json)
    except ExportError as e:
        _fail(Exit.BAD_INPUT, str(e), as_json)
    except GraphsubError as e:
        _fail(Exit.BAD_INPUT, str(e), as_json)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        verdict = "[green]equivalent[/]" if report.equivalent else "[red]NOT equivalent[/]"
        out.print(f"{verdict}: max abs diff {report.max_abs_diff:.3g}, max rel diff "
                  f"{report.max_rel_diff:.3g} (worst output {report.worst_output!r}, rtol {rtol}, atol {atol})")
    raise typer.Exit(int(Exit.OK if report.equivalent else Exit.NOT_EQUIVALENT))


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


__all__ = ["app", "graph_info", "load_model", "main"]


from graphsub.cli_bench import bench_cmd  # noqa: E402  (these need the helpers above)
from graphsub.cli_cost import cost_cmd, profile_cmd  # noqa: E402
from graphsub.cli_dynamic import dynamic_app  # noqa: E402
from graphsub.cli_fuse import fuse_cmd  # noqa: E402
from graphsub.cli_optimize import optimize_cmd  # noqa: E402
from graphsub.cli_rules import rules_app  # noqa: E402
from graphsub.cli_search import search_cmd  # noqa: E402

app.add_typer(rules_app, name="rules")
app.add_typer(dynamic_app, name="dynamic")
app.command("cost")(cost_cmd)
app.command("profile")(profile_cmd)
app.command("search")(search_cmd)
app.command("optimize")(optimize_cmd)
app.command("bench")(bench_cmd)
app.command("fuse")(fuse_cmd)
