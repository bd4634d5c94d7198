"""Traces of the lazy tracer: the recorded DAG's container, its batch groups, and running it.

:class:`Trace` holds one recording (:func:`graphsub.dynamic.lazy.lazy`): weak references to its nodes in
creation order, the engine that runs it, and -- for op-level batching -- the :class:`Group` of each
(level, key id) made while recording.  :func:`source` says where a node's value is once run (its own value,
or a row of its group's batched value); :func:`executing` marks real torch code run inside a lazy context.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from graphsub.dynamic.lazy import LazyTensor


def enable_gc() -> None:
    """Re-enable the cyclic collector after recording or evaluating with it paused.

    The objects made meanwhile (tens of thousands of nodes, alive until the step ends) are moved
    straight to the oldest generation (``gc.freeze()`` + ``gc.unfreeze()``, two O(1) list merges),
    so they neither trigger a young collection at once nor count towards the next full collection;
    a full collection over torch's large heap would otherwise run every few steps.  Skipped when the
    program froze objects itself (unfreezing would release them).
    """
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
    gc.enable()


EXEC_DEPTH = [0]  # depth of executing() (tracing and evaluation run on one thread)


@contextmanager
def executing() -> Iterator[None]:
    """Run real torch code inside a lazy context (the tracer passes calls through)."""
    EXEC_DEPTH[0] += 1
    try:
        yield
    finally:
        EXEC_DEPTH[0] -= 1


class Group:
    """Nodes of one trace with the same level and key id, in recording order: one batched call.

    Built while recording when the trace's engine asks for it (``engine.group_nodes``); the member in
    row ``r`` is ``members[r]`` (its ``row``).  After a batched run ``value`` holds the batched result
    (rows in member order); a group run member by member leaves ``value`` ``None`` and puts each
    value on its node.  ``members`` is emptied after the run (no reference cycles survive it).
    """

    __slots__ = ("kid", "level", "members", "value")

    def __init__(self, level: int, kid: int):
        self.level = level
        self.kid = kid
        self.members: list[LazyTensor] = []
        self.value: Any = None


class Trace:
    """One lazy DAG: its nodes in creation order (a topological order), the engine that will
    run it (``None``: plain node-by-node evaluation) and bookkeeping for leaves.

    With an engine that groups nodes while recording (``engine.group_nodes``), ``pending`` maps
    ``level * 2**32 + kid`` to the :class:`Group` of the nodes not yet run; the engine takes and
    runs them (:meth:`take_pending`)."""

    def __init__(self, engine: Any = None, examples: int = 1):
        # weak references: nodes hold their trace, and a strong list would make a reference cycle per
        # trace that only the cyclic collector frees; this way a dropped trace is freed at once
        self.refs: list[weakref.ref[LazyTensor]] = []
        self.engine = engine
        self.examples = examples
        self.built = False
        self.grouping: bool = bool(getattr(engine, "group_nodes", False))
        self.pending: dict[int, Group] = {}
        # deferred random numbers: with ``engine.defer_masks`` dropout masks are placeholders, listed here in
        # program order (id -> (order, shape, dtype, p)) and drawn by whoever runs the trace's plan (the
        # main process of a prefetching worker), so the generator is used as an eager run would use it
        # (only for a grouping trace: its plan is what draws them)
        self.masks: dict[int, tuple[int, tuple[int, ...], torch.dtype, float]] | None = \
            {} if self.grouping and getattr(engine, "defer_masks", False) else None
        self.mask_refs: list[torch.Tensor] = []

    @property
    def nodes(self) -> list[LazyTensor]:
        """The live nodes in creation order (a topological order); for a trace that groups while recording,
        the nodes of its pending groups (the outputs of multi-output nodes are not listed)."""
        if self.grouping:
            return sorted((m for g in self.pending.values() for m in g.members), key=lambda n: n.gid)
        return [n for n in (r() for r in self.refs) if n is not None]

    def take_pending(self) -> list[Group]:
        """The groups not yet run, by level (then key id); the trace starts a new set."""
        pending, self.pending = self.pending, {}
        return [pending[k] for k in sorted(pending)]

    def evaluate(self, out: LazyTensor) -> Any:
        """Evaluate ``out`` (and what it needs) node by node; values stay on the nodes."""
        if out.value is not None:
            return out.value
        collect = gc.isenabled()
        gc.disable()  # as while recording (see lazy())
        try:
            return self._evaluate(out)
        finally:
            if collect:
                enable_gc()

    def _evaluate(self, out: LazyTensor) -> Any:
        with executing(), torch._C.DisableTorchFunction():
            src = source(out)
            if src is not None:  # computed inside a batch by an earlier run
                out.value = resolve_row(*src)
                return out.value
            if self.engine is not None:
                return self.engine.run(self, out)
            from graphsub.dynamic.lazy import evaluate_plain  # (lazy imports this module)

            return evaluate_plain(out)

    def backward(self, out: LazyTensor, *args: Any, **kwargs: Any) -> None:
        value = self.evaluate(out)
        with executing(), torch._C.DisableTorchFunction():
            value.backward(*args, **kwargs)


def source(x: LazyTensor) -> tuple[Any, int | None] | None:
    """Where ``x``'s value is: ``(value, None)``, ``(batched value, row)``, or ``None`` if not computed yet."""
    if x.value is not None:
        return x.value, None
    if x.part >= 0:
        src = source(x.inputs[0])
        if src is None:
            return None
        return src[0][x.part], src[1]
    g = x.grp
    if g is not None and g.value is not None:
        return g.value, x.row
    return None


def resolve_row(t: Any, r: int | None) -> Any:
    """Row ``r`` (kept as a leading dimension of 1) of a batched value ``t``; ``None``: ``t`` itself."""
    if r is None:
        return t
    if type(t) is tuple or type(t) is list:
        return tuple(x[r:r + 1] for x in t)
    if r == 0 and t.shape[0] == 1:
        return t
    return t[r:r + 1]



__all__ = ["EXEC_DEPTH", "Group", "Trace", "enable_gc", "executing", "resolve_row", "source"]
