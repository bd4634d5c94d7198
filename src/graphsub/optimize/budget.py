"""How :func:`graphsub.optimize.optimize` shares its wall-time budget (``time_s``, ``graphsub optimize --budget``)
out between its phases.

The budget bounds the whole call: loading, the cost model's profiling, the main search, verification, the portfolio
(equality saturation, the peers and the searches on top of them, the spelling passes), the candidates' verification,
the timing rounds and writing. One :class:`~graphsub.deadline.Deadline` (start + ``time_s``) is passed down, and
every phase gets the smaller of its own time and what is left:

* the **tail** -- verifying the search's result and the candidates, timing them and writing -- keeps ``TAIL_SHARE``
  of the budget, at least ``TAIL_MIN_S``, at least what verifying and timing the model's candidates is estimated to
  take (:func:`tail_estimate_s`, from the model's size and its run time: the roofline's, or one run measured before
  the plan where the roofline says a run takes :data:`MEASURE_RUN_MIN_S` or more) and at least what verifying the
  model on one input draw is estimated to take (:func:`verify_estimate_s`: exporting it twice, two sessions and two
  runs cannot be interrupted), planned for :data:`TAIL_CANDIDATES` candidates and grown by :func:`candidate_tail_s`
  for each distinct one the portfolio makes beyond them: the phases before it end that much before the deadline;
  timing then uses whatever is left (its per-round time shrinks to fit, and its rounds stop at the deadline; the
  side-by-side rounds stop early enough to leave the leader its paired confirmation rounds,
  :func:`confirm_reserve_s`);
* the **main search** gets ``SEARCH_SHARE`` of the budget (12 s of the default 100 s), never more than the ``Budget``
  passed to ``optimize`` allows;
* the **portfolio** is the candidate sources (:mod:`graphsub.optimize.sources`): each declares what it will take
  (:class:`Part`: equality saturation ``eqsat_s``, 5 s by default; the peers together about ``PEERS_EST_S``, their
  timeout being the time left before the tail; a search on top of each peer, ``on_top_s``, 2 s by default; for a
  training graph the ``forward-first`` search and the ``backward-rules`` pricing), and the planner keeps them while
  they fit (:func:`plan_parts`); when the budget is too small for all of them, it leaves them out by their drop rank
  -- the searches on top of the peers first, then equality saturation, then the peers (:data:`DROP_ON_TOP`,
  :data:`DROP_EQSAT`, :data:`DROP_PEERS`; a source without a rank is never left out) -- and the main search gets the
  time they leave. A source that gets less than its minimum when its turn comes is skipped, and a note says so.
  Cheap sources (the spelling and layout passes) declare nothing and run while time is left before the tail.

At the default budget (:data:`DEFAULT_TIME_S`) every phase gets the time it had before the budget covered the whole
command (12 s of search, 5 s of eqsat, 2 s on top of each peer), so the default ``graphsub optimize`` behaves as it
did, now with a bound on its total time; with ``time_s=None`` nothing is bounded (the phases take their own times).

The overshoot past the deadline is bounded by the longest step that cannot be interrupted: one budget check of a
search (one expansion; on large graphs matching is polled every few hundred candidates), one ONNX Runtime session
creation or verification run, one timing round of one model, one measurement of the cost model, and writing the
output, plus work that grows with the weights and is never interrupted (random weights for a zoo model,
serializing them, onnxruntime loading them, writing them: about 15 s per GB here). ``experiments/results/
budget_overshoot.md`` measures it: within 3 s on chains of up to 5,000 ops and on the zoo except the weight-bound
VGG-16/19 (0.55 GB, +8.5/+9 s) and ResNet-50 (+4 s) on this 2-core machine. A command also has the interpreter's
start and imports before its budget starts (about 1 s). On a large model a budget smaller than one verification
leaves the search no time at all.

>>> p = plan(100.0, 99.8, search_cap=None, eqsat_s=5.0, on_top_s=2.0, n_peers=4, portfolio=True)
>>> p.search_s, p.eqsat_s, p.peers, p.on_top_s, p.tail_s, p.dropped
(12.0, 5.0, True, 2.0, 45.0, ())
>>> p = plan(5.0, 4.8, search_cap=None, eqsat_s=5.0, on_top_s=2.0, n_peers=4, portfolio=True)
>>> round(p.search_s, 2), p.eqsat_s, p.peers, p.on_top_s, p.tail_s, p.dropped
(2.55, 0.0, False, 0.0, 2.25, ('searches on top of the peers', 'eqsat', 'peers'))
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphsub.ir.graph import Graph

#: the default wall-time budget of a whole ``optimize`` call (seconds)...
DEFAULT_TIME_S = 100.0
#: ...plus this much per GB of the model's weights (:func:`scaled_time_s`): what grows with the model -- opening an
#: onnxruntime session (about 15 s per GB here), the peers' passes, each candidate's verification and timing
#: sessions -- so that on a 110 MB ConvNeXt-T the candidates are timed, not skipped for lack of time (75 s left its
#: 12 verified candidates untimed, ``experiments/results/calibration.json``)
PER_GB_S = 400.0
#: the main search's share of the budget (12 s of 100 s)
SEARCH_SHARE = 0.12
#: kept for verifying the candidates, timing them and writing (45 s of 100 s)...  The default was 75 s with 22.5 s
#: of tail until 2026-12-01: the leaders' confirmations then got three to five session groups, too few to confirm a
#: 5-10% gain on this machine (the held-out and development halves kept the original on 7 and 15 models at 1 thread
#: where graphsub-own, with fewer candidates, confirmed 1.07-1.12x); the 25 s more go to the tail, where a leader the
#: first five groups leave undecided gets a second look (:func:`graphsub.optimize.decide.confirm`), and the front
#: keeps about its time (43 s of 100 s; 40.5 of 75 before)
TAIL_SHARE = 0.45
#: ...but at least this much (seconds)
TAIL_MIN_S = 1.5
#: the tail keeps at most this share of the budget, however large the model (the front needs some time too)
TAIL_MAX_SHARE = 0.6
#: the main search gives way down to this many seconds before the peers or equality saturation are left out (on a
#: large model the cheap wins -- clean-up, the peers, the target's own sources -- come first)
SEARCH_MIN_S = 3.0
#: the candidates the tail plans to verify and screen (:func:`tail_estimate_s`)
TAIL_CANDIDATES = 6
#: what the peers take together, for planning (each is a fresh interpreter; they run as many at once as cores)
PEERS_EST_S = 8.0
#: the peers run only when at least this much is left for them before the tail
PEERS_MIN_S = 4.0
#: equality saturation runs only with at least this much time
EQSAT_MIN_S = 1.0
#: a search on top of a peer's output runs only with at least this much time
ON_TOP_MIN_S = 0.5
#: drop ranks (:attr:`Part.drop`): when the budget is short the planner leaves out the lowest first -- the searches on
#: top of the peers, then equality saturation, then the peers
DROP_ON_TOP, DROP_EQSAT, DROP_PEERS = 1, 2, 3
#: verifying a model on one input draw (:func:`verify_estimate_s`): a constant, per MB of weights (drawing them,
#: exporting both models), per op, and runs per roofline time; fitted on seven zoo models (NASNet-A, BERT, ResNet-152,
#: EfficientNet-B3, Inception-v3, ResNet-18, NasRNN: 0.5-4.4 s, within about 0.5 s) and ReLU chains on this 2-core
#: machine at a load average of about 3
VERIFY_BASE_S, VERIFY_S_PER_MB, VERIFY_S_PER_OP, VERIFY_RUNS = 0.3, 0.016, 0.0001, 4.0


def scaled_time_s(time_s: float | None, per_gb_s: float, weight_bytes: float) -> float | None:
    """The budget of a call on a model with ``weight_bytes`` of weights: ``time_s`` plus ``per_gb_s`` per GB (None:
    unbounded stays unbounded).

    >>> scaled_time_s(75.0, PER_GB_S, 110e6), scaled_time_s(75.0, 0.0, 110e6), scaled_time_s(None, PER_GB_S, 1e9)
    (119.0, 75.0, None)
    """
    return None if time_s is None else time_s + per_gb_s * weight_bytes / 1e9


def model_bytes(graph: Graph) -> int:
    """What the budget scales by: the bytes of ``graph``'s weights and inputs (a training graph's trained weights are
    its inputs).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> model_bytes(b.build(b.matmul(b.input("x", (1, 8)), b.weight("w", (8, 4)))))  # 8 + 32 float32 values
    160
    """
    from graphsub.ir.analysis import weight_bytes

    return weight_bytes(graph) + sum(t.nbytes for t in graph.input_types)


def verify_estimate_s(graph: Graph) -> float:
    """About how long verifying ``graph`` against a rewrite of it on one input draw takes (both exported, two
    onnxruntime sessions, two runs): from its weights' size, its op count and its roofline time on this CPU."""
    return (VERIFY_BASE_S + VERIFY_S_PER_MB * model_bytes(graph) / 1e6 + VERIFY_S_PER_OP * graph.num_ops
            + VERIFY_RUNS * run_estimate_s(graph))


