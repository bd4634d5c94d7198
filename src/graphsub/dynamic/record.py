"""Recording one torch call into the lazy DAG: the :class:`LazyTensor` stand-in, the op memo's use (template, output
meta value, key id and level of a call), shape inference on ``meta`` tensors, dropout as ``x * mask`` and deferred
word ids (:func:`data_node`).

The context and the function mode that route a program's torch calls here are :mod:`graphsub.dynamic.lazy` (its
docstring tells the whole tracer); what is recorded is :mod:`graphsub.dynamic.dag`.  Imports go one way:
``lazy -> record -> dag -> calls``.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from graphsub.dynamic.calls import (
    DATA_KIDS,
    KEYS,
    KID_INFO,
    SLOT_MARKER,
    SLOTS,
    DataRows,
    OpInfo,
    data_info,
    data_values,
    draw_mask,
    fill,
    flatten,
    item_kid,
    new_kid,
    op_name,
    param_tok,
)
from graphsub.dynamic.dag import STATE, DagNode, Group, Trace, executing
from graphsub.errors import GraphsubError


class LazyError(GraphsubError):
    """A lazy trace cannot be recorded or evaluated."""


_GID = itertools.count(1)
NODE_IDS = _GID
"""The nodes' ``gid`` counter (one for all traces: ``gid`` orders nodes by creation)."""
_weakref = weakref.ref


class LazyTensor(DagNode):
    """A node of the lazy DAG as the traced program sees it: a stand-in for a tensor whose torch calls,
    methods and operators record new nodes (see the module docstring; the node's data is
    :class:`~graphsub.dynamic.dag.DagNode`'s).  Every node of a trace is a ``LazyTensor``.
    """

    __slots__ = ()

    # --- tensor-like surface -------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self._shape())

    def _shape(self) -> torch.Size:
        if self.shape is None:
            raise LazyError(f"{self!r} is a multi-output node; index it first")
        return self.shape

    def size(self, dim: int | None = None) -> Any:
        s = self._shape()
        return s if dim is None else s[dim]

    def dim(self) -> int:
        return self.ndim

    def __len__(self) -> int:
        return int(self._shape()[0])

    @property
    def requires_grad(self) -> bool:
        return True

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return record(func, args, kwargs or {})

    def __getattr__(self, attr: str) -> Any:
        if self.kid in DATA_KIDS:  # deferred data (data_node): any other tensor method sees the real tensor
            return getattr(build(self), attr)
        meth = getattr(torch.Tensor, attr, None)
        if meth is None or not callable(meth):
            raise AttributeError(f"LazyTensor has no attribute {attr!r}")
        return lambda *a, **k: record(meth, (self, *a), k)

    def __getitem__(self, idx: Any) -> Any:
        return record(torch.Tensor.__getitem__, (self, idx), {})

    def __setitem__(self, idx: Any, value: Any) -> None:
        if self.kid not in DATA_KIDS:
            raise LazyError(f"{self!r}: assigning into a lazy value is not supported (build() it first)")
        build(self)[idx] = value  # deferred data: its tensor, made now, changed in place (read from then on)

    # forcing evaluation
    def build(self) -> torch.Tensor:
        return build(self)

    def item(self) -> Any:
        return build(self).item()

    def tolist(self) -> Any:
        return build(self).tolist()

    def backward(self, *args: Any, **kwargs: Any) -> None:
        self.trace.backward(self, *args, **kwargs)

    def __float__(self) -> float:
        return float(build(self))

    def __int__(self) -> int:
        return int(build(self))

    def __index__(self) -> int:
        return build(self).__index__()

    def __bool__(self) -> bool:
        return bool(build(self))

    def __iter__(self) -> Iterator[Any]:
        return iter(record(torch.Tensor.unbind, (self,), {}))


def _binop(name: str) -> Callable[..., Any]:
    meth = getattr(torch.Tensor, name)

    def f(self: LazyTensor, *args: Any) -> Any:
        return _record(meth, (self, *args), NO_KWARGS)

    f.__name__ = name
    return f


