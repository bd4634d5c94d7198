"""Layer fusion (issue 9, Mills et al. 2025): partition a CNN into fusion groups that fit an
on-chip buffer while minimising DRAM traffic.

* :mod:`~graphsub.fusion.graph` -- the fusion view of an IR graph (ops, tensors, row geometry);
* :mod:`~graphsub.fusion.plan` -- immutable fusion plans and their well-formedness check;
* :mod:`~graphsub.fusion.lbdf`, :mod:`~graphsub.fusion.brr` -- the ``F_beta`` / ``F_D`` models;
* :mod:`~graphsub.fusion.moves` -- random plans, random splits, local-search moves;
* :mod:`~graphsub.fusion.repair` -- fixing invalid groups (``random`` baseline, ``gnne`` / ``pg`` /
  ``rg`` explainer-driven repairs);
* :mod:`~graphsub.fusion.search` -- Random Search, Local Search, NSGA-II;
* :mod:`~graphsub.fusion.gnn` -- the GNN validity classifier (PyTorch Geometric), dataset, training;
* :mod:`~graphsub.fusion.explain` -- GNNExplainer, PGExplainer (PyG) and RG-Explainer;
* :mod:`~graphsub.fusion.split` -- the recursive greedy split (Algorithm 1) and the explainer repairs.

``gnn``, ``explain`` and ``split`` import torch / torch-geometric and are not imported here.
"""

from __future__ import annotations

from graphsub.fusion.brr import BRRCost
from graphsub.fusion.cost import KB, MB, CostConfig, FusionCostModel, GroupCost, PlanCost
from graphsub.fusion.graph import FusionGraph, OpGeom, fusion_graph
from graphsub.fusion.lbdf import LBDFCost
from graphsub.fusion.plan import FusionPlan, check_plan

SCHEMES: dict[str, type[FusionCostModel]] = {"lbdf": LBDFCost, "brr": BRRCost}


def cost_model(fg: FusionGraph, scheme: str, buffer_bytes: int, config: CostConfig | None = None) -> FusionCostModel:
    """The ``scheme`` (``lbdf`` or ``brr``) cost model of ``fg`` for a buffer of ``buffer_bytes``."""
    try:
        cls = SCHEMES[scheme]
    except KeyError:
        raise ValueError(f"unknown fusion scheme {scheme!r}; choose from {sorted(SCHEMES)}") from None
    return cls(fg, buffer_bytes, config)


__all__ = [
    "KB",
    "MB",
    "SCHEMES",
    "BRRCost",
    "CostConfig",
    "FusionCostModel",
    "FusionGraph",
    "FusionPlan",
    "GroupCost",
    "LBDFCost",
    "OpGeom",
    "PlanCost",
    "check_plan",
    "cost_model",
    "fusion_graph",
]
