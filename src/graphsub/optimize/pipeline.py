"""End-to-end optimization of a model: search, verify, measure, keep only what is faster.

:func:`optimize` is the library behind ``graphsub optimize``; each step lives in its own module:

1. **load** the model (a :class:`~graphsub.spec.ModelSpec` text -- ``.onnx`` path, ``zoo:NAME`` -- or a
   :class:`~graphsub.ir.graph.Graph`); ops graphsub does not model stay ``opaque`` nodes, which no rule
   matches, so they split the graph into independently optimizable regions;
2. **search** for a cheaper equivalent graph (rule set, cost model and algorithm by name);
3. fold weight-only subgraphs and **verify** the result against the input in onnxruntime on random
   inputs with several seeds; on failure, bisect the substitution sequence to name the first
   substitution that breaks equivalence (:mod:`graphsub.optimize.verification`);
4. **time** input and output end to end in onnxruntime and decide (:mod:`graphsub.optimize.timing`);
5. **write** the chosen model atomically, never over the input (:mod:`graphsub.optimize.output`).

The result (:class:`~graphsub.optimize.result.OptimizeResult`) says what each step did and how long it
took; the HTML report (:mod:`graphsub.optimize.report`) renders it -- the caller decides whether to
write one.

The default cost model is ``fused`` (fusion-aware measured costs for ``ORT_ENABLE_ALL``): of the
cost models, it ranks measured ``ORT_ENABLE_ALL`` latencies best (Spearman 0.994 in
``benchmarks/results/cost_calibration.json``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from graphsub.ir.graph import Graph
from graphsub.optimize.result import OptimizeResult
from graphsub.optimize.timing import decide, measure
from graphsub.optimize.verification import bisect, check, finalize
from graphsub.rules.library import resolve_rules
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget
from graphsub.spec import ModelSpec, Shapes, check_output

DEFAULT_ALGO = "taso"
DEFAULT_COST = "fused[min]"  # the minimum of repeats: far more repeatable than the median on a loaded machine
DEFAULT_RULES = "default"

#: ``progress(phase, elapsed_s, best_cost)``; phases: load, search, verify, bisect, time, write
ProgressFn = Callable[[str, float, float | None], None]


@dataclass
class _Run:
    """The state one :func:`optimize` call threads through its steps."""

    note: ProgressFn
    timings: dict[str, float] = field(default_factory=dict)
    t0: float = field(default_factory=time.perf_counter)

    @contextmanager
    def step(self, phase: str, key: str, best: float | None = None) -> Iterator[None]:
        """Report ``phase`` and record its wall time under ``timings[key]``."""
        t = time.perf_counter()
        self.note(phase, 0.0, best)
        try:
            yield
        finally:
            self.timings[key] = time.perf_counter() - t


def load_input(model: str | os.PathLike[str] | Graph, input_shapes: Shapes | None = None) -> tuple[str, Graph]:
    """``(name, graph)`` for a Graph or a model spec (see :mod:`graphsub.spec`)."""
    if isinstance(model, Graph):
        return model.name, model
    spec = ModelSpec.parse(model)
    return spec.text, spec.load(input_shapes)


def optimize(
    model: str | os.PathLike[str] | Graph,
    *,
    output: str | os.PathLike[str] | None = None,
    algo: str = DEFAULT_ALGO,
    rules: str | Sequence[Rule] = DEFAULT_RULES,
    cost: str = DEFAULT_COST,
    budget: Budget | None = None,
    seed: int = 0,
    seeds: int = 3,
    threads: int = 1,
    keep_slower: bool = False,
    min_speedup: float = 1.03,
    timing_budget_ms: float = 300.0,
    measure_latency: bool = True,
    input_shapes: Shapes | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    progress: ProgressFn | None = None,
    **search_params: Any,
) -> OptimizeResult:
    """Optimize ``model`` (see the module docstring) and, if ``output`` is given and the result is
    verified, write the chosen model there.

    The optimized model is chosen when it is verified and faster under ``ORT_ENABLE_ALL`` (median
    speedup above ``min_speedup``, faster in 80% of the timing rounds; always, with ``keep_slower``);
    otherwise the original is chosen (and written, byte for byte for a file input).  Nothing is
    written when verification fails.
    Raises GraphsubError for bad input (:class:`~graphsub.spec.OverwriteError` for an output that is
    the input file), ExportError/OSError when the output cannot be written.
    """
    from graphsub.cost import get_model
    from graphsub.data import materialize
    from graphsub.search import search

    run = _Run(progress or (lambda phase, elapsed, best: None))
    spec = None if isinstance(model, Graph) else ModelSpec.parse(model)
    if output is not None:
        check_output(spec, output)
    with run.step("load", "load_s"):
        name, graph = load_input(model, input_shapes)
        rule_list = resolve_rules(rules)
        cm = get_model(cost, threads=threads, progress=False)
    with run.step("search", "search_s"):
        result = search(graph, rule_list, cm, budget or Budget(time_s=30.0), seed, algo=algo,
                        progress=lambda elapsed, best: run.note("search", elapsed, best), **search_params)
    with run.step("verify", "verify_s", result.best_cost):
        ref = materialize(graph, seed)
        seed_list = tuple(seed + 1000 * i for i in range(max(seeds, 1)))
        final = finalize(ref, result.best, seed) if result.sequence else ref
        ok, diff, worst = check(ref, final, seed_list, rtol=rtol, atol=atol) if result.sequence else (True, 0.0, "")
    res = OptimizeResult(name, ref, final, ref, result, ok, diff, worst, threads=threads, seeds=seed_list,
                         timings_s=run.timings, rule_set=rules if isinstance(rules, str) else f"{len(rule_list)} rules",
                         cost_model=cost, rules=tuple(rule_list))
    if not ok:
        with run.step("bisect", "bisect_s"):
            res.failure = bisect(graph, ref, rule_list, result.sequence, seed_list, seed, rtol=rtol, atol=atol)
            res.decision = "verification failed: " + res.failure.message + "; nothing written"
        return _finish(res, run)
    source = _source(spec, ref)
    exported = _export(final) if result.sequence else None
    if measure_latency:
        with run.step("time", "time_s"):
            _time(res, graph, source, exported, seed=seed, threads=threads, budget_ms=timing_budget_ms)
    res.kept_original, res.decision = decide(bool(result.sequence), res.latency_ms, keep_slower=keep_slower,
                                             min_speedup=min_speedup)
    res.graph = ref if res.kept_original else final
    if output is not None:
        with run.step("write", "write_s"):
            _write(res, output, source, exported)
    return _finish(res, run)


def _source(spec: ModelSpec | None, ref: Graph) -> bytes | str:
    """The original as it will be timed and written: the input file as given (not a re-export), else
    the exported graph, serialized."""
    if spec is not None and spec.kind == "onnx":
        return spec.name
    return bytes(_export(ref).SerializeToString())


def _export(graph: Graph) -> Any:
    from graphsub.frontends.onnx_export import export_graph

    return export_graph(graph)


def _time(res: OptimizeResult, graph: Graph, source: bytes | str, exported: Any, *, seed: int, threads: int,
          budget_ms: float) -> None:
    from graphsub.data import random_inputs

    after = exported.SerializeToString() if exported is not None else source
    res.latency_ms = measure(source, after, random_inputs(graph, seed), threads=threads, budget_ms=budget_ms)


def _write(res: OptimizeResult, output: str | os.PathLike[str], source: bytes | str, exported: Any) -> None:
    from graphsub.optimize.output import write_optimized, write_original

    if exported is not None and not res.kept_original:
        write_optimized(exported, output)
    else:
        write_original(source, output)
    res.written = os.fspath(output)


def _finish(res: OptimizeResult, run: _Run) -> OptimizeResult:
    run.timings["total_s"] = time.perf_counter() - run.t0
    return res


__all__ = ["DEFAULT_ALGO", "DEFAULT_COST", "DEFAULT_RULES", "ProgressFn", "load_input", "optimize"]
