"""Analytic cost models: FLOPs, bytes moved, kernel launches and a roofline time per device.

Per node (free nodes -- leaves and weight-only values -- cost nothing, see :mod:`.base`):

* ``flops`` and ``bytes`` come from the op's :class:`~graphsub.ops.registry.OpDef`
  (``flops`` / ``bytes_moved``: each input and output crossing memory once);
* ``launches`` is 1 for a node that does any work, 0 for pure metadata ops (reshape, squeeze,
  ... whose FLOPs and bytes are both 0);
* ``time_ms`` is a roofline with an occupancy factor and a per-launch overhead::

      util = min(1, output elements / device.saturation_elems)     (1 if saturation_elems == 0)
      time = max(flops / (peak * util), bytes / bandwidth) + launches * launch_overhead

  The occupancy factor models what a plain roofline misses on a GPU: a kernel with fewer
  independent outputs than the device has resident threads (SMs x 2048) cannot use all lanes,
  so small convolutions run far below peak and merging two of them into one wider kernel is
  almost free.  This is the effect behind the seeds' GPU rewrites (OCGGS Figure 1: enlarge a
  1x1 conv to 3x3, then merge it with a 3x3 sibling).  Without it, the roofline would say the
  merge costs +13 us on a V100 (extra FLOPs outweigh one saved launch).

Device presets (fp32, from the vendors' spec sheets; launch overhead ~5 us, the usual CUDA
kernel-launch cost measured by microbenchmarks):

=========  ============  ===========  ==========================================================
preset     peak          bandwidth    source
=========  ============  ===========  ==========================================================
``p100``   9.3 TFLOP/s   732 GB/s     NVIDIA Tesla P100 PCIe datasheet (56 SMs, 2048 threads/SM)
``v100``   15.7 TFLOP/s  900 GB/s     NVIDIA Tesla V100 SXM2 datasheet (80 SMs, 2048 threads/SM)
``cpu``    measured      measured     :func:`measure_cpu`: numpy float32 1024^3 matmul and a
                                      64 MB copy, best of a few runs, cached per CPU model in
                                      ``cache_dir()/devices.json``; 5 us per launch (ORT's
                                      per-node dispatch), no occupancy factor
=========  ============  ===========  ==========================================================

Worked example (OCGGS Figure 1 on a V100: a 3x3 and a 1x1 conv, 256 kernels each, on
1x256x14x14, merged into one 512-kernel 3x3 conv):

>>> from graphsub.ir import Builder
>>> m = AnalyticCostModel("v100")
>>> b = Builder()
>>> x = b.input("x", (1, 256, 14, 14))
>>> w3, w1 = b.weight("w3", (256, 256, 3, 3)), b.weight("w1", (256, 256, 1, 1))
>>> two = m.graph_cost(b.build([b.conv2d(x, w3, pads=(1, 1, 1, 1)), b.conv2d(x, w1)]))
>>> merged = m.graph_cost(b.build(b.conv2d(x, b.concat(w3, b.enlarge(w1, kernel=(3, 3)), axis=0),
...                                         pads=(1, 1, 1, 1))))
>>> merged.flops > two.flops, merged.time_ms < two.time_ms
(True, True)
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from graphsub.cost.base import Cost, CostModelError, Limits, Objective, SumCostModel
from graphsub.cost.env import cache_dir, machine_key
from graphsub.ir.node import OpSig


@dataclass(frozen=True)
class Device:
    """Roofline parameters of one device.

    ``peak_gflops``: fp32 GFLOP/s; ``bandwidth_gbs``: memory GB/s; ``launch_overhead_us``:
    fixed cost per kernel launch; ``saturation_elems``: output elements needed to fill the device
    (0: always full); ``source``: where the numbers come from.
    """

    name: str
    peak_gflops: float
    bandwidth_gbs: float
    launch_overhead_us: float
    saturation_elems: int = 0
    source: str = ""

    def time_ms(self, flops: float, nbytes: float, launches: float, out_elems: int) -> float:
        util = 1.0
        if self.saturation_elems and out_elems:
            util = min(1.0, out_elems / self.saturation_elems)
        compute = flops / (self.peak_gflops * 1e9 * util)
        memory = nbytes / (self.bandwidth_gbs * 1e9)
        return (max(compute, memory) + launches * self.launch_overhead_us * 1e-6) * 1e3


P100 = Device("p100", 9300.0, 732.0, 5.0, 56 * 2048,
              "NVIDIA Tesla P100 PCIe datasheet: 9.3 TFLOP/s fp32, 732 GB/s HBM2, 56 SMs")
V100 = Device("v100", 15700.0, 900.0, 5.0, 80 * 2048,
              "NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOP/s fp32, 900 GB/s HBM2, 80 SMs")
H100 = Device("h100", 67000.0, 3350.0, 5.0, 132 * 2048,
              "NVIDIA H100 SXM5 datasheet: 67 TFLOP/s fp32 (non-tensor), 3.35 TB/s HBM3, 132 SMs")
GPU_PRESETS = {"p100": P100, "v100": V100, "h100": H100}
CPU_LAUNCH_US = 5.0


def measure_cpu(repeats: int = 5) -> Device:
    """Measure this CPU: best float32 matmul GFLOP/s (numpy BLAS, all cores) and copy GB/s (~0.5 s)."""
    n = 1024
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    bm = rng.standard_normal((n, n), dtype=np.float32)
    a @ bm  # warm-up (thread pool start)
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        a @ bm
        best = min(best, time.perf_counter() - t)
    gflops = 2 * n**3 / best / 1e9
    src = np.ones(16 << 20, dtype=np.float32)  # 64 MB: far beyond the caches
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    gbs = 2 * src.nbytes / best / 1e9
    return Device("cpu", round(gflops, 1), round(gbs, 2), CPU_LAUNCH_US, 0,
                  f"measured on {machine_key()}: numpy 1024^3 sgemm, 64 MB copy")


def cpu_device(path: Path | None = None, refresh: bool = False, measure: Callable[[], Device] | None = None) -> Device:
    """This CPU's preset, measured once and cached in ``path`` (default ``cache_dir()/devices.json``); ``measure``
    takes the measurement (None: :func:`measure_cpu`; a test passes a fake)."""
    path = path or cache_dir() / "devices.json"
    key = machine_key()
    data: dict[str, dict[str, object]] = {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    entry = data.get(key)
    if entry and not refresh:
        try:
            return Device(**entry)  # type: ignore[arg-type]
        except TypeError:
            pass
    dev = (measure or measure_cpu)()
    data[key] = asdict(dev)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache dir only costs a re-measurement next time
    return dev


def get_device(spec: str | Device) -> Device:
    """A device preset by name (``cpu``, ``p100``, ``v100``) or a given :class:`Device`."""
    if isinstance(spec, Device):
        return spec
    if spec == "cpu":
        return cpu_device()
    try:
        return GPU_PRESETS[spec]
    except KeyError:
        raise CostModelError(f"unknown device {spec!r}; known: cpu, {', '.join(GPU_PRESETS)}") from None


def analytic_cost(sig: OpSig, device: Device | None = None) -> Cost:
    """FLOPs, bytes, launches and (with a device) roofline time of one operator signature.

    >>> from graphsub.ir.node import make_sig
    >>> from graphsub.ops.types import TensorType
    >>> s = make_sig("matmul", {}, (TensorType((64, 128)), TensorType((128, 32))))
    >>> c = analytic_cost(s)
    >>> c.flops == 2 * 64 * 128 * 32, c.bytes == 4 * (64 * 128 + 128 * 32 + 64 * 32), c.launches
    (True, True, 1.0)
    """
    od = sig.opdef
    if od.leaf:
        return Cost()
    flops = float(od.flops(sig.in_types, sig.out_types, sig.attr))
    nbytes = float(od.bytes_moved(sig.in_types, sig.out_types, sig.attr))
    launches = 1.0 if (flops or nbytes) else 0.0
    t = 0.0
    if device is not None:
        t = device.time_ms(flops, nbytes, launches, sum(o.numel for o in sig.out_types))
    return Cost(time_ms=t, flops=flops, bytes=nbytes, launches=launches)


class AnalyticCostModel(SumCostModel):
    """Sum of :func:`analytic_cost` over run-time nodes.

    ``device``: a preset name or :class:`Device` (None: ``time_ms`` is 0 and only FLOPs, bytes and
    launches are modelled); ``objective``: default ``time_ms`` with a device, else ``flops``.
    """

    def __init__(self, device: str | Device | None = None, objective: Objective | None = None,
                 limits: Limits | None = None) -> None:
        self.device = None if device is None else get_device(device)
        if objective is None:
            objective = "time_ms" if self.device is not None else "flops"
        super().__init__(objective, limits)
        if self.device is not None:
            self.name = f"roofline:{self.device.name}"
        else:
            self.name = objective if isinstance(objective, str) else "analytic"

    def _node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None) -> Cost:
        return analytic_cost(sig, self.device)


__all__ = [
    "GPU_PRESETS",
    "P100",
    "V100",
    "AnalyticCostModel",
    "Device",
    "analytic_cost",
    "cpu_device",
    "get_device",
    "measure_cpu",
]
