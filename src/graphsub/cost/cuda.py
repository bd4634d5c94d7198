"""Measured GPU cost model: per-op timings with PyTorch on CUDA (cuDNN/cuBLAS), cached like the CPU model.

``get_model("measured:cuda")`` (only where ``torch.cuda.is_available()``; never needed by tests).
Each distinct ``(op, attributes, input shapes, constant mask)`` is run alone through
:mod:`graphsub.frontends.torch_ops` on random float32 tensors on the GPU: warm-up, then ``groups``
groups of ``inner`` back-to-back launches timed with CUDA events; the time of one launch is the
group time / ``inner``, and the median / IQR / minimum over groups are stored in the same SQLite
cache as the CPU timings, keyed by torch version, GPU name and method.  Back-to-back launches
measure GPU time, as TASO does with cudaEvents; the CPU-side launch cost is not included.

Ops without a torch implementation (opaque nodes) fall back to the roofline
estimate of an H100 (``roofline:h100``, spec sheet) and are counted in ``stats.fallbacks``.
:func:`run_graph` executes a whole graph with the same kernels (for end-to-end calibration).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from graphsub.cost.analytic import analytic_cost, get_device
from graphsub.cost.base import Cost, CostModelError, Limits, Objective
from graphsub.cost.measured import Context, MeasuredCostModel, OpTimeCache, Timing, default_consts
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig

METHOD = "torch-cuda-events-v2"


def _torch() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise CostModelError("measured:cuda needs a CUDA GPU visible to torch (torch.cuda.is_available() is False)")
    return torch


def time_cuda(fn: Callable[[], object], *, warmup: int = 3, groups: int = 15, inner: int = 10) -> Timing:
    """Median/IQR/min (ms) of one call of ``fn`` on the current CUDA stream (CUDA events)."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(groups):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return Timing(float(med), float(q3 - q1), groups * inner, float(min(times)))


def _random_inputs(graph: Graph, seed: int, device: str) -> dict[str, Any]:
    import torch

    from graphsub.data import materialize, random_inputs

    g = materialize(graph, seed)
    feeds = {**random_inputs(g, seed), **dict(g.params)}
    return {k: torch.from_numpy(np.array(v)).to(device) for k, v in feeds.items()}


def run_graph(graph: Graph, device: str = "cuda", seed: int = 0) -> Callable[[], dict[str, Any]]:
    """A closure running ``graph`` eagerly with torch on ``device`` (inputs and weights random,
    created once): the module of :func:`graphsub.frontends.torch_emit.to_module`, every weight a buffer.
    Raises CostModelError for an op without a torch implementation."""
    import torch

    from graphsub.data import materialize, random_inputs
    from graphsub.errors import ExportError
    from graphsub.frontends.torch_emit import to_module
    from graphsub.rules.apply import fold_weights

    graph = fold_weights(materialize(graph, seed))  # weight-only subgraphs become constants, as at run time
    try:
        module = to_module(graph, trainable=()).to(device)
    except ExportError as e:
        raise CostModelError(str(e)) from e
    feeds = random_inputs(graph, seed)
    args = [torch.from_numpy(np.array(feeds[name])).to(device) for name in graph.input_names]

    def run() -> dict[str, Any]:
        out = module(*args)
        outs = out if len(graph.outputs) > 1 else (out,)
        return dict(zip(graph.output_names, outs, strict=True))

    return run


class CudaCostModel(MeasuredCostModel):
    """Sum of per-op CUDA timings (see the module docstring); same cache and API as
    :class:`~graphsub.cost.measured.MeasuredCostModel`."""

    method = METHOD

    def __init__(self, *, cache: OpTimeCache | str | os.PathLike[str] | None = None, seed: int = 0,
                 progress: bool = True, objective: Objective = "time_ms", limits: Limits | None = None,
                 statistic: str = "median", groups: int = 15, inner: int = 10, **_: Any) -> None:
        torch = _torch()
        super().__init__(cache=cache, threads=1, seed=seed, progress=progress, objective=objective, limits=limits,
                         statistic=statistic, cold_weights=False)
        self.ctx = Context(f"torch-{torch.__version__}", 0, torch.cuda.get_device_name(), "cuda", METHOD)
        self.name = "measured:cuda" + ("[min]" if statistic == "min" else "")
        self.groups, self.inner = groups, inner
        self.fallback_device = get_device("h100")
        self.fallbacks = 0

    def overhead_ms(self) -> float:
        return 0.0  # GPU time of back-to-back launches: no per-call session overhead

    def _measure(self, graph: Graph) -> Timing:
        from graphsub.frontends.torch_ops import run_sig

        (nid,) = [n for n in graph.topo_order() if not graph.nodes[n].sig.opdef.leaf]
        node = graph.nodes[nid]
        feeds = _random_inputs(graph, self.seed, "cuda")
        xs = [feeds[graph.nodes[r.node].sig.attr["name"]] for r in node.inputs]
        try:
            return time_cuda(lambda: run_sig(node.sig, xs), groups=self.groups, inner=self.inner)
        except (RuntimeError, KeyError) as e:
            raise GraphsubError(f"torch failed on {node.sig.op}: {e}") from e

    def _node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None) -> Cost:
        from graphsub.frontends.torch_ops import supported

        if not supported(sig):
            self.fallbacks += 1
            return analytic_cost(sig, self.fallback_device)
        mask = default_consts(sig) if consts is None else consts
        ms = self.timing(sig, mask).stat(self.statistic)
        a = analytic_cost(sig)
        return Cost(time_ms=ms, flops=a.flops, bytes=a.bytes, launches=a.launches)

    def items(self, graph: Graph) -> dict[tuple[str, str], tuple[str, Any]]:
        from graphsub.frontends.torch_ops import supported

        timed = {self.key_of(n.sig, ())[0] for n in graph.nodes.values() if supported(n.sig)}
        return {k: v for k, v in super().items(graph).items() if k[0] in timed}  # the rest: roofline


def e2e_ms(graph: Graph, seed: int = 0, groups: int = 15, inner: int = 5) -> float:
    """Median GPU time of one eager whole-graph run (ms)."""
    run = run_graph(graph, "cuda", seed)
    return time_cuda(run, groups=groups, inner=inner).median_ms


__all__ = ["METHOD", "CudaCostModel", "e2e_ms", "run_graph", "time_cuda"]
