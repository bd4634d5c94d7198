"""MetaFlow's training benchmark models as PyTorch modules, written the way torchvision writes them (torchvision itself
cannot be imported beside the pinned torch): SqueezeNet 1.0, Inception-v3, ResNet-50 and a transformer encoder
classifier, with a catalog (:data:`TRAIN_MODELS`) that says how to build each and what input it takes.

* ``squeezenet``: ``torchvision.models.squeezenet1_0()`` (:class:`SqueezeNet`), input ``(N, 3, H, H)``;
* ``inception_v3``: ``torchvision.models.inception_v3(aux_logits=False, init_weights=True)`` (:class:`InceptionV3`),
  input ``(N, 3, H, H)`` with H >= 75;
* ``resnet50``: ``torchvision.models.resnet50()`` (:func:`graphsub.bench.suite.tv_models.resnet`), ``(N, 3, H, H)``;
* ``encoder``: 4 pre-norm :class:`~graphsub.zoo.torch_modules.EncoderBlock` s, a LayerNorm, the mean over the
  sequence and a Linear head (:class:`EncoderClassifier`), input ``(N, 64, 256)`` (already embedded).

The CNN classes follow torchvision layer for layer (same submodules in the same order, same activations, pooling,
normalisation eps and forward, same weight initialisation), as :mod:`graphsub.bench.suite.tv_models` does.  Dropout
is kept as a module where torchvision has it; training graphs do not model dropout, so :func:`no_dropout` sets its
probability to 0 (the ONNX export of an eval-mode module has no dropout either).

Invariants: :func:`build_model` is deterministic given its ``seed`` (it seeds torch inside a forked RNG state, so the
caller's global RNG is left alone); every model maps its catalog input to ``(N, num_classes)`` logits.
``TrainModel.default_image`` keeps one training step (forward, backward, SGD update) at batch 8 on 2 CPU cores
around a second or two.

>>> import torch
>>> m = build_model("squeezenet", num_classes=10)
>>> x = torch.zeros(TRAIN_MODELS["squeezenet"].input_shape(2, 64))
>>> tuple(m(x).shape)
(2, 10)
>>> TRAIN_MODELS["encoder"].input_shape(8, 224)
(8, 64, 256)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from graphsub.bench.suite.tv_models import resnet
from graphsub.zoo.torch_modules import EncoderBlock


# ------------------------------------------------------------------------------------------------------- SqueezeNet
class Fire(nn.Module):
    """torchvision.models.squeezenet.Fire: 1x1 squeeze, then 1x1 and 3x3 expands concatenated on channels."""

    def __init__(self, inplanes: int, squeeze_planes: int, expand1x1_planes: int, expand3x3_planes: int) -> None:
        super().__init__()
        self.inplanes = inplanes
        self.squeeze = nn.Conv2d(inplanes, squeeze_planes, kernel_size=1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze_planes, expand1x1_planes, kernel_size=1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze_planes, expand3x3_planes, kernel_size=3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """torchvision.models.squeezenet.SqueezeNet (``squeezenet1_0()``: ``version="1_0"``; ``"1_1"`` also built).

    The classifier is a convolution: Dropout -> 1x1 Conv2d(512, num_classes) -> ReLU -> AdaptiveAvgPool2d((1, 1)),
    flattened.  Init: kaiming-uniform convolutions, normal(0, 0.01) for the final one, zero biases."""

    def __init__(self, version: str = "1_0", num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.num_classes = num_classes
        if version == "1_0":
            self.features = nn.Sequential(
                nn.Conv2d(3, 96, kernel_size=7, stride=2),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(96, 16, 64, 64),
                Fire(128, 16, 64, 64),
                Fire(128, 32, 128, 128),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(256, 32, 128, 128),
                Fire(256, 48, 192, 192),
                Fire(384, 48, 192, 192),
                Fire(384, 64, 256, 256),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(512, 64, 256, 256),
            )
        elif version == "1_1":
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, kernel_size=3, stride=2),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(64, 16, 64, 64),
                Fire(128, 16, 64, 64),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(128, 32, 128, 128),
                Fire(256, 32, 128, 128),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(256, 48, 192, 192),
                Fire(384, 48, 192, 192),
                Fire(384, 64, 256, 256),
                Fire(512, 64, 256, 256),
            )
        else:
            raise ValueError(f"unsupported SqueezeNet version {version}: 1_0 or 1_1 expected")
        final_conv = nn.Conv2d(512, self.num_classes, kernel_size=1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), final_conv, nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final_conv:
                    nn.init.normal_(m.weight, mean=0.0, std=0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


# ----------------------------------------------------------------------------------------------------- Inception-v3
class BasicConv2d(nn.Module):
    """torchvision.models.inception.BasicConv2d: Conv2d without bias, BatchNorm2d(eps=0.001), ReLU."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


