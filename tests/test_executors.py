"""graphsub.distributed.executors: the same ordered results on every executor, on a real two-node Ray cluster
started here (``ray.cluster_utils.Cluster``: a head node and a second node, each its own raylet), with a worker
killed mid-task and retried; and the rule generator writing the same file on Ray as serially (through the command
line: tests/cli/test_cli_rules.py)."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from graphsub.distributed.executors import chunks, map_ordered
from graphsub.errors import GraphsubError
from graphsub.rules.generate.enumerate import EnumConfig
from graphsub.rules.generate.pipeline import generate


def _affine(context: int, x: int) -> int:
    return context * x + 1


def _fail_on_three(context: None, x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def _die_once(marker_dir: str, x: int) -> tuple[int, int]:
    """Kill this worker process the first time item 2 runs (a lost worker); return (x * 10, pid) otherwise."""
    marker = Path(marker_dir) / f"killed-{x}"
    if x == 2 and not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return x * 10, os.getpid()


def _timed(marker_dir: str, x: int) -> tuple[str, float, float]:
    """A stand-in for timing a model: says it started (a marker file), holds its node for 2 s; (node, start, end)."""
    import ray

    start = time.time()
    (Path(marker_dir) / f"started-{x}").write_text("")
    time.sleep(2.0)
    return ray.get_runtime_context().get_node_id(), start, time.time()


def _cpu_work() -> tuple[str, float]:
    import ray

    return ray.get_runtime_context().get_node_id(), time.time()


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_local_executors_keep_item_order(executor: str) -> None:
    seen: list[int] = []
    got = map_ordered(_affine, list(range(9)), executor=executor, context=3, workers=2,
                      on_done=lambda i, r: seen.append(i))
    assert got == [3 * x + 1 for x in range(9)] and sorted(seen) == list(range(9))


def test_errors_keep_their_type_and_unknown_executors_are_refused() -> None:
    with pytest.raises(ValueError, match="three"):
        map_ordered(_fail_on_three, [1, 2, 3], executor="process", workers=2)
    with pytest.raises(GraphsubError, match="unknown executor"):
        map_ordered(_affine, [1], executor="mpi")
    assert [list(c) for c in chunks([1, 2, 3, 4, 5], 2)] == [[1, 2], [3, 4], [5]]


def test_ray_cluster_has_two_nodes_and_keeps_item_order(ray_cluster: str) -> None:
    import ray

    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    assert map_ordered(_affine, list(range(12)), executor="ray", context=5, ray_address=ray_cluster) == [
        5 * x + 1 for x in range(12)]
    with pytest.raises(ValueError, match="three"):  # the task's own exception, not Ray's wrapper
        map_ordered(_fail_on_three, [1, 2, 3], executor="ray", ray_address=ray_cluster)


def test_ray_retries_a_killed_worker_and_loses_nothing(ray_cluster: str, tmp_path: Path) -> None:
    got = map_ordered(_die_once, list(range(6)), executor="ray", context=str(tmp_path), ray_address=ray_cluster)
    assert [v for v, _ in got] == [0, 10, 20, 30, 40, 50]
    killed = int((tmp_path / "killed-2").read_text())
    assert got[2][1] != killed  # item 2 ran again, in another worker process


def test_rule_generation_on_ray_writes_the_same_file(ray_cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphsub.rules.generate import pipeline, prune

    cfg = EnumConfig(templates=("matmul", "transpose", "add"), max_ops=2)
    serial = json.dumps(generate(cfg, num_shards=1).doc)
    monkeypatch.setattr(prune, "CONFIRM_CHUNK", 50)  # several tasks per stage
    monkeypatch.setattr(pipeline, "VERIFY_CHUNK", 8)
    assert json.dumps(generate(cfg, num_shards=4, executor="ray", ray_address=ray_cluster).doc) == serial


def test_timing_on_ray_holds_every_cpu_of_its_node(ray_cluster: str, tmp_path: Path) -> None:
    """Two models timed on the two-node cluster (one CPU each), and a CPU task submitted while they are timed: it
    cannot start beside a timing task on either node, only once one of them is done."""
    import ray

    with ThreadPoolExecutor(1) as pool:
        timing = pool.submit(map_ordered, _timed, [0, 1], executor="ray", context=str(tmp_path),
                             ray_address=ray_cluster, timing=True)
        while len(list(tmp_path.glob("started-*"))) < 2:  # both models are being timed
            time.sleep(0.05)
        node, started = ray.get(ray.remote(num_cpus=1)(_cpu_work).remote())
        spans = timing.result()
    assert {n for n, _, _ in spans} == set(ray_cluster_nodes())  # one timing task on each node
    same_node = [(s, e) for n, s, e in spans if n == node]
    assert same_node and all(started >= e for s, e in same_node)  # never beside a timing task


def ray_cluster_nodes() -> list[str]:
    import ray

    return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
