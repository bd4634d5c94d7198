"""The package needs nothing outside itself: with the team's shared data folder (``../shared`` beside the
repository) made unreachable, ``graphsub rules list default`` and ``graphsub optimize`` give the same product.

The commands run in a child process whose audit hook refuses every open, listing or scan of a path under the
blocked folder (Python's ``open``/``os.listdir``/``os.scandir`` audit events), from an empty working directory and
with a fresh cache directory, as a user who cloned only this repository or installed the wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import graphsub

REPO = Path(graphsub.__file__).resolve().parents[2]
BLOCKED = REPO.parent / "shared"

#: run the CLI behind an audit hook that makes BLOCKED unreachable (argv[1]: the folder; the rest: the command)
CHILD = r"""
import os, sys
blocked = os.path.abspath(sys.argv[1])

def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path == blocked or path.startswith(blocked + os.sep):
            raise PermissionError(f"unreachable in this test: {path}")

sys.addaudithook(hook)
sys.argv = ["graphsub", *sys.argv[2:]]
from graphsub.cli import main
main()
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHSUB_")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # a fresh user: no cached conversion of the rules
    return subprocess.run([sys.executable, "-c", CHILD, str(BLOCKED), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_hook_makes_the_folder_unreachable(tmp_path: Path) -> None:
    probe = BLOCKED / "data" / "taso" / "graph_subst.pb"
    code = (CHILD.replace("from graphsub.cli import main\nmain()", f"open({str(probe)!r}, 'rb')"))
    r = subprocess.run([sys.executable, "-c", code, str(BLOCKED)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unreachable in this test" in r.stderr


def test_rules_list_default_needs_nothing_outside_the_package(tmp_path: Path) -> None:
    r = _run(tmp_path, "rules", "list", "default", "--json")
    assert r.returncode == 0, r.stderr
    names = [rule["name"] for rule in json.loads(r.stdout)]
    assert sum(n.startswith("taso_pb_") for n in names) >= 100  # TASO's rules, read from the packaged file
    r = _run(tmp_path, "rules", "list", "taso-pb", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 133


def test_optimize_needs_nothing_outside_the_package(tmp_path: Path) -> None:
    r = _run(tmp_path, "optimize", "zoo:squeezenet", "-o", "out.onnx", "--budget", "8", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["verified"] and (tmp_path / "out.onnx").is_file()
