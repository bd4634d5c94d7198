"""End-to-end benchmark of dynamic-graph reuse (``graphsub dynamic bench``; the thesis' Tables 6.3 and 6.4).

Modes, run on the same batches, each with its own model and Adagrad optimizer built from the same seed, for two
rounds: the in-process modes taking turns in slices of 4 batches, each prefetch mode in a phase of its own after each
round, the first step of each slice or phase untimed (:func:`run_modes`):

* ``eager`` -- plain define-by-run PyTorch, one small op after another (the baseline);
* ``traced`` -- the lazy tracer, evaluated node by node (no reuse);
* ``reuse`` -- the thesis' method: depth-limited signatures collected over the first ``P_Collect``
  batches, frequent patterns generated once and called per instance (backend ``python``);
* ``reuse+batch`` -- signature-keyed batching: every level's nodes with the same key (op, constants,
  input shapes, parameter identities) run as one call (``Reuse(depth=1, collect=0, batching=True)``);
* ``prefetch`` -- the same batching, with the recording (and preprocessing) of the next batches done
  ahead of time by ``workers`` forked worker processes (:mod:`graphsub.dynamic.prefetch`); its stage
  ``trace`` is the time the main process waits for a batch's plan; its ``full`` is the wall time between
  consecutive steps, so it counts every cost the main process still has.

Per mode and stage the median time per batch (ms), leaving out the first ``warmup`` batches: preprocessing (encoding the
trees), DAG construction (tracing), optimization (the engine's ``optimize_s``), execution (forward), backward,
optimizer step, and the full step (all of them).  :func:`pattern_table` gives Table 6.3 (P_Depth 5..10 over
the first P_Collect = 3 batches, P_Freq = 1), :func:`training_equivalence` runs the same ``K`` steps eagerly
and in another mode and reports the largest loss difference.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from graphsub.dynamic.capture import report as capture_report
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyTensor, build, lazy
from graphsub.dynamic.prefetch import prefetch
from graphsub.dynamic.workloads.models import (
    BinaryTreeLSTM,
    SeqLSTM,
    TreeGRU,
    batch_loss,
    make_optimizer,
    seq_batch_loss,
)
from graphsub.dynamic.workloads.sst import SSTNotFound, Tree, Vocab, encode_tree, load_sst, synthetic_treebank

MODES = ("eager", "traced", "reuse", "reuse+batch", "prefetch", "module+batch", "module+prefetch")
PREFETCH_MODES = ("prefetch", "module+prefetch")
"""Modes whose recording is done by worker processes (their names contain ``prefetch``)."""
STAGES = ("preprocess", "trace", "optimize", "forward", "backward", "step", "full")
STAGE_LABELS = {"preprocess": "preprocessing", "trace": "DAG construction", "optimize": "optimization",
                "forward": "execution (forward)", "backward": "backward", "step": "optimizer step",
                "full": "full step"}
WORKLOADS = ("treelstm", "seqlstm", "treegru")


@dataclass
class BenchConfig:
    batches: int = 12
    batch_size: int = 20
    data: str = "synthetic"
    sst_dir: str | None = None  # the SST folder (default: $GRAPHSUB_SST); absent: the synthetic treebank, said so
    depth: int = 8
    collect: int = 3
    seed: int = 0
    workload: str = "treelstm"
    emb: int = 300
    hidden: int = 150
    warmup: int = 3
    train_steps: int = 5
    workers: int = 2
    plan_cache: int = 64
    vocab: str = "batches"  # the words of the benched trees, or of the whole SST train split ("train")
    fused_optimizer: bool = False  # torch's fused Adagrad in every mode (eager included) instead of the for-loop one
    modes: Sequence[str] = MODES
    depths: Sequence[int] = (5, 6, 7, 8, 9, 10)


@dataclass
class Workload:
    trees: list[Tree]  # raw (not yet encoded) trees, batch after batch
    vocab: Vocab
    data: str
    note: str = ""
    batches: list[list[Tree]] = field(default_factory=list)


def load_workload(cfg: BenchConfig) -> Workload:
    """``cfg.batches`` batches of raw trees (SST train split or the synthetic treebank) and their vocabulary."""
    need = cfg.batches * cfg.batch_size
    note = ""
    data = cfg.data
    trees: list[Tree] | None = None
    if cfg.vocab not in ("batches", "train"):
        raise ValueError(f"unknown vocabulary {cfg.vocab!r}; expected batches or train")
    every: list[Tree] | None = None
    if data == "sst":
        try:
            every = load_sst(cfg.sst_dir, split="train")
            trees = every[:need]
        except SSTNotFound as e:
            note = f"SST not found ({e}); using the synthetic treebank instead"
            data = "synthetic"
    elif data != "synthetic":
        raise ValueError(f"unknown data {cfg.data!r}; expected sst or synthetic")
    if trees is None:
        trees = synthetic_treebank(need, seed=cfg.seed)
    # the benched trees' words (the embedding, and with it Adagrad's dense update, stays small), or the whole train
    # split's as a user training on SST has them
    vocab = Vocab.build(every if cfg.vocab == "train" and every is not None else trees)
    w = Workload(trees, vocab, data, note)
    w.batches = [trees[i:i + cfg.batch_size] for i in range(0, len(trees), cfg.batch_size)]
    return w


def make_model(cfg: BenchConfig, vocab: Vocab) -> nn.Module:
    torch.manual_seed(cfg.seed)
    if cfg.workload == "treelstm":
        return BinaryTreeLSTM(len(vocab) + 1, emb_dim=cfg.emb, hidden=cfg.hidden)
    if cfg.workload == "seqlstm":
        return SeqLSTM(len(vocab) + 1, emb_dim=cfg.emb, hidden=cfg.hidden)
    if cfg.workload == "treegru":
        return TreeGRU(len(vocab) + 1, emb_dim=cfg.emb, hidden=cfg.hidden)
    raise ValueError(f"unknown workload {cfg.workload!r}; expected one of {', '.join(WORKLOADS)}")


def loss_fn(cfg: BenchConfig) -> Callable[[Any, list[Tree]], torch.Tensor]:
    return seq_batch_loss if cfg.workload == "seqlstm" else batch_loss


def make_engine(mode: str, cfg: BenchConfig, backend: str = "python") -> Reuse | None:
    if mode in ("eager", "traced"):
        return None
    if mode == "reuse":
        return Reuse(depth=cfg.depth, freq=1.0, collect=cfg.collect, backend=backend)
    if mode in ("reuse+batch", "prefetch"):
        return Reuse(depth=1, collect=0, batching=True)
    if mode in ("module+batch", "module+prefetch"):
        return Reuse(depth=1, collect=0, batching=True, capture_modules=True, plan_cache=cfg.plan_cache)
    raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


class Runner:
    """One mode: its model, optimizer and engine; :meth:`step` times one training step by stage."""

    def __init__(self, mode: str, cfg: BenchConfig, vocab: Vocab):
        self.mode = mode
        self.cfg = cfg
        self.vocab = vocab
        self.model = make_model(cfg, vocab)
        self.opt = make_optimizer(self.model, fused=cfg.fused_optimizer)
        self.engine = make_engine(mode, cfg)
        self.loss = loss_fn(cfg)
        self.times: dict[str, list[float]] = {s: [] for s in STAGES}
        self.losses: list[float] = []
        self.nodes: list[int] = []  # recorded nodes per batch (lazy modes)
        self.record: list[tuple[float, int]] = []  # prefetch modes: the workers' recording time and node count
        self.cache_report: dict[str, Any] | None = None  # prefetch modes: the last worker's plan cache
        self.stream: Any = None
        self.last_end: float | None = None
        self.cold: set[int] = set()  # steps right after another mode's (or a prefetch phase's start): not timed

    def mark_cold(self) -> None:
        """Leave the next step out of the medians: it follows another mode's step (:func:`run_modes`)."""
        self.cold.add(len(self.times["full"]))

    def _kept(self, v: list[Any], warmup: int) -> list[Any]:
        kept = [x for i, x in enumerate(v) if i >= warmup and i not in self.cold]
        return kept or v[warmup:] or v

    def start_prefetch(self, batches: list[list[Tree]]) -> None:
        """Mode ``prefetch``: start the workers on ``batches`` (then :meth:`step` takes them in order)."""
        model, vocab, loss = self.model, self.vocab, self.loss
        self.last_end = None
        self.stream = prefetch(model, batches, lambda raw: loss(model, [encode_tree(t, vocab) for t in raw]),
                               workers=self.cfg.workers, capture_modules=self.mode.startswith("module"),
                               plan_cache=self.cfg.plan_cache if self.mode.startswith("module") else 0)

    def step(self, raw: list[Tree]) -> float:
        if self.mode in PREFETCH_MODES:
            return self._step_prefetched(raw)
        clock = time.perf_counter
        t0 = clock()
        batch = [encode_tree(t, self.vocab) for t in raw]
        t1 = clock()
        self.opt.zero_grad()
        optimize = 0.0
        if self.mode == "eager":
            loss = self.loss(self.model, batch)
            t2 = t3 = clock()
        else:
            with lazy(self.engine, examples=len(batch)) as tr:
                lazy_loss = self.loss(self.model, batch)
            t2 = clock()
            recorded = len(tr.refs)  # a trace that groups while recording keeps no list (the engine counts)
            loss = build(lazy_loss)
            t3 = clock()
            if self.engine is not None:
                optimize = self.engine.last.optimize_s
            self.nodes.append(recorded or (self.engine.last.ops_total if self.engine is not None else 0))
        loss.backward()
        t4 = clock()
        self.opt.step()
        t5 = clock()
        value = float(loss.detach())
        for stage, dt in (("preprocess", t1 - t0), ("trace", t2 - t1), ("optimize", optimize),
                          ("forward", (t3 - t2 - optimize) if self.mode != "eager" else t2 - t1),
                          ("backward", t4 - t3), ("step", t5 - t4), ("full", t5 - t0)):
            self.times[stage].append(dt)
        if self.mode == "eager":
            self.times["trace"][-1] = 0.0
        self.losses.append(value)
        return value

    def _step_prefetched(self, raw: list[Tree]) -> float:
        clock = time.perf_counter
        t0 = clock() if self.last_end is None else self.last_end
        self.opt.zero_grad()
        got, lazy_loss = next(self.stream)
        if got is not raw:
            raise RuntimeError("prefetch: batches out of order")
        stats = getattr(lazy_loss.trace, "stats", None)
        if stats:
            self.record.append((stats["record_s"], stats["nodes"]))
            self.cache_report = stats.get("plan_cache")
        t1 = clock()
        loss = build(lazy_loss)
        t2 = clock()
        loss.backward()
        t3 = clock()
        self.opt.step()
        t4 = clock()
        self.last_end = t4
        for stage, dt in (("preprocess", 0.0), ("trace", t1 - t0), ("optimize", 0.0), ("forward", t2 - t1),
                          ("backward", t3 - t2), ("step", t4 - t3), ("full", t4 - t0)):
            self.times[stage].append(dt)
        value = float(loss.detach())
        self.losses.append(value)
        return value

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def medians(self, warmup: int) -> dict[str, float]:
        return {s: 1000 * statistics.median(self._kept(v, warmup)) for s, v in self.times.items()}

    def recording(self, warmup: int) -> dict[str, float] | None:
        """Median recording time per batch (ms), recorded nodes per batch and time per node (us): measured here
        for in-process lazy modes (``trace`` stage), in the workers for prefetch modes."""
        if self.mode in PREFETCH_MODES:
            rows = self.record[warmup:] or self.record
            if not rows:
                return None
            ms, nodes = 1000 * statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
        else:
            if not self.nodes:
                return None
            ms = 1000 * statistics.median(self._kept(self.times["trace"], warmup))
            nodes = statistics.median(self._kept(self.nodes, warmup))
        return {"ms_per_batch": ms, "nodes_per_batch": nodes, "us_per_node": 1000 * ms / nodes if nodes else 0.0}


