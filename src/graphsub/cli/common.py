"""What every ``graphsub`` command shares: consoles, exit codes, common options, model loading, writing.

Exit codes (the same in every command): 0 success; 1 models not equivalent (``verify``) or verification
failed; 2 usage error; 3 bad input (unreadable/malformed model, unknown zoo name, impossible shape);
4 cannot write output.  ``--json`` prints one JSON document on stdout; errors then print
``{"error": ..., "exit_code": ...}`` instead of a message on stderr.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from graphsub.errors import ExportError, GraphsubError
from graphsub.ir.graph import Graph
from graphsub.spec import ModelSpec, OverwriteError, Shapes, check_output

err = Console(stderr=True)
out = Console()
log = logging.getLogger("graphsub")


class Exit(IntEnum):
    OK = 0
    NOT_EQUIVALENT = 1
    USAGE = 2
    BAD_INPUT = 3
    CANNOT_WRITE = 4


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random inputs and weights.")]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input-shape",
        help="Static shape for an input with symbolic dims, NAME=1x3x224x224 (repeatable). "
        "Unspecified symbolic dims default to 1.",
    ),
]
ModelArg = Annotated[str, typer.Argument(help="An .onnx file or zoo:NAME[:k=v,...] (see `graphsub zoo list`).")]


def fail(code: Exit, message: str, as_json: bool = False) -> NoReturn:
    """Print ``message`` (or a JSON error document) and exit with ``code``."""
    if as_json:
        print(json.dumps({"error": message, "exit_code": int(code)}))
    else:
        err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(int(code))


@contextmanager
def exits(as_json: bool, *codes: tuple[type[Exception], Exit], default: Exit = Exit.BAD_INPUT) -> Iterator[None]:
    """Turn an error raised inside the block into :func:`fail`: ``codes`` pairs exception classes
    with exit codes (first match wins, e.g. ``(VerificationError, Exit.NOT_EQUIVALENT)``); any other
    GraphsubError exits with ``default``."""
    caught: tuple[type[Exception], ...] = (GraphsubError, *(cls for cls, _ in codes))
    try:
        yield
    except caught as e:
        code = next((c for cls, c in codes if isinstance(e, cls)), default)
        fail(code, str(e), as_json)


def parse_shapes(specs: list[str] | None) -> Shapes:
    """``["x=1x3x8x8"]`` -> ``{"x": (1, 3, 8, 8)}``; a malformed spec is a usage error."""
    shapes: Shapes = {}
    for spec in specs or []:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            raise typer.BadParameter(f"expected NAME=DxDxD, got {spec!r}", param_hint="--input-shape") from None
    return shapes


def parse_spec(text: str, as_json: bool) -> ModelSpec:
    """The model spec of a command-line argument (a malformed one is bad input)."""
    with exits(as_json):
        return ModelSpec.parse(text)


def load_graph(spec: str | ModelSpec, shapes: Shapes | None, as_json: bool) -> Graph:
    """The graph a model spec names, or exit 3 (bad input) saying why."""
    with exits(as_json):
        return (spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)).load(shapes)


def confirm_output(source: str | ModelSpec | None, dst: Path, as_json: bool) -> None:
    """Refuse an output that is the input file (exit 2) or whose directory is missing (exit 4);
    checked before any long work."""
    spec = ModelSpec.parse(source) if isinstance(source, str) else source
    try:
        check_output(spec, dst)
    except OverwriteError as e:
        fail(Exit.USAGE, str(e), as_json)
    except ExportError as e:
        fail(Exit.CANNOT_WRITE, str(e), as_json)


def write_graph(graph: Graph, output: Path, as_json: bool, *, seed: int) -> None:
    """Export ``graph`` (random data for weights without any) and write it atomically, or exit 4."""
    from graphsub.data import materialize
    from graphsub.frontends.onnx_io import save

    try:
        save(materialize(graph, seed), output)
    except GraphsubError as e:
        fail(Exit.CANNOT_WRITE, str(e), as_json)
    except OSError as e:
        fail(Exit.CANNOT_WRITE, f"{output}: {e}", as_json)


def print_sequence(steps: Sequence[Any]) -> None:
    """Print a substitution sequence (``Step`` objects) as a table; nothing when empty."""
    if not steps:
        return
    table = Table("#", "rule", "nodes", "cost after", title="substitutions")
    for i, st in enumerate(steps, 1):
        table.add_row(str(i), st.rule, ",".join(map(str, st.nodes)), f"{st.cost:.6g}")
    out.print(table)


def wide(width: int = 200) -> Console:
    """``out``, or (when stdout is not a terminal) a ``width``-column console so tables are not squeezed."""
    return out if out.is_terminal else Console(width=width)


def split_list(text: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None stays None."""
    return None if text is None else [p.strip() for p in text.split(",") if p.strip()]


__all__ = ["Exit", "JsonOpt", "ModelArg", "SeedOpt", "ShapeOpt", "confirm_output", "err", "exits", "fail",
           "load_graph", "log", "out", "parse_shapes", "parse_spec", "print_sequence", "split_list", "wide",
           "write_graph"]