def run_estimate_s(graph: Graph) -> float:
    """About one run of ``graph`` on this CPU: its roofline time (0 where the roofline cannot price it)."""
    from graphsub.cost import get_model

    roofline = get_model("roofline:cpu")
    run_s = roofline.scalar(roofline.graph_cost(graph)) / 1e3
    return run_s if run_s < float("inf") else 0.0


#: runs of a candidate at other sizes before it is timed (two larger sizes, a cache's four decoding sizes, the
#: imported ones), each costed as a run at the imported sizes (a prefill of 128 costs more; a decode step less)
SIZE_RUNS = 8
#: seconds to write one of graphsub's candidates over the input again (a second import, a replay, a splice)
SIZE_SPLICE_S = 1.0


def tail_estimate_s(graph: Graph, *, budget_ms: float, groups: int | None = None,
                    run_s: float | None = None, sizes: bool = False) -> float:
    """What the tail takes on ``graph``'s model, from its size and its run time: verifying and screening
    :data:`TAIL_CANDIDATES` candidates (a session and a few runs each) and confirming the leader
    (:func:`confirm_reserve_s`: ``groups`` session groups, default :data:`~graphsub.optimize.decide.GROUPS`, blocks of
    ``budget_ms`` or one run when a run is longer). On a 110 MB ConvNeXt-T about 47 s; on a 3 MB GRU about 14 s.
    ``run_s``: one run of the model as measured (:func:`measured_run_s`), used where it is longer than the roofline's
    (a training step of ResNet-50 ran 1.1 s where the roofline says 0.1 s, and its leader went unconfirmed).
    ``sizes``: the input has free symbolic dims, and each candidate is also run at other sizes before it is timed (a
    session and :data:`SIZE_RUNS` runs; graphsub's own ones written over the input again: measured 22 s for 15
    candidates of a 30 MB decoder, which left its timing no time before this term).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> round(tail_estimate_s(b.build(b.relu(b.input("x", (1, 8)))), budget_ms=200.0), 1)
    13.1
    """
    from graphsub.optimize.decide import GROUPS

    mb, run_s = model_bytes(graph) / 1e6, max(run_estimate_s(graph), run_s or 0.0)
    side_s = max(budget_ms / 1e3, run_s)
    confirm = _confirm_s(mb, mb, side_s, GROUPS if groups is None else groups)
    return TAIL_CANDIDATES * _each_s(mb, run_s, sizes) + confirm


