"""The suite run: for every model, every tool's output, verified, inspected and timed side by side.

For one model (:func:`run_model`):

1. every peer of :data:`~graphsub.optimize.peers.PEERS` rewrites the original as its users run it (each in a
   process of its own, so a crash or hang is a result, not an abort), and graphsub optimizes the original and each
   peer's output (``graphsub+PEER``: graphsub should compose -- never worse than the peer it follows);
2. every output is checked against the original: does ONNX Runtime load it, and does it compute the same outputs on
   random inputs (a peer that produces a wrong, invalid or unloadable model is reported as such and never timed);
3. what ONNX Runtime's own optimizer makes of each variant (op count, fused kernels) is read from its optimized
   graph;
4. all variants that load and verify are timed side by side in alternating rounds under ``ORT_ENABLE_ALL`` at each
   thread count (:mod:`graphsub.bench.suite.measure`), the original under plain ONNX Runtime (``ort``) being the
   baseline, with an A/A arm (the original again, in sessions of its own); each variant gets the decision of
   :func:`graphsub.optimize.decide.verdict` against the baseline;
5. graphsub's output meets the peer with the highest side-by-side speedup head-to-head, decided by
   :func:`graphsub.optimize.decide.compare` (fresh session groups with an A/A control, :func:`head_to_head`).

:func:`run_suite` appends one JSON record per model to ``<out>/<name>.jsonl`` (resumable: a model recorded with the
same tools and thread counts is not run again) and renders the table (:mod:`graphsub.bench.suite.table`).  The tools'
output models go to ``$GRAPHSUB_SUITE_WORK/<name>/<model>/`` (default ``~/.cache/graphsub/suite_work``), never
beside the results.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphsub.bench.records import append_record, load_avg, load_records, machine_info, timestamp, versions
from graphsub.bench.suite.measure import make_feeds, min_speedup, time_variants
from graphsub.optimize import decide
from graphsub.optimize.budget import DEFAULT_TIME_S, PER_GB_S, scaled_time_s
from graphsub.optimize.timing import Timers, resolve_timers

GRAPHSUB = "graphsub"
#: graphsub on its own: ``graphsub optimize --peers none`` (its rules, clean-up, search and passes; no peer's output)
GRAPHSUB_OWN = "graphsub-own"
#: graphsub's rules and searches alone: ``graphsub optimize --peers none --no-spelling`` (no peer's output and no
#: hand-ordered pass: the clean-up, the searches -- the one priced by onnxruntime's kernels with the passes' rules
#: among them -- and equality saturation)
GRAPHSUB_RULES = "graphsub-rules"
BASELINE = "ort"


@dataclass(frozen=True)
class SuiteInput:
    """What the runner needs of a model: an ONNX file and how to feed it (``inputs``: name, dtype, shape, and for
    integer inputs the valid range ``low``/``high``); ``transformer``: what ONNX Runtime's transformer optimizer
    needs (``model_type``, ``num_heads``, ``hidden_size``), None where it does not apply."""

    id: str
    path: Path
    inputs: tuple[dict[str, Any], ...]
    family: str = "unknown"
    transformer: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def default_tools(peers: Sequence[str]) -> list[str]:
    """The original under ONNX Runtime, each peer, graphsub alone (its default, which runs the peers itself), graphsub
    on its own (``--peers none``), graphsub's rules and searches alone (``--peers none --no-spelling``), and graphsub
    after each peer."""
    others = [p for p in peers if p != BASELINE]
    return [BASELINE, *others, GRAPHSUB, GRAPHSUB_OWN, GRAPHSUB_RULES, *(f"{GRAPHSUB}+{p}" for p in others)]


def _source_of(tool: str) -> str:
    """The variant a graphsub tool starts from (``graphsub+onnxslim`` -> ``onnxslim``; ``graphsub`` -> ``ort``)."""
    return tool.partition("+")[2] or BASELINE


#: the graphsub variants that decide at the thread count they are told: each thread count's column of each is a run
#: of its own (:func:`at_threads`)
VARIANTS = (GRAPHSUB, GRAPHSUB_OWN, GRAPHSUB_RULES)


def at_threads(n: int, tool: str = GRAPHSUB) -> str:
    """The tool name of ``tool`` run with ``--threads n`` in a record (``graphsub@1``, ``graphsub-own@1``): graphsub
    decides at the thread count it is told, so each thread count's column is its own run (the plain ``graphsub`` one
    ran at all cores, graphsub's default, or at the first thread count asked when all cores is not among them)."""
    return f"{tool}@{n}"


