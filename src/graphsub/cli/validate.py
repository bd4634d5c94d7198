"""One validation layer for every numeric option of every command.

Each numeric option is declared once in :data:`LIMITS` (by its long name; a ``"command --name"`` key overrides the
plain name for one command) with the range it accepts. The root command (:class:`graphsub.cli.root.RootGroup`) calls
:func:`attach` on the command it is about to run, before that command parses its arguments, so a value out of range
-- and NaN or an infinity in any float option -- is a usage error (exit 2) naming the option, whatever the command.
``tests/cli/test_cli_validation.py`` walks every command and fails on a numeric option with no entry here,
so a new option cannot skip the layer.

>>> LIMITS["--time"].check(2.0)
>>> LIMITS["--time"].check(float("nan"))
'must be a finite number > 0'
>>> LIMITS["--k"].check(0)
'must be an integer >= 1'
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import typer


@dataclass(frozen=True)
class Limit:
    """Values ``>= low`` (``> low`` when ``strict``); floats must also be finite. None (an option left unset)
    always passes."""

    low: float
    strict: bool = False
    integer: bool = False

    def check(self, value: Any) -> str | None:
        """Why ``value`` is rejected, or None."""
        if value is None:
            return None
        kind = "an integer" if self.integer else "a finite number"
        low = int(self.low) if self.integer else f"{self.low:g}"
        bound = f"{'>' if self.strict else '>='} {low}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be {kind} {bound}"
        if value < self.low or (self.strict and value == self.low):
            return f"must be {kind} {bound}"
        return None


POSITIVE = Limit(0.0, strict=True)
NON_NEGATIVE = Limit(0.0)
COUNT = Limit(1, integer=True)  # at least one
NON_NEGATIVE_INT = Limit(0, integer=True)

#: every numeric option of every command: long option name (or "command --name") -> accepted range
LIMITS: dict[str, Limit] = {
    # seeds: numpy's generators reject negative seeds
    "--seed": NON_NEGATIVE_INT,
    # budgets and limits: a limit of 0 or less (or NaN, which compares false with everything) would not limit
    "--time": POSITIVE,
    "--budget": POSITIVE,
    "fuse --budget": COUNT,
    "--cutoff": POSITIVE,
    "--memory-mb": POSITIVE,
    "--expansions": COUNT,
    "--k": COUNT,
    "--eqsat-budget": NON_NEGATIVE,  # 0: no equality-saturation candidate
    "--on-top-budget": NON_NEGATIVE,  # 0: no search on top of the peers
    "--ort-search-budget": NON_NEGATIVE,  # 0: no search priced by ORT's kernels
    "--grace": NON_NEGATIVE,
    "--timeout-ms": COUNT,
    "--iter-limit": COUNT,
    "--node-limit": COUNT,
    "--multi-iters": NON_NEGATIVE_INT,
    # search parameters
    "--alpha": Limit(1.0),  # keep graphs < alpha * best: below 1 even the best graph is pruned
    "--q": COUNT,
    "--eta": COUNT,
    # verification: no draw proves nothing; a negative or NaN tolerance accepts or rejects everything
    "--trials": COUNT,
    "--seeds": COUNT,
    "--rtol": NON_NEGATIVE,
    "--atol": NON_NEGATIVE,
    "--tests": NON_NEGATIVE_INT,
    # timing and decisions
    "--threads": COUNT,
    "--rounds": COUNT,
    "--groups": COUNT,  # session groups of a decision (graphsub.optimize.decide)
    "--round-ms": POSITIVE,
    "--repeats": COUNT,
    "--tokens": COUNT,  # bench decode: greedy tokens per variant
    "--min-speedup": POSITIVE,
    # sizes and counts
    "--top": NON_NEGATIVE_INT,  # 0: all
    "--bytes-per-elem": COUNT,
    "--max-ops": COUNT,
    "--shards": COUNT,
    "--workers": NON_NEGATIVE_INT,  # 0: in the main process
    "--plan-cache": NON_NEGATIVE_INT,  # 0: none
    "--batches": COUNT,
    "--batch-size": COUNT,
    "--depth": COUNT,
    "--warmup": NON_NEGATIVE_INT,
    "--train-steps": COUNT,
    "--emb": COUNT,
    "--hidden": COUNT,
    "--image": COUNT,
    "--steps": COUNT,
}


def long_name(param: Any) -> str:
    """An option's longest spelling (``--time`` for ``-t/--time``)."""
    return max(param.opts, key=len) if param.opts else str(param.name)


def is_numeric(param: Any) -> bool:
    """Whether ``param`` takes an int or a float."""
    desc = getattr(param, "type_descriptor", None)
    kinds = set(typing.get_args(desc.annotation) or (desc.annotation,)) - {type(None)} if desc else set()
    return bool(kinds) and kinds <= {int, float}


def limit_for(command: str, param: Any) -> Limit | None:
    """The declared range of ``param`` in ``command`` (its path, e.g. ``"rules generate"``), or None."""
    name = long_name(param)
    return LIMITS.get(f"{command} {name}") or LIMITS.get(f"{command.split()[-1]} {name}") or LIMITS.get(name)


def commands(cmd: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf command under ``cmd`` with its path (``"rules generate"``)."""
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield path, cmd
        return
    for name, sub in subs.items():
        yield from commands(sub, f"{path} {name}".strip())


def _checked(callback: Callable[..., Any] | None, limit: Limit | None, name: str) -> Callable[..., Any]:
    def check(ctx: Any, param: Any, value: Any) -> Any:
        if callback is not None:
            value = callback(ctx, param, value)
        if isinstance(value, float) and not math.isfinite(value) and limit is None:
            raise typer.BadParameter("must be a finite number", param_hint=name)
        why = None if limit is None else limit.check(value)
        if why is not None:
            raise typer.BadParameter(f"{why}, got {value}", param_hint=name)
        return value

    return check


def attach(cmd: Any, path: str = "") -> None:
    """Attach the checks of :data:`LIMITS` to every numeric option under ``cmd`` (once)."""
    for cmd_path, leaf in commands(cmd, path):
        if getattr(leaf, "_graphsub_validated", False):
            continue
        for param in leaf.params:
            if is_numeric(param):
                param.callback = _checked(param.callback, limit_for(cmd_path, param), long_name(param))
        leaf._graphsub_validated = True


__all__ = ["LIMITS", "Limit", "attach", "commands", "is_numeric", "limit_for", "long_name"]
