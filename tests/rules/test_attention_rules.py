"""The ``attention`` rule set: scaled_dot_product_attention as PyTorch's exporters write it (q and the transposed k
each times sqrt(scale), an optional additive attention bias, the dynamo exporter's k transpose and NaN guard) becomes
one MultiHeadAttention, which the ``ort-spelling`` packing turns into one Attention; both match the original in
onnxruntime. And the set is registered, opt-in, and part of the search priced by onnxruntime's kernels."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.equivalence import Reference, check
from graphsub.frontends.onnx_import import from_onnx
from graphsub.ir import Graph
from graphsub.optimize.candidates import export_bytes
from graphsub.rules.cleanup import clean
from graphsub.rules.everywhere import rewrite_everywhere
from graphsub.rules.library import get_set, resolve_rules

B, S, H, HD = 1, 5, 2, 4
D = H * HD


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(value, name)


def _projection(n: str, rng: np.random.Generator) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """``reshape(x @ W + b, (B, S, H, hd))`` for q, k or v (``n``)."""
    inits = [_const(f"w{n}", rng.standard_normal((D, D), dtype=np.float32) * 0.3),
             _const(f"b{n}", rng.standard_normal(D, dtype=np.float32) * 0.1)]
    nodes = [helper.make_node("MatMul", ["x", f"w{n}"], [f"mm{n}"]),
             helper.make_node("Add", [f"mm{n}", f"b{n}"], [f"p{n}"]),
             helper.make_node("Reshape", [f"p{n}", "heads"], [f"r{n}"])]
    return nodes, inits


def _key(spelling: str) -> list[onnx.NodeProto]:
    """k's head split with its last two axes swapped: TorchScript merges the swap into the perm, dynamo swaps them on
    the (B*H, S, hd) view."""
    if spelling == "ts":
        return [helper.make_node("Transpose", ["rk"], ["tk"], perm=[0, 2, 3, 1])]
    return [helper.make_node("Transpose", ["rk"], ["tk0"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["tk0", "bh"], ["tk1"]),
            helper.make_node("Transpose", ["tk1"], ["tk2"], perm=[0, 2, 1]),
            helper.make_node("Reshape", ["tk2", "khead"], ["tk"])]


def sdpa_attention(spelling: str = "ts", bias: str = "") -> onnx.ModelProto:
    """A tiny self-attention as PyTorch exports ``scaled_dot_product_attention(q, k, v, attn_mask=bias)``.

    ``bias``: none (``""``), ``"weight"`` (a constant (1, H, S, S), as T5's folded position bias), ``"weight_first"``
    (the same, added as ``Add(B, logits)``) or ``"input"`` (a run-time (B, 1, S, S) mask); the dynamo spelling
    guards the probabilities of an attention without bias against NaN, as its exports do."""
    rng = np.random.default_rng(0)
    c = np.float32(np.sqrt(1.0 / np.sqrt(HD)))
    inits = [_const("heads", np.array([B, S, H, HD], np.int64)), _const("out", np.array([B, S, D], np.int64)),
             _const("bh", np.array([B * H, S, HD], np.int64)), _const("khead", np.array([B, H, HD, S], np.int64)),
             _const("c", np.array(c)), _const("zero", np.zeros((), np.float32))]
    nodes: list[onnx.NodeProto] = []
    for n in "qkv":
        more_nodes, more_inits = _projection(n, rng)
        nodes += more_nodes
        inits += more_inits
    nodes += [helper.make_node("Transpose", ["rq"], ["tq"], perm=[0, 2, 1, 3]), *_key(spelling),
              helper.make_node("Transpose", ["rv"], ["tv"], perm=[0, 2, 1, 3]),
              helper.make_node("Mul", ["tq", "c"], ["sq"]), helper.make_node("Mul", ["tk", "c"], ["sk"]),
              helper.make_node("MatMul", ["sq", "sk"], ["logits"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, D])]
    probs_in = "logits"
    if bias:
        if bias == "input":
            inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [B, 1, S, S]))
        else:
            inits.append(_const("mask", rng.standard_normal((1, H, S, S), dtype=np.float32)))
        add_in = ["mask", "logits"] if bias == "weight_first" else ["logits", "mask"]
        nodes.append(helper.make_node("Add", add_in, ["biased"]))
        probs_in = "biased"
    nodes.append(helper.make_node("Softmax", [probs_in], ["probs"], axis=-1))
    probs = "probs"
    if spelling == "dynamo" and not bias:
        nodes += [helper.make_node("IsNaN", ["probs"], ["nan"]),
                  helper.make_node("Where", ["nan", "zero", "probs"], ["safe"])]
        probs = "safe"
    nodes += [helper.make_node("MatMul", [probs, "tv"], ["o"]),
              helper.make_node("Transpose", ["o"], ["to"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["to", "out"], ["y"])]
    graph = helper.make_graph(nodes, "sdpa", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, D])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ops(g: Graph) -> Counter[str]:
    return Counter(n.op for n in g.nodes.values())


def _verified(model: onnx.ModelProto, g: Graph) -> bool:
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
             for i in model.graph.input}
    result = check(Reference(model.SerializeToString()), export_bytes(g), [(0, feeds)])
    return result.verified


CASES = [("ts", "", "ort_mha_batched_qk", "ortsp_attention_bbb"),
         ("ts", "weight", "ort_mha_batched_qk_ab", "ortsp_attention_bbb_ab"),
         ("ts", "weight_first", "ort_mha_batched_qk_ab_lhs", "ortsp_attention_bbb_ab"),
         ("ts", "input", "ort_mha_batched_qk_ab", "ortsp_attention_bbb_ab"),
         ("dynamo", "", "ort_mha_dynamo_qk_guard", "ortsp_attention_bbb"),
         ("dynamo", "input", "ort_mha_dynamo_qk_ab", "ortsp_attention_bbb_ab")]


@pytest.mark.parametrize(("spelling", "bias", "mha_rule", "pack_rule"), CASES)
def test_exported_sdpa_becomes_one_attention(spelling: str, bias: str, mha_rule: str, pack_rule: str) -> None:
    model = sdpa_attention(spelling, bias)
    g, _ = clean(from_onnx(model))
    g1, steps = rewrite_everywhere(g, get_set("attention"))
    assert [s.rule for s in steps] == [mha_rule]
    assert _ops(g1)["ms_mha"] == 1 and not {"softmax", "transpose", "isnan"} & set(_ops(g1))
    assert _verified(model, g1)
    g2, steps = rewrite_everywhere(g1, get_set("ort-spelling"))
    assert [s.rule for s in steps] == [pack_rule]
    assert _ops(g2)["ms_attention"] == 1 and "ms_mha" not in _ops(g2)
    assert _verified(model, g2)


def test_a_factor_per_head_is_no_scale() -> None:
    """q and k times a factor per head are not logits times one scale: no rule takes the attention."""
    model = sdpa_attention("ts")
    init = next(i for i in model.graph.initializer if i.name == "c")
    init.CopyFrom(_const("c", np.linspace(0.5, 1.0, H, dtype=np.float32).reshape(1, H, 1, 1)))
    g, _ = clean(from_onnx(model))
    assert rewrite_everywhere(g, get_set("attention"))[1] == ()


def test_the_set_is_registered_opt_in_and_searched_by_ort_kernels() -> None:
    from graphsub.optimize.sources.ort_search import PASS_RULE_SETS, search_rules

    names = [r.name for r in resolve_rules("attention")]
    assert len(names) == len(set(names)) >= 30
    assert all(n.startswith(("ort_mha_", "ort_gqa_")) for n in names)
    assert all({"ort", "attention"} <= set(r.tags) and r.exact and len(r.examples) >= 3 for r in get_set("attention"))
    assert set(names) <= {r.name for r in get_set("ort")}  # the ort set keeps them
    assert not set(names) & {r.name for r in get_set("default")}  # opt-in: contrib ops
    assert "attention" in PASS_RULE_SETS
    assert set(names) <= {r.name for r in search_rules([])}
