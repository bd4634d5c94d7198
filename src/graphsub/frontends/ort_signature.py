"""What onnxruntime runs, as a fingerprint: two models with the same :func:`signature` of their optimized graphs
run the same kernels on the same shapes, so any difference measured between them is timing noise.

The graph onnxruntime runs for a model (its own rewrite under ``ORT_ENABLE_ALL``, saved through
``SessionOptions.optimized_model_filepath`` on the session that is timed anyway, :func:`saving_options`) is hashed
as an expression DAG, Merkle-style: a node's hash covers its op, domain, attributes and the hashes of what feeds each
input position (graph inputs by name; weights by dtype and shape, small ones by value too); the signature is the
sorted multiset of all node hashes plus the graph outputs' hashes.  Node order, node and value names and the values
of large weights do not count (they change no kernel); anything that changes which kernels run on which shapes does.

Uses: ``graphsub optimize`` times no candidate that runs as the original or as an earlier candidate (a tie by
construction, which rounds of a noisy machine could otherwise pass off as a gain), and ``graphsub bench suite``
times such peer outputs once.

>>> from onnx import TensorProto, helper
>>> def model(order, name="y"):
...     nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], [name])]
...     g = helper.make_graph([nodes[i] for i in order], "g",
...                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
...                           [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])])
...     return helper.make_model(g)
>>> signature(model([0, 1])) == signature(model([1, 0]))
True
>>> signature(model([0, 1])) == signature(model([0, 1], name="z"))  # an output by another name: not the same
False
"""

from __future__ import annotations

import hashlib
import os

import onnx
import onnxruntime as ort
from onnx import numpy_helper

#: weights up to this many elements are hashed by value (shape constants, axes, small scales); larger ones by shape
SMALL_WEIGHT = 64
#: the file name of the saved optimized graph in the folder given to :func:`saving_options`
SAVED_NAME = "ort_optimized.onnx"
#: weights above this many bytes go to a side file when the optimized model is saved (not read back)
EXTERNAL_MIN_BYTES = 1024


def saving_options(so: ort.SessionOptions, folder: str) -> str:
    """Make ``so`` save the optimized graph into ``folder`` (large weights into a side file there, so that reading
    the graph back costs nothing); returns the path of the model file it will write."""
    path = os.path.join(folder, SAVED_NAME)
    so.optimized_model_filepath = path
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                str(EXTERNAL_MIN_BYTES))
    return path


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def _weight(t: onnx.TensorProto) -> str:
    dims = tuple(t.dims)
    n = 1
    for d in dims:
        n *= d
    if n <= SMALL_WEIGHT and t.data_location != onnx.TensorProto.EXTERNAL:
        return _digest("w", t.data_type, dims, numpy_helper.to_array(t).tobytes())
    return _digest("w", t.data_type, dims)


def _attribute(a: onnx.AttributeProto) -> object:
    if a.type == onnx.AttributeProto.TENSOR:
        return _weight(a.t)
    if a.type == onnx.AttributeProto.GRAPH:
        return signature_of_graph(a.g)
    if a.type == onnx.AttributeProto.GRAPHS:
        return tuple(signature_of_graph(g) for g in a.graphs)
    value = onnx.helper.get_attribute_value(a)
    return tuple(value) if isinstance(value, list) else value


def signature_of_graph(graph: onnx.GraphProto) -> str:
    """The fingerprint of ``graph`` (see the module docstring); node order does not count."""
    value: dict[str, str] = {i.name: _digest("in", i.name) for i in graph.input}
    for t in graph.initializer:
        value[t.name] = _weight(t)
    producer = {out: node for node in graph.node for out in node.output if out}
    hashes: list[str] = []
    done: set[int] = set()

    def visit(root: onnx.NodeProto) -> None:  # iterative post-order: deep graphs do not hit the recursion limit
        stack = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in done:
                continue
            if not ready:
                stack.append((node, True))
                stack.extend((producer[i], False) for i in node.input if i and i not in value and i in producer)
                continue
            attrs = tuple(sorted((a.name, _attribute(a)) for a in node.attribute))
            ins = tuple(value.get(i, _digest("outer", i)) if i else "" for i in node.input)  # outer: a subgraph's
            h = _digest(node.domain or "ai.onnx", node.op_type, attrs, ins)
            for k, out in enumerate(node.output):
                if out:
                    value[out] = _digest(h, k)
            hashes.append(h)
            done.add(id(node))

    for node in graph.node:
        visit(node)
    outs = tuple(value.get(o.name, _digest("in", o.name)) + ":" + o.name for o in graph.output)
    return _digest(tuple(sorted(hashes)), outs)


def signature(model: onnx.ModelProto) -> str:
    """The fingerprint of ``model``'s main graph (see the module docstring)."""
    return signature_of_graph(model.graph)


def signature_of_file(path: str) -> str:
    """The fingerprint of the model saved at ``path`` (its large weights are not read)."""
    return signature(onnx.load(path, load_external_data=False))


def signature_and_kernels(path: str) -> tuple[str, int]:
    """The fingerprint of the model saved at ``path`` and how many nodes (kernels, for a graph onnxruntime saved)
    its main graph has."""
    model = onnx.load(path, load_external_data=False)
    return signature(model), len(model.graph.node)


__all__ = ["SAVED_NAME", "SMALL_WEIGHT", "saving_options", "signature", "signature_and_kernels", "signature_of_file",
           "signature_of_graph"]
