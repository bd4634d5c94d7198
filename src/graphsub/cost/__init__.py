"""Cost models: what a graph costs, per node and in total, and how a substitution changes it.

=====================  ==================================================================
spec                   model
=====================  ==================================================================
``flops``              FLOPs (analytic, from the OpDefs)
``bytes``              bytes moved (each input and output crossing memory once)
``launches``           kernel launches (1 per node doing work)
``roofline:DEVICE``    roofline time with occupancy and launch overhead; DEVICE is ``cpu``
                       (measured once, cached), ``p100``, ``v100`` or ``h100`` (spec sheets)
``measured``           per-op onnxruntime timings on this machine (``ORT_DISABLE_ALL``),
                       cached in SQLite (:mod:`graphsub.cost.measured`)
``measured:LEVEL``     the same with the one-node models at optimization LEVEL
``measured:cuda``      per-op PyTorch/cuDNN timings on a CUDA GPU (:mod:`graphsub.cost.cuda`;
                       optional, needs a GPU)
``fused``              fusion-aware measured model for ``ORT_ENABLE_ALL``
                       (:mod:`graphsub.cost.ort_fusion`)
``ort-kernels``         the kernels of ORT's own optimized graph, each timed, priced region by region
                       around each edit and cached by the region's structure (:mod:`graphsub.cost.ort_regions`)
``...[min]``           a measured spec using the minimum of the repeats, not the median
                       (e.g. ``measured[min]``, ``fused[min]``)
=====================  ==================================================================

All are :class:`~graphsub.cost.base.SumCostModel` s: ``graph_cost`` sums the run-time nodes
(leaves and weight-only nodes are free), ``delta(parent, child)`` is O(change), ``limits`` make
infeasible graphs infinitely expensive.

>>> from graphsub import zoo
>>> m = get_model("flops")
>>> g = zoo.get("resnet", blocks=1)
>>> m.graph_cost(g).flops == sum(r.cost.flops for r in m.breakdown(g))
True
"""

from __future__ import annotations

import os
from typing import Any

from graphsub.cost.analytic import GPU_PRESETS, AnalyticCostModel, Device, analytic_cost, get_device
from graphsub.cost.base import (
    DIMS,
    ZERO,
    Cost,
    CostModel,
    CostModelError,
    Limits,
    OpCostRow,
    SumCostModel,
)

MODEL_SPECS = ("flops", "bytes", "launches", "roofline:cpu", *(f"roofline:{d}" for d in GPU_PRESETS), "measured",
               "measured:all", "fused", "ort-kernels")


def get_model(spec: str, *, threads: int | None = None, cache: str | os.PathLike[str] | None = None,
              progress: bool = True, limits: Limits | None = None, **kwargs: Any) -> SumCostModel:
    """A cost model from its spec (see the module docstring); measured-model options pass through."""
    base = spec.removesuffix("[min]")
    if base != spec:
        if not base.startswith(("measured", "fused")):
            raise CostModelError(f"[min] applies to measured models only, not {spec!r}")
        kwargs["statistic"] = "min"
    kind, _, arg = base.partition(":")
    if kind in ("flops", "bytes", "launches") and not arg:
        return AnalyticCostModel(None, objective=kind, limits=limits)
    if kind == "roofline":
        return AnalyticCostModel(get_device(arg or "cpu"), limits=limits)
    if kind == "measured" and arg == "cuda":
        from graphsub.cost.cuda import CudaCostModel

        return CudaCostModel(cache=cache, progress=progress, limits=limits, **kwargs)
    if kind == "measured":
        from graphsub.cost.measured import MeasuredCostModel

        return MeasuredCostModel(cache=cache, threads=threads, optimization=arg or "disable", progress=progress,
                                 limits=limits, **kwargs)
    if kind == "fused":
        from graphsub.cost.ort_fusion import FusedMeasuredCostModel

        return FusedMeasuredCostModel(cache=cache, threads=threads, optimization=arg or "all", progress=progress,
                                      limits=limits, **kwargs)
    if kind == "ort-kernels" and not arg:
        from graphsub.cost.ort_regions import OrtKernelCostModel

        if kwargs:
            raise CostModelError(f"ort-kernels takes no options here, not {', '.join(sorted(kwargs))}")
        return OrtKernelCostModel(cache=cache, threads=threads, progress=progress, limits=limits)
    raise CostModelError(f"unknown cost model {spec!r}; known: {', '.join(MODEL_SPECS)}")


__all__ = [
    "DIMS",
    "MODEL_SPECS",
    "ZERO",
    "AnalyticCostModel",
    "Cost",
    "CostModel",
    "CostModelError",
    "Device",
    "Limits",
    "OpCostRow",
    "SumCostModel",
    "analytic_cost",
    "get_device",
    "get_model",
]