class InceptionA(nn.Module):
    """torchvision.models.inception.InceptionA: 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avgpool-1x1 (Mixed_5b..5d)."""

    def __init__(self, in_channels: int, pool_features: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = BasicConv2d(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(in_channels, pool_features, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch1x1 = self.branch1x1(x)
        branch5x5 = self.branch5x5_2(self.branch5x5_1(x))
        branch3x3dbl = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        branch_pool = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([branch1x1, branch5x5, branch3x3dbl, branch_pool], 1)


class InceptionB(nn.Module):
    """torchvision.models.inception.InceptionB: the grid reduction 35 -> 17 (Mixed_6a)."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(in_channels, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch3x3 = self.branch3x3(x)
        branch3x3dbl = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        branch_pool = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([branch3x3, branch3x3dbl, branch_pool], 1)


class InceptionC(nn.Module):
    """torchvision.models.inception.InceptionC: factorised 1x7 / 7x1 branches (Mixed_6b..6e)."""

    def __init__(self, in_channels: int, channels_7x7: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 192, kernel_size=1)
        c7 = channels_7x7
        self.branch7x7_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch1x1 = self.branch1x1(x)
        branch7x7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        branch7x7dbl = self.branch7x7dbl_1(x)
        branch7x7dbl = self.branch7x7dbl_3(self.branch7x7dbl_2(branch7x7dbl))
        branch7x7dbl = self.branch7x7dbl_5(self.branch7x7dbl_4(branch7x7dbl))
        branch_pool = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([branch1x1, branch7x7, branch7x7dbl, branch_pool], 1)


class InceptionD(nn.Module):
    """torchvision.models.inception.InceptionD: the grid reduction 17 -> 8 (Mixed_7a)."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch3x3_2 = BasicConv2d(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch3x3 = self.branch3x3_2(self.branch3x3_1(x))
        branch7x7x3 = self.branch7x7x3_2(self.branch7x7x3_1(x))
        branch7x7x3 = self.branch7x7x3_4(self.branch7x7x3_3(branch7x7x3))
        branch_pool = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([branch3x3, branch7x7x3, branch_pool], 1)


class InceptionE(nn.Module):
    """torchvision.models.inception.InceptionE: the expanded filter bank with split 1x3 / 3x1 outputs
    (Mixed_7b, 7c)."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 320, kernel_size=1)
        self.branch3x3_1 = BasicConv2d(in_channels, 384, kernel_size=1)
        self.branch3x3_2a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 448, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch1x1 = self.branch1x1(x)
        branch3x3 = self.branch3x3_1(x)
        branch3x3 = torch.cat([self.branch3x3_2a(branch3x3), self.branch3x3_2b(branch3x3)], 1)
        branch3x3dbl = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        branch3x3dbl = torch.cat([self.branch3x3dbl_3a(branch3x3dbl), self.branch3x3dbl_3b(branch3x3dbl)], 1)
        branch_pool = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([branch1x1, branch3x3, branch3x3dbl, branch_pool], 1)


class InceptionV3(nn.Module):
    """torchvision.models.inception.Inception3 with ``aux_logits=False``, ``transform_input=False``,
    ``init_weights=True`` (truncated-normal std 0.1 convolutions and classifier, unit BatchNorms); works on any
    input of at least 75 x 75 (torchvision's 299 x 299 gives 8 x 8 before the global pool)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Mixed_5b = InceptionA(192, pool_features=32)
        self.Mixed_5c = InceptionA(256, pool_features=64)
        self.Mixed_5d = InceptionA(288, pool_features=64)
        self.Mixed_6a = InceptionB(288)
        self.Mixed_6b = InceptionC(768, channels_7x7=128)
        self.Mixed_6c = InceptionC(768, channels_7x7=160)
        self.Mixed_6d = InceptionC(768, channels_7x7=160)
        self.Mixed_6e = InceptionC(768, channels_7x7=192)
        self.Mixed_7a = InceptionD(768)
        self.Mixed_7b = InceptionE(1280)
        self.Mixed_7c = InceptionE(2048)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(2048, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.1, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool1(self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x))))
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)))
        x = self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x)))
        x = self.Mixed_6a(x)
        x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(x))))
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = self.dropout(self.avgpool(x))
        return self.fc(torch.flatten(x, 1))


