"""Running the enumeration in shards: serially, on a process pool, or on Ray; resumable.

The enumeration tree's first level is dealt round-robin to ``num_shards`` shards
(:func:`~.enumerate.enumerate_shard`); each shard's records are stored as a :class:`ShardResult`
(numpy arrays: first-operator index, fingerprint, graph codes) and, with a checkpoint directory,
written to ``shard-KKKKK-of-NNNNN.npz`` as soon as it finishes.  A rerun with the same
configuration loads finished shards instead of recomputing them; a directory written for another
configuration is refused (its ``config.json`` records :meth:`~.enumerate.EnumConfig.key`).

Executors (:mod:`graphsub.distributed.executors`): ``serial`` (in this process), ``process`` (a local process pool,
``workers`` processes), ``ray`` (optional extra; each shard becomes one Ray task, retried when its worker dies, so a
cluster runs the same shards).

:func:`merge` concatenates shard results in global DFS order (stable sort by first-operator
index), so the outcome is identical for any shard count and executor.

>>> from graphsub.rules.generate.enumerate import EnumConfig
>>> cfg = EnumConfig(templates=("add", "relu"), max_ops=2)
>>> a = merge(run_shards(cfg, num_shards=1))
>>> b = merge(run_shards(cfg, num_shards=3))
>>> bool((a.fps == b.fps).all()) and a.codes == b.codes
True
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphsub.distributed.executors import EXECUTORS, check_executor, map_ordered
from graphsub.errors import GraphsubError
from graphsub.rules.generate.enumerate import EnumConfig, enumerate_shard


@dataclass(frozen=True)
class ShardResult:
    """Records of one shard (or of a merge): per graph its first-operator index, fingerprint
    and code; ``seconds`` is the enumeration time (0 when loaded from a checkpoint)."""

    first: np.ndarray  # int32
    fps: np.ndarray  # uint64
    codes: list[bytes]
    seconds: float = 0.0
    loaded: bool = False

    def __len__(self) -> int:
        return len(self.codes)


def _pack(recs: dict[int, list[tuple[int, bytes]]], seconds: float) -> ShardResult:
    first = np.array([i for i, lst in recs.items() for _ in lst], dtype=np.int32)
    fps = np.array([fp for lst in recs.values() for fp, _ in lst], dtype=np.uint64)
    codes = [c for lst in recs.values() for _, c in lst]
    return ShardResult(first, fps, codes, seconds)


def compute_shard(cfg: EnumConfig, shard: int, num_shards: int) -> ShardResult:
    """Enumerate one shard (picklable entry point for worker processes)."""
    t0 = time.perf_counter()
    recs = enumerate_shard(cfg, shard, num_shards)
    return _pack(recs, time.perf_counter() - t0)


def _shard_path(d: Path, shard: int, num_shards: int) -> Path:
    return d / f"shard-{shard:05d}-of-{num_shards:05d}.npz"


def save_shard(d: Path, shard: int, num_shards: int, r: ShardResult) -> None:
    """Write a shard atomically (temp file + rename), so an interrupted run leaves no partial shard."""
    offs = np.cumsum([0, *(len(c) for c in r.codes)]).astype(np.int64)
    blob = np.frombuffer(b"".join(r.codes), dtype=np.uint8)
    path = _shard_path(d, shard, num_shards)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, first=r.first, fps=r.fps, blob=blob, offs=offs, seconds=np.array([r.seconds]))
    os.replace(tmp, path)


def load_shard(d: Path, shard: int, num_shards: int) -> ShardResult | None:
    path = _shard_path(d, shard, num_shards)
    if not path.is_file():
        return None
    try:
        z = np.load(path)
        blob = z["blob"].tobytes()
        offs = z["offs"]
        codes = [blob[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]
        return ShardResult(z["first"], z["fps"], codes, float(z["seconds"][0]), loaded=True)
    except (OSError, KeyError, ValueError) as e:
        raise GraphsubError(f"checkpoint {path} is unreadable ({e}); delete it to recompute the shard") from None


def _prepare_dir(d: Path, cfg: EnumConfig, num_shards: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    meta = d / "config.json"
    want = {"key": cfg.key(), "num_shards": num_shards}
    if meta.is_file():
        try:
            have = json.loads(meta.read_text())
        except json.JSONDecodeError:
            have = None
        if have != want:
            raise GraphsubError(f"checkpoint directory {d} belongs to another configuration ({have}); "
                                "use another directory or delete it")
    else:
        meta.write_text(json.dumps(want, indent=1))


def run_shards(cfg: EnumConfig, *, num_shards: int = 1, executor: str = "serial", workers: int | None = None,
               checkpoint: Path | None = None, on_done: Callable[[int, ShardResult], None] | None = None,
               ray_address: str | None = None) -> list[ShardResult]:
    """All shards' results, in shard order (loading finished ones from ``checkpoint``);
    ``on_done(shard, result)`` is called as each shard completes or is loaded (and saved: a rerun resumes there,
    whatever the executor). ``executor``/``workers``/``ray_address``: see
    :func:`graphsub.distributed.executors.map_ordered`."""
    check_executor(executor)
    if num_shards < 1:
        raise GraphsubError(f"num_shards must be >= 1, got {num_shards}")
    results: dict[int, ShardResult] = {}
    if checkpoint is not None:
        _prepare_dir(checkpoint, cfg, num_shards)
        for s in range(num_shards):
            r = load_shard(checkpoint, s, num_shards)
            if r is not None:
                results[s] = r
                if on_done:
                    on_done(s, r)
    todo = [s for s in range(num_shards) if s not in results]

    def done(s: int, r: ShardResult) -> None:
        if checkpoint is not None:
            save_shard(checkpoint, s, num_shards, r)
        results[s] = r
        if on_done:
            on_done(s, r)

    map_ordered(_shard_task, todo, executor=executor, context=(cfg, num_shards), workers=workers,
                ray_address=ray_address, on_done=lambda k, r: done(todo[k], r))
    return [results[s] for s in range(num_shards)]


def _shard_task(context: tuple[EnumConfig, int], shard: int) -> ShardResult:
    return compute_shard(context[0], shard, context[1])


def merge(results: Sequence[ShardResult]) -> ShardResult:
    """All records in global DFS order (independent of the shard count)."""
    if not results:
        return ShardResult(np.zeros(0, np.int32), np.zeros(0, np.uint64), [])
    first = np.concatenate([r.first for r in results])
    fps = np.concatenate([r.fps for r in results])
    codes = [c for r in results for c in r.codes]
    order = np.argsort(first, kind="stable")
    return ShardResult(first[order], fps[order], [codes[i] for i in order],
                       sum(r.seconds for r in results))


__all__ = ["EXECUTORS", "ShardResult", "compute_shard", "load_shard", "merge", "run_shards", "save_shard"]
