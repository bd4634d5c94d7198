"""The search's price of what onnxruntime runs: regions around each edit, priced by ORT's kernels and cached by
structure (graphsub.cost.ort_regions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphsub.cost import get_model
from graphsub.cost.ort_fusion import FusedMeasuredCostModel
from graphsub.cost.ort_kernels import kernel_counts
from graphsub.cost.ort_regions import (
    CHAIN,
    OrtKernelCostModel,
    edit_regions,
    region_graph,
    region_key,
    region_nodes,
)
from graphsub.data import materialize
from graphsub.frontends.onnx_export import export_graph
from graphsub.ir import Builder, Graph
from graphsub.ir.analysis import weight_only_map, weight_only_update
from graphsub.ir.builder import Value
from graphsub.rules.apply import apply
from graphsub.rules.library import find_rule
from graphsub.rules.match import find_matches


def _model(tmp_path: Path) -> OrtKernelCostModel:
    fallback = FusedMeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, budget_ms=2.0, warmup=1, min_repeats=3,
                                      progress=False, statistic="min")
    return OrtKernelCostModel(threads=1, cache=fallback.cache, fallback=fallback, budget_ms=2.0)


def two_branches(n2: int = 16) -> Graph:
    """Two projections ``relu(x @ W + b)`` with their own weights (names and ids differ), summed."""
    b = Builder("two")
    outs = []
    for i, n in enumerate((16, n2)):
        x = b.input(f"x{i}", (4, 16))
        y = b.add(b.matmul(x, b.weight(f"w{i}", (16, n))), b.weight(f"b{i}", (n,)))
        outs.append(b.relu(y))
    return b.build(outs)


def test_structurally_equal_regions_share_a_key() -> None:
    g = two_branches()
    wo = weight_only_map(g)
    regions = [region_nodes(g, [r.node, *(i.node for i in g.nodes[r.node].inputs)], wo) for r in g.outputs]
    k0, k1 = (region_key(g, r, wo) for r in regions)
    assert k0 == k1  # other weights, other names, other ids: the same price
    other = two_branches(n2=32)
    wo2 = weight_only_map(other)
    r2 = region_nodes(other, [other.outputs[1].node, *(i.node for i in other.nodes[other.outputs[1].node].inputs)],
                      wo2)
    assert region_key(other, r2, wo2) != k0  # another shape is another region


def test_region_graph_is_the_region_alone_with_its_boundary() -> None:
    g = materialize(two_branches())
    wo = weight_only_map(g)
    out = g.outputs[0].node
    region = region_nodes(g, [out, g.nodes[out].inputs[0].node], wo)  # relu and its add: the matmul is outside
    sub = region_graph(g, region, wo)
    assert sorted(sub.op_histogram()) == ["add", "relu"]
    assert len(sub.inputs) == 1 and sub.input_types[0].shape == (4, 16)  # the matmul's result comes in
    assert [t.shape for t in sub.output_types] == [(4, 16)]
    # a weight read by the region keeps its data
    bias = next(sub.nodes[n].sig.attr["name"] for n in sub.ops_of("weight"))
    np.testing.assert_array_equal(sub.params[bias], g.params["b0"])


def test_what_onnxruntime_removes_anyway_costs_nothing(tmp_path: Path) -> None:
    """A transpose pair that cancels: onnxruntime removes it itself, so the kernels it runs before and after the
    rewrite are the same ones -- one cached timing each -- and the delta is exactly zero; a per-op model charges
    the two transposes."""
    b = Builder("tt")
    x = b.relu(b.input("x", (2, 8, 16)))
    y = b.transpose(b.transpose(x, perm=(0, 2, 1)), perm=(0, 2, 1))
    g = b.build(b.sigmoid(y))
    rule = find_rule("cpu_transpose_transpose_identity")
    child = apply(g, find_matches(g, rule)[0]).graph
    model = _model(tmp_path)
    assert model.delta(g, child).time_ms == 0.0
    assert model.stats.priced == 2 and model.stats.fallbacks == 0
    assert model.fallback.delta(g, child).time_ms < 0  # the per-op model sees two kernels fewer


def test_regions_are_priced_once_per_structure(tmp_path: Path) -> None:
    b = Builder("layers")
    x = b.input("x", (2, 8, 16))
    for _ in range(3):  # three identical layers with a cancelling transpose pair each
        x = b.transpose(b.transpose(b.relu(x), perm=(0, 2, 1)), perm=(0, 2, 1))
        x = b.sigmoid(b.tanh(b.exp(x)))
    g = b.build(x)
    rule = find_rule("cpu_transpose_transpose_identity")
    model = _model(tmp_path)
    matches = find_matches(g, rule)
    assert len(matches) == 3
    for m in matches:
        model.delta(g, apply(g, m).graph)
    # the first and last layers border the graph's input / output; the middle one differs from both: at most 6
    # regions priced for 3 edits, and a second pass prices nothing
    priced = model.stats.priced
    assert priced <= 6
    for m in matches:
        model.delta(g, apply(g, m).graph)
    assert model.stats.priced == priced and model.stats.hits >= 6


def test_a_region_it_cannot_price_goes_to_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = Builder("tt")
    x = b.relu(b.input("x", (2, 8, 16)))
    g = b.build(b.sigmoid(b.transpose(b.transpose(x, perm=(0, 2, 1)), perm=(0, 2, 1))))
    child = apply(g, find_matches(g, find_rule("cpu_transpose_transpose_identity"))[0]).graph
    model = _model(tmp_path)

    def refuse(sub: Graph) -> float:
        raise RuntimeError("onnxruntime will not run it")

    monkeypatch.setattr(model, "_price", refuse)
    assert model.delta(g, child) == model.fallback.delta(g, child)
    assert model.stats.fallbacks == 1 and "will not run it" in model.stats.last_error


def test_whole_graph_cost_is_what_onnxruntime_runs(tmp_path: Path) -> None:
    g = two_branches()
    model = _model(tmp_path)
    cost = model.graph_cost(g)
    assert cost.time_ms > 0 and not cost.is_inf
    # what it priced: six graphsub ops, two kernels -- onnxruntime fuses each matmul, bias and relu
    assert kernel_counts(export_graph(materialize(g)).SerializeToString(), threads=1) == {"com.microsoft.FusedGemm": 2}
    assert model.stats.last_error == ""


def test_the_spec_builds_it() -> None:
    model = get_model("ort-kernels", threads=1, progress=False)
    assert isinstance(model, OrtKernelCostModel) and model.name == "ort-kernels"



def test_a_region_with_large_weights_is_priced_through_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With its large weights as placeholders (a region above ``FILE_BYTES``) onnxruntime maps them, its optimized
    graph keeps them in a file beside it, the run that records each kernel's inputs maps that file, and each kernel
    timed afresh reads its own weights: the same kernels as the inline path."""
    import contextlib
    from collections.abc import Iterator
    from typing import Any

    import onnx

    from graphsub.cost.ort_kernels import OrtKernelPricer
    from graphsub.frontends import ort as fort

    b = Builder("big")
    x = b.input("x", (4, 256))
    g = materialize(b.build(b.relu(b.add(b.matmul(x, b.weight("w", (256, 256))), b.weight("b", (256,))))), 0)
    model = _model(tmp_path)
    feeds = model._feeds(g)
    inline = model.pricer.price(export_graph(g, share=False).SerializeToString(), feeds)
    seen: list[tuple[str | None, list[bool]]] = []
    real = fort.optimized_files

    @contextlib.contextmanager
    def spy(*args: Any, **kw: Any) -> Iterator[tuple[Any, str | None]]:
        with real(*args, **kw) as (opt, base):
            seen.append((base, [t.data_location == onnx.TensorProto.EXTERNAL for t in opt.graph.initializer]))
            yield opt, base

    monkeypatch.setattr(fort, "optimized_files", spy)
    fresh = OrtKernelPricer(threads=1, cache=tmp_path / "fresh.sqlite", budget_ms=2.0)
    files = fresh.price(export_graph(g, share=True).SerializeToString(), feeds)
    assert seen and seen[0][0] is not None and any(seen[0][1]), "the optimized graph's weights stay in its folder"
    assert [op for op, _ in files.kernels] == [op for op, _ in inline.kernels] and not files.unpriced
    assert files.measured == len(files.kernels) > 0  # each kernel timed alone with its weights read from the file


