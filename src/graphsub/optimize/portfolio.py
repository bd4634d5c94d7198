"""The portfolio step of :func:`graphsub.optimize.optimize`: several distinct candidates, each verified against the
original and timed end to end, side by side, in ONNX Runtime as the user will run it; the fastest verified one wins.

A cost model ranks graphs well within what it models, but ONNX Runtime rewrites every graph again at session
creation (``ORT_ENABLE_ALL``), and some of its fusions are slower than what they replace on a given machine and
thread count (``experiments/results/ort_fusion_ablation.json``). So :func:`collect` makes candidates from several
sources and lets the clock decide:

* ``search``: graphsub's search (the ``--algo`` and ``--cost`` given), already verified by the pipeline;
* ``eqsat``: equality saturation over the same rules and cost (a different search, often a different graph);
* ``PEER``: the original passed through a peer's passes where that library is installed (``onnxscript``'s
  ``optimize_for_ort``, ``onnxslim``, ``onnxsim``, ``onnxoptimizer``), each in a fresh process with a timeout
  (:func:`graphsub.optimize.peers.run_peer`; a peer that fails or hangs is only a missing candidate);
* ``PEER+search``: graphsub's search on top of a peer's output;
* ``layout`` and ``X+layout``: the original and each candidate above with its channels-last MLPs (ConvNeXt's
  ``Transpose -> LayerNorm -> MatMul -> GELU -> MatMul -> Transpose``) written channels-first, MatMuls as 1x1
  convolutions, so that onnxruntime keeps its NCHWc layout through them (:mod:`graphsub.frontends.onnx_layout`);
  only when the original has such a region; made before the peers run (for the peers' candidates after them), so
  that a budget the peers use up cannot drop the largest CNN gain;
* ``X+spelling`` for each of the above: the ``ort-spelling`` rules (:mod:`graphsub.rules.library.ort_spelling`)
  applied everywhere, which change only which of ONNX Runtime's own fusions happen (``Add -> LayerNormalization``
  spelled with ``Sum``, so that it stays a ``LayerNormalization``; a peer's ``SkipLayerNormalization`` undone), then
  the rows layout (:mod:`graphsub.frontends.onnx_rows`): ``[batch, sequence, hidden]`` activations between attention
  cores written as ``[batch * sequence, hidden]``, so that onnxruntime's ``Gemm`` nodes need no ``Reshape`` copies.

Every candidate is compared with the original on the pipeline's random inputs (:func:`verify`); one that differs,
does not load or does not run is dropped and reported, never timed. Identical files are kept once.

Time: :class:`Sources` carries the call's :class:`~graphsub.deadline.Deadline` and the seconds to keep for the
phases after the portfolio (``tail_s``). Each source gets the smaller of its own time and what is left before the
tail, and is skipped (with a note) when that is less than its minimum (:mod:`graphsub.optimize.budget`); the peers'
timeout ends where the tail begins, and a stop request (the first Ctrl-C) stops them and skips what has not run.
:func:`verify` leaves the candidates it reaches after the deadline unverified (never timed, never chosen).

The pipeline times the verified candidates side by side (:func:`record_timing`), then confirms the
:func:`leaders` one at a time against the original in fresh session groups with an A/A control
(:func:`graphsub.optimize.decide.compare`, :func:`record_confirmation`): picking the best of several noisy
measurements favours a lucky candidate, and fresh measurements do not. :func:`choose` keeps the fastest candidate
whose confirmation says faster (its interval above 1.0x, its speedup above ``min_speedup`` and above what the A/A
control reads), else the original.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.deadline import NO_DEADLINE, Deadline
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.optimize.decide import Verdict
from graphsub.rules.rule import Rule
from graphsub.search.base import Step

#: peers a portfolio may use, with the module that must be importable, in the order they run
PEER_MODULES: dict[str, str] = {"onnxscript": "onnxscript.rewriter.ort_fusions", "onnxslim": "onnxslim",
                                "onnxsim": "onnxsim", "onnxoptimizer": "onnxoptimizer"}
ORIGINAL = "original"


@dataclass
class Candidate:
    """One model the portfolio may keep. ``data`` is the serialized ONNX model; ``graph`` is set when graphsub
    can represent it (then search and spelling can work on top of it); ``steps`` are graphsub's substitutions
    that made it from its ``base`` (the candidate it was built on, or the original)."""

    name: str
    data: bytes
    graph: Graph | None = None
    base: str = ORIGINAL
    steps: tuple[Step, ...] = ()
    seconds: float = 0.0
    verified: bool | None = None
    max_abs_diff: float = math.nan
    error: str = ""
    same_as: str = ""  # a candidate with the same file (not timed twice)
    runs_as: str = ""  # the original or a candidate onnxruntime runs exactly as this one (not timed twice)
    rounds_ms: list[float] = field(default_factory=list)
    speedup: float | None = None
    faster_rounds: float | None = None
    screen_ratio: float | None = None  # original / candidate in the screening round, when there was one
    confirmation: Verdict | None = None  # the decision on it in fresh session groups with an A/A control

    @property
    def confirm_speedup(self) -> float | None:
        """The speedup its confirmation measured (None: not confirmed)."""
        return None if self.confirmation is None else self.confirmation.speedup

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def rules(self) -> list[str]:
        """The rules behind it, in order of first use (its base's too, when the base is graphsub's)."""
        return list(dict.fromkeys(s.rule for s in self.steps))

    def to_dict(self) -> dict[str, Any]:
        ms = statistics.median(self.rounds_ms) if self.rounds_ms else None
        return {"name": self.name, "base": self.base, "verified": self.verified,
                "max_abs_diff": self.max_abs_diff if math.isfinite(self.max_abs_diff) else None,
                "error": self.error, "same_as": self.same_as or None, "runs_as": self.runs_as or None, "ms": ms,
                "speedup": self.speedup,
                "faster_rounds": self.faster_rounds, "screen_ratio": self.screen_ratio, "rounds_ms": self.rounds_ms,
                "confirm_speedup": self.confirm_speedup,
                "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),
                "seconds": self.seconds,
                "substitutions": len(self.steps), "rules": self.rules,
                "ops": None if self.graph is None else self.graph.num_ops}


def _module_exists(dotted: str) -> bool:
    """Whether module ``dotted`` can be imported, found without importing anything (``find_spec`` of a submodule
    imports its parent packages: onnxscript's take 1.6 s, paid by every optimize call before the budget check)."""
    parts = dotted.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for part in parts[1:]:
            locations = None if spec is None else spec.submodule_search_locations
            if not locations:
                return False
            spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
    except (ImportError, ValueError):
        return False
    return spec is not None


def installed_peers() -> tuple[str, ...]:
    """The peers of :data:`PEER_MODULES` whose library this Python can import."""
    return tuple(name for name, module in PEER_MODULES.items() if _module_exists(module))


def resolve_peers(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``"auto"``: the installed peers; ``"none"`` or empty: none; else a comma-separated list (or a sequence) of
    names from :data:`PEER_MODULES`. Raises GraphsubError for an unknown name.

    >>> resolve_peers("none"), resolve_peers("onnxsim, onnxslim")
    ((), ('onnxsim', 'onnxslim'))
    """
    names = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else list(spec)
    names = [n for n in names if n]
    if names in (["auto"],):
        return installed_peers()
    if names in ([], ["none"]):
        return ()
    bad = [n for n in names if n not in PEER_MODULES]
    if bad:
        raise GraphsubError(f"unknown peer(s) {', '.join(bad)}; known: auto, none, {', '.join(PEER_MODULES)}")
    return tuple(dict.fromkeys(names))


def rewrite_everywhere(graph: Graph, rules: Sequence[Rule], limit: int = 10_000,
                       stop: Callable[[], bool] | None = None) -> tuple[Graph, tuple[Step, ...]]:
    """Apply ``rules`` wherever they match, first match first, until none does (at most ``limit`` times, and not after
    ``stop()`` says so: every prefix is a sound rewrite); the graph and the substitutions applied. For rules that
    cannot re-enable themselves (the ``ort-spelling`` ones)."""
    from graphsub.errors import BudgetExceeded
    from graphsub.rules.apply import apply
    from graphsub.rules.match import find_all

    steps: list[Step] = []
    while len(steps) < limit and not (stop is not None and stop()):
        try:
            matches = find_all(graph, rules, stop=stop)
        except BudgetExceeded:
            break
        if not matches:
            break
        sub = apply(graph, matches[0])
        graph = sub.graph
        steps.append(Step(matches[0].rule.name, tuple(n for _, n in matches[0].nodes), math.nan))
    return graph, tuple(steps)


def export_bytes(graph: Graph) -> bytes:
    """The serialized ONNX model of a graph with data for every weight."""
    from graphsub.frontends.onnx_export import export_graph

    return bytes(export_graph(graph).SerializeToString())


@dataclass
class Portfolio:
    """What :func:`collect` gathers: the candidates in the order they were made, and one line per source that made
    none (a peer that failed, an import graphsub could not do)."""

    candidates: list[Candidate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    original_rounds: list[float] = field(default_factory=list)  # the original's per-round times (ms)
    skipped: list[str] = field(default_factory=list)  # the sources (and checks) left out for lack of time or a stop

    def add(self, cand: Candidate) -> Candidate:
        for other in self.candidates:
            if other.digest == cand.digest:
                cand.same_as = other.name
                break
        self.candidates.append(cand)
        return cand

    @property
    def distinct(self) -> list[Candidate]:
        return [c for c in self.candidates if not c.same_as]


@dataclass(frozen=True)
class Sources:
    """How to make candidates: ``search_fn(graph, budget_s, algo)`` runs graphsub's search (returning the best graph
    with data and its steps), ``spelling`` the rules of the spelling pass, ``peers`` the peers to run."""

    search_fn: Callable[[Graph, float, str], tuple[Graph, tuple[Step, ...]]]
    spelling: Sequence[Rule]
    peers: tuple[str, ...] = ()
    eqsat_s: float = 0.0
    on_top_s: float = 0.0
    peer_timeout_s: float = 120.0
    layout: bool = False  # ``layout`` candidates (graphsub.frontends.onnx_layout) where the original has the pattern
    rows: bool = False  # the spelling candidates also with their sequence activations as rows (frontends.onnx_rows)
    deadline: Deadline = NO_DEADLINE  # the call's
    tail_s: float = 0.0  # seconds to keep for the phases after the portfolio

    def left(self, seconds: float, reserve: float = 0.0) -> float:
        """The time a source that would take ``seconds`` gets now (0 after a stop request)."""
        return self.deadline.share(seconds, reserve=self.tail_s + reserve)

    def spent(self) -> bool:
        """Whether the portfolio's time is spent: the deadline passed, a stop was requested, or only the time kept for
        the tail (verifying, timing and writing) is left. No portfolio work starts then: on a 65 MB GPT-2 the
        spelling passes that ran into the tail left the best candidate too little time to be confirmed."""
        return self.deadline.expired() or self.left(math.inf) <= 0.0

    def skipped(self, portfolio: Portfolio, what: str) -> None:
        """Note that ``what`` did not run for lack of time or because a stop was requested."""
        why = "interrupted" if self.deadline.reason() == "interrupt" else "no time left in the budget"
        portfolio.notes.append(f"{what}: skipped: {why}")
        portfolio.skipped.append(what)


def collect(portfolio: Portfolio, ref: Graph, source: bytes | str, sources: Sources,
            note: Callable[[str], None] = lambda what: None) -> Portfolio:
    """Add candidates to ``portfolio`` (which holds the pipeline's ``search`` candidate, if any): eqsat, the spelling
    pass on each graph candidate, and each peer with graphsub on top (see the module docstring), each within the
    time ``sources`` leaves it."""
    from graphsub.optimize.budget import EQSAT_MIN_S, PEERS_MIN_S

    graph_bases: list[tuple[str, Graph, tuple[Step, ...]]] = [(ORIGINAL, ref, ())]
    graph_bases += [(c.name, c.graph, c.steps) for c in portfolio.distinct if c.graph]
    peers_reserve = (_peers_est() + sources.on_top_s * len(sources.peers)) if sources.peers else 0.0
    if sources.eqsat_s > 0:
        eqsat_s = sources.left(sources.eqsat_s, reserve=peers_reserve)
        if eqsat_s >= EQSAT_MIN_S:
            note("eqsat")
            _try(portfolio, "eqsat", lambda: _searched("eqsat", ORIGINAL, ref, sources, eqsat_s, "eqsat"))
            eq = portfolio.candidates[-1] if portfolio.candidates and portfolio.candidates[-1].name == "eqsat" else None
            if eq is not None and eq.graph is not None:
                graph_bases.append(("eqsat", eq.graph, eq.steps))
        else:
            sources.skipped(portfolio, "eqsat")
    for base, graph, steps in graph_bases:
        if sources.spent():
            sources.skipped(portfolio, f"{base}+spelling")
            continue
        _try(portfolio, f"{base}+spelling", functools.partial(_spelled, base, graph, steps, sources))
    laid: set[str] | None = None  # the bases the layout pass has seen (None: the original has no such region)
    if sources.layout:  # before the peers: cheap, and on ConvNeXt the largest gain (a budget cut must not drop it)
        note("layout")
        laid = _layouts(portfolio, source, sources, set())
    peer_s = sources.left(sources.peer_timeout_s, reserve=sources.on_top_s * len(sources.peers)) if sources.peers \
        else 0.0
    if sources.peers and peer_s < PEERS_MIN_S:
        sources.skipped(portfolio, "peers")
    elif sources.peers:
        shapes = {ref.nodes[n].sig.attr["name"]: ref.nodes[n].sig.out_types[0].shape for n in ref.inputs}
        with tempfile.TemporaryDirectory(prefix=".graphsub-peers-") as tmp:
            src = Path(tmp) / "original.onnx"
            if isinstance(source, bytes):
                src.write_bytes(source)
            else:
                src = Path(source)
            note("peers")
            results = _run_peers(sources, src, Path(tmp), shapes, time.perf_counter() + peer_s)
            for peer in sources.peers:
                note(peer)
                _peer(portfolio, peer, results[peer], Path(tmp), shapes, sources)
    if sources.layout and laid is not None and sources.peers:
        _layouts(portfolio, source, sources, laid)  # the peers' candidates
    return portfolio


LAYOUT_RULE = "layout_channels_first_mlp"
LAYOUT_EST_S = 1.0  # one rewrite of a ConvNeXt-T-sized file (110 MB): parse, rewrite, serialize


def _layouts(portfolio: Portfolio, source: bytes | str, sources: Sources, done: set[str]) -> set[str] | None:
    """``layout`` (the original) and ``X+layout`` (each distinct candidate X so far, but those in ``done``):
    channels-last MLP regions written channels-first (:mod:`graphsub.frontends.onnx_layout`); the bases seen so far,
    or None when the original has no such region (the other candidates come from it and none of the passes makes
    one, so a later call has nothing to do)."""
    from graphsub.frontends.onnx_layout import rewrite_bytes

    bases: list[tuple[str, bytes | str, tuple[Step, ...]]] = [] if ORIGINAL in done else [(ORIGINAL, source, ())]
    bases += [(c.name, c.data, c.steps) for c in portfolio.distinct if c.name not in done]
    done = set(done)
    for base, data, steps in bases:
        name = "layout" if base == ORIGINAL else f"{base}+layout"
        if sources.left(LAYOUT_EST_S) < LAYOUT_EST_S:
            sources.skipped(portfolio, name)
            continue
        t = time.perf_counter()
        try:
            got = rewrite_bytes(data if isinstance(data, bytes) else Path(data).read_bytes())
        except Exception as e:  # an optional candidate never fails the call (e.g. a model over protobuf's 2 GB)
            portfolio.notes.append(f"{name}: not made ({type(e).__name__}: {e})")
            return None
        done.add(base)
        if got is None:
            if base == ORIGINAL:
                return None
            continue
        blob, regions = got
        new = tuple(Step(LAYOUT_RULE, (), math.nan) for _ in range(regions))
        done.add(portfolio.add(Candidate(name, blob, None, base, steps + new, time.perf_counter() - t)).name)
    return done


def _peers_est() -> float:
    from graphsub.optimize.budget import PEERS_EST_S

    return PEERS_EST_S


def _run_peers(sources: Sources, src: Path, tmp: Path, shapes: Mapping[str, tuple[int, ...]],
               end: float) -> dict[str, Any]:
    """Every peer on ``src``, as many at once as the machine has cores (each in a process of its own: rewriting a
    model is no timing, and on big models the peers are most of the portfolio's time); their PeerResults. A peer
    is stopped at ``end`` (a ``time.perf_counter()`` reading) or on a stop request, and one whose turn comes later
    is not started."""
    from concurrent.futures import ThreadPoolExecutor

    from graphsub.cost.env import all_cores
    from graphsub.interrupt import stop_requested
    from graphsub.optimize.peers import PeerInput, PeerResult, kill_running, run_peer

    meta = PeerInput(transformer=None, input_shapes=dict(shapes))

    def one(peer: str) -> Any:
        left = end - time.perf_counter()
        if stop_requested() or left < 1.0:
            why = "interrupted" if stop_requested() else "no time left in the budget"
            return PeerResult(peer, "failed", f"not run: {why}", 0.0)
        return run_peer(peer, src, tmp / f"{peer}.onnx", meta, timeout_s=left, stop=stop_requested)

    with ThreadPoolExecutor(max_workers=max(1, min(len(sources.peers), all_cores()))) as pool:
        futures = {peer: pool.submit(one, peer) for peer in sources.peers}
        try:
            return {peer: f.result() for peer, f in futures.items()}
        except BaseException:  # Ctrl-C: stop the peers now rather than wait for them
            pool.shutdown(wait=False, cancel_futures=True)
            kill_running()
            raise


def _try(portfolio: Portfolio, name: str, make: Callable[[], Candidate | None]) -> None:
    """Add what ``make`` returns; a GraphsubError (or an export that fails) becomes a note, not a failure."""
    try:
        cand = make()
    except GraphsubError as e:
        portfolio.notes.append(f"{name}: {e}")
        return
    if cand is not None:
        portfolio.add(cand)


def _searched(name: str, base: str, graph: Graph, sources: Sources, budget_s: float, algo: str) -> Candidate | None:
    t = time.perf_counter()
    best, steps = sources.search_fn(graph, budget_s, algo)
    if not steps:
        return None
    return Candidate(name, export_bytes(best), best, base, steps, time.perf_counter() - t)


def _spelled(base: str, graph: Graph, steps: tuple[Step, ...], sources: Sources) -> Candidate | None:
    """``X+spelling``: the ``ort-spelling`` rules everywhere, then (with ``sources.rows``, where graphsub's types show a
    rank-3 projection) the rows layout of :mod:`graphsub.frontends.onnx_rows`; None when neither changes anything."""
    t = time.perf_counter()
    spelled, new = rewrite_everywhere(graph, sources.spelling, stop=sources.spent)
    if not new and not sources.rows:
        return None
    data = export_bytes(spelled)
    if sources.rows and not sources.spent() and _has_rows(spelled):
        rows = _rows(data)
        if rows is not None:
            data = rows[0]
            new += tuple(Step(ROWS_RULE, (), math.nan) for _ in range(rows[1]))
    if not new:
        return None
    name = "spelling" if base == ORIGINAL else f"{base}+spelling"
    # the graph is graphsub's before the rows layout: a layout of the ONNX file that graphsub's graph does not model
    # (the same ops, some reshapes apart; re-importing the file would cost ~0.5 s a candidate on a 65 MB model)
    return Candidate(name, data, spelled, base, steps + new, time.perf_counter() - t)


ROWS_RULE = "layout_rows_2d"


def _has_rows(graph: Graph) -> bool:
    """Whether ``graph`` has what the rows layout works on -- a projection of a rank-3 activation by a matrix, or a
    rank-3 reshape of a 2-D product -- read from graphsub's own types, so that a model without any (a CNN) does not
    pay for onnx's shape inference on every candidate."""
    for node in graph.nodes.values():
        sig = node.sig
        if sig.op == "matmul" and len(sig.in_types) == 2 and len(sig.in_types[0].shape) == 3 and \
                len(sig.in_types[1].shape) == 2:
            return True
        if sig.op == "reshape" and len(sig.in_types[0].shape) == 2 and len(sig.out_types[0].shape) == 3:
            return True
    return False


def _rows(data: bytes) -> tuple[bytes, int] | None:
    """``data`` with its sequence activations written as rows (:mod:`graphsub.frontends.onnx_rows`) and how many
    connected parts were; None when the pass finds nothing to do or fails (an optional part of a candidate never
    fails the call)."""
    from graphsub.frontends.onnx_rows import rewrite_bytes

    try:
        return rewrite_bytes(data)
    except Exception:  # e.g. onnx's shape inference refusing a graph onnxruntime runs: no rows, same candidate
        return None


def _peer(portfolio: Portfolio, peer: str, res: Any, tmp: Path, shapes: Mapping[str, tuple[int, ...]],
          sources: Sources) -> None:
    """Add ``peer``'s output (its PeerResult ``res``), and graphsub's search and spelling on top of it."""
    dst = tmp / f"{peer}.onnx"
    if res.status != "ok":
        portfolio.notes.append(f"{peer}: {res.status}: {res.error}")
        return
    if any(p.name != dst.name for p in tmp.iterdir() if p.name.startswith(dst.stem + ".")):
        portfolio.notes.append(f"{peer}: wrote external data; not a candidate")
        return
    cand = portfolio.add(Candidate(peer, dst.read_bytes(), base=ORIGINAL, seconds=res.seconds))
    if cand.same_as:
        return
    try:
        from graphsub.frontends.onnx_io import load

        graph = load(dst, input_shapes=shapes)
    except (GraphsubError, ValueError) as e:
        portfolio.notes.append(f"{peer}: graphsub cannot import its output ({e}); no search on top")
        return
    cand.graph = graph
    bases: list[tuple[str, Graph, tuple[Step, ...]]] = [(peer, graph, ())]
    if sources.on_top_s > 0:
        from graphsub.optimize.budget import ON_TOP_MIN_S

        on_top_s = sources.left(sources.on_top_s)
        if on_top_s >= ON_TOP_MIN_S:
            _try(portfolio, f"{peer}+search",
                 lambda: _searched(f"{peer}+search", peer, graph, sources, on_top_s, "taso"))
            top = portfolio.candidates[-1]
            if top.name == f"{peer}+search" and top.graph is not None and not top.same_as:
                bases.append((top.name, top.graph, top.steps))
        else:
            sources.skipped(portfolio, f"{peer}+search")
    for base, g, steps in bases:
        if sources.spent():
            sources.skipped(portfolio, f"{base}+spelling")
            continue
        _try(portfolio, f"{base}+spelling", functools.partial(_spelled, base, g, steps, sources))


def verify(portfolio: Portfolio, source: bytes | str, feeds: Sequence[tuple[int, Mapping[str, np.ndarray]]], *,
           rtol: float, atol: float, skip: Sequence[str] = (), deadline: Deadline = NO_DEADLINE,
           estimate_s: float = 0.0) -> None:
    """Compare every distinct candidate not in ``skip`` (already verified) with the original on ``feeds``
    (``(seed, inputs)`` draws) in ONNX Runtime; candidates with the same file inherit the verdict. Candidates reached
    after ``deadline`` (or a stop request), or when less than ``estimate_s`` (what one check takes) is left, stay
    unverified (``verified`` None, ``error`` says why)."""
    from graphsub.optimize.peers import Reference, check_feeds

    original: Path | bytes = source if isinstance(source, bytes) else Path(source)
    reference = Reference(original)  # loaded and run once for all the candidates
    for c in portfolio.distinct:
        if c.name in skip:
            continue
        if deadline.expired() or deadline.remaining() < estimate_s:
            why = "interrupted" if deadline.reason() == "interrupt" else "no time left in the budget"
            c.verified, c.error = None, f"not verified: {why}"
            portfolio.skipped.append(f"verifying {c.name}")
            continue
        chk = check_feeds(original, c.data, feeds, rtol=rtol, atol=atol, reference=reference)
        c.verified, c.max_abs_diff, c.error = chk.verified, chk.max_abs_diff, chk.error
    by_name = {c.name: c for c in portfolio.candidates}
    for c in portfolio.candidates:
        if c.same_as:
            twin = by_name[c.same_as]
            c.verified, c.max_abs_diff, c.error = twin.verified, twin.max_abs_diff, twin.error


def record_timing(portfolio: Portfolio, rounds: Mapping[str, Sequence[float]]) -> None:
    """Store the per-round medians of :func:`graphsub.optimize.timing.time_candidates` (keyed by candidate name,
    plus :data:`ORIGINAL`) in the candidates, with their speedup (median of the per-round ratios) and the share of
    rounds in which they were faster than the original; twins share their timing."""
    base = portfolio.original_rounds = list(rounds[ORIGINAL])
    by_name = {c.name: c for c in portfolio.candidates}
    for c in portfolio.candidates:
        own = rounds.get(c.same_as or c.name)
        if own is None or (c.same_as and by_name[c.same_as].verified is not True):
            continue
        c.rounds_ms = list(own)
        c.speedup = statistics.median(b / v for b, v in zip(base, own, strict=True) if v > 0)
        c.faster_rounds = sum(v < b for b, v in zip(base, own, strict=True)) / len(own)


def leaders(portfolio: Portfolio, limit: int = 2) -> list[Candidate]:
    """The timed, verified candidates with a median speedup above 1 in the side-by-side rounds, fastest first: the
    ones worth confirming (at most ``limit``)."""
    timed = [c for c in portfolio.distinct if c.verified and c.speedup is not None and c.speedup > 1.0]
    return sorted(timed, key=lambda c: -(c.speedup or 0.0))[:limit]


def record_confirmation(portfolio: Portfolio, candidate: Candidate, verdict: Verdict) -> None:
    """Store the decision on ``candidate`` measured in fresh session groups with an A/A control
    (:func:`graphsub.optimize.decide.compare`); :func:`choose` only considers confirmed candidates."""
    candidate.confirmation = verdict


def choose(portfolio: Portfolio) -> Candidate | None:
    """The candidate to keep: of the candidates whose confirmation says faster
    (:attr:`graphsub.optimize.decide.Verdict.faster`), the one with the highest confirmed speedup; None (keep the
    original) when there is none. Side-by-side rounds only pick which candidates are confirmed: they never decide."""
    ok = [c for c in portfolio.distinct if c.verified and c.confirmation is not None and c.confirmation.faster]
    return max(ok, key=lambda c: c.confirm_speedup or 0.0, default=None)


def best_timed(portfolio: Portfolio) -> Candidate | None:
    """The timed verified candidate with the highest speedup (reported when none is chosen)."""
    timed = [c for c in portfolio.distinct if c.verified and c.speedup is not None]
    return max(timed, key=lambda c: c.speedup or 0.0, default=None)


__all__ = ["ORIGINAL", "PEER_MODULES", "Candidate", "Portfolio", "Sources", "best_timed", "choose", "collect",
           "export_bytes", "installed_peers", "leaders", "record_confirmation", "record_timing",
           "resolve_peers", "rewrite_everywhere", "verify"]
