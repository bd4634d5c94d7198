"""Tracing ahead in a worker process: the next batches are recorded and planned while this one runs.

Recording a define-by-run model costs as much Python as running it eagerly (every op goes through the
tracer), but a trace does not depend on the parameters' values, only on the input's structure.  So, like
a ``DataLoader`` worker preparing data, a forked worker process records batch ``i + 1, i + 2, ...`` with
the lazy tracer, groups it for signature-keyed batching and turns it into a
:class:`~graphsub.dynamic.plan.Plan` (tensors, ints and op definitions only), while the main process runs
the plan of batch ``i`` (forward, backward, optimizer step) with the current parameters, which are read
by reference at execution.  On a machine with two cores this takes the tracer off the critical path.

>>> # for batch, loss in prefetch(model, batches, lambda b: batch_loss(model, b)):
>>> #     opt.zero_grad(); loss.backward(); opt.step()

What the worker sees is the model as it was when :func:`prefetch` started (the fork): its parameters are
identified by their position in ``model.parameters()`` and read in the main process, but any other Python
state (``model.train()`` / ``eval()``, attributes) is the fork-time snapshot; start a new prefetch after
changing it.  So is ``batches`` when it is a sequence (a list): the workers read batch ``i`` from their copy and
only its position is sent; batches of any other iterable are sent (pickled) one by one.  Random numbers drawn
while recording (dropout masks) come from the worker's generator, forked from the main one: with one worker and
no other use of torch's generator in the main process the masks are those an eager run would draw, batch after
batch (``fn`` may also seed it per batch).  Errors raised while recording are raised again in the main process
with the worker's traceback.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from graphsub.dynamic.calls import OpInfo
from graphsub.dynamic.dag import Trace
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyError, LazyTensor, lazy, new_node
from graphsub.dynamic.plan import BatchState, OpDef, Plan, build_plan, run_plan
from graphsub.dynamic.plancache import PlanCache
from graphsub.dynamic.schedule import relevel
from graphsub.dynamic.wire import from_wire, to_wire


class PrefetchError(LazyError):
    """The worker process failed to record or plan a batch."""


class PlanEngine:
    """Runs the plan received for one trace (the engine of the main-process :class:`Trace` of a prefetched
    output); ``last_*`` give the timings of the last run."""

    def __init__(self, ops: dict[int, OpDef], state: BatchState):
        self.ops = ops
        self.state = state
        self.calls = 0

    def run(self, trace: Trace, out: LazyTensor) -> Any:
        plan: Plan = trace.plan  # type: ignore[attr-defined]
        value, self.calls, _ = run_plan(plan, self.ops, self.state)
        out.value = value
        trace.plan = None  # type: ignore[attr-defined]
        return value


def _planned_output(plan: Plan, engine: PlanEngine) -> LazyTensor:
    """A lazy value standing for the output of ``plan``: ``build``/``backward`` on it run the plan (its trace's
    ``stats``: the worker's recording and planning times and node count)."""
    trace = Trace(engine)
    trace.plan = plan  # type: ignore[attr-defined]
    return new_node(_planned_output, OpInfo.blank(), (), trace, 0)


def _worker(fn: Callable[[Any], Any], params: dict[int, int], modules: dict[int, str], capture: bool, cache_size: int,
            jobs: Any, results: Any, nice: int, known: Sequence[Any] | None = None) -> None:
    torch.set_num_threads(1)
    if nice:
        os.nice(nice)  # the main process runs the current step: it goes first when they share a core
    sent: set[int] = set()
    engine = Reuse(depth=1, collect=0, batching=True, defer_masks=True, capture_modules=capture)
    cache = PlanCache(cache_size) if cache_size > 0 else None
    while True:
        job = jobs.get()
        if job is None:
            return
        i, batch = job
        try:
            if known is not None:  # a sequence's batch: read from the fork's copy, by position
                batch = known[i]
            t0 = time.perf_counter()
            with lazy(engine) as tr:
                out = fn(batch)
            t1 = time.perf_counter()
            if type(out) is not LazyTensor:
                raise PrefetchError(f"prefetch: fn returned {type(out).__name__}, not a lazy value")
            groups = tr.take_pending()
            nodes = sum(len(g.members) for g in groups)
            if cache is not None:
                plan, groups = cache.plan(groups, out, tr.masks, layout=capture, regroup=relevel if capture else None)
            else:
                if capture and groups:
                    groups = relevel(groups)
                plan = build_plan(groups, out, tr.masks, layout=capture)
            stats: dict[str, Any] = {"record_s": t1 - t0, "plan_s": time.perf_counter() - t1, "nodes": nodes,
                                     "plan_cache": cache.report() if cache is not None else None}
            results.put((i, (to_wire(plan, params, sent, modules), stats), None))
        except BaseException as e:  # sent back, raised in the main process
            results.put((i, None, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def prefetch(model: nn.Module, batches: Iterable[Any], fn: Callable[[Any], Any], workers: int = 2, ahead: int = 2,
             timeout: float = 300.0, nice: int = 5, capture_modules: bool = False,
             plan_cache: int = 0) -> Iterator[tuple[Any, LazyTensor]]:
    """Yield ``(batch, loss)`` for each batch, ``loss`` a lazy value of ``fn(batch)`` recorded ahead of time by
    ``workers`` worker processes (module docstring); ``loss.backward()`` / ``build(loss)`` run its batched plan
    here, drawing its dropout masks here in program order.  ``workers=0`` records each batch in this process
    when it is due (the same loop on a machine with no core to spare).

    ``ahead``: how many batches each worker may be ahead; ``timeout``: seconds to wait for one batch's plan;
    ``nice``: the workers' scheduling niceness increment (0: none), so that with more processes than cores the
    main process, which runs the step everything waits for, is served first; ``capture_modules``: record module
    calls as one node each (:mod:`graphsub.dynamic.capture`; the plan names them by their path in ``model``);
    ``plan_cache``: plans each worker keeps by structure (:mod:`graphsub.dynamic.plancache`; 0: none).
    """
    if workers < 0 or ahead < 1:
        raise ValueError("prefetch: workers must be >= 0 and ahead >= 1")
    if workers == 0:  # no worker: record each batch here, just before it runs (same loop, one core)
        engine = Reuse(depth=1, collect=0, batching=True, defer_masks=True,  # masks drawn when run, as below
                       capture_modules=capture_modules, plan_cache=plan_cache)
        for b in batches:
            with lazy(engine):
                out = fn(b)
            if type(out) is not LazyTensor:
                raise PrefetchError(f"prefetch: fn returned {type(out).__name__}, not a lazy value")
            yield b, out
        return
    plist = list(model.parameters())
    ids = {id(p): k for k, p in enumerate(plist)}
    named = dict(model.named_modules())
    mod_ids = {id(m): name for name, m in named.items()}
    ctx = mp.get_context("fork")
    results: Any = ctx.Queue()
    jobs: list[Any] = [ctx.Queue() for _ in range(workers)]
    # a list (any sequence) of batches is in the workers already (the fork's copy): only positions are sent, which
    # keeps the pickling of each batch (~1 ms for 20 SST trees, holding the GIL) out of this process
    known = batches if isinstance(batches, Sequence) else None
    procs = [ctx.Process(target=_worker, args=(fn, ids, mod_ids, capture_modules, plan_cache, q, results, nice, known),
                         daemon=True) for q in jobs]
    for pr in procs:
        pr.start()
    # one op table and batching state per worker: key ids made after the fork differ between workers
    engines = [PlanEngine({}, BatchState()) for _ in range(workers)]
    it = iter(batches)
    pending: dict[int, Any] = {}
    ready: dict[int, Any] = {}
    sent = 0
    try:
        for _ in range(ahead * workers):
            b = next(it, _END)
            if b is _END:
                break
            pending[sent] = b
            jobs[sent % workers].put((sent, None if known is not None else b))
            sent += 1
        nxt = 0
        while nxt < sent:
            while nxt not in ready:
                i, wire, err = _receive(results, procs, timeout)
                if err is not None:
                    raise PrefetchError(f"prefetch: recording batch {i} failed in a worker:\n{err}")
                ready[i] = wire
            b = next(it, _END)
            if b is not _END:
                pending[sent] = b
                jobs[sent % workers].put((sent, None if known is not None else b))
                sent += 1
            eng = engines[nxt % workers]
            wire, stats = ready.pop(nxt)
            out = _planned_output(from_wire(wire, plist, eng.ops, named), eng)
            out.trace.stats = stats  # type: ignore[attr-defined]
            yield pending.pop(nxt), out
            nxt += 1
    finally:
        for q in jobs:
            q.put(None)
        for pr in procs:
            pr.join(timeout=5)
            if pr.is_alive():
                pr.terminate()


_END = object()


def _receive(results: Any, procs: list[Any], timeout: float) -> Any:
    """The next message of the workers; a dead worker or ``timeout`` seconds of silence is an error."""
    waited = 0.0
    while True:
        try:
            return results.get(timeout=0.5)
        except queue.Empty:
            waited += 0.5
        dead = [p for p in procs if not p.is_alive()]
        if dead:
            raise PrefetchError(f"prefetch: a worker process died (exit code {dead[0].exitcode})")
        if waited >= timeout:
            raise PrefetchError(f"prefetch: no plan from the workers in {timeout:.0f} s")

__all__ = ["PlanEngine", "PrefetchError", "prefetch"]