def _tanh_gelu(b: Builder, x: Value) -> Value:
    """GPT-2's GELU as the exporters write it: ``0.5x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``."""
    cube = b.mul(b.const("c3", np.float32(0.044715)), b.pow(x, b.const("p3", np.float32(3.0))))
    u = b.mul(b.const("k", np.float32(0.7978846)), b.add(x, cube))
    half = b.mul(b.const("h", np.float32(0.5)), x)
    return b.mul(half, b.add(b.const("one", np.float32(1.0)), b.tanh(u)))


def test_a_region_takes_in_the_elementwise_chain_onnxruntime_fuses() -> None:
    """The distributive rule on the GELU's last product: within one hop of the edit, the region before and after
    runs the same two kernels (a tie the search may take), and onnxruntime's FastGelu fusion, which needs all eight
    nodes, is lost. The region takes in the elementwise chain, so ORT fuses the parent's GELU in the priced region
    as in the full model (whether the fused kernel is faster depends on the size and the threads: it is measured)."""
    b = Builder("mlp")
    x = b.input("x", (16, 64))
    h = b.matmul(x, b.weight("w1", (64, 256)))
    g = materialize(b.build(b.matmul(_tanh_gelu(b, h), b.weight("w2", (256, 64)))))
    fused = "com.microsoft.FastGelu"
    assert kernel_counts(export_graph(g).SerializeToString(), threads=1).get(fused) == 1
    last = g.nodes[g.outputs[0].node].inputs[0].node  # the product the second projection reads
    match = next(m for m in find_matches(g, find_rule("alg_mul_add_expand_left")) if last in m.node_ids)
    child = apply(g, match).graph
    assert fused not in kernel_counts(export_graph(materialize(child)).SerializeToString(), threads=1)
    info = child.edit_info()
    assert info is not None
    wo_p = weight_only_map(g)
    wo_c, changed = weight_only_update(g, child)
    for chain, parent_fuses in ((0, False), (CHAIN, True)):
        before, after = edit_regions(g, child, info, changed, wo_p, wo_c, chain=chain)
        region = region_graph(g, before, wo_p)
        assert (fused in kernel_counts(export_graph(region).SerializeToString(), threads=1)) is parent_fuses
        assert fused not in kernel_counts(export_graph(region_graph(child, after, wo_c)).SerializeToString(),
                                          threads=1)
