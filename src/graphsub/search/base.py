"""The common search interface: budgets, results, and the expansion step shared by every algorithm.

Every algorithm is a pure function ``search(graph, rules, cost, budget, seed) -> SearchResult``
(:func:`graphsub.search.search` dispatches by name).  A *state* is a graph reached by a sequence
of substitutions; expanding it enumerates the matches of the rules (re-using the parent's
matches through :func:`graphsub.rules.match.rematch`), applies each one (copy-on-write, so a child
costs O(change)), prices the child incrementally (``cost.delta``), and drops children whose
structural hash was seen before.

:class:`Budget` bounds wall time, graphs expanded, the sequence length K and memory; when any runs
out (or a stop is requested, :mod:`graphsub.interrupt`: ``stopped_by == "interrupt"``) an algorithm
stops and returns the best graph found so far (the seeds' 1-hour cut-off).  The wall time covers the
whole search: matching polls the budget every few hundred candidates (a rule with a disconnected
source has quadratically many on a large graph), and a measured cost model stops measuring when it
runs out (:attr:`~graphsub.cost.base.SumCostModel.stop`; the input's cost is then a roofline
estimate, :func:`root_cost`), so a search ends within one expansion of its budget whatever the
graph's size.

A search given ``progress`` (a :data:`ProgressFn`) reports ``progress(elapsed_s, best_cost)``
through :class:`Progress`: once at the start with the initial cost, on every improvement of the
best cost, and otherwise at most every :data:`HEARTBEAT_S` seconds from its budget checks.  The
reports only observe: a search returns the same result with and without them.
"""

from __future__ import annotations

import resource
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from graphsub.cost.base import Cost, SumCostModel
from graphsub.deadline import check_count, check_seconds
from graphsub.errors import BudgetExceeded
from graphsub.interrupt import stop_requested
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node
from graphsub.rules.apply import apply
from graphsub.rules.match import Match, find_matches, rematch
from graphsub.rules.rule import Rule


@dataclass(frozen=True)
class Budget:
    """Limits of one search; ``None`` = unlimited.

    ``time_s``: wall time; ``expansions``: graphs expanded (TASO's ``budget``); ``k``: maximum
    substitution-sequence length (OCGGS's K); ``memory_mb``: peak RSS of the process.  Each is None or a finite
    number >= 0; anything else (NaN, inf, negative) raises GraphsubError at construction.
    """

    time_s: float | None = 60.0
    expansions: int | None = None
    k: int | None = None
    memory_mb: float | None = None

    def __post_init__(self) -> None:
        """Every limit limits: NaN, infinite or negative values raise GraphsubError (``None`` = unlimited)."""
        check_seconds("Budget.time_s", self.time_s, allow_none=True)
        check_count("Budget.expansions", self.expansions)
        check_count("Budget.k", self.k)
        check_count("Budget.memory_mb", self.memory_mb)


#: ``progress(elapsed_s, best_cost)``: the search's elapsed time and the best cost found so far
ProgressFn = Callable[[float, float], None]

#: seconds between heartbeat reports of a search that finds nothing better
HEARTBEAT_S = 0.2


def improves(value: float, best: float) -> bool:
    """Whether cost ``value`` beats ``best`` by more than rounding (a new best for every search)."""
    return value < best - 1e-12 * abs(best)


class Progress:
    """One search's reports to a :data:`ProgressFn` (see the module docstring).

    Invariants: the first report is ``(0.0, initial)``; reported costs never increase (a report
    is an improvement only if strictly below every earlier one); between two heartbeats at least
    :data:`HEARTBEAT_S` seconds pass.  Times are ``time.perf_counter()`` readings the search takes
    anyway (``now``); this class never reads the clock itself.

    >>> seen = []
    >>> p = Progress(lambda t, c: seen.append((t, c)), t0=0.0, initial=5.0)
    >>> p.improved(0.01, 4.0); p.tick(0.05); p.tick(0.3); p.improved(0.31, 4.5)
    >>> seen
    [(0.0, 5.0), (0.01, 4.0), (0.3, 4.0)]
    """

    def __init__(self, fn: ProgressFn, t0: float, initial: float):
        self.fn = fn
        self.t0 = t0
        self.best = initial
        self.last = t0
        fn(0.0, initial)

    def improved(self, now: float, value: float) -> None:
        """Report ``value`` found at ``now`` if it is a new best."""
        if value < self.best:
            self.best = value
            self._emit(now)

    def tick(self, now: float) -> None:
        """Heartbeat: report the best so far if the last report is :data:`HEARTBEAT_S` old."""
        if now - self.last >= HEARTBEAT_S:
            self._emit(now)

    def _emit(self, now: float) -> None:
        self.last = now
        self.fn(now - self.t0, self.best)


