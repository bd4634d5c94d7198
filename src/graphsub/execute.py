"""Reference executor: run a Graph on numpy inputs with the OpDefs' numpy implementations.

Used by rule verification and tests; it is exact-semantics, not fast.  Opaque nodes (ONNX ops
graphsub does not model) have no numpy reference: they run in onnxruntime as one-node models,
through :func:`graphsub.frontends.onnx_io.run_opaque` (imported on the first opaque node, so onnx
and onnxruntime load only for graphs that have one).  Intermediate values are freed after their
last use.

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> x = b.input("x", (2,))
>>> g = b.build(b.relu(x))
>>> run(g, {"x": np.array([-1.0, 2.0], dtype=np.float32)})["output"]
array([0., 2.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graphsub.errors import ExecutionError, GraphsubError, ShapeError
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.registry import RefFn
from graphsub.ops.types import np_dtype


def run(
    graph: Graph,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Execute ``graph``; returns ``{output name: array}``.

    Weight data come from ``params`` then ``graph.params`` (missing -> ExecutionError; see
    :func:`graphsub.data.materialize`).  Inputs must match the declared shapes and dtypes.  A value
    larger than this machine's memory (:func:`graphsub.data.tensor_limit`) is an ExecutionError
    before anything runs; an op that fails is an ExecutionError naming it.
    """
    from graphsub.data import check_sizes

    try:
        check_sizes((f"{graph.nodes[nid].sig.op} node %{nid} output {i}", t)
                    for nid in graph.nodes for i, t in enumerate(graph.nodes[nid].sig.out_types))
    except ShapeError as e:
        raise ExecutionError(f"cannot execute {graph.name!r}: {e}") from e
    order = graph.topo_order()
    remaining: dict[int, int] = {nid: len(graph.users(nid)) for nid in order}
    for r in graph.outputs:
        remaining[r.node] = remaining.get(r.node, 0) + 1
    values: dict[Ref, np.ndarray] = {}
    weights = dict(graph.params)
    if params:
        weights.update(params)
    extra = set(inputs) - set(graph.input_names)
    if extra:
        raise ExecutionError(f"unknown input(s) {sorted(extra)}; graph inputs: {list(graph.input_names)}")
    for nid in order:
        node = graph.nodes[nid]
        sig = node.sig
        if sig.op in ("input", "weight"):
            name = sig.attr["name"]
            src = inputs if sig.op == "input" else weights
            if name not in src:
                kind = "input" if sig.op == "input" else "weight data"
                raise ExecutionError(f"missing {kind} for {name!r}")
            arr = np.asarray(src[name])
            t = sig.out_types[0]
            if tuple(arr.shape) != t.shape:
                raise ExecutionError(f"{sig.op} {name!r}: got shape {arr.shape}, expected {t.shape}")
            if arr.dtype != np_dtype(t.dtype):
                raise ExecutionError(f"{sig.op} {name!r}: got dtype {arr.dtype}, expected {t.dtype}")
            values[Ref(nid, 0)] = arr
            continue
        ref_fn = _opaque_runner() if sig.op == "opaque" else sig.opdef.reference
        if ref_fn is None:
            raise ExecutionError(f"op {sig.op!r} has no reference implementation")
        args = [values[r] for r in node.inputs]
        try:
            outs = ref_fn(args, sig.attr)
        except GraphsubError:
            raise
        except Exception as e:
            raise ExecutionError(f"{sig.op} node %{nid} failed: {type(e).__name__}: {e}") from e
        for i, (arr, t) in enumerate(zip(outs, sig.out_types, strict=True)):
            arr = np.asarray(arr)
            if tuple(arr.shape) != t.shape:
                raise ExecutionError(
                    f"{sig.op} node %{nid}: output {i} has shape {arr.shape}, inferred {t.shape}"
                )
            values[Ref(nid, i)] = arr
        for r in node.inputs:
            remaining[r.node] -= 1
            if remaining[r.node] == 0:
                for k in range(len(graph.nodes[r.node].sig.out_types)):
                    values.pop(Ref(r.node, k), None)
    return {name: values[r] for name, r in zip(graph.output_names, graph.outputs, strict=True)}


def _opaque_runner() -> RefFn:
    """The implementation of opaque nodes (the executor depends on the frontend, never the reverse)."""
    from graphsub.frontends.onnx_io import run_opaque

    return run_opaque


__all__ = ["run"]
