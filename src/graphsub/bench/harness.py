"""Experiment harness: one search per process, a resumable JSONL log per grid.

A :class:`Run` names one search (algorithm, model, cost model, rule set, K, time cut-off,
expansions, repeat, seed, algorithm parameters); its :attr:`Run.id` is a hash of that spec, so a
grid can be stopped and resumed.  :func:`run_one` executes one run in a fresh ``spawn`` process:

1. *setup* (not timed as search): load the model, the rules and the cost model, and let the cost
   model prepare the initial graph (a measured model times its ops here);
2. *search*: :func:`graphsub.search.search` with ``Budget(time_s=cutoff_s, ...)``.  Algorithms stop
   at the cut-off themselves and return their best; the parent kills the child only at
   ``cutoff + grace`` (a safety net), and records ``status: "timeout"``.

Peak memory is the child's ``VmHWM`` (``/proc/self/status``): ``ru_maxrss`` of a spawned child
starts at the parent's peak (Linux carries the high-water mark across fork/exec), so it is not a
per-run number.  ``peak_mem_mb`` is the whole process (interpreter, model, rules, search: what
OCGGS Table 3c reports), ``search_mem_mb`` the growth during the search alone.

:func:`run_grid` appends one JSON line per finished run to ``<out_dir>/<name>.jsonl`` (runs
already recorded are skipped), then writes ``<name>.csv`` (one row per run) and
``<name>_summary.csv`` (mean over repeats, :func:`graphsub.bench.tables.summarize`); records are
read and written by :mod:`graphsub.bench.records`.  A run that fails is recorded with
``status: "error"`` and its message; it never stops the grid.

>>> r = Run("greedy", "resnet:blocks=2", cost="flops", k=2, cutoff_s=10)
>>> r.id == Run("greedy", "resnet:blocks=2", cost="flops", k=2, cutoff_s=10.0).id
True
>>> check_run(r), check_run(Run("greedy", "no_such_model", k=2))
([], ["unknown zoo model 'no_such_model'"])
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from graphsub.bench.records import (
    append_record,
    load_avg,
    load_records,
    machine_info,
    proc_status_mb,
    timestamp,
    versions,
    write_csv,
)
from graphsub.bench.tables import summarize, write_rows
from graphsub.errors import GraphsubError
from graphsub.spec import ModelSpec, looks_like_path

#: Cost-model kinds :func:`check_run` accepts (the part of a spec before ``:``).
COST_KINDS = ("flops", "bytes", "launches", "roofline", "measured", "fused")


# ----------------------------------------------------------------------------- run spec


def _norm(value: Any) -> Any:
    """JSON-normal form of a parameter value (tuples become lists, keys sorted)."""
    return json.loads(json.dumps(value, sort_keys=True))


@dataclass(frozen=True)
class Run:
    """One search of a grid.

    ``model``: a zoo spec ``NAME[:key=value,...]`` (``zoo:`` prefix optional, values parsed as JSON:
    ``resnet:blocks=4``) or an ``.onnx`` path; ``cost``: a :func:`graphsub.cost.get_model` spec;
    ``rules``: a rule set, or sets joined by ``,``; ``k``: maximum sequence length (None:
    unbounded); ``cutoff_s``: the search's time budget (the hard kill comes ``grace`` later);
    ``expansions`` / ``memory_mb``: the other :class:`~graphsub.search.Budget` limits; ``repeat``:
    the repetition index; ``seed``: passed to the algorithm; ``params``: algorithm keyword arguments.
    """

    algo: str
    model: str
    cost: str = "roofline:p100"
    rules: str = "ocggs157"
    k: int | None = 10
    cutoff_s: float = 3600.0
    expansions: int | None = None
    memory_mb: float | None = None
    repeat: int = 0
    seed: int = 0
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cutoff_s", float(self.cutoff_s))
        if self.memory_mb is not None:
            object.__setattr__(self, "memory_mb", float(self.memory_mb))
        object.__setattr__(self, "params", {k: _norm(v) for k, v in sorted(dict(self.params).items())})

    def spec(self) -> dict[str, Any]:
        """The spec as a JSON-ready dict (what the id hashes)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of the canonical JSON spec."""
        text = json.dumps(self.spec(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """Short human-readable description."""
        k = "inf" if self.k is None else self.k
        return f"{self.model} {self.algo} {self.cost} K={k} #{self.repeat}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Run:
        """Rebuild a run from :meth:`spec` (or a record: extra keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def check_run(run: Run) -> list[str]:
    """Problems with a run's names (unknown algorithm, rule set, cost model, zoo model; no K for
    ENU); empty when it looks runnable.  Cheap: builds nothing."""
    from graphsub.cost.analytic import GPU_PRESETS
    from graphsub.rules.library import set_names
    from graphsub.search import ALGORITHMS

    problems = []
    if run.algo not in ALGORITHMS:
        problems.append(f"unknown algorithm {run.algo!r} (known: {', '.join(ALGORITHMS)})")
    unknown_sets = [s for s in run.rules.split(",") if s.strip() not in set_names()]
    if unknown_sets:
        problems.append(f"unknown rule set(s) {unknown_sets} (known: {', '.join(set_names())})")
    kind, _, arg = run.cost.removesuffix("[min]").partition(":")
    if kind not in COST_KINDS or (kind == "roofline" and arg not in ("", "cpu", *GPU_PRESETS)) or (
            kind in ("flops", "bytes", "launches") and arg):
        problems.append(f"unknown cost model {run.cost!r}")
    problems.extend(_model_problems(run.model))
    if run.algo in ("enum", "pruning", "dpp") and run.k is None:
        problems.append(f"{run.algo} needs K")
    if run.cutoff_s <= 0:
        problems.append("the cut-off must be positive")
    return problems


def _model_problems(text: str) -> list[str]:
    from graphsub import zoo

    try:
        spec = ModelSpec.parse(text)
    except GraphsubError as e:
        return [str(e)]
    if spec.kind == "module":
        return [f"{text!r}: a PyTorch module cannot be benchmarked by name (export it to ONNX first)"]
    if spec.kind == "zoo":
        return [] if spec.name in zoo.MODELS else [f"unknown zoo model {spec.name!r}"]
    if Path(spec.name).is_file():
        return []
    if looks_like_path(text):
        return [f"model file {text!r} not found"]
    return [f"unknown zoo model {text.partition(':')[0]!r}"]


# ----------------------------------------------------------------------------- machine info


def _hwm_mb(pid: int | str = "self") -> float | None:
    return proc_status_mb(f"/proc/{pid}/status", "VmHWM")


def _rss_mb(pid: int | str = "self") -> float | None:
    return proc_status_mb(f"/proc/{pid}/status", "VmRSS")


def _reset_hwm() -> bool:
    """Reset this process's peak-RSS mark (Linux >= 4.0: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- the child


def _child(conn: Any, spec: dict[str, Any], threads: int | None, cache: str | None) -> None:
    """Body of the spawned process: setup, report ``ready``, search, report ``done``/``error``."""
    try:
        run = Run.from_dict(spec)
        t0 = time.perf_counter()
        from graphsub.cost import get_model
        from graphsub.rules.library import resolve_rules
        from graphsub.search import Budget, search

        graph = ModelSpec.parse(run.model).load()
        rules = resolve_rules(run.rules)
        cost = get_model(run.cost, threads=threads, cache=cache, progress=False)
        cost.prepare(graph)
        initial = cost.scalar(cost.graph_cost(graph))
        setup_s = time.perf_counter() - t0
        setup_peak = _hwm_mb()
        rss0 = _rss_mb()
        reset = _reset_hwm()
        conn.send(("ready", {"setup_time_s": setup_s, "num_ops": graph.num_ops, "num_rules": len(rules),
                             "setup_mem_mb": rss0, "initial_cost": initial}))
        budget = Budget(time_s=run.cutoff_s, expansions=run.expansions, k=run.k, memory_mb=run.memory_mb)
        result = search(graph, rules, cost, budget, run.seed, algo=run.algo, **run.params)
        hwm = _hwm_mb()
        data = result.to_dict()
        data["best_num_ops"] = result.best.num_ops
        peaks = [x for x in (setup_peak, hwm) if x is not None]
        peak = max(peaks) if peaks else None
        data["search_mem_mb"] = (hwm - rss0) if (reset and hwm is not None and rss0 is not None) else None
        data["process_peak_mem_mb"] = peak
        conn.send(("done", data))
    except BaseException as e:  # report everything, including MemoryError and KeyboardInterrupt
        tb = traceback.format_exc(limit=8)
        with contextlib.suppress(Exception):
            conn.send(("error", {"error": f"{type(e).__name__}: {e}", "traceback": tb}))
    finally:
        with contextlib.suppress(Exception):
            conn.close()


# ----------------------------------------------------------------------------- one run


def _from_result(rec: dict[str, Any], data: dict[str, Any]) -> None:
    """Fill a record from the child's ``SearchResult.to_dict()``."""
    stats = dict(data.get("stats") or {})
    rec.update({
        "initial_cost": data.get("initial_cost"), "best_cost": data.get("best_cost"),
        "improvement": data.get("improvement"), "search_time_s": data.get("search_time_s"),
        "peak_mem_mb": data.get("process_peak_mem_mb"), "search_mem_mb": data.get("search_mem_mb"),
        "search_reported_peak_mem_mb": data.get("peak_mem_mb"),
        "explored": data.get("explored"), "generated": stats.get("generated"),
        "deduplicated": stats.get("deduplicated"), "pruned": stats.get("pruned"), "matches": stats.get("matches"),
        "stopped_by": data.get("stopped_by"), "seq_len": len(data.get("sequence") or ()),
        "best_num_ops": data.get("best_num_ops"), "sequence": data.get("sequence"), "trace": data.get("trace"),
        "stats": stats, "result_params": data.get("params"),
    })
    timed = sum(float(stats.get(k, 0.0)) for k in ("time_match_s", "time_apply_s", "time_hash_s", "time_cost_s"))
    if rec["search_time_s"] is not None:
        stats["time_other_s"] = max(0.0, float(rec["search_time_s"]) - timed)


def run_one(run: Run, *, grace_s: float = 10.0, grace_frac: float = 0.1, setup_timeout_s: float = 1800.0,
            threads: int | None = None, cache: str | os.PathLike[str] | None = None,
            poll_s: float = 0.05) -> dict[str, Any]:
    """Execute one run in a fresh ``spawn`` process and return its record (never raises for a
    failing run: ``status`` is ``ok``, ``timeout`` (killed at ``cutoff + max(grace_s, grace_frac *
    cutoff)`` after setup, or setup took over ``setup_timeout_s``) or ``error``).  ``threads`` and
    ``cache`` go to measured cost models."""
    rec: dict[str, Any] = {"id": run.id, **run.spec(), "status": "error", "error": None,
                           "initial_cost": None, "best_cost": None, "improvement": None, "search_time_s": None,
                           "setup_time_s": None, "wall_time_s": None, "peak_mem_mb": None, "search_mem_mb": None,
                           "num_ops": None, "started_at": timestamp(), "load_avg_1m": load_avg()}
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, run.spec(), threads, None if cache is None else str(cache)),
                       name=f"graphsub-bench-{run.id}", daemon=True)
    t0 = time.perf_counter()
    hard_s = run.cutoff_s + max(grace_s, grace_frac * run.cutoff_s)
    ready_at: float | None = None
    peak_seen: float | None = None
    try:
        proc.start()
        send.close()
        while True:
            if recv.poll(poll_s):
                try:
                    kind, data = recv.recv()
                except EOFError:
                    kind, data = "eof", {}
                if kind == "ready":
                    ready_at = time.perf_counter()
                    rec.update(setup_time_s=data["setup_time_s"], num_ops=data["num_ops"],
                               num_rules=data["num_rules"], setup_mem_mb=data["setup_mem_mb"],
                               initial_cost=data["initial_cost"])
                    continue
                if kind == "done":
                    rec["status"] = "ok"
                    _from_result(rec, data)
                elif kind == "error":
                    rec.update(error=data["error"], traceback=data["traceback"])
                else:
                    rec["error"] = f"child exited (code {proc.exitcode}) without a result"
                break
            if proc.pid is not None:
                hwm = _hwm_mb(proc.pid)
                if hwm is not None:
                    peak_seen = max(peak_seen or 0.0, hwm)
            now = time.perf_counter()
            over_setup = ready_at is None and now - t0 > setup_timeout_s
            over_search = ready_at is not None and now - ready_at > hard_s
            if over_setup or over_search:
                rec.update(status="timeout", peak_mem_mb=peak_seen, stopped_by="killed",
                           search_time_s=None if ready_at is None else now - ready_at,
                           error=("setup (model, rules, cost model) took over " f"{setup_timeout_s:g}s"
                                  if over_setup else f"killed after {hard_s:g}s (cut-off {run.cutoff_s:g}s + grace)"))
                break
            if not proc.is_alive() and not recv.poll(poll_s):
                code = proc.exitcode
                rec["error"] = (f"child killed by signal {-code}" + (" (out of memory?)" if code == -9 else "")
                                if code is not None and code < 0 else f"child exited with code {code} without a result")
                rec["peak_mem_mb"] = peak_seen
                break
    except Exception as e:  # e.g. the process could not be started
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=30)
        recv.close()
    rec["wall_time_s"] = time.perf_counter() - t0
    rec["finished_at"] = timestamp()
    rec["machine"] = machine_info()
    rec["versions"] = versions()
    return rec