def candidate_tail_s(graph: Graph, *, run_s: float | None = None, sizes: bool = False) -> float:
    """What one more candidate adds to the tail on ``graph``'s model (:func:`tail_estimate_s` plans
    :data:`TAIL_CANDIDATES` of them): its verification and its screening, a session and a few runs. The portfolio
    keeps this much more for each candidate it makes beyond those (:meth:`graphsub.optimize.sources.Sources.tail`):
    the default made 15-23 candidates of the held-out transformers, and every confirmation there got the minimum of
    three session groups (``heldout.md``, 2026-12-01).

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> round(candidate_tail_s(b.build(b.relu(b.input("x", (1, 8))))), 2)
    0.06
    """
    return _each_s(model_bytes(graph) / 1e6, max(run_estimate_s(graph), run_s or 0.0), sizes)


def _each_s(mb: float, run_s: float, sizes: bool) -> float:
    session = SESSION_BASE_S + SESSION_S_PER_MB * mb
    # verified against the reference, then screened: measured 14 s for 12 candidates of ConvNeXt-T (110 MB, about
    # 0.6 of a session estimate each, the reference's outputs and some sessions being shared)
    each = 0.6 * session + 4 * run_s
    if sizes:
        each += 1.5 * session + SIZE_RUNS * run_s + SIZE_SPLICE_S
    return each


