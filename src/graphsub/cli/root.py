"""The root command's class: option validation before every command, and the last line between an error and the user.

:class:`RootGroup` does three things for every command, so that no command can forget them:

* it attaches the checks of :mod:`graphsub.cli.validate` to the options of the command it runs (exit 2 on a value
  out of range);
* with ``--json`` anywhere on the command line, a usage error prints ``{"error": ..., "exit_code": 2}`` on stdout
  like every other error, instead of click's text;
* whatever escapes a command is turned into a one-line message and a documented exit code, never a traceback:
  a KeyboardInterrupt (a second Ctrl-C, or one outside any :func:`graphsub.interrupt.graceful` block) exits 130;
  SIGTERM exits 143; MemoryError is bad input (3: the model or its shapes need more memory than there is); any other
  exception is an internal error (5), a bug in graphsub, reported as one. ``GRAPHSUB_DEBUG=1`` re-raises it with
  its traceback, for developers.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from typer.core import TyperGroup
from typer.exceptions import Abort

from graphsub.cli.common import Exit, err
from graphsub.cli.validate import attach
from graphsub.interrupt import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, stop_requested


def _report(code: int, message: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": message, "exit_code": code}))
    else:
        err.print(f"[bold red]error:[/] {escape(message)}")
    return code


class RootGroup(TyperGroup):
    """See the module docstring."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            attach(cmd, name or "")
        return name, cmd, rest

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = "--json" in argv
        try:
            rv = super().main(args=argv, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              **extra)
            code = rv if isinstance(rv, int) else 0
            if code == EXIT_INTERRUPTED and not stop_requested():  # typer turns KeyboardInterrupt into 130, silently
                err.print("interrupted")
        except Terminated:
            code = EXIT_TERMINATED
        except SystemExit as e:  # raised by a command (typer.Exit is turned into a return value above)
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:  # the last line between any error and a traceback
            code = self._unexpected(e, as_json)
        if not standalone_mode:
            return code
        sys.exit(code)

    @staticmethod
    def _unexpected(e: Exception, as_json: bool) -> int:
        from typer import _click

        if isinstance(e, _click.exceptions.ClickException):  # usage errors and the like
            if as_json:
                return _report(e.exit_code, e.format_message(), True)
            from typer import rich_utils

            rich_utils.rich_format_error(e)
            return e.exit_code
        if isinstance(e, Abort):
            return _report(EXIT_INTERRUPTED, "aborted", as_json)
        if os.environ.get("GRAPHSUB_DEBUG"):
            raise e
        if isinstance(e, MemoryError):
            return _report(int(Exit.BAD_INPUT), "out of memory: the model or the shapes given need more memory than "
                           "this machine has", as_json)
        return _report(int(Exit.INTERNAL), f"internal error ({type(e).__name__}: {e}); this is a bug in graphsub -- "
                       "please report it with the command line (GRAPHSUB_DEBUG=1 shows the traceback)", as_json)


__all__ = ["RootGroup"]
