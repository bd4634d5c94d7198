"""onnxruntime contrib ops (``ms_*``, domain com.microsoft): references agree with
onnxruntime beyond the registry samples, canonical attributes, shape errors, and the ONNX
import/export round trip of models containing com.microsoft nodes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphsub.data import materialize, random_array, slot_role
from graphsub.equivalence import equivalent
from graphsub.errors import GraphsubError
from graphsub.frontends.onnx_export import export_graph
from graphsub.frontends.onnx_io import from_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir import Builder
from graphsub.ir.node import make_sig
from graphsub.ops import REGISTRY
from graphsub.ops.msft import MS
from graphsub.ops.types import TensorType


def f(*shape: int) -> TensorType:
    return TensorType(shape, "float32")


EXTRA: list[tuple[str, tuple[TensorType, ...], dict[str, Any]]] = [
    ("ms_fused_conv", (f(2, 8, 11, 9), f(8, 4, 3, 3), f(8), f(2, 8, 5, 9)),
     {"strides": (2, 1), "pads": (0, 1, 1, 1), "activation": "Sigmoid"}),
    ("ms_fused_conv", (f(1, 4, 9, 9), f(6, 4, 5, 3)), {"pads": "SAME", "dilations": (1, 2), "activation": "Tanh"}),
    ("ms_fused_conv", (f(1, 3, 7, 7), f(5, 3, 3, 3), f(5)), {"pads": "VALID", "activation": "LeakyRelu"}),
    ("ms_fused_conv", (f(1, 4, 6, 6), f(4, 1, 3, 3), f(4)),
     {"pads": "SAME", "activation": "Clip", "activation_params": (0.0, 6.0)}),
    ("ms_fused_conv", (f(1, 3, 6, 6), f(2, 3, 1, 1), f(2), f(1, 2, 6, 6)),
     {"activation": "HardSigmoid", "activation_params": (1 / 6, 0.5)}),
    ("ms_fused_matmul", (f(7, 3), f(5, 7)), {"trans_a": True, "trans_b": True, "alpha": 0.1}),
    ("ms_fused_matmul", (f(1, 4, 5), f(3, 5, 6)), {"alpha": 3.0}),
    ("ms_fused_matmul", (f(2, 3, 6, 4), f(3, 5, 6)), {"trans_a": True, "trans_b": True}),
    ("ms_gelu", (f(2, 3, 7),), {}),
    ("ms_bias_gelu", (f(2, 3, 4, 6), f(6)), {}),
    ("ms_fast_gelu", (f(4, 3, 8), f(8)), {}),
    ("ms_fast_gelu", (f(33,),), {}),
    ("ms_skip_layernorm", (f(2, 4, 32), f(1, 4, 32), f(32), f(32), f(32)), {"epsilon": 1e-6}),
    ("ms_skip_layernorm", (f(3, 4, 16), f(3, 4, 16), f(16)), {}),
    ("ms_mha", (f(2, 16, 64), f(2, 20, 64), f(2, 20, 32)), {"num_heads": 8}),
    ("ms_mha", (f(1, 64, 256), f(1, 64, 256), f(1, 64, 256)), {"num_heads": 4, "scale": 0.05}),
]


@pytest.mark.parametrize(("op", "types", "attrs"), EXTRA, ids=[f"{c[0]}-{i}" for i, c in enumerate(EXTRA)])
def test_reference_matches_onnxruntime(op: str, types: tuple[TensorType, ...], attrs: dict[str, Any]) -> None:
    sig = make_sig(op, attrs, types)
    rng = np.random.default_rng(7)
    b = Builder(op)
    feeds = {f"x{k}": random_array(t, rng, slot_role(sig, k)) for k, t in enumerate(types)}
    vals = [b.input(f"x{k}", t.shape) for k, t in enumerate(types)]
    g = b.build(b.op(op, *vals, **attrs))
    model = export_graph(g)
    assert any(o.domain == MS for o in model.opset_import)
    assert {n.domain for n in model.graph.node} == {MS}
    (got,) = run_model(model, feeds)
    ref_fn = REGISTRY[op].reference
    assert ref_fn is not None
    (want,) = ref_fn([feeds[f"x{k}"] for k in range(len(types))], sig.attr)
    assert got.shape == want.shape == sig.out_types[0].shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_canonical_attributes() -> None:
    mha = make_sig("ms_mha", {"num_heads": 4}, (f(1, 3, 64), f(1, 5, 64), f(1, 5, 8)))
    assert mha.attr["scale"] == 0.25  # 1/sqrt(64/4), stored explicitly
    assert mha.out_types[0].shape == (1, 3, 8)
    conv = make_sig("ms_fused_conv", {"pads": "SAME", "activation": "LeakyRelu"}, (f(1, 3, 8, 8), f(4, 3, 3, 3)))
    assert conv.attr["pads"] == (1, 1, 1, 1)
    assert conv.attr["activation_params"] == (0.01,)
    assert make_sig("ms_fused_matmul", {"alpha": 1 / 3}, (f(2, 3), f(3, 4))).attr["alpha"] == 0.33333334
    assert make_sig("ms_skip_layernorm", {}, (f(2, 8), f(2, 8), f(8))).attr["epsilon"] == 1e-12


@pytest.mark.parametrize(("op", "types", "attrs", "msg"), [
    ("ms_mha", (f(1, 3, 10), f(1, 5, 10), f(1, 5, 10)), {"num_heads": 4}, "must divide"),
    ("ms_mha", (f(1, 3, 8), f(2, 5, 8), f(2, 5, 8)), {"num_heads": 2}, "inconsistent"),
    ("ms_fused_conv", (f(1, 3, 8, 8), f(4, 3, 3, 3), f(4), f(1, 4, 8, 8)), {"activation": "Relu"}, "z must"),
    ("ms_fused_conv", (f(1, 3, 8, 8), f(4, 3, 3, 3)), {"activation": "Clip"}, "activation_params"),
    ("ms_fused_matmul", (f(2, 3), f(2, 4)), {"trans_b": True}, "inner dimensions"),
    ("ms_bias_gelu", (f(2, 8), f(2, 8)), {}, "bias must"),
    ("ms_skip_layernorm", (f(2, 4, 8), f(2, 1, 8), f(8)), {}, "skip"),
    ("ms_skip_layernorm", (f(2, 4, 8), f(2, 4, 8), f(4)), {}, "gamma"),
])
def test_shape_errors(op: str, types: tuple[TensorType, ...], attrs: dict[str, Any], msg: str) -> None:
    with pytest.raises(GraphsubError, match=msg):
        make_sig(op, attrs, types)


def test_onnx_round_trip() -> None:
    b = Builder("msft")
    x = b.input("x", (1, 3, 8, 8))
    c = b.op("ms_fused_conv", x, b.weight("w", (4, 3, 3, 3)), b.weight("b", (4,)),
             activation="LeakyRelu", activation_params=(0.2,), pads="SAME")
    c = b.op("ms_fused_conv", c, b.weight("w2", (4, 4, 3, 3)), b.weight("b2", (4,)), c,
             activation="Relu", pads="SAME")
    r = b.reshape(c, shape=(1, 16, 16))
    m = b.op("ms_fused_matmul", r, b.weight("m", (16, 16)), alpha=0.3, trans_b=True)
    g = b.op("ms_bias_gelu", b.op("ms_gelu", m), b.weight("bg", (16,)))
    g = b.op("ms_fast_gelu", b.op("ms_fast_gelu", g, b.weight("bf", (16,))))
    s = b.op("ms_skip_layernorm", g, m, b.weight("ga", (16,)), b.weight("be", (16,)), b.weight("bi", (16,)),
             epsilon=1e-5)
    graph = materialize(b.build(b.op("ms_mha", s, g, m, num_heads=4)))
    model = export_graph(graph)
    onnx.checker.check_model(model)
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 17), (MS, 1)}
    types = sorted(n.op_type for n in model.graph.node if n.domain == MS)
    assert types == ["BiasGelu", "FastGelu", "FastGelu", "FusedConv", "FusedConv", "FusedMatMul", "Gelu",
                     "MultiHeadAttention", "SkipLayerNormalization"]
    back = from_onnx(model)
    assert back == graph
    assert equivalent(graph, back).equivalent


def _ms_model(op: str, ins: list[tuple[str, list[int]]], outs: list[tuple[str, list[int]]],
              **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node(op, [n for n, _ in ins], [n for n, _ in outs], domain=MS, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in ins if n],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model


def test_import_of_onnxruntime_nodes() -> None:
    qkv = [("q", [1, 4, 8]), ("k", [1, 5, 8]), ("v", [1, 5, 8])]
    g = from_onnx(_ms_model("MultiHeadAttention", qkv, [("y", [1, 4, 8])], num_heads=2))
    (node,) = (g.node(n) for n in g.nodes if not g.node(n).is_leaf)
    assert node.op == "ms_mha" and node.sig.attr["scale"] == 0.5  # absent scale: 1/sqrt(4)
    g = from_onnx(_ms_model("SkipLayerNormalization", [("x", [2, 8]), ("s", [2, 8]), ("g", [8])], [("y", [2, 8])]))
    assert [g.node(n).sig.attr for n in g.ops_of("ms_skip_layernorm")] == [{"epsilon": 1e-12}]
    # features graphsub does not model stay opaque (and round-trip untouched)
    for model in (
        _ms_model("MultiHeadAttention", qkv, [("y", [1, 4, 8])], num_heads=2, unidirectional=1),
        _ms_model("SkipLayerNormalization", [("x", [2, 8]), ("s", [2, 8]), ("g", [8])],
                  [("y", [2, 8]), ("mean", [2, 1])]),
        _ms_model("FusedMatMul", [("a", [2, 4, 8]), ("b", [2, 8, 3])], [("y", [2, 4, 3])], transBatchA=1),
        _ms_model("FusedConv", [("x", [1, 2, 5, 5]), ("w", [2, 2, 1, 1]), ("", []), ("z", [1, 2, 5, 5])],
                  [("y", [1, 2, 5, 5])], activation="Relu"),
    ):
        g = from_onnx(model)
        assert [g.node(n).op for n in g.nodes if not g.node(n).is_leaf] == ["opaque"]