def run_scaled_time_s(time_s: float, graph: Graph, *, budget_ms: float, run_s: float) -> float:
    """The default budget ``time_s`` (already scaled by the weights), raised where the tail that the model's measured
    run time ``run_s`` asks for (:func:`tail_estimate_s`) would be more than :data:`TAIL_MAX_SHARE` of it: the
    confirmation of a leader must fit, or the search finds wins that are never kept. A budget the user gives is used
    as is (this applies to the default only). On a CPU training step of ResNet-50 (1.1 s a run at 2 threads, about
    2 s at 1) the default's 116 s left its 2.4-2.6x candidate 0-2 of the 3 session groups it needs.

    >>> from graphsub.ir.builder import Builder
    >>> b = Builder()
    >>> g = b.build(b.relu(b.input("x", (1, 8))))
    >>> run_scaled_time_s(75.0, g, budget_ms=200.0, run_s=0.001)
    75.0
    >>> run_scaled_time_s(75.0, g, budget_ms=200.0, run_s=2.0) > 150
    True
    """
    return max(time_s, tail_estimate_s(graph, budget_ms=budget_ms, run_s=run_s) / TAIL_MAX_SHARE)


#: a model whose roofline run is at least this long (seconds) has one run measured before the plan
#: (:func:`measured_run_s`): below it the tail is sessions and verification, and a measurement would cost more than
#: it corrects
MEASURE_RUN_MIN_S = 0.02


def measured_run_s(model: bytes | str, feeds: dict[str, Any], *, threads: int) -> float | None:
    """Seconds of one run of ``model`` (serialized or a path) on ``feeds`` in onnxruntime (``ORT_ENABLE_ALL``,
    ``threads``), after one warm-up run: what the tail's estimate takes where the roofline underestimates (CPU
    training steps, shape-heavy graphs); None when the model does not run here (the later steps say why)."""
    import time

    from graphsub.frontends.ort import make_session, run_session

    try:
        sess = make_session(model, optimization="all", threads=threads)
        fed = {i.name: feeds[i.name] for i in sess.get_inputs()}
        run_session(sess, fed)
        t = time.perf_counter()
        run_session(sess, fed)
        return time.perf_counter() - t
    except Exception:  # an estimate only: a model that fails here fails later, with its reason
        return None


#: creating an onnxruntime session: a constant and per MB of the model (its weights; ~15 s per GB here, as above),
#: where no session of this process was measured (:func:`graphsub.frontends.ort.session_s_per_mb`)
SESSION_BASE_S, SESSION_S_PER_MB = 0.1, 0.015


def _model_mb(model: bytes | str) -> float:
    """The size of a serialized model (bytes or a path) in MB."""
    return (len(model) if isinstance(model, bytes) else os.path.getsize(model)) / 1e6


def confirm_reserve_s(source: bytes | str, leader: bytes | str, side_s: float, groups: int,
                      per_mb: float | None = None) -> float:
    """What confirming one leader in ``groups`` session groups will take (:func:`graphsub.optimize.decide.measure`):
    per group three fresh sessions (the original twice, the leader once) and
    :data:`~graphsub.optimize.decide.ROUNDS_PER_GROUP` rounds of three blocks, each about ``side_s`` (one model's
    share of a side-by-side round, as measured: its timing budget, or one run when a run is longer), a quarter again
    for warm-ups. The side-by-side rounds stop that much before the deadline, so that the budget cannot leave the
    best candidate unconfirmed: on ConvNeXt-T at 1 thread (about 100 ms a run, 12 candidates of 110 MB) they used
    the whole timing share, and candidates 1.13-1.24x faster were kept out for want of their paired rounds
    (``experiments/results/suite.jsonl``). ``per_mb``: what a session takes per MB of its model as measured in this
    process (:func:`graphsub.frontends.ort.session_s_per_mb`; None: :data:`SESSION_S_PER_MB`).

    >>> round(confirm_reserve_s(b"x" * 110_000_000, b"y" * 110_000_000, 0.12, 3), 2)
    19.8
    >>> round(confirm_reserve_s(b"x" * 110_000_000, b"y" * 110_000_000, 0.12, 3, per_mb=0.003), 2)
    7.92
    """
    return _confirm_s(_model_mb(source), _model_mb(leader), side_s, groups, per_mb)


