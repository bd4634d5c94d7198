"""What every ``graphsub`` command shares: consoles, exit codes, common options, model loading, writing.

Exit codes (the same in every command): 0 success; 1 models not equivalent (``verify``) or verification
failed; 2 usage error (an option out of range, an unknown rule set, algorithm or cost model name, an output that is
the input); 3 bad input (unreadable/malformed model, a model onnxruntime rejects, unknown zoo name, impossible
shape); 4 cannot write output; 5 internal error (a bug); 130 interrupted by Ctrl-C; 143 terminated (SIGTERM).
``--json`` prints one JSON document on stdout; errors then print ``{"error": ..., "exit_code": ...}`` instead of a
message on stderr.
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
from rich.errors import MarkupError
from rich.markup import escape
from rich.table import Table

from graphsub.errors import ExportError, GraphsubError, VerificationError
from graphsub.ir.graph import Graph
from graphsub.spec import ModelSpec, OverwriteError, Shapes, check_output


class SafeConsole(Console):
    """A console whose ``print`` never fails on markup: text from users' files (model, tensor and op names, paths)
    may contain ``[/]`` or ``[bold]``; where escaping was missed, the line is printed as plain text instead of
    raising MarkupError."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        try:
            super().print(*objects, **kwargs)
        except MarkupError:
            markup, self._markup = self._markup, False  # also for the cells of tables, rendered inside print
            try:
                super().print(*objects, **{**kwargs, "markup": False})
            finally:
                self._markup = markup


err = SafeConsole(stderr=True)
out = SafeConsole()
log = logging.getLogger("graphsub")


class Exit(IntEnum):
    OK = 0
    NOT_EQUIVALENT = 1
    USAGE = 2
    BAD_INPUT = 3
    CANNOT_WRITE = 4
    INTERNAL = 5  # a bug in graphsub (cli.root turns any unexpected exception into this, never a traceback)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143  # SIGTERM (128 + SIGTERM)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random inputs and weights.")]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input-shape",
        help="Static shape for an input with symbolic dims, NAME=1x3x224x224 (repeatable). "
        "Unspecified symbolic dims stay symbolic in the written model (checked at other sizes; a graph whose "
        "export baked a size in is written over the file's own nodes, and where that fails too nothing is written: "
        "give the shape here); they are imported at 1, by optimize at --sizes.",
    ),
]
SizesOpt = Annotated[
    str | None,
    typer.Option(
        "--sizes",
        help="The sizes the input's free symbolic dims are searched and timed at, NAME=N,NAME=N (e.g. "
        "batch_size=1,sequence_length=128); the output keeps them symbolic. A dim left out is imported at a "
        "distinct size of 2, 3, 5, 7, ... (never 1, so that no rewrite relies on a size that varies); a key/value "
        "cache's total length is past + sequence.",
    ),
]
CheckSizesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--check-sizes",
        help="More sizes of the input's symbolic dims at which the written model is checked against it, "
        "NAME=N,NAME=N (repeatable; a dim left out keeps its imported size), e.g. "
        "batch_size=1,sequence_length=1,past_sequence_length=0. Besides these, every symbolic dim is checked at two "
        "larger sizes and, for a decoder with a key/value cache (inputs past*, outputs present*, the presents' "
        "length total = past + sequence, as the attention mask's), at (batch, sequence, past) = (1, 1, 0), "
        "(1, 1, 127), (2, 7, 33) and (1, 128, 0) with every output compared, presents too; total is past + "
        "sequence there and at import. A candidate that differs or fails at one is not written (the original is).",
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


#: the exact sequence searches: they need a maximum sequence length (--k)
NEEDS_K = ("enum", "pruning", "dpp")


def check_names(as_json: bool, *, rules: str | None = None, cost: str | None = None, algo: str | None = None,
                threads: int | None = None, k: int | None = None, extract: str | None = None) -> None:
    """Unknown rule sets, cost models and search algorithms (and an exact search without ``--k``) are usage errors
    (exit 2) in every command, found before any work."""
    from graphsub.cost import get_model
    from graphsub.rules.library import resolve_rules
    from graphsub.search import ALGORITHMS

    if algo is not None and algo not in ALGORITHMS:
        fail(Exit.USAGE, f"unknown algorithm {algo!r}; known: {', '.join(ALGORITHMS)}", as_json)
    if extract is not None and extract not in ("ilp", "greedy"):
        fail(Exit.USAGE, f"unknown extraction {extract!r}; known: ilp, greedy", as_json)
    if algo in NEEDS_K and k is None:
        fail(Exit.USAGE, f"--algo {algo} needs a maximum sequence length (--k)", as_json)
    with exits(as_json, default=Exit.USAGE):
        if rules is not None:
            resolve_rules(rules)
        if cost is not None:
            get_model(cost, threads=threads, progress=False)


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


