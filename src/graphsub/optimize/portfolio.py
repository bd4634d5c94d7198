"""The portfolio step of :func:`graphsub.optimize.optimize`: several distinct candidates, each verified against the
original and timed end to end, side by side, in ONNX Runtime as the user will run it; the fastest verified one wins.

A cost model ranks graphs well within what it models, but ONNX Runtime rewrites every graph again at session
creation (``ORT_ENABLE_ALL``), and some of its fusions are slower than what they replace on a given machine and
thread count (``experiments/results/ort_fusion_ablation.json``). So :func:`collect` makes candidates from several
sources and lets the clock decide. Besides ``search`` (graphsub's search with the ``--algo`` and ``--cost`` given,
already verified by the pipeline) and the caller's extra candidates, the candidates come from the registered
candidate sources (:mod:`graphsub.optimize.sources`, one module per family, run turn by turn):

* ``backward-rules`` and ``forward-first`` for a training target (:mod:`graphsub.optimize.sources.training`);
* ``eqsat``: equality saturation over the same rules and cost (a different search, often a different graph);
* ``PEER``: the original passed through a peer's passes where that library is installed (``onnxscript``'s
  ``optimize_for_ort``, ``onnxslim``, ``onnxsim``, ``onnxoptimizer``), each in a fresh process with a timeout
  (:func:`graphsub.optimize.peers.run_peer`; a peer that fails or hangs is only a missing candidate);
* ``PEER+search``: graphsub's search on top of a peer's output;
* ``layout`` and ``X+layout``: the original and each candidate above with its channels-last MLPs written
  channels-first (:mod:`graphsub.optimize.sources.layout`); only when the original has such a region; made before
  the peers run (for the peers' candidates after them), so that a budget the peers use up cannot drop the largest
  CNN gain;
* ``X+spelling`` for each graph candidate: the ``ort-spelling`` rules applied everywhere, then the rows layout
  (:mod:`graphsub.optimize.sources.spelling`).

Every candidate is compared with the original on the pipeline's random inputs (:func:`verify`); one that differs,
does not load or does not run is dropped and reported, never timed. Identical files are kept once.

Time: :class:`Sources` carries the call's :class:`~graphsub.deadline.Deadline`, the seconds to keep for the phases
after the portfolio (``tail_s``) and the planner's shares (:func:`graphsub.optimize.budget.plan_parts`). Each source
gets the smaller of its own time and what is left before the tail and the sources planned after it, and is skipped
(with a note) when that is less than its minimum; the peers' timeout ends where the tail begins, and a stop request
(the first Ctrl-C) stops them and skips what has not run. :func:`verify` leaves the candidates it reaches after the
deadline unverified (never timed, never chosen).

The pipeline times the verified candidates side by side (:func:`record_timing`), then confirms the
:func:`leaders` one at a time against the original in fresh session groups with an A/A control
(:func:`graphsub.optimize.decide.compare`, :func:`record_confirmation`): picking the best of several noisy
measurements favours a lucky candidate, and fresh measurements do not. :func:`choose` keeps the fastest candidate
whose confirmation says faster (its interval above 1.0x, its speedup above ``min_speedup`` and above what the A/A
control reads), else the original.

:class:`Candidate`, :class:`Portfolio`, :func:`export_bytes` and :func:`rewrite_everywhere` live in
:mod:`graphsub.optimize.candidates` (below the sources, which use them) and are re-exported here.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from graphsub.deadline import NO_DEADLINE, Deadline
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.optimize.candidates import ORIGINAL, Candidate, Portfolio, export_bytes, rewrite_everywhere
from graphsub.optimize.decide import Verdict
from graphsub.optimize.sources import Sources

#: peers a portfolio may use, with the module that must be importable, in the order they run
PEER_MODULES: dict[str, str] = {"onnxscript": "onnxscript.rewriter.ort_fusions", "onnxslim": "onnxslim",
                                "onnxsim": "onnxsim", "onnxoptimizer": "onnxoptimizer"}


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


def collect(portfolio: Portfolio, ref: Graph, source: bytes | str, sources: Sources,
            note: Callable[[str], None] = lambda what: None) -> Portfolio:
    """Add candidates to ``portfolio`` (which holds the pipeline's ``search`` candidate and the caller's, if any): run
    the registered candidate sources (:func:`graphsub.optimize.sources.run`) on ``ref`` (the original with data) and
    ``source`` (the original as given: its bytes or path), turn by turn, each within the time ``sources`` leaves it;
    ``note(what)`` is called before each turn (progress)."""
    from graphsub.optimize.sources import Context, run

    return run(Context(sources, ref, portfolio, source, note))


def verify(portfolio: Portfolio, source: bytes | str, feeds: Sequence[tuple[int, Mapping[str, np.ndarray]]], *,
           rtol: float, atol: float, skip: Sequence[str] = (), deadline: Deadline = NO_DEADLINE,
           estimate_s: float = 0.0, reserve_s: float = 0.0, original: Graph | None = None,
           also: Callable[[Candidate], str | None] | None = None) -> None:
    """Compare every distinct candidate not in ``skip`` (already verified) with the original on ``feeds``
    (``(seed, inputs)`` draws) in ONNX Runtime (:func:`graphsub.equivalence.check`); candidates with the same file
    inherit the verdict. Candidates reached after ``deadline`` (or a stop request), or when less than ``estimate_s``
    (what one check takes) is left, stay unverified (``verified`` None, ``error`` says why); once a candidate is
    verified, ``reserve_s`` more is kept for timing it (:func:`graphsub.optimize.budget.timing_reserve_s`), so that
    checking the last candidates cannot leave none timed. ``original``: the
    original as a Graph when ``source`` is its export (a Graph given to ``optimize``: a training graph), so that a
    training graph that float32 rounding alone moves is re-checked in float64 on the graphs themselves, the
    candidates' own graphs too where their file is their graph's export. ``also``: a further check of each verified
    candidate (those in ``skip`` too), None when it passes, else why not (the target's,
    :meth:`graphsub.optimize.target.Target.check`): a candidate it refuses is not verified."""
    from graphsub.equivalence import Reference, Tolerance, check

    tolerance = Tolerance(rtol, atol)
    reference = Reference(source, as_graph=original)  # loaded and run once for all the candidates
    def further(c: Candidate) -> None:
        why = also(c) if also is not None and c.verified else None
        if why is not None:
            c.verified, c.error = False, why

    for c in portfolio.distinct:
        if c.name in skip:
            further(c)
            continue
        keep = reserve_s if any(d.verified for d in portfolio.distinct) else 0.0
        if deadline.expired() or deadline.remaining() < estimate_s + keep:
            why = "interrupted" if deadline.reason() == "interrupt" else "no time left in the budget"
            c.verified, c.error = None, f"not verified: {why}"
            portfolio.skipped.append(f"verifying {c.name}")
            continue

        def own_graph(c: Candidate = c) -> Graph | None:  # the candidate's graph, when its file is that graph
            return c.graph if c.graph is not None and export_bytes(c.graph) == c.data else None

        chk = check(reference, c.data, feeds, tolerance, as_graph=own_graph)
        c.verified, c.max_abs_diff, c.error = chk.verified, chk.max_abs_diff, chk.error
        c.float64 = chk.float64
        further(c)
    by_name = {c.name: c for c in portfolio.candidates}
    for c in portfolio.candidates:
        if c.same_as:
            twin = by_name[c.same_as]
            c.verified, c.max_abs_diff, c.error, c.float64 = twin.verified, twin.max_abs_diff, twin.error, twin.float64


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


#: a lean candidate goes ahead of the fastest only when its speedup in the rounds is within this factor of the
#: fastest's (about the A/A spread of this machine's sessions): the sign test over five to seven rounds calls any
#: candidate that won one round "tied" (DistilBERT, 2026-11-30: the lean search-ort, 1.00x in the rounds, was
#: confirmed ahead of the leader at 1.20x, whose confirmation the budget then cut, and it was kept at 1.07x)
LEAN_WITHIN = 1.05


def leaders(portfolio: Portfolio, limit: int = 2, lean_share: float = 0.9) -> list[Candidate]:
    """The timed, verified candidates with a median speedup above 1 in the side-by-side rounds, in the order they are
    worth confirming (at most ``limit``): fastest first, except that a candidate the rounds cannot tell from the
    fastest (:func:`_tied`) and that onnxruntime runs with at most ``lean_share`` of the fastest's kernels goes
    before it (fewest kernels first), if its speedup there is within :data:`LEAN_WITHIN` of the fastest's. The
    rounds of a model that runs in a few milliseconds are few and noisy; fewer kernels is a reason to be faster that
    the noise does not have. (GPT-2's decode step, 3 ms, 2026-11-30: five
    rounds put onnxslim first at 1.13x and onnxsim second, both running about the original's kernels; the search
    priced by onnxruntime's kernels, 1.08x there and 1.39x in the screening, was not among the two leaders, and it
    confirmed at 1.24x when it was the only one.) The order does not change what each confirmation risks: each
    leader is decided at ``alpha / k`` whatever its place. At most ``limit - 1`` lean ones go first, so the fastest
    is a leader too, and a lean leader confirmed faster does not end the confirmations while the fastest is left
    (:func:`graphsub.optimize.race.race`): fewer kernels is not always faster -- BERT runs its residual LayerNorms
    fused into onnxruntime's SkipLayerNormalization, fewer kernels, slower than unfused (2026-11-30: the lean
    search-ort confirmed at 1.07-1.12x and was kept, where the unfused candidates had led the rounds at 1.15-1.26x)."""
    timed = sorted((c for c in portfolio.distinct if c.verified and c.speedup is not None and c.speedup > 1.0),
                   key=lambda c: -(c.speedup or 0.0))
    if not timed:
        return []
    top = timed[0]
    lean = sorted((c for c in timed[1:] if top.kernels and 0 < c.kernels <= lean_share * top.kernels
                   and (c.speedup or 0.0) * LEAN_WITHIN >= (top.speedup or 0.0) and _tied(top, c)),
                  key=lambda c: c.kernels)[:max(0, limit - 1)]
    return (lean + [c for c in timed if c not in lean])[:limit]


def _tied(top: Candidate, other: Candidate, alpha: float = 0.05) -> bool:
    """Whether the side-by-side rounds cannot tell ``other`` from the faster-looking ``top``: a one-sided sign test
    over the rounds both were timed in (``top`` faster in more rounds than chance gives at level ``alpha``).

    >>> a, b = Candidate("a", b"", rounds_ms=[1.0] * 5), Candidate("b", b"", rounds_ms=[1.1, 0.9, 1.1, 0.9, 1.1])
    >>> _tied(a, b), _tied(a, Candidate("c", b"", rounds_ms=[1.1] * 5))
    (True, False)
    """
    from scipy.stats import binomtest

    pairs = [(t, o) for t, o in zip(top.rounds_ms, other.rounds_ms, strict=False) if t != o]
    if not pairs:
        return True
    wins = sum(t < o for t, o in pairs)
    return bool(binomtest(wins, len(pairs), 0.5, alternative="greater").pvalue >= alpha)


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


__all__ = ["LEAN_WITHIN", "ORIGINAL", "PEER_MODULES", "Candidate", "Portfolio", "Sources", "best_timed", "choose",
           "collect", "export_bytes", "installed_peers", "leaders", "record_confirmation", "record_timing",
           "resolve_peers", "rewrite_everywhere", "verify"]