#: side-by-side rounds a timing needs before its leader's confirmation (:func:`timing_reserve_s`)
SIDE_ROUNDS = 5


def timing_reserve_s(source: bytes | str, side_s: float, per_mb: float | None = None) -> float:
    """What timing one verified candidate takes at least: the original's and its sessions, :data:`SIDE_ROUNDS`
    side-by-side rounds of the two, and its confirmation in :data:`~graphsub.optimize.decide.MIN_GROUPS` session
    groups (:func:`confirm_reserve_s`, ``per_mb`` as there), the candidate taken as large as the original. The
    candidates' verification keeps it once one is verified: on the 100 M decoder (0.5 GB) checking six candidates at
    the decoder's sizes, about 30 s each, took the rest of the budget and none was timed (``graphsub bench decode``,
    2026-11-30).

    >>> round(timing_reserve_s(b"x" * 110_000_000, 0.12), 1)
    24.5
    """
    from graphsub.optimize.decide import MIN_GROUPS

    mb = _model_mb(source)
    sessions = 2 * (SESSION_BASE_S + _per_mb(per_mb) * mb)
    return sessions + SIDE_ROUNDS * 2 * side_s + _confirm_s(mb, mb, side_s, MIN_GROUPS, per_mb)


def _per_mb(per_mb: float | None) -> float:
    return SESSION_S_PER_MB if per_mb is None else per_mb


def _confirm_s(source_mb: float, leader_mb: float, side_s: float, groups: int, per_mb: float | None = None) -> float:
    from graphsub.optimize.decide import ROUNDS_PER_GROUP

    sessions = groups * (3 * SESSION_BASE_S + _per_mb(per_mb) * (2 * source_mb + leader_mb))
    return sessions + 1.25 * groups * ROUNDS_PER_GROUP * 3 * side_s


@dataclass(frozen=True)
class Part:
    """What the planner knows of one candidate source (:class:`graphsub.optimize.sources.Source`): its ``name``, the
    seconds it is planned to take over all its turns (``estimate_s``), its drop rank (``drop``: the lowest is left out
    first when the budget is short; None: never left out), how the notes name it (``label``, default the name), and
    the seconds it asks for each thing it does (``each_s``: one search on top of each peer; default the estimate)."""

    name: str
    estimate_s: float
    drop: int | None = None
    label: str = ""
    each_s: float | None = None
    #: an anytime part (a search: what it finds in less time is still a candidate) shrinks to the time there is,
    #: down to this many seconds, before it is left out (None: all or nothing)
    shrink_to_s: float | None = None

    @property
    def called(self) -> str:
        """How the plan's notes name it."""
        return self.label or self.name