SLICE = 4
"""Batches each in-process mode runs in a row before the next mode's turn (:func:`run_modes`)."""


def host_probe_ms(n: int = 20000) -> float:
    """Milliseconds of a fixed pure-Python loop (a few ms on this VM): how fast the host runs interpreter-bound work
    right now.  Recorded between the modes' turns (``host_probe_ms`` in the bench's JSON) so that runs made while the
    host was busy can be told apart: the captured modes are bound by Python and slow down with the host more than
    eager's page-fault-bound backward does."""
    t0 = time.perf_counter()
    acc: dict[int, int] = {}
    for i in range(n):
        acc[i & 255] = acc.get(i & 255, 0) + (i ^ (i >> 3))
    return 1000 * (time.perf_counter() - t0)


def run_modes(cfg: BenchConfig, work: Workload, rounds: int = 2, slice_size: int = SLICE,
              probes: list[float] | None = None) -> dict[str, Runner]:
    """All modes for ``rounds`` rounds over the batches.  The in-process modes take turns in slices of ``slice_size``
    batches, the order rotating from one slice to the next (A B C, B C A, ...), and each mode's first step of a slice
    is left out of its medians (:meth:`Runner.mark_cold`): what is timed is a step after a step of the same mode, as
    in a training loop (measured alone, three runs: module+batch's full step is 3-13% slower right after an eager
    step, whose caches it inherits).  Why short slices: the speed of this VM changes by up to 1.4x in episodes of
    seconds (a pure-Python loop measured 23.5 ms and 33.5 ms a few seconds apart), and a mode whose 20 steps take one
    second would otherwise be timed inside one episode while eager's 20 steps (10 s) average over several.  Each
    prefetch mode runs after each round in a phase of its own, its first step left out (its workers record the
    batches ahead: between other modes' steps they would have time to spare that a training loop does not give
    them).  ``probes``, when given, receives a :func:`host_probe_ms` before each slice and each prefetch phase."""
    runners = {m: Runner(m, cfg, work.vocab) for m in cfg.modes}
    inproc = [r for r in runners.values() if r.mode not in PREFETCH_MODES]
    size = max(1, slice_size)
    turn = 0
    for _ in range(rounds):
        for s in range(0, len(work.batches), size):
            k = turn % len(inproc) if inproc else 0
            turn += 1
            if probes is not None:
                probes.append(host_probe_ms())
            for r in inproc[k:] + inproc[:k]:
                if len(inproc) > 1:
                    r.mark_cold()
                for b in work.batches[s:s + size]:
                    torch.manual_seed(cfg.seed + 1)
                    r.step(b)
                    gc.collect(0)
        for r in runners.values():
            if r.mode in PREFETCH_MODES:
                if probes is not None:
                    probes.append(host_probe_ms())
                r.mark_cold()
                run_prefetch(r, cfg, work.batches)
    return runners


