"""The recorded DAG of the lazy tracer: its nodes, the trace that holds them, their batch groups, and
where a node's value is once it has run.

This module is the data the tracer (:mod:`graphsub.dynamic.lazy`) writes and the engines
(:mod:`graphsub.dynamic.engine`, :mod:`graphsub.dynamic.plan`) read; it records nothing itself.

* :class:`DagNode` -- one recorded call ``func(*fill(template, inputs))``: the op's shared
  :class:`~graphsub.dynamic.calls.OpInfo`, its inputs (nodes and real tensors), its level and key id, and
  its value once run.  Every node is an instance of :class:`graphsub.dynamic.lazy.LazyTensor`, the
  subclass whose tensor-like surface records the calls made on it; the code here needs only the data.
* :class:`Trace` -- one recording: weak references to its nodes in creation order, the engine that runs it,
  and, for op-level batching, the :class:`Group` of each (level, key id) made while recording.
* :func:`source` / :func:`resolve_row` -- where a node's value is: its own ``value``, or a row of its
  group's batched value; :func:`evaluate_plain` -- node-by-node evaluation, the default engine.
* :func:`executing` marks real torch code run inside a lazy context (evaluation, shape inference): the
  tracer passes such calls through.

Invariants: a node is made after its inputs, so creation order (``gid``) is a topological order; a node's
``level`` is one more than its lazy inputs' (an output of a multi-output node, ``part >= 0``, has its
source's level); a value, once set, is never recomputed.  Imports go one way: ``lazy`` imports this
module, which imports only :mod:`graphsub.dynamic.calls`.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from graphsub.dynamic.calls import DATA_KIDS, OpInfo, fill, op_name


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


class _ThreadState(threading.local):
    """The tracer's state, one per thread (torch's function-mode stack is per thread too): what one thread records
    or executes does not change what torch calls do in another (e.g. a module called by another thread while a
    capturing ``lazy()`` context is open runs eagerly).  ``exec_depth`` -- depth of :func:`executing`;
    ``current`` -- the traces of the open ``lazy()`` contexts (and probes), innermost last; ``probing`` -- depth
    of module probes (:mod:`graphsub.dynamic.capture`).

    (Recording the next batch on a second thread while autograd runs the backward pass does not pay: measured
    here, a backward of 200 small matmul nodes goes from 40 ms to 2 s while another Python thread runs, because
    autograd takes the GIL at every node.)"""

    def __init__(self) -> None:
        self.exec_depth = 0
        self.current: list[Trace] = []
        self.probing = 0
        self.capturing: Trace | None = None  # the three above read at once (refresh): the hot path reads only it

    def refresh(self) -> None:
        """Recompute :attr:`capturing` -- the innermost trace when it captures module calls and nothing executes or
        probes, else ``None`` -- after any change of ``exec_depth``, ``current`` or ``probing``."""
        cur = self.current
        self.capturing = cur[-1] if cur and not self.exec_depth and not self.probing and cur[-1].capture else None


STATE = _ThreadState()


@contextmanager
def executing() -> Iterator[None]:
    """Run real torch code inside a lazy context (the tracer passes calls through)."""
    state = STATE
    state.exec_depth += 1
    state.capturing = None
    try:
        yield
    finally:
        state.exec_depth -= 1
        state.refresh()


_NAMES: dict[Any, str] = {}


class DagNode:
    """A node of the lazy DAG: ``func(*fill(template, inputs))`` (see the module docstring).

    ``inputs`` holds lazy nodes and real tensors (leaves); ``shape`` / ``dtype`` describe the
    value (``shape`` is ``None`` and ``meta`` a tuple for a multi-output node); ``value`` is
    filled by evaluation.  ``kid`` is the node's op-level key id (op, constants, input shapes and
    parameter identities), ``level`` one more than its lazy inputs' (an output of a multi-output node,
    ``part >= 0``, has its source's level: it needs no call), ``tok`` a token of its shape and dtype
    (part of its consumers' keys); ``grp`` / ``row``: its batch group and row when the trace groups
    nodes while recording (:class:`Group`).  Nodes are made by the tracer, not by a constructor.
    """

    __slots__ = ("__weakref__", "at", "func", "gid", "grp", "info", "inputs", "kid", "level", "own", "part", "row",
                 "tok", "trace", "value")
    at: int  # scratch of the plan cache: the node's recorded (group, row), set on a miss (plancache.PlanCache.plan)
    func: Callable[..., Any]
    gid: int
    grp: Group | None
    info: OpInfo
    inputs: tuple[Any, ...]
    kid: int
    level: int
    own: Any  # scratch of plan building: (consumer step, column, position) of the node's first batched reader
    part: int
    row: int
    tok: Any
    trace: Trace
    value: Any

    # what every node of one op key shares lives in its OpInfo (the call's constants and template, the
    # output's meta value, shape and dtype)
    @property
    def ckey(self) -> tuple[Any, ...]:
        """The call's constants (hashable): part of the node's signature."""
        return self.info.ckey

    @property
    def template(self) -> Any:
        return self.info.template

    @property
    def meta(self) -> Any:
        info = self.info
        return info.meta if not info.items else tuple(info.meta)

    @property
    def shape(self) -> torch.Size | None:
        return self.info.shape

    @property
    def dtype(self) -> torch.dtype | None:
        return self.info.dtype

    @property
    def name(self) -> str:
        """Readable op name (``torch.tanh``, ``Tensor.__mul__``, ``getitem``...)."""
        name = _NAMES.get(self.func)
        return name if name is not None else _NAMES.setdefault(self.func, op_name(self.func))

    def __repr__(self) -> str:
        shape = None if self.shape is None else tuple(self.shape)
        return f"{type(self).__name__}(#{self.gid} {self.name}, shape={shape})"


class Group:
    """Nodes of one trace with the same level and key id, in recording order: one batched call.

    Built while recording when the trace's engine asks for it (``engine.group_nodes``); the member in
    row ``r`` is ``members[r]`` (its ``row``).  After a batched run ``value`` holds the batched result
    (rows in member order); a group run member by member leaves ``value`` ``None`` and puts each
    value on its node.  ``members`` is emptied after the run (no reference cycles survive it).
    """

    __slots__ = ("kid", "level", "members", "pos", "value")

    def __init__(self, level: int, kid: int):
        self.level = level
        self.kid = kid
        self.members: list[DagNode] = []
        self.value: Any = None
        self.pos = -1  # scratch: the group's step while a plan or its cache key is built (plan.numbered), else -1


class Trace:
    """One lazy DAG: its nodes in creation order (a topological order), the engine that will
    run it (``None``: plain node-by-node evaluation) and bookkeeping for leaves.

    With an engine that groups nodes while recording (``engine.group_nodes``), ``pending`` maps
    ``level * 2**32 + kid`` to the :class:`Group` of the nodes not yet run; the engine takes and
    runs them (:meth:`take_pending`)."""

    def __init__(self, engine: Any = None, examples: int = 1):
        # weak references: nodes hold their trace, and a strong list would make a reference cycle per
        # trace that only the cyclic collector frees; this way a dropped trace is freed at once
        self.refs: list[weakref.ref[DagNode]] = []
        self.engine = engine
        self.examples = examples
        self.built = False
        self.grouping: bool = bool(getattr(engine, "group_nodes", False))
        # module-level capture: calls of nn.Modules and @cell functions recorded as one node each
        self.capture: bool = bool(getattr(engine, "capture_modules", False))
        self.pending: dict[int, Group] = {}
        # deferred random numbers: with ``engine.defer_masks`` dropout masks are placeholders, listed here in
        # program order (id -> (order, shape, dtype, p)) and drawn by whoever runs the trace's plan (the
        # main process of a prefetching worker), so the generator is used as an eager run would use it
        # (only for a grouping trace: its plan is what draws them)
        self.masks: dict[int, tuple[int, tuple[int, ...], torch.dtype, float]] | None = \
            {} if self.grouping and getattr(engine, "defer_masks", False) else None
        self.mask_refs: list[torch.Tensor] = []
        # whether the lazy function mode recorded a call that no lazy value took part in (a parameter and data
        # only): what a capturing trace would run eagerly without the mode (graphsub.dynamic.lazy.ModeNeed)
        self.mode_needed = False

    @property
    def nodes(self) -> list[DagNode]:
        """The live nodes in creation order (a topological order); for a trace that groups while recording,
        the nodes of its pending groups (the outputs of multi-output nodes are not listed)."""
        if self.grouping:
            return sorted((m for g in self.pending.values() for m in g.members), key=lambda n: n.gid)
        return [n for n in (r() for r in self.refs) if n is not None]

    def take_pending(self) -> list[Group]:
        """The groups not yet run, by level (then key id); the trace starts a new set."""
        pending, self.pending = self.pending, {}
        return [pending[k] for k in sorted(pending)]

    def evaluate(self, out: DagNode) -> Any:
        """Evaluate ``out`` (and what it needs) node by node; values stay on the nodes."""
        if out.value is not None:
            return out.value
        collect = gc.isenabled()
        gc.disable()  # as while recording (see graphsub.dynamic.lazy.lazy)
        try:
            with executing(), torch._C.DisableTorchFunction():
                src = source(out)
                if src is not None:  # computed inside a batch by an earlier run
                    out.value = resolve_row(*src)
                    return out.value
                if out.kid in DATA_KIDS:  # deferred data (graphsub.dynamic.record.data_node): made now, alone
                    out.value = run_node(out)
                    return out.value
                if self.engine is not None:
                    return self.engine.run(self, out)
                return evaluate_plain(out)
        finally:
            if collect:
                enable_gc()

    def backward(self, out: DagNode, *args: Any, **kwargs: Any) -> None:
        value = self.evaluate(out)
        with executing(), torch._C.DisableTorchFunction():
            value.backward(*args, **kwargs)


def source(x: DagNode) -> tuple[Any, int | None] | None:
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


def evaluate_plain(out: DagNode) -> Any:
    """Node-by-node evaluation in topological order (iterative post-order DFS)."""
    stack: list[tuple[DagNode, bool]] = [(out, False)]
    while stack:
        node, ready = stack.pop()
        if node.value is not None:
            continue
        if ready:
            node.value = run_node(node)
            continue
        stack.append((node, True))
        for i in node.inputs:
            if isinstance(i, DagNode) and i.value is None:
                stack.append((i, False))
    return out.value


def run_node(node: DagNode) -> Any:
    """Call ``node``'s op on its inputs' values (its lazy inputs must have values)."""
    vals = [i.value if isinstance(i, DagNode) else i for i in node.inputs]
    args, kwargs = fill(node.template, vals)
    return node.func(*args, **kwargs)


def is_param(x: Any) -> bool:
    """A leaf that is read by reference (a parameter or any tensor requiring grad)."""
    return isinstance(x, torch.Tensor) and x.requires_grad


__all__ = [
    "STATE",
    "DagNode",
    "Group",
    "Trace",
    "enable_gc",
    "evaluate_plain",
    "executing",
    "is_param",
    "resolve_row",
    "run_node",
    "source",
]