@dataclass(frozen=True)
class Plan:
    """The phases' times for one call: ``search_s`` for the main search (None: the ``Budget``'s own), ``tail_s`` kept
    for the tail, the candidate sources ``kept`` (their planned seconds: :attr:`shares`) and those ``cut`` for lack
    of time (in the order they were dropped); ``tail_each_s``: what the tail grows by for each candidate made beyond
    :data:`TAIL_CANDIDATES` (:func:`candidate_tail_s`), up to :attr:`tail_max_s`."""

    total_s: float | None
    search_s: float | None
    tail_s: float
    kept: tuple[Part, ...] = ()
    cut: tuple[Part, ...] = ()
    tail_each_s: float = 0.0

    @property
    def tail_max_s(self) -> float:
        """The most the tail grows to with the candidates: :data:`TAIL_MAX_SHARE` of the budget (the planned tail
        where that is more)."""
        return math.inf if self.total_s is None else max(self.tail_s, TAIL_MAX_SHARE * self.total_s)

    @property
    def shares(self) -> dict[str, float]:
        """Each kept source's planned seconds, by name."""
        return {p.name: p.estimate_s for p in self.kept}

    @property
    def dropped(self) -> tuple[str, ...]:
        """How the notes name the sources left out, in the order they were dropped."""
        return tuple(p.called for p in self.cut)

    def each(self, name: str) -> float:
        """The seconds kept source ``name`` asks for each thing it does (0: not kept)."""
        part = next((p for p in self.kept if p.name == name), None)
        return 0.0 if part is None else part.estimate_s if part.each_s is None else part.each_s

    @property
    def eqsat_s(self) -> float:
        """Equality saturation's time (0: left out)."""
        return self.each("eqsat")

    @property
    def peers(self) -> bool:
        """Whether the peers run."""
        return "peers" in self.shares

    @property
    def on_top_s(self) -> float:
        """The time of the search on top of each peer (0: left out)."""
        return self.each("peer+search")

    def notes(self) -> list[str]:
        """One line per dropped part, for the result's portfolio notes."""
        return [f"{part}: skipped: the {self.total_s:g} s budget leaves no time for it" for part in self.dropped]


def plan_parts(total_s: float | None, left_s: float, *, search_cap: float | None, parts: Sequence[Part],
               portfolio: bool = True, verify_s: float = 0.0, tail_s: float = 0.0) -> Plan:
    """The plan for a call with budget ``total_s`` (None: unbounded) of which ``left_s`` seconds are left after
    loading: the tail keeps its share, the main search gets ``SEARCH_SHARE`` of the budget (at most ``search_cap``,
    the time limit of the ``Budget`` passed to ``optimize``), and the candidate sources' ``parts`` are kept while
    they fit in the rest; the ones with a drop rank are left out lowest rank first (ties: in the order given) until
    they do, and the main search gets the time they leave. ``portfolio``: whether candidates are timed at all
    (``measure_latency``; without it no part is kept and the search gets the front); ``verify_s``: what verifying the
    search's result on one input draw will take (:func:`verify_estimate_s`); ``tail_s``: what verifying and timing
    the candidates will take on this model (:func:`tail_estimate_s`), which the tail keeps (at most
    :data:`TAIL_MAX_SHARE` of the budget). When the parts do not fit, the searches on top of the peers are left out
    first, then the main search gives way down to :data:`SEARCH_MIN_S`, then equality saturation and the peers are
    left out; a part with ``shrink_to_s`` (an anytime search) shrinks to the time there is instead, while that is
    at least ``shrink_to_s``. See the module docstring.

    >>> p = plan_parts(100.0, 99.8, search_cap=None, parts=[Part("eqsat", 5.0, DROP_EQSAT),
    ...                                                      Part("forward-first", 12.0)])
    >>> p.search_s, p.shares, p.dropped
    (12.0, {'eqsat': 5.0, 'forward-first': 12.0}, ())
    >>> p = plan_parts(10.0, 9.8, search_cap=None, parts=[Part("eqsat", 5.0, DROP_EQSAT), Part("forward-first", 1.6)])
    >>> round(p.search_s, 2), p.shares, p.dropped
    (3.7, {'forward-first': 1.6}, ('eqsat',))
    >>> p = plan_parts(10.0, 9.8, search_cap=None, parts=[Part("eqsat", 5.0, DROP_EQSAT),
    ...                                                   Part("anytime", 9.0, DROP_EQSAT, shrink_to_s=2.0)])
    >>> round(p.search_s, 2), {k: round(v, 2) for k, v in p.shares.items()}, p.dropped
    (1.2, {'anytime': 4.1}, ('eqsat',))
    """
    parts = tuple(parts) if portfolio else ()
    if total_s is None:
        return Plan(None, search_cap, 0.0, parts)
    need = min(tail_s, TAIL_MAX_SHARE * total_s) if portfolio else 0.0
    tail = min(left_s, max(TAIL_MIN_S, (TAIL_SHARE if portfolio else 0.05) * total_s,
                           verify_s + (TAIL_MIN_S if portfolio else 0.0), need))
    front = max(0.0, left_s - tail)
    search = SEARCH_SHARE * total_s if portfolio else front
    fixed = sum(p.estimate_s for p in parts if p.drop is None)
    droppable = sorted((p for p in parts if p.drop is not None), key=lambda p: p.drop or 0)
    cut: list[Part] = []
    shrunk: dict[str, Part] = {}
    while droppable and search + fixed + sum(p.estimate_s for p in droppable) > front:
        if droppable[0].drop != DROP_ON_TOP and search > SEARCH_MIN_S:  # the main search gives way first
            search = max(SEARCH_MIN_S, front - fixed - sum(p.estimate_s for p in droppable))
            continue
        first = droppable[0]
        room = front - search - fixed - sum(p.estimate_s for p in droppable[1:])
        if first.shrink_to_s is not None and room >= first.shrink_to_s:  # an anytime part takes what there is
            droppable[0] = shrunk[first.name] = dataclasses.replace(first, estimate_s=room)
            continue
        cut.append(droppable.pop(0))
    kept = tuple(shrunk.get(p.name, p) for p in parts if p not in cut)
    if cut:
        search = max(search, front - sum(p.estimate_s for p in kept))
    search = min(search, front)
    if search_cap is not None:
        search = min(search, search_cap)
    return Plan(total_s, search, tail, kept, tuple(cut))


