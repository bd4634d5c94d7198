"""One ordered parallel map over three executors: ``serial`` (this process), ``process`` (a local process pool) and
``ray`` (tasks on a Ray cluster; optional extra ``pip install -e .[ray]``).

:func:`map_ordered` applies a module-level function ``fn(context, item)`` to every item and returns the results in
item order, whatever the executor, the number of workers and the order in which tasks finish: a stage run through it
gives the same output everywhere. ``context`` is shared read-only data sent once per worker (a process pool's
initializer; one ``ray.put`` object) instead of once per item. ``on_done(index, result)`` is called in the calling
process as each item finishes (progress bars, checkpoints).

Ray: :func:`init_ray` connects to ``address`` (``--ray-address``, else the ``RAY_ADDRESS`` environment variable, else
a local Ray started for this process); tasks are retried when a worker dies (``max_retries``), and an exception in
``fn`` is raised here with its own type and message (Ray's wrapper is removed).

>>> map_ordered(_square, [3, 1, 2], executor="serial", context=10)
[19, 11, 14]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from graphsub.errors import GraphsubError

EXECUTORS = ("serial", "process", "ray")
#: times Ray reruns a task whose worker died (a killed process, a lost node)
RAY_RETRIES = 3
#: the Ray resource that serialises timing on a node: every node offers one unit, every task that times holds one
#: (``ray start ... --resources '{"graphsub_timing": 1}'``; the local Ray graphsub starts offers it)
TIMING_RESOURCE = "graphsub_timing"

T = TypeVar("T")
R = TypeVar("R")

_CONTEXT: Any = None  # a process-pool worker's copy of the context


def _square(context: int, x: int) -> int:  # the doctest's function (module-level: picklable)
    return context + x * x


def _set_context(context: Any) -> None:
    global _CONTEXT
    _CONTEXT = context


def _call(fn: Callable[[Any, Any], Any], item: Any) -> Any:
    return fn(_CONTEXT, item)


def check_executor(executor: str) -> None:
    if executor not in EXECUTORS:
        raise GraphsubError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")


def ray_module() -> Any:
    """The ``ray`` package, or a GraphsubError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise GraphsubError("--executor ray needs the 'ray' package: `pip install -e .[ray]` (make test installs "
                            "it), or use --executor process") from None
    return ray


def init_ray(address: str | None = None, *, resources: dict[str, float] | None = None) -> Any:
    """Connect to the Ray cluster at ``address`` (else ``RAY_ADDRESS``, else a local one started now, offering
    ``resources`` besides its CPUs) unless this process is connected already; returns the ``ray`` module."""
    ray = ray_module()
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        opts: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False, "configure_logging": False}
        try:
            if address:
                ray.init(address=address, **opts)
            else:
                ray.init(resources=resources, **opts)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise GraphsubError(f"cannot connect to the Ray cluster at {address or 'a new local one'}: {e}") from None
    return ray


def node_name() -> str:
    """Where this code runs: ``host/node-id`` inside a Ray worker or driver, else the host name (records say which
    node timed what)."""
    import socket

    try:
        import ray

        if ray.is_initialized():
            return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:12]}"
    except ImportError:
        pass
    return socket.gethostname()


def timing_nodes(ray: Any) -> dict[str, float]:
    """The alive nodes that offer :data:`TIMING_RESOURCE`, each with its CPU count (``node id -> CPUs``)."""
    return {n["NodeID"]: float(n["Resources"].get("CPU", 0.0)) for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get(TIMING_RESOURCE)}


def timing_options(node_id: str, cpus: float) -> dict[str, Any]:
    """Ray options of a task that times models on node ``node_id``: every one of its ``cpus`` CPUs and its one
    timing unit, so that no other task -- graphsub's or anyone's -- runs beside the timing on that machine (soft
    affinity: if the node dies, the retry may run on another node with as many CPUs)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"num_cpus": cpus, "resources": {TIMING_RESOURCE: 1},
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=True)}


def require_timing(ray: Any) -> None:
    """A GraphsubError unless the connected cluster offers :data:`TIMING_RESOURCE` (else tasks would wait forever)."""
    if not ray.cluster_resources().get(TIMING_RESOURCE):
        raise GraphsubError(f"the Ray cluster offers no {TIMING_RESOURCE!r} resource: start each node with "
                            f"`ray start ... --resources '{{\"{TIMING_RESOURCE}\": 1}}'` (one model timed at a time "
                            "per node)")


def ray_error(e: BaseException) -> BaseException:
    """The user's exception inside a Ray task error (the task's own type and message), else ``e``."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


