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
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from graphsub.ir.graph import Graph
from graphsub.optimize.result import OptimizeResult
from graphsub.optimize.timing import consistent, decide, time_candidates, time_pair
from graphsub.optimize.verification import bisect, check, finalize
from graphsub.rules.library import resolve_rules
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget
from graphsub.spec import ModelSpec, Shapes, check_output

DEFAULT_ALGO = "taso"
DEFAULT_COST = "fused[min]"  # the minimum of repeats: far more repeatable than the median on a loaded machine
DEFAULT_RULES = "default"
DEFAULT_BUDGET_S = 12.0  # the main search; the portfolio adds DEFAULT_EQSAT_S and DEFAULT_ON_TOP_S per peer
DEFAULT_EQSAT_S = 5.0
DEFAULT_ON_TOP_S = 2.0
#: with more verified candidates than this, one short screening round picks the ones timed side by side
FINALISTS = 5
#: at most this many leaders are re-timed paired with the original before the original is kept
CONFIRM = 2
#: a model slower than this (ms a run) gets fewer finalists, one leader confirmed in 5 rounds (the time to result)
SLOW_MS = 50.0

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
    threads: int | None = None,
    keep_slower: bool = False,
    min_speedup: float = 1.03,
    timing_budget_ms: float = 200.0,
    measure_latency: bool = True,
    input_shapes: Shapes | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    progress: ProgressFn | None = None,
    peers: str | Sequence[str] = "auto",
    eqsat_s: float = DEFAULT_EQSAT_S,
    on_top_s: float = DEFAULT_ON_TOP_S,
    spelling: bool = True,
    provider: str = "cpu",
    **search_params: Any,
) -> OptimizeResult:
    """Optimize ``model`` (see the module docstring) and, if ``output`` is given and the result is
    verified, write the chosen model there.

    ``threads``: the intra-op thread count the decision is made at (default: every core, ONNX Runtime's own
    default). With ``measure_latency`` the portfolio (:mod:`graphsub.optimize.portfolio`: ``eqsat_s`` seconds of
    equality saturation, the ``peers``, ``on_top_s`` seconds of search on top of each, the ``spelling`` pass) is
    verified and timed with the search's result, and the fastest verified candidate is chosen when it is faster
    under ``ORT_ENABLE_ALL`` (median speedup above ``min_speedup``, faster in 80% of the timing rounds; with
    ``keep_slower`` the fastest one whatever its speed); ``provider="cuda"`` times and decides on ONNX Runtime's CUDA
    provider (the search's cost model and the verification stay on the CPU) and raises ExecutionError before any
    work where this onnxruntime has none; otherwise the original is chosen (and written, byte for
    byte for a file input). Nothing is written when the search's result fails verification.
    Raises GraphsubError for bad input (:class:`~graphsub.spec.OverwriteError` for an output that is
    the input file), ExportError/OSError when the output cannot be written.
    """
    from graphsub.cost import get_model
    from graphsub.data import materialize
    from graphsub.optimize.portfolio import resolve_peers
    from graphsub.search import search

    threads = threads or default_threads()
    if provider != "cpu":
        from graphsub.frontends.ort import require_provider

        require_provider(provider)
    run = _Run(progress or (lambda phase, elapsed, best: None))
    spec = None if isinstance(model, Graph) else ModelSpec.parse(model)
    if output is not None:
        check_output(spec, output)
    peer_list = resolve_peers(peers) if measure_latency else ()
    with run.step("load", "load_s"):
        name, graph = load_input(model, input_shapes)
        rule_list = resolve_rules(rules)
        cm = get_model(cost, threads=threads, progress=False)
    with run.step("search", "search_s"):
        result = search(graph, rule_list, cm, budget or Budget(time_s=DEFAULT_BUDGET_S), seed, algo=algo,
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
    if not measure_latency:
        res.kept_original, res.decision = decide(bool(result.sequence), {}, keep_slower=keep_slower,
                                                 min_speedup=min_speedup)
        res.graph = ref if res.kept_original else final
        chosen_data: Any = exported
    else:
        settings = _Settings(seed=seed, seeds=seed_list, threads=threads, rtol=rtol, atol=atol, min_speedup=min_speedup,
                             keep_slower=keep_slower, budget_ms=timing_budget_ms, peers=peer_list, eqsat_s=eqsat_s,
                             on_top_s=on_top_s, spelling=spelling, provider=provider)
        chosen_data = _portfolio(res, run, graph, source, exported, rule_list, cm, settings)
        if res.chosen == "search":
            chosen_data = exported  # checked and written with large weights beside it, as before the portfolio
    if output is not None:
        with run.step("write", "write_s"):
            _write(res, output, source, chosen_data)
    return _finish(res, run)


def default_threads() -> int:
    """All cores this process may run on: ONNX Runtime's own default for intra-op threads."""
    from graphsub.cost.env import all_cores

    return all_cores()


@dataclass(frozen=True)
class _Settings:
    seed: int
    seeds: tuple[int, ...]
    threads: int
    rtol: float
    atol: float
    min_speedup: float
    keep_slower: bool
    budget_ms: float
    peers: tuple[str, ...]
    eqsat_s: float
    on_top_s: float
    spelling: bool
    provider: str = "cpu"


def _portfolio(res: OptimizeResult, run: _Run, graph: Graph, source: bytes | str, exported: Any,
               rule_list: Sequence[Rule], cm: Any, st: _Settings) -> bytes | None:
    """Collect, verify and time the candidates; record them and the decision in ``res``; the chosen model's bytes
    (None: the original)."""
    from graphsub.data import random_inputs
    from graphsub.optimize import portfolio as pf
    from graphsub.rules.library import get_set

    ref = res.original
    port = pf.Portfolio()
    if exported is not None:
        port.add(pf.Candidate("search", bytes(exported.SerializeToString()), res.optimized, pf.ORIGINAL,
                              res.search.sequence, res.search.wall_time_s, True, res.max_abs_diff))
    sources = pf.Sources(search_fn=_search_fn(rule_list, cm, st), spelling=get_set("ort-spelling") if st.spelling
                         else (), peers=st.peers, eqsat_s=st.eqsat_s, on_top_s=st.on_top_s)
    with run.step("portfolio", "portfolio_s"):
        pf.collect(port, ref, source, sources, note=lambda what: run.note("portfolio", 0.0, None))
    with run.step("verify", "verify_candidates_s"):
        feeds = [(s, random_inputs(graph, s)) for s in st.seeds]
        pf.verify(port, source, feeds, rtol=st.rtol, atol=st.atol, skip=("search",))
    timed = [c for c in port.distinct if c.verified]
    if timed:
        with run.step("time", "time_s"):
            _time(port, timed, source, feeds[0][1], st)
    res.provider = st.provider
    res.candidates = port.candidates
    res.portfolio_notes = port.notes
    chosen = pf.best_timed(port) if st.keep_slower else pf.choose(port, st.min_speedup)
    confirmed = [c for c in port.distinct if c.confirm_rounds]
    shown = chosen or max(confirmed, key=lambda c: c.confirm_speedup or 0.0, default=None) or pf.best_timed(port)
    if shown is not None:
        pairs = shown.confirm_rounds or list(zip(port.original_rounds, shown.rounds_ms, strict=True))
        res.latency_ms = {"all": {"before": statistics.median(b for b, _ in pairs),
                                  "after": statistics.median(a for _, a in pairs), "rounds": pairs}}
    res.kept_original = chosen is None
    res.chosen = "original" if chosen is None else chosen.name
    res.decision = _decision(chosen, shown, st)
    if chosen is not None and chosen.graph is not None:
        res.optimized = chosen.graph
    res.graph = ref if chosen is None else (chosen.graph or ref)
    return None if chosen is None else chosen.data


def _time(port: Any, timed: list[Any], source: bytes | str, feeds: dict[str, Any], st: _Settings) -> None:
    """Time the verified candidates ``timed`` against the original (a screening race first when there are many),
    then confirm the leaders in rounds paired with the original (:mod:`graphsub.optimize.timing`); in ``port``."""
    from graphsub.optimize import portfolio as pf

    sessions: dict[str, Any] = {}  # created once: screening and the side-by-side rounds share them
    models = {pf.ORIGINAL: source, **{c.name: c.data for c in timed}}
    slow = False
    if len(timed) > FINALISTS:  # race: three short rounds for all, then the fastest few side by side
        screen = time_candidates(models, feeds, threads=st.threads, budget_ms=st.budget_ms / 2, rounds=3,
                                 provider=st.provider, sessions=sessions)
        for c in timed:  # the best of three short rounds: robust to a transient disturbance
            c.screen_ratio = min(screen[pf.ORIGINAL]) / min(screen[c.name])
        slow = statistics.median(screen[pf.ORIGINAL]) > SLOW_MS
        timed = sorted(timed, key=lambda c: -(c.screen_ratio or 0.0))[:3 if slow else FINALISTS]
        for name in set(sessions) - {pf.ORIGINAL, *(c.name for c in timed)}:
            del sessions[name]  # the memory of the sessions that are out of the race
    rounds = time_candidates({pf.ORIGINAL: source, **{c.name: c.data for c in timed}}, feeds, threads=st.threads,
                             budget_ms=st.budget_ms, provider=st.provider, sessions=sessions)
    sessions.clear()
    pf.record_timing(port, rounds)
    if st.keep_slower:
        return
    slow = slow or statistics.median(port.original_rounds) > SLOW_MS

    def inconclusive(before: list[float], after: list[float]) -> bool:  # faster, but not often enough
        pairs = list(zip(before, after, strict=True))
        return statistics.median(b / a for b, a in pairs) > st.min_speedup and not consistent(pairs)

    for c in pf.leaders(port, 1 if slow else CONFIRM):  # fresh paired rounds: the pick's luck does not count
        pf.record_confirmation(port, c, *time_pair(source, c.data, feeds, threads=st.threads, budget_ms=st.budget_ms,
                                                   rounds=5 if slow else 7, provider=st.provider,
                                                   extend_if=inconclusive))
        if pf.passes(port, c, st.min_speedup):
            break


def _decision(chosen: Any, shown: Any, st: _Settings) -> str:
    if chosen is not None:
        extra = " (--keep-slower)" if st.keep_slower and (chosen.speedup or 0) <= st.min_speedup else ""
        how = (f"{chosen.confirm_speedup:.3f}x faster (confirmed in rounds paired with the original)"
               if chosen.confirm_rounds else f"{chosen.speedup:.3f}x faster")
        return f"kept {chosen.name}: {how} under ORT_ENABLE_ALL at {st.threads} thread(s){extra}"
    if shown is None:
        return "no verified candidate differs from the original; kept the original"
    how = (f"{shown.speedup:.3f}x side by side, {shown.confirm_speedup:.3f}x in rounds paired with the original"
           if shown.confirm_rounds else f"{shown.speedup:.3f}x")
    return (f"no candidate is faster under ORT_ENABLE_ALL at {st.threads} thread(s) (best: {shown.name}, "
            f"{how}; needed > {st.min_speedup:g}x and faster in 80% of the rounds); kept the "
            "original (--keep-slower writes the fastest candidate anyway)")


def _search_fn(rule_list: Sequence[Rule], cm: Any, st: _Settings) -> Any:
    """The portfolio's ``search_fn``: graphsub's search on any graph (an imported peer output too), its best graph
    finalized with the graph's weights. Equality saturation prices ops one by one (``measured[min]``)."""
    from graphsub.cost import get_model
    from graphsub.data import materialize
    from graphsub.search import search

    def fn(g: Graph, budget_s: float, algo: str) -> tuple[Graph, tuple[Any, ...]]:
        model = get_model("measured[min]", threads=st.threads, progress=False) if algo == "eqsat" else cm
        r = search(g, rule_list, model, Budget(time_s=budget_s), st.seed, algo=algo)
        if not r.sequence:
            return g, ()
        return finalize(materialize(g, st.seed), r.best, st.seed), r.sequence

    return fn


def _source(spec: ModelSpec | None, ref: Graph) -> bytes | str:
    """The original as it will be timed and written: the input file as given (not a re-export), else
    the exported graph, serialized."""
    if spec is not None and spec.kind == "onnx":
        return spec.name
    return bytes(_export(ref).SerializeToString())


def _export(graph: Graph) -> Any:
    from graphsub.frontends.onnx_export import export_graph

    return export_graph(graph)


def _write(res: OptimizeResult, output: str | os.PathLike[str], source: bytes | str, chosen: Any) -> None:
    """Write the chosen model: serialized bytes (a portfolio candidate) or a proto (graphsub's export, checked and
    with large weights beside it); the original when it was kept."""
    from graphsub.optimize.output import write_bytes, write_optimized, write_original

    if chosen is not None and not res.kept_original:
        if isinstance(chosen, bytes):
            write_bytes(chosen, output)
        else:
            write_optimized(chosen, output)
    else:
        write_original(source, output)
    res.written = os.fspath(output)


def _finish(res: OptimizeResult, run: _Run) -> OptimizeResult:
    run.timings["total_s"] = time.perf_counter() - run.t0
    return res


__all__ = ["DEFAULT_ALGO", "DEFAULT_BUDGET_S", "DEFAULT_COST", "DEFAULT_RULES", "ProgressFn", "default_threads",
           "load_input", "optimize"]
