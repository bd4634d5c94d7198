"""``ort_gqa_kept_rows*`` (:mod:`graphsub.rules.library.gqa_kept`): the row factor of the TorchScript exporter's guard
against fully masked rows is dropped after GroupQueryAttention, whose kernel gives such rows 0 itself -- the premise
checked on onnxruntime; a factor that is not 1 on a row with a key kept is left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphsub.execute import run
from graphsub.frontends.ort import make_session, run_session
from graphsub.ir.builder import Builder
from graphsub.ir.graph import Graph
from graphsub.rules.everywhere import rewrite_everywhere
from graphsub.rules.library.gqa_kept import rules

B, S, P, N, NKV, HD = 1, 3, 4, 4, 2, 16
LOWEST = float(np.finfo(np.float32).min)


@pytest.mark.parametrize("fill", [LOWEST, -np.inf])
def test_onnxruntimes_kernel_gives_a_row_that_keeps_no_key_zero(fill: float) -> None:
    t = P + S
    names = ["q", "k", "v", "pk", "pv", "sl", "ts", "", "", "", "ab"]
    shapes = {"q": [B, S, N * HD], "k": [B, S, NKV * HD], "v": [B, S, NKV * HD], "pk": [B, NKV, P, HD],
              "pv": [B, NKV, P, HD], "ab": [B, 1, S, t]}
    node = helper.make_node("GroupQueryAttention", names, ["y", "prk", "prv"], domain="com.microsoft",
                            num_heads=N, kv_num_heads=NKV)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    inputs += [helper.make_tensor_value_info("sl", TensorProto.INT32, [B]),
               helper.make_tensor_value_info("ts", TensorProto.INT32, [])]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feeds["ab"] = np.zeros((B, 1, S, t), np.float32)
    feeds["ab"][0, 0, 1, :] = fill  # query row 1 keeps no key
    feeds |= {"sl": np.full(B, t - 1, np.int32), "ts": np.array(t, np.int32)}
    y = run_session(make_session(model.SerializeToString()), feeds)[0]
    assert np.all(y[0, 1] == 0.0) and np.all(y[0, 0] != 0.0) and np.all(y[0, 2] != 0.0)


def _graph(r: np.ndarray) -> Graph:
    b = Builder()
    q, k, v = b.input("q", (B, S, N * HD)), b.input("k", (B, S, NKV * HD)), b.input("v", (B, S, NKV * HD))
    pk, pv = b.input("pk", (B, NKV, P, HD)), b.input("pv", (B, NKV, P, HD))
    ab = np.zeros((B, 1, S, P + S), np.float32)
    ab[0, 0, 0, :] = LOWEST
    y, pres_k, pres_v = b.op_multi("ms_gqa", q, k, v, pk, pv, b.weight("ab", ab.shape, data=ab),
                                   num_heads=N, kv_num_heads=NKV, scale=0.25)
    return b.build({"y": b.mul(y, b.weight("r", r.shape, data=r)), "pk_": pres_k, "pv_": pres_v})


@pytest.mark.parametrize("row", ["kept", "halved"])
def test_the_row_factor_goes_only_where_it_is_one_on_every_kept_row(row: str) -> None:
    r = np.ones((B, S, 1), np.float32)
    r[0, 0] = 0.0  # the row masked entirely: any factor
    if row == "halved":
        r[0, 2] = 0.5
    g = _graph(r)
    out, steps = rewrite_everywhere(g, rules())
    assert [s.rule for s in steps] == (["ort_gqa_kept_rows"] if row == "kept" else [])
    rng = np.random.default_rng(3)
    feeds = {g.nodes[n].sig.attr["name"]: rng.standard_normal(g.nodes[n].sig.out_types[0].shape).astype(np.float32)
             for n in g.inputs}
    for got, want in zip(run(out, feeds).values(), run(g, feeds).values(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
