"""The candidate-source record (:class:`Source`), its registry, the context sources work in (:class:`Context`, with
the call's settings :class:`Sources`), and the loop that runs them (:func:`run`).

A source is one frozen record: a ``name``, a declared time ``estimate_s(ctx)`` the planner
(:func:`graphsub.optimize.budget.plan_parts`) shares the budget by, a ``drop`` rank (which sources the planner leaves
out first when the estimates do not fit; None: never), ``applies(ctx)`` (whether it has anything to do for this
model and target), ``turns`` (when it runs: the registered sources run in the order of their turns), ``min_s`` (the
least time worth starting it with), ``graphs`` (whether its candidates are graphs of graphsub's rules, which a target
that runs graphs outside ONNX Runtime can use: :meth:`graphsub.optimize.target.Target.accepts`) and
``make(ctx, seconds)``, which adds candidates to ``ctx.portfolio``. A derived
source -- a pass over other candidates, like spelling or layout -- may have several turns; each time it works on the
candidates made since its last turn (:meth:`Context.fresh`).

At its turn a source the planner planned gets what it asks for (``limit_s(ctx)``, default its planned share), cut to
what is left before the tail and the planned shares of the sources after it; with less than ``min_s`` it is skipped
and a note says so (one that does several things, each with its own share ``each_s``, checks each itself). A source
that declares no estimate (0: cheap) is not planned and takes what is left. A source the planner left out does not
run (the plan's notes say why).

>>> from graphsub.optimize.sources import registered
>>> [(s.name, s.turns, s.drop) for s in registered() if s.drop is not None]
[('eqsat', (20,), 2), ('search-ort', (25,), 2), ('peers', (50,), 3), ('peer+search', (60,), 1)]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphsub.deadline import NO_DEADLINE, Deadline
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.optimize.budget import Part
from graphsub.optimize.candidates import ORIGINAL, Candidate, Portfolio, export_bytes
from graphsub.rules.rule import Rule
from graphsub.search.base import Step

if TYPE_CHECKING:
    from graphsub.optimize.config import OptimizeConfig
    from graphsub.optimize.target import Target

#: ``search_fn(graph, budget_s, algo)``: graphsub's search, returning the best graph with data and its steps
SearchFn = Callable[[Graph, float, str], tuple[Graph, tuple[Step, ...]]]


def _nothing(ctx: Context) -> float:
    return 0.0


def _always(ctx: Context) -> bool:
    return True


@dataclass(frozen=True)
class Source:
    """One registered candidate source (see the module docstring). ``label`` names it in the plan's notes (default:
    its name); ``each_s(ctx)`` is what it asks for each thing it does when that is not its whole share (one search on
    top of each peer)."""

    name: str
    make: Callable[[Context, float], None]
    turns: tuple[int, ...] = (50,)
    estimate_s: Callable[[Context], float] = _nothing
    applies: Callable[[Context], bool] = _always
    limit_s: Callable[[Context], float] | None = None
    min_s: float = 0.0
    drop: int | None = None
    label: str = ""
    each_s: Callable[[Context], float] | None = None
    graphs: bool = False
    anytime: bool = False

    def live(self, ctx: Context) -> bool:
        """Whether it runs in ``ctx``: it applies, and the call's target (if any) accepts it."""
        target = ctx.sources.target
        return self.applies(ctx) and (target is None or target.accepts(self))

    def part(self, ctx: Context) -> Part:
        """What the planner knows of it in ``ctx``."""
        return Part(self.name, self.estimate_s(ctx), self.drop, self.label,
                    None if self.each_s is None else self.each_s(ctx),
                    self.min_s if self.anytime else None)


_REGISTRY: dict[str, Source] = {}


def register(source: Source) -> Source:
    """Add ``source`` to the sources every portfolio runs; GraphsubError when one of that name is registered."""
    if source.name in _REGISTRY:
        raise GraphsubError(f"a candidate source named {source.name!r} is already registered")
    _REGISTRY[source.name] = source
    return source


def unregister(name: str) -> Source:
    """Remove the source ``name`` from the registry and return it; GraphsubError when there is none."""
    if name not in _REGISTRY:
        raise GraphsubError(f"no candidate source named {name!r}; registered: {', '.join(_REGISTRY)}")
    return _REGISTRY.pop(name)


def registered() -> tuple[Source, ...]:
    """The registered sources, by their first turn (ties: in the order they were registered)."""
    return tuple(sorted(_REGISTRY.values(), key=lambda s: min(s.turns)))


