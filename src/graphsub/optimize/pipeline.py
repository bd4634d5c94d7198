"""End-to-end optimization of a model: search, verify, measure, keep only what is faster.

:func:`optimize` is the library behind ``graphsub optimize``; each step lives in its own module:

1. **load** the model (a :class:`~graphsub.spec.ModelSpec` text -- ``.onnx`` path, ``zoo:NAME`` -- or a
   :class:`~graphsub.ir.graph.Graph`); ops graphsub does not model stay ``opaque`` nodes, which no rule
   matches, so they split the graph into independently optimizable regions;
2. **search** for a cheaper equivalent graph (rule set, cost model and algorithm by name);
3. fold weight-only subgraphs and **verify** the result against the input in onnxruntime on random
   inputs with several seeds; on failure, bisect the substitution sequence to name the first
   substitution that breaks equivalence (:mod:`graphsub.optimize.verification`);
4. **time** input and output end to end in onnxruntime and decide (:mod:`graphsub.optimize.race`, on
   :mod:`graphsub.optimize.timing`);
5. **write** the chosen model atomically, never over the input (:mod:`graphsub.optimize.output`).

The result (:class:`~graphsub.optimize.result.OptimizeResult`) says what each step did and how long it
took; the HTML report (:mod:`graphsub.optimize.report`) renders it -- the caller decides whether to
write one.

**Time.** ``time_s`` (``graphsub optimize --budget``, default :data:`~graphsub.optimize.budget.DEFAULT_TIME_S` =
100 s, plus ``time_per_gb_s`` = :data:`~graphsub.optimize.budget.PER_GB_S` per GB of the model's weights, known once
it is loaded) is the wall-time budget of the whole call, every step above included: one deadline is shared out
between the steps (:mod:`graphsub.optimize.budget`): 12% for the main search (12 s by default), the portfolio's
parts while they fit (eqsat ``eqsat_s``, the peers, ``on_top_s`` on top of each), and 45% kept for verifying, timing and
writing; every long step checks the deadline, and the rest are short by design. With a small budget the portfolio
shrinks (the searches on top of the peers, then eqsat, then the peers are left out, and the main search gets their
time); timing rounds stop at the deadline, and a candidate whose confirmation the budget cut short is not chosen, so
the original stays the fallback and nothing unverified is ever written. ``time_s=None``: no bound (each step takes
its own time, as ``budget``, ``eqsat_s`` and ``on_top_s`` say).

**Stop requests.** A stop request (:func:`graphsub.interrupt.stop_requested`, the first Ctrl-C under
:func:`graphsub.interrupt.graceful`) ends the call like an exhausted budget: the search returns its best graph, the
portfolio adds nothing more, timing stops; the result is verified as usual, and written only when a candidate was
confirmed faster by the usual rule -- otherwise nothing is written (not even the original) and the decision says so.
The result's ``stopped_by`` is then ``"interrupt"``.

The default cost model is ``fused`` (fusion-aware measured costs for ``ORT_ENABLE_ALL``): of the
cost models, it ranks measured ``ORT_ENABLE_ALL`` latencies best (Spearman 0.994 in
``experiments/results/cost_calibration.json``).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphsub.deadline import NO_DEADLINE, Deadline
from graphsub.frontends.onnx_types import quiet_sizes
from graphsub.frontends.ort import session_s_per_mb
from graphsub.interrupt import stop_requested
from graphsub.ir.graph import Graph
from graphsub.optimize.budget import (
    DEFAULT_TIME_S,
    Plan,
    candidate_tail_s,
    model_bytes,
    plan_parts,
    run_scaled_time_s,
    scaled_time_s,
    tail_estimate_s,
    timing_reserve_s,
    verify_estimate_s,
)
from graphsub.optimize.candidates import CLEANUP_STEP, cleaned_start
from graphsub.optimize.config import (
    DEFAULT_ALGO,
    DEFAULT_BUDGET_S,
    DEFAULT_COST,
    DEFAULT_RULES,
    OptimizeConfig,
    ProgressFn,
)
from graphsub.optimize.race import confirm_each, time_portfolio
from graphsub.optimize.result import OptimizeResult
from graphsub.optimize.sizes import check_sizes_named, decoder_settings
from graphsub.optimize.sizes import decode_step as _decode_step
from graphsub.optimize.timing import DEFAULT_TIMERS, Timers, resolve_timers
from graphsub.optimize.verification import bisect, check_reference, check_seeds, finalize
from graphsub.optimize.write import both, dims_check, import_of, root_import
from graphsub.optimize.write import write_chosen as _write
from graphsub.rules.cleanup import cleanup_note
from graphsub.rules.library import resolve_rules
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, peak_rss_mb
from graphsub.spec import ModelSpec, Shapes, check_output

if TYPE_CHECKING:
    from graphsub.optimize.target import Target


@dataclass
class _Run:
    """The state one :func:`optimize` call threads through its steps."""

    note: ProgressFn
    timers: Timers = DEFAULT_TIMERS  # what every step is timed with: its clock is the deadline's and t0's
    timings: dict[str, float] = field(default_factory=dict)
    t0: float = 0.0
    deadline: Deadline = NO_DEADLINE
    cut: str = ""  # "time" once the budget cut a step short or left it out
    notes: list[str] = field(default_factory=list)  # what the budget changed, for the result's notes
    seed_s: float = 0.0  # what verifying the search's result took per input draw (0: not verified)
    dims: Any = None  # the SizeCheck the candidates passed (graphsub.optimize.write.dims_check), for the write

    def cut_short(self) -> None:
        """Record that the deadline (or a stop request) cut a step short."""
        self.cut = self.cut or "time"

    @contextmanager
    def step(self, phase: str, key: str, best: float | None = None) -> Iterator[None]:
        """Report ``phase`` and record its wall time under ``timings[key]``."""
        t = self.timers.clock()
        self.note(phase, 0.0, best)
        try:
            yield
        finally:
            self.timings[key] = self.timers.clock() - t


def load_input(model: str | os.PathLike[str] | Graph, input_shapes: Shapes | None = None,
               sizes: Mapping[str, int] | None = None) -> tuple[str, Graph]:
    """``(name, graph)`` for a Graph or a model spec (see :mod:`graphsub.spec`); an ONNX file's free symbolic dims
    are imported at ``sizes`` and, where it leaves them out, at distinct sizes that are never 1
    (:func:`graphsub.frontends.dims.import_sizes`)."""
    if isinstance(model, Graph):
        return model.name, model
    spec = ModelSpec.parse(model)
    return spec.text, spec.load(input_shapes, sizes=sizes, generic=spec.kind == "onnx")


def optimize(
    model: str | os.PathLike[str] | Graph,
    *,
    output: str | os.PathLike[str] | None = None,
    config: OptimizeConfig | None = None,
    extra_candidates: Sequence[tuple[str, Graph, tuple[Any, ...]]] = (),
    timing_feeds: Mapping[str, Any] | None = None,
    target: Target | None = None,
    **settings: Any,
) -> OptimizeResult:
    """Optimize ``model`` (see the module docstring) and, if ``output`` is given and the result is
    verified, write the chosen model there.

    ``config`` (:class:`~graphsub.optimize.config.OptimizeConfig`; its defaults are the defaults) holds every
    setting; ``settings`` override its fields by name (``optimize(m, time_s=30, peers="none")``), and a keyword that
    is no setting goes to the search algorithm. Invalid settings (NaN, infinite or negative times, non-positive
    ``timing_budget_ms``, ``min_speedup``, ``seeds`` or ``threads``) raise GraphsubError before any work.

    ``time_s``: the wall-time budget of the whole call (None: unbounded), counted from ``started`` (a
    reading of ``timers.clock``, by default ``time.perf_counter()``; default: the call; the command line passes the
    time it started, :func:`graphsub.deadline.command_started`); ``timers``
    (:class:`~graphsub.optimize.timing.Timers`; None: :func:`~graphsub.optimize.timing.current_timers`, the real
    ones unless a ``using_timers`` block says otherwise): every latency, confirmation and budget clock of the call
    (the seam through which tests fake time); ``budget``: the main search's own limits
    (``k``, ``expansions``, ``memory_mb``; its ``time_s`` caps the search's share of ``time_s``, and without
    ``time_s`` it is the search's time, default :data:`~graphsub.optimize.config.DEFAULT_BUDGET_S`).

    ``threads``: the intra-op thread count the decision is made at (default: every core, ONNX Runtime's own
    default). With ``measure_latency`` the portfolio (:mod:`graphsub.optimize.portfolio`: ``eqsat_s`` seconds of
    equality saturation, the ``peers``, ``on_top_s`` seconds of search on top of each, the ``spelling`` pass) is
    verified and timed with the search's result, and the fastest candidate the decision procedure
    (:mod:`graphsub.optimize.decide`) declares faster than the original under ``ORT_ENABLE_ALL`` is chosen (with
    ``keep_slower`` the fastest one whatever its speed); ``provider="cuda"`` times and decides on ONNX Runtime's CUDA
    provider (the search's cost model and the verification stay on the CPU) and raises ExecutionError before any
    work where this onnxruntime has none; otherwise the original is chosen (and written, byte for
    byte for a file input). ``extra_candidates`` (name, graph, substitutions) join the portfolio, verified against
    the input and timed like the others. ``timing_feeds``: the inputs the candidates are timed on (default: the
    first verification seed's random inputs, or a ``target``'s); ``target``: what the call optimizes for
    (:class:`~graphsub.optimize.target.Target`; None: inference in ONNX Runtime): which sources it accepts, a check
    of each verified candidate, how a candidate is timed. A training target
    (:class:`~graphsub.optimize.sources.training.TrainingTarget`, what
    :func:`~graphsub.optimize.training.optimize_training` passes with the joint graph as ``model``) adds its candidate
    sources (``backward-rules``, ``forward-first``), and the candidates are timed on its real step's inputs (a
    training graph's kernels run at speeds that depend on its data: one-hot labels, real weights); a module target
    (:class:`~graphsub.optimize.torch_training.ModuleTarget`, what
    :func:`~graphsub.optimize.torch_training.optimize_module_training` passes with the module's trainable forward
    graph) takes the sources of graphsub's own rules, checks each candidate's gradients in PyTorch and times its SGD
    steps there.
    Nothing is written when the search's result fails verification.
    Raises GraphsubError for bad input (:class:`~graphsub.spec.OverwriteError` for an output that is
    the input file), ExportError/OSError when the output cannot be written. A chosen model that does not keep the
    input file's symbolic dimensions that ``input_shapes`` leave free (:func:`graphsub.symbolic.keep_symbolic`)
    gives way to the original, which is written, with a note and the decision saying why.
    """
    cfg = OptimizeConfig.build(config, **settings).check()
    tm = resolve_timers(cfg.timers)
    run = _Run(cfg.progress or (lambda phase, elapsed, best: None), tm, t0=tm.clock())
    run.deadline = Deadline.after(cfg.time_s, start=run.t0 if cfg.started is None else cfg.started, clock=tm.clock)
    threads = cfg.threads or default_threads()
    if cfg.provider != "cpu":
        from graphsub.frontends.ort import require_provider

        require_provider(cfg.provider)
    spec = None if isinstance(model, Graph) else ModelSpec.parse(model)
    if output is not None:
        check_output(spec, output)
    check_sizes_named(spec, cfg)
    with run.step("load", "load_s"):
        name, graph = load_input(model, cfg.input_shapes, cfg.sizes)
        rule_list = resolve_rules(cfg.rules)
        cm = _cost_model(cfg.cost, threads)
    cfg = decoder_settings(spec, cfg)
    run_s = _run_s(cfg, spec, graph, target, threads)
    if cfg.time_s is not None and cfg.time_per_gb_s > 0:  # the budget grows with the model (budget.PER_GB_S)...
        time_s = scaled_time_s(cfg.time_s, cfg.time_per_gb_s, model_bytes(graph))
        if run_s is not None and time_s is not None:  # ...and with its run time, so that its tail fits
            time_s = run_scaled_time_s(time_s, graph, budget_ms=cfg.timing_budget_ms, run_s=run_s)
        cfg = dataclasses.replace(cfg, time_s=time_s, time_per_gb_s=0.0)
        run.deadline = Deadline.after(cfg.time_s, start=run.t0 if cfg.started is None else cfg.started,
                                      clock=tm.clock)
    shares, search_budget = _plan(run, cfg, graph, target, run_s)
    cfg = cfg if target is None or target.cleanup else dataclasses.replace(cfg, cleanup=False)
    res, result, final = _search_and_verify(run, cfg, name, graph, rule_list, cm, search_budget, threads)
    if not res.verified:
        with run.step("bisect", "bisect_s"):
            res.failure = bisect(graph, res.original, rule_list, result.sequence, res.seeds, cfg.seed, rtol=cfg.rtol,
                                 atol=cfg.atol, stop=run.deadline.expired)
            res.decision = "verification failed: " + res.failure.message + "; nothing written"
        return _finish(res, run)
    source = _source(spec, res.original)
    exported = _export(final) if result.sequence else None
    if not cfg.measure_latency:  # nothing timed: the search's verified result is the answer
        res.portfolio_notes.extend(run.notes)
        res.kept_original = not result.sequence
        res.decision = ("no cheaper equivalent graph found; kept the original" if res.kept_original else
                        "kept the optimized model (latency not measured)")
        res.graph = res.original if res.kept_original else final
        chosen_data: Any = exported
    else:
        step = (None if timing_feeds is not None or (target is not None and target.feeds is not None) else
                _decode_step(spec, cfg, res, run.notes))
        feeds = (dict(timing_feeds) if timing_feeds is not None else
                 dict(target.feeds) if target is not None and target.feeds is not None else
                 None if step is None else step[0])
        st = _Settings(seed=cfg.seed, seeds=res.seeds, threads=threads, rtol=cfg.rtol, atol=cfg.atol,
                       min_speedup=cfg.min_speedup, keep_slower=cfg.keep_slower, budget_ms=cfg.timing_budget_ms,
                       peers=_peers(cfg) if shares.peers else (), eqsat_s=shares.eqsat_s, on_top_s=shares.on_top_s,
                       spelling=cfg.spelling, provider=cfg.provider, plan=shares, extra=tuple(extra_candidates),
                       config=cfg, target=target, timing_feeds=feeds, guard=None if step is None else step[1])
        with quiet_sizes():  # the imports after the user's (other sizes, peers' outputs) do not repeat its warnings
            chosen_data = _portfolio(res, run, graph, source, exported, rule_list, cm, st)
        if res.chosen == "search" and run.dims is None:
            chosen_data = exported  # checked and written with large weights beside it, as before the portfolio
    if _interrupted(res) and not _confirmed(res):
        res.decision += "; interrupted: nothing written (only a candidate confirmed faster is written then)"
        return _finish(res, run)
    if output is not None:
        with run.step("write", "write_s"):
            if not result.sequence and not res.latency_ms:  # the input never ran in onnxruntime in this call: a
                check_reference(source, res.original, res.seeds[0])  # model it rejects is bad input, never passed
            with quiet_sizes():
                _write(res, output, source, chosen_data, cfg.input_shapes, cfg.check_sizes, run.dims)
    return _finish(res, run)


def _free(graph: Graph) -> bool:
    """Whether ``graph`` is an import of an ONNX file that left symbolic dims free (its candidates are checked at
    other sizes)."""
    from graphsub.frontends.splice import origin_of

    origin = origin_of(graph)
    return origin is not None and origin.free


def _cost_model(cost: str, threads: int) -> Any:
    from graphsub.cost import get_model

    return get_model(cost, threads=threads, progress=False)


def _peers(cfg: OptimizeConfig) -> tuple[str, ...]:
    """The peers the call's portfolio runs (none without timing: their candidates would not be compared)."""
    from graphsub.optimize.portfolio import resolve_peers

    return resolve_peers(cfg.peers) if cfg.measure_latency else ()


def _run_s(cfg: OptimizeConfig, spec: ModelSpec | None, graph: Graph, target: Target | None,
           threads: int) -> float | None:
    """One run of the original, measured before the plan (:func:`graphsub.optimize.budget.measured_run_s`) when the
    call is bounded and timed on the CPU and the roofline says a run takes at least
    :data:`~graphsub.optimize.budget.MEASURE_RUN_MIN_S`: an ONNX file on random inputs, a target's graph (a training
    graph, whose weights it holds) on its own inputs; None otherwise (the roofline's estimate stands)."""
    from graphsub.data import random_inputs
    from graphsub.optimize.budget import MEASURE_RUN_MIN_S, measured_run_s, run_estimate_s

    if cfg.time_s is None or not cfg.measure_latency or cfg.provider != "cpu":
        return None
    if run_estimate_s(graph) < MEASURE_RUN_MIN_S:
        return None
    if spec is not None and spec.kind == "onnx":
        return measured_run_s(spec.name, random_inputs(graph, cfg.seed), threads=threads)
    if target is not None and target.feeds is not None:
        return measured_run_s(_export(graph).SerializeToString(), dict(target.feeds), threads=threads)
    return None


def _plan(run: _Run, cfg: OptimizeConfig, graph: Graph, target: Target | None,
          run_s: float | None = None) -> tuple[Plan, Budget]:
    """The shares of the call's budget (:func:`graphsub.optimize.budget.plan_parts`, from the registered sources'
    estimates for this model and target, the tail's from ``run_s`` where a run of the original was measured) and the
    main search's budget."""
    from graphsub.optimize import sources as src

    search_budget = cfg.budget or Budget(time_s=DEFAULT_BUDGET_S if cfg.time_s is None else None)
    planning = src.Context(src.Sources(peers=_peers(cfg), eqsat_s=cfg.eqsat_s, on_top_s=cfg.on_top_s,
                                       ort_search_s=_ort_search_s(cfg), layout=cfg.spelling, rows=cfg.spelling,
                                       config=cfg, target=target), graph)
    tailed = cfg.time_s is not None and cfg.measure_latency
    shares = plan_parts(cfg.time_s, run.deadline.remaining(), search_cap=search_budget.time_s,
                        parts=src.parts(planning), portfolio=cfg.measure_latency,
                        verify_s=verify_estimate_s(graph) if cfg.time_s is not None else 0.0,
                        tail_s=tail_estimate_s(graph, budget_ms=cfg.timing_budget_ms, run_s=run_s,
                                               sizes=_free(graph)) if tailed else 0.0)
    if tailed:  # the tail grows with the candidates the portfolio makes beyond those it was planned for
        shares = dataclasses.replace(shares, tail_each_s=candidate_tail_s(graph, run_s=run_s, sizes=_free(graph)))
    if shares.search_s is not None:
        search_budget = dataclasses.replace(search_budget, time_s=shares.search_s)
    if shares.dropped:
        run.cut_short()
    return shares, search_budget


def _search_and_verify(run: _Run, cfg: OptimizeConfig, name: str, graph: Graph, rule_list: Sequence[Rule], cm: Any,
                       search_budget: Budget, threads: int) -> tuple[OptimizeResult, Any, Graph]:
    """The main search, its result finalized (weights folded) and verified on the call's input draws (fewer when the
    budget runs out: the candidates are then checked on the same draws); the result, the search's result and the
    finalized graph."""
    from graphsub.data import materialize
    from graphsub.search import search

    tm = run.timers
    start, cleaned = graph, ()
    if cfg.cleanup:
        with run.step("cleanup", "cleanup_s"):
            start, cleaned = cleaned_start(graph, stop=run.deadline.expired)  # type: ignore[assignment]
        if cleaned:
            run.notes.append(cleanup_note(cleaned, run.timings["cleanup_s"]))
    with run.step("search", "search_s"):
        result = search(start, rule_list, cm, search_budget, cfg.seed, algo=cfg.algo,
                        progress=lambda elapsed, best: run.note("search", elapsed, best), **cfg.search_params)
    if start is not graph:  # the clean-up is the sequence's first step (replayed as a whole by the bisection)
        result = dataclasses.replace(result, sequence=(CLEANUP_STEP, *result.sequence))
    with run.step("verify", "verify_s", result.best_cost):
        ref = materialize(graph, cfg.seed)
        seed_list = tuple(cfg.seed + 1000 * i for i in range(max(cfg.seeds, 1)))
        final = finalize(ref, result.best, cfg.seed) if result.sequence else ref
        ok, diff, worst, done = (True, 0.0, "", seed_list)
        if result.sequence:
            t = tm.clock()
            ok, diff, worst, done = check_seeds(ref, final, seed_list, rtol=cfg.rtol, atol=cfg.atol,
                                                stop=run.deadline.expired)
            run.seed_s = (tm.clock() - t) / len(done)
        if ok and len(done) < len(seed_list):
            run.notes.append(f"verification: on {len(done)} of {len(seed_list)} random input draws (no time left in "
                             "the budget for more)")
            run.cut_short()
            seed_list = done
    res = OptimizeResult(name, ref, final, ref, result, ok, diff, worst, threads=threads, seeds=seed_list,
                         timings_s=run.timings, rule_set=cfg.rule_set_name(len(rule_list)), cost_model=cfg.cost,
                         rules=tuple(rule_list), time_budget_s=cfg.time_s, cleanup=tuple(cleaned))
    return res, result, final


def _confirmed(res: OptimizeResult) -> bool:
    """Whether the chosen candidate's confirmation declared it faster (:mod:`graphsub.optimize.decide`)."""
    c = res.chosen_candidate
    return c is not None and c.confirmation is not None and c.confirmation.faster


def _interrupted(res: OptimizeResult) -> bool:
    if stop_requested():
        res.budget_stop = "interrupt"
    return res.interrupted


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
    plan: Plan | None = None
    extra: tuple[tuple[str, Graph, tuple[Any, ...]], ...] = ()
    timing_feeds: dict[str, Any] | None = None
    config: OptimizeConfig | None = None
    target: Target | None = None
    #: inputs at other sizes a confirmed candidate must not be slower at, and their words (a decoder's long cache)
    guard: tuple[dict[str, Any], str] | None = None

    @property
    def where(self) -> str:
        """How the decision names what was timed (the target's words; ONNX Runtime at the thread count)."""
        from graphsub.optimize.target import Target

        return (self.target or Target()).where(self.threads)


def _portfolio(res: OptimizeResult, run: _Run, graph: Graph, source: bytes | str, exported: Any,
               rule_list: Sequence[Rule], cm: Any, st: _Settings) -> bytes | None:
    """Collect, verify and time the candidates; record them and the decision in ``res``; the chosen model's bytes
    (None: the original)."""
    from graphsub.data import random_inputs
    from graphsub.optimize import portfolio as pf

    ref = res.original
    port = pf.Portfolio()
    if exported is not None:
        port.add(pf.Candidate("search", bytes(exported.SerializeToString()), res.optimized, pf.ORIGINAL,
                              res.search.sequence, res.search.wall_time_s, True, res.max_abs_diff))
    for name, g, steps in st.extra:  # candidates the caller built (verified and timed like the others)
        fin = finalize(ref, g, st.seed)
        port.add(pf.Candidate(name, pf.export_bytes(fin), fin, pf.ORIGINAL, steps))
    plan = st.plan or Plan(None, None, 0.0)  # unplanned: no tail kept
    port.notes.extend([*plan.notes(), *run.notes])
    cleanup = st.config is None or st.config.cleanup
    ort_s = 0.0 if st.config is None else _ort_search_s(st.config)
    sources = pf.Sources(search_fn=_search_fn(rule_list, cm, st, cleanup), ort_search_s=ort_s,
                         ort_search_fn=_ort_search_fn(rule_list, st, cleanup) if ort_s > 0 else None,
                         spelling=_spelling_rules() if st.spelling else (), peers=st.peers, eqsat_s=st.eqsat_s,
                         on_top_s=st.on_top_s, deadline=run.deadline, tail_s=plan.tail_s,
                         tail_each_s=plan.tail_each_s, tail_max_s=plan.tail_max_s, layout=st.spelling,
                         rows=st.spelling, config=st.config, target=st.target,
                         planned=None if st.plan is None else st.plan.shares)
    with run.step("portfolio", "portfolio_s"):
        pf.collect(port, ref, source, sources, note=lambda what: run.note("portfolio", 0.0, None))
    with run.step("verify", "verify_candidates_s"):
        feeds = [(s, random_inputs(graph, s)) for s in st.seeds]
        run.dims, keeps_dims = dims_check(source, ref, input_shapes=None if st.config is None else
                                          st.config.input_shapes, check_sizes=() if st.config is None else
                                          st.config.check_sizes, seed=st.seeds[0] if st.seeds else 0, rtol=st.rtol,
                                          atol=st.atol, bases=lambda name: import_of(name, port, ref),
                                          direct=lambda c: root_import(c, port, ref, source))
        pf.verify(port, source, feeds, rtol=st.rtol, atol=st.atol, skip=("search",), deadline=run.deadline,
                  estimate_s=run.seed_s * (len(feeds) + 1) / 2, original=ref if isinstance(source, bytes) else None,
                  reserve_s=0.0 if st.keep_slower else timing_reserve_s(source, st.budget_ms / 1e3,
                                                                        session_s_per_mb()),
                  also=both(None if st.target is None else st.target.check, keeps_dims))
    if port.skipped:  # a source or a check the budget (or a stop request) left out
        run.cut_short()
    timed = [c for c in port.distinct if c.verified]
    if timed and run.deadline.expired():
        port.notes.append("timing: skipped: " + ("interrupted" if stop_requested() else "no time left in the budget"))
        run.cut_short()
    elif timed:
        with run.step("time", "time_s"):
            if (confirm_each(port, timed, st.target, st, run.deadline, run.timers)
                    if st.target is not None and st.target.own_timing else
                    time_portfolio(port, timed, source, feeds[0][1] if st.timing_feeds is None else st.timing_feeds,
                                   st, run.deadline, run.timers)):
                run.cut_short()
    res.provider = st.provider
    res.candidates = port.candidates
    res.portfolio_notes = port.notes
    chosen = pf.best_timed(port) if st.keep_slower else pf.choose(port)
    confirmed = [c for c in port.distinct if c.confirmation is not None]
    shown = chosen or max(confirmed, key=lambda c: c.confirm_speedup or 0.0, default=None) or pf.best_timed(port)
    if shown is not None:
        res.verdict = shown.confirmation
        if shown.confirmation is not None and shown.confirmation.rounds:
            m = shown.confirmation.measured
            res.latency_ms = {"all": {"before": statistics.median(m.a), "after": statistics.median(m.b),
                                      "rounds": list(zip(m.a, m.b, strict=True))}}
        else:
            pairs = list(zip(port.original_rounds, shown.rounds_ms, strict=True))
            res.latency_ms = {"all": {"before": statistics.median(b for b, _ in pairs),
                                      "after": statistics.median(a for _, a in pairs), "rounds": pairs}}
    res.kept_original = chosen is None
    res.chosen = "original" if chosen is None else chosen.name
    res.decision = (_decision(chosen, shown, st) if shown is not None or not timed else
                    "every verified candidate runs as the original once onnxruntime has optimized it (the same "
                    "graph); kept the original" if all(c.runs_as for c in timed) else
                    f"no candidate was timed ({len(timed)} verified); kept the original")
    if run.cut and chosen is None:
        why = "the interrupt" if stop_requested() else f"the {res.time_budget_s or 0:g} s budget"
        res.decision += f" ({why} cut the portfolio or the timing short, see the notes)"
    if chosen is not None and chosen.graph is not None:
        res.optimized = chosen.graph
    res.graph = ref if chosen is None else (chosen.graph or ref)
    return None if chosen is None else chosen.data



def _decision(chosen: Any, shown: Any, st: _Settings) -> str:
    """One line: what was kept and the measurement behind it (:meth:`graphsub.optimize.decide.Verdict.details`), or
    why the original was kept (the verdict's reason)."""
    where = st.where
    if chosen is not None:
        v = chosen.confirmation
        if v is None or v.speedup is None:  # keep_slower without a confirmation
            return f"kept {chosen.name}: {chosen.speedup:.3f}x side by side {where}, not confirmed (--keep-slower)"
        extra = ", --keep-slower" if st.keep_slower and not v.faster else ""
        return f"kept {chosen.name}: {v.speedup:.3f}x faster {where} ({v.details()}{extra})"
    if shown is None:
        return "no verified candidate differs from the original; kept the original"
    v = shown.confirmation
    why = (v.reason if v is not None else
           f"{shown.speedup:.3f}x side by side, not confirmed" if shown.speedup is not None else "not timed")
    return (f"no candidate is faster {where} (best: {shown.name}, {why}); kept the original (--keep-slower writes "
            "the fastest candidate anyway)")


def _spelling_rules() -> list[Rule]:
    """The spelling pass: the ``ort-spelling`` rules, and ``cpu_reshape_reshape`` so that a peer's reshape round
    trips (head split and back, onnxscript's MultiHeadAttention inputs) do not hide the projections from them."""
    from graphsub.rules.library import get_set

    return [*get_set("ort-spelling"), *(r for r in get_set("cpu") if r.name == "cpu_reshape_reshape")]


def _search_fn(rule_list: Sequence[Rule], cm: Any, st: _Settings, cleanup: bool = True,
               params: dict[str, Any] | None = None) -> Any:
    """The portfolio's ``search_fn``: graphsub's search on any graph (an imported peer output too), its best graph
    finalized with the graph's weights; with ``cleanup``, each search starts from the graph cleaned
    (:mod:`graphsub.rules.cleanup`). Equality saturation prices ops one by one (``measured[min]``)."""
    from graphsub.cost import get_model
    from graphsub.data import materialize
    from graphsub.search import search

    def fn(g: Graph, budget_s: float, algo: str) -> tuple[Graph, tuple[Any, ...]]:
        model = get_model("measured[min]", threads=st.threads, progress=False) if algo == "eqsat" else cm
        start, cleaned = cleaned_start(g) if cleanup else (g, ())
        r = search(start, rule_list, model, Budget(time_s=budget_s), st.seed, algo=algo, **(params or {}))
        sequence = ((CLEANUP_STEP,) if cleaned else ()) + r.sequence
        if not sequence:
            return g, ()
        return finalize(materialize(g, st.seed), r.best, st.seed), sequence

    return fn


def _ort_search_s(cfg: OptimizeConfig) -> float:
    """Seconds of the search priced by onnxruntime's kernels: the config's, on the CPU provider (the kernels are
    priced there), with the portfolio on (nothing is timed otherwise)."""
    return cfg.ort_search_s if cfg.provider == "cpu" and cfg.measure_latency else 0.0


def _ort_search_fn(rule_list: Sequence[Rule], st: _Settings, cleanup: bool) -> Any:
    """The ``search-ort`` source's search (:mod:`graphsub.optimize.sources.ort_search`): the call's rules and the
    passes' rules, priced by ``ort-kernels``, greedy with its compound moves, then the rules no price sees
    (``unpriced``); its cost model made when it first runs."""
    from graphsub.cost import get_model
    from graphsub.optimize.sources.ort_search import compounds, search_rules, unpriced

    def fn(g: Graph, budget_s: float, algo: str) -> tuple[Graph, tuple[Any, ...]]:
        model = get_model("ort-kernels", threads=st.threads, progress=False)
        params = {"batch": True, "compounds": compounds()} if algo == "greedy" else {}
        best, steps = _search_fn(search_rules(rule_list), model, st, cleanup, params)(g, budget_s, algo)
        return unpriced(best, steps) if steps else (best, steps)

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


def _finish(res: OptimizeResult, run: _Run) -> OptimizeResult:
    run.timings["total_s"] = run.timers.clock() - run.t0
    res.peak_rss_mb = peak_rss_mb()
    if stop_requested():
        res.budget_stop = "interrupt"
    elif run.cut:
        res.budget_stop = run.cut
    return res


__all__ = ["DEFAULT_ALGO", "DEFAULT_BUDGET_S", "DEFAULT_COST", "DEFAULT_RULES", "DEFAULT_TIME_S", "ProgressFn",
           "default_threads", "load_input", "optimize"]
