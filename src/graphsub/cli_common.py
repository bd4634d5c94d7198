"""Helpers shared by the ``graphsub`` sub-commands: consoles, exit codes, common options, model loading.

Exit codes: 0 success; 1 models not equivalent (``verify``) or verification failed; 2 usage
error; 3 bad input (unreadable/malformed model, unknown zoo name, impossible shape);
4 cannot write output.
"""

from __future__ import annotations

import json
import logging
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from graphsub.errors import GraphsubError

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


def _fail(code: Exit, message: str, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"error": message, "exit_code": int(code)}))
    else:
        err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(int(code))


def _parse_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            raise typer.BadParameter(f"expected NAME=DxDxD, got {spec!r}", param_hint="--input-shape") from None
    return shapes


def _parse_zoo_spec(spec: str) -> tuple[str, dict[str, Any]]:
    name, _, rest = spec.partition(":")
    kwargs: dict[str, Any] = {}
    for part in filter(None, rest.split(",")):
        key, sep, value = part.partition("=")
        if not sep:
            raise GraphsubError(f"bad zoo argument {part!r}; expected key=value (e.g. zoo:resnet:blocks=4)")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return name, kwargs


def load_model(spec: str, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Any:
    """A Graph from ``zoo:NAME[:k=v,...]`` or an ONNX path."""
    if spec.startswith("zoo:"):
        from graphsub import zoo

        name, kwargs = _parse_zoo_spec(spec[4:])
        return zoo.get(name, **kwargs)
    from graphsub.frontends.onnx_io import load

    return load(spec, input_shapes=input_shapes)


def _load_or_exit(spec: str, shapes: dict[str, tuple[int, ...]] | None, as_json: bool) -> Any:
    try:
        return load_model(spec, shapes)
    except GraphsubError as e:
        _fail(Exit.BAD_INPUT, str(e), as_json)
    except TypeError as e:  # bad zoo keyword arguments
        _fail(Exit.BAD_INPUT, f"{spec}: {e}", as_json)


def _confirm_not_input(src: str | None, dst: Path, as_json: bool) -> None:
    """Refuse an output that is the input file, or whose directory is missing (checked before long work)."""
    if src and not src.startswith("zoo:") and Path(src).resolve() == dst.resolve():
        _fail(Exit.USAGE, f"refusing to overwrite the input file {src}", as_json)
    if not dst.resolve().parent.is_dir():
        _fail(Exit.CANNOT_WRITE, f"{dst}: directory {dst.parent} does not exist", as_json)


def _write(graph: Any, output: Path, as_json: bool, *, seed: int) -> None:
    from graphsub.data import materialize
    from graphsub.frontends.onnx_io import save

    try:
        save(materialize(graph, seed), output)
    except GraphsubError as e:
        _fail(Exit.CANNOT_WRITE, str(e), as_json)
    except OSError as e:
        _fail(Exit.CANNOT_WRITE, f"{output}: {e}", as_json)


def print_sequence(steps: Any) -> None:
    """Print a substitution sequence (``Step`` objects) as a table; nothing when empty."""
    if not steps:
        return
    from rich.table import Table

    table = Table("#", "rule", "nodes", "cost after", title="substitutions")
    for i, st in enumerate(steps, 1):
        table.add_row(str(i), st.rule, ",".join(map(str, st.nodes)), f"{st.cost:.6g}")
    out.print(table)


__all__ = ["Exit", "JsonOpt", "SeedOpt", "ShapeOpt", "err", "load_model", "log", "out", "print_sequence"]