def run_prefetch(r: Runner, cfg: BenchConfig, batches: list[list[Tree]]) -> None:
    r.start_prefetch(batches)
    try:
        for b in batches:
            torch.manual_seed(cfg.seed + 1)  # the masks are drawn here, when the plan runs, as eagerly
            r.step(b)
    finally:
        r.close()


def pattern_table(cfg: BenchConfig, work: Workload) -> list[dict[str, Any]]:
    """Table 6.3: for each ``P_Depth``, the frequent subgraphs (``P_Freq`` = 1) over the first ``P_Collect``
    batches: occurrences, number of distinct frequent subgraphs, average occurrence and op count."""
    rows = []
    collect = min(cfg.collect, len(work.batches))
    batches = [[encode_tree(t, work.vocab) for t in b] for b in work.batches[:collect]]
    model = make_model(cfg, work.vocab)
    fn = loss_fn(cfg)
    for d in cfg.depths:
        eng = Reuse(depth=d, freq=1.0, collect=collect)
        t0 = time.perf_counter()
        for b in batches:
            with lazy() as tr:
                loss = fn(model, b)
            eng.collect_trace(cast(LazyTensor, loss), len(b))
            del tr, loss
        rep = eng.report()
        rows.append({"depth": d, "occurrences": rep["occurrences"], "frequent": rep["frequent"],
                     "avg_occurrence": rep["avg_occurrence"], "avg_op_count": rep["avg_op_count"],
                     "distinct_signatures": rep["distinct_signatures"], "hash_collisions": rep["hash_collisions"],
                     "collect_s": time.perf_counter() - t0})
    return rows