def thread_runs(tools: Sequence[str], threads: Sequence[int], cores: int) -> tuple[int | None, list[str]]:
    """The thread count the plain graphsub variants decide at (None: all cores, graphsub's default; the first of
    ``threads`` when ``cores`` is not among them, so that no run decides at a count that is not timed) and the extra
    runs, ``variant@N``, for each other thread count but all cores (run last).

    >>> thread_runs(["ort", "graphsub", "graphsub-own"], [1, 2], cores=2)
    (None, ['graphsub@1', 'graphsub-own@1'])
    >>> thread_runs(["ort", "graphsub", "graphsub-rules"], [1], cores=2)
    (1, [])
    """
    home = None if not threads or cores in threads else threads[0]
    extra = [n for n in threads if n not in (cores, home)]
    return home, [at_threads(n, v) for n in extra for v in VARIANTS if v in tools]


def produce(model: SuiteInput, tools: Sequence[str], work: Path, *, graphsub_budget_s: float | None,
            seed: int, threads: Sequence[int] = (), provider: str = "cpu") -> dict[str, dict[str, Any]]:
    """Run every tool on ``model``, each in a fresh process (a crash or hang is a result); per tool: ``status``,
    ``error``, ``seconds``, what the tool reported (``info``) and ``path`` (the output, when ok). Each graphsub
    variant among the tools (:data:`VARIANTS`) also runs as ``variant@N`` for each of ``threads`` but all cores (run
    last; :func:`thread_runs`)."""
    from graphsub.cost.env import all_cores
    from graphsub.optimize.peers import PEERS, PeerFn, PeerInput, run_peer

    work.mkdir(parents=True, exist_ok=True)
    meta = PeerInput(transformer=model.transformer,
                     input_shapes={i["name"]: tuple(i["shape"]) for i in model.inputs}, provider=provider)
    home, extra = thread_runs(tools, threads, all_cores())
    options: dict[str, dict[str, Any]] = {GRAPHSUB: {}, GRAPHSUB_OWN: {"peers": "none"},
                                          GRAPHSUB_RULES: {"peers": "none", "spelling": False}}
    registry: dict[str, PeerFn] = dict(PEERS)
    for tool in [*VARIANTS, *extra]:
        variant, _, n = tool.partition("@")
        registry[tool] = functools.partial(graphsub_tool, budget_s=graphsub_budget_s, seed=seed, provider=provider,
                                           threads=int(n) if n else home, **options[variant])
    out: dict[str, dict[str, Any]] = {}
    for tool in [*tools, *extra]:
        src = str(model.path)
        if tool.startswith(f"{GRAPHSUB}+"):
            src = out.get(_source_of(tool), {}).get("path", "")
            if not src:
                out[tool] = {"status": "not-applicable", "error": f"{_source_of(tool)} produced no model",
                             "seconds": 0.0}
                continue
        dst = work / f"{tool}.onnx"
        budget = scaled_time_s(DEFAULT_TIME_S, PER_GB_S, os.path.getsize(src)) if graphsub_budget_s is None else \
            graphsub_budget_s
        timeout = (budget or DEFAULT_TIME_S) * 6 + 300 if tool.startswith(GRAPHSUB) else 600
        res = run_peer(tool.partition("+")[0], Path(src), dst, meta, registry=registry, timeout_s=timeout)
        out[tool] = {"status": res.status, "error": res.error, "seconds": res.seconds, **res.info}
        if res.status == "ok":
            out[tool]["path"] = str(dst)
    return out


def graphsub_tool(src: Path, dst: Path, meta: Any, *, budget_s: float | None, seed: int,
                  threads: int | None = None, provider: str = "cpu", peers: str = "auto",
                  spelling: bool = True) -> dict[str, Any]:
    """``graphsub optimize SRC -o DST --budget B [--threads N] [--provider P]`` as users run it: its defaults, the
    whole command bounded by ``budget_s`` (None: ``graphsub optimize``'s default, 100 s plus 400 s per GB of weights,
    unless the suite's ``--budget`` says otherwise), so that the record's ``seconds`` is the user's time to result;
    what it decided. ``peers="none"``: graphsub on its own (:data:`GRAPHSUB_OWN`); with ``spelling=False`` too, its
    rules and searches alone (:data:`GRAPHSUB_RULES`)."""
    from graphsub.optimize import optimize

    time_s, per_gb_s = (DEFAULT_TIME_S, PER_GB_S) if budget_s is None else (budget_s, 0.0)
    res = optimize(src, output=dst, time_s=time_s, time_per_gb_s=per_gb_s, seed=seed, threads=threads,
                   provider=provider, peers=peers, spelling=spelling)
    if not res.verified:
        raise RuntimeError(res.decision)
    chosen = res.chosen_candidate
    return {"decision": res.decision, "kept_original": res.kept_original, "applied": len(res.applied),
            "rules": sorted({a["rule"] for a in res.applied}), "graphsub_ops": [res.original.num_ops,
                                                                               res.optimized.num_ops],
            "graphsub_timings_s": res.timings_s, "threads": res.threads, "chosen": res.chosen,
            "chosen_base": None if chosen is None else chosen.base,
            "candidates": [{k: c.to_dict()[k] for k in ("name", "verified", "speedup", "faster_rounds", "screen_ratio",
                                                         "confirm_speedup", "confirmation",
                                                         "same_as", "rules", "error")} for c in res.candidates],
            "portfolio_notes": res.portfolio_notes}


