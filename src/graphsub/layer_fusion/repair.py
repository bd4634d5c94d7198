"""Repairing invalid fusion groups: the hook every search calls after proposing a plan.

A :class:`Repair` maps a well-formed plan to a well-formed plan whose groups all fit the
buffer, touching only the invalid groups.  The paper's baseline, :class:`RandomRepair`, splits
each invalid group at random (:func:`graphsub.layer_fusion.moves.random_split`) and recurses on the
pieces that are still invalid, ignoring DRAM.  It terminates because singletons of fusable ops
are valid by definition (unfusable ops are never grouped).

The explainer-driven repairs of the paper (GNNExplainer, PGExplainer, RG-Explainer feeding the
recursive greedy split, Algorithm 1 in :mod:`graphsub.layer_fusion.split`) implement the same
interface under the names ``gnne``, ``pg`` and ``rg`` (:class:`ExplainerRepair`; the explainer and
the GNN, which need torch and torch-geometric, are imported on first use);
``get_repair(name, weights=PATH)`` picks the GNN weights.

Imports go one way: this module uses the split, the split knows nothing of repairs.

>>> import random
>>> from graphsub import zoo
>>> from graphsub.layer_fusion import LBDFCost, FusionPlan, fusion_graph
>>> fg = fusion_graph(zoo.get("mobilenet_v2"))
>>> cost = LBDFCost(fg, 128 * 1024)
>>> everything = FusionPlan([[v for v in range(fg.num_ops) if v not in cost.unfusable]]
...                         + [(v,) for v in sorted(cost.unfusable)])
>>> cost.evaluate(everything).valid
False
>>> fixed = RandomRepair()(cost, everything, random.Random(0))
>>> cost.evaluate(fixed).valid, len(fixed) > len(everything)
(True, True)
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Protocol

from graphsub.errors import GraphsubError
from graphsub.layer_fusion.cost import FusionCostModel
from graphsub.layer_fusion.moves import random_split
from graphsub.layer_fusion.plan import FusionPlan, Group
from graphsub.layer_fusion.split import GreedySplitter


class Repair(Protocol):
    """``repair(cost, plan, rng) -> plan`` with every fusable group valid."""

    name: str

    def __call__(self, cost: FusionCostModel, plan: FusionPlan, rng: random.Random) -> FusionPlan: ...


class SplitRepair:
    """Shared driver: valid groups are kept, each invalid one is replaced by the pieces
    :meth:`split_group` returns (counted in ``groups_repaired``)."""

    name = ""

    def __init__(self) -> None:
        self.groups_repaired = 0

    def split_group(self, cost: FusionCostModel, group: Group, rng: random.Random) -> list[Group]:
        """Valid pieces covering ``group``."""
        raise NotImplementedError

    def __call__(self, cost: FusionCostModel, plan: FusionPlan, rng: random.Random) -> FusionPlan:
        bad = [g for g in plan.groups if len(g) > 1 and not cost.valid(g)]
        if not bad:
            return plan
        keep = [g for g in plan.groups if len(g) == 1 or cost.valid(g)]
        for g in bad:
            self.groups_repaired += 1
            keep.extend(self.split_group(cost, g, rng))
        return FusionPlan(keep)


class RandomRepair(SplitRepair):
    """The baseline: split invalid groups at random into valid pieces (DRAM ignored)."""

    name = "random"

    def split_group(self, cost: FusionCostModel, group: Group, rng: random.Random) -> list[Group]:
        """Valid pieces covering ``group``."""
        out: list[Group] = []
        stack = [group]
        while stack:
            g = stack.pop()
            if len(g) == 1 or cost.valid(g):
                out.append(g)
            else:
                stack.extend(random_split(cost.fg, g, rng))
        return out


class ExplainerRepair(SplitRepair):
    """Repair invalid groups with :class:`GreedySplitter` over a GNN explainer (``gnne``, ``pg``
    or ``rg``); groups it cannot rectify fall back to the random split.

    The classifier is loaded on first use for the cost model's scheme (``weights``: a ``.pt``
    path, default the packaged one).  A PG / RG explainer without pre-trained parameters in the
    weights file is trained on the fly on invalid groups of random plans of the model being
    searched (seeded).  Counters: ``groups_repaired``, ``rectified``, ``one_cut``, ``fallback``,
    ``explain_s``.
    """

    def __init__(self, name: str, weights: str | Path | None = None, top_k: int = 8, seed: int = 0,
                 max_cat3: int = 4, **explainer_kwargs: Any):
        super().__init__()
        self.name = name
        self.weights = weights
        self.top_k = top_k
        self.seed = seed
        self.max_cat3 = max_cat3
        self.explainer_kwargs = explainer_kwargs
        self._clf: Any = None
        self._splitter: GreedySplitter | None = None
        self._fallback = RandomRepair()
        self.rectified = 0
        self.fallback = 0
        self.one_cut = 0
        self.explain_s = 0.0
        self.fit_s = 0.0

    def splitter(self, cost: FusionCostModel) -> GreedySplitter:
        if self._splitter is None:
            from graphsub.layer_fusion.explain import invalid_groups_for_fit, make_explainer
            from graphsub.layer_fusion.gnn import load_classifier

            self._clf = load_classifier(cost.scheme, self.weights)
            ex = make_explainer(self.name, self._clf, top_k=self.top_k, seed=self.seed, **self.explainer_kwargs)
            if not ex.trained:
                t0 = time.perf_counter()
                ex.fit(cost, invalid_groups_for_fit(cost, random.Random(self.seed)))
                self.fit_s = time.perf_counter() - t0
            self._splitter = GreedySplitter(ex, self.max_cat3)
        return self._splitter

    def split_group(self, cost: FusionCostModel, group: Group, rng: random.Random) -> list[Group]:
        t0 = time.perf_counter()
        pieces = self.splitter(cost).split(cost, group)
        self.explain_s += time.perf_counter() - t0
        if pieces is None:
            self.fallback += 1
            return self._fallback.split_group(cost, group, rng)
        self.rectified += 1
        if self._splitter is not None and self._splitter.category.get(cost, {}).get(group) == 1:
            self.one_cut += 1
        return pieces

    def stats(self) -> dict[str, Any]:
        return {"groups_repaired": self.groups_repaired, "rectified": self.rectified, "fallback": self.fallback,
                "rectify_rate": self.rectified / self.groups_repaired if self.groups_repaired else None,
                "one_cut": self.one_cut,
                "one_cut_rate": self.one_cut / self.groups_repaired if self.groups_repaired else None,
                "explain_split_s": self.explain_s, "explainer_fit_s": self.fit_s}


REPAIRS: dict[str, type[RandomRepair]] = {"random": RandomRepair}
EXPLAINER_REPAIRS = {"gnne": "GNNExplainer", "pg": "PGExplainer", "rg": "RG-Explainer"}


def get_repair(name: str, weights: str | Path | None = None, **kwargs: Any) -> Repair:
    """The repair called ``name``: ``random``, or ``gnne`` / ``pg`` / ``rg`` (explainer + recursive
    greedy split over the GNN at ``weights``, default the packaged weights of the scheme)."""
    if name in REPAIRS:
        return REPAIRS[name]()
    if name in EXPLAINER_REPAIRS:
        return ExplainerRepair(name, weights, **kwargs)
    raise GraphsubError(f"unknown repair {name!r}; choose from {sorted([*REPAIRS, *EXPLAINER_REPAIRS])}")


__all__ = ["EXPLAINER_REPAIRS", "REPAIRS", "ExplainerRepair", "RandomRepair", "Repair", "SplitRepair", "get_repair"]
