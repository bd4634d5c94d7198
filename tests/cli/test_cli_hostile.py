"""Hostile input at the command line (issue 21): special output files, unwritable directories, ONNX paths that look
like Python specs, rich markup in names, broken op-time caches, malicious weight files, Ctrl-C and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.spec import ModelSpec

runner = CliRunner()


def small_model(path: Path, *, names: tuple[str, str, str] = ("x", "t", "y"), op: str = "Relu") -> Path:
    x, t, y = names
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", [x, "w"], [t]), helper.make_node(op, [t], [y])], "small",
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 4])], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


# ------------------------------------------------------------------ outputs that must not be replaced (items 2, 9)


@pytest.mark.parametrize("kind", ["fifo", "chardev", "directory"])
@pytest.mark.parametrize("command", ["convert", "search", "zoo"])
def test_outputs_that_exist_and_are_not_regular_files_are_refused(kind: str, command: str, tmp_path: Path) -> None:
    src = small_model(tmp_path / "m.onnx")
    if kind == "fifo":
        dst = tmp_path / "fifo"
        os.mkfifo(dst)
    elif kind == "chardev":
        dst = Path("/dev/null")
    else:
        dst = tmp_path / "outdir"
        dst.mkdir()
    before = os.stat(dst)
    args = {"convert": ["convert", str(src), "-o", str(dst)],
            "search": ["search", str(src), "--time", "1", "-o", str(dst)],
            "zoo": ["zoo", "export", "resnet:blocks=1", "-o", str(dst)]}[command]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 4, r.output
    message = json.loads(r.stdout)["error"]
    assert str(dst) in message and ".graphsub-" not in message
    after = os.stat(dst)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".graphsub-")) == []


def test_an_unwritable_directory_is_found_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    src = small_model(tmp_path / "m.onnx")
    out_dir = tmp_path / "ro"
    out_dir.mkdir()

    def refuse(*args: object, **kwargs: object) -> None:  # what a read-only file system answers (also to root)
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    t = time.perf_counter()
    r = runner.invoke(app, ["optimize", str(src), "-o", str(out_dir / "o.onnx"), "--peers", "none", "--json"])
    assert r.exit_code == 4, r.output
    assert "cannot create files" in json.loads(r.stdout)["error"]
    assert time.perf_counter() - t < 30  # refused up front, not after search and timing
    assert list(out_dir.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories; covered by the test above")
def test_a_read_only_directory_is_refused(tmp_path: Path) -> None:
    src = small_model(tmp_path / "m.onnx")
    out_dir = tmp_path / "ro"
    out_dir.mkdir()
    out_dir.chmod(0o555)
    try:
        r = runner.invoke(app, ["convert", str(src), "-o", str(out_dir / "o.onnx")])
        assert r.exit_code == 4
    finally:
        out_dir.chmod(0o755)


# ------------------------------------------------------------------ what is executed (item 8)


def test_an_onnx_path_containing_py_colon_is_never_run_as_python(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nclass Net: pass\n")
    onnx_path = tmp_path / "evil.py:model.onnx"
    small_model(onnx_path)
    assert ModelSpec.parse(str(onnx_path)).kind == "onnx"
    assert ModelSpec.parse("evil.py:model.onnx").kind == "onnx"  # not an identifier after the colon
    r = runner.invoke(app, ["info", "evil.py:model.onnx", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["num_ops"] == 2
    assert not marker.exists()
    assert ModelSpec.parse("evil.py:Net").kind == "module"  # the documented way to run a module


def test_help_says_what_is_executed() -> None:
    r = runner.invoke(app, ["optimize", "--help"])
    text = " ".join(r.output.replace("│", " ").split())
    assert "imports and runs FILE.py as Python" in text and "never run" in text


# ------------------------------------------------------------------ rich markup in names (item 4)


@pytest.mark.parametrize("command", [["info"], ["cost", "-m", "flops"], ["search", "--time", "1"]])
def test_markup_in_tensor_names_and_op_types_prints_as_text(command: list[str], tmp_path: Path) -> None:
    src = small_model(tmp_path / "m[red].onnx", names=("x[/]", "[bold]t", "y[/red]"))
    r = runner.invoke(app, [command[0], str(src), *command[1:]])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------ op-time caches (item 4)


def test_a_file_that_is_no_database_is_never_touched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = small_model(tmp_path / "m.onnx")
    before = model.read_bytes()
    r = runner.invoke(app, ["cost", str(model), "-m", "measured", "--cache", str(model), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["total"]["time_ms"] > 0  # measured, cached in memory only
    assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("damage", ["corrupted", "schema"])
def test_a_broken_cache_is_moved_aside_and_rebuilt(damage: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "ops.sqlite"
    with sqlite3.connect(cache) as c:
        c.execute("CREATE TABLE op_timings (a INTEGER)")
    if damage == "corrupted":  # the header says SQLite, the pages are garbage
        data = bytearray(cache.read_bytes())
        data[100:] = b"\xff" * (len(data) - 100)
        cache.write_bytes(bytes(data))
    monkeypatch.setenv("GRAPHSUB_CACHE", str(cache))
    r = runner.invoke(app, ["cost", str(small_model(tmp_path / "m.onnx")), "-m", "measured", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["total"]["time_ms"] > 0
    assert len(list(tmp_path.glob("ops.sqlite.broken-*"))) == 1  # kept for inspection
    with sqlite3.connect(cache) as c:
        assert c.execute("SELECT COUNT(*) FROM op_timings").fetchone()[0] > 0


def test_an_unusable_cache_falls_back_to_memory(tmp_path: Path) -> None:
    from graphsub.cost.measured import OpTimeCache, Timing

    cache = OpTimeCache(tmp_path / "c.sqlite")

    def refuse() -> sqlite3.Connection:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    cache._open_file = refuse  # type: ignore[method-assign]
    ctx = __import__("graphsub.cost.measured", fromlist=["Context"]).Context("v", 1, "cpu", "disable", "m")
    assert cache.put(ctx, "d", "", "sig", Timing(1.0, 0.1, 3, 0.9))
    assert cache.get(ctx, "d") is not None and "readonly" in cache.fallback


# ------------------------------------------------------------------ malicious weights (item 4)


def test_a_malicious_weights_file_is_rejected_without_running_it(tmp_path: Path) -> None:
    import pickle

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    weights = tmp_path / "w.pt"
    weights.write_bytes(pickle.dumps(Evil()))
    weights.with_suffix(".json").write_text("{}")
    r = runner.invoke(app, ["fuse", "zoo:mobilenet_v2", "--repair", "gnne", "--model-weights", str(weights),
                            "--budget", "5", "--json"])
    assert r.exit_code == 3, r.output
    assert "not fusion-GNN weights" in json.loads(r.stdout)["error"]
    assert not marker.exists()


# ------------------------------------------------------------------ Ctrl-C and SIGTERM (item 6)


def _graphsub(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "graphsub", "-v", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300", **(env or {})})


def _wait_for(proc: subprocess.Popen[str], what: str) -> list[str]:
    """Read ``proc``'s stderr until a line holds ``what`` (the -v log says when the work starts); the lines read."""
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if what in line:
            return lines
    raise AssertionError(f"{what!r} never appeared: {''.join(lines)}")


