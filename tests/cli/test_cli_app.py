"""The graphsub command line's top-level commands (help, --version, zoo, info, convert, verify): JSON output for
scripts, exit codes, and bad-input handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from graphsub.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout


def small_model(path: Path, scale: float = 1.0) -> Path:
    w = numpy_helper.from_array((np.eye(4, dtype=np.float32) * scale), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
        "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=[w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))
    return path


def test_help_explains_commands_and_exit_codes() -> None:
    code, out = invoke("--help")
    assert code == 0
    for word in ("info", "convert", "verify", "zoo", "Exit codes"):
        assert word in out


def test_zoo_list_json() -> None:
    code, out = invoke("zoo", "list", "--json")
    assert code == 0
    rows = json.loads(out)
    by_name = {r["name"]: r["num_ops"] for r in rows}
    assert by_name["inception_v3"] == 138 and by_name["nasnet_a"] == 383 and by_name["bert"] == 113


def test_info_json_on_zoo_and_file(tmp_path: Path) -> None:
    code, out = invoke("info", "zoo:resnet:blocks=2", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["num_ops"] == 10 and data["op_histogram"] == {"add": 2, "conv2d": 6, "relu": 2}
    assert data["flops"] > 0 and data["params"] == 2 * (2 * 256 * 256 * 9 + 256 * 256)
    code, out = invoke("info", str(small_model(tmp_path / "m.onnx")), "--json", "--input-shape", "x=3x4")
    assert code == 0
    data = json.loads(out)
    assert data["inputs"] == [{"name": "x", "shape": [3, 4], "dtype": "float32"}]
    assert data["num_ops"] == 2 and data["weights_with_data"] == 1


def test_a_bare_zoo_name_works_on_the_command_line() -> None:
    """The same spec text means the same model in every command and the library (graphsub.spec:
    tests/test_spec.py)."""
    code, out = invoke("info", "resnet:blocks=2", "--json")
    assert code == 0 and '"num_ops": 10' in out
    r = runner.invoke(app, ["info", "no_such_model"])
    assert r.exit_code == 3 and "unknown model" in " ".join(r.output.split())


def test_export_convert_verify(tmp_path: Path) -> None:
    a = tmp_path / "a.onnx"
    code, _ = invoke("zoo", "export", "resnet:blocks=1", "-o", str(a))
    assert code == 0 and a.exists()
    b = tmp_path / "b.onnx"
    code, out = invoke("convert", str(a), "-o", str(b), "--json")
    assert code == 0, out
    assert json.loads(out)["max_abs_diff"] == 0.0
    code, out = invoke("verify", str(a), str(b), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["equivalent"] is True and report["max_abs_diff"] == 0.0


def test_verify_detects_a_different_model(tmp_path: Path) -> None:
    a = small_model(tmp_path / "a.onnx")
    b = small_model(tmp_path / "b.onnx", scale=1.01)
    code, out = invoke("verify", str(a), str(b), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["equivalent"] is False and report["worst_output"] == "y"
    assert report["max_abs_diff"] > 1e-3


def test_verify_interface_mismatch_is_not_equivalent(tmp_path: Path) -> None:
    code, out = invoke("verify", "zoo:resnet:blocks=1", "zoo:resnet:blocks=2", "--json")
    assert code == 1 and json.loads(out)["equivalent"] is False  # same interface, one more block
    code, out = invoke("verify", "zoo:sru", "zoo:resnet:blocks=1", "--json")
    assert code == 1 and "inputs differ" in json.loads(out)["error"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["info", "missing.onnx"], 3),
        (["info", "zoo:no_such_model"], 3),
        (["info", "zoo:resnet:depth=3"], 3),
        (["info", "zoo:resnet:blocks"], 3),
        (["info", "zoo:resnet", "--input-shape", "bad"], 2),
        (["verify", "missing.onnx", "zoo:sru"], 3),
        (["no-such-command"], 2),
    ],
)
def test_exit_codes_for_bad_input(args: list[str], code: int, tmp_path: Path) -> None:
    got, out = invoke(*args)
    assert got == code, out


def test_malformed_file_gives_exit_3_and_json_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage" * 100)
    code, out = invoke("info", str(bad), "--json")
    assert code == 3
    assert "error" in json.loads(out)


def test_convert_never_overwrites_its_input(tmp_path: Path) -> None:
    a = small_model(tmp_path / "a.onnx")
    before = a.read_bytes()
    code, _ = invoke("convert", str(a), "-o", str(a))
    assert code == 2
    assert a.read_bytes() == before
    code, _ = invoke("convert", str(a), "-o", str(tmp_path / "no_dir" / "b.onnx"))
    assert code == 4
    assert not (tmp_path / "no_dir").exists()


def test_console_script_entry_point() -> None:
    exe = Path(sys.executable).with_name("graphsub")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.startswith("graphsub ")


def test_version_is_pyprojects_and_the_changelogs_newest() -> None:
    """One version: pyproject.toml's, as installed, is what `--version` prints and the newest released CHANGELOG
    section (an "Unreleased" section may come before it)."""
    import tomllib

    import graphsub

    root = Path(graphsub.__file__).resolve().parents[2]
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    assert graphsub.__version__ == declared
    assert invoke("--version") == (0, f"graphsub {declared}\n")
    sections = [line for line in (root / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    released = [line for line in sections if line != "## Unreleased"]
    assert released[0].startswith(f"## {declared} ") and sections.index(released[0]) <= 1
