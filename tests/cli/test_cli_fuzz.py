"""Fuzzing the command line with hostile ONNX files (issue 21), in-process (click's CliRunner on the app's command).

A fixed, seeded corpus (:mod:`fuzz_models`): truncated and byte-flipped models, named and random structural
mutations (duplicate tensor names, cycles, unknown ops, wrong initializers, impossible dims, ...), files that are
not models, a directory and a missing path.  Every command (``info``, ``cost``, ``convert -o``, ``verify a b``,
``search --time 1 -o``, ``optimize --budget 2 --peers none -o``) runs on every file -- ``optimize`` only on the
files that fail early and on two that import and run, since those spend its whole budget -- and each run must

* end with a documented exit code (0 ok, 1 not equivalent, 2 usage, 3 bad input, 4 cannot write), never an
  exception (``GRAPHSUB_DEBUG=1`` re-raises what the root command would report as an internal error, 5);
* print no traceback and no onnxruntime banner ("EP Error": it would break ``--json``);
* leave the input file byte for byte as it was;
* leave nothing behind on failure (no output file, no ``.graphsub-*`` temporary), and only the output on success.

All failures of one command are collected and reported together (case, exit code, last line of the message or
the exception and where it was raised), so one run lists everything that is still open.  The memory limits are
fixed at 2 GB (``GRAPHSUB_MAX_TENSOR_BYTES``) so that every machine refuses the same shapes.  The long campaign
with subprocesses and many more mutations is ``experiments/infra/fuzz_campaign.py``.
"""

from __future__ import annotations

import hashlib
import os
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from click.testing import CliRunner

import fuzz_models as fm
from graphsub.cli import app

#: the click command of the app, built once (typer's CliRunner rebuilds it on every call: 80 ms each)
COMMAND = typer.main.get_command(app)

OK_CODES = frozenset({0, 1, 2, 3, 4})
#: files that import and run take optimize's whole budget (seconds each): only these of them are optimized
HEALTHY_OPTIMIZE = ("base:graphsub_export", "struct:output_wrong_shape")
#: random structural edits (:func:`fuzz_models.random_structural`) in the corpus
RANDOM_STRUCTURAL = 150


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    reference: Path  # the valid model it was made from (the other side of ``verify``)
    healthy: bool  # graphsub imports it and onnxruntime runs it


def _healthy(path: Path) -> bool:
    from graphsub.equivalence import equivalent
    from graphsub.errors import GraphsubError
    from graphsub.frontends.onnx_io import load

    try:
        g = load(path)
        return equivalent(g, g).equivalent
    except GraphsubError:
        return False


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Case]:
    d = tmp_path_factory.mktemp("fuzz")
    refs = {}
    for name, m in fm.base_models().items():
        refs[name] = d / f"base_{name}.onnx"
        refs[name].write_bytes(m.SerializeToString())
    files: dict[str, tuple[Path, Path]] = {f"base:{n}": (p, p) for n, p in refs.items()}

    def add(name: str, data: bytes, base: str) -> None:
        p = d / f"{name.partition(' ')[0].replace(':', '_')}.onnx"
        p.write_bytes(data)
        files[name] = (p, refs[base])

    gs = fm.graphsub_export()
    refs["graphsub_export"] = d / "base_graphsub_export.onnx"
    add("base:graphsub_export", gs, "graphsub_export")
    sources = {name: m.SerializeToString() for name, m in fm.base_models().items()}
    for k, (base, data) in enumerate({**sources, "graphsub_export": gs}.items()):
        for i, b in enumerate(fm.truncations(data, 5, seed=10 + k)):
            add(f"trunc:{base}:{i}", b, base)
        for i, b in enumerate(fm.byte_flips(data, 15, seed=20 + k)):
            add(f"flip:{base}:{i}", b, base)
    for name in fm.STRUCTURAL:
        add(f"struct:{name}", fm.structural(name), fm.STRUCTURAL[name][0])
    for i, (desc, data) in enumerate(fm.random_structural(RANDOM_STRUCTURAL, seed=30)):
        add(f"struct:random{i} ({desc})", data, desc.partition(":")[0])
    for name, p in fm.special_files(d).items():
        files[f"special:{name}"] = (p, refs["conv"])
    return [Case(n, p, r, p.is_file() and _healthy(p)) for n, (p, r) in files.items()]


