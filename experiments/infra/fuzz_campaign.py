"""Fuzz campaign (issue 21): the real ``graphsub`` executable, as subprocesses, on many hostile inputs.

Categories (the runs are split evenly among them; each run is one command line, the commands ``info``, ``cost``,
``convert -o``, ``verify a b``, ``search --time 1 -o`` and ``optimize --budget 2 --peers none -o`` in turn):

* ``truncation``: a valid model cut short (seeded);
* ``byte_flip``: a valid model with 1 to 8 random bytes replaced;
* ``structural``: the named structural mutations of ``tests/fuzz_models.py`` (duplicate tensor names, cycles,
  unknown ops and domains, wrong initializers, impossible dims, ...) and random structural edits;
* ``bad_options``: a valid model with hostile option values (``--input-shape`` too large or malformed, budgets that
  are negative, NaN or infinite, unknown names, ...);
* ``special_paths``: files that are not models (empty, text, random bytes, a directory, a FIFO, ``/dev/zero``, a
  dangling symlink, odd names) and outputs that must not be written (a directory, a FIFO, the input itself, a
  symlink to it, a missing directory).

The valid sources are small models built with ``onnx.helper``, a model graphsub itself exported, and (with
``--zoo``) a zoo model export.  Each run works in a fresh directory; counted per category:

* ``tracebacks``: "Traceback (most recent call last)" (or onnxruntime's "EP Error" banner) in the output;
* ``internal_errors``: exit code 5 (the root command caught an exception: a bug);
* ``wrong_exit_codes``: an exit code outside 0-5 (or 130/143 without a signal), a timeout counted apart;
* ``inputs_changed``: an input file's bytes changed;
* ``leftovers``: files left in the directory -- anything on failure, anything but the output on success;
* ``silent_changes``: ``convert``/``search``/``optimize`` exited 0 but wrote a model onnxruntime rejects, or
  one whose interface or outputs (random inputs, rtol 1e-3) differ from the input's;
* ``repaired`` (not a failure): exited 0 and wrote a model onnxruntime runs from an input it rejects.

Writes ``experiments/results/fuzz_campaign.json`` and ``.md`` (per-category counts, exit-code histograms, every
failure with its command line).  Failing inputs are kept with ``--keep-failures DIR`` to replay them.

Run: ``.venv/bin/python experiments/infra/fuzz_campaign.py --runs 2000 --workers 2 --keep-failures /tmp/fuzz-failures``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the repository: experiments/infra/ -> ../..
# the mutations are shared with tests/cli/test_cli_fuzz.py: tests/fuzz_models.py, imported from the repository's tests/
sys.path.insert(0, str(ROOT / "tests"))
import fuzz_models as fm  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "results"
CATEGORIES = ("truncation", "byte_flip", "structural", "bad_options", "special_paths")
COMMANDS = ("info", "cost", "convert", "verify", "search", "optimize")
DOCUMENTED = {0, 1, 2, 3, 4, 5}
WRITERS = {"convert", "search", "optimize"}


@dataclass
class Run:
    """One command line: ``files`` are written into the run's directory first (name -> bytes, or a callable that
    makes the entry, for FIFOs and links); ``{NAME}`` in ``argv`` is the path of file NAME, ``{OUT}`` the output."""

    index: int
    category: str
    case: str
    command: str
    argv: list[str]
    files: dict[str, bytes | Callable[[Path], None]] = field(default_factory=dict)
    inputs: tuple[str, ...] = ("model.onnx",)  # the files that must not change
    output: str | None = "out.onnx"  # the file a successful run writes (None: writes nothing)


def _command(command: str, model: str = "{model.onnx}", reference: str = "{ref.onnx}") -> list[str]:
    return {
        "info": ["info", model],
        "cost": ["cost", model],
        "convert": ["convert", model, "-o", "{OUT}"],
        "verify": ["verify", model, reference],
        "search": ["search", model, "--time", "1", "-o", "{OUT}"],
        "optimize": ["optimize", model, "--budget", "2", "--peers", "none", "-o", "{OUT}"],
    }[command]


def sources(zoo: bool) -> dict[str, bytes]:
    out = {name: m.SerializeToString() for name, m in fm.base_models().items()}
    out["graphsub_export"] = fm.graphsub_export()
    if zoo:
        from graphsub import zoo as gzoo
        from graphsub.data import materialize
        from graphsub.frontends.onnx_io import to_onnx

        out["zoo_sru"] = to_onnx(materialize(gzoo.get("sru"), 0)).SerializeToString()
    return out


def _bad_option(rng: random.Random, command: str) -> tuple[str, list[str]]:
    """A hostile option for ``command``: (description, extra arguments)."""
    dims = ["0", "-1", "1", "3", "100000", "99999999999999999999", "1e3", "a", "", "1.5", "0x10"]
    shape_opts = [
        ["--input-shape", f"x={'x'.join(rng.choice(dims) for _ in range(rng.randint(1, 5)))}"],
        ["--input-shape", "x=100000x3x1000x1000"],
        ["--input-shape", rng.choice(["=1x2", "x", "x=", "nope=1x4", "x=1x4,y=2", "x==1", "x=1X4"])],
        ["--input-shape", "x=1x4", "--input-shape", "x=2x4"],
    ]
    numbers = ["-1", "0", "nan", "inf", "-inf", "1e308", "abc", "", "1e-300"]
    per_command: dict[str, list[list[str]]] = {
        "info": shape_opts,
        "cost": [*shape_opts, ["-m", rng.choice(["nonsense", "measured:nope", "roofline:tpu", "fused[", ""])],
                 ["--top", rng.choice(["-5", "nan", "99999999999999999999"])],
                 ["--threads", rng.choice(["0", "-3", "100000"])],
                 ["-m", "measured", "--cache", "{model.onnx}"]],
        "convert": [*shape_opts, ["--seed", rng.choice(["-1", "99999999999999999999999", "x"])]],
        "verify": [*shape_opts, ["--trials", rng.choice(["0", "-1", "x"])],
                   ["--rtol", rng.choice(numbers)], ["--atol", rng.choice(numbers)]],
        "search": [*shape_opts, ["--time", rng.choice(numbers)], ["--k", rng.choice(["-1", "0", "x"])],
                   ["--algo", rng.choice(["nonsense", "", "eqsat"])], ["--rules", rng.choice(["nonsense", ",", ""])],
                   ["--cost", rng.choice(["nonsense", "measured:zz"])], ["--expansions", rng.choice(["-1", "0"])],
                   ["--memory-mb", rng.choice(["-1", "nan", "0"])], ["--q", rng.choice(["0", "-1"])]],
        "optimize": [*shape_opts, ["--budget", rng.choice(numbers)], ["--threads", rng.choice(["0", "-1"])],
                     ["--peers", rng.choice(["nonsense", ",,", ""])], ["--min-speedup", rng.choice(numbers)],
                     ["--seeds", rng.choice(["0", "-2"])], ["--eqsat-budget", rng.choice(numbers)],
                     ["--provider", rng.choice(["tpu", "cuda", ""])], ["--report", "{OUT}"],
                     ["--report", "{model.onnx}"]],
    }
    extra = rng.choice(per_command[command])
    return " ".join(extra), extra


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _symlink(target: str) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        p.symlink_to(target)
    return make


def _mkdir(p: Path) -> None:
    p.mkdir()


def _special_inputs() -> dict[str, dict[str, bytes | Callable[[Path], None]] | str]:
    """Special input files: name -> files of the run (with ``model.onnx`` the input), or a fixed path."""
    out: dict[str, dict[str, bytes | Callable[[Path], None]] | str] = {
        f"bytes:{name}": {"model.onnx": data} for name, data in fm.SPECIAL_BYTES.items()}
    out.update({
        "directory": {"model.onnx": _mkdir},
        "fifo": {"model.onnx": _fifo},
        "dangling_symlink": {"model.onnx": _symlink("nowhere.onnx")},
        "symlink_loop": {"model.onnx": _symlink("model.onnx")},
        "symlink_to_directory": {"model.onnx": _symlink("."), },
        "missing": {},
        "dev_zero": "/dev/zero",
        "dev_null": "/dev/null",
        "proc_file": "/proc/self/status",
        "long_name": "{" + "m" * 300 + ".onnx}",
        "odd_name": "{-rf \n ünïcode [red]markup[/].onnx}",
        "zoo_traversal": "zoo:../../etc/passwd",
        "zoo_unknown": "zoo:nonexistent:blocks=2",
        "python_spec": "{model.onnx}.py:Net",
    })
    return out


def _special_outputs() -> dict[str, tuple[str, dict[str, bytes | Callable[[Path], None]]]]:
    """Hostile outputs: name -> (the ``-o`` argument, extra files)."""
    return {
        "output_directory": ("{outdir}", {"outdir": _mkdir}),
        "output_fifo": ("{out.fifo}", {"out.fifo": _fifo}),
        "output_is_input": ("{model.onnx}", {}),
        "output_symlink_to_input": ("{link.onnx}", {"link.onnx": _symlink("model.onnx")}),
        "output_dangling_symlink": ("{dangling.onnx}", {"dangling.onnx": _symlink("missing/x.onnx")}),
        "output_missing_dir": ("{missing}/out.onnx", {}),
        "output_long_name": ("{" + "o" * 300 + ".onnx}", {}),
    }


def make_runs(n: int, seed: int, srcs: dict[str, bytes]) -> list[Run]:
    """``n`` runs, split evenly over :data:`CATEGORIES` (deterministic in ``seed``)."""
    rng = random.Random(seed)
    runs: list[Run] = []
    names = sorted(srcs)
    struct_names = sorted(fm.STRUCTURAL)
    specials = _special_inputs()
    outputs = _special_outputs()
    randoms = fm.random_structural(n, seed=seed + 1)
    for i in range(n):
        cat = CATEGORIES[i % len(CATEGORIES)]
        k = i // len(CATEGORIES)
        cmd = COMMANDS[k % len(COMMANDS)]
        src = rng.choice(names)
        ref = srcs[src]
        files: dict[str, bytes | Callable[[Path], None]] = {"ref.onnx": ref}
        if cat == "truncation":
            data = srcs[src]
            cut = rng.randrange(len(data))
            files["model.onnx"] = data[:cut]
            case = f"{src}[:{cut}]"
        elif cat == "byte_flip":
            flips = rng.randint(1, 8)
            files["model.onnx"] = fm.byte_flips(srcs[src], 1, seed=rng.randrange(1 << 30), flips=flips)[0]
            case = f"{src} {flips} byte(s), seed {i}"
        elif cat == "structural":
            if k % 2 == 0:
                name = struct_names[(k // 2) % len(struct_names)]
                base = fm.STRUCTURAL[name][0]
                files["model.onnx"] = fm.structural(name)
                files["ref.onnx"] = srcs[base]
                case = name
            else:
                desc, data = randoms[k]
                files["model.onnx"] = data
                files["ref.onnx"] = srcs[desc.partition(":")[0]]
                case = f"random: {desc}"
        elif cat == "bad_options":
            files["model.onnx"] = srcs[src]
            desc, extra = _bad_option(rng, cmd)
            argv = _command(cmd) + extra
            runs.append(Run(i, cat, f"{src} {desc}", cmd, argv, files, ("model.onnx", "ref.onnx"),
                            "out.onnx" if "{OUT}" in argv else None))
            continue
        else:  # special_paths
            if k % 3 == 2 and cmd in WRITERS:
                name, (arg, extra_files) = rng.choice(sorted(outputs.items()))
                files["model.onnx"] = srcs[src]
                files.update(extra_files)
                argv = [arg if a == "{OUT}" else a for a in _command(cmd)]
                runs.append(Run(i, cat, name, cmd, argv, files, ("model.onnx", "ref.onnx"), None))
                continue
            name, spec = rng.choice(sorted(specials.items(), key=lambda kv: kv[0]))
            if isinstance(spec, str):
                argv = _command(cmd, model=spec)
            else:
                files.update(spec)
                argv = _command(cmd)
            inputs = tuple(f for f, v in files.items() if isinstance(v, bytes))
            out = "out.onnx" if "{OUT}" in argv else None
            runs.append(Run(i, cat, name, cmd, argv, files, inputs, out))
            continue
        argv = _command(cmd)
        runs.append(Run(i, cat, case, cmd, argv, files, ("model.onnx", "ref.onnx"),
                        "out.onnx" if "{OUT}" in argv else None))
    return runs


# ----------------------------------------------------------------------------- running


def _expand(arg: str, d: Path, output: str | None) -> str:
    if arg == "{OUT}":
        return str(d / (output or "out.onnx"))
    while "{" in arg and "}" in arg:
        start, end = arg.index("{"), arg.index("}")
        if end < start:
            break
        arg = arg[:start] + str(d / arg[start + 1:end]) + arg[end + 1:]
    return arg


def _snapshot(d: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under ``d`` (not following links): its file type, and its bytes when it is a regular file."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(root) / name
            mode = os.lstat(p).st_mode
            kind = mode & 0o170000
            out[str(p.relative_to(d))] = (kind, p.read_bytes() if kind == 0o100000 else None)
    return out


def _feeds(sess: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    types = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dt = types.get(i.type)
        if dt is None:
            raise ValueError(f"input {i.name} of type {i.type}")
        feeds[i.name] = (rng.standard_normal(shape).astype(dt) if np.issubdtype(dt, np.floating)
                         else np.zeros(shape, dt) if dt is not np.bool_ else np.ones(shape, dt))
    return feeds


def silent_change(src: Path, out: Path) -> str | None:
    """None when the written ``out`` runs in onnxruntime and computes what ``src`` computes; ``"repaired"`` when
    onnxruntime rejects ``src`` but runs ``out``; else what differs."""
    from graphsub.errors import GraphsubError
    from graphsub.frontends.ort import make_session, run_session

    try:
        so = make_session(str(out))
    except GraphsubError as e:
        return f"output rejected by onnxruntime: {str(e)[:200]}"
    try:
        si = make_session(str(src))
    except GraphsubError:
        return "repaired"
    sig = lambda s: [(i.name, i.type, len(i.shape)) for i in s.get_inputs()]  # noqa: E731
    if sig(si) != sig(so):
        return f"interface changed: {sig(si)} -> {sig(so)}"
    try:
        feeds = _feeds(so)
        want = run_session(si, feeds)
    except (GraphsubError, ValueError):
        return None  # the input cannot run at these sizes: nothing to compare
    try:
        got = run_session(so, feeds)
    except GraphsubError as e:
        return f"output fails where the input runs: {str(e)[:200]}"
    if len(got) != len(want):
        return f"{len(want)} outputs -> {len(got)}"
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True):
            return f"output {k} differs (shape {b.shape} -> {a.shape})"
    return None


def execute(run: Run, work: Path, graphsub: str, env: dict[str, str], timeout: float,
            memory_gb: float) -> dict[str, Any]:
    d = work / f"{run.index:06d}"
    d.mkdir()
    for name, content in run.files.items():
        if isinstance(content, bytes):
            (d / name).write_bytes(content)
        else:
            content(d / name)
    argv = [_expand(a, d, run.output) for a in run.argv]
    before = _snapshot(d)
    t0 = time.perf_counter()
    limit = ["prlimit", f"--as={int(memory_gb * (1 << 30))}", "--"] if memory_gb > 0 else []
    try:
        p = subprocess.run([*limit, graphsub, *argv], cwd=d, env=env, capture_output=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        rc: int | str = p.returncode
        text = (p.stdout + p.stderr).decode("utf-8", errors="replace")
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        text = ((e.stdout or b"") + (e.stderr or b"")).decode("utf-8", errors="replace")
    seconds = time.perf_counter() - t0
    problems = []
    if "Traceback (most recent call last)" in text or "EP Error" in text:  # a library printing its own failure
        problems.append("traceback")
    if rc == "timeout":
        problems.append("timeout")
    elif rc == 5:
        problems.append("internal_error")
    elif rc not in DOCUMENTED:
        problems.append("wrong_exit_code")
    after = _snapshot(d)
    changed = sorted(k for k, v in before.items() if after.get(k) != v)
    if changed:
        problems.append("input_changed")  # an input, or any file that was there (a FIFO replaced, ...)
    new = set(after) - set(before)
    out = d / run.output if run.output else None
    note = None
    if out is not None and rc == 0 and out.name in new:
        new.discard(out.name)
        if run.command in WRITERS:
            note = silent_change(d / "model.onnx", out)
            if note is not None and note != "repaired":
                problems.append("silent_change")
    if new:
        problems.append("leftover")
    if "out of memory" in text:
        problems.append("out_of_memory")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return {"index": run.index, "category": run.category, "case": run.case, "command": run.command,
            "argv": ["graphsub", *argv], "rc": rc, "seconds": round(seconds, 3), "problems": problems,
            "note": note, "leftovers": sorted(new), "changed": changed,
            "message": " ".join(" ".join(lines[-3:]).split())[-400:], "dir": str(d)}


COUNTERS = ("tracebacks", "internal_errors", "wrong_exit_codes", "timeouts", "inputs_changed", "leftovers",
            "silent_changes", "out_of_memory")
_PROBLEM_COUNTER = {"traceback": "tracebacks", "internal_error": "internal_errors",
                    "wrong_exit_code": "wrong_exit_codes", "timeout": "timeouts", "input_changed": "inputs_changed",
                    "leftover": "leftovers", "silent_change": "silent_changes", "out_of_memory": "out_of_memory"}


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    cats: dict[str, Any] = {}
    for cat in CATEGORIES:
        rs = [r for r in results if r["category"] == cat]
        c: dict[str, Any] = {"runs": len(rs), **{k: 0 for k in COUNTERS}, "repaired": 0}
        for r in rs:
            for p in set(r["problems"]):
                c[_PROBLEM_COUNTER[p]] += 1
            c["repaired"] += r["note"] == "repaired"
        c["exit_codes"] = dict(sorted(Counter(str(r["rc"]) for r in rs).items()))
        c["by_command"] = {cmd: dict(sorted(Counter(str(r["rc"]) for r in rs if r["command"] == cmd).items()))
                           for cmd in COMMANDS}
        c["seconds"] = round(sum(r["seconds"] for r in rs), 1)
        cats[cat] = c
    total = {k: sum(c[k] for c in cats.values()) for k in ("runs", *COUNTERS, "repaired")}
    return {"categories": cats, "total": total}


def markdown(report: dict[str, Any]) -> str:
    cfg, cats = report["config"], report["summary"]["categories"]
    head = ["category", "runs", *COUNTERS, "repaired", "exit codes"]
    lines = [
        "# Fuzz campaign (issue 21)", "",
        f"{cfg['runs']} runs of `{cfg['graphsub']}` (graphsub {cfg['graphsub_version']}, onnxruntime "
        f"{cfg['onnxruntime']}), seed {cfg['seed']}, {cfg['workers']} worker(s), timeout {cfg['timeout_s']} s, "
        f"memory limit {cfg['memory_limit_gb']} GB per run; {report['seconds']:.0f} s in all on {cfg['machine']} "
        f"(load average {cfg['load_average']}).", "",
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cat, c in {**cats, "total": {**report["summary"]["total"], "exit_codes": {}}}.items():
        codes = ", ".join(f"{k}: {v}" for k, v in c.get("exit_codes", {}).items())
        lines.append("| " + " | ".join([cat, str(c["runs"]), *(str(c[k]) for k in COUNTERS), str(c["repaired"]),
                                        codes]) + " |")
    fails = report["failures"]
    lines += ["", f"## Failures ({len(fails)})", ""]
    if not fails:
        lines.append("None.")
    for f in fails[:200]:
        args = [a if len(a) <= 80 else a[:60] + "..." + a[-16:] for a in f["argv"]]
        cmd = " ".join(a if a and " " not in a and "\n" not in a else repr(a) for a in args)
        lines.append(f"- **{f['category']}** `{f['case']}` -- {', '.join(f['problems'])} (exit {f['rc']}): "
                     f"`{cmd}` -- {f['message'][:300]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500, help="number of command lines in all (default 500)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="runs at a time (default 2)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per run before it counts as a timeout")
    ap.add_argument("--memory-limit-gb", type=float, default=8.0,
                    help="address-space limit of each run (RLIMIT_AS; 0: none), so a runaway run cannot take the "
                         "machine down")
    ap.add_argument("--graphsub", default=str(Path(sys.executable).with_name("graphsub")),
                    help="the executable (default: the one beside this Python)")
    ap.add_argument("--zoo", action="store_true", help="also mutate a zoo model export (sru, 12 MB)")
    ap.add_argument("--out", type=Path, default=OUT, help="where fuzz_campaign.json/.md go")
    ap.add_argument("--name", default="fuzz_campaign", help="file name stem of the results")
    ap.add_argument("--keep-failures", type=Path, default=None, help="copy each failing run's directory here")
    args = ap.parse_args(argv)

    import onnxruntime

    from graphsub import __version__

    srcs = sources(args.zoo)
    runs = make_runs(args.runs, args.seed, srcs)
    work = Path(tempfile.mkdtemp(prefix="graphsub-fuzz-"))
    env = {**os.environ, "COLUMNS": "200", "GRAPHSUB_CACHE": str(work / "op_times.sqlite")}
    env.pop("GRAPHSUB_DEBUG", None)
    done: list[dict[str, Any]] = []
    lock = threading.Lock()
    t0 = time.perf_counter()

    def one(run: Run) -> dict[str, Any]:
        r = execute(run, work, args.graphsub, env, args.timeout, args.memory_limit_gb)
        with lock:
            done.append(r)
            if r["problems"]:
                print(f"[{len(done)}/{len(runs)}] {r['category']} {r['command']} {r['case']!r}: "
                      f"{', '.join(r['problems'])} (exit {r['rc']}) {r['message'][-160:]}", flush=True)
            elif len(done) % 50 == 0:
                print(f"[{len(done)}/{len(runs)}] {time.perf_counter() - t0:.0f} s", flush=True)
        if r["problems"] and args.keep_failures is not None:
            dst = args.keep_failures / Path(r["dir"]).name
            shutil.copytree(r["dir"], dst, symlinks=True, dirs_exist_ok=True,
                            ignore=lambda _d, names: [n for n in names if not (Path(_d) / n).is_file()])
            r["dir"] = str(dst)
        else:
            shutil.rmtree(r["dir"], ignore_errors=True)
        return r

    try:
        with ThreadPoolExecutor(max(args.workers, 1)) as pool:
            list(pool.map(one, runs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - t0
    done.sort(key=lambda r: r["index"])
    report: dict[str, Any] = {
        "config": {"runs": args.runs, "seed": args.seed, "workers": args.workers, "timeout_s": args.timeout,
                   "memory_limit_gb": args.memory_limit_gb, "graphsub": args.graphsub, "zoo": args.zoo,
                   "graphsub_version": __version__, "onnxruntime": onnxruntime.__version__,
                   "python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                   "load_average": [round(x, 2) for x in os.getloadavg()], "date": time.strftime("%Y-%m-%d %H:%M")},
        "seconds": round(seconds, 1),
        "summary": summarize(done),
        "failures": [r for r in done if r["problems"]],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(report))
    t = report["summary"]["total"]
    print(f"{t['runs']} runs in {seconds:.0f} s: " + ", ".join(f"{k} {t[k]}" for k in (*COUNTERS, "repaired")))
    print(f"wrote {args.out / (args.name + '.json')} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