@dataclass(frozen=True)
class Step:
    """One applied substitution: rule, matched node ids, and the cost after it."""

    rule: str
    nodes: tuple[int, ...]
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Stats:
    expanded: int = 0
    generated: int = 0
    deduplicated: int = 0
    pruned: int = 0
    matches: int = 0
    time_match_s: float = 0.0
    time_apply_s: float = 0.0
    time_hash_s: float = 0.0
    time_cost_s: float = 0.0


@dataclass(frozen=True)
class SearchResult:
    """What a search returns (see the module docstring)."""

    algorithm: str
    best: Graph
    best_cost: float
    best_cost_detail: Cost
    initial_cost: float
    sequence: tuple[Step, ...]
    stats: Stats
    wall_time_s: float
    peak_mem_mb: float
    trace: tuple[tuple[float, float], ...]
    stopped_by: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def improvement(self) -> float:
        """Relative cost reduction (0.1 = 10% cheaper)."""
        return 1.0 - self.best_cost / self.initial_cost if self.initial_cost else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "initial_cost": self.initial_cost,
            "best_cost": self.best_cost,
            "improvement": self.improvement,
            "search_time_s": self.wall_time_s,
            "peak_mem_mb": self.peak_mem_mb,
            "sequence": [s.to_dict() for s in self.sequence],
            "explored": self.stats.expanded,
            "stats": asdict(self.stats),
            "trace": [list(t) for t in self.trace],
            "stopped_by": self.stopped_by,
            "params": self.params,
            "best_num_ops": self.best.num_ops,
        }