# ----------------------------------------------------------------------------- grids


@dataclass
class GridResult:
    """What :func:`run_grid` did: files, the records of the grid's runs, and counts."""

    jsonl: Path
    csv: Path
    summary_csv: Path
    records: list[dict[str, Any]]
    executed: int
    skipped: int
    summary: list[dict[str, Any]] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """Runs of the grid by status (``ok``, ``timeout``, ``error``)."""
        out = {"ok": 0, "timeout": 0, "error": 0}
        for r in self.records:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"jsonl": str(self.jsonl), "csv": str(self.csv), "summary_csv": str(self.summary_csv),
                "runs": len(self.records), "executed": self.executed, "skipped": self.skipped,
                "counts": self.counts, "summary": self.summary}


def _describe(rec: Mapping[str, Any]) -> str:
    label = Run.from_dict(rec).label
    if rec["status"] == "ok":
        return (f"[green]ok[/] {label}: {rec['initial_cost']:.5g} -> {rec['best_cost']:.5g} "
                f"({rec['improvement']:.1%}) in {rec['search_time_s']:.2f}s, {rec['peak_mem_mb'] or 0:.0f} MB, "
                f"stopped by {rec['stopped_by']}")
    colour = "yellow" if rec["status"] == "timeout" else "red"
    return f"[{colour}]{rec['status']}[/] {label}: {rec.get('error')}"


