"""The reuse engine (the thesis' §4.7 and §5.1's context manager), plus signature-keyed batching.

:class:`Reuse` runs lazy traces (``with lazy(engine, examples=n): ...``) in two stages:

1. **collection** (the first ``collect`` traces, the thesis' ``P_Collect``): the DAG is tiled
   by the queue search (:func:`~graphsub.dynamic.signature.tile`) with depth ``depth``
   (``P_Depth``) and every signature is counted; the trace itself is evaluated node by node.
   At the end, signatures whose count per example reaches ``freq`` (``P_Freq``) become the
   frequent patterns;
2. **optimization**: each later DAG is walked from its output; a node whose subgraph signature is
   frequent is replaced by one call of the pattern's code (generated and compiled once per
   signature, :mod:`graphsub.dynamic.codegen`), other nodes stay single ops.

With ``batching=True`` (beyond the thesis; DyNet's autobatching and TensorFlow Fold's dynamic
batching, keyed here by the signatures), the units of the optimized DAG (pattern calls and single
ops) are levelled (a unit's level is one more than its inputs') and all units of one level with
the same key -- pattern id or op and constants, input shapes, parameter identities -- run as one
call on inputs concatenated along dimension 0.  A key is batched only when every tensor of the
unit has a leading dimension of 1 (one row per instance) and a first-use check agrees: the first
batched call of every key is compared with instance-by-instance calls, and a key that differs
(an op that mixes rows) is never batched again.  Inputs are gathered with one ``index_select``
per source batch, outputs stay in their batch until a consumer needs them, and autograd runs
through it all, so the backward pass is batched too.

With batching and no frequent patterns (``Reuse(depth=1, collect=0, batching=True)``: op-level,
signature-keyed batching, the fast path) every node is its own unit, and the tracer itself puts each
node in its batch group as it records it (:class:`~graphsub.dynamic.dag.Group`, keyed by the node's
level and key id, both known from the op memo), so there is no grouping pass: the groups become the
steps of a :class:`~graphsub.dynamic.plan.Plan` (its gather programs are the ``optimize`` time) and run
level by level; a step's inputs that are the rows of one earlier batch in order are passed as they
are, others take one ``index_select`` per source and a ``cat``; values stay in their batch (the group's
``value``, the node's ``row``) and only the output is sliced out.

Timings of the last run are in :attr:`Reuse.last` (``optimize_s``, ``execute_s``, counts).
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

from graphsub.dynamic.calls import fill, int64_tensor, new_kid
from graphsub.dynamic.capture import capturing
from graphsub.dynamic.codegen import compile_pattern, generate
from graphsub.dynamic.dag import DagNode, Group, evaluate_plain, is_param, resolve_row, source
from graphsub.dynamic.lazy import LazyError, LazyTensor, ModeNeed
from graphsub.dynamic.plan import BatchState, build_plan, rows_agree, run_plan, store
from graphsub.dynamic.plancache import PlanCache
from graphsub.dynamic.schedule import relevel as relevel_groups
from graphsub.dynamic.signature import PatternEntry, PatternTable, Subgraph, consumer_map, extract, reachable, tile


@dataclass
class Unit:
    """One call of the optimized DAG: a pattern instance or a single op."""

    root: LazyTensor
    inputs: list[Any]
    entry: PatternEntry | None = None
    key: Any = None
    level: int = 0


@dataclass
class RunStats:
    optimize_s: float = 0.0
    execute_s: float = 0.0
    units: int = 0
    pattern_units: int = 0
    ops_covered: int = 0
    ops_total: int = 0
    calls: int = 0
    collecting: bool = False


@dataclass
class Reuse:
    """Frequent-subgraph reuse with optional batching (module docstring).

    ``depth``/``freq``/``collect``: the thesis' ``P_Depth``, ``P_Freq`` (occurrences per
    example) and ``P_Collect``; ``shapes``: shape (True) or structure (False) equivalence;
    ``backend``: ``python``, ``fx`` or ``inductor``; ``batching``: run same-key units of a level
    as one call; ``check_tol``: tolerance of the first-use batching check; ``defer_masks``: leave
    dropout masks to be drawn where the trace's plan runs (:mod:`graphsub.dynamic.prefetch`);
    ``capture_modules``: record module and ``@cell`` calls as one node each (:mod:`graphsub.dynamic.capture`);
    ``relevel``: regroup the steps per op key, as late as possible where that merges them
    (:mod:`graphsub.dynamic.schedule`; default: on with ``capture_modules``.  Measured on the captured Tree-LSTM,
    SST batch 20, steps of the two engines interleaved: 57 -> 24 steps, forward + backward 1.8 ms shorter for
    0.8 ms more planning, the full step 2% shorter; op-level traces keep the tracer's levels unless asked);
    ``plan_cache``: keep that
    many plans by structure (:mod:`graphsub.dynamic.plancache`; 0: none).
    """

    depth: int = 8
    freq: float = 1.0
    collect: int = 3
    shapes: bool = True
    backend: str = "python"
    batching: bool = False
    check_tol: float = 1e-5
    defer_masks: bool = False
    capture_modules: bool = False
    relevel: bool | None = None
    plan_cache: int = 0
    hash_fn: Any = hash
    table: PatternTable = field(init=False)
    traces_seen: int = 0
    examples_seen: int = 0
    frequent: set[int] = field(default_factory=set)
    last: RunStats = field(default_factory=RunStats)
    unbatchable_ops: set[Any] = field(default_factory=set)
    checked_ops: set[Any] = field(default_factory=set)
    batch_state: BatchState = field(init=False)

    def __post_init__(self) -> None:
        if self.relevel is None:
            self.relevel = self.capture_modules
        self.table = PatternTable(self.hash_fn)
        self.batch_state = BatchState(tol=self.check_tol)
        self.cache = PlanCache(self.plan_cache) if self.plan_cache > 0 else None
        self.mode_need = ModeNeed()  # whether its capturing traces still need the lazy function mode

    def capture_scope(self) -> AbstractContextManager[None]:
        """What ``lazy()`` enters while a trace of this engine records with module capture on."""
        return capturing()

    @property
    def collecting(self) -> bool:
        return self.traces_seen < self.collect

    # ----------------------------------------------------------------- stage 1
    def collect_trace(self, out: LazyTensor, examples: int) -> list[Subgraph]:
        subs = tile(out, self.depth, consumer_map(out), self.shapes)
        for s in subs:
            if s.op_count > 1:
                self.table.add(s)
        self.traces_seen += 1
        self.examples_seen += examples
        if not self.collecting:
            self.frequent = {e.pid for e in self.table.entries()
                             if e.count / max(self.examples_seen, 1) >= self.freq}
        return subs

    def patterns(self) -> list[PatternEntry]:
        """The frequent patterns (after collection), most frequent first."""
        return sorted((e for e in self.table.entries() if e.pid in self.frequent), key=lambda e: -e.count)

    # ----------------------------------------------------------------- stage 2
    def plan(self, out: LazyTensor) -> list[Unit]:
        """Units of the optimized DAG in topological order (inputs first)."""
        consumers = consumer_map(out) if self.frequent else {}
        units: dict[int, Unit] = {}
        order: list[Unit] = []
        stack: list[tuple[LazyTensor, bool]] = [(out, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(units[node.gid])
                continue
            if node.gid in units or node.value is not None:
                continue
            unit = self._unit(node, consumers)
            units[node.gid] = unit
            stack.append((node, True))
            for i in reversed(unit.inputs):
                if type(i) is LazyTensor and i.gid not in units and i.value is None:
                    stack.append((i, False))
        return order

    def _unit(self, node: LazyTensor, consumers: dict[int, list[LazyTensor]]) -> Unit:
        if self.frequent:
            sub = extract(node, self.depth, consumers, self.shapes)
            if sub.op_count > 1:
                entry = self.table.lookup(sub)
                if entry is not None and entry.pid in self.frequent:
                    if entry.fn is None:
                        entry.source, fn = generate(sub, f"pattern_{entry.pid}")
                        entry.fn = compile_pattern(fn, self.backend)
                    return Unit(node, sub.inputs, entry)
        return Unit(node, list(node.inputs))

    # ----------------------------------------------------------------- execution
    def run(self, trace: Any, out: LazyTensor) -> Any:
        st = RunStats()
        self.last = st
        if self.collecting:
            t0 = time.perf_counter()
            self.collect_trace(out, trace.examples)
            st.optimize_s = time.perf_counter() - t0
            st.collecting = True
            t0 = time.perf_counter()
            value = evaluate_plain(out)
            st.execute_s = time.perf_counter() - t0
            return value
        if self.batching and not self.frequent:  # op-level, signature-keyed batching (no patterns)
            return self._run_ops(trace, out, st)
        t0 = time.perf_counter()
        units = self.plan(out)
        st.units = len(units)
        st.pattern_units = sum(u.entry is not None for u in units)
        st.ops_covered = sum(u.entry.op_count for u in units if u.entry is not None)
        st.ops_total = st.ops_covered + st.units - st.pattern_units
        if self.batching:
            _level(units)
        st.optimize_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if self.batching:
            self._run_batched(units, st)
        else:
            for u in units:
                u.root.value = self._call(u, [_val(i) for i in u.inputs])
                st.calls += 1
        st.execute_s = time.perf_counter() - t0
        return out.value

    # ----------------------------------------------------------------- op-level batching
    @property
    def group_nodes(self) -> bool:
        """Whether a new trace should group its nodes while recording (op-level batching, no patterns)."""
        return self.batching and not self.collecting and not self.frequent

    def _run_ops(self, trace: Any, out: LazyTensor, st: RunStats) -> Any:
        """Batched run with one unit per node, through a :class:`~graphsub.dynamic.plan.Plan`.  When the trace
        grouped its nodes while recording (:attr:`group_nodes`) its pending groups are the plan's steps (the
        whole pending trace, not only what ``out`` needs); otherwise the nodes ``out`` needs are grouped first."""
        t0 = time.perf_counter()
        if trace is not None and trace.grouping and out.trace is trace:
            groups = trace.take_pending()
        else:
            groups = _group(_needed(trace, out))
        st.units = st.ops_total = sum(len(g.members) for g in groups)
        if not groups:
            raise LazyError(f"{out!r} was not recorded in this trace's pending groups")
        masks = trace.masks if trace is not None else None
        if self.cache is not None:  # keyed by the recorded groups: a hit skips the regrouping too
            plan, groups = self.cache.plan(groups, out, masks, layout=self.capture_modules,
                                           regroup=relevel_groups if self.relevel else None)
        else:
            if self.relevel:
                groups = relevel_groups(groups)
            plan = build_plan(groups, out, masks, layout=self.capture_modules)
        st.optimize_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out.value, st.calls, vals = run_plan(plan, plan.ops, self.batch_state)
        store(groups, vals)
        st.execute_s = time.perf_counter() - t0
        return out.value

    def _call(self, u: Unit, vals: list[Any]) -> Any:
        if u.entry is not None:
            u.entry.calls += 1
            assert u.entry.fn is not None
            return u.entry.fn(*vals)
        args, kwargs = fill(u.root.template, vals)
        return u.root.func(*args, **kwargs)

    def _run_batched(self, units: list[Unit], st: RunStats) -> None:
        store: dict[int, tuple[torch.Tensor, int | None]] = {}
        groups: dict[tuple[int, Any], list[Unit]] = defaultdict(list)
        for u in units:
            u.key = self._key(u)
            groups[(u.level, u.key if u.key is not None else ("single", u.root.gid))].append(u)
        for (_, key), members in sorted(groups.items(), key=lambda kv: kv[0][0]):
            if key is not None and key[0] == "item":
                for u in members:  # output k of a batched multi-output unit: no call needed
                    t, r = store[u.inputs[0].gid]
                    store[u.root.gid] = (t[key[1]], r)
                continue
            if key is None or len(members) == 1 or key[0] == "single" or key in self.unbatchable_ops:
                for u in members:
                    v = self._call(u, [_get(store, i) for i in u.inputs])
                    store[u.root.gid] = (v, None)
                    st.calls += 1
                continue
            first = members[0]
            cols = []
            for k, x in enumerate(first.inputs):
                if type(x) is not LazyTensor and is_param(x):
                    cols.append(x)
                else:
                    cols.append(_gather([_src(store, m.inputs[k]) for m in members]))
            out = self._call(first, cols)
            st.calls += 1
            if first.entry is not None:
                first.entry.batched_calls += 1
                first.entry.calls += len(members) - 1
            if key not in self.checked_ops:
                if not self._check(members, store, out):
                    self.unbatchable_ops.add(key)
                    for u in members:
                        store[u.root.gid] = (self._call(u, [_get(store, i) for i in u.inputs]), None)
                    st.calls += len(members)
                    continue
                self.checked_ops.add(key)
            for r, u in enumerate(members):
                store[u.root.gid] = (out, r)
        for u in units:
            u.root.value = resolve_row(*store[u.root.gid])

    def _check(self, members: list[Unit], store: dict[int, Any], out: Any) -> bool:
        def one(r: int) -> Any:
            return self._call(members[r], [_get(store, i) for i in members[r].inputs])

        return rows_agree(out, len(members), one, self.check_tol)

    def _key(self, u: Unit) -> Any:
        """Batching key, or ``None`` when the unit cannot be batched (not one row per instance)."""
        nodes = [u.root] if u.entry is None else None
        if u.entry is None and u.root.name == "getitem" and type(u.inputs[0]) is LazyTensor \
                and u.inputs[0].shape is None and type(u.root.template[0][1]) is int:
            return ("item", u.root.template[0][1])
        if u.root.shape is None:
            metas = u.root.meta
            if not isinstance(metas, tuple) or any(m.dim() == 0 or m.shape[0] != 1 for m in metas):
                return None
        elif len(u.root.shape) == 0 or u.root.shape[0] != 1:
            return None
        parts: list[Any] = []
        for x in u.inputs:
            if type(x) is LazyTensor:
                if x.shape is None or len(x.shape) == 0 or x.shape[0] != 1:
                    return None
                parts.append((tuple(x.shape), x.dtype))
            elif is_param(x):
                parts.append(("P", id(x)))
            else:
                if x.dim() == 0 or x.shape[0] != 1:
                    return None
                parts.append((tuple(x.shape), x.dtype))
        if nodes is None:
            assert u.entry is not None
            return ("pattern", u.entry.pid, tuple(parts))
        return ("op", u.root.func, u.root.ckey, tuple(parts))

    def report(self) -> dict[str, Any]:
        """Pattern statistics (the thesis' Table 6.3 columns) and batching state."""
        pats = self.patterns()
        return {"distinct_signatures": len(self.table), "frequent": len(pats),
                "occurrences": sum(e.count for e in pats),
                "avg_occurrence": (sum(e.count for e in pats) / len(pats)) if pats else 0.0,
                "avg_op_count": (sum(e.op_count for e in pats) / len(pats)) if pats else 0.0,
                "hash_collisions": self.table.collisions, "examples_seen": self.examples_seen,
                "unbatchable_keys": len(self.unbatchable_ops),
                "plan_cache": self.cache.report() if self.cache is not None else None,
                "lazy_mode": self.mode_need.describe() if self.capture_modules else "every trace (op level)"}


def _needed(trace: Any, out: LazyTensor) -> list[DagNode]:
    """Nodes ``out`` needs that have no value yet, in topological order (one backward scan of the trace)."""
    need = {out.gid}
    order: list[DagNode] = []
    found = 0
    refs = trace.refs if trace is not None and out.trace is trace else []
    for ref in reversed(refs):
        n = ref()
        if n is not None and n.gid in need:
            found += 1
            if source(n) is not None:
                continue
            order.append(n)
            for i in n.inputs:
                if type(i) is LazyTensor:
                    need.add(i.gid)
    if found != len(need):  # some input lives in another trace: walk the DAG itself
        return [n for n in reachable(out) if source(n) is None]
    order.reverse()
    return order


def _group(order: list[DagNode]) -> list[Group]:
    """Group nodes (in topological order) by level and key id, as a grouping trace does while recording."""
    groups: dict[int, Group] = {}
    for n in order:
        if n.part >= 0:
            continue
        gk = n.level * 4294967296 + (n.kid if n.kid >= 0 else new_kid(False))
        g = groups.get(gk)
        if g is None:
            g = groups[gk] = Group(n.level, gk % 4294967296)
        n.grp = g
        n.row = len(g.members)
        g.members.append(n)
    return [groups[k] for k in sorted(groups)]


def _level(units: list[Unit]) -> None:
    lvl: dict[int, int] = {}
    for u in units:
        u.level = 1 + max((lvl.get(i.gid, 0) for i in u.inputs if type(i) is LazyTensor), default=0)
        lvl[u.root.gid] = u.level


def _val(x: Any) -> Any:
    return x.value if type(x) is LazyTensor else x


def _src(store: dict[int, tuple[torch.Tensor, int | None]], x: Any) -> tuple[torch.Tensor, int]:
    if type(x) is LazyTensor:
        if x.gid in store:
            t, r = store[x.gid]
            return (t, 0) if r is None else (t, r)
        return (x.value, 0)
    return (x, 0)


def _get(store: dict[int, tuple[torch.Tensor, int | None]], x: Any) -> Any:
    if type(x) is LazyTensor:
        if x.gid in store:
            return resolve_row(*store[x.gid])
        return x.value
    return x


def _gather(srcs: list[tuple[torch.Tensor, int]]) -> torch.Tensor:
    """Rows ``srcs[i]`` stacked in order: one ``index_select`` per source tensor."""
    by_t: dict[int, tuple[torch.Tensor, list[int], list[int]]] = {}
    for p, (t, r) in enumerate(srcs):
        ent = by_t.get(id(t))
        if ent is None:
            by_t[id(t)] = ent = (t, [], [])
        ent[1].append(p)
        ent[2].append(r)
    parts = []
    positions: list[int] = []
    for t, pos, rows in by_t.values():
        r0 = rows[0]
        if rows == list(range(r0, r0 + len(rows))):  # a run of rows in order: the tensor or a view of it
            parts.append(t if r0 == 0 and len(rows) == t.shape[0] else t[r0:r0 + len(rows)])
        else:
            parts.append(t.index_select(0, int64_tensor(rows)))
        positions.extend(pos)
    if len(parts) == 1:
        return parts[0]
    if all(p.shape[0] == 1 for p in parts) and positions == list(range(len(positions))):
        return torch.cat(parts)
    cat = torch.cat(parts)
    if positions == list(range(len(positions))):
        return cat
    inv = [0] * len(positions)
    for k, p in enumerate(positions):
        inv[p] = k
    return cat.index_select(0, int64_tensor(inv))


__all__ = ["Reuse", "RunStats", "Unit"]
