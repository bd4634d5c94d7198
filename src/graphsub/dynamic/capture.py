"""Module-level capture: a call of an ``nn.Module`` (or of a function marked :func:`cell`) inside ``lazy(...)``
recorded as *one* node, batched as a whole (Cavs' vertex function, DyNet/Fold's cell-level batching).

The op-level tracer (:mod:`graphsub.dynamic.lazy`) pays Python for every torch call of a cell -- a Tree-LSTM
node is about a dozen -- and batches each op on its own, with a gather between ops.  With capture on (an
engine with ``capture_modules = True``, e.g. ``Reuse(depth=1, collect=0, batching=True,
capture_modules=True)``), every module call made while the trace records is looked at once per *key* --
(module, parameter identities, input shapes and dtypes, constant arguments), the op memo's key with the module
as the op -- and either:

* **captured**: recorded as one node whose op is the module itself.  Its output shapes come from a *probe*:
  the module's body recorded once on stand-in inputs into a scratch trace.  The batching engine then calls
  the module once per (level, key) on its members' inputs stacked along dimension 0 -- the whole cell is one
  step of the plan, its intermediate values never leave the batch -- and autograd runs through that call.
  The first batched call of a key is compared with row-by-row calls (:func:`~graphsub.dynamic.plan.rows_agree`);
  a module that mixes rows is run member by member from then on; or
* **refused**: the module's own ``forward`` runs and its ops are recorded one by one (op-level recording, the
  fallback), when the call

  - has an argument that is neither a tensor nor a constant (a tree, a list of words: the module's control
    flow follows it, e.g. the top-level model);
  - reads a value (``bool(t)``, ``t.item()``, ``t.tolist()``...: control flow that depends on tensor values);
  - draws random numbers (dropout in training, ``torch.rand``...: a batched call would draw them in another
    order than eager code);
  - is a module with forward hooks, or with buffers while in training mode (BatchNorm's running statistics);
  - returns something other than a tensor or a flat tuple / list of tensors computed from its inputs.

  The refusal is remembered per key (and counted per callable), and :func:`report` says why.

Calls inside a captured module are not captured again (the module is one node); a probe never captures.

Memory: what capture remembers of a callable (its keys, here and in the tracer's memo, its decision) is keyed by
``id(callable)`` and holds no reference to it; a finalizer drops those entries as the callable dies, so a model its
user drops is freed.  (A ``@cell`` *method*'s ``self`` is a constant of its calls' template and stays referenced.)

How: while a capturing ``lazy()`` context is open, ``nn.Module.__call__`` is replaced by :func:`_module_call`.
PyTorch has no hook that can replace a module's result, so this is the one place the tracer swaps a method; it
passes straight through when no capturing trace is recording, while a plan executes, and inside probes.  The
swap outlives the context until a module is called with no capturing context open and no plan running: then
torch's own ``__call__`` is put back.  (Assigning ``nn.Module.__call__`` invalidates the method caches of every
module class, 0.45 ms per swap and restore on the Tree-LSTM; a loop of captured training steps -- record, run the
plan, backward, optimizer step -- calls no module outside them, and swaps once.)
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn
from torch.nn.modules import module as _torch_module

from graphsub.dynamic.calls import KEYS, OpInfo, fill, new_kid
from graphsub.dynamic.dag import STATE, Group, Trace
from graphsub.dynamic.lazy import (
    NODE_IDS,
    TENSOR_CTOR,
    LazyTensor,
    ProbeRefusal,
    _LazyMode,
    new_items,
    new_node,
    pop_trace,
    push_trace,
    record_as_node,
    tensor_ctor,
)

_ORIG_CALL = nn.Module.__call__
_LOCK = threading.Lock()
_ACTIVE = [0]  # capturing lazy() contexts open
_GLOBAL_HOOKS = _torch_module._global_forward_hooks  # registered with nn.modules.module.register_module_forward_hook
_GLOBAL_PRE_HOOKS = _torch_module._global_forward_pre_hooks
MAX_KEYS = 256
"""Keys (shapes / constants) one callable may have before its new keys are refused (constants such as word ids
passed as Python ints would otherwise make a key, and a probe, per value)."""


@dataclass
class Decision:
    """What capture decided for one callable (module or cell function), over all its keys."""

    name: str
    captured_keys: int = 0
    refused_keys: int = 0
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"callable": self.name, "captured": self.captured_keys > 0 and self.refused_keys == 0,
                "captured_keys": self.captured_keys, "refused_keys": self.refused_keys, "reason": self.reason}


_DECISIONS: dict[int, tuple[Callable[[], Any], Decision]] = {}  # id(callable) -> (weak reference, decision)
_SIMPLE = (int, float, bool, str, type(None), torch.dtype, torch.device)

# What capture remembers of a callable -- its decision, whether it has buffers, its captured keys here and in the
# tracer's memo -- is keyed by ``id(callable)`` and holds no reference to it: a model dropped by its user is freed,
# and :func:`_forget`, run as it dies (before its id can be reused), drops every entry of that id.
_WATCHED: set[int] = set()


_PINNED: dict[int, Any] = {}  # callables that take no weak reference: kept alive, so that their id stays theirs


def _watch(fn: Any) -> None:
    """Drop what capture keeps under ``id(fn)`` when ``fn`` dies (registered once per live callable)."""
    if id(fn) not in _WATCHED:
        _WATCHED.add(id(fn))
        try:
            weakref.finalize(fn, _forget, id(fn))
        except TypeError:
            _PINNED[id(fn)] = fn


def _ref(fn: Any) -> Callable[[], Any]:
    _watch(fn)
    return (lambda: fn) if id(fn) in _PINNED else weakref.ref(fn)


def _forget(i: int) -> None:
    _WATCHED.discard(i)
    _DECISIONS.pop(i, None)
    _BUFFERS.pop(i, None)
    for memo in (_FAST, KEYS):
        for k in [k for k in list(memo) if k[0] == i]:
            memo.pop(k, None)


def _decision(fn: Any) -> Decision:
    ent = _DECISIONS.get(id(fn))
    if ent is None or ent[0]() is not fn:
        name = type(fn).__name__ if isinstance(fn, nn.Module) else getattr(fn, "__qualname__", repr(fn))
        ent = _DECISIONS[id(fn)] = (_ref(fn), Decision(name))
    return ent[1]


def report(model: nn.Module | None = None) -> list[dict[str, Any]]:
    """Capture decisions so far, one per callable: captured or not, how many keys each way, and the reason of
    the last refusal.  With ``model``, only its modules (and cell functions) are listed, named by their path in
    it (``composer (TreeComposer)``)."""
    names = {id(m): (n or type(m).__name__) for n, m in model.named_modules()} if model is not None else {}
    out = []
    for ref, d in list(_DECISIONS.values()):
        fn = ref()
        if fn is None:
            continue
        row = d.as_dict()
        if id(fn) in names:
            row["callable"] = f"{names[id(fn)]} ({type(fn).__name__})" if names[id(fn)] != type(fn).__name__ \
                else names[id(fn)]
        elif model is not None and isinstance(fn, nn.Module):
            continue  # a module of another model
        out.append(row)
    return sorted(out, key=lambda r: r["callable"])


def reset_report() -> None:
    """Forget the decisions' counts (the keys' decisions themselves stay in the op memo)."""
    _DECISIONS.clear()


# ----------------------------------------------------------------------------------------- the switch
@contextmanager
def capturing() -> Iterator[None]:
    """Route module calls through :func:`_module_call` and ``torch.tensor`` through
    :func:`~graphsub.dynamic.record.tensor_ctor` while open (nested contexts share one swap): a
    tree's word ids (``torch.tensor([w])``, one per leaf) then become data nodes without torch's argument parsing
    and function-mode dispatch first (about 3.5 us of the 5.4 a call costs through the mode)."""
    with _LOCK:
        _ACTIVE[0] += 1
        if _ACTIVE[0] == 1:
            if nn.Module.__call__ is not _module_call:
                nn.Module.__call__ = _module_call  # type: ignore[method-assign]
            torch.tensor = tensor_ctor
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:  # nn.Module.__call__ stays swapped until a module runs outside (module docstring)
                torch.tensor = TENSOR_CTOR


def _restore() -> None:
    """Put torch's own ``nn.Module.__call__`` back, unless a capturing context is open (in any thread)."""
    with _LOCK:
        if _ACTIVE[0] == 0 and nn.Module.__call__ is _module_call:
            nn.Module.__call__ = _ORIG_CALL  # type: ignore[method-assign]