def training_equivalence(cfg: BenchConfig, work: Workload, mode: str, steps: int) -> dict[str, Any]:
    """The same ``steps`` Adagrad steps (same seed, same batches) eagerly and in ``mode``."""
    losses: dict[str, list[float]] = {}
    weights: dict[str, list[torch.Tensor]] = {}
    for m in ("eager", mode):
        r = Runner(m, cfg, work.vocab)
        torch.manual_seed(cfg.seed + 1)
        if m in PREFETCH_MODES:
            run_prefetch(r, cfg, work.batches[:steps])
        else:
            for b in work.batches[:steps]:
                torch.manual_seed(cfg.seed + 1)
                r.step(b)
        losses[m] = r.losses
        weights[m] = [p.detach().clone() for p in r.model.parameters()]
    diff = max(abs(a - b) for a, b in zip(losses["eager"], losses[mode], strict=True))
    wdiff = max(float((a - b).abs().max()) for a, b in zip(weights["eager"], weights[mode], strict=True))
    return {"mode": mode, "steps": len(losses[mode]), "loss_max_abs_diff": diff, "param_max_abs_diff": wdiff,
            "losses_eager": losses["eager"], "losses_mode": losses[mode]}


def run_bench(cfg: BenchConfig, tables: bool = True) -> dict[str, Any]:
    """Everything ``graphsub dynamic bench`` reports, as a JSON-able dict."""
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    work = load_workload(cfg)
    probes: list[float] = []
    runners = run_modes(cfg, work, probes=probes)
    warm = min(cfg.warmup, max(len(work.batches) - 1, 0))
    med = {m: r.medians(warm) for m, r in runners.items()}
    res: dict[str, Any] = {
        "config": {k: (list(v) if isinstance(v, (tuple, list)) else v) for k, v in cfg.__dict__.items()},
        "data": work.data, "note": work.note, "trees": len(work.trees), "vocab": len(work.vocab),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "loadavg": [round(load0, 2), round(os.getloadavg()[0], 2)],  # 1-minute load before / after the modes
        "ms_per_batch": med,
        "host_probe_ms": {"median": statistics.median(probes), "min": min(probes), "max": max(probes),
                          "n": len(probes)} if probes else None,
    }
    if "eager" in med:
        base = med["eager"]
        res["speedup"] = {m: {s: (base[s] / v[s] if v[s] > 0 else None) for s in ("forward", "backward", "full")}
                          for m, v in med.items()}
        others = [m for m in med if m != "eager"]
        if others:
            best = min(others, key=lambda m: med[m]["full"])
            res["best_mode"] = best
            res["speedup_full_step"] = base["full"] / med[best]["full"]
            eq = training_equivalence(cfg, work, best, min(cfg.train_steps, len(work.batches)))
            res["training"] = eq
            res["loss_max_abs_diff"] = eq["loss_max_abs_diff"]
    res["recording"] = {m: rec for m, r in runners.items() if (rec := r.recording(warm)) is not None}
    caches = {m: r.cache_report if m in PREFETCH_MODES else (r.engine.report()["plan_cache"] if r.engine else None)
              for m, r in runners.items()}
    res["plan_cache"] = {m: c for m, c in caches.items() if c is not None}
    captured = [r for m, r in runners.items() if m.startswith("module")]
    if captured:
        res["capture"] = capture_report(captured[0].model)
    engines = {m: r.engine for m, r in runners.items() if r.engine is not None and m not in PREFETCH_MODES}
    res["engines"] = {m: {**e.report(), "units": e.last.units, "calls": e.last.calls,
                          "pattern_units": e.last.pattern_units, "ops_total": e.last.ops_total}
                      for m, e in engines.items()}
    if tables:
        res["table_6_3"] = pattern_table(cfg, work)
    return res


