"""More CNNs with torchvision's layer structure (see :mod:`.tv_models`, whose helpers they share): DenseNet-121
(every layer concatenates all the earlier feature maps of its block) and ShuffleNetV2 x1.0 (channel split, concat,
channel shuffle).  Same contract: torchvision's submodules in its order, its forward and its initialisation; the
factories calibrate BatchNorm statistics (:func:`~graphsub.bench.suite.tv_models.calibrate_batchnorm`).  They live
in their own module so that adding them leaves the build keys of :mod:`.tv_models`' models unchanged.

>>> import torch
>>> _ = torch.manual_seed(0)
>>> m = densenet(growth_rate=4, block_config=(1, 1), num_init_features=8, num_classes=10).eval()
>>> tuple(m(torch.zeros(2, 3, 32, 32)).shape)
(2, 10)
>>> m = shufflenet_v2(stages_repeats=(1, 1, 1), stages_out_channels=(8, 16, 32, 64, 128), num_classes=10).eval()
>>> tuple(m(torch.zeros(2, 3, 64, 64)).shape)
(2, 10)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from graphsub.bench.suite.tv_models import calibrate_batchnorm


# -------------------------------------------------------------------------------------------------------- DenseNet
class _DenseLayer(nn.Module):
    """torchvision.models.densenet._DenseLayer: concat of the earlier features -> BN-ReLU-1x1 -> BN-ReLU-3x3."""

    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int, drop_rate: float) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)
        self.drop_rate = float(drop_rate)

    def bn_function(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        concated_features = torch.cat(inputs, 1)
        return self.conv1(self.relu1(self.norm1(concated_features)))

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        new_features = self.conv2(self.relu2(self.norm2(self.bn_function(inputs))))
        if self.drop_rate > 0:
            new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
        return new_features


class _DenseBlock(nn.ModuleDict):
    """torchvision.models.densenet._DenseBlock: each layer sees the concat of the input and every earlier output."""

    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int,
                 drop_rate: float) -> None:
        super().__init__()
        for i in range(num_layers):
            layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size, drop_rate)
            self.add_module(f"denselayer{i + 1}", layer)

    def forward(self, init_features: torch.Tensor) -> torch.Tensor:
        features = [init_features]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    """torchvision.models.densenet._Transition: BN-ReLU-1x1 conv, 2x2 average pool."""

    def __init__(self, num_input_features: int, num_output_features: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    """torchvision.models.densenet.DenseNet (``densenet121()``: growth 32, blocks 6-12-24-16, 64 initial
    features, bottleneck 4)."""

    def __init__(self, growth_rate: int = 32, block_config: Sequence[int] = (6, 12, 24, 16),
                 num_init_features: int = 64, bn_size: int = 4, drop_rate: float = 0, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3, bias=False)),
            ("norm0", nn.BatchNorm2d(num_init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
        ]))
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(num_layers, num_features, bn_size, growth_rate, drop_rate)
            self.features.add_module(f"denseblock{i + 1}", block)
            num_features = num_features + num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module(f"transition{i + 1}", _Transition(num_features, num_features // 2))
                num_features = num_features // 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.features(x), inplace=True)
        out = torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)
        return self.classifier(out)


def densenet(growth_rate: int = 32, block_config: Sequence[int] = (6, 12, 24, 16), num_init_features: int = 64,
             num_classes: int = 1000, calibrate_image: int | None = None) -> nn.Module:
    """``torchvision.models.densenet121()`` with the defaults (the others shrink it for tests); BatchNorm
    statistics from :func:`~graphsub.bench.suite.tv_models.calibrate_batchnorm` at ``calibrate_image``."""
    model = DenseNet(growth_rate, block_config, num_init_features, num_classes=num_classes)
    return calibrate_batchnorm(model, calibrate_image)


# ---------------------------------------------------------------------------------------------------- ShuffleNetV2
def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """torchvision.models.shufflenetv2.channel_shuffle: view, transpose, view."""
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batchsize, num_channels, height, width)


def _depthwise_conv(i: int, o: int, kernel_size: int, stride: int = 1, padding: int = 0) -> nn.Conv2d:
    return nn.Conv2d(i, o, kernel_size, stride, padding, bias=False, groups=i)


class ShuffleUnit(nn.Module):
    """torchvision.models.shufflenetv2.InvertedResidual: stride 1 splits the channels in two and transforms one
    half; stride 2 transforms the input twice; then concat and a channel shuffle."""

    def __init__(self, inp: int, oup: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        branch_features = oup // 2
        self.branch1 = nn.Sequential()
        if stride > 1:
            self.branch1 = nn.Sequential(
                _depthwise_conv(inp, inp, kernel_size=3, stride=stride, padding=1), nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(branch_features), nn.ReLU(inplace=True))
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if stride > 1 else branch_features, branch_features, kernel_size=1, stride=1, padding=0,
                      bias=False),
            nn.BatchNorm2d(branch_features), nn.ReLU(inplace=True),
            _depthwise_conv(branch_features, branch_features, kernel_size=3, stride=stride, padding=1),
            nn.BatchNorm2d(branch_features),
            nn.Conv2d(branch_features, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
            nn.BatchNorm2d(branch_features), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """torchvision.models.shufflenetv2.ShuffleNetV2 (``shufflenet_v2_x1_0()``: repeats 4-8-4, channels
    24-116-232-464-1024; PyTorch's default initialisation, as torchvision)."""

    def __init__(self, stages_repeats: Sequence[int] = (4, 8, 4),
                 stages_out_channels: Sequence[int] = (24, 116, 232, 464, 1024), num_classes: int = 1000) -> None:
        super().__init__()
        output_channels = stages_out_channels[0]
        self.conv1 = nn.Sequential(nn.Conv2d(3, output_channels, 3, 2, 1, bias=False),
                                   nn.BatchNorm2d(output_channels), nn.ReLU(inplace=True))
        input_channels = output_channels
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages: list[nn.Sequential] = []
        for repeats, output_channels in zip(stages_repeats, stages_out_channels[1:-1], strict=True):
            seq = [ShuffleUnit(input_channels, output_channels, 2)]
            seq += [ShuffleUnit(output_channels, output_channels, 1) for _ in range(repeats - 1)]
            stages.append(nn.Sequential(*seq))
            input_channels = output_channels
        self.stage2, self.stage3, self.stage4 = stages
        output_channels = stages_out_channels[-1]
        self.conv5 = nn.Sequential(nn.Conv2d(input_channels, output_channels, 1, 1, 0, bias=False),
                                   nn.BatchNorm2d(output_channels), nn.ReLU(inplace=True))
        self.fc = nn.Linear(output_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))  # global pool


def shufflenet_v2(stages_repeats: Sequence[int] = (4, 8, 4),
                  stages_out_channels: Sequence[int] = (24, 116, 232, 464, 1024), num_classes: int = 1000,
                  calibrate_image: int | None = None) -> nn.Module:
    """``torchvision.models.shufflenet_v2_x1_0()`` with the defaults (BatchNorm statistics:
    :func:`~graphsub.bench.suite.tv_models.calibrate_batchnorm`)."""
    model = ShuffleNetV2(stages_repeats, stages_out_channels, num_classes)
    return calibrate_batchnorm(model, calibrate_image)


__all__ = ["DenseNet", "ShuffleNetV2", "channel_shuffle", "densenet", "shufflenet_v2"]