def _active() -> bool:
    return STATE.capturing is not None


def _module_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    if STATE.capturing is None:  # per thread: another thread's modules run as they always do
        state = STATE
        if not state.exec_depth and not state.probing and not _ACTIVE[0]:  # outside graphsub: torch's own again
            _restore()
        return _ORIG_CALL(self, *args, **kwargs)
    if self._forward_hooks or self._forward_pre_hooks or _GLOBAL_PRE_HOOKS or _GLOBAL_HOOKS or \
            (self.training and _BUFFERS.get(id(self)) is not False and _buffered(self)):
        _refuse(self, _module_refusal(self))
        return _ORIG_CALL(self, *args, **kwargs)
    if not kwargs:
        node = _known(self, args)
        if node is not None:
            return node
    return capture_call(self, args, kwargs)


_F = TypeVar("_F", bound=Callable[..., Any])


def cell(fn: _F) -> _F:
    """Mark a function (or method) whose calls inside a capturing ``lazy()`` context are recorded as one node each
    and batched as a whole, as a module call is; outside such a context it is an ordinary call.

    >>> @cell
    ... def gate(x, y):
    ...     return torch.sigmoid(x) * torch.tanh(y)
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _active():
            return fn(*args, **kwargs)
        if not kwargs:
            node = _known(wrapper, args)
            if node is not None:
                return node
        return capture_call(wrapper, args, kwargs)

    wrapper.__graphsub_cell__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _body(fn: Any) -> Callable[..., Any]:
    """The callee's own code: a module's original ``__call__``, a cell's undecorated function."""
    if isinstance(fn, nn.Module):
        return functools.partial(_ORIG_CALL, fn)
    return fn.__wrapped__