def _method(name: str) -> Callable[..., Any]:
    meth = getattr(torch.Tensor, name)

    def f(self: LazyTensor, *args: Any, **kwargs: Any) -> Any:
        return _record(meth, (self, *args), kwargs)

    f.__name__ = name
    return f


NO_KWARGS: dict[str, Any] = {}
for _name in ("chunk", "split", "sum", "mean", "view", "reshape", "transpose", "permute", "squeeze", "unsqueeze",
              "expand", "relu", "sigmoid", "tanh", "exp", "log", "softmax", "log_softmax", "matmul", "mm", "bmm",
              "contiguous", "clone", "flatten", "max", "min", "abs", "sqrt", "pow", "add", "sub", "mul", "div",
              "masked_fill", "narrow", "select", "index_select", "gather", "repeat", "t"):
    setattr(LazyTensor, _name, _method(_name))
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__matmul__", "__rmatmul__", "__pow__", "__rpow__", "__neg__", "__abs__", "__lt__", "__le__", "__gt__",
              "__ge__", "__and__", "__or__", "__invert__", "__mod__", "__floordiv__"):
    setattr(LazyTensor, _name, _binop(_name))
LazyTensor.__hash__ = object.__hash__  # type: ignore[method-assign]


_DROPOUTS = (F.dropout, torch.dropout)