def parse_check_sizes(specs: list[str] | None, option: str = "--check-sizes") -> list[dict[str, int]]:
    """``["b=1,s=7"]`` -> ``[{"b": 1, "s": 7}]``; a malformed spec (or a negative size) is a usage error."""
    out: list[dict[str, int]] = []
    for spec in specs or []:
        sizes: dict[str, int] = {}
        for part in spec.split(","):
            name, sep, size = part.strip().partition("=")
            if not sep or not name.strip() or not size.strip().isdigit():
                raise typer.BadParameter(f"expected NAME=N,NAME=N, got {spec!r}", param_hint=option)
            sizes[name.strip()] = int(size)
        out.append(sizes)
    return out


def parse_spec(text: str, as_json: bool) -> ModelSpec:
    """The model spec of a command-line argument (a malformed one is bad input)."""
    with exits(as_json):
        return ModelSpec.parse(text)


def load_graph(spec: str | ModelSpec, shapes: Shapes | None, as_json: bool) -> Graph:
    """The graph a model spec names, or exit 3 (bad input) saying why."""
    with exits(as_json):
        return (spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)).load(shapes)


def confirm_output(source: str | ModelSpec | None, dst: Path, as_json: bool) -> None:
    """Refuse an output that is the input file (exit 2), or that cannot be written (exit 4: a directory, device or
    FIFO, a missing or read-only directory; see :func:`graphsub.spec.check_output`); checked before any long work."""
    spec = ModelSpec.parse(source) if isinstance(source, str) else source
    try:
        check_output(spec, dst)
    except OverwriteError as e:
        fail(Exit.USAGE, str(e), as_json)
    except ExportError as e:
        fail(Exit.CANNOT_WRITE, str(e), as_json)


def write_graph(graph: Graph, output: Path, as_json: bool, *, seed: int, source: ModelSpec | None = None,
                shapes: Shapes | None = None, original: Graph | None = None) -> dict[str, Any] | None:
    """Export ``graph`` (random data for weights without any) and write it atomically, or exit 4.

    ``source``: the spec ``graph`` comes from (loaded with ``shapes``; ``original``: its graph, default ``graph``):
    symbolic dims of its file that ``shapes`` leave free are kept symbolic in the output (where the plain export
    loses them, the graph is written over the file's own nodes, :func:`graphsub.symbolic.keep_spliced`), or nothing
    is written and the exit code is 1 (:func:`graphsub.symbolic.keep_symbolic`).  Returns what happened to the symbolic
    dims (``{"kept": [...], "fixed": {...}}``), None when the source declares none."""
    from graphsub.data import materialize
    from graphsub.frontends.dims import interface
    from graphsub.frontends.onnx_io import to_onnx, write_model
    from graphsub.symbolic import keep_spliced, keep_symbolic

    path = source.path if source is not None and source.kind == "onnx" else None
    g = materialize(graph, seed)
    with exits(as_json, (VerificationError, Exit.NOT_EQUIVALENT), default=Exit.CANNOT_WRITE):
        iface = interface(path, shapes) if path is not None else None
        try:
            model = keep_symbolic(path, to_onnx(g), input_shapes=shapes, graph=original or g, seed=seed,
                                  iface=iface)
        except VerificationError:  # the plain export lost them: written over the file's own nodes, if that keeps them
            spliced = None if path is None else keep_spliced(path, g, original or graph, input_shapes=shapes,
                                                             seed=seed, iface=iface)
            if spliced is None:
                raise
            model = spliced
    try:
        write_model(model, output)
    except GraphsubError as e:
        fail(Exit.CANNOT_WRITE, str(e), as_json)
    except OSError as e:
        fail(Exit.CANNOT_WRITE, f"{output}: {e}", as_json)
    return iface.summary() if iface is not None and (iface.free or iface.bound) else None


def describe_dims(dims: dict[str, Any] | None) -> str:
    """``write_graph``'s account of the symbolic dims, for a message ("" when there were none)."""
    if not dims:
        return ""
    parts = []
    if dims["kept"]:
        parts.append(f"symbolic dims {', '.join(dims['kept'])} kept symbolic (checked at other sizes)")
    if dims["fixed"]:
        parts.append(", ".join(f"{k}={v}" for k, v in dims["fixed"].items()) + " fixed by --input-shape")
    return "; ".join(parts)


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
    return out if out.is_terminal else SafeConsole(width=width)


def split_list(text: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None stays None."""
    return None if text is None else [p.strip() for p in text.split(",") if p.strip()]


__all__ = ["CheckSizesOpt", "Exit", "JsonOpt", "ModelArg", "SeedOpt", "ShapeOpt", "SizesOpt", "check_names",
           "confirm_output", "describe_dims", "err", "exits", "fail", "load_graph", "log", "out", "parse_check_sizes",
           "parse_shapes", "parse_spec", "print_sequence", "split_list", "wide", "write_graph"]