@dataclass(frozen=True)
class Sources:
    """The settings of the candidate sources for one call: ``search_fn`` runs graphsub's search
    (:data:`SearchFn`), ``ort_search_fn`` the search priced by onnxruntime's kernels over the call's rules and the
    passes' (``ort_search_s`` seconds of it; :mod:`graphsub.optimize.sources.ort_search`), ``spelling`` the rules of
    the spelling pass, ``peers`` the peers to run, ``eqsat_s`` and ``on_top_s`` the time of equality saturation and
    of a search on top of each peer (0: none), ``layout`` and ``rows`` the layout passes, ``deadline`` the call's,
    ``tail_s`` the seconds kept for the phases after the portfolio, ``tail_each_s`` what each candidate beyond the
    :data:`~graphsub.optimize.budget.TAIL_CANDIDATES` the tail was planned for adds to it (up to ``tail_max_s``:
    :meth:`tail`), ``config`` the call's settings, ``target`` what the call optimizes for
    (:class:`graphsub.optimize.target.Target`; None: inference in ONNX Runtime), and ``planned`` the planner's shares
    of the sources it kept (None: not planned, every applicable source runs)."""

    search_fn: SearchFn | None = None
    ort_search_fn: SearchFn | None = None  # the search priced by ORT's kernels, with the passes' rules
    ort_search_s: float = 0.0
    spelling: Sequence[Rule] = ()
    peers: tuple[str, ...] = ()
    eqsat_s: float = 0.0
    on_top_s: float = 0.0
    peer_timeout_s: float = 120.0
    layout: bool = False  # ``layout`` candidates (graphsub.frontends.onnx_layout) where the original has the pattern
    rows: bool = False  # the spelling candidates also with their sequence activations as rows (frontends.onnx_rows)
    deadline: Deadline = NO_DEADLINE  # the call's
    tail_s: float = 0.0  # seconds to keep for the phases after the portfolio...
    tail_each_s: float = 0.0  # ...and this much more for each candidate beyond budget.TAIL_CANDIDATES...
    tail_max_s: float = math.inf  # ...up to this
    config: OptimizeConfig | None = None
    target: Target | None = None
    planned: Mapping[str, float] | None = None

    def tail(self, made: int = 0) -> float:
        """The seconds kept for the tail once the portfolio has ``made`` distinct candidates: ``tail_s``, and
        ``tail_each_s`` more for each beyond :data:`~graphsub.optimize.budget.TAIL_CANDIDATES`, at most
        ``tail_max_s`` (each is verified, and screened in a session of its own).

        >>> s = Sources(tail_s=30.0, tail_each_s=0.5, tail_max_s=36.0)
        >>> s.tail(4), s.tail(10), s.tail(40)
        (30.0, 32.0, 36.0)
        """
        from graphsub.optimize.budget import TAIL_CANDIDATES

        grown = self.tail_s + self.tail_each_s * max(0, made - TAIL_CANDIDATES)
        return max(self.tail_s, min(grown, self.tail_max_s))

    def left(self, seconds: float, reserve: float = 0.0, made: int = 0) -> float:
        """The time a source that would take ``seconds`` gets now, with ``made`` candidates in the portfolio (0 after a
        stop request)."""
        return self.deadline.share(seconds, reserve=self.tail(made) + reserve)

    def spent(self, made: int = 0) -> bool:
        """Whether the portfolio's time is spent, with ``made`` candidates in it: the deadline passed, a stop was
        requested, or only the time kept for the tail (verifying, timing and writing) is left. No portfolio work starts
        then: on a 65 MB GPT-2 the spelling passes that ran into the tail left the best candidate too little time to
        be confirmed."""
        return self.deadline.expired() or self.left(math.inf, made=made) <= 0.0

    def skipped(self, portfolio: Portfolio, what: str) -> None:
        """Note that ``what`` did not run for lack of time or because a stop was requested."""
        why = "interrupted" if self.deadline.reason() == "interrupt" else "no time left in the budget"
        portfolio.notes.append(f"{what}: skipped: {why}")
        portfolio.skipped.append(what)


