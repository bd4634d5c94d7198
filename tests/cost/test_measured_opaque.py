"""An opaque op that cannot run alone on random data (its axes, a constant of the model, drawn at random) is
estimated by the measured cost models, not a reason to refuse the model (ConvNeXt V2's ReduceL2, MobileViT's
run-time reshapes: exit 3 before)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphsub.cost import get_model
from graphsub.frontends.onnx_io import load


def test_an_opaque_op_that_cannot_run_on_random_data_is_estimated(tmp_path: Path) -> None:
    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    nodes = [helper.make_node("ReduceL2", ["x", "axes"], ["n"], keepdims=1),
             helper.make_node("Div", ["x", "n"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], [axes])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    g = load(path)
    assert any(n.op == "opaque" and n.sig.attr["op_type"] == "ReduceL2" for n in g.nodes.values())
    for name in ("measured", "fused"):
        cost = get_model(name, threads=1, progress=False)
        total = cost.scalar(cost.graph_cost(g))
        assert math.isfinite(total) and total > 0, name
