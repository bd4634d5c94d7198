"""A fault test on a real workload: rule generation on a local two-node Ray cluster with workers killed mid-run.

    .venv/bin/python experiments/infra/ray_fault.py [--max-ops 3] [--kill _shard_task,map_chunk]

Starts a local cluster (``ray.cluster_utils.Cluster``: a head and a second raylet, one CPU each, as in the tests),
runs ``generate`` on it and, from a watcher thread, SIGKILLs one worker process while it executes each named task
function (Ray titles a busy worker ``ray::<function>``). Ray reruns the lost tasks (``max_retries``); the run must
finish with the same substitutions as the package's ``generated.json.gz`` (n=3) -- nothing lost, nothing doubled.
Which tasks ran more than once is read from a log every attempt writes (the stage functions are wrapped here to
log their item, process and start/end; Ray's state API needs the dashboard, which the minimal ``ray`` extra lacks).
Writes ``experiments/results/ray_fault.json``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from graphsub.distributed.executors import TIMING_RESOURCE
from graphsub.rules.generate import parallel, prune
from graphsub.rules.generate.enumerate import EnumConfig
from graphsub.rules.generate.pipeline import generate
from graphsub.rules.generate.templates import resolve_ops
from graphsub.rules.library import GENERATED_JSON

RESULTS = Path(__file__).resolve().parents[1] / "results"
LOG = Path(os.environ.get("GRAPHSUB_FAULT_LOG", "/tmp/graphsub_ray_fault.log"))
_SHARD, _MAP = parallel._shard_task, prune.map_chunk


def _log(fn: str, item: Any, event: str) -> None:
    with LOG.open("a") as f:
        f.write(json.dumps({"fn": fn, "item": item, "pid": os.getpid(), "event": event, "t": time.time()}) + "\n")


def shard_task_logged(context: Any, shard: int) -> Any:
    """The enumeration's task, logging each attempt (its title ``ray::shard_task_logged`` is what the watcher
    kills)."""
    _log("shard", shard, "start")
    r = _SHARD(context, shard)
    _log("shard", shard, "end")
    return r


def map_chunk_logged(context: Any, pairs: Any) -> Any:
    """The confirm stage's map task, logging each attempt (keyed by its first candidate pair)."""
    key = list(pairs[0]) if len(pairs) else None
    _log("map", key, "start")
    r = _MAP(context, pairs)
    _log("map", key, "end")
    return r


def attempts() -> dict[str, Any]:
    """Per logged item: its attempts (pid, ended or not); the items that ran more than once."""
    per: dict[str, list[dict[str, Any]]] = {}
    for line in LOG.read_text().splitlines():
        e = json.loads(line)
        k = f"{e['fn']}:{e['item']}"
        runs = per.setdefault(k, [])
        if e["event"] == "start":
            runs.append({"pid": e["pid"], "ended": False})
        else:
            next(r for r in reversed(runs) if r["pid"] == e["pid"])["ended"] = True
    again = {k: v for k, v in per.items() if len(v) > 1}
    return {"items": len(per), "attempts": sum(map(len, per.values())), "retried": again,
            "every_item_finished": all(any(r["ended"] for r in v) for v in per.values())}


def _busy_workers(fn: str) -> list[int]:
    """Pids of the processes titled ``ray::<fn>`` (Linux ``/proc``)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(f"ray::{fn}".encode()):
                out.append(int(d.name))
    return out


def watcher(targets: list[str], killed: list[dict[str, Any]], stop: threading.Event, t0: float) -> None:
    """Kill one busy worker of each target function, the first time one is seen (after it ran for a second)."""
    todo = list(targets)
    seen: dict[int, float] = {}
    while todo and not stop.is_set():
        for fn in list(todo):
            for pid in _busy_workers(fn):
                first = seen.setdefault(pid, time.perf_counter())
                if time.perf_counter() - first >= 1.0:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    killed.append({"function": fn, "pid": pid, "at_s": round(time.perf_counter() - t0, 1)})
                    print(f"killed worker {pid} running {fn} at {killed[-1]['at_s']} s", flush=True)
                    todo.remove(fn)
                    break
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-ops", type=int, default=3)
    ap.add_argument("--kill", default="shard_task_logged,map_chunk_logged")
    args = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "resources": {TIMING_RESOURCE: 1}}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    cfg = EnumConfig(templates=resolve_ops(["taso"]), max_ops=args.max_ops)
    LOG.unlink(missing_ok=True)
    parallel._shard_task, prune.map_chunk = shard_task_logged, map_chunk_logged  # type: ignore[assignment]
    killed: list[dict[str, Any]] = []
    stop = threading.Event()
    t0 = time.perf_counter()
    th = threading.Thread(target=watcher, args=(args.kill.split(","), killed, stop, t0), daemon=True)
    th.start()
    try:
        gen = generate(cfg, num_shards=64, executor="ray", ray_address=cluster.address)
        wall = time.perf_counter() - t0
        stop.set()
        retries = attempts()
    finally:
        ray.shutdown()
        cluster.shutdown()
    text = json.dumps(gen.doc, indent=1) + "\n"
    out: dict[str, Any] = {"max_ops": args.max_ops, "nodes": 2, "wall_s": wall, "killed": killed,
                           "attempts": retries, "counts": gen.counts, "seconds": gen.seconds,
                           "sha256": hashlib.sha256(text.encode()).hexdigest(), "load_avg": os.getloadavg()}
    if args.max_ops == 3:
        with gzip.open(GENERATED_JSON) as f:
            out["same_substitutions_as_package_generated_json"] = json.loads(f.read())["substitutions"] == \
                gen.doc["substitutions"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ray_fault.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "seconds"}, indent=1))


if __name__ == "__main__":
    main()
