"""Optimize many models: a list or a folder, in this process or as Ray tasks over a cluster.

:func:`optimize_many` runs :func:`graphsub.optimize.optimize` once per model and returns one record per model, in the
order given. A model that fails (a malformed file, an unsupported shape, a budget exceeded, a worker lost) gives a
record with its error, never an exception that loses the others' results.

Timing is never run beside other work: each ``optimize`` call times its candidates in ONNX Runtime at ``threads``
threads, so on Ray every task holds all the CPUs of its node and the node's one unit of the custom resource
:data:`TIMING_RESOURCE` (``ray start --resources '{"graphsub_timing": 1}'``; the local Ray graphsub starts and the
test cluster offer it; :func:`graphsub.distributed.executors.map_ordered` with ``timing``): a node optimizes one
model at a time and runs nothing else meanwhile, the nodes in parallel. Each record says which node ran it
(``node``: host name and Ray node id) and when (``started``/``finished``, wall-clock seconds), so overlaps can be
checked. A task whose worker dies is rerun (:data:`~graphsub.distributed.executors.RAY_RETRIES`). ``serial`` runs
the models one after another here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graphsub.distributed.executors import TIMING_RESOURCE, check_executor, map_ordered, node_name
from graphsub.errors import GraphsubError

#: what ``optimize_many`` passes on to ``optimize`` (the rest of its keywords are refused)
OPTIMIZE_KEYS = frozenset({"algo", "rules", "cost", "time_s", "seed", "seeds", "threads", "keep_slower",
                           "min_speedup", "peers", "eqsat_s", "on_top_s", "ort_search_s", "spelling",
                           "input_shapes"})


def expand_models(specs: Sequence[str]) -> list[str]:
    """Model specs with folders expanded to the ``.onnx`` files in them (sorted); anything else as given."""
    out: list[str] = []
    for s in specs:
        p = Path(s)
        if p.is_dir():
            found = sorted(str(f) for f in p.iterdir() if f.suffix.lower() == ".onnx" and f.is_file())
            if not found:
                raise GraphsubError(f"folder {s} holds no .onnx file")
            out.extend(found)
        else:
            out.append(s)
    return out


def output_path(out_dir: Path, model: str, index: int) -> Path:
    """Where a model's result goes: ``OUT_DIR/<index>-<name>.onnx`` (the index keeps equal names apart)."""
    stem = Path(model.split(":", 1)[-1] if model.startswith("zoo:") else model).stem or "model"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:80]
    return out_dir / f"{index:03d}-{safe}.onnx"


def optimize_one(context: dict[str, Any], job: tuple[int, str]) -> dict[str, Any]:
    """One model (``job``: index, spec) optimized and written to ``context["out_dir"]``; its record. Errors become
    the record's ``error`` (``GraphsubError``'s message, or the exception's type and message for anything else)."""
    from graphsub.optimize import optimize

    index, model = job
    started = time.time()
    rec: dict[str, Any] = {"index": index, "model": model, "node": node_name(), "pid": os.getpid(), "started": started}
    out = output_path(Path(context["out_dir"]), model, index)
    try:
        res = optimize(model, output=out, **context["optimize"])
        d = res.to_dict()
        rec.update(ok=True, error=None, output=str(out) if res.written else None, verified=res.verified,
                   chosen=d.get("chosen"), speedup=d.get("speedup_ort_all"), decision=res.decision,
                   threads=res.threads)
    except GraphsubError as e:
        rec.update(ok=False, error=str(e), error_type=type(e).__name__)
    except Exception as e:  # one model's failure is its record, never the run's
        rec.update(ok=False, error=f"{type(e).__name__}: {e}", error_type=type(e).__name__)
    rec["finished"] = time.time()
    rec["seconds"] = rec["finished"] - started
    return rec


def optimize_many(models: Sequence[str], out_dir: str | os.PathLike[str], *, executor: str = "serial",
                  ray_address: str | None = None, on_done: Callable[[dict[str, Any]], None] | None = None,
                  **optimize_kw: Any) -> list[dict[str, Any]]:
    """Optimize every model of ``models`` (folders expanded, :func:`expand_models`) into ``out_dir``; one record per
    model in the given order (module docstring). ``optimize_kw``: options of :func:`graphsub.optimize.optimize`
    (:data:`OPTIMIZE_KEYS`); ``on_done(record)`` as each model finishes."""
    check_executor(executor)
    if executor == "process":
        raise GraphsubError("optimize_many runs serial or ray: worker processes on one machine would time models "
                            "side by side")
    unknown = sorted(set(optimize_kw) - OPTIMIZE_KEYS)
    if unknown:
        raise GraphsubError(f"optimize_many: unknown option(s) {unknown}")
    specs = expand_models(models)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    context = {"out_dir": str(out), "optimize": optimize_kw}
    jobs = list(enumerate(specs))
    if executor == "serial":
        recs = []
        for job in jobs:
            recs.append(optimize_one(context, job))
            if on_done is not None:
                on_done(recs[-1])
        return recs
    return _on_ray(context, jobs, ray_address, on_done)


def _on_ray(context: dict[str, Any], jobs: list[tuple[int, str]], address: str | None,
            on_done: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
    def lost(i: int, err: BaseException) -> dict[str, Any]:  # a task lost past its retries: that model's record
        index, model = jobs[i]
        return {"index": index, "model": model, "ok": False, "error": f"{type(err).__name__}: {err}",
                "error_type": type(err).__name__, "node": None}

    return map_ordered(optimize_one, jobs, executor="ray", context=context, ray_address=address, timing=True,
                       on_done=None if on_done is None else (lambda i, rec: on_done(rec)), on_error=lost)


__all__ = ["OPTIMIZE_KEYS", "TIMING_RESOURCE", "expand_models", "node_name", "optimize_many", "optimize_one",
           "output_path"]