def _signal_once_working(sig: int, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Start ``graphsub -v ARGS``, send ``sig`` a second after its log says the work started; exit code, stdout,
    the rest of stderr."""
    proc = _graphsub(*args, env=env)
    try:
        _wait_for(proc, "Ctrl-C stops it")
        time.sleep(1.0)
        proc.send_signal(sig)
        out, errs = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, out, errs


def test_ctrl_c_during_search_prints_the_best_result_as_json(tmp_path: Path) -> None:
    code, out, errs = _signal_once_working(signal.SIGINT, "search", "zoo:nasrnn", "--time", "120", "--json", "-o",
                                           str(tmp_path / "best.onnx"))
    assert code == 130, errs
    doc = json.loads(out)
    assert doc["stopped_by"] == "interrupt" and doc["search_time_s"] < 100
    assert doc["verification"]["equivalent"] and (tmp_path / "best.onnx").is_file()
    assert "Traceback" not in errs


def test_sigterm_leaves_no_temporaries(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code, _, errs = _signal_once_working(signal.SIGTERM, "optimize", "zoo:nasrnn", "-o", str(tmp_path / "o.onnx"),
                                         "--budget", "60", env={"TMPDIR": str(tmp)})
    assert code == 143, errs
    assert "Traceback" not in errs
    left = [p.name for d in (tmp, tmp_path) for p in d.iterdir() if p.name.startswith(".graphsub-")]
    assert left == [] and not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("command", [["info", "--json"], ["search", "--time", "1", "--json"],
                                     ["optimize", "--budget", "2", "--peers", "none", "--json", "-o", "OUT"]])
def test_a_graph_name_that_is_not_utf8(command: list[str], tmp_path: Path) -> None:
    """The fuzz campaign's one internal error: protobuf hands a damaged string field over as bytes."""
    data = small_model(tmp_path / "m.onnx").read_bytes()
    assert data.count(b"small") == 1
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data.replace(b"small", b"sm\xa5ll"))
    args = [a if a != "OUT" else str(tmp_path / "o.onnx") for a in command]
    r = runner.invoke(app, [args[0], str(bad), *args[1:]])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)