@dataclass
class Context:
    """What the sources of one call work with: the settings (``sources``), the original as a graph with data
    (``ref``) and as given (``source``: its bytes or path), the ``portfolio`` they add to, a progress ``note``, and
    what each source has seen so far. At planning time (:func:`parts`) only the settings and the graph are set."""

    sources: Sources
    ref: Graph
    portfolio: Portfolio = field(default_factory=Portfolio)
    source: bytes | str = b""
    note: Callable[[str], None] = lambda what: None
    made_by: dict[str, str] = field(default_factory=dict)  # candidate name -> the source that made it
    seen: dict[str, set[str]] = field(default_factory=dict)  # source -> the candidates its turns have had
    state: dict[str, Any] = field(default_factory=dict)  # what a source keeps between its turns, by its name

    @property
    def config(self) -> OptimizeConfig:
        """The call's settings (the defaults when none were given)."""
        from graphsub.optimize.config import OptimizeConfig

        return self.sources.config or OptimizeConfig()

    def left(self, seconds: float, reserve: float = 0.0) -> float:
        """See :meth:`Sources.left`: the tail grows with the candidates made so far."""
        return self.sources.left(seconds, reserve, made=len(self.portfolio.distinct))

    def spent(self) -> bool:
        """See :meth:`Sources.spent`: the tail grows with the candidates made so far."""
        return self.sources.spent(made=len(self.portfolio.distinct))

    def skipped(self, what: str) -> None:
        """See :meth:`Sources.skipped`."""
        self.sources.skipped(self.portfolio, what)

    def add(self, by: str, cand: Candidate) -> Candidate:
        """Add ``cand``, made by the source ``by``, to the portfolio."""
        self.made_by[cand.name] = by
        return self.portfolio.add(cand)

    def attempt(self, by: str, name: str, make: Callable[[], Candidate | None]) -> Candidate | None:
        """Add what ``make`` returns; a GraphsubError becomes a note (``NAME: error``), not a failure."""
        try:
            cand = make()
        except GraphsubError as e:
            self.portfolio.notes.append(f"{name}: {e}")
            return None
        return None if cand is None else self.add(by, cand)

    def search(self, name: str, base: str, graph: Graph, seconds: float, algo: str) -> Candidate | None:
        """The candidate ``name``: graphsub's search (``algo``) on ``graph`` for ``seconds``, built on ``base``; None
        when it changes nothing."""
        if self.sources.search_fn is None:
            raise GraphsubError(f"{name}: no search function given")
        t = time.perf_counter()
        best, steps = self.sources.search_fn(graph, seconds, algo)
        if not steps:
            return None
        return Candidate(name, export_bytes(best), best, base, steps, time.perf_counter() - t)

    def fresh(self, by: str, accept: Callable[[Candidate], bool] = lambda c: True,
              original: bool = True) -> Iterator[Candidate | None]:
        """The candidates source ``by`` has not had yet, in order -- None for the original first (with ``original``)
        -- those ``accept`` refuses and the ones other turns of ``by`` made left out; each is marked seen when it is
        handed out (so a later turn of ``by`` works on what was made since)."""
        seen = self.seen.setdefault(by, set())
        if original and ORIGINAL not in seen:
            seen.add(ORIGINAL)
            yield None
        for c in list(self.portfolio.distinct):
            if c.name not in seen and self.made_by.get(c.name) != by and accept(c):
                seen.add(c.name)
                yield c


def parts(ctx: Context, sources: Sequence[Source] | None = None) -> list[Part]:
    """What the planner needs of the registered sources (or ``sources``) that apply in ``ctx`` and declare a time."""
    out = []
    for s in registered() if sources is None else sources:
        if s.live(ctx):
            part = s.part(ctx)
            if part.estimate_s > 0:
                out.append(part)
    return out


def run(ctx: Context, sources: Sequence[Source] | None = None) -> Portfolio:
    """Run the registered sources (or ``sources``) that apply, turn by turn, within their shares (see the module
    docstring); the portfolio."""
    chosen = registered() if sources is None else tuple(sources)
    live = [s for s in chosen if s.live(ctx)]
    planned = {p.name: p.estimate_s for p in parts(ctx, live)}
    if ctx.sources.planned is not None:  # the planner's shares; a planned source it left out does not run
        live = [s for s in live if s.name in ctx.sources.planned or s.name not in planned]
        planned = {name: ctx.sources.planned[name] for name in planned if name in ctx.sources.planned}
    turns = sorted(((t, i, s) for i, s in enumerate(live) for t in s.turns), key=lambda x: (x[0], x[1]))
    for turn, _, s in turns:
        ctx.note(s.name)
        if s.name not in planned:
            s.make(ctx, ctx.left(math.inf if s.limit_s is None else s.limit_s(ctx)))
            continue
        later = sum(v for name, v in planned.items() if min(_by_name(live, name).turns) > turn)
        seconds = ctx.left(planned[s.name] if s.limit_s is None else s.limit_s(ctx), reserve=later)
        if s.each_s is None and (seconds < s.min_s or seconds <= 0.0):  # one with each_s checks each thing itself
            ctx.skipped(s.name)
            continue
        s.make(ctx, seconds)
    return ctx.portfolio


def _by_name(sources: Sequence[Source], name: str) -> Source:
    return next(s for s in sources if s.name == name)


__all__ = ["Context", "SearchFn", "Source", "Sources", "parts", "register", "registered", "run", "unregister"]
