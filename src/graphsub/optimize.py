"""End-to-end optimization of an ONNX model: search, verify, measure, keep only what is faster.

:func:`optimize` is the library behind ``graphsub optimize``:

1. load the model (an ``.onnx`` path, ``zoo:NAME`` or a :class:`~graphsub.ir.graph.Graph`); ops
   graphsub does not model stay ``opaque`` nodes, which no rule matches, so they split the graph
   into independently optimizable regions;
2. search for a cheaper equivalent graph (rule set, cost model and algorithm by name);
3. fold weight-only subgraphs and **verify** the result against the input in onnxruntime on random
   inputs with several seeds (integer inputs in their valid ranges, see :mod:`graphsub.data`); on
   failure, **bisect** the substitution sequence -- replaying prefixes from the input graph (node ids
   are stable across copy-on-write edits, so each step's match is found again by rule name and
   node ids) -- to name the first substitution that breaks equivalence and the output it breaks
   (:mod:`graphsub.optimize_verify`);
4. **time** input and output end to end in onnxruntime (median of repeats, fixed threads) under
   ``ORT_ENABLE_ALL`` and ``ORT_DISABLE_ALL``, in alternating rounds; keep the original unless the
   result is faster under ``ORT_ENABLE_ALL`` -- median speedup above ``min_speedup`` *and* faster in
   at least 80% of the rounds, so that timing noise does not pass for a gain -- or ``keep_slower``;
5. write the chosen model atomically (never over the input);
6. optionally write a self-contained HTML **report** (:mod:`graphsub.report`): histograms, the
   applied substitutions, cost and latency, the search trace and pictures of the changed regions --
   also when nothing was written (verification failed, or the original was kept).

The default cost model is ``fused`` (fusion-aware measured costs for ``ORT_ENABLE_ALL``): of the
cost models, it ranks measured ``ORT_ENABLE_ALL`` latencies best (Spearman 0.994 in
``benchmarks/results/cost_calibration.json``).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.errors import ExportError, GraphsubError
from graphsub.ir.graph import Graph
from graphsub.optimize_verify import Failure, bisect, check, finalize, replay
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget, SearchResult

DEFAULT_ALGO = "taso"
DEFAULT_COST = "fused[min]"  # the minimum of repeats: far more repeatable than the median on a loaded machine
DEFAULT_RULES = "default"
LEVELS = ("all", "disable")

#: ``progress(phase, elapsed_s, best_cost)``; phases: load, search, verify, bisect, time, write, report
ProgressFn = Callable[[str, float, float | None], None]


@dataclass
class OptimizeResult:
    """What :func:`optimize` did; ``graph`` is the model chosen (optimized or the original)."""

    model: str
    original: Graph
    optimized: Graph
    graph: Graph
    search: SearchResult
    verified: bool
    max_abs_diff: float
    worst_output: str = ""
    latency_ms: dict[str, dict[str, Any]] = field(default_factory=dict)  # level -> {before, after, rounds}
    kept_original: bool = False
    decision: str = ""
    written: str | None = None
    failure: Failure | None = None
    threads: int = 1
    seeds: tuple[int, ...] = ()
    timings_s: dict[str, float] = field(default_factory=dict)
    rule_set: str = ""  # the rule-set spec (or "N rules" for a list)
    cost_model: str = ""
    rules: tuple[Rule, ...] = field(default=(), repr=False)  # to replay the sequence (report pictures)
    report: str | None = None  # where the HTML report was written

    def speedup(self, level: str) -> float | None:
        """``before / after`` latency under ``level`` (``all`` or ``disable``); None if not timed."""
        lat = self.latency_ms.get(level)
        return lat["before"] / lat["after"] if lat and lat["after"] > 0 else None

    @property
    def applied(self) -> list[dict[str, Any]]:
        return [{"rule": s.rule, "nodes": list(s.nodes), "cost": s.cost} for s in self.search.sequence]

    def to_dict(self) -> dict[str, Any]:
        lat_all = self.latency_ms.get("all", {})
        lat_dis = self.latency_ms.get("disable", {})
        r = self.search
        return {
            "model": self.model,
            "verified": self.verified,
            "max_abs_diff": self.max_abs_diff if math.isfinite(self.max_abs_diff) else None,  # JSON-safe
            "worst_output": self.worst_output,
            "latency_ms_before": lat_all.get("before"),
            "latency_ms_after": lat_all.get("after"),
            "latency_ms_before_disabled": lat_dis.get("before"),
            "latency_ms_after_disabled": lat_dis.get("after"),
            "speedup_ort_all": self.speedup("all"),
            "speedup_ort_disabled": self.speedup("disable"),
            "latency_rounds_ms": {lv: v.get("rounds") for lv, v in self.latency_ms.items()},
            "kept_original": self.kept_original,
            "decision": self.decision,
            "written": self.written,
            "applied": self.applied,
            "failure": None if self.failure is None else self.failure.to_dict(),
            "algorithm": r.algorithm,
            "initial_cost": r.initial_cost,
            "best_cost": r.best_cost,
            "search_time_s": r.wall_time_s,
            "stopped_by": r.stopped_by,
            "ops_before": self.original.num_ops,
            "ops_after": self.optimized.num_ops,
            "opaque_ops": sum(1 for _ in self.original.ops_of("opaque")),
            "threads": self.threads,
            "seeds": list(self.seeds),
            "timings_s": self.timings_s,
            "rule_set": self.rule_set,
            "cost_model": self.cost_model,
            "report": self.report,
        }


# ----------------------------------------------------------------------------- pieces


def load_input(model: str | os.PathLike[str] | Graph,
               input_shapes: dict[str, tuple[int, ...]] | None = None) -> tuple[str, Graph]:
    """``(name, graph)`` for a Graph, ``zoo:NAME[:k=v,...]`` or an ONNX path."""
    if isinstance(model, Graph):
        return model.name, model
    from graphsub.cli_common import load_model

    spec = os.fspath(model)
    return spec, load_model(spec, input_shapes)


def resolve_rules(rules: str | Sequence[Rule]) -> list[Rule]:
    """Rules from comma-separated set names (duplicates by name dropped) or a list of rules."""
    if not isinstance(rules, str):
        return list(rules)
    from graphsub.rules.library import get_set

    out: dict[str, Rule] = {}
    for name in rules.split(","):
        for r in get_set(name.strip()):
            out.setdefault(r.name, r)
    return list(out.values())


def time_model(model: bytes | str, feeds: dict[str, np.ndarray], *, level: str, threads: int,
               budget_ms: float = 400.0) -> float:
    """Median end-to-end latency (ms) of an ONNX model (serialized or a path) in onnxruntime at ``level``."""
    from graphsub.cost.measured import time_session
    from graphsub.frontends.ort import make_session

    sess = make_session(model, optimization=level, threads=threads)
    return time_session(sess, feeds, budget_ms=budget_ms, warmup=3, min_repeats=7, max_repeats=100_000).median_ms


def measure(before: bytes | str, after: bytes | str, feeds: dict[str, np.ndarray], *, threads: int, budget_ms: float,
            rounds: int = 5) -> dict[str, dict[str, Any]]:
    """Latency of both models at each level of :data:`LEVELS`: ``{level: {before, after, rounds}}``,
    the medians over ``rounds`` alternating measurements (so drifting machine load hits both alike);
    ``rounds`` lists each round's ``(before, after)``."""
    out: dict[str, dict[str, Any]] = {}
    for level in LEVELS:
        pairs = []
        for _ in range(rounds):
            b = time_model(before, feeds, level=level, threads=threads, budget_ms=budget_ms)
            pairs.append((b, time_model(after, feeds, level=level, threads=threads, budget_ms=budget_ms)))
        out[level] = {"before": float(np.median([p[0] for p in pairs])),
                      "after": float(np.median([p[1] for p in pairs])), "rounds": pairs}
    return out


