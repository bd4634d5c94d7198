"""``ort_gqa_packed_*`` (:mod:`graphsub.rules.library.gqa_packed`): a GroupQueryAttention fed three projections of one
input, or three consecutive pieces of one tensor at its own widths, reads one packed projection (no Split) and
computes the same; projections of two inputs, or with an activation, are left alone."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from graphsub.data import materialize
from graphsub.execute import run
from graphsub.ir.builder import Builder
from graphsub.ir.graph import Graph
from graphsub.rules.everywhere import rewrite_everywhere
from graphsub.rules.library.gqa_packed import rules

B, S, P, N, NKV, HD, D = 2, 3, 4, 4, 2, 16, 32


def _gqa(form: str, act: str = "none", two_inputs: bool = False) -> Graph:
    sizes = (N * HD, NKV * HD, NKV * HD)
    b = Builder("g")
    pk, pv = b.input("pk", (B, NKV, P, HD)), b.input("pv", (B, NKV, P, HD))
    bias = b.input("ab", (B, 1, S, P + S))
    cos, sin = b.input("cos", (B, 1, S, HD // 2)), b.input("sin", (B, 1, S, HD // 2))
    if form == "split":
        q, k, v = b.op_multi("split", b.input("y", (B, S, sum(sizes))), axis=2, sizes=sizes)
    else:
        x = b.input("x", (B, S, D))
        xs = (x, b.input("x2", (B, S, D)) if two_inputs else x, x)
        q, k, v = (b.op("matmul", xi, b.weight(f"w{n}", (D, w)), act=act)
                   for xi, n, w in zip(xs, "qkv", sizes, strict=True))
    outs = b.op_multi("ms_gqa", q, k, v, pk, pv, bias, cos, sin, num_heads=N, kv_num_heads=NKV, scale=0.3)
    return materialize(b.build(list(outs)), 0)


def _run(g: Graph) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    feeds = {g.nodes[n].sig.attr["name"]: rng.standard_normal(g.nodes[n].sig.out_types[0].shape).astype(np.float32)
             for n in g.inputs}
    return list(run(g, feeds).values())


@pytest.mark.parametrize("form", ["split", "mm"])
def test_gqa_on_one_tensors_pieces_reads_it_packed(form: str) -> None:
    g = _gqa(form)
    g2, steps = rewrite_everywhere(g, rules())
    assert [s.rule for s in steps] == [f"ort_gqa_packed_{form}_rotary"]
    ops = Counter(n.op for n in g2.nodes.values())
    assert ops["ms_gqa_packed"] == 1 and ops["ms_gqa"] == 0 and ops["split"] == 0
    assert ops["matmul"] == (0 if form == "split" else 1)
    for got, want in zip(_run(g2), _run(g), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_projections_of_two_inputs_or_with_an_activation_are_left_alone() -> None:
    assert rewrite_everywhere(_gqa("mm", two_inputs=True), rules())[1] == ()
    assert rewrite_everywhere(_gqa("mm", act="relu"), rules())[1] == ()
