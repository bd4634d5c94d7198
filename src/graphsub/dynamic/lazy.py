"""Lazy tracing of define-by-run PyTorch code (the thesis' §4.3, §5.1-5.2, in PyTorch).

Inside ``with lazy():`` ordinary torch code records a DAG instead of computing: every torch
function, ``Tensor`` method or operator that touches a :class:`LazyTensor` or a tensor that
requires grad (a parameter) returns a new :class:`LazyTensor` node.  The capture uses torch's
own override machinery, not monkey patching: a :class:`~torch.overrides.TorchFunctionMode`
sees every call inside the context (``nn.Module`` layers included, since they end in
``torch.nn.functional`` calls), and :class:`LazyTensor` itself implements
``__torch_function__`` so that lazy values keep working after the context is closed.  Calls on
plain data only (``torch.tensor([3])``, ``torch.zeros(...)``) run eagerly: their results are
the DAG's *inputs*.  (One exception: in a trace that batches module calls, ``torch.tensor`` of a flat
list of ints -- a tree's word ids -- gives a lazy *data node*, stacked by the plan: :func:`data_node`.)

Tracked objects (§5.1):

* **lazy nodes**: one per recorded call, with a global id ``gid``;
* **parameters**: tensors that require grad, leaves keyed by identity (the optimizer updates
  them in place, so they are read by reference at execution);
* **data inputs and constants**: other real tensors (leaf constant ``C`` in signatures);
* **Python scalars and other arguments** are kept in the call template and are part of a
  node's signature (``x * 0.5`` and ``x * 2`` differ).

Shapes come from running each op once on ``meta`` tensors, memoized per
``(op, input shapes and dtypes, parameter identities, constant arguments)``, so a trace of a batch of
trees costs a dictionary lookup per op after the first few.  The memo also gives every node a small
integer key id (``kid``, the op-level batching key, with a flag saying whether the op keeps one row per
instance) and the tracer records each node's level (one more than its inputs'), so the batching engine
needs no per-node analysis.  The cyclic garbage collector is paused while recording and evaluating: its
passes over torch's large heap would otherwise cost more than the recording.  Multi-output ops (``split``, ``chunk``,
``unbind``, ...) give one node whose value is a tuple plus one ``getitem`` node per output (the
thesis' ``access(x, i)``).

Dropout in training mode is recorded as ``x * mask`` with the mask drawn at trace time, in
program order: PyTorch's CPU dropout is exactly ``x * bernoulli(1 - p) / (1 - p)``, so a lazy run
consumes the RNG as eager code does and gives bit-identical masks, however the DAG is later
executed (batched or not).

``build(out)`` (or ``out.item()``, ``out.backward()``, ``float(out)``...) evaluates the DAG: by
the reuse engine of the trace if one was given (:mod:`graphsub.dynamic.engine`), otherwise node
by node.

This module is the tracer's entry: the ``lazy()`` context and the function mode that routes each torch call; the
:class:`LazyTensor` stand-in and the recording of one call (shape inference, dropout, data nodes) are
:mod:`graphsub.dynamic.record` (re-exported here).  What is recorded -- nodes' data, traces, batch groups, where a
value is, plain evaluation -- is :mod:`graphsub.dynamic.dag`; call templates and the op memo are
:mod:`graphsub.dynamic.calls`.  Imports go one way: ``lazy -> record -> dag -> calls``.

>>> import torch
>>> w = torch.nn.Parameter(torch.ones(3, 2))
>>> with lazy() as tr:
...     x = torch.tensor([[1.0, 2.0, 3.0]])
...     y = torch.tanh(x @ w) * 2 + 1
>>> type(y).__name__, tuple(y.shape), len(tr.nodes)
('LazyTensor', (1, 2), 4)
>>> torch.allclose(build(y), torch.tanh(x @ w) * 2 + 1)
True
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from torch.overrides import TorchFunctionMode

from graphsub.dynamic.dag import STATE, Trace, enable_gc
from graphsub.dynamic.record import (
    NO_KWARGS,
    NODE_IDS,
    PASS,
    RANDOM,
    TENSOR_CTOR,
    LazyError,
    LazyTensor,
    ProbeRefusal,
    build,
    data_node,
    needs_record,
    new_items,
    new_node,
    record,
    record_as_node,
    refuse_random,
    tensor_ctor,
)


class _LazyMode(TorchFunctionMode):
    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # the mode is popped while its handler runs, so no DisableTorchFunction is needed here
        if kwargs is None:
            kwargs = NO_KWARGS
        if func is TENSOR_CTOR and not STATE.exec_depth:
            node = data_node(args, kwargs)
            if node is not None:
                return node
        if func in PASS or STATE.exec_depth:  # constructors and getters first: a tree's word ids are made here
            return func(*args, **kwargs)
        if STATE.probing and func in RANDOM:
            refuse_random(func)
        for a in args:
            if type(a) is LazyTensor:
                return record_as_node(func, args, kwargs)
        if needs_record(args, kwargs):
            out = record_as_node(func, args, kwargs)
            if not _any_lazy(args, kwargs) and _any_lazy(out if type(out) in (tuple, list) else (out,), NO_KWARGS):
                STATE.current[-1].mode_needed = True  # recorded, and only the mode sees this call: see ModeNeed
            return out
        return func(*args, **kwargs)


def _any_lazy(args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether a lazy value is an argument, a keyword argument or in a list / tuple of either (where torch's
    protocol for tensor-like arguments finds it: :meth:`LazyTensor.__torch_function__`)."""
    for a in (*args, *kwargs.values()):
        t = type(a)
        if t is LazyTensor or ((t is list or t is tuple) and any(type(b) is LazyTensor for b in a)):
            return True
    return False


