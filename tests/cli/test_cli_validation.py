"""One validation layer for every option of every command (issue 21, items 1 and 7): every numeric option has a
declared range, NaN / infinities / values out of range are usage errors (exit 2) naming the option, and unknown
names (rule set, algorithm, cost model) are usage errors in every command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.cli.validate import LIMITS, commands, is_numeric, limit_for, long_name

runner = CliRunner()
ROOT = typer.main.get_command(app)
NUMERIC = [(path, param) for path, cmd in commands(ROOT) for param in cmd.params if is_numeric(param)]


def _args_for(path: str, extra: list[str]) -> list[str]:
    """A command line for ``path`` with placeholders for its arguments and required options, then ``extra``."""
    cmd = dict(commands(ROOT))[path]
    args = path.split()
    for p in cmd.params:
        if p.param_type_name == "argument":
            args.append("zoo:squeezenet")
        elif getattr(p, "required", False) and long_name(p) not in extra:
            args += [long_name(p), "out.onnx"]
    return args + extra


def test_every_numeric_option_has_a_declared_range() -> None:
    missing = [f"{path} {long_name(p)}" for path, p in NUMERIC if limit_for(path, p) is None]
    assert NUMERIC and missing == []


@pytest.mark.parametrize(("path", "name"), [(path, long_name(p)) for path, p in NUMERIC])
def test_nan_infinity_and_out_of_range_values_are_usage_errors(path: str, name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    param = next(p for p in dict(commands(ROOT))[path].params if long_name(p) == name)
    limit = limit_for(path, param)
    assert limit is not None
    below = limit.low if limit.strict else limit.low - 1
    bad = [str(int(below))] if limit.integer else ["nan", "inf", "-inf", str(below)]
    for value in bad:
        r = runner.invoke(app, _args_for(path, [name, value]))
        assert r.exit_code == 2, (path, name, value, r.output)
        assert name in r.output and "Invalid value" in r.output, r.output
    assert list(tmp_path.iterdir()) == []  # nothing was written, no work started


def test_a_usage_error_with_json_is_a_json_document() -> None:
    r = runner.invoke(app, ["verify", "zoo:squeezenet", "zoo:squeezenet", "--trials", "0", "--json"])
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and "--trials" in doc["error"]


def test_the_equivalence_check_cannot_be_bypassed_from_the_library() -> None:
    from graphsub import zoo
    from graphsub.equivalence import equivalent
    from graphsub.errors import VerificationError

    g = zoo.get("resnet", blocks=1)
    for kw in ({"trials": 0}, {"trials": -1}, {"rtol": math.nan}, {"atol": -1.0}, {"rtol": math.inf}):
        with pytest.raises(VerificationError):
            equivalent(g, g, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("option", [["--rules", "no-such-set"], ["--algo", "no-such-algo"],
                                    ["--cost", "no-such-cost"]])
@pytest.mark.parametrize("command", ["search", "optimize"])
def test_unknown_names_are_usage_errors_in_every_command(command: str, option: list[str], tmp_path: Path) -> None:
    args = [command, "zoo:resnet:blocks=1", *option, "--json"]
    if command == "optimize":
        args += ["-o", str(tmp_path / "out.onnx"), "--peers", "none"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert json.loads(r.stdout)["exit_code"] == 2
    assert list(tmp_path.iterdir()) == []


def test_limits_doc_examples() -> None:
    assert LIMITS["--seed"].check(-1) == "must be an integer >= 0"
    assert LIMITS["--min-speedup"].check(0.0) == "must be a finite number > 0"
    assert LIMITS["--eqsat-budget"].check(0.0) is None
