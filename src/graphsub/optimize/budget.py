"""How :func:`graphsub.optimize.optimize` shares its wall-time budget (``time_s``, ``graphsub optimize --budget``)
out between its phases.

The budget bounds the whole call: loading, the cost model's profiling, the main search, verification, the portfolio
(equality saturation, the peers and the searches on top of them, the spelling passes), the candidates' verification,
the timing rounds and writing. One :class:`~graphsub.deadline.Deadline` (start + ``time_s``) is passed down, and
every phase gets the smaller of its own time and what is left:

* the **tail** -- verifying the search's result and the candidates, timing them and writing -- keeps ``TAIL_SHARE``
  of the budget, at least ``TAIL_MIN_S`` and at least what verifying the model on one input draw is estimated to
  take (:func:`verify_estimate_s`: exporting it twice, two sessions and two runs cannot be interrupted): the phases
  before it end that much before the deadline; timing then uses whatever is left (its per-round time shrinks to
  fit, and its rounds stop at the deadline; the side-by-side rounds stop early enough to leave the leader its
  paired confirmation rounds, :func:`confirm_reserve_s`);
* the **main search** gets ``SEARCH_SHARE`` of the budget (12 s of the default 75 s), never more than the ``Budget``
  passed to ``optimize`` allows;
* the **portfolio** keeps equality saturation (``eqsat_s``, 5 s by default), the peers (together about
  ``PEERS_EST_S``; their timeout is the time left before the tail) and a search on top of each peer
  (``on_top_s``, 2 s by default) while they fit; when the budget is too small for all of them, the searches on top
  of the peers go first, then equality saturation, then the peers, and the main search gets the time they leave
  (:func:`plan`). A part that gets less than its minimum when its turn comes is skipped, and a note says so.

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

>>> p = plan(75.0, 74.8, search_cap=None, eqsat_s=5.0, on_top_s=2.0, n_peers=4, portfolio=True)
>>> p.search_s, p.eqsat_s, p.peers, p.on_top_s, p.tail_s, p.dropped
(12.0, 5.0, True, 2.0, 22.5, ())
>>> p = plan(5.0, 4.8, search_cap=None, eqsat_s=5.0, on_top_s=2.0, n_peers=4, portfolio=True)
>>> round(p.search_s, 2), p.eqsat_s, p.peers, p.on_top_s, p.tail_s, p.dropped
(3.3, 0.0, False, 0.0, 1.5, ('searches on top of the peers', 'eqsat', 'peers'))
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from graphsub.ir.graph import Graph

#: the default wall-time budget of a whole ``optimize`` call (seconds)
DEFAULT_TIME_S = 75.0
#: the main search's share of the budget (12 s of 75 s)
SEARCH_SHARE = 0.16
#: kept for verifying the candidates, timing them and writing (22.5 s of 75 s)...
TAIL_SHARE = 0.3
#: ...but at least this much (seconds)
TAIL_MIN_S = 1.5
#: what the peers take together, for planning (each is a fresh interpreter; they run as many at once as cores)
PEERS_EST_S = 8.0
#: the peers run only when at least this much is left for them before the tail
PEERS_MIN_S = 4.0
#: equality saturation runs only with at least this much time
EQSAT_MIN_S = 1.0
#: a search on top of a peer's output runs only with at least this much time
ON_TOP_MIN_S = 0.5
#: verifying a model on one input draw (:func:`verify_estimate_s`): a constant, per MB of weights (drawing them,
#: exporting both models), per op, and runs per roofline time; fitted on seven zoo models (NASNet-A, BERT, ResNet-152,
#: EfficientNet-B3, Inception-v3, ResNet-18, NasRNN: 0.5-4.4 s, within about 0.5 s) and ReLU chains on this 2-core
#: machine at a load average of about 3
VERIFY_BASE_S, VERIFY_S_PER_MB, VERIFY_S_PER_OP, VERIFY_RUNS = 0.3, 0.016, 0.0001, 4.0


def verify_estimate_s(graph: Graph) -> float:
    """About how long verifying ``graph`` against a rewrite of it on one input draw takes (both exported, two
    onnxruntime sessions, two runs): from its weights' size, its op count and its roofline time on this CPU."""
    from graphsub.cost import get_model
    from graphsub.ir.analysis import weight_bytes

    roofline = get_model("roofline:cpu")
    run_s = roofline.scalar(roofline.graph_cost(graph)) / 1e3
    return (VERIFY_BASE_S + VERIFY_S_PER_MB * weight_bytes(graph) / 1e6 + VERIFY_S_PER_OP * graph.num_ops
            + VERIFY_RUNS * (run_s if run_s < float("inf") else 0.0))


#: creating an onnxruntime session: a constant and per MB of the model (its weights; ~15 s per GB here, as above)
SESSION_BASE_S, SESSION_S_PER_MB = 0.1, 0.015