def _consistent(rounds: Sequence[tuple[float, float]]) -> bool:
    """Whether ``after < before`` in at least 80% of the timing rounds (all rounds when there are
    fewer than five; vacuously true when there are none)."""
    faster = sum(1 for b, a in rounds if a < b)
    return faster >= (len(rounds) if len(rounds) < 5 else math.ceil(0.8 * len(rounds)))


def write_bytes(data: bytes, path: str | os.PathLike[str], *, suffix: str = ".onnx") -> Path:
    """Write ``data`` atomically (temporary file, named ``.graphsub-*SUFFIX``, in the same directory,
    then ``os.replace``)."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ExportError(f"{out}: directory {parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".graphsub-", suffix=suffix, dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _has_external_data(path: str) -> bool:
    import onnx

    m = onnx.load(path, load_external_data=False)
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer)


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    pa, pb = Path(a), Path(b)
    return pa.resolve() == pb.resolve() or (pa.exists() and pb.exists() and os.path.samefile(pa, pb))


# ----------------------------------------------------------------------------- the pipeline


def optimize(
    model: str | os.PathLike[str] | Graph,
    *,
    output: str | os.PathLike[str] | None = None,
    report: str | os.PathLike[str] | None = None,
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
    input_shapes: dict[str, tuple[int, ...]] | None = None,
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
    written when verification fails.  ``report``: where to write an HTML report (always, when given;
    see :func:`graphsub.report.render_report`).
    Raises GraphsubError for bad input or an output (or report) that is the input file,
    ExportError/OSError when the output or the report cannot be written.
    """
    from graphsub.cost import get_model
    from graphsub.data import materialize, random_inputs
    from graphsub.frontends.onnx_export import export_graph
    from graphsub.search import search

    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    note = progress or (lambda phase, elapsed, best: None)
    if output is not None and not isinstance(model, Graph) and not str(model).startswith("zoo:") \
            and _same_file(model, output):
        raise GraphsubError(f"refusing to overwrite the input file {model}")
    if report is not None and not isinstance(model, Graph) and not str(model).startswith("zoo:") \
            and _same_file(model, report):
        raise GraphsubError(f"refusing to overwrite the input file {model} with the report")
    note("load", 0.0, None)
    name, graph = load_input(model, input_shapes)
    rule_list = resolve_rules(rules)
    cm = get_model(cost, threads=threads, progress=False)
    timings["load_s"] = time.perf_counter() - t0

    # search, reporting the best cost seen (every state the algorithms keep is priced by scalar())
    t = time.perf_counter()
    best, last = [float("inf")], [0.0]
    scalar = cm.scalar

    def tracked(c: Any) -> float:
        v = scalar(c)
        now = time.perf_counter() - t
        if v < best[0] or now - last[0] > 0.2:  # on improvement, and at most 5 times a second otherwise
            best[0], last[0] = min(v, best[0]), now
            note("search", now, best[0])
        return v

    setattr(cm, "scalar", tracked)  # noqa: B010  (instance attribute shadows the method)
    try:
        result = search(graph, rule_list, cm, budget or Budget(time_s=30.0), seed, algo=algo, **search_params)
    finally:
        delattr(cm, "scalar")
    timings["search_s"] = time.perf_counter() - t

    # verify
    t = time.perf_counter()
    note("verify", 0.0, result.best_cost)
    ref = materialize(graph, seed)
    seed_list = tuple(seed + 1000 * i for i in range(max(seeds, 1)))
    tol: dict[str, Any] = {"rtol": rtol, "atol": atol}
    final = finalize(ref, result.best, seed) if result.sequence else ref
    ok, diff, worst = check(ref, final, seed_list, **tol) if result.sequence else (True, 0.0, "")
    res = OptimizeResult(name, ref, final, ref, result, ok, diff, worst, threads=threads, seeds=seed_list,
                         timings_s=timings, rule_set=rules if isinstance(rules, str) else f"{len(rule_list)} rules",
                         cost_model=cost, rules=tuple(rule_list))
    timings["verify_s"] = time.perf_counter() - t
    if not ok:
        t = time.perf_counter()
        note("bisect", 0.0, None)
        res.failure = bisect(graph, ref, rule_list, result.sequence, seed_list, seed, **tol)
        res.decision = "verification failed: " + res.failure.message + "; nothing written"
        timings["bisect_s"] = time.perf_counter() - t
        return _finish(res, report, t0, note)

    # time both under ORT_ENABLE_ALL and ORT_DISABLE_ALL (the input file as given, not a re-export)
    is_file = not isinstance(model, Graph) and not str(model).startswith("zoo:")
    before: bytes | str = os.fspath(model) if is_file else export_graph(ref).SerializeToString()  # type: ignore[arg-type]
    after_model = export_graph(final) if result.sequence else None
    after = after_model.SerializeToString() if after_model is not None else before
    if measure_latency:
        t = time.perf_counter()
        note("time", 0.0, None)
        feeds = random_inputs(graph, seed)
        if result.sequence:
            res.latency_ms = measure(before, after, feeds, threads=threads, budget_ms=timing_budget_ms)
        else:
            for lv in LEVELS:
                v = time_model(before, feeds, level=lv, threads=threads, budget_ms=timing_budget_ms)
                res.latency_ms[lv] = {"before": v, "after": v}
        timings["time_s"] = time.perf_counter() - t

    sp = res.speedup("all")
    if not result.sequence:
        res.kept_original, res.decision = True, "no cheaper equivalent graph found; kept the original"
    elif keep_slower:
        res.decision = "kept the optimized model" + (" (--keep-slower)" if sp is not None and sp <= min_speedup
                                                     else "")
    elif sp is None:
        res.decision = "kept the optimized model (latency not measured)"
    elif sp > min_speedup and _consistent(res.latency_ms["all"].get("rounds", [])):
        res.decision = f"the optimized model is {sp:.3f}x faster under ORT_ENABLE_ALL"
    else:
        res.kept_original = True
        res.decision = (f"the optimized model is not faster under ORT_ENABLE_ALL ({sp:.3f}x, needed > {min_speedup:g}x "
                        "and faster in 80% of the timing rounds); kept the original (--keep-slower writes it anyway)")
    res.graph = ref if res.kept_original else final

    if output is not None:
        t = time.perf_counter()
        note("write", 0.0, None)
        from graphsub.frontends.onnx_io import read_model, write_model

        if after_model is not None and not res.kept_original:
            write_model(after_model, output)
        elif is_file and _has_external_data(str(before)):  # weights beside the file: re-save them with it
            write_model(read_model(str(before)), output, check=False)
        elif is_file:  # the input, byte for byte
            write_bytes(Path(before).read_bytes(), output)  # type: ignore[arg-type]
        else:
            write_bytes(before, output)  # type: ignore[arg-type]
        res.written = os.fspath(output)
        timings["write_s"] = time.perf_counter() - t
    return _finish(res, report, t0, note)


def _finish(res: OptimizeResult, report: str | os.PathLike[str] | None, t0: float, note: ProgressFn) -> OptimizeResult:
    """Write the HTML report if asked (its ``total_s`` excludes the report's own time), and return ``res``."""
    res.timings_s["total_s"] = time.perf_counter() - t0
    if report is not None:
        t = time.perf_counter()
        note("report", 0.0, None)
        from graphsub.report import write_report

        res.report = os.fspath(report)
        write_report(res, report)
        res.timings_s["report_s"] = time.perf_counter() - t
    return res


__all__ = ["DEFAULT_ALGO", "DEFAULT_COST", "DEFAULT_RULES", "LEVELS", "Failure", "OptimizeResult", "ProgressFn",
           "bisect", "check", "finalize", "load_input", "measure", "optimize", "replay", "resolve_rules",
           "time_model", "write_bytes"]