def _proc_status_mb(key: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (``VmHWM``; ``ru_maxrss`` would include a
    spawning parent's peak)."""
    v = _proc_status_mb("VmHWM")
    return v if v is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float:
    """Current resident set size of this process in MB."""
    v = _proc_status_mb("VmRSS")
    return v if v is not None else peak_rss_mb()


_MASK = (1 << 64) - 1


def root_cost(cost: SumCostModel, graph: Graph) -> tuple[Cost, str]:
    """``(cost.graph_cost(graph), "")``, or -- when a measured model stops measuring because the budget ran out
    (BudgetExceeded; a cold cache on a large model) -- the roofline estimate of this CPU and a note saying so: the
    search then ends at once, so the estimate is only reported, never compared with a measured cost."""
    try:
        return cost.graph_cost(graph), ""
    except BudgetExceeded:
        from graphsub.cost.analytic import AnalyticCostModel, get_device

        estimate = AnalyticCostModel(get_device("cpu"), objective=cost.objective).graph_cost(graph)
        return estimate, ("roofline:cpu estimate: the budget ran out while the cost model "
                          f"{getattr(cost, 'name', '?')} measured the input's ops")


def _local_hash(graph: Graph, node: Node) -> int:
    """Hash of a node's signature and its inputs' signatures (id-independent, one hop)."""
    nodes = graph.nodes
    return hash((node.sig.digest, tuple((nodes[r.node].sig.digest, r.index) for r in node.inputs)))


def fingerprint(graph: Graph) -> int:
    """Order-independent sum of :func:`_local_hash` over all nodes: equal graphs have equal
    fingerprints (not conversely; the structural hash decides on a collision)."""
    return sum(_local_hash(graph, n) for n in graph.nodes.values()) & _MASK


def child_fingerprint(parent: Graph, parent_fp: int, child: Graph) -> int:
    """:func:`fingerprint` of ``child`` in O(change), for a child made by one edit of ``parent``.

    Only added, removed and touched nodes (new nodes, rewired consumers) can change their local
    hash: a rewired node keeps its signature, so its consumers' local hashes stay the same.
    """
    info = child.edit_info()
    if info is None:
        return fingerprint(child)
    added, removed, touched = info
    changed = set(added) | set(removed) | set(touched)
    fp = parent_fp
    for nid in changed:
        old, new = parent.nodes.get(nid), child.nodes.get(nid)
        if old is not None:
            fp -= _local_hash(parent, old)
        if new is not None:
            fp += _local_hash(child, new)
    return fp & _MASK


@dataclass(eq=False)
class State:
    """A graph reached by ``seq``; ``matches`` are its rule matches once computed; ``fp`` its
    :func:`fingerprint` (searches that deduplicate or ask for fingerprints; else 0)."""

    graph: Graph
    cost: Cost
    value: float
    seq: tuple[Step, ...] = ()
    matches: list[Match] | None = None
    fp: int = 0


class Search:
    """Shared machinery: costing, expansion with incremental matching, dedup, budget, trace, progress."""

    def __init__(self, name: str, graph: Graph, rules: Sequence[Rule], cost: SumCostModel, budget: Budget,
                 *, dedup: bool = True, fingerprints: bool = False, progress: ProgressFn | None = None):
        self.name = name
        self.rules = list(rules)
        self.cost = cost
        self.budget = budget
        self.dedup = dedup
        self.fingerprints = dedup or fingerprints  # states carry fp (for dedup, or for the algorithm)
        self.stats = Stats()
        self.t0 = time.perf_counter()
        self.rss0 = rss_mb()
        self.stopped_by = ""
        self.reporter: Progress | None = None
        # a measured cost model stops measuring when the budget runs out (the search ends then); the
        # search's result() gives it back its previous stop
        self._cost_stop = cost.stop
        cost.stop = self.out_of_budget
        c, self.priced = root_cost(cost, graph)
        self.root = State(graph, c, cost.scalar(c))
        self.best = self.root
        # Duplicate detection in two levels: the O(change) fingerprint first; the structural hash
        # (O(forward cone of the edit)) only when fingerprints collide.  A bucket holds the
        # structural hashes of graphs already compared or expanded, and weak references to the
        # states not hashed yet.  A dead reference is a state that was neither expanded nor kept by
        # the algorithm (pruned: an equal graph would be pruned again), so it is dropped.
        self.seen: dict[int, list[int | weakref.ref[State]]] = {}
        if self.fingerprints:
            self.root.fp = fingerprint(graph)
        if dedup:
            self.seen[self.root.fp] = [graph.structural_hash()]
        self.trace: list[tuple[float, float]] = [(0.0, self.root.value)]
        self.reporter = None if progress is None else Progress(progress, self.t0, self.root.value)

    # -- budget -----------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def out_of_budget(self) -> bool:
        """Whether a limit ran out (recorded in ``stopped_by``); also the progress heartbeat."""
        b = self.budget
        now = 0.0
        if b.time_s is not None or self.reporter is not None:
            now = time.perf_counter()
            if self.reporter is not None:
                self.reporter.tick(now)
        if stop_requested():
            self.stopped_by = "interrupt"
        elif b.time_s is not None and now - self.t0 > b.time_s:
            self.stopped_by = "time"
        elif b.expansions is not None and self.stats.expanded >= b.expansions:
            self.stopped_by = "expansions"
        elif b.memory_mb is not None and rss_mb() - self.rss0 > b.memory_mb:
            self.stopped_by = "memory"
        return bool(self.stopped_by)

    def can_extend(self, state: State) -> bool:
        return self.budget.k is None or len(state.seq) < self.budget.k

    # -- expansion --------------------------------------------------------------------
    def matches(self, state: State, parent: State | None = None) -> list[Match]:
        """``state``'s matches (computed once).  Matching polls :meth:`out_of_budget`: when the budget runs
        out meanwhile (on a large graph, matching a rule with a disconnected source is quadratic), the
        state gets no matches (none are stored) and the search stops."""
        if state.matches is None:
            t = time.perf_counter()
            stop = self.out_of_budget
            try:
                if parent is not None and parent.matches is not None and state.graph.edit_info() is not None:
                    found = rematch(state.graph, self.rules, parent.matches, stop=stop)
                else:
                    found = [m for r in self.rules for m in find_matches(state.graph, r, stop=stop)]
            except BudgetExceeded:
                return []
            finally:
                self.stats.time_match_s += time.perf_counter() - t
            state.matches = found
            self.stats.matches += len(found)
        return state.matches

    def child(self, state: State, match: Match) -> State | None:
        """Apply ``match`` to ``state``; None if the result was seen before (with dedup)."""
        t = time.perf_counter()
        sub = apply(state.graph, match)
        t2 = time.perf_counter()
        self.stats.time_apply_s += t2 - t
        self.stats.generated += 1
        fp = child_fingerprint(state.graph, state.fp, sub.graph) if self.fingerprints else 0
        if self.dedup:
            bucket = self.seen.get(fp)
            if bucket is not None and self._known(bucket, sub.graph):
                self.stats.time_hash_s += time.perf_counter() - t2
                self.stats.deduplicated += 1
                return None
            t3 = time.perf_counter()
            self.stats.time_hash_s += t3 - t2
            t2 = t3
        try:
            c = state.cost + self.cost.delta(state.graph, sub.graph)  # O(change); limits give inf
        except BudgetExceeded:  # a measured model ran out of budget pricing a new op: the search ends now
            self.out_of_budget()
            return None
        value = self.cost.scalar(c)
        self.stats.time_cost_s += time.perf_counter() - t2
        step = Step(match.rule.name, tuple(n for _, n in match.nodes), value)
        ch = State(sub.graph, c, value, (*state.seq, step), fp=fp)
        if self.dedup:  # hashed already on a fingerprint collision (cached), else hashed lazily
            bucket = self.seen.setdefault(fp, [])
            bucket.append(sub.graph.structural_hash() if bucket else weakref.ref(ch))
        return ch

    @staticmethod
    def _known(bucket: list[int | weakref.ref[State]], graph: Graph) -> bool:
        """Whether ``graph`` equals a graph in ``bucket`` (resolving the bucket to hashes)."""
        resolved: list[int | weakref.ref[State]] = []
        for e in bucket:
            if isinstance(e, int):
                resolved.append(e)
            elif (st := e()) is not None:
                resolved.append(st.graph.structural_hash())
        h = graph.structural_hash()
        bucket[:] = resolved
        return h in resolved

    def _resolve(self, state: State) -> None:
        """Replace ``state``'s weak reference by its structural hash (it is being expanded)."""
        bucket = self.seen.get(state.fp)
        if bucket is not None:
            for i, e in enumerate(bucket):
                if not isinstance(e, int) and e() is state:
                    bucket[i] = state.graph.structural_hash()

    def allowed(self, state: State, match: Match) -> bool:
        """Hook: restrict which matches an algorithm may apply (e.g. MetaFlow's parts)."""
        return True

    def children(self, state: State, parent: State | None = None) -> Iterator[State]:
        self.stats.expanded += 1
        if self.dedup:
            t = time.perf_counter()
            self._resolve(state)
            self.stats.time_hash_s += time.perf_counter() - t
        for m in self.matches(state, parent):
            if not self.allowed(state, m):
                continue
            ch = self.child(state, m)
            if ch is not None:
                yield ch

    def offer(self, state: State) -> bool:
        """Record ``state`` if it is the best so far (and report it)."""
        if improves(state.value, self.best.value):  # ignore rounding-level "gains"
            self.best = state
            now = time.perf_counter()
            self.trace.append((now - self.t0, state.value))
            if self.reporter is not None:
                self.reporter.improved(now, state.value)
            return True
        return False

    def depth_first(self, *, keep_matches: bool = True) -> SearchResult:
        """Depth-first over every allowed sequence up to K (ENU, Pruning, DPP); ``keep_matches``
        False drops a state's matches once expanded (nothing will reuse them).

        Children are visited cheapest first (stable for ties), so the first descent is the greedy
        path and a search stopped by its budget still holds a good graph; a search that finishes
        visits the same set of sequences in any order, so exactness is unchanged."""
        stack: list[tuple[State, State | None]] = [(self.root, None)]
        while stack and not self.out_of_budget():
            state, parent = stack.pop()
            self.offer(state)
            if not self.can_extend(state):
                continue
            kids = sorted(self.children(state, parent), key=lambda ch: ch.value)
            stack.extend((ch, state) for ch in reversed(kids))
            if not keep_matches:
                state.matches = None
        return self.result()

    def release(self) -> None:
        """Give the cost model back the ``stop`` it had before this search (:meth:`result` does it)."""
        self.cost.stop = self._cost_stop

    def result(self, **params: Any) -> SearchResult:
        self.release()
        if self.priced:
            params = {**params, "initial_cost": self.priced}
        return SearchResult(
            algorithm=self.name, best=self.best.graph, best_cost=self.best.value, best_cost_detail=self.best.cost,
            initial_cost=self.root.value, sequence=self.best.seq, stats=self.stats, wall_time_s=self.elapsed(),
            peak_mem_mb=peak_rss_mb(), trace=(*self.trace, (self.elapsed(), self.best.value)),
            stopped_by=self.stopped_by or "done", params=params,
        )


SearchFn = Callable[..., SearchResult]

__all__ = ["HEARTBEAT_S", "Budget", "BudgetExceeded", "Progress", "ProgressFn", "Search", "SearchFn", "SearchResult",
           "State", "Stats", "Step", "improves", "peak_rss_mb", "root_cost", "rss_mb"]