def _digest(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


def _listing(d: Path) -> set[str]:
    return set(os.listdir(d))


def _args(command: str, case: Case, out: Path) -> list[str]:
    p = str(case.path)
    return {
        "info": ["info", p],
        "cost": ["cost", p],
        "convert": ["convert", p, "-o", str(out)],
        "verify": ["verify", p, str(case.reference)],
        "search": ["search", p, "--time", "1", "-o", str(out)],
        "optimize": ["optimize", p, "--budget", "2", "--peers", "none", "-o", str(out)],
    }[command]


def invoke(args: list[str], inputs: list[Path], out: Path | None, env: dict[str, str],
           codes: list[int] | None = None) -> str | None:
    """Run one command line; None when it behaved, else what went wrong (one line).  Appends the exit code to
    ``codes``."""
    d = inputs[0].parent
    before = _listing(d)
    digests = [_digest(p) for p in inputs]
    r = CliRunner().invoke(COMMAND, args, env=env)
    if codes is not None:
        codes.append(r.exit_code)
    problems = []
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        tb = traceback.extract_tb(r.exception.__traceback__)
        ours = [f for f in tb if f"{os.sep}graphsub{os.sep}" in f.filename]  # the deepest frame of graphsub's own
        where = " <- ".join(f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno}"
                            for f in ([tb[-1]] if tb and tb[-1] not in ours else []) + ours[::-1][:2])
        problems.append(f"exception {type(r.exception).__name__} at {where}: {str(r.exception)[:200]}")
    elif r.exit_code not in OK_CODES:
        problems.append(f"exit code {r.exit_code}")
    for stray in ("Traceback (most recent call last)", "EP Error"):  # printed by a library, not by graphsub
        if stray in r.output:
            problems.append(f"{stray!r} in the output")
    if [_digest(p) for p in inputs] != digests:
        problems.append("input changed")
    new = _listing(d) - before
    if out is not None and r.exit_code == 0 and out.name in new:
        new.discard(out.name)
        out.unlink()
    if new:
        problems.append(f"left behind: {sorted(new)}")
    if not problems:
        return None
    lines = (r.output or "").strip().splitlines()
    return f"rc={r.exit_code} {'; '.join(problems)} | {lines[-1][:160] if lines else ''}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    cache = tmp_path_factory.mktemp("fuzz_cache") / "ops.sqlite"
    yield {"GRAPHSUB_DEBUG": "1", "GRAPHSUB_CACHE": str(cache), "COLUMNS": "200", "GRAPHSUB_MAX_TENSOR_BYTES": "2e9"}


def _selected(command: str, corpus: list[Case]) -> list[Case]:
    if command != "optimize":
        return corpus
    return [c for c in corpus if not c.healthy or c.name in HEALTHY_OPTIMIZE]


@pytest.mark.parametrize("command", ["info", "cost", "convert", "verify", "search", "optimize"])
def test_hostile_models(command: str, corpus: list[Case], env: dict[str, str]) -> None:
    failures = []
    for case in _selected(command, corpus):
        out = case.path.parent / f"{case.path.stem}.{command}.out.onnx"
        inputs = [case.path] + ([case.reference] if command == "verify" else [])
        args = _args(command, case, out)
        codes: list[int] = []
        problem = invoke(args, inputs, out if "-o" in args else None, env, codes)
        if problem:
            failures.append(f"{case.name}: {problem}")
        elif case.name.startswith("base:") and codes != [0]:  # else every run could fail for one dull reason
            failures.append(f"{case.name}: a valid model, exit code {codes[0]} (the command line itself broke?)")
    assert not failures, f"{len(failures)} hostile run(s) of `graphsub {command}` misbehaved:\n" + "\n".join(failures)


def test_corpus_covers_every_category(corpus: list[Case]) -> None:
    kinds = {c.name.split(":")[0] for c in corpus}
    assert kinds == {"base", "trunc", "flip", "struct", "special"}
    healthy = {c.name for c in corpus if c.healthy}
    assert {"base:conv", "base:matmul", "base:graphsub_export"} <= healthy
    # the hostile structures must not pass for healthy models
    assert not healthy & {f"struct:{n}" for n in ("dup_output", "dup_output_same_type", "cycle", "huge_dims",
                                                   "unknown_op", "init_wrong_dtype", "empty_graph")}


