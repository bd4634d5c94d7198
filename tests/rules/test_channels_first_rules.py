"""The ``channels-first`` rules (graphsub.rules.library.channels_first) on ConvNeXt-like models: imported and cleaned
by graphsub, rewritten by the rules everywhere, exported -- the same outputs in onnxruntime, the MLPs as 1x1
convolutions, and the kernels onnxruntime runs the same as for the hand-written pass
(graphsub.frontends.onnx_layout) on the same model."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from graphsub.cost import get_model
from graphsub.cost.ort_kernels import kernel_counts
from graphsub.frontends.onnx_io import from_onnx, to_onnx
from graphsub.frontends.onnx_layout import find_regions, rewrite_bytes
from graphsub.rules.apply import fold_weights
from graphsub.rules.cleanup import clean
from graphsub.rules.everywhere import rewrite_everywhere
from graphsub.rules.library import channels_first, get_set
from graphsub.search import Budget, search
from helpers import convnext_block

REORDERS = ("com.microsoft.nchwc.ReorderInput", "com.microsoft.nchwc.ReorderOutput")
#: kernels of a channels-last linear layer in onnxruntime's optimized graph
PRODUCTS = ("MatMul", "Gemm", "com.microsoft.FusedMatMul", "com.microsoft.FusedGemm")


def _rewrite(model: onnx.ModelProto) -> tuple[bytes, list[str]]:
    """``model`` through graphsub: imported, cleaned, the channels-first rules applied everywhere, weights folded,
    exported; the new model and the rules applied."""
    graph, _ = clean(from_onnx(model))
    new, steps = rewrite_everywhere(graph, get_set("channels-first"))
    return to_onnx(fold_weights(new)).SerializeToString(), [s.rule for s in steps]


def _run(data: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return list(ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds))


def _feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _ops(data: bytes) -> Counter[str]:
    return Counter(n.op_type for n in onnx.load_from_string(data).graph.node)


def _same_kernels_as_the_hand_pass(original: bytes, ours: bytes) -> tuple[dict[str, int], dict[str, int]]:
    """Check that onnxruntime runs the same kernels for ``ours`` as for the hand pass's rewrite of ``original``
    (onnxruntime names its Gelu by domain according to what it fused it from: compared by type); both kernel
    counts."""
    hand = rewrite_bytes(original)
    assert hand is not None
    want, got = kernel_counts(hand[0], threads=1), kernel_counts(ours, threads=1)
    assert all(got.get(k, 0) == want.get(k, 0) for k in REORDERS), (got, want)
    assert not any(got.get(k) for k in PRODUCTS), got
    by_type = Counter[str]()
    for counts, sign in ((got, 1), (want, -1)):
        for k, v in counts.items():
            by_type[k.rsplit(".", 1)[-1]] += sign * v
    assert not {k: v for k, v in by_type.items() if v}, (got, want)
    return got, want


# ----------------------------------------------------------------------------- a tiny ConvNeXt exported by torch


class _LayerNorm2d(torch.nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _Block(torch.nn.Module):
    """ConvNeXt's block, written channels-last between its convolutions as timm and torchvision write it."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c, eps=1e-6)
        self.fc1, self.act, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.GELU(), torch.nn.Linear(4 * c, c)
        self.gamma = torch.nn.Parameter(torch.rand(c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(self.act(self.fc1(self.norm(self.dw(x).permute(0, 2, 3, 1))))).permute(0, 3, 1, 2)
        return x + self.gamma * y


def _tiny_convnext(c: int = 16) -> torch.nn.Module:
    """A stem, two blocks, a downsampling layer, two blocks: what ConvNeXt-T is made of."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, c, 4, stride=4), _LayerNorm2d(c, eps=1e-6), _Block(c), _Block(c),
                               _LayerNorm2d(c, eps=1e-6), torch.nn.Conv2d(c, 2 * c, 2, stride=2), _Block(2 * c),
                               _Block(2 * c))


def _torchscript_export(module: torch.nn.Module, shape: tuple[int, ...], path: Path) -> onnx.ModelProto:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(*shape),), path, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return onnx.load(path)


def test_a_torchscript_convnext_is_written_channels_first_like_the_hand_pass(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _torchscript_export(_tiny_convnext(), (1, 3, 32, 32), tmp_path / "tiny_convnext.onnx")
    original = model.SerializeToString()
    ours, steps = _rewrite(model)
    # TorchScript adds each bias first (b + x@W), spells GELU with erf and scales by gamma from the left
    assert steps == ["cf_mlp_erf_bias_ll_scale_lhs"] * 4
    before, after = _ops(original), _ops(ours)
    assert before["MatMul"] == 8 and after["MatMul"] == 0
    assert after["Conv"] == before["Conv"] + 8  # each MLP's two linears
    hand = rewrite_bytes(original)
    assert hand is not None and hand[1] == 4
    assert after["Transpose"] == _ops(hand[0])["Transpose"]  # the closing transposes moved up to the norms
    feeds = _feeds(model)
    np.testing.assert_allclose(_run(ours, feeds)[0], _run(original, feeds)[0], rtol=1e-4, atol=1e-5)
    got, _ = _same_kernels_as_the_hand_pass(original, ours)
    was = kernel_counts(original, threads=1)
    assert sum(got.values()) < sum(was.values()) and was.get("Gemm", 0) == 8


# ----------------------------------------------------------------------------- one block, each spelling


@pytest.mark.parametrize(("spelling", "rule"), [
    ({"gelu": "op", "gamma": "c11"}, "cf_mlp_act_scale_lhs"),  # the dynamo export's
    ({"gelu": "op", "gamma": "1c11", "bias_left": True, "c": 16, "hidden": 64}, "cf_mlp_act_bias_lr_scale_lhs"),
    ({"gelu": "erf", "gamma": None, "c": 5, "hidden": 7}, "cf_mlp_erf"),
    ({"gelu": "erf", "gamma": "c11", "bias_left": True}, "cf_mlp_erf_bias_lr_scale_lhs"),
], ids=["gelu-op", "bias-left-1c11", "erf-no-scale", "erf-bias-left"])
def test_each_spelling_of_the_block_is_taken_whole(spelling: dict[str, Any], rule: str) -> None:
    model = convnext_block(**spelling)
    original = model.SerializeToString()
    ours, steps = _rewrite(model)
    assert steps == [rule]
    after = _ops(ours)
    assert after["MatMul"] == 0 and after["Conv"] == 3
    assert _ops(original)["Mul"] == (2 if spelling["gelu"] == "erf" else 0) + (spelling["gamma"] is not None)
    # the layer scale is folded into the last convolution: the two Muls left are GELU's (graphsub exports it below
    # opset 20 as its erf decomposition, which onnxruntime fuses into its Gelu kernel again)
    assert after["Mul"] == 2
    feeds = _feeds(model)
    np.testing.assert_allclose(_run(ours, feeds)[0], _run(original, feeds)[0], rtol=1e-5, atol=1e-5)
    _same_kernels_as_the_hand_pass(original, ours)


def test_a_region_read_from_outside_is_not_taken_whole() -> None:
    """The first product is also a graph output: neither the hand pass nor a cf_mlp rule takes the region (its
    matched values may only be read through the rule's output); whatever the one-op rules do keeps the outputs."""
    model = convnext_block(gelu="op", leak="output")
    assert find_regions(model) == []
    ours, steps = _rewrite(model)
    assert not any(s.startswith("cf_mlp_") for s in steps)
    feeds = _feeds(model)
    for got, want in zip(_run(ours, feeds), _run(model.SerializeToString(), feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_whole_regions_come_first() -> None:
    """rewrite_everywhere applies matches in the order of the rule list: the whole-region rules must come before
    the one-op rules (which would otherwise take a region's closing transpose step by step and stop half way),
    and those with a layer scale before those without (or the scale is not folded)."""
    names = [r.name for r in channels_first.rules()]
    whole = [k for k, n in enumerate(names) if n.startswith("cf_mlp_")]
    assert whole == list(range(len(whole))) and len(whole) == 24
    scaled = [k for k in whole if "_scale" in names[k]]
    assert max(scaled) < min(set(whole) - set(scaled))
    assert [r.name for r in channels_first.region_rules()] == names[:len(whole)]
    assert len(set(names)) == len(names) == len(get_set("channels-first"))


def test_a_search_takes_the_region_rule_among_the_default_rules() -> None:
    """Combined with the default rules, a greedy search on FLOPs takes the whole region in one step (folding the
    layer scale saves its multiplications; the products cost what the convolutions cost)."""
    graph, _ = clean(from_onnx(convnext_block(gelu="erf", bias_left=True)))
    result = search(graph, [*get_set("default"), *get_set("channels-first")], get_model("flops"),
                    Budget(time_s=30), algo="greedy")
    assert [s.rule for s in result.sequence] == ["cf_mlp_erf_bias_lr_scale_lhs"]
    assert result.best_cost < result.initial_cost
    assert result.best.op_histogram()["conv2d"] == 3 and "matmul" not in result.best.op_histogram()
