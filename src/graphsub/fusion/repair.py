"""Repairing invalid fusion groups: the hook every search calls after proposing a plan.

A :class:`Repair` maps a well-formed plan to a well-formed plan whose groups all fit the
buffer, touching only the invalid groups.  The paper's baseline, :class:`RandomRepair`, splits
each invalid group at random (:func:`graphsub.fusion.moves.random_split`) and recurses on the
pieces that are still invalid, ignoring DRAM.  It terminates because singletons of fusable ops
are valid by definition (unfusable ops are never grouped).

The explainer-driven repairs of the paper (GNNExplainer, PGExplainer, RG-Explainer feeding the
recursive greedy split, Algorithm 1) implement the same interface under the names ``gnne``,
``pg`` and ``rg`` (:class:`graphsub.fusion.split.ExplainerRepair`, imported lazily: they need
torch and torch-geometric); ``get_repair(name, weights=PATH)`` picks the GNN weights.

>>> import random
>>> from graphsub import zoo
>>> from graphsub.fusion import LBDFCost, FusionPlan, fusion_graph
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
from pathlib import Path
from typing import Any, Protocol

from graphsub.errors import GraphsubError
from graphsub.fusion.cost import FusionCostModel
from graphsub.fusion.moves import random_split
from graphsub.fusion.plan import FusionPlan, Group


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


class RepairNotBuilt(GraphsubError):
    """Kept for compatibility: every repair of the paper is built now."""


REPAIRS: dict[str, type[RandomRepair]] = {"random": RandomRepair}
EXPLAINER_REPAIRS = {"gnne": "GNNExplainer", "pg": "PGExplainer", "rg": "RG-Explainer"}
PLANNED: dict[str, str] = {}


def get_repair(name: str, weights: str | Path | None = None, **kwargs: Any) -> Repair:
    """The repair called ``name``: ``random``, or ``gnne`` / ``pg`` / ``rg`` (explainer + recursive
    greedy split over the GNN at ``weights``, default the packaged weights of the scheme)."""
    if name in REPAIRS:
        return REPAIRS[name]()
    if name in EXPLAINER_REPAIRS:
        from graphsub.fusion.split import ExplainerRepair

        return ExplainerRepair(name, weights, **kwargs)
    raise GraphsubError(f"unknown repair {name!r}; choose from {sorted([*REPAIRS, *EXPLAINER_REPAIRS])}")


__all__ = ["EXPLAINER_REPAIRS", "PLANNED", "REPAIRS", "RandomRepair", "Repair", "RepairNotBuilt", "get_repair"]