# ------------------------------------------------------------------------------------------- transformer encoder
class EncoderClassifier(nn.Module):
    """A transformer encoder classifier on already-embedded input ``(N, seq, d_model)``: ``layers`` pre-norm
    :class:`~graphsub.zoo.torch_modules.EncoderBlock` s, a final LayerNorm, the mean over the sequence and a Linear
    head.  Each block's weights come from its own seed, drawn from torch's global RNG (so the model is deterministic
    under ``torch.manual_seed`` and the blocks differ); ``seq`` is recorded for the input shape only."""

    def __init__(self, d_model: int = 256, heads: int = 4, d_ff: int = 1024, layers: int = 4, num_classes: int = 10,
                 seq: int = 64) -> None:
        super().__init__()
        self.seq = seq
        seeds = torch.randint(2**31 - 1, (layers,), device="cpu").tolist()
        self.blocks = nn.Sequential(*(EncoderBlock(d_model, heads, d_ff, seed=s) for s in seeds))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


# ---------------------------------------------------------------------------------------------------------- catalog
@dataclass(frozen=True)
class TrainModel:
    """One training benchmark model: ``build(num_classes)`` makes the module (seed torch first for determinism:
    :func:`build_model` does), ``input_shape(batch, image)`` its input (``image`` is ignored by the encoder),
    ``default_image`` an image size that keeps a batch-8 training step on 2 CPU cores near a second or two."""

    name: str
    build: Callable[[int], nn.Module]
    input_shape: Callable[[int, int], tuple[int, ...]]
    default_image: int
    doc: str


def _image_shape(batch: int, image: int) -> tuple[int, ...]:
    return (batch, 3, image, image)


def _encoder_shape(batch: int, image: int) -> tuple[int, ...]:
    return (batch, 64, 256)


TRAIN_MODELS: dict[str, TrainModel] = {m.name: m for m in (
    TrainModel("squeezenet", lambda n: SqueezeNet("1_0", num_classes=n), _image_shape, 128,
               "SqueezeNet 1.0 (torchvision squeezenet1_0: Fire modules, ceil-mode max pools, conv classifier)"),
    TrainModel("inception_v3", lambda n: InceptionV3(num_classes=n), _image_shape, 139,
               "Inception-v3 (torchvision inception_v3 without the auxiliary classifier)"),
    TrainModel("resnet50", lambda n: resnet(num_classes=n).train(), _image_shape, 112,
               "ResNet-50 (torchvision resnet50: V1.5 bottlenecks)"),
    TrainModel("encoder", lambda n: EncoderClassifier(num_classes=n), _encoder_shape, 0,
               "transformer encoder classifier: 4 pre-norm blocks, d_model 256, 4 heads, d_ff 1024, 64 tokens"),
)}


def build_model(name: str, *, num_classes: int = 100, seed: int = 0) -> nn.Module:
    """The catalog model ``name`` in training mode, its weights drawn after ``torch.manual_seed(seed)`` in a forked
    RNG state (the caller's RNG is untouched).  Raises KeyError naming the known models for an unknown name."""
    try:
        entry = TRAIN_MODELS[name]
    except KeyError:
        raise KeyError(f"unknown training model {name!r}; known: {', '.join(TRAIN_MODELS)}") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return entry.build(num_classes).train()


def no_dropout(module: nn.Module) -> nn.Module:
    """Set the probability of every dropout layer in ``module`` to 0 (training graphs do not model dropout);
    returns ``module``."""
    for m in module.modules():
        if isinstance(m, nn.Dropout | nn.Dropout1d | nn.Dropout2d | nn.Dropout3d | nn.AlphaDropout
                      | nn.FeatureAlphaDropout):
            m.p = 0.0
    return module


__all__ = [
    "TRAIN_MODELS", "EncoderClassifier", "InceptionV3", "SqueezeNet", "TrainModel", "build_model", "no_dropout",
]
