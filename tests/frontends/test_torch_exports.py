"""Models exported by both PyTorch exporters (TorchScript and dynamo) import, round-trip and
match PyTorch numerically.  The exported vocabularies differ (opset 17 vs 18, Shape/Gather
chains vs static shapes); the importer must handle both."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from graphsub.frontends.onnx_io import from_onnx, to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir.validate import validate


class ConvNet(nn.Module):
    """ResNet basic block + stem + head, with BatchNorm, MaxPool, GAP, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.c1 = nn.Conv2d(16, 16, 3, 1, 1, bias=False)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 16, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        y = torch.relu(x + y)
        y = torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1)
        return self.fc(y)


class MobileBlock(nn.Module):
    """Depthwise conv, ReLU6 (Clip), squeeze-excite with hardsigmoid, hardswish, upsampling."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(8, 8, 3, 1, 1, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.se1 = nn.Conv2d(8, 4, 1)
        self.se2 = nn.Conv2d(4, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.relu6(self.dw(x))
        s = nn.functional.adaptive_avg_pool2d(y, 1)
        s = nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(s))))
        y = nn.functional.hardswish(self.pw(y * s))
        return nn.functional.interpolate(y, scale_factor=2.0, mode="nearest")


class Encoder(nn.Module):
    """A transformer encoder layer (attention, softmax, layernorm, GELU via erf)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, activation="gelu", batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


MODELS = {
    "convnet": (ConvNet, (2, 3, 32, 32)),
    "mobile": (MobileBlock, (1, 8, 8, 8)),
    "encoder": (Encoder, (2, 5, 32)),
}


def export(module: nn.Module, shape: tuple[int, ...], dynamo: bool) -> onnx.ModelProto:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(module, (x,), dynamo=True, verbose=False)
            assert prog is not None
            return prog.model_proto
        buf = io.BytesIO()
        torch.onnx.export(module, (x,), buf, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_export_round_trip(name: str, dynamo: bool) -> None:
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    module = cls().eval()
    m = export(module, shape, dynamo)
    in_name = m.graph.input[0].name
    g = from_onnx(m, input_shapes={in_name: shape})
    validate(g)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    original = run_model(m, {in_name: x})[0]
    back = run_model(to_onnx(g), {in_name: x})[0]
    np.testing.assert_allclose(original, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(back, original, rtol=1e-5, atol=1e-6)
    # the IR models the common ops: nothing in these models should be opaque
    assert "opaque" not in g.op_histogram(), g.op_histogram()
