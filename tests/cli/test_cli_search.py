"""`graphsub search`: JSON fields for scripts, a verified ONNX output, the error paths, the OCGGS algorithms and
eqsat from the command line, and a symbolic batch kept in what it writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from graphsub import zoo
from graphsub.cli import app
from graphsub.data import materialize
from graphsub.equivalence import equivalent
from graphsub.frontends.onnx_io import load
from helpers import declared_dims, ort_run_x, symbolic_dense

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout


def test_json_fields_and_verified_output(tmp_path: Path) -> None:
    out = tmp_path / "sru_opt.onnx"
    code, text = invoke("search", "zoo:sru", "--algo", "taso", "--rules", "ocggs157", "--cost", "roofline:p100",
                        "--k", "5", "--time", "20", "--json", "-o", str(out))
    assert code == 0, text
    d = json.loads(text)
    for key in ("initial_cost", "best_cost", "search_time_s", "peak_mem_mb", "sequence", "explored"):
        assert key in d
    assert d["best_cost"] < d["initial_cost"]  # SRU's factoring rules pay under roofline:p100
    assert 0 < len(d["sequence"]) <= 5
    assert {"rule", "nodes", "cost"} <= set(d["sequence"][0])
    assert d["verification"]["equivalent"] is True
    onnx.checker.check_model(onnx.load(str(out)))
    written = load(str(out))
    assert written.num_ops <= d["best_num_ops"]  # weight-only nodes are folded into constants on export
    assert equivalent(materialize(zoo.get("sru"), 0), written).equivalent  # same weights as the input, seed 0


def test_output_directory_is_checked_before_searching(tmp_path: Path) -> None:
    code, text = invoke("search", "zoo:sru", "--json", "-o", str(tmp_path / "missing" / "x.onnx"))
    assert code == 4
    assert "does not exist" in json.loads(text)["error"]


def test_unknown_names_are_usage_errors() -> None:
    for args in (["--algo", "nope"], ["--rules", "nope"], ["--cost", "nope"]):
        code, text = invoke("search", "zoo:sru", "--json", *args)
        assert code == 2, (args, text)
        assert "error" in json.loads(text)


def test_enum_without_k_is_refused() -> None:
    code, text = invoke("search", "zoo:sru", "--algo", "enum", "--json")
    assert code == 2
    assert "maximum sequence length" in json.loads(text)["error"]


def test_eqsat_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "sru_eqsat.onnx"
    code, text = invoke("search", "zoo:sru", "--algo", "eqsat", "--rules", "ocggs157", "--cost", "roofline:p100",
                        "--time", "20", "--node-limit", "5000", "--json", "-o", str(out))
    assert code == 0, text
    d = json.loads(text)
    assert d["best_cost"] < 0.7 * d["initial_cost"]
    e, x = d["params"]["egraph"], d["params"]["extraction"]
    assert e["nodes"] <= 5000 + 50 and e["classes"] > 0 and e["iterations"] >= 1
    assert x["ilp_cost"] <= x["greedy_dag_cost"]
    assert d["verification"]["equivalent"] is True
    assert equivalent(materialize(zoo.get("sru"), 0), load(str(out))).equivalent
    code, text = invoke("search", "zoo:sru", "--algo", "eqsat", "--extract", "nope", "--json")
    assert code == 2 and "extraction" in text


@pytest.mark.parametrize("algo", ["pruning", "dpp", "sampling"])
def test_the_ocggs_algorithms_from_the_command_line(algo: str) -> None:
    args = ["search", "zoo:sru", "--algo", algo, "--rules", "ocggs157", "--cost", "roofline:p100", "--k", "3",
            "--time", "20", "--json"]
    if algo == "sampling":
        args += ["--q", "6", "--eta", "1"]
    code, text = invoke(*args)
    assert code == 0, text
    d = json.loads(text)
    assert d["algorithm"] == algo and d["best_cost"] < d["initial_cost"]
    if algo == "sampling":
        assert d["params"] == {"q": 6, "eta": 1}


def test_output_keeps_a_symbolic_batch(tmp_path: Path) -> None:
    """More on symbolic dims at the command line: tests/cli/test_cli_convert_symbolic.py."""
    src, dst = symbolic_dense(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    code, out = invoke("search", str(src), "-o", str(dst), "--time", "2", "--json")
    assert code == 0, out
    assert json.loads(out)["verification"]["symbolic_dims"]["kept"] == ["batch"]
    assert declared_dims(dst) == {"x": ["batch", 8], "y": ["batch", 8]}
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run_x(dst, x), ort_run_x(src, x), rtol=1e-4, atol=1e-5)
