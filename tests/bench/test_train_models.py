"""The training benchmark models: each trains (forward and backward reach every parameter), exports to ONNX and imports
into graphsub without opaque nodes, builds deterministically, and SqueezeNet 1.0 / Inception-v3 have torchvision's
parameter counts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from graphsub.bench.train_models import (
    TRAIN_MODELS,
    EncoderClassifier,
    InceptionV3,
    SqueezeNet,
    build_model,
    no_dropout,
)
from graphsub.frontends.torch_export import export_module
from graphsub.spec import ModelSpec

#: small image sizes for the tests (75 is Inception-v3's smallest)
SMALL_IMAGE = {"squeezenet": 64, "inception_v3": 75, "resnet50": 64, "encoder": 0}
NUM_CLASSES = 7


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """One intra-op thread: these graphs are small, and two OpenMP threads on a shared 2-core machine spin-wait
    each other into ten times the run time whenever another process is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _input(name: str, batch: int) -> torch.Tensor:
    shape = TRAIN_MODELS[name].input_shape(batch, SMALL_IMAGE[name])
    return torch.randn(shape, generator=torch.Generator().manual_seed(1))


def _count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_catalog_names() -> None:
    assert set(TRAIN_MODELS) == {"squeezenet", "inception_v3", "resnet50", "encoder"}
    for name, entry in TRAIN_MODELS.items():
        assert entry.name == name and entry.doc
        assert entry.input_shape(8, entry.default_image)[0] == 8
    assert TRAIN_MODELS["encoder"].input_shape(3, 999) == (3, 64, 256)
    assert TRAIN_MODELS["squeezenet"].input_shape(3, 50) == (3, 3, 50, 50)


@pytest.mark.parametrize("name", list(TRAIN_MODELS))
def test_trains_exports_and_imports_without_opaque_nodes(name: str, tmp_path: Path) -> None:
    m = no_dropout(build_model(name, num_classes=NUM_CLASSES))
    assert m.training
    out = m(_input(name, 2))
    assert tuple(out.shape) == (2, NUM_CLASSES)
    nn.functional.cross_entropy(out, torch.tensor([0, 3])).backward()
    for pname, p in m.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname

    path = tmp_path / f"{name}.onnx"
    export_module(m.eval(), [_input(name, 1)], path)
    graph = ModelSpec.parse(str(path)).load()
    hist = graph.op_histogram()
    assert "opaque" not in hist, hist
    assert tuple(graph.output_types[0].shape) == (1, NUM_CLASSES)


def test_torchvision_parameter_counts() -> None:
    # torchvision: squeezenet1_0 1,248,424; inception_v3 27,161,264 with the auxiliary head, whose
    # BasicConv2d(768, 128, 1) + BasicConv2d(128, 768, 5) + Linear(768, 1000) hold 98,560 + 2,459,136 + 769,000
    with torch.device("meta"):  # shapes only: no initialisation cost
        assert _count(SqueezeNet("1_0")) == 1_248_424
        assert _count(SqueezeNet("1_1")) == 1_235_496
        assert _count(InceptionV3()) == 27_161_264 - (98_560 + 2_459_136 + 769_000) == 23_834_568
    # 4 blocks of 4 * (256*256 + 256) + (256*1024 + 1024) + (1024*256 + 256) + 2 LayerNorms, a LayerNorm, the head
    block = 4 * (256 * 256 + 256) + (256 * 1024 + 1024) + (1024 * 256 + 256) + 2 * 512
    with torch.device("meta"):
        assert _count(EncoderClassifier(num_classes=10)) == 4 * block + 512 + 256 * 10 + 10


def test_build_is_deterministic_and_leaves_caller_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = build_model("encoder", num_classes=5, seed=4)
    assert torch.equal(torch.rand(3), expected)
    b = build_model("encoder", num_classes=5, seed=4)
    c = build_model("encoder", num_classes=5, seed=5)
    for (_, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.head.weight, c.head.weight)
    assert isinstance(a, EncoderClassifier)
    blocks = list(a.blocks)
    assert not torch.equal(blocks[0].q.weight, blocks[1].q.weight)  # each block has its own seed


def test_no_dropout_and_unknown_name() -> None:
    m = build_model("squeezenet", num_classes=4)
    drops = [d for d in m.modules() if isinstance(d, nn.Dropout)]
    assert drops and all(d.p == 0.5 for d in drops)
    assert no_dropout(m) is m and all(d.p == 0.0 for d in drops)
    with pytest.raises(KeyError, match="known: squeezenet"):
        build_model("vgg16")