# ----------------------------------------------------------------------------------------- recording
def _plain(x: Any) -> bool:
    """A tensor, a constant, or a list / tuple of them (what a captured call may take)."""
    t = type(x)
    if t is LazyTensor or isinstance(x, (torch.Tensor, *_SIMPLE)):
        return True
    if t is tuple or t is list:
        return all(_plain(y) for y in x)
    return isinstance(x, nn.Module)  # a cell method's ``self``: keyed by identity


def _scan(args: Any) -> int:
    """1: some tensor and only tensors / constants; 0: constants only; -1: some other object (see :func:`_plain`)."""
    has = 0
    for a in args:
        t = type(a)
        if t is LazyTensor:
            has = 1
        elif t is tuple or t is list:
            for b in a:
                if type(b) is LazyTensor or isinstance(b, torch.Tensor):
                    has = 1
                elif not _plain(b):
                    return -1
        elif isinstance(a, torch.Tensor):
            has = 1
        elif not _plain(a):
            return -1
    return has


def capture_call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Record ``fn(*args, **kwargs)`` as one node if it can be (module docstring), else run the callee's own code so
    that its ops are recorded one by one."""
    scan = _scan(args)
    if kwargs and scan >= 0:
        scan = max(scan, _scan(kwargs.values())) if _scan(kwargs.values()) >= 0 else -1
    if scan <= 0:
        if scan < 0:
            bad = next(type(a).__name__ for a in (*args, *kwargs.values()) if not _plain(a))
            _refuse(fn, f"argument of type {bad} (neither a tensor nor a constant): its control flow may follow it")
        return _body(fn)(*args, **kwargs)  # refused, or nothing to batch over (constants only)
    _watch(fn)
    out = record_as_node(fn, args, kwargs, infer=_probe, fkey=id(fn))
    if type(out) is ProbeRefusal:
        return _body(fn)(*args, **kwargs)
    if not kwargs:
        _remember(fn, args, out)
    return out


_FAST: dict[tuple[Any, ...], OpInfo] = {}
"""Captured keys by their short form (:func:`_short_key`, led by ``id(callable)``), filled when the general recorder
captures a call."""


def _short_key(fn: Any, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[Any], int, Trace | None] | None:
    """``(key, inputs, level, trace)`` of a call on the usual arguments -- lazy values (by their shape token),
    data tensors (by shape and dtype), tuples of them (by their negated length, then their members') -- or ``None``
    for anything else (the general recorder's case)."""
    key: list[Any] = [id(fn)]  # the callable is watched (_watch) before its first key is entered
    inputs: list[Any] = []
    lvl = 0
    trace = None
    for a in args:
        t = type(a)
        if t is LazyTensor:
            inputs.append(a)
            key.append(a.tok)
            if a.level > lvl:
                lvl = a.level
            trace = a.trace
        elif t is tuple:
            key.append(-len(a))
            for b in a:
                if type(b) is LazyTensor:
                    key.append(b.tok)
                    if b.level > lvl:
                        lvl = b.level
                    trace = b.trace
                elif isinstance(b, torch.Tensor):  # a data tensor in a state (a sequence's zero initial state)
                    with _NO_TORCH_FUNCTION():
                        if b.requires_grad:
                            return None
                        key.append(b.shape)
                        key.append(b.dtype)
                else:
                    return None
                inputs.append(b)
        elif isinstance(a, torch.Tensor):
            with _NO_TORCH_FUNCTION():  # the lazy mode would intercept each attribute read (~4 us)
                if a.requires_grad:
                    return None
                key.append(a.shape)
                key.append(a.dtype)
            inputs.append(a)
        else:
            return None
    return tuple(key), inputs, lvl, trace


def _known(fn: Any, args: tuple[Any, ...]) -> Any:
    """The node(s) of a call whose key is already captured (:data:`_FAST`), built without the general recorder;
    ``None``: not known (or not the usual arguments).  This is the tracer's hot path (one call per recorded cell):
    the argument forms of cells -- one lazy value, two, a lazy value and a state pair, two state pairs -- are read
    without a loop, and anything else goes through :func:`_short_key`.  The fast forms must build ``_short_key``'s
    key, which :func:`_remember` enters: ``test_known_cell_calls_take_the_fast_path`` fails otherwise."""
    na = len(args)
    if na == 1:
        a = args[0]
        if type(a) is LazyTensor:
            info = _FAST.get((id(fn), a.tok))
            return None if info is None else _emit(fn, info, args, a.level, a.trace)
    elif na == 2:
        a, b = args
        ta, tb = type(a), type(b)
        if ta is tuple and tb is tuple and len(a) == 2 and len(b) == 2:  # two (c, h) states: a tree cell
            a0, a1 = a
            b0, b1 = b
            if type(a0) is LazyTensor and type(a1) is LazyTensor and type(b0) is LazyTensor \
                    and type(b1) is LazyTensor:
                info = _FAST.get((id(fn), -2, a0.tok, a1.tok, -2, b0.tok, b1.tok))
                if info is None:
                    return None
                return _emit(fn, info, (a0, a1, b0, b1), max(a0.level, a1.level, b0.level, b1.level), b1.trace)
        elif ta is LazyTensor:
            if tb is LazyTensor:
                info = _FAST.get((id(fn), a.tok, b.tok))
                if info is None:
                    return None
                return _emit(fn, info, args, max(a.level, b.level), b.trace)
            if tb is tuple and len(b) == 2:  # an input and a (c, h) state: a sequence cell
                b0, b1 = b
                if type(b0) is LazyTensor and type(b1) is LazyTensor:
                    info = _FAST.get((id(fn), a.tok, -2, b0.tok, b1.tok))
                    if info is None:
                        return None
                    return _emit(fn, info, (a, b0, b1), max(a.level, b0.level, b1.level), b1.trace)
    got = _short_key(fn, args)
    if got is None:
        return None
    info = _FAST.get(got[0])
    if info is None:
        return None
    _, inputs, lvl, trace = got
    return _emit(fn, info, tuple(inputs), lvl, trace)


def _emit(fn: Any, info: OpInfo, inputs: tuple[Any, ...], lvl: int, trace: Trace | None) -> Any:
    """The node of a known call (what :func:`~graphsub.dynamic.record.new_node` does, inlined) and its items."""
    if trace is None:
        trace = STATE.current[-1]
    level = lvl + 1
    n = _new_lazy(LazyTensor)
    n.gid = next(NODE_IDS)
    n.func = fn
    n.info = info
    n.inputs = inputs
    n.tok = info.tok
    n.trace = trace
    n.value = None
    n.kid = info.kid
    n.level = level
    n.part = -1
    n.row = 0
    n.own = None
    if trace.grouping:
        gk = level * 4294967296 + info.kid
        g = trace.pending.get(gk)
        if g is None:
            g = trace.pending[gk] = Group(level, info.kid)
        n.grp = g
        n.row = len(g.members)
        g.members.append(n)
    else:
        n.grp = None
        trace.refs.append(weakref.ref(n))
    if not info.items:
        return n
    return new_items(n, info, trace)


_new_lazy = LazyTensor.__new__
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction


def _remember(fn: Any, args: tuple[Any, ...], out: Any) -> None:
    """Enter a call the general recorder captured in :data:`_FAST`."""
    node = out if type(out) is LazyTensor else (out[0].inputs[0] if out and type(out[0]) is LazyTensor else None)
    if node is None or node.func is not fn:
        return
    got = _short_key(fn, args)
    if got is not None:
        _FAST[got[0]] = node.info


def _refuse(fn: Any, reason: str) -> None:
    d = _decision(fn)
    if d.reason != reason:
        d.reason = reason
    if d.refused_keys == 0:
        d.refused_keys = 1


_BUFFERS: dict[int, bool] = {}


def _buffered(m: nn.Module) -> bool:
    """Whether ``m`` (or a submodule) has buffers (remembered per module, dropped when it dies)."""
    got = _BUFFERS.get(id(m))
    if got is None:
        _watch(m)
        got = _BUFFERS[id(m)] = next(m.buffers(), None) is not None
    return got


def _module_refusal(m: nn.Module) -> str:
    if m._forward_hooks or m._forward_pre_hooks or _GLOBAL_PRE_HOOKS or _GLOBAL_HOOKS:
        return "has forward hooks, its own or global ones (a batched call would run them once per batch)"
    if m.training and _buffered(m):
        return "has buffers in training mode (e.g. BatchNorm's running statistics, updated by each call)"
    return ""


class _ProbeEngine:
    """The engine of a probe's scratch trace: any demand for a value is a refusal."""

    group_nodes = False
    capture_modules = False

    def run(self, trace: Trace, out: Any) -> Any:
        raise ProbeRefusal(f"reads a tensor's value ({out!r}): control flow that depends on tensor values")


def _probe(fn: Any, template: Any, inputs: list[Any]) -> Any:
    """Output meta value(s) of a new key: the callee's body recorded once on stand-ins (module docstring)."""
    dec = _decision(fn)
    if dec.captured_keys + dec.refused_keys >= MAX_KEYS:
        dec.refused_keys += 1
        dec.reason = f"more than {MAX_KEYS} distinct keys (shapes or constants)"
        raise ProbeRefusal(dec.reason)
    try:
        meta = _record_body(_body(fn), template, inputs)
    except ProbeRefusal as e:
        dec.refused_keys += 1
        dec.reason = str(e)
        raise
    except Exception as e:  # the body failed on stand-ins: run it op by op instead
        dec.refused_keys += 1
        dec.reason = f"cannot be recorded as one node ({type(e).__name__}: {e})"
        raise ProbeRefusal(dec.reason) from e
    dec.captured_keys += 1
    return meta


def _record_body(body: Callable[..., Any], template: Any, inputs: list[Any]) -> Any:
    scratch = Trace(_ProbeEngine())
    stand = [_stand_in(x, scratch) for x in inputs]
    args, kwargs = fill(template, stand)
    push_trace(scratch)
    STATE.probing += 1
    STATE.refresh()
    # every call of the body seen (random draws refused), also where the trace records without the mode
    mode = nullcontext() if torch._C._is_torch_function_mode_enabled() else _LazyMode()
    try:
        with mode:
            out = body(*args, **kwargs)
    finally:
        STATE.probing -= 1
        pop_trace()  # (refreshes STATE.capturing)
    outs = out if type(out) in (tuple, list) else (out,)
    if not outs or not all(type(o) is LazyTensor and o.shape is not None for o in outs):
        kinds = ", ".join(sorted({type(o).__name__ for o in outs})) or "nothing"
        raise ProbeRefusal(f"returns {kinds}, not tensors computed from its inputs and parameters")
    metas = [o.meta for o in outs]
    return tuple(metas) if type(out) is tuple else (metas if type(out) is list else metas[0])


def _stand_in(x: Any, trace: Trace) -> Any:
    if type(x) is not LazyTensor:
        return x  # parameters and data tensors are themselves in the probe
    meta = x.meta
    if not isinstance(meta, torch.Tensor):
        raise ProbeRefusal("takes a multi-output value whole")
    return new_node(_stand_in, OpInfo(meta, new_kid(False), ((), {}), ()), (), trace, 0)


__all__ = ["MAX_KEYS", "Decision", "capture_call", "capturing", "cell", "report", "reset_report"]