def _model_mb(model: bytes | str) -> float:
    """The size of a serialized model (bytes or a path) in MB."""
    return (len(model) if isinstance(model, bytes) else os.path.getsize(model)) / 1e6


def confirm_reserve_s(source: bytes | str, leader: bytes | str, side_s: float, groups: int) -> float:
    """What confirming one leader in ``groups`` session groups will take (:func:`graphsub.optimize.decide.measure`):
    per group three fresh sessions (the original twice, the leader once) and
    :data:`~graphsub.optimize.decide.ROUNDS_PER_GROUP` rounds of three blocks, each about ``side_s`` (one model's
    share of a side-by-side round, as measured: its timing budget, or one run when a run is longer), a quarter again
    for warm-ups. The side-by-side rounds stop that much before the deadline, so that the budget cannot leave the
    best candidate unconfirmed: on ConvNeXt-T at 1 thread (about 100 ms a run, 12 candidates of 110 MB) they used
    the whole timing share, and candidates 1.13-1.24x faster were kept out for want of their paired rounds
    (``experiments/results/suite.jsonl``).

    >>> round(confirm_reserve_s(b"x" * 110_000_000, b"y" * 110_000_000, 0.12, 3), 2)
    18.45
    """
    from graphsub.optimize.decide import ROUNDS_PER_GROUP

    sessions = groups * (3 * SESSION_BASE_S + SESSION_S_PER_MB * (2 * _model_mb(source) + _model_mb(leader)))
    return sessions + 1.25 * groups * ROUNDS_PER_GROUP * 3 * side_s


@dataclass(frozen=True)
class Plan:
    """The phases' times for one call: ``search_s`` for the main search (None: the ``Budget``'s own), ``eqsat_s``
    and ``on_top_s`` (0: skipped), whether the ``peers`` run, ``tail_s`` kept for the tail, and the portfolio parts
    ``dropped`` for lack of time (in the order they were dropped)."""

    total_s: float | None
    search_s: float | None
    eqsat_s: float
    peers: bool
    on_top_s: float
    tail_s: float
    dropped: tuple[str, ...] = ()

    def notes(self) -> list[str]:
        """One line per dropped part, for the result's portfolio notes."""
        return [f"{part}: skipped: the {self.total_s:g} s budget leaves no time for it" for part in self.dropped]


def plan(total_s: float | None, left_s: float, *, search_cap: float | None, eqsat_s: float, on_top_s: float,
         n_peers: int, portfolio: bool, verify_s: float = 0.0) -> Plan:
    """The plan for a call with budget ``total_s`` (None: unbounded) of which ``left_s`` seconds are left after
    loading; ``search_cap``: the time limit of the ``Budget`` passed to ``optimize`` (None: none); ``portfolio``:
    whether candidates are timed at all (``measure_latency``); ``verify_s``: what verifying the search's result on
    one input draw will take (:func:`verify_estimate_s`). See the module docstring."""
    if total_s is None:
        return Plan(None, search_cap, eqsat_s if portfolio else 0.0, portfolio and n_peers > 0,
                    on_top_s if portfolio else 0.0, 0.0)
    tail = min(left_s, max(TAIL_MIN_S, (TAIL_SHARE if portfolio else 0.05) * total_s,
                           verify_s + (TAIL_MIN_S if portfolio else 0.0)))
    front = max(0.0, left_s - tail)
    nominal = SEARCH_SHARE * total_s if portfolio else front
    parts: list[tuple[str, float]] = []  # in the order they are dropped
    if portfolio and n_peers and on_top_s > 0:
        parts.append(("searches on top of the peers", on_top_s * n_peers))
    if portfolio and eqsat_s > 0:
        parts.append(("eqsat", eqsat_s))
    if portfolio and n_peers:
        parts.append(("peers", PEERS_EST_S))
    dropped: list[str] = []
    while parts and nominal + sum(t for _, t in parts) > front:
        dropped.append(parts.pop(0)[0])
    search = nominal if not dropped else max(nominal, front - sum(t for _, t in parts))
    search = min(search, front)
    if search_cap is not None:
        search = min(search, search_cap)
    kept = {name for name, _ in parts}
    return Plan(total_s, search, eqsat_s if "eqsat" in kept else 0.0, "peers" in kept,
                on_top_s if "searches on top of the peers" in kept else 0.0, tail, tuple(dropped))


__all__ = ["DEFAULT_TIME_S", "EQSAT_MIN_S", "ON_TOP_MIN_S", "PEERS_EST_S", "PEERS_MIN_S", "SEARCH_SHARE",
           "SESSION_BASE_S", "SESSION_S_PER_MB", "TAIL_MIN_S", "TAIL_SHARE", "VERIFY_BASE_S", "VERIFY_RUNS",
           "VERIFY_S_PER_MB", "VERIFY_S_PER_OP", "Plan", "confirm_reserve_s", "plan", "verify_estimate_s"]