def _one_row(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == 1


def _row_batchable(inputs: Sequence[Any], meta: Any) -> bool:
    outs = meta if isinstance(meta, (tuple, list)) else (meta,)
    if not outs or not all(_one_row(m) for m in outs):
        return False
    for i in inputs:
        if type(i) is LazyTensor:
            if i.shape is None or len(i.shape) == 0 or i.shape[0] != 1:
                return False
        elif not i.requires_grad and not _one_row(i):
            return False
    return True


def _to_meta(x: Any) -> Any:
    if type(x) is LazyTensor:
        if x.meta is None:
            raise LazyError(f"{x!r} has no shape")
        return x.meta
    return torch.empty_like(x, device="meta") if x.device.type != "meta" else x


def _infer(func: Callable[..., Any], template: Any, inputs: list[Any]) -> Any:
    """Meta value(s) of ``func`` on ``inputs``."""
    metas = [_to_meta(i) for i in inputs]
    args, kwargs = fill(template, metas)
    with executing():
        try:
            return func(*args, **kwargs)
        except Exception as e:  # report any shape error with the op's name
            raise LazyError(f"{op_name(func)}: cannot infer the output shape ({e})") from e


def needs_record(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Cheap pre-check: does any (top-level or listed) argument hold a lazy value or a parameter?"""
    for a in args:
        t = type(a)
        if t is LazyTensor or (isinstance(a, torch.Tensor) and a.requires_grad):
            return True
        if (t is list or t is tuple) and any(type(b) is LazyTensor or (isinstance(b, torch.Tensor) and b.requires_grad)
                                             for b in a):
            return True
    return bool(kwargs) and needs_record(tuple(kwargs.values()), {})


PASS: set[Any] = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.empty, torch.full, torch.arange}
"""Callables that never give a lazy node: tensor constructors (their results are the DAG's data inputs; a lazy
value among their arguments is read, which evaluates it) and attribute getters such as ``Tensor.device``
(added when first seen)."""




class ProbeRefusal(LazyError):
    """What a probed callee did that rules out recording its call as one node."""


RANDOM = {torch.rand, torch.randn, torch.randint, torch.rand_like, torch.randn_like, torch.randint_like,
           torch.bernoulli, torch.normal, torch.multinomial, torch.randperm, torch.poisson, torch.Tensor.bernoulli_,
           torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.random_, torch.Tensor.exponential_,
           F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout, F.gumbel_softmax,
           F.rrelu}


def refuse_random(func: Callable[..., Any]) -> None:
    raise ProbeRefusal(f"draws random numbers ({op_name(func)}): one batched call would draw them in another order")


def record(func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """Record ``func(*args, **kwargs)`` as a lazy node (or run it, for data-only calls)."""
    if func in PASS or STATE.exec_depth or not needs_record(args, kwargs):
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)
    return _record(func, args, kwargs)


def _record(func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
            infer: Callable[..., Any] | None = None, fkey: Any = None) -> Any:
    """Record one call (see :func:`record`).  ``infer``: how a new key's output meta value(s) are found when the
    callee is not a torch op (a captured module or cell, :mod:`graphsub.dynamic.capture`): ``infer(func, template,
    inputs)``; it may raise :class:`ProbeRefusal`, which is remembered for the key (the memo then holds the
    refusal, and this function returns it for the caller to run the callee's body instead).  ``fkey``: what stands
    for ``func`` in the memo key (default: ``func`` itself; capture passes ``id(module)`` so that the memo holds
    no reference to a user's module, and drops the module's keys when it dies)."""
    # the call's template and constants, as flatten((tuple(args), dict(kwargs))) would give, with a fast
    # path for the usual flat argument lists
    inputs: list[Any] = []
    keyl: list[Any] = [func, len(args)]  # the op and its constants, then (below) the inputs' tokens
    for a in args:  # as flatten() would do it, inlined for tensors and plain scalars
        t = type(a)
        if t is LazyTensor or isinstance(a, torch.Tensor):
            inputs.append(a)
            keyl.append(SLOT_MARKER)
        elif t is int or t is float or t is bool or a is None:
            keyl.append(t)
            keyl.append(a)
        elif t is tuple and all(type(b) is LazyTensor for b in a):  # a state tuple, as flatten() gives it
            keyl.append(tuple)
            keyl.append(len(a))
            for b in a:
                inputs.append(b)
                keyl.append(SLOT_MARKER)
        else:
            flatten(a, inputs, keyl)
    if kwargs:
        keyl.append(dict)
        for k, v in kwargs.items():
            keyl.append(k)
            t = type(v)
            if t is int or t is float or t is bool or v is None:
                keyl.append(t)
                keyl.append(v)
            else:
                flatten(v, inputs, keyl)
    if func in _DROPOUTS:
        return _dropout(args, kwargs, _trace_of(func, inputs))
    if func is torch.Tensor.__getitem__ and type(inputs[0]) is LazyTensor and inputs[0].shape is None \
            and not any(type(i) is LazyTensor for i in inputs[1:]):
        func = operator.getitem  # indexing a multi-output node: the thesis' access(x, i)
    # memo key: op, constants, input shapes and dtypes, parameter identities
    nconst = len(keyl)
    keyl[0] = func if fkey is None else fkey
    skey = keyl
    trace: Trace | None = None
    lvl = 0
    for i in inputs:
        if type(i) is LazyTensor:
            skey.append(i.tok)
            if i.level > lvl:
                lvl = i.level
            if trace is None:
                trace = i.trace
        elif i.requires_grad:
            skey.append(param_tok(i))
        else:
            skey.append(i.shape)
            skey.append(i.dtype)
    if trace is None:
        trace = _trace_of(func, inputs)
    key: Any = tuple(skey)
    try:
        info = KEYS.get(key)
    except TypeError:  # an unhashable constant: a key of its own
        key, info = None, None
    if infer is not None and type(info) is ProbeRefusal:
        return info
    if info is None:  # a new op key: its template, output meta value and key id
        scratch: list[Any] = []
        template = (tuple(flatten(a, scratch, []) for a in args),
                    {k: flatten(v, scratch, []) for k, v in kwargs.items()})
        ckey: tuple[Any, ...] = tuple(keyl[1:nconst]) if key is not None else ("unhashable", next(_GID))
        if infer is None:
            meta = _infer(func, template, inputs)
        else:
            try:
                meta = infer(func, template, inputs)
            except ProbeRefusal as refusal:
                if key is not None:
                    KEYS[key] = refusal  # type: ignore[assignment]
                return refusal
        if isinstance(meta, torch.Tensor):
            kid = item_kid(template[0][1]) if func is operator.getitem and type(template[0][1]) is int \
                else new_kid(_row_batchable(inputs, meta))
        elif isinstance(meta, (tuple, list)) and meta and all(isinstance(m, torch.Tensor) for m in meta):
            kid = new_kid(_row_batchable(inputs, meta))
        else:  # a non-tensor result (e.g. a size): compute it now
            return _non_tensor(func, args, kwargs)
        info = OpInfo(meta, kid, template, ckey)
        if isinstance(meta, (tuple, list)):
            info.items = tuple(OpInfo(m, item_kid(k), ((SLOTS[0], k), {}), ("getitem", k))
                               for k, m in enumerate(meta))
        if key is not None:
            KEYS[key] = info
    node = new_node(func, info, tuple(inputs), trace, lvl + 1)
    if not info.items:
        return node
    return new_items(node, info, trace)


def new_items(node: LazyTensor, info: OpInfo, trace: Trace) -> Any:
    """The output nodes of a multi-output node (``access(x, k)``, no call: they live in ``node``'s batch), as the
    tuple or list the op returns.  (What :func:`new_node` does for them, inlined: a module call's state tuple makes
    two of these per call, the most common node of a captured trace.)"""
    src = (node,)
    level = node.level
    keep = None if trace.grouping else trace.refs
    outs = []
    for part, it in enumerate(info.items):  # item ``part``'s key id is item_kid(part): see _record
        n = _new_lazy(LazyTensor)
        n.gid = next(_GID)
        n.func = _getitem
        n.info = it
        n.inputs = src
        n.tok = it.tok
        n.trace = trace
        n.value = None
        n.kid = it.kid
        n.level = level
        n.part = part
        n.grp = None
        n.row = 0
        n.own = None
        if keep is not None:
            keep.append(_weakref(n))
        outs.append(n)
    return tuple(outs) if type(info.meta) is tuple else outs


_new_lazy = LazyTensor.__new__
_getitem = operator.getitem


record_as_node = _record
""":func:`record` without the data-only shortcut, with an optional ``infer`` (module capture's entry point)."""


def new_node(func: Callable[..., Any], info: OpInfo, inputs: tuple[Any, ...], trace: Trace,
              level: int) -> LazyTensor:
    """A node with everything known from the memo (no per-node analysis); grouped if the trace asks.
    (``OpInfo.blank()`` and no inputs: a node standing for a value computed elsewhere.)"""
    n = LazyTensor.__new__(LazyTensor)
    n.gid = next(_GID)
    n.func = func
    n.info = info
    n.inputs = inputs
    n.tok = info.tok
    n.trace = trace
    n.value = None
    n.kid = info.kid
    n.level = level
    n.part = -1
    n.grp = None
    n.row = 0
    n.own = None
    if not trace.grouping:
        trace.refs.append(_weakref(n))
    if func is operator.getitem:
        item = KID_INFO[info.kid][1]
        if item >= 0:  # output ``item`` of a multi-output node: no call; it lives in its source's batch
            n.part = item
            n.level = level - 1
            return n
    if trace.grouping:
        gk = level * 4294967296 + info.kid
        g = trace.pending.get(gk)
        if g is None:
            g = trace.pending[gk] = Group(level, info.kid)
        n.grp = g
        n.row = len(g.members)
        g.members.append(n)
    return n


def _trace_of(func: Callable[..., Any], inputs: list[Any]) -> Trace:
    current = STATE.current
    trace = next((i.trace for i in inputs if type(i) is LazyTensor), None) or (current[-1] if current else None)
    if trace is None:
        raise LazyError(f"{op_name(func)} on lazy values outside any trace")
    return trace


def _non_tensor(func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", "") == "__get__" and type(owner).__name__ == "getset_descriptor" and \
            getattr(owner, "__name__", "") in ("device", "is_cuda", "is_sparse", "layout", "ndim"):
        PASS.add(func)  # the value does not depend on the tensor's data
    with executing():
        return func(*args, **kwargs)


def _dropout(args: Sequence[Any], kwargs: dict[str, Any], trace: Trace) -> Any:
    names = ("input", "p", "training", "inplace")
    bound = dict(zip(names, args, strict=False)) | kwargs
    x, p, training = bound["input"], float(bound.get("p", 0.5)), bool(bound.get("training", True))
    if not training or p == 0.0:
        return x
    if STATE.probing:
        refuse_random(F.dropout)
    if p >= 1.0:
        return record(torch.mul, (x, 0.0), {})
    shape = tuple(x.shape)
    with executing(), torch._C.DisableTorchFunction():  # real ops, not through the mode (~6 us each otherwise)
        if trace.masks is None:
            mask = draw_mask(shape, x.dtype, p)
        else:  # drawn where the trace runs, in this (program) order: see Trace.masks
            mask = torch.empty(shape, dtype=x.dtype)
            trace.masks[id(mask)] = (len(trace.masks), shape, x.dtype, p)
            trace.mask_refs.append(mask)
    return record(torch.mul, (x, mask), {})


_DATA_INFO: dict[int, OpInfo] = {}  # values per node -> the data nodes' memo entry
_INT64 = (-(1 << 63), 1 << 63)
TENSOR_CTOR = torch.tensor


def data_node(args: Any, kwargs: dict[str, Any]) -> LazyTensor | None:
    """``torch.tensor(values)`` as a lazy *data node*, or ``None`` (then it runs eagerly, as any constructor).

    A trace that batches while recording (``trace.grouping``: op-level or module-level) defers the word ids of a tree
    or sequence model: ``torch.tensor([wid])`` made once per word costs ~7 us eagerly (~12 us through the lazy
    mode), more than recording the cell that reads it.  A data node is in no batch group (level 0, like a data
    tensor): a plan stacks the values its consumers read into one tensor (``plan.column``), and anything else
    that needs its value makes its tensor then (:class:`~graphsub.dynamic.dag.Trace.evaluate`).  Deferred only
    when the result is exactly what eager code gets: a flat, non-empty list of Python ints within int64, default
    or int64 dtype, on the CPU, no other argument."""
    current = STATE.current
    if not current or len(args) != 1 or STATE.probing:
        return None
    trace = current[-1]
    if not trace.grouping:
        return None
    vals = args[0]
    if type(vals) is not list or not vals:
        return None
    lo, hi = _INT64
    for v in vals:
        if type(v) is not int or not lo <= v < hi:
            return None
    for k, v in kwargs.items():
        if k == "device":
            if not (v is None or v == "cpu" or (type(v) is torch.device and v.type == "cpu" and v.index is None)):
                return None
        elif k != "dtype" or (v is not None and v is not torch.int64):
            return None
    info = _DATA_INFO.get(len(vals))
    if info is None:
        info = _DATA_INFO[len(vals)] = data_info(len(vals))
    n = _new_lazy(LazyTensor)
    n.gid = next(_GID)
    n.func = data_values
    n.info = info
    n.inputs = (DataRows(tuple(vals)),)
    n.tok = info.tok
    n.trace = trace
    n.value = None
    n.kid = info.kid
    n.level = 0
    n.part = -1
    n.grp = None
    n.row = 0
    n.own = None
    return n


def tensor_ctor(*args: Any, **kwargs: Any) -> Any:
    """``torch.tensor`` while a capturing ``lazy()`` context is open (swapped in by
    :func:`graphsub.dynamic.capture.capturing`): a data node where :func:`data_node` makes one, else torch's own."""
    if not STATE.exec_depth:
        node = data_node(args, kwargs)
        if node is not None:
            return node
    return TENSOR_CTOR(*args, **kwargs)


tensor_ctor.__wrapped__ = TENSOR_CTOR  # type: ignore[attr-defined]


def build(out: Any) -> Any:
    """Evaluate a lazy value (or a list / tuple of them); real tensors pass through."""
    if type(out) is LazyTensor:
        return out.trace.evaluate(out)
    if isinstance(out, (list, tuple)):
        return type(out)(build(o) for o in out)
    return out


__all__ = [
    "NODE_IDS",
    "NO_KWARGS",
    "PASS",
    "RANDOM",
    "TENSOR_CTOR",
    "LazyError",
    "LazyTensor",
    "ProbeRefusal",
    "build",
    "data_node",
    "needs_record",
    "new_items",
    "new_node",
    "record",
    "record_as_node",
    "refuse_random",
    "tensor_ctor",
]