#: bad options and special paths on a healthy model: (name, command line with {m} the model, {s} the symbolic model,
#: {o} an output path, {d} a directory)
BAD_OPTIONS = [
    ("huge input shape", ["info", "{s}", "--input-shape", "x=100000000000x4"]),
    ("huge input shape convert", ["convert", "{s}", "--input-shape", "x=100000000000x4", "-o", "{o}"]),
    ("input too big to verify", ["convert", "{s}", "--input-shape", "x=75000000x4", "-o", "{o}"]),
    ("input too big to verify, verify", ["verify", "{s}", "{s}", "--input-shape", "x=75000000x4"]),
    ("int64 overflow shape", ["convert", "{s}", "--input-shape", "x=99999999999999999999x4", "-o", "{o}"]),
    ("zero dim", ["info", "{s}", "--input-shape", "x=0x4"]),
    ("negative dim", ["info", "{s}", "--input-shape", "x=-3x4"]),
    ("non-numeric dim", ["info", "{s}", "--input-shape", "x=axb"]),
    ("empty shape name", ["info", "{s}", "--input-shape", "=1x4"]),
    ("unknown input", ["info", "{s}", "--input-shape", "nope=1x4"]),
    ("wrong rank", ["convert", "{s}", "--input-shape", "x=2x4x4", "-o", "{o}"]),
    ("contradicting dim", ["verify", "{m}", "{m}", "--input-shape", "x=7x2x4x4"]),
    ("output is input", ["convert", "{m}", "-o", "{m}"]),
    ("output is a directory", ["convert", "{m}", "-o", "{d}"]),
    ("output dir missing", ["convert", "{m}", "-o", "{d}/missing/out.onnx"]),
    ("input is a directory", ["verify", "{d}", "{m}"]),
    ("input name too long", ["info", "{d}/" + "m" * 300 + ".onnx"]),
    ("output name too long", ["convert", "{m}", "-o", "{d}/" + "o" * 300 + ".onnx"]),
    ("input is a symlink loop", ["info", "{d}/loop.onnx"]),
    ("input is a symlink loop, with an output", ["convert", "{d}/loop.onnx", "-o", "{o}"]),
    ("unknown cost model", ["cost", "{m}", "-m", "nonsense"]),
    ("unknown algorithm", ["search", "{m}", "--algo", "nonsense", "-o", "{o}"]),
    ("unknown rules", ["search", "{m}", "--rules", "nonsense", "--time", "1"]),
    ("negative time", ["search", "{m}", "--time", "-1"]),
    ("nan budget", ["optimize", "{m}", "--budget", "nan", "--peers", "none", "-o", "{o}"]),
    ("unknown peer", ["optimize", "{m}", "--budget", "1", "--peers", "nonsense", "-o", "{o}"]),
    ("zero trials", ["verify", "{m}", "{m}", "--trials", "0"]),
    ("nan rtol", ["verify", "{m}", "{m}", "--rtol", "nan"]),
    ("zoo name with a slash", ["info", "zoo:../../etc/passwd"]),
    ("bad zoo argument", ["info", "zoo:resnet:blocks=-1"]),
]


def test_bad_options_and_special_paths(corpus: list[Case], env: dict[str, str]) -> None:
    conv = next(c.path for c in corpus if c.name == "base:conv")
    sym = next(c.path for c in corpus if c.name == "base:symbolic")
    d = conv.parent / "a_directory"
    d.mkdir(exist_ok=True)
    if not (d / "loop.onnx").is_symlink():
        (d / "loop.onnx").symlink_to("loop.onnx")
    out = conv.parent / "bad_options.out.onnx"
    failures = []
    for name, template in BAD_OPTIONS:
        args = [a.format(m=conv, s=sym, o=out, d=d) for a in template]
        problem = invoke(args, [conv, sym], out if "-o" in args else None, env)
        if problem:
            shown = " ".join(a if len(a) < 60 else a[:40] + "..." + a[-10:] for a in template)
            failures.append(f"{name} ({shown}): {problem}")
    assert not failures, f"{len(failures)} bad option(s) misbehaved:\n" + "\n".join(failures)
