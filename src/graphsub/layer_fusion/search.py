"""Fusion-plan search: Random Search (``rs``), Local Search (``ls``) and NSGA-II (``nsga2``).

Every algorithm is a pure function of ``(cost model, budget, seed, repair)`` and spends its
budget in *evaluated plans* (each proposed plan, after repair, is priced once and counts once,
duplicates included -- the paper's "partition plans an algorithm can generate").  Every
proposal goes through the ``repair`` hook (:mod:`graphsub.layer_fusion.repair`), so every evaluated
plan is valid; the result is the valid plan with the least DRAM.

* **RS**: a fresh :func:`~graphsub.layer_fusion.moves.random_plan` per step (fusion probability drawn
  per plan), repaired.
* **LS**: population of the ``K = 10`` best plans seen; each iteration applies one random
  1-edit move (shift / merge / split) to every member, repairs and evaluates the children,
  and keeps the best ``K`` distinct plans.
* **NSGA-II**: pymoo's ``NSGA2`` (population 10, 10 offspring per generation) on object
  genomes (the plans themselves) with objectives ``(DRAM, -MBU)`` (the paper calls a higher
  MBU better), crossover :func:`~graphsub.layer_fusion.moves.crossover` and mutation
  :func:`~graphsub.layer_fusion.moves.mutate`, both followed by the repair, and duplicate
  elimination.  **Deviation:** the paper used OpenBox's NSGA-II (``NSGA2EAdvisor``, fixed-length
  ConfigSpace vectors); OpenBox 0.9 pins numpy < 2 and cannot be installed beside torch here,
  so pymoo is used.  pymoo stops at the first generation boundary at or past the budget, so
  with a budget that is not a multiple of 10 it may evaluate up to 9 plans more (reported).

>>> from graphsub import zoo
>>> from graphsub.layer_fusion import LBDFCost, fusion_graph
>>> cost = LBDFCost(fusion_graph(zoo.get("resnet18")), 256 * 1024)
>>> r = search(cost, "ls", budget=60, seed=0)
>>> r.cost.valid, r.evaluated_plans, r.cost.dram < cost.evaluate(cost_singletons(cost)).dram
(True, 60, True)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.errors import GraphsubError
from graphsub.layer_fusion.cost import FusionCostModel, PlanCost
from graphsub.layer_fusion.moves import crossover, mutate, random_plan
from graphsub.layer_fusion.plan import FusionPlan
from graphsub.layer_fusion.repair import RandomRepair, Repair

ALGORITHMS = ("rs", "ls", "nsga2")
POPULATION = 10


def cost_singletons(cost: FusionCostModel) -> FusionPlan:
    """The no-fusion plan (every op alone): the reference point of every search."""
    return FusionPlan.singletons(cost.fg.num_ops)


@dataclass
class SearchResult:
    """Best plan found, its cost, and the search statistics (``trace``: ``(evaluated plans,
    best DRAM bytes so far)`` at every improvement)."""

    algo: str
    plan: FusionPlan
    cost: PlanCost
    evaluated_plans: int
    time_s: float
    seed: int
    repair: str
    trace: list[tuple[int, float]] = field(default_factory=list)
    group_evals: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "algo": self.algo,
            "repair": self.repair,
            "seed": self.seed,
            "dram_mb": self.cost.dram_mb,
            "mbu_kb": self.cost.mbu_kb,
            "num_groups": self.cost.num_groups,
            "valid": self.cost.valid,
            "evaluated_plans": self.evaluated_plans,
            "time_s": self.time_s,
            "ms_per_1k_plans": 1e6 * self.time_s / max(self.evaluated_plans, 1),
            "distinct_groups_priced": self.group_evals,
            "trace": [[n, d] for n, d in self.trace],
        }


class Evaluator:
    """Prices plans, counts them against the budget, remembers the best valid one."""

    def __init__(self, cost: FusionCostModel, budget: int):
        if budget < 1:
            raise GraphsubError(f"search budget must be at least 1 plan, got {budget}")
        self.cost = cost
        self.budget = budget
        self.count = 0
        self.best: FusionPlan | None = None
        self.best_cost: PlanCost | None = None
        self.trace: list[tuple[int, float]] = []

    @property
    def exhausted(self) -> bool:
        return self.count >= self.budget

    def __call__(self, plan: FusionPlan) -> PlanCost:
        self.count += 1
        c = self.cost.evaluate(plan)
        if c.valid and (self.best_cost is None or c.dram < self.best_cost.dram):
            self.best, self.best_cost = plan, c
            self.trace.append((self.count, c.dram))
        return c


def _proposal(cost: FusionCostModel, repair: Repair, rng: random.Random) -> FusionPlan:
    return repair(cost, random_plan(cost.fg, rng, None, cost.unfusable), rng)


def random_search(cost: FusionCostModel, ev: Evaluator, repair: Repair, rng: random.Random) -> None:
    while not ev.exhausted:
        ev(_proposal(cost, repair, rng))


def local_search(cost: FusionCostModel, ev: Evaluator, repair: Repair, rng: random.Random,
                 k: int = POPULATION) -> None:
    pop: dict[FusionPlan, float] = {}
    while len(pop) < k and not ev.exhausted:
        p = _proposal(cost, repair, rng)
        pop[p] = ev(p).dram
    while not ev.exhausted:
        children: dict[FusionPlan, float] = {}
        for p in list(pop):
            if ev.exhausted:
                break
            child = repair(cost, mutate(cost.fg, p, rng, cost.unfusable), rng)
            children[child] = ev(child).dram
        merged = {**pop, **children}
        pop = dict(sorted(merged.items(), key=lambda kv: kv[1])[:k])


def nsga2_search(cost: FusionCostModel, ev: Evaluator, repair: Repair, rng: random.Random,
                 seed: int, k: int = POPULATION) -> None:
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.crossover import Crossover
    from pymoo.core.duplicate import ElementwiseDuplicateElimination
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import ElementwiseProblem
    from pymoo.core.sampling import Sampling
    from pymoo.optimize import minimize

    fg = cost.fg

    class Problem(ElementwiseProblem):
        def __init__(self) -> None:
            super().__init__(n_var=1, n_obj=2, vtype=object)

        def _evaluate(self, x: Any, out: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            c = ev(x[0])
            out["F"] = [c.dram, -c.mbu]

    class Sample(Sampling):
        def _do(self, problem: Any, n_samples: int, **kwargs: Any) -> Any:
            x = np.empty((n_samples, 1), dtype=object)
            for i in range(n_samples):
                x[i, 0] = _proposal(cost, repair, rng)
            return x

    class Cross(Crossover):
        def __init__(self) -> None:
            super().__init__(2, 2)

        def _do(self, problem: Any, x: Any, **kwargs: Any) -> Any:
            _, n_matings, _ = x.shape
            y = np.empty((2, n_matings, 1), dtype=object)
            for m in range(n_matings):
                a, b = x[0, m, 0], x[1, m, 0]
                y[0, m, 0] = repair(cost, crossover(fg, a, b, rng), rng)
                y[1, m, 0] = repair(cost, crossover(fg, b, a, rng), rng)
            return y

    class Mutate(Mutation):
        def _do(self, problem: Any, x: Any, **kwargs: Any) -> Any:
            for i in range(len(x)):
                x[i, 0] = repair(cost, mutate(fg, x[i, 0], rng, cost.unfusable), rng)
            return x

    class Dedup(ElementwiseDuplicateElimination):
        def is_equal(self, a: Any, b: Any) -> bool:
            return bool(a.X[0] == b.X[0])

    algo = NSGA2(pop_size=k, n_offsprings=k, sampling=Sample(), crossover=Cross(), mutation=Mutate(),
                 eliminate_duplicates=Dedup())
    minimize(Problem(), algo, ("n_evals", ev.budget), seed=seed, verbose=False)


def search(cost: FusionCostModel, algo: str, budget: int, seed: int = 0,
           repair: Repair | None = None) -> SearchResult:
    """Run ``algo`` (``rs``, ``ls`` or ``nsga2``) for ``budget`` evaluated plans."""
    if algo not in ALGORITHMS:
        raise GraphsubError(f"unknown search algorithm {algo!r}; choose from {list(ALGORITHMS)}")
    repair = repair or RandomRepair()
    ev = Evaluator(cost, budget)
    rng = random.Random(seed)
    groups_before = cost.group_evals
    t0 = time.perf_counter()
    runners: dict[str, Callable[[], None]] = {
        "rs": lambda: random_search(cost, ev, repair, rng),
        "ls": lambda: local_search(cost, ev, repair, rng),
        "nsga2": lambda: nsga2_search(cost, ev, repair, rng, seed),
    }
    runners[algo]()
    elapsed = time.perf_counter() - t0
    if ev.best is None or ev.best_cost is None:  # cannot happen: repaired plans are valid
        raise GraphsubError(f"{algo}: no valid plan among {ev.count} evaluated")
    return SearchResult(algo, ev.best, ev.best_cost, ev.count, elapsed, seed, repair.name, ev.trace,
                        cost.group_evals - groups_before)


__all__ = ["ALGORITHMS", "POPULATION", "Evaluator", "SearchResult", "cost_singletons", "local_search",
           "nsga2_search", "random_search", "search"]