def map_ordered(fn: Callable[[Any, T], R], items: Sequence[T], *, executor: str = "serial", context: Any = None,
                workers: int | None = None, ray_address: str | None = None,
                on_done: Callable[[int, R], None] | None = None,
                timing: bool | Callable[[T], bool] = False,
                on_error: Callable[[int, BaseException], R] | None = None) -> list[R]:
    """``[fn(context, x) for x in items]`` on ``executor`` (module docstring); ``workers``: processes of the
    ``process`` executor (default: every core). ``timing`` (for all items, or per item): the task times models, so
    nothing may run beside it on its machine: refused on ``process``; on Ray each timing task holds every CPU of the
    node it runs on and the node's :data:`TIMING_RESOURCE` (:func:`timing_options`), one at a time per node, while
    the other tasks claim one CPU each. ``on_error(index, exception)`` (Ray only): the result of a task lost past its
    retries or failed in ``fn``, instead of raising."""
    check_executor(executor)
    times = [timing(x) if callable(timing) else timing for x in items]
    if any(times) and executor == "process":
        raise GraphsubError("work that times models runs serial or on Ray: worker processes on one machine would "
                            "time side by side")
    results: dict[int, R] = {}

    def done(i: int, r: R) -> None:
        results[i] = r
        if on_done is not None:
            on_done(i, r)

    if executor == "serial" or not items or (executor == "process" and len(items) == 1):
        for i, x in enumerate(items):
            done(i, fn(context, x))
    elif executor == "process":
        n = max(1, min(workers or os.cpu_count() or 1, len(items)))
        with ProcessPoolExecutor(max_workers=n, initializer=_set_context, initargs=(context,)) as pool:
            futs = {pool.submit(_call, fn, x): i for i, x in enumerate(items)}
            for f in as_completed(futs):
                done(futs[f], f.result())
    else:
        _map_ray(fn, items, times, context, ray_address, done, on_error)
    return [results[i] for i in range(len(items))]


def _map_ray(fn: Callable[[Any, T], R], items: Sequence[T], times: Sequence[bool], context: Any,
             ray_address: str | None, done: Callable[[int, R], None],
             on_error: Callable[[int, BaseException], R] | None = None) -> None:
    """:func:`map_ordered` on Ray: the other tasks are submitted at once; the timing tasks are dispatched to the
    nodes offering :data:`TIMING_RESOURCE`, one per node at a time, each holding all of its node's CPUs."""
    ray = init_ray(ray_address, resources={TIMING_RESOURCE: 1})
    nodes: dict[str, float] = {}
    if any(times):
        require_timing(ray)
        nodes = timing_nodes(ray)
    ctx = ray.put(context)
    task = ray.remote(max_retries=RAY_RETRIES)(fn)
    pending = {task.remote(ctx, x): (i, "") for i, (x, t) in enumerate(zip(items, times, strict=True)) if not t}
    queue = [i for i, t in enumerate(times) if t]
    busy: set[str] = set()
    while pending or queue:
        for node in [n for n in nodes if n not in busy]:
            if not queue:
                break
            i = queue.pop(0)
            pending[task.options(**timing_options(node, nodes[node])).remote(ctx, items[i])] = (i, node)
            busy.add(node)
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            i, node = pending.pop(ref)
            busy.discard(node)
            try:
                r = ray.get(ref)
            except Exception as e:  # fn raised, or the task was lost past its retries
                if on_error is None:
                    raise ray_error(e) from None
                r = on_error(i, ray_error(e))
            done(i, r)


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """``items`` cut into consecutive pieces of at most ``size`` (the unit of work of a parallel stage)."""
    return [items[k:k + size] for k in range(0, len(items), max(1, size))]


__all__ = ["EXECUTORS", "RAY_RETRIES", "TIMING_RESOURCE", "check_executor", "chunks", "init_ray",
           "map_ordered", "node_name", "ray_error", "ray_module", "require_timing"]
