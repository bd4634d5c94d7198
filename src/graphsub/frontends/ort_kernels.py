"""The kernels of onnxruntime's optimized graph as one-node models (for :mod:`graphsub.cost.ort_kernels`).

:func:`graphsub.frontends.ort.optimized_model` gives the graph onnxruntime runs; :func:`kernels` turns each of its
nodes into a :class:`Kernel`: a one-node ONNX model (its weights as initializers, its other inputs as graph inputs
fed with the values they have in the full model, recorded by one run of it with every tensor exposed as an
output), and a digest of what its time depends on (domain, type, attributes, input types, which inputs are
weights, the values of small integer inputs such as shapes, axes and indices).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from graphsub.errors import ExecutionError
from graphsub.frontends.ort import make_session

#: integer inputs up to this many elements keep their values in the kernel's digest (shapes, axes, indices)
SMALL_INT = 64
#: the file :func:`tensor_values` writes its graph to beside external weights
PROBE_NAME = "values_probe.onnx"
ORT_VERSION = ort.__version__


@dataclass
class Kernel:
    """One kernel: ``op`` (``domain.type``, or the type for the ONNX domain); ``model`` (serialized one-node model)
    and ``feeds``; ``digest``; ``weight_bytes`` of its initializers. ``error`` says why it cannot run alone (then
    the other fields are empty; ``model`` and ``feeds`` are empty too for a kernel whose digest was known)."""

    op: str
    op_type: str
    model: bytes = b""
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    digest: str = ""
    weight_bytes: int = 0
    error: str = ""


def op_name(node: onnx.NodeProto) -> str:
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of all of ``model``'s initializers."""
    return sum(int(np.prod(t.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
               for t in model.graph.initializer)


def tensor_values(opt: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int,
                  base_dir: str | None = None) -> dict[str, np.ndarray]:
    """Every tensor of the optimized graph ``opt`` on ``feeds`` (one run with all of them as outputs, under
    ``ORT_DISABLE_ALL``: the graph is already onnxruntime's own). ``base_dir``: the folder of ``opt``'s external
    weights (:func:`graphsub.frontends.ort.optimized_files`); the run's session is opened from a file there, so
    onnxruntime maps them rather than copying them."""
    probe = onnx.ModelProto()
    probe.CopyFrom(opt)
    have = {o.name for o in probe.graph.output}
    names = [o for n in probe.graph.node for o in n.output if o and o not in have]
    probe.graph.output.extend(onnx.ValueInfoProto(name=o) for o in dict.fromkeys(names))
    src: bytes | str = probe.SerializeToString()
    if base_dir is not None:
        src = os.path.join(base_dir, PROBE_NAME)
        with open(src, "wb") as f:
            f.write(probe.SerializeToString())
    sess = make_session(src, optimization="disable", threads=threads, prepack=False)
    wanted = [o.name for o in sess.get_outputs()]
    try:
        outs = sess.run(wanted, dict(feeds))
    except Exception as e:  # onnxruntime raises its own types
        raise ExecutionError(f"onnxruntime failed to run its optimized model: {e}") from e
    values = {k: v for k, v in zip(wanted, outs, strict=True) if isinstance(v, np.ndarray)}
    values.update(feeds)
    return values


def _kernel(opt: onnx.ModelProto, node: onnx.NodeProto, values: Mapping[str, np.ndarray],
            inits: Mapping[str, onnx.TensorProto], known: Callable[[str], bool] | None = None,
            base_dir: str | None = None) -> Kernel:
    """One kernel; its one-node model is built only when ``known`` (a cache lookup by digest) does not know it (its
    weights read from ``base_dir`` where they are external data there)."""
    op = op_name(node)
    if any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute):
        return Kernel(op, node.op_type, error="it runs subgraphs")
    h = hashlib.sha256(f"{node.domain}|{node.op_type}|".encode())
    for a in sorted(node.attribute, key=lambda a: a.name):
        h.update(a.SerializeToString(deterministic=True))
    wbytes = 0
    seen_w: set[str] = set()
    for i, name in enumerate(node.input):
        if not name:
            h.update(b"|-")
            continue
        if name in inits:
            t = inits[name]
            dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
            shape = tuple(int(d) for d in t.dims)
            role = "w"
            if name not in seen_w:
                seen_w.add(name)
                wbytes += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            small = dtype.kind in "iub" and int(np.prod(shape, dtype=np.int64)) <= SMALL_INT
            arr = numpy_helper.to_array(t, base_dir or "") if small else None
        elif isinstance(values.get(name), np.ndarray):
            arr = values[name]
            dtype, shape, role = arr.dtype, arr.shape, "x"
            small = arr.dtype.kind in "iub" and arr.size <= SMALL_INT
        else:
            return Kernel(op, node.op_type, error=f"its input {name!r} is not a tensor")
        h.update(f"|{i}:{role}:{np.dtype(dtype).str}:{tuple(shape)}".encode())
        if small and arr is not None:
            h.update(np.ascontiguousarray(arr).tobytes())
    digest = h.hexdigest()[:32]
    if known is not None and known(digest):
        return Kernel(op, node.op_type, b"", {}, digest, wbytes)
    g_inputs: list[onnx.ValueInfoProto] = []
    g_inits: list[onnx.TensorProto] = []
    feeds: dict[str, np.ndarray] = {}
    for name in node.input:
        if not name:
            continue
        if name in inits:
            if all(t.name != name for t in g_inits):
                g_inits.append(_inline(inits[name], base_dir))
        elif name not in feeds:
            x = values[name]
            g_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(x.dtype),
                                                          list(x.shape)))
            feeds[name] = x
    outputs = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(values[o].dtype), None)
               for o in node.output if o and o in values]
    kept = helper.make_node(node.op_type, list(node.input), list(node.output), name="k", domain=node.domain)
    kept.attribute.extend(node.attribute)
    graph = helper.make_graph([kept], "kernel", g_inputs, outputs, initializer=g_inits)
    m = helper.make_model(graph, opset_imports=list(opt.opset_import), ir_version=opt.ir_version)
    return Kernel(op, node.op_type, m.SerializeToString(), feeds, digest, wbytes)


def _inline(t: onnx.TensorProto, base_dir: str | None) -> onnx.TensorProto:
    """``t`` with its data in the proto (read from ``base_dir`` when it is external data there)."""
    if base_dir is None or t.data_location != TensorProto.EXTERNAL:
        return t
    return numpy_helper.from_array(numpy_helper.to_array(t, base_dir), t.name)


def kernels(opt: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int,
            known: Callable[[str], bool] | None = None, base_dir: str | None = None) -> Iterator[Kernel]:
    """The kernels of onnxruntime's optimized graph ``opt`` in graph order, each a one-node model (module docstring);
    a kernel whose digest ``known`` knows (already timed) comes without its model (``model`` empty). ``base_dir``:
    the folder of ``opt``'s external weights (:func:`graphsub.frontends.ort.optimized_files`)."""
    values = tensor_values(opt, feeds, threads, base_dir)
    inits = {t.name: t for t in opt.graph.initializer}
    for node in opt.graph.node:
        yield _kernel(opt, node, values, inits, known, base_dir)


def call_overhead_model() -> tuple[bytes, dict[str, np.ndarray]]:
    """A trivial model (``Identity`` on one float) and its feeds: the cost of one session call."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    m = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "o", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    return m.SerializeToString(), {"x": np.zeros(1, np.float32)}


__all__ = ["ORT_VERSION", "SMALL_INT", "Kernel", "call_overhead_model", "kernels", "op_name", "tensor_values",
           "weight_bytes"]
