"""``graphsub convert`` (the ONNX round trip, verified) and ``graphsub verify`` (numeric equivalence)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from graphsub.cli.common import (
    Exit,
    JsonOpt,
    SeedOpt,
    ShapeOpt,
    confirm_output,
    describe_dims,
    err,
    exits,
    fail,
    load_graph,
    out,
    parse_shapes,
    parse_spec,
    write_graph,
)
from graphsub.errors import GraphsubError, ReferenceFailed, VerificationError


def convert(
    model: Annotated[str, typer.Argument(help="Input .onnx file (or zoo:NAME).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Output .onnx file (never the input).")],
    input_shape: ShapeOpt = None,
    verify: Annotated[bool, typer.Option(help="Check the written model against the input first.")] = True,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Import a model into graphsub's IR and export it again (the ONNX round trip)."""
    from graphsub.data import materialize
    from graphsub.equivalence import equivalent
    from graphsub.frontends.onnx_io import from_onnx, to_onnx

    spec = parse_spec(model, as_json)
    confirm_output(spec, output, as_json)
    g = materialize(load_graph(spec, parse_shapes(input_shape), as_json), seed)
    report = None
    if verify:
        with err.status("verifying the round trip in onnxruntime"):
            try:
                report = equivalent(g, from_onnx(to_onnx(g)), seed=seed)
            except ReferenceFailed as e:  # onnxruntime rejects the input model itself: bad input, as in verify
                fail(Exit.BAD_INPUT, str(e), as_json)
            except GraphsubError as e:
                fail(Exit.NOT_EQUIVALENT, f"verification failed: {e}", as_json)
        if not report.equivalent:
            fail(Exit.NOT_EQUIVALENT, f"round trip differs (max abs diff {report.max_abs_diff:.3g}); nothing written",
                 as_json)
    dims = write_graph(g, output, as_json, seed=seed, source=spec, shapes=parse_shapes(input_shape))
    result = {"output": str(output), "num_ops": g.num_ops,
              "max_abs_diff": None if report is None else report.max_abs_diff, "symbolic_dims": dims}
    if as_json:
        print(json.dumps(result))
    else:
        out.print(f"wrote {output} ({g.num_ops} ops" +
                  ("" if report is None else f", round trip max abs diff {report.max_abs_diff:.3g}") +
                  (f"; {describe_dims(dims)}" if dims else "") + ")")


def verify(
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
    from graphsub.equivalence import equivalent

    shapes = parse_shapes(input_shape)
    a = load_graph(model_a, shapes, as_json)
    b = load_graph(model_b, shapes, as_json)
    with err.status("running both models in onnxruntime"), exits(as_json, (ReferenceFailed, Exit.BAD_INPUT),
                                                                 (VerificationError, Exit.NOT_EQUIVALENT)):
        report = equivalent(a, b, seed=seed, trials=trials, rtol=rtol, atol=atol)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        verdict = "[green]equivalent[/]" if report.equivalent else "[red]NOT equivalent[/]"
        out.print(f"{verdict}: max abs diff {report.max_abs_diff:.3g}, max rel diff "
                  f"{report.max_rel_diff:.3g} (worst output {report.worst_output!r}, rtol {rtol}, atol {atol})")
    raise typer.Exit(int(Exit.OK if report.equivalent else Exit.NOT_EQUIVALENT))


__all__ = ["convert", "verify"]
