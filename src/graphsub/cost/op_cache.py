"""The persistent op-time store of the measured cost models: :class:`OpTimeCache` (SQLite), keyed by
:class:`Context` (what a :class:`Timing` is valid for) and the op's signature digest and constant mask.

WAL journal, a 60 s busy timeout and ``INSERT OR IGNORE`` (first writer wins) make concurrent processes safe; a
cache that cannot be used only costs re-measuring (see :class:`OpTimeCache`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsub.cost.env import default_cache_path

log = logging.getLogger("graphsub")

#: how one op is timed (part of every cache key)
METHOD = "onenode-v1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS op_timings (
    digest TEXT NOT NULL,
    consts TEXT NOT NULL,
    ort_version TEXT NOT NULL,
    threads INTEGER NOT NULL,
    cpu TEXT NOT NULL,
    optimization TEXT NOT NULL,
    method TEXT NOT NULL,
    signature TEXT NOT NULL,
    median_ms REAL NOT NULL,
    iqr_ms REAL NOT NULL,
    min_ms REAL NOT NULL,
    repeats INTEGER NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (digest, consts, ort_version, threads, cpu, optimization, method)
)
"""


@dataclass(frozen=True)
class Timing:
    """Median, interquartile range and minimum of ``repeats`` timed runs, in ms."""

    median_ms: float
    iqr_ms: float
    repeats: int
    min_ms: float = 0.0

    def stat(self, statistic: str) -> float:
        """``median_ms`` or ``min_ms``."""
        return self.min_ms if statistic == "min" else self.median_ms

    @property
    def noise(self) -> float:
        """IQR / median (0 for a zero median)."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0


@dataclass(frozen=True)
class Context:
    """What a timing is valid for; part of every cache key."""

    ort_version: str
    threads: int
    cpu: str
    optimization: str
    method: str = METHOD

    def as_tuple(self) -> tuple[str, int, str, str, str]:
        return (self.ort_version, self.threads, self.cpu, self.optimization, self.method)


def _enable_wal(conn: sqlite3.Connection, tries: int = 200) -> None:
    """Switch ``conn``'s database to write-ahead logging.  Two processes opening a new cache at once can both
    try to switch; SQLite then answers "database is locked" at once, without waiting on the busy timeout, so
    the switch is retried (for up to ~10 s)."""
    for attempt in range(tries):
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or attempt == tries - 1:
                raise
            time.sleep(0.05)


_COLUMNS = ("digest", "consts", "ort_version", "threads", "cpu", "optimization", "method", "signature", "median_ms",
            "iqr_ms", "min_ms", "repeats", "measured_at")


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` holds an SQLite database (its 16-byte header), so that it may be a cache of ours."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


class OpTimeCache:
    """Persistent, process-safe store of op timings (see the module docstring).

    One connection per process (re-opened after a fork); every write is its own transaction.

    A cache that cannot be used never stops the work, it only costs re-measuring: an SQLite database that is
    corrupted or has another schema is moved aside (``<name>.broken-<time>``, kept for inspection) and a new one is
    created; a file that is no SQLite database at all (a wrong ``--cache`` path, a model, ...) is never touched; in
    that case, and when moving is impossible (a read-only file or directory, a full disk) or the database fails
    later, the cache lives in memory for the rest of the process. Either way one warning says so (``fallback``
    holds the reason).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self.fallback = ""  # why the cache runs in memory (empty: on disk)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            if self.fallback:
                conn = self._connect(":memory:")
            else:
                try:
                    conn = self._open_file()
                except (sqlite3.Error, OSError) as e:
                    conn = self._to_memory(f"{type(e).__name__}: {e}")
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    @staticmethod
    def _connect(target: str) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=60.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 60000")
        if target != ":memory:":
            _enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(_SCHEMA)
        cols = tuple(row[1] for row in conn.execute("PRAGMA table_info(op_timings)"))
        if cols != _COLUMNS:
            conn.close()
            raise sqlite3.DatabaseError(f"table op_timings has columns {cols}, expected {_COLUMNS}")
        return conn

    def _open_file(self) -> sqlite3.Connection:
        """The cache file, moved aside and re-created when it is not a usable cache."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect(str(self.path))
        except sqlite3.DatabaseError as e:
            if "locked" in str(e) or "readonly" in str(e) or "unable to open" in str(e) or not _is_sqlite(self.path):
                raise  # -> in memory; a file that is no SQLite database (a model given as --cache?) is never touched
            aside = self.path.with_name(f"{self.path.name}.broken-{int(time.time())}")
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            log.warning("op-time cache %s was unusable (%s); moved it to %s and started a new one", self.path, e,
                        aside)
            return self._connect(str(self.path))

    def _to_memory(self, why: str) -> sqlite3.Connection:
        self.fallback = why
        log.warning("op-time cache %s cannot be used (%s); timings are kept in memory for this run only",
                    self.path, why)
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        return self._connect(":memory:")

    def _run(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        """``sql`` on the cache (the lock held by the caller); a database that fails now falls back to memory."""
        try:
            return self._db().execute(sql, args)
        except sqlite3.Error as e:
            if self.fallback:
                raise
            self._conn, self._pid = self._to_memory(f"{type(e).__name__}: {e}"), os.getpid()
            return self._conn.execute(sql, args)

    def get_many(self, ctx: Context, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Timing]:
        """Timings found for ``(digest, consts)`` keys under ``ctx`` (missing keys are absent)."""
        out: dict[tuple[str, str], Timing] = {}
        keys = list(dict.fromkeys(keys))
        with self._lock:
            for i in range(0, len(keys), 400):
                chunk = keys[i: i + 400]
                where = " OR ".join(["(digest = ? AND consts = ?)"] * len(chunk))
                args: list[Any] = [x for k in chunk for x in k]
                rows = self._run(
                    "SELECT digest, consts, median_ms, iqr_ms, repeats, min_ms FROM op_timings WHERE "
                    f"ort_version = ? AND threads = ? AND cpu = ? AND optimization = ? AND method = ? AND ({where})",
                    [*ctx.as_tuple(), *args]).fetchall()
                for d, c, med, iqr, n, lo in rows:
                    out[(d, c)] = Timing(med, iqr, n, lo)
        return out

    def get(self, ctx: Context, digest: str, consts: str = "") -> Timing | None:
        return self.get_many(ctx, [(digest, consts)]).get((digest, consts))

    def put(self, ctx: Context, digest: str, consts: str, signature: str, timing: Timing) -> bool:
        """Insert unless present (first writer wins); True if this call inserted the row."""
        with self._lock:
            cur = self._run(
                "INSERT OR IGNORE INTO op_timings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (digest, consts, *ctx.as_tuple(), signature, timing.median_ms, timing.iqr_ms, timing.min_ms,
                 timing.repeats, time.time()))
            return cur.rowcount == 1

    def count(self) -> int:
        with self._lock:
            return int(self._run("SELECT COUNT(*) FROM op_timings").fetchone()[0])

    def integrity(self) -> str:
        with self._lock:
            return str(self._run("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None


# ----------------------------------------------------------------------------- timing


__all__ = ["METHOD", "Context", "OpTimeCache", "Timing"]