def _leaf(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return tuple(_leaf(x) for x in v)
    return v.detach().requires_grad_(True)


def bench_backends(depth: int = 4, hidden: int = 150, emb: int = 300, reps: int = 200,
                   backends: Sequence[str] = ("python", "fx", "inductor")) -> list[dict[str, Any]]:
    """Forward+backward time per call (µs) of a few Tree-LSTM patterns under each codegen backend."""
    from graphsub.dynamic.codegen import compile_pattern, generate
    from graphsub.dynamic.signature import consumer_map, tile

    torch.set_num_threads(1)
    trees = synthetic_treebank(4, seed=0)
    vocab = Vocab.build(trees)
    model = BinaryTreeLSTM(len(vocab) + 1, emb_dim=emb, hidden=hidden)
    with lazy():
        loss = batch_loss(model, [encode_tree(t, vocab) for t in trees])
    build(loss)  # values for every node (the patterns' inputs)
    root = cast(LazyTensor, loss)
    subs = tile(root, depth, consumer_map(root))
    seen: dict[Any, Any] = {}
    for s in subs:
        if s.op_count > 2 and s.structure not in seen:
            seen[s.structure] = s
    picks = sorted(seen.values(), key=lambda s: -s.op_count)[:3]
    rows = []
    for k, sub in enumerate(picks):
        _, fn = generate(sub, f"pattern_{k}")
        args = [_leaf(x.value) if type(x) is LazyTensor else x for x in sub.inputs]
        for backend in backends:
            t0 = time.perf_counter()
            f = compile_pattern(fn, backend)
            out = f(*args)
            out.sum().backward()
            compile_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(reps):
                f(*args).sum().backward()
            rows.append({"pattern": k, "ops": sub.op_count, "inputs": len(sub.inputs), "backend": backend,
                         "us_per_call": 1e6 * (time.perf_counter() - t0) / reps, "first_call_s": compile_s})
    return rows


__all__ = ["MODES", "PREFETCH_MODES", "STAGES", "BenchConfig", "Runner", "bench_backends", "load_workload",
           "pattern_table", "run_bench", "run_modes", "run_prefetch", "training_equivalence"]
