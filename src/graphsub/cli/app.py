"""The ``graphsub`` application: the root command, global options, and every command group registered.

Each command group lives in its own module of :mod:`graphsub.cli` and imports only
:mod:`graphsub.cli.common` and the library; this module assembles them.  Exit codes: see
:mod:`graphsub.cli.common`.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer
from rich.logging import RichHandler

from graphsub import __version__
from graphsub.cli import bench, convert, cost, dynamic, fuse, info, many, optimize, rules, search, training, zoo
from graphsub.cli.common import err, log
from graphsub.cli.root import RootGroup

app = typer.Typer(
    name="graphsub",
    cls=RootGroup,
    help=(
        "graphsub speeds up deep-learning models by rewriting their computation graphs with "
        "equivalent substitutions, checking every result numerically in onnxruntime.\n\n"
        "MODEL arguments are an .onnx file or a built-in benchmark model written zoo:NAME "
        "(e.g. zoo:resnext50, zoo:resnet:blocks=4; a bare NAME works too when no file has that name); "
        "see `graphsub zoo list`.\n\n"
        "Start with `graphsub optimize model.onnx -o faster.onnx`.\n\n"
        "Exit codes (the same in every command): 0 ok, 1 not equivalent or verification failed, 2 usage error, "
        "3 bad input, 4 cannot write output, 5 internal error (a bug), 130 interrupted (Ctrl-C), 143 terminated."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _setup_logging(verbose: bool) -> None:
    if not log.handlers:
        log.addHandler(RichHandler(console=err, show_time=False, show_path=False))
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


app.command()(info.info)
app.add_typer(zoo.zoo_app, name="zoo")
app.command()(convert.convert)
app.command("verify")(convert.verify)
app.add_typer(rules.rules_app, name="rules")
app.command("cost")(cost.cost_cmd)
app.command("profile")(cost.profile_cmd)
app.command("search")(search.search_cmd)
app.command("optimize")(optimize.optimize_cmd)
app.command("optimize-many")(many.optimize_many_cmd)
app.command("bench")(bench.bench_cmd)
app.command("fuse")(fuse.fuse_cmd)
app.add_typer(dynamic.dynamic_app, name="dynamic")
app.add_typer(training.training_app, name="training")


def main() -> None:
    """Console-script entry point (errors and exit codes: :class:`graphsub.cli.root.RootGroup`)."""
    app()


__all__ = ["app", "main"]