def inspect(model: SuiteInput, outcomes: dict[str, dict[str, Any]], seed: int) -> None:
    """Check every produced output against the original and read ONNX Runtime's view of it (in place)."""
    from graphsub.bench.suite.measure import check_output
    from graphsub.optimize.peers import ort_view

    for o in outcomes.values():
        if o["status"] != "ok":
            continue
        chk = check_output(model.path, Path(o["path"]), model.inputs, seeds=(seed, seed + 1, seed + 2))
        o.update(loads=chk.loads, verified=chk.verified, max_abs_diff=chk.max_abs_diff, checker_ok=chk.checker_ok)
        if chk.error:
            o["check_error"] = chk.error
        if chk.loads:
            view = ort_view(Path(o["path"]), threads=1)
            o.update(ops=view.ops, fused_kernels=view.fused_kernels, op_histogram=view.op_histogram,
                     ort_signature=view.signature)


def _digest(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def time_all(model: SuiteInput, outcomes: dict[str, dict[str, Any]], threads: Sequence[int], *, rounds: int,
             budget_ms: float, seed: int, provider: str = "cpu", timers: Timers | None = None) -> dict[str, Any]:
    """Time the verified variants side by side at each thread count (in place); returns the load averages.
    ``timers`` (:class:`~graphsub.optimize.timing.Timers`; None: the current ones) time every session: the
    side-by-side rounds' (:func:`~graphsub.bench.suite.measure.time_variants`) and the head-to-head's
    (:func:`head_to_head`).

    Byte-identical outputs (graphsub keeping the peer's model it was given, a peer that changed nothing) are one model:
    timed once, and the others say ``same_as``; so differences in the table are never noise between equal files.  So
    are outputs that ONNX Runtime runs exactly alike (the same fingerprint of its optimized graph, ``ort_signature``:
    the same kernels on the same shapes); those also say ``same_after_ort``.  That fingerprint is the CPU provider's,
    so on another ``provider`` only byte-identical files count as one."""
    first: dict[str, str] = {}
    paths: dict[str, Path] = {}
    for tool, o in outcomes.items():  # graphsub@N come last: they are the ones that say same_as
        if o.get("verified"):
            d, sig = _digest(Path(o["path"])), o.get("ort_signature")
            if d in first:
                o["same_as"] = first[d]
            elif sig and sig in first and provider == "cpu":
                o["same_as"], o["same_after_ort"] = first[sig], True
            else:
                first[d], paths[tool] = tool, Path(o["path"])
                if sig:
                    first[sig] = tool
    if BASELINE not in paths:
        return {"error": "the original does not verify against itself (NaN/inf outputs?)"}
    feeds = make_feeds(model.inputs, seed)
    loads: dict[str, Any] = {}
    for n in threads:  # variant@N is timed at N threads only
        mine = {t: p for t, p in paths.items() if "@" not in t or t.endswith(f"@{n}")}
        run = time_variants(mine, feeds, threads=n, rounds=rounds, budget_ms=budget_ms, provider=provider,
                            timers=timers, baseline=BASELINE)
        for tool, s in run.summary(BASELINE).items():
            outcomes[tool].setdefault("timing", {})[str(n)] = s
        loads[str(n)] = [run.load_avg_before, run.load_avg_after]
    for o in outcomes.values():
        if "same_as" in o:  # a copy: folding graphsub@N into graphsub must not change the file's twin
            o["timing"] = {n: {k: v for k, v in t.items() if k != "aa_rounds_ms"}  # the A/A arm: the baseline's
                           for n, t in outcomes[o["same_as"]]["timing"].items()}
    for n in threads:
        head_to_head(outcomes, paths, feeds, n, budget_ms=budget_ms, provider=provider, timers=timers)
    fold_threads(outcomes)
    return loads


def head_to_head(outcomes: dict[str, dict[str, Any]], paths: Mapping[str, Path], feeds: dict[str, Any], n: int, *,
                 budget_ms: float, provider: str = "cpu", timers: Timers | None = None) -> None:
    """graphsub's output at ``n`` threads against the peer with the highest side-by-side speedup there, decided by
    :func:`graphsub.optimize.decide.compare` -- the peer's model the original, graphsub's the candidate, in
    :data:`~graphsub.optimize.decide.GROUPS` groups of fresh sessions (the peer's, graphsub's, the peer's again: the
    A/A control) -- at ``graphsub optimize``'s threshold (:func:`~graphsub.bench.suite.measure.min_speedup`); stored
    as graphsub's ``timing[n]["head_to_head"]`` (in place): ``peer``, ``same_file``, ``ratio`` (the verdict's
    speedup, peer / graphsub latency: above 1, graphsub faster) and the verdict's
    :meth:`~graphsub.optimize.decide.Verdict.to_dict` (``faster``: graphsub ahead, ``slower``: behind, neither: a
    tie; ``speedup_ci``, ``aa_ratio``, ``rounds``, ``sessions``; the rounds: ``original_ms`` the peer's,
    ``candidate_ms`` graphsub's, ``aa_ms`` the peer's again).

    Why: the side-by-side table names the best of about seven peers on the same noisy rounds, and the maximum of
    seven ties is a few percent up (the winner's curse): in suite27_tf and suite28_tf (2026-11-27, in git history) a
    different model was "behind" a peer by ~3% in each run, and the gap did not reproduce when rerun.  Fresh sessions
    the pick did not see do not favour the lucky peer -- the step ``graphsub optimize`` itself applies before it keeps
    a candidate. ``timers``: the sessions' (their confirmation sessions; None: the current ones) and the clock."""
    mine = at_threads(n) if at_threads(n) in outcomes else GRAPHSUB
    ours = outcomes.get(mine, {})
    key = str(n)
    if not ours.get("verified") or key not in ours.get("timing", {}):
        return
    peers = [(o["timing"][key].get("speedup") or 0.0, t) for t, o in outcomes.items()
             if t != BASELINE and not t.startswith(GRAPHSUB) and o.get("verified") and key in o.get("timing", {})]
    if not peers:
        return
    peer = max(peers)[1]

    def path(tool: str) -> Path:
        return paths[tool] if tool in paths else paths[outcomes[tool]["same_as"]]

    a, b = path(mine), path(peer)
    rec: dict[str, Any] = {"peer": peer}
    if a == b:  # the same file (graphsub kept the peer's output): a tie by construction, not measured
        rec.update(same_file=True, ratio=1.0, faster=False, slower=False, reason="the same file: a tie")
    else:
        tm = resolve_timers(timers)
        v = decide.compare(*decide.session_makers(str(b), str(a), feeds, threads=n, provider=provider, timers=tm),
                           budget_ms=budget_ms, min_speedup=min_speedup(), clock=tm.clock)
        rec.update(same_file=False, ratio=v.speedup, **v.to_dict())
    ours["timing"][key] = {**ours["timing"][key], "head_to_head": rec}


def fold_threads(outcomes: dict[str, dict[str, Any]]) -> None:
    """Move each ``variant@N`` into its variant (in place; ``graphsub@1`` into ``graphsub``): its timing at N becomes
    the variant's at N (the plain run's is kept as ``timing_all_cores_run``), and what it decided goes under
    ``at_threads[N]``; so every table's graphsub columns at N threads are ``graphsub optimize --threads N``."""
    for tool in [t for t in outcomes if "@" in t]:
        sub, (variant, _, n) = outcomes.pop(tool), tool.partition("@")
        ours = outcomes.get(variant)
        if ours is None:
            continue
        ours.setdefault("at_threads", {})[n] = {k: v for k, v in sub.items() if k != "timing"}
        if n in ours.get("timing", {}):
            ours.setdefault("timing_all_cores_run", {})[n] = ours["timing"][n]
        timing = dict(ours.get("timing", {}))
        if n in sub.get("timing", {}) and sub.get("verified"):
            timing[n] = sub["timing"][n]
        else:  # a failed run at N: graphsub has no result at N
            timing.pop(n, None)
        ours["timing"] = timing


def run_model(model: SuiteInput, tools: Sequence[str], threads: Sequence[int], work: Path, *,
              graphsub_budget_s: float | None = None, rounds: int = 7, budget_ms: float = 300.0, seed: int = 0,
              provider: str = "cpu", timers: Timers | None = None) -> dict[str, Any]:
    """One model's record (see the module docstring). ``timers`` (:class:`~graphsub.optimize.timing.Timers`; None:
    the current ones): how the variants are timed (:func:`time_all`) and the clock of ``wall_time_s``; the tools
    themselves run in processes of their own, with the real ones."""
    clock = resolve_timers(timers).clock
    t0 = clock()
    rec: dict[str, Any] = {"id": model.id, "model": model.id, "path": str(model.path), "family": model.family,
                           "transformer": model.transformer, "meta": model.meta, "tools_requested": list(tools),
                           "threads": list(threads), "provider": provider, "started_at": timestamp(),
                           "load_avg_1m": load_avg()}
    outcomes = produce(model, tools, work / model.id, graphsub_budget_s=graphsub_budget_s, seed=seed,
                       threads=threads, provider=provider)
    inspect(model, outcomes, seed)
    rec["timing_load_avg"] = time_all(model, outcomes, threads, rounds=rounds, budget_ms=budget_ms, seed=seed,
                                      provider=provider, timers=timers)
    rec["tools"] = outcomes
    rec["wall_time_s"] = clock() - t0
    rec["finished_at"] = timestamp()
    rec["machine"], rec["versions"] = machine_info(), versions()
    return rec


def _done(rec: Mapping[str, Any], tools: Sequence[str], threads: Sequence[int], provider: str = "cpu") -> bool:
    return (set(tools) <= set(rec.get("tools", {})) and set(threads) <= set(rec.get("threads", []))
            and rec.get("provider", "cpu") == provider)


def suite_task(context: dict[str, Any], model: SuiteInput) -> dict[str, Any]:
    """:func:`run_model` as a Ray task: the record says which node ran it; an exception becomes the record's
    ``error`` (one model's failure never loses the others')."""
    from graphsub.distributed.executors import node_name

    try:
        rec = run_model(model, context["tools"], context["threads"], Path(context["work"]), **context["opts"])
    except Exception as e:  # one model's failure is its record
        rec = {"id": model.id, "model": model.id, "path": str(model.path), "family": model.family,
               "error": f"{type(e).__name__}: {e}", "tools": {}, "threads": list(context["threads"])}
    rec["node"] = node_name()
    return rec


def run_suite(models: Sequence[SuiteInput], tools: Sequence[str], threads: Sequence[int], out_dir: Path, *,
              name: str = "suite", resume: bool = True, on_model: Callable[[dict[str, Any]], None] | None = None,
              executor: str = "serial", ray_address: str | None = None, **opts: Any) -> list[dict[str, Any]]:
    """Run every model not recorded yet (with these tools and thread counts) and append its record to
    ``<out_dir>/<name>.jsonl``; returns the records of ``models`` (new and recorded). ``executor="ray"``: each model
    is a Ray task (:func:`suite_task`) holding its node's timing resource, so a node times one model at a time
    (:func:`graphsub.distributed.executors.map_ordered` with ``timing=True``); the models' files must be at the same
    path on every node, and the records are appended here as the tasks finish."""
    from graphsub.distributed.executors import check_executor, map_ordered

    check_executor(executor)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / f"{name}.jsonl"
    if not resume and jsonl.exists():
        jsonl.unlink()
    recorded = {r["id"]: r for r in load_records(jsonl)}
    work = Path(os.environ.get("GRAPHSUB_SUITE_WORK") or Path.home() / ".cache" / "graphsub" / "suite_work") / name
    provider = str(opts.get("provider", "cpu"))
    todo = [m for m in models if recorded.get(m.id) is None or not _done(recorded[m.id], tools, threads, provider)]

    def finished(k: int, rec: dict[str, Any]) -> None:
        append_record(jsonl, rec)
        recorded[rec["id"]] = rec
        if on_model is not None:
            on_model(rec)

    if executor == "serial":
        for k, model in enumerate(todo):
            finished(k, run_model(model, tools, threads, work, **opts))
    else:
        context = {"tools": list(tools), "threads": list(threads), "work": str(work), "opts": opts}
        map_ordered(suite_task, todo, executor=executor, context=context, ray_address=ray_address, on_done=finished,
                    timing=True)
    for model in models:
        if model not in todo and on_model is not None:
            on_model(recorded[model.id])
    return [recorded[m.id] for m in models]


__all__ = ["BASELINE", "GRAPHSUB", "GRAPHSUB_OWN", "GRAPHSUB_RULES", "VARIANTS", "SuiteInput", "at_threads",
           "default_tools", "fold_threads", "graphsub_tool", "inspect", "produce", "run_model", "run_suite",
           "suite_task", "thread_runs", "time_all"]