class ModeNeed:
    """Whether the traces of one capturing engine still record under the lazy function mode.

    With the mode active *every* torch call and tensor attribute read in the traced program dispatches to Python
    (``param.device`` 1.5 us instead of 0.1): on the captured Tree-LSTM, SST batch 20, ~880 such calls outside
    the captured cells, 1.3 ms of a 9.4 ms recording.  A call on a lazy value reaches
    :meth:`LazyTensor.__torch_function__` without it, and ``torch.tensor`` is swapped while capture records
    (:func:`tensor_ctor`); what only the mode records is a call with no lazy value in it that reads a parameter
    (``x @ w`` on data ``x``) -- without it that call runs eagerly: the same value and gradients, not batched.
    So an engine records its first ``QUIET`` traces under the mode and, if none of them recorded such a call,
    the later ones without it (probes of new keys always push it); one that did keeps the mode for good."""

    QUIET = 2

    def __init__(self) -> None:
        self.quiet = 0
        self.needed = False

    @property
    def skip(self) -> bool:
        return not self.needed and self.quiet >= self.QUIET

    def describe(self) -> str:
        """The state in words (the engine's report)."""
        if self.needed:
            return "every trace: a call on parameters and data only was recorded"
        if self.skip:
            return f"dropped after {self.quiet} traces that recorded no call only the mode sees"
        return f"first {self.QUIET} traces ({self.quiet} so far)"

    def saw(self, trace: Trace) -> None:
        if trace.mode_needed:
            self.needed = True
        else:
            self.quiet += 1


@contextmanager
def lazy(engine: Any = None, examples: int = 1) -> Iterator[Trace]:
    """Record torch calls into a new :class:`Trace` (see the module docstring).

    ``engine``: what runs the DAG when a value is needed (e.g. a
    :class:`graphsub.dynamic.engine.Reuse`); ``examples``: how many training examples the trace
    holds (the unit of the thesis' frequency threshold ``P_Freq``).
    """
    trace = Trace(engine, examples)
    STATE.current.append(trace)
    STATE.refresh()
    # module-level capture while this context is open: the engine's scope (graphsub.dynamic.capture.capturing);
    # the function mode unless the engine's traces have shown they need none (ModeNeed)
    scope: Any = engine.capture_scope() if trace.capture else nullcontext()
    need: ModeNeed | None = getattr(engine, "mode_need", None) if trace.capture else None
    mode: Any = nullcontext() if need is not None and need.skip else _LazyMode()
    # the cyclic collector is paused while recording: a trace allocates tens of thousands of small
    # acyclic objects, and the collector's passes over the (large) heap of torch would cost more than
    # the recording itself; the trace's one cycle (nodes <-> trace) is collected after the context
    collect = gc.isenabled()
    gc.disable()
    try:
        with scope, mode:
            yield trace
        if need is not None and type(mode) is _LazyMode:
            need.saw(trace)
    finally:
        STATE.current.pop()
        STATE.refresh()
        if collect:
            enable_gc()


def current_trace() -> Trace | None:
    """The trace of the innermost open ``lazy()`` context (or probe), if any."""
    current = STATE.current
    return current[-1] if current else None


def push_trace(trace: Trace) -> None:
    """Make ``trace`` the current one (a probe's; undone by :func:`pop_trace`)."""
    STATE.current.append(trace)
    STATE.refresh()


def pop_trace() -> None:
    STATE.current.pop()
    STATE.refresh()


__all__ = [
    "NODE_IDS",
    "LazyError",
    "LazyTensor",
    "ModeNeed",
    "ProbeRefusal",
    "build",
    "current_trace",
    "data_node",
    "lazy",
    "new_items",
    "new_node",
    "pop_trace",
    "push_trace",
    "record",
    "record_as_node",
    "tensor_ctor",
]