def times_models(run: Run) -> bool:
    """Does the run time operators on this machine (a measured cost model)? Such runs never run beside another."""
    return run.cost.removesuffix("[min]").partition(":")[0] in ("measured", "fused")


def grid_task(run_opts: dict[str, Any], run: Run) -> dict[str, Any]:
    """:func:`run_one` as a Ray task; the record says which node ran it."""
    from graphsub.distributed.executors import node_name

    return {**run_one(run, **run_opts), "node": node_name()}


def run_grid(runs: Sequence[Run], out_dir: str | os.PathLike[str], *, name: str = "bench", resume: bool = True,
             progress: bool = True, retry_errors: bool = False,
             on_record: Callable[[dict[str, Any]], None] | None = None, executor: str = "serial",
             ray_address: str | None = None, **run_opts: Any) -> GridResult:
    """Run every run of ``runs`` (duplicates once) with :func:`run_one`, appending each record to
    ``<out_dir>/<name>.jsonl`` as it finishes.  With ``resume`` runs whose id is recorded there are
    skipped (``retry_errors``: except those recorded as ``error``); without it the file starts
    over.  Writes ``<name>.csv`` and ``<name>_summary.csv`` (all records of the file) at the end,
    also when interrupted.  ``run_opts`` go to :func:`run_one`; ``on_record`` sees each new record.

    ``executor="ray"``: each run is a Ray task (:func:`grid_task`, retried if its worker dies) on the cluster at
    ``ray_address``; a run with a measured cost model holds its node's timing resource (one at a time per node),
    the others one CPU each. Search times are then measured beside other searches on the node: compare them
    within one executor."""
    from graphsub.distributed.executors import check_executor, map_ordered

    check_executor(executor)
    if executor == "process":
        raise GraphsubError("a grid runs serial (each run in a fresh process, one at a time) or on Ray")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / f"{name}.jsonl"
    if not resume and jsonl.exists():
        jsonl.unlink()
    done = {r["id"]: r for r in load_records(jsonl)
            if not (retry_errors and r.get("status") == "error")}
    unique = list({r.id: r for r in runs}.values())
    todo = [r for r in unique if r.id not in done]
    new: dict[str, dict[str, Any]] = {}
    console = Console(stderr=True)
    try:
        with Progress(TextColumn("[bold]bench[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True, disable=not progress) as bar:
            task = bar.add_task(name, total=len(todo))

            def finished(k: int, rec: dict[str, Any]) -> None:
                rec["grid"] = name
                append_record(jsonl, rec)
                new[todo[k].id] = rec
                if progress:
                    bar.console.print(_describe(rec), highlight=False, soft_wrap=True)
                if on_record is not None:
                    on_record(rec)
                bar.advance(task)

            if executor == "serial":
                for k, run in enumerate(todo):
                    bar.update(task, description=run.label)
                    finished(k, run_one(run, **run_opts))
            else:
                bar.update(task, description=f"{len(todo)} runs on Ray")
                map_ordered(grid_task, todo, executor=executor, context=run_opts, ray_address=ray_address,
                            on_done=finished, timing=times_models)
    finally:
        everything = load_records(jsonl)
        csv_path = write_csv(everything, out / f"{name}.csv")
        summary = summarize(everything)
        summary_csv = write_rows(summary, out / f"{name}_summary.csv")
    records = [new.get(r.id) or done[r.id] for r in unique if r.id in new or r.id in done]
    return GridResult(jsonl, csv_path, summary_csv, records, executed=len(new), skipped=len(unique) - len(todo),
                      summary=summarize(records))


__all__ = ["COST_KINDS", "GridResult", "Run", "check_run", "grid_task", "run_grid", "run_one", "times_models"]
