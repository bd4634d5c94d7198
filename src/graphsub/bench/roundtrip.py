"""ONNX round trip of a graph: export, run in onnxruntime, import back, re-export, run again.

>>> from graphsub import zoo
>>> r = roundtrip(zoo.get("resnet", blocks=1))
>>> r.max_abs_diff, r.num_ops, r.reimported_ops, r.fixed_point
(0.0, 5, 7, True)

Fused activations (``conv2d(..., act="relu")``) are written as Conv + Relu and come back as
two ops, so a graph that uses them is not structurally equal after one round trip; the
re-imported graph is a fixed point (a second round trip returns it unchanged).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from graphsub.data import materialize, random_inputs
from graphsub.ir.graph import Graph


@dataclass(frozen=True)
class RoundTrip:
    name: str
    num_ops: int
    reimported_ops: int
    structurally_equal: bool
    fixed_point: bool
    max_abs_diff: float
    max_abs_output: float
    finite: bool
    export_s: float
    import_s: float
    ort_run_s: float
    onnx_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def roundtrip(graph: Graph, seed: int = 0) -> RoundTrip:
    """Round-trip ``graph`` (random weights where missing) and compare the two ONNX models'
    outputs in onnxruntime on the same random inputs."""
    from graphsub.frontends.onnx_io import from_onnx, to_onnx
    from graphsub.frontends.ort import make_session, run_session

    g = materialize(graph, seed)
    t0 = time.perf_counter()
    m1 = to_onnx(g)
    t1 = time.perf_counter()
    g2 = from_onnx(m1)
    t2 = time.perf_counter()
    m2 = to_onnx(g2)
    g3 = from_onnx(m2)
    feeds = random_inputs(g, seed)
    t3 = time.perf_counter()
    out1 = run_session(make_session(m1), feeds)
    t4 = time.perf_counter()
    out2 = run_session(make_session(m2), feeds)
    diff = max((float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
                for a, b in zip(out1, out2, strict=True)), default=0.0)
    return RoundTrip(
        name=graph.name,
        num_ops=graph.num_ops,
        reimported_ops=g2.num_ops,
        structurally_equal=g2 == g,
        fixed_point=g3 == g2,
        max_abs_diff=diff,
        max_abs_output=max(float(np.max(np.abs(a))) for a in out1),
        finite=all(bool(np.isfinite(a).all()) for a in out1),
        export_s=t1 - t0,
        import_s=t2 - t1,
        ort_run_s=t4 - t3,
        onnx_bytes=m1.ByteSize(),
    )


__all__ = ["RoundTrip", "roundtrip"]