def inference_parts(*, eqsat_s: float, on_top_s: float, n_peers: int,
                    peers_est_s: float = PEERS_EST_S) -> list[Part]:
    """The parts an inference portfolio plans, from their settings, as its sources declare them
    (:mod:`graphsub.optimize.sources`): equality saturation, the peers, a search on top of each peer."""
    parts = [Part("eqsat", eqsat_s, DROP_EQSAT)] if eqsat_s > 0 else []
    if n_peers:
        parts.append(Part("peers", peers_est_s, DROP_PEERS))
    if n_peers and on_top_s > 0:
        parts.append(Part("peer+search", on_top_s * n_peers, DROP_ON_TOP, "searches on top of the peers", on_top_s))
    return parts


def plan(total_s: float | None, left_s: float, *, search_cap: float | None, eqsat_s: float, on_top_s: float,
         n_peers: int, portfolio: bool, verify_s: float = 0.0) -> Plan:
    """:func:`plan_parts` for the inference portfolio's planned parts given by their settings
    (:func:`inference_parts`); ``portfolio``: whether candidates are timed at all (``measure_latency``);
    ``verify_s``: what verifying the search's result on one input draw will take (:func:`verify_estimate_s`). See the
    module docstring."""
    return plan_parts(total_s, left_s, search_cap=search_cap, portfolio=portfolio, verify_s=verify_s,
                      parts=inference_parts(eqsat_s=eqsat_s, on_top_s=on_top_s, n_peers=n_peers))


__all__ = ["DEFAULT_TIME_S", "DROP_EQSAT", "DROP_ON_TOP", "DROP_PEERS", "EQSAT_MIN_S", "MEASURE_RUN_MIN_S",
           "ON_TOP_MIN_S", "PEERS_EST_S", "PEERS_MIN_S", "PER_GB_S", "SEARCH_MIN_S", "SEARCH_SHARE", "SESSION_BASE_S",
           "SESSION_S_PER_MB", "SIDE_ROUNDS", "SIZE_RUNS", "SIZE_SPLICE_S", "TAIL_CANDIDATES", "TAIL_MAX_SHARE",
           "TAIL_MIN_S", "TAIL_SHARE", "VERIFY_BASE_S", "VERIFY_RUNS", "VERIFY_S_PER_MB", "VERIFY_S_PER_OP", "Part",
           "Plan", "candidate_tail_s", "confirm_reserve_s", "inference_parts", "measured_run_s", "model_bytes",
           "plan", "plan_parts", "run_estimate_s", "run_scaled_time_s", "scaled_time_s", "tail_estimate_s",
           "timing_reserve_s", "verify_estimate_s"]
