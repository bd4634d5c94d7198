"""Every setting of one :func:`graphsub.optimize.optimize` call in one value, with its defaults in one place.

The command line builds an :class:`OptimizeConfig` from its options (``graphsub optimize``, ``--training``,
``optimize-many``, the suite's graphsub run), the library takes one (``optimize(model, config=...)``) or the same
names as keywords (``optimize(model, time_s=30)``: :meth:`OptimizeConfig.build`), and the training routes pass theirs
on. :meth:`OptimizeConfig.check` refuses, before any work, a setting that would not limit or not decide
(NaN, infinite or negative times, no verification draw, a non-positive threshold).

>>> cfg = OptimizeConfig.build(time_s=30, peers="none")
>>> cfg.time_s, cfg.peers, cfg.min_speedup, cfg.seeds
(30, 'none', 1.03, 3)
>>> OptimizeConfig.build(time_s=float("nan")).check()
Traceback (most recent call last):
...
graphsub.errors.GraphsubError: time_s (the optimize budget) must be a finite number of seconds > 0, not nan
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphsub.deadline import check_seconds
from graphsub.errors import GraphsubError
from graphsub.optimize.budget import DEFAULT_TIME_S
from graphsub.optimize.decide import MIN_SPEEDUP
from graphsub.optimize.timing import Timers
from graphsub.rules.rule import Rule
from graphsub.search.base import Budget
from graphsub.spec import Shapes

DEFAULT_ALGO = "taso"
DEFAULT_COST = "fused[min]"  # the minimum of repeats: far more repeatable than the median on a loaded machine
DEFAULT_RULES = "default"
DEFAULT_BUDGET_S = 12.0  # the main search without a total budget (time_s=None); with one, its share of it
DEFAULT_EQSAT_S = 5.0
DEFAULT_ON_TOP_S = 2.0
DEFAULT_ORT_SEARCH_S = 10.0  # the search priced by ORT's kernels (graphsub.optimize.sources.ort_search)

#: ``progress(phase, elapsed_s, best_cost)``; phases: load, search, verify, bisect, portfolio, time, write
ProgressFn = Callable[[str, float, float | None], None]


@dataclass(frozen=True)
class OptimizeConfig:
    """The settings of an :func:`~graphsub.optimize.optimize` call (see its docstring for what each does).

    ``time_s`` bounds the whole call (None: unbounded), plus ``time_per_gb_s`` per GB of the model's weights
    (:func:`graphsub.optimize.budget.scaled_time_s`; the command line's default budget adds
    :data:`~graphsub.optimize.budget.PER_GB_S`, a budget given is the budget), counted from ``started`` (a reading
    of ``timers.clock``; default: the call); ``budget`` holds the main search's own limits; ``threads`` (None: every
    core) is the thread count the decision is made at; ``min_speedup`` the smallest gain worth keeping a candidate for
    (:mod:`graphsub.optimize.decide`); ``measure_latency`` False skips the portfolio and the timing (the search's
    verified result is the answer); ``peers``, ``eqsat_s``, ``on_top_s``, ``ort_search_s`` (the search priced by
    onnxruntime's kernels, with the rules of the hand-written passes: :mod:`graphsub.optimize.sources.ort_search`)
    and ``spelling`` (the hand-ordered passes: the spelling pass, the rows and channels-first layouts) shape the
    portfolio;
    ``cleanup`` runs graphsub's general clean-up (:mod:`graphsub.rules.cleanup`) before every search;
    ``search_params`` go to the search algorithm."""

    algo: str = DEFAULT_ALGO
    rules: str | Sequence[Rule] = DEFAULT_RULES
    cost: str = DEFAULT_COST
    budget: Budget | None = None
    time_s: float | None = DEFAULT_TIME_S
    time_per_gb_s: float = 0.0
    started: float | None = None
    seed: int = 0
    seeds: int = 3
    threads: int | None = None
    keep_slower: bool = False
    min_speedup: float = MIN_SPEEDUP
    timing_budget_ms: float = 200.0
    measure_latency: bool = True
    input_shapes: Shapes | None = None
    #: more sizes of the input file's free symbolic dims (name -> size) at which the written model is checked against
    #: it (besides two larger sizes and, with a key/value cache, the decoding sizes: :mod:`graphsub.symbolic`)
    check_sizes: Sequence[Mapping[str, int]] = ()
    #: the sizes the input file's free symbolic dims are imported, searched and timed at (name -> size; the output
    #: keeps them symbolic); a free dim left out is imported at a distinct size of
    #: :data:`graphsub.frontends.dims.GENERIC_SIZES` (2, 3, 5, ...: never 1)
    sizes: Mapping[str, int] | None = None
    rtol: float = 1e-4
    atol: float = 1e-5
    peers: str | Sequence[str] = "auto"
    eqsat_s: float = DEFAULT_EQSAT_S
    on_top_s: float = DEFAULT_ON_TOP_S
    ort_search_s: float = DEFAULT_ORT_SEARCH_S
    spelling: bool = True
    cleanup: bool = True
    provider: str = "cpu"
    timers: Timers | None = None
    progress: ProgressFn | None = None
    search_params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, config: OptimizeConfig | None = None, **overrides: Any) -> OptimizeConfig:
        """``config`` (default: the defaults) with ``overrides`` applied; a keyword that is not a setting is a
        parameter of the search algorithm (``search_params``), as :func:`graphsub.search.search` takes them."""
        names = {f.name for f in dataclasses.fields(cls)}
        base = config or cls()
        extra = {k: v for k, v in overrides.items() if k not in names}
        known = {k: v for k, v in overrides.items() if k in names}
        if extra:
            known["search_params"] = {**base.search_params, **known.get("search_params", {}), **extra}
        return dataclasses.replace(base, **known)

    def check(self) -> OptimizeConfig:
        """Itself once every limit is usable; GraphsubError naming the first that is not (before any work)."""
        check_seconds("eqsat_s", self.eqsat_s)
        check_seconds("on_top_s", self.on_top_s)
        check_seconds("ort_search_s", self.ort_search_s)
        check_seconds("time_per_gb_s", self.time_per_gb_s)
        check_seconds("rtol", self.rtol)
        check_seconds("atol", self.atol)
        for what, v in (("timing_budget_ms", self.timing_budget_ms), ("min_speedup", self.min_speedup)):
            check_seconds(what, v, positive=True)
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise GraphsubError(f"seeds must be a whole number >= 1, not {self.seeds!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise GraphsubError(f"threads must be a whole number >= 1, not {self.threads!r}")
        check_seconds("time_s (the optimize budget)", self.time_s, allow_none=True, positive=True)
        return self

    def rule_set_name(self, n_rules: int) -> str:
        """How a result names the rules: the set's spec, or ``"N rules"`` for a list."""
        return self.rules if isinstance(self.rules, str) else f"{n_rules} rules"


__all__ = ["DEFAULT_ALGO", "DEFAULT_BUDGET_S", "DEFAULT_COST", "DEFAULT_EQSAT_S", "DEFAULT_ON_TOP_S",
           "DEFAULT_ORT_SEARCH_S", "DEFAULT_RULES", "OptimizeConfig", "ProgressFn"]
