"""Batched execution plans: the signature-keyed batches of a trace as data (one step per batch).

A :class:`Plan` is what the op-level batching engine runs.  It is built from the groups a trace
recorded (:class:`~graphsub.dynamic.dag.Group`: nodes of one level with one key id) and holds, per
group, one :class:`Step`: the op (by key id, see :class:`OpDef`), whether it runs as one batched
call, and one column per tensor slot of the call:

* ``(P, param)`` -- a parameter, shared by the step's members (it is part of the key);
* ``(D, rows)`` -- the members' data tensors (one row each) stacked: inputs, dropout masks, targets;
* ``(L, pieces, perm)`` -- the members' lazy inputs, gathered from earlier steps: ``pieces`` lists
  ``(step, part, rows)`` (``part`` picks an output of a multi-output op, ``rows`` is a ``(start, stop)``
  run or an index tensor; ``step`` ``-1`` means a value computed by an earlier run, given in ``part``), and
  ``perm`` (``None`` or an index tensor) puts the concatenated pieces in member order;
* ``(E, refs)`` -- for a step run member by member: each member's own inputs;
* ``(M, orders)`` -- dropout masks of a trace that defers its random numbers (``Trace.masks``): the plan
  lists every mask's shape in program order (``Plan.masks``) and :func:`run_plan` draws them all before the
  first step, as an eager run would, then stacks the members' ones.

A plan has no nodes in it, only tensors, ints and the op table, so it can be built where the trace was
recorded and run elsewhere: :mod:`graphsub.dynamic.prefetch` records and plans batches in a worker
process while the main process runs the previous plan (the plan is sent as NumPy arrays,
:mod:`graphsub.dynamic.wire`).

:func:`run_plan` runs the steps in order with autograd on.  A batched step whose key was never checked is
compared once with member-by-member calls (first and last row, as :func:`rows_agree`); a key that
differs (an op that mixes rows) is run member by member from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from graphsub.dynamic.calls import DATA_KIDS, KID_INFO, data_values, draw_mask, fill, int64_tensor
from graphsub.dynamic.dag import DagNode, Group, resolve_row, source
from graphsub.dynamic.layout import layout_rows, run_index
from graphsub.dynamic.lazy import LazyError, LazyTensor
from graphsub.dynamic.rowloss import RowLoss, row_loss_kid
from graphsub.dynamic.wgrad import deferring

P, D, L, E, M = 0, 1, 2, 3, 4
"""Column kinds: parameter, stacked data rows, lazy gather, per-member references, deferred dropout masks."""


@dataclass(frozen=True)
class OpDef:
    """The op of a key id: callable, call template (slots for tensors), one-row-per-instance flag."""

    func: Callable[..., Any]
    template: Any
    batchable: bool


@dataclass
class Step:
    kid: int
    n: int
    batched: bool
    cols: list[Any]
    chunks: list[int] | None = None  # row counts of the runs its consumers read whole (see layout.layout_rows)
    merged: list[tuple[list[int], torch.Tensor | None]] | None = None  # gathers shared by columns (see _merge)


@dataclass
class Plan:
    steps: list[Step]
    out: tuple[int, int, int] | None  # (step, part, row) of the output; None: ``value`` holds it
    value: Any = None
    ops: dict[int, OpDef] = field(default_factory=dict)
    masks: list[tuple[tuple[int, ...], torch.dtype, float]] = field(default_factory=list)

    @property
    def members(self) -> int:
        return sum(s.n for s in self.steps)


class PerMember(list[Any]):
    """The value of a step run member by member (one value per member)."""


def build_plan(groups: Sequence[Group], out: LazyTensor, masks: dict[int, Any] | None = None,
               layout: bool = False) -> Plan:
    """The plan of ``groups`` (in level order) computing ``out``; ``masks``: the trace's deferred dropout masks
    (``Trace.masks``), if any; ``layout``: reorder the groups' rows into chunks
    (:func:`~graphsub.dynamic.layout.layout_rows`; the groups' member lists and rows are updated).  Measured on
    the Tree-LSTM (SST, batch 20): with module capture (~1.2k nodes) the layout costs ~0.5 ms of planning and saves
    ~5 ms of forward + backward; at op level (~7.4k nodes) it costs ~10 ms of planning for about as much saved, so
    the engines use it with module capture only."""
    with numbered(groups):
        return _build_plan(groups, out, masks or {}, layout)


@contextmanager
def numbered(groups: Sequence[Group]) -> Iterator[None]:
    """Each group's step on the group (``Group.pos``) while open, -1 again after: where a node's input comes from
    is then one attribute read (``x.grp.pos``; -1: not a step of this plan)."""
    for i, g in enumerate(groups):
        g.pos = i
    try:
        yield
    finally:
        for g in groups:
            g.pos = -1


def _build_plan(groups: Sequence[Group], out: LazyTensor, deferred: dict[int, Any], layout: bool) -> Plan:
    steps: list[Step] = []
    ops: dict[int, OpDef] = {}
    for g in groups:
        if g.kid not in ops:
            first = g.members[0]
            ops[g.kid] = OpDef(first.func, first.template, KID_INFO[g.kid][0])
    chunks = layout_rows(groups, ops) if layout else [None] * len(groups)
    runs = [{} if c is None else run_index(c) for c in chunks]
    for g, ch in zip(groups, chunks, strict=True):
        ms = g.members
        first = ms[0]
        kid = g.kid
        batched = ops[kid].batchable
        if not batched and len(ms) > 1:  # a one-row loss per member: one call over all rows (dynamic.rowloss)
            derived = row_loss_kid(first)
            if derived is not None:
                kid, batched = derived, True
                if kid not in ops:
                    ops[kid] = OpDef(RowLoss(first.func), first.template, True)
        cols: list[Any] = []
        if batched:
            for j, x in enumerate(first.inputs):
                prev = cols[-1] if j else None
                if prev is not None and prev[0] == L and type(x) is LazyTensor and x.part >= 0 \
                        and all(p[0] >= 0 for p in prev[1]) and _siblings(ms, j):
                    cols.append((L, [(st, x.part, rows) for st, _, rows in prev[1]], prev[2]))
                else:
                    cols.append(column(j, x, ms, deferred, runs, listed=True))
            merged = _merge(cols, first.inputs, len(ms))
        else:
            cols = [[reference(x, deferred) for x in m.inputs] for m in ms]
            merged = None
        steps.append(Step(kid, len(ms), batched, cols, ch, merged))
    outref = reference(out, deferred)
    plan = Plan(steps, None, ops=ops, masks=[m[1:] for m in sorted(deferred.values(), key=lambda m: m[0])])
    if outref[0] == "r":
        plan.out = (outref[1], outref[2], outref[3])
    else:
        plan.value = outref[1]
    return plan


def _merge(cols: list[Any], first: tuple[Any, ...], n: int) -> list[tuple[list[int], torch.Tensor | None]] | None:
    """Gathers shared by a step's columns: the lazy columns that each need a concatenation or a permutation and
    whose rows have one shape and dtype (a tree cell's ``lc, lh, rc, rh``) are gathered as one -- every piece
    concatenated, one ``index_select`` by the columns' permutations put end to end, then split into the columns --
    instead of one concatenation and one ``index_select`` per column: on the Tree-LSTM 3 ops per level instead
    of 8, forward, and as many autograd nodes backward (measured, SST batch 20, interleaved A/B: forward 10.33 ->
    10.04 ms, backward 12.91 -> 12.46 ms; planning ~0.3 ms more per plan built).  ``None``: nothing to share.
    Only columns of one row per member whose pieces are all steps of this plan (a cache hit reuses the gathers
    unchanged: see :mod:`graphsub.dynamic.plancache`)."""
    by: dict[Any, list[int]] = {}
    for j, c in enumerate(cols):
        if c[0] != L or (len(c[1]) < 2 and c[2] is None) or any(p[0] < 0 for p in c[1]):
            continue
        x = first[j]
        shape = x.shape
        if shape is None or len(shape) < 1 or shape[0] != 1:
            continue
        by.setdefault((tuple(shape[1:]), x.dtype), []).append(j)
    out: list[tuple[list[int], torch.Tensor | None]] = []
    for js in by.values():
        if len(js) < 2:
            continue
        perms = [cols[j][2] for j in js]
        idx = None
        if any(p is not None for p in perms):
            flat: list[int] = []
            for k, p in enumerate(perms):
                base = k * n
                flat.extend(range(base, base + n) if p is None else [v + base for v in p])
            idx = int64_tensor(flat)
        out.append((js, idx))
    made: dict[int, torch.Tensor] = {}  # the permutations as tensors, one per list (a state's two parts share it)
    for j, c in enumerate(cols):
        if c[0] == L and type(c[2]) is list:
            t = made.get(id(c[2]))
            if t is None:
                t = made[id(c[2])] = int64_tensor(c[2])
            cols[j] = (L, c[1], t)
    return out or None


def _siblings(ms: list[DagNode], j: int) -> bool:
    """Whether every member's input ``j`` is another output of the node whose output input ``j - 1`` is, the
    first member's parts holding for all (a cell's ``(c, h)`` state read whole): then column ``j`` gathers the same
    rows of the same steps as column ``j - 1``, only another part."""
    f = ms[0].inputs
    ka, kb = f[j - 1].part, f[j].part
    if ka < 0:
        return False
    for m in ms:
        a = m.inputs[j - 1]
        b = m.inputs[j]
        if type(a) is not LazyTensor or type(b) is not LazyTensor or a.part != ka or b.part != kb \
                or a.inputs[0] is not b.inputs[0]:
            return False
    return True


def _chunked(st: int, rows: Any, runs: list[dict[tuple[int, int], int]]) -> Any:
    """``rows`` of step ``st`` as a chunk index when they are exactly one of its chunks, else as they are."""
    if type(rows) is tuple and st >= 0:
        k = runs[st].get(rows)
        if k is not None:
            return k
    return rows


def column(j: int, x: Any, ms: list[DagNode], deferred: dict[int, Any],
            runs: list[dict[tuple[int, int], int]], listed: bool = False) -> Any:
    """Column ``j`` of a batched step (module docstring); ``listed``: a gather's permutation as a list of ints
    (plan building turns it into a tensor, or into a shared gather's, :func:`_merge`)."""
    if type(x) is not LazyTensor:
        if x.requires_grad:
            return (P, x)
        col = [m.inputs[j] for m in ms]
        if deferred and any(id(t) in deferred for t in col):  # mask orders, or tensors (same key, not masks)
            return (M, [deferred[id(t)][0] if id(t) in deferred else t for t in col])
        return (D, torch.cat(col))
    xs = [m.inputs[j] for m in ms]
    if x.kid in DATA_KIDS:
        rows = _data_rows(x, xs)
        if rows is not None:
            return (D, rows)
    n = len(xs)
    k = x.part
    # the usual case, in three passes over the members: every input is a row of one step (or output k of it)
    if k < 0:
        gs = [y.grp for y in xs]  # an output of a multi-output node has no group: it cannot match
        g0 = gs[0]
        if g0 is not None and g0.pos >= 0 and gs.count(g0) == n:
            st = g0.pos
            return (L, [(st, -1, _chunked(st, _rows([y.row for y in xs]), runs))], None)
    elif [y.part for y in xs].count(k) == n:
        srcs = [y.inputs[0] for y in xs]
        gs = [c.grp for c in srcs]
        g0 = gs[0]
        if g0 is not None and g0.pos >= 0 and gs.count(g0) == n:
            st = g0.pos
            return (L, [(st, k, _chunked(st, _rows([c.row for c in srcs]), runs))], None)
    # several sources: one piece per (step, part) or earlier value, then a permutation into member order
    by: dict[Any, tuple[int, Any, list[int], list[int]]] = {}
    for p, y in enumerate(xs):
        part = y.part
        c = y if part < 0 else y.inputs[0]
        cg = c.grp
        st = cg.pos if cg is not None else -1
        if st >= 0:
            gkey = (st, part)
            ent = by.get(gkey)
            if ent is not None:
                ent[2].append(c.row)
                ent[3].append(p)
                continue
            by[gkey] = (st, part, [c.row], [p])
        else:  # computed by an earlier run (or in another trace)
            t, r = _computed(y)
            ent = by.get(id(t))
            if ent is None:
                ent = by[id(t)] = (-1, t, [], [])
            ent[2].append(r or 0)
            ent[3].append(p)
    pieces = []
    order: list[int] = []
    for st, part, rs, ps in by.values():
        pieces.append((st, part, _chunked(st, _rows(rs), runs)))
        order.extend(ps)
    perm = None
    if order != list(range(n)):
        inv = [0] * n
        for k, p in enumerate(order):
            inv[p] = k
        perm = inv if listed else int64_tensor(inv)
    return (L, pieces, perm)


def _data_rows(x: LazyTensor, xs: list[Any]) -> torch.Tensor | None:
    """The members' data nodes (deferred word ids, :func:`~graphsub.dynamic.record.data_node`) stacked into one
    tensor when they all hold one value (a key id stands for one number of values); ``None`` otherwise."""
    kid = x.kid
    if len(x.inputs[0].values) != 1 or [y.kid for y in xs].count(kid) != len(xs) \
            or [y.value for y in xs].count(None) != len(xs):  # a value made already may have been changed in place
        return None
    return int64_tensor([y.inputs[0].values[0] for y in xs])


def _computed(x: LazyTensor) -> tuple[Any, int | None]:
    """Where the value of ``x`` (not in the plan being built) is; a node of another trace is evaluated first."""
    src = source(x)
    if src is None:
        x.trace.evaluate(x)
        src = source(x)
    if src is None:
        raise LazyError(f"{x!r}: input not computed and not in this plan")
    return src


def _rows(rows: list[int]) -> Any:
    r0 = rows[0]
    if rows == list(range(r0, r0 + len(rows))):
        return (r0, r0 + len(rows))
    return int64_tensor(rows)


def reference(x: Any, deferred: dict[int, Any]) -> Any:
    if type(x) is LazyTensor:
        c = x if x.part < 0 else x.inputs[0]
        st = c.grp.pos if c.grp is not None else -1
        if st >= 0:
            return ("r", st, x.part, c.row)
        if x.kid in DATA_KIDS:  # deferred data read by a member-by-member step: its tensor (made now if not yet)
            return ("v", data_values(x.inputs[0]) if x.value is None else x.value)
        return ("v", resolve_row(*_computed(x)))
    if x.requires_grad:
        return ("p", x)
    if id(x) in deferred:
        return ("m", deferred[id(x)][0])
    return ("v", x)


# ----------------------------------------------------------------------------------------- running
@dataclass
class BatchState:
    """What running plans learns: keys checked by the first-use comparison, keys that must not be batched."""

    checked: set[int] = field(default_factory=set)
    unbatchable: set[int] = field(default_factory=set)
    tol: float = 1e-5
    defer_weight_grads: bool = True  # one weight-gradient GEMM per nn.Linear per backward (graphsub.dynamic.wgrad)


def run_plan(plan: Plan, ops: dict[int, OpDef], state: BatchState) -> tuple[Any, int, list[Any]]:
    """Run ``plan`` (autograd on); returns the output value, the number of op calls and every step's value
    (a batched value, or a :class:`PerMember` list).  With ``state.defer_weight_grads`` the ``nn.Linear`` calls
    of its steps leave their weight gradients to one GEMM each per backward pass (:mod:`graphsub.dynamic.wgrad`)."""
    with deferring() if state.defer_weight_grads else nullcontext():
        return _run_plan(plan, ops, state)


def _run_plan(plan: Plan, ops: dict[int, OpDef], state: BatchState) -> tuple[Any, int, list[Any]]:
    vals: list[Any] = []
    calls = 0
    masks = [draw_mask(shape, dtype, p) for shape, dtype, p in plan.masks]
    run = _Run(plan.steps, vals, masks)
    for st in plan.steps:
        op = ops[st.kid]
        if not st.batched:
            res: Any = PerMember(_call(op, [_deref(r, vals, masks) for r in refs]) for refs in st.cols)
            calls += st.n
        else:
            cols = [run.column(c) for c in st.cols] if st.merged is None else run.columns(st)
            if st.kid in state.unbatchable:
                res = PerMember(_call(op, _row_args(st.cols, cols, r)) for r in range(st.n))
                calls += st.n
            elif type(op.func) is RowLoss:  # exact by construction: one scalar per member
                res = PerMember(_call(op, cols).unbind(0))
                calls += 1
            else:
                res = _call(op, cols)
                calls += 1
                if st.n > 1 and st.kid not in state.checked:
                    one = _OneRow(op, st.cols, cols)
                    if rows_agree(res, st.n, one, state.tol):
                        state.checked.add(st.kid)
                    else:
                        state.unbatchable.add(st.kid)
                        res = PerMember(one(r) for r in range(st.n))
                        calls += st.n
        vals.append(res)
    if plan.out is None:
        return plan.value, calls, vals
    return _deref(("r", *plan.out), vals, masks), calls, vals


class _OneRow:
    """Member ``r`` of a batched step run alone, on row ``r`` of every column."""

    def __init__(self, op: OpDef, spec: list[Any], cols: list[Any]):
        self.op, self.spec, self.cols = op, spec, cols

    def __call__(self, r: int) -> Any:
        return _call(self.op, _row_args(self.spec, self.cols, r))


def store(groups: Sequence[Group], vals: list[Any]) -> None:
    """Leave the values of a run on the groups (batched) or their nodes (member by member) and release the
    groups' member lists, so that any node of the run can be read later (:func:`~graphsub.dynamic.dag.source`)."""
    for g, v in zip(groups, vals, strict=True):
        if type(v) is PerMember:
            for m, x in zip(g.members, v, strict=True):
                m.value = x
        else:
            g.value = v
        g.members = []


def _call(op: OpDef, values: list[Any]) -> Any:
    args, kwargs = fill(op.template, values)
    return op.func(*args, **kwargs)


def _row_args(spec: list[Any], cols: list[Any], r: int) -> list[Any]:
    return [c if s[0] == P else c[r:r + 1] for s, c in zip(spec, cols, strict=True)]


class _Run:
    """The values of a plan's steps so far, and what a column reads of them."""

    def __init__(self, steps: list[Step], vals: list[Any], masks: list[torch.Tensor]):
        self.steps, self.vals, self.masks = steps, vals, masks
        self.splits: dict[tuple[int, int], tuple[torch.Tensor, ...]] = {}

    def column(self, c: Any) -> Any:
        kind = c[0]
        if kind in (P, D):
            return c[1]
        if kind == M:
            return torch.cat([self.masks[k] if type(k) is int else k for k in c[1]])
        pieces, perm = c[1], c[2]
        ts = [self.piece(p) for p in pieces]
        t = ts[0] if len(ts) == 1 else torch.cat(ts)
        return t if perm is None else t.index_select(0, perm)

    def columns(self, st: Step) -> list[Any]:
        """The columns of ``st``, those of its shared gathers (:func:`_merge`) made together."""
        assert st.merged is not None
        cols: list[Any] = [None] * len(st.cols)
        for js, idx in st.merged:
            t = torch.cat([self.piece(p) for j in js for p in st.cols[j][1]])
            if idx is not None:
                t = t.index_select(0, idx)
            for j, v in zip(js, t.split(st.n), strict=True):
                cols[j] = v
        for j, c in enumerate(st.cols):
            if cols[j] is None:
                cols[j] = self.column(c)
        return cols

    def piece(self, p: tuple[int, Any, Any]) -> torch.Tensor:
        st, part, rows = p
        if st < 0:
            t = part
        else:
            v = self.vals[st]
            if type(rows) is int:  # chunk ``rows`` of the step (see layout.layout_rows): its value split once
                sizes = self.steps[st].chunks
                assert sizes is not None
                if type(v) is PerMember:
                    start = sum(sizes[:rows])
                    rows = (start, start + sizes[rows])
                else:
                    key = (st, part)
                    parts = self.splits.get(key)
                    if parts is None:
                        parts = self.splits[key] = torch.split(v if part < 0 else v[part], sizes)
                    return parts[rows]
            if type(v) is PerMember:
                idx = range(rows[0], rows[1]) if type(rows) is tuple else rows.tolist()
                got = [v[r] if part < 0 else v[r][part] for r in idx]
                return got[0] if len(got) == 1 else torch.cat(got)
            t = v if part < 0 else v[part]
        if type(rows) is tuple:
            r0, r1 = rows
            return t if r0 == 0 and r1 == t.shape[0] else t[r0:r1]
        return t.index_select(0, rows)


def _deref(r: Any, vals: list[Any], masks: list[torch.Tensor]) -> Any:
    kind = r[0]
    if kind == "m":
        return masks[r[1]]
    if kind != "r":
        return r[1]
    _, st, part, row = r
    v = vals[st]
    if type(v) is PerMember:
        m = v[row]
        return m if part < 0 else m[part]
    return resolve_row(v if part < 0 else v[part], row)


def rows_agree(out: Any, n: int, call_one: Callable[[int], Any], tol: float) -> bool:
    """First-use batching check: ``out`` (a batched call over ``n`` instances) has ``n`` rows per output, and its
    first and last rows equal ``call_one(r)``, the instance run alone."""
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if not all(isinstance(o, torch.Tensor) and o.dim() > 0 and o.shape[0] == n for o in outs):
        return False
    with torch.no_grad():
        for r in sorted({0, n - 1}):
            one = call_one(r)
            ones = tuple(one) if isinstance(one, (tuple, list)) else (one,)
            if len(ones) != len(outs):
                return False
            for a, b in zip(ones, outs, strict=True):
                if not isinstance(a, torch.Tensor) or a.shape != b[r:r + 1].shape or \
                        not torch.allclose(a, b[r:r + 1], atol=tol, rtol=tol):
                    return False
    return True


__all__ = [
    "BatchState",
    "D",
    "E",
    "L",
    "OpDef",
    "P",
    "PerMember",
    "Plan",
    "Step",
    "build_plan",
    "column",
    "numbered",
    "reference",
    "rows_agree",
    "run_index",
    "run_plan",
]
