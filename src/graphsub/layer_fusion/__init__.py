"""Layer fusion (issue 9, Mills et al. 2025): partition a CNN into fusion groups that fit an
on-chip buffer while minimising DRAM traffic.  (Not the operator fusion of ONNX Runtime: its fused
kernels are rewrite rules in :mod:`graphsub.rules.library` and their cost is in :mod:`graphsub.cost`.)

* :mod:`~graphsub.layer_fusion.graph` -- the fusion view of an IR graph (ops, tensors, row geometry);
* :mod:`~graphsub.layer_fusion.plan` -- immutable fusion plans and their well-formedness check;
* :mod:`~graphsub.layer_fusion.lbdf`, :mod:`~graphsub.layer_fusion.brr` -- the ``F_beta`` / ``F_D`` models;
* :mod:`~graphsub.layer_fusion.moves` -- random plans, random splits, local-search moves;
* :mod:`~graphsub.layer_fusion.repair` -- fixing invalid groups (``random`` baseline, ``gnne`` / ``pg`` /
  ``rg`` explainer-driven repairs over the greedy split);
* :mod:`~graphsub.layer_fusion.search` -- Random Search, Local Search, NSGA-II;
* :mod:`~graphsub.layer_fusion.gnn` -- the GNN validity classifier (PyTorch Geometric), dataset, training;
* :mod:`~graphsub.layer_fusion.explain` -- GNNExplainer, PGExplainer (PyG) and RG-Explainer;
* :mod:`~graphsub.layer_fusion.split` -- the recursive greedy split of one invalid group (Algorithm 1).

``gnn`` and ``explain`` import torch / torch-geometric and are not imported here (``repair`` imports
them when an explainer repair first runs).
"""

from __future__ import annotations

from graphsub.layer_fusion.brr import BRRCost
from graphsub.layer_fusion.cost import KB, MB, CostConfig, FusionCostModel, GroupCost, PlanCost
from graphsub.layer_fusion.graph import FusionGraph, OpGeom, fusion_graph
from graphsub.layer_fusion.lbdf import LBDFCost
from graphsub.layer_fusion.plan import FusionPlan, check_plan

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
