"""Records of benchmark runs: the resumable JSONL log, its CSV, and what each record says about where it ran.

A grid's results file holds one JSON object per finished run (``id``, the run's spec, ``status``,
results, ``machine``, ``versions``, ``load_avg_1m``); a run recorded twice counts once (the last record
wins), so a grid can be stopped and resumed.  Read by the harness (what is done) and by the tables
(:mod:`graphsub.bench.tables`); imports neither.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import functools
import importlib.metadata
import json
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Record columns written to the CSV (scalars only; trace, sequence and stats stay in the JSONL).
CSV_COLUMNS = (
    "id", "status", "algo", "model", "cost", "rules", "k", "cutoff_s", "expansions", "memory_mb", "repeat", "seed",
    "params", "initial_cost", "best_cost", "improvement", "search_time_s", "setup_time_s", "wall_time_s",
    "peak_mem_mb", "search_mem_mb", "explored", "generated", "deduplicated", "pruned", "matches", "stopped_by",
    "seq_len", "num_ops", "best_num_ops", "time_match_s", "time_apply_s", "time_hash_s", "time_cost_s",
    "time_other_s", "error", "finished_at",
)


def load_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of a results ``.jsonl`` (the last one per id; unreadable lines skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    by_id: dict[str, dict[str, Any]] = {}
    with p.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "id" in rec:
                by_id.pop(rec["id"], None)
                by_id[rec["id"]] = rec
    return list(by_id.values())


def _csv_row(rec: Mapping[str, Any]) -> dict[str, Any]:
    stats = rec.get("stats") or {}
    row = {c: rec.get(c, stats.get(c)) for c in CSV_COLUMNS}
    row["params"] = json.dumps(rec.get("params") or {}, sort_keys=True)
    return row


def write_csv(records: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """One row per record with the scalar columns of :data:`CSV_COLUMNS`."""
    p = Path(path)
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(CSV_COLUMNS))
        w.writeheader()
        for rec in records:
            w.writerow(_csv_row(rec))
    return p


def append_record(path: str | os.PathLike[str], rec: Mapping[str, Any]) -> None:
    """Append one record to a results ``.jsonl`` and flush it to disk (a killed grid loses no run)."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(rec, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------- where a run ran


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str | None]:
    """graphsub, onnxruntime, numpy, networkx and Python versions, and the git commit if known."""
    from graphsub import __version__

    commit = None
    with contextlib.suppress(Exception):
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                                capture_output=True, text=True, timeout=5).stdout.strip() or None
    from graphsub.frontends.ort import runtime_version

    return {"graphsub": __version__, "onnxruntime": runtime_version(), "numpy": _version("numpy"),
            "networkx": _version("networkx"), "python": platform.python_version(), "git_commit": commit}


@functools.lru_cache(maxsize=1)
def machine_info() -> dict[str, Any]:
    """CPU model, logical cores, total memory, OS and host name."""
    from graphsub.cost.env import cpu_model

    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem = proc_status_mb("/proc/meminfo", "MemTotal")
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_mb": mem, "platform": platform.platform(),
            "host": platform.node()}


def proc_status_mb(path: str, key: str) -> float | None:
    """A ``kB`` field of a /proc status-style file, in MB (None where unavailable)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def load_avg() -> float | None:
    """The machine's 1-minute load average when the run starts (timings taken under load say so)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def timestamp() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


__all__ = ["CSV_COLUMNS", "append_record", "load_avg", "load_records", "machine_info", "proc_status_mb", "timestamp",
           "versions", "write_csv"]
