"""CNNs with torchvision's layer structure, written as PyTorch modules (torchvision itself cannot be imported beside
the pinned torch): ResNet-50, MobileNetV3-Large, EfficientNet-B0, ConvNeXt-Tiny and RegNetY-400MF.

Each class follows the torchvision module it names layer for layer (same submodules in the same order, same
activations and normalisation eps, the same forward, the same weight initialisation), so that both PyTorch exporters
see what they see on ``torchvision.models.<fn>()``: what differs is only the module's Python path.  Dropout and
stochastic depth are identities in eval mode and are kept as modules where torchvision has them.

Invariants: every constructor is deterministic given ``torch.manual_seed``; ``num_classes`` defaults to 1000; the
input is ``(N, 3, 224, 224)`` float32 (the architectures work at any size that survives their strides).  The
factories (``resnet``, ``mobilenet_v3_large``, ...) can replace torchvision's initial BatchNorm statistics by
calibrated ones (:func:`calibrate_batchnorm`, what the suite uses): same graph, activations of a sane scale.

>>> import torch
>>> _ = torch.manual_seed(0)
>>> m = resnet(layers=(1, 1, 1, 1), width=8, num_classes=10).eval()
>>> tuple(m(torch.zeros(2, 3, 64, 64)).shape)
(2, 10)
>>> regnet_stages(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8)  # regnet_y_400mf
([48, 104, 208, 440], [1, 3, 6, 6], [8, 8, 8, 8])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

Layer = Callable[..., nn.Module]


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    """torchvision.models._utils._make_divisible."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvNormAct(nn.Sequential):
    """torchvision.ops.misc.Conv2dNormActivation: Conv2d (bias only without a norm), norm, activation."""

    def __init__(self, cin: int, cout: int, kernel_size: int = 3, stride: int = 1, padding: int | None = None,
                 groups: int = 1, norm_layer: Layer | None = nn.BatchNorm2d, activation_layer: Layer | None = nn.ReLU,
                 bias: bool | None = None) -> None:
        padding = (kernel_size - 1) // 2 if padding is None else padding
        bias = norm_layer is None if bias is None else bias
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel_size, stride, padding, groups=groups, bias=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(cout))
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision.ops.misc.SqueezeExcitation: avgpool -> 1x1 conv -> act -> 1x1 conv -> scale act -> multiply."""

    def __init__(self, channels: int, squeeze: int, activation: Layer = nn.ReLU,
                 scale_activation: Layer = nn.Sigmoid) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


def _init_kaiming(model: nn.Module, linear: Callable[[nn.Linear], None]) -> None:
    """The init shared by torchvision's ResNet, MobileNetV3 and EfficientNet: kaiming-normal (fan_out) convs, unit
    norms, and ``linear`` for the classifier."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d | nn.GroupNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            linear(m)


def _linear_normal(m: nn.Linear) -> None:
    nn.init.normal_(m.weight, 0, 0.01)
    nn.init.zeros_(m.bias)


def calibrate_batchnorm(model: nn.Module, image: int | None, seed: int = 0, batch: int = 8) -> nn.Module:
    """Set every BatchNorm's running statistics to those of its input on ``batch`` seeded random images of
    ``image`` x ``image`` (cumulative averages, one pass), as training leaves them; ``image=None`` keeps torchvision's
    initial mean 0 / variance 1.  Returns ``model`` in eval mode.

    With the initial statistics the activations of a deep random network drift by orders of magnitude (MobileNetV3
    and EfficientNet outputs vanish to 1e-10 .. 1e-14, ResNet-50's grow past 100), which would let any rewrite pass a
    numeric check; calibrated, every normalisation sees unit-scale inputs, as in a trained network.
    """
    model.eval()
    if image is None:
        return model
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    x = torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model(x)
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    return model.eval()


# ---------------------------------------------------------------------------------------------------------- ResNet
class Bottleneck(nn.Module):
    """torchvision.models.resnet.Bottleneck (V1.5: the stride sits on the 3x3 convolution)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision.models.resnet.ResNet with Bottleneck blocks (``width`` is torchvision's fixed 64 by default)."""

    def __init__(self, layers: Sequence[int] = (3, 4, 6, 3), num_classes: int = 1000, width: int = 64) -> None:
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, padding=1)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * Bottleneck.expansion, num_classes)
        for m in self.modules():  # the classifier keeps nn.Linear's own init, as in torchvision
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * Bottleneck.expansion))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet(layers: Sequence[int] = (3, 4, 6, 3), width: int = 64, num_classes: int = 1000,
           calibrate_image: int | None = None) -> nn.Module:
    """``torchvision.models.resnet50()`` with the defaults (``layers``/``width`` shrink it for tests); BatchNorm
    statistics from :func:`calibrate_batchnorm` at ``calibrate_image``."""
    return calibrate_batchnorm(ResNet(layers, num_classes, width), calibrate_image)


# ------------------------------------------------------------------------------------------------------ MobileNetV3
#: torchvision's mobilenet_v3_large setting: (in, kernel, expanded, out, use_se, activation, stride)
MOBILENET_V3_LARGE: tuple[tuple[int, int, int, int, bool, str, int], ...] = (
    (16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2), (24, 3, 72, 24, False, "RE", 1),
    (24, 5, 72, 40, True, "RE", 2), (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1), (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1), (160, 5, 960, 160, True, "HS", 1),
)


class InvertedResidual(nn.Module):
    """torchvision.models.mobilenetv3.InvertedResidual."""

    def __init__(self, cin: int, k: int, exp: int, cout: int, use_se: bool, act: str, stride: int,
                 norm_layer: Layer) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        activation: Layer = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(ConvNormAct(cin, exp, 1, norm_layer=norm_layer, activation_layer=activation))
        layers.append(ConvNormAct(exp, exp, k, stride, groups=exp, norm_layer=norm_layer, activation_layer=activation))
        if use_se:
            layers.append(SqueezeExcitation(exp, _make_divisible(exp // 4, 8), scale_activation=nn.Hardsigmoid))
        layers.append(ConvNormAct(exp, cout, 1, norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class MobileNetV3(nn.Module):
    """torchvision.models.mobilenetv3.MobileNetV3 (``mobilenet_v3_large()``: last_channel 1280, dropout 0.2)."""

    def __init__(self, setting: Sequence[tuple[int, int, int, int, bool, str, int]] = MOBILENET_V3_LARGE,
                 last_channel: int = 1280, num_classes: int = 1000) -> None:
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers: list[nn.Module] = [ConvNormAct(3, setting[0][0], 3, 2, norm_layer=norm_layer,
                                               activation_layer=nn.Hardswish)]
        layers += [InvertedResidual(*cnf, norm_layer=norm_layer) for cnf in setting]
        last_in = setting[-1][3]
        layers.append(ConvNormAct(last_in, 6 * last_in, 1, norm_layer=norm_layer, activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last_in, last_channel), nn.Hardswish(inplace=True),
                                        nn.Dropout(p=0.2, inplace=True), nn.Linear(last_channel, num_classes))
        _init_kaiming(self, _linear_normal)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3_large(num_classes: int = 1000, calibrate_image: int | None = None) -> nn.Module:
    """``torchvision.models.mobilenet_v3_large()`` (BatchNorm statistics: :func:`calibrate_batchnorm`)."""
    return calibrate_batchnorm(MobileNetV3(num_classes=num_classes), calibrate_image)


# ---------------------------------------------------------------------------------------------------- EfficientNet
#: torchvision's efficientnet_b0 setting: (expand_ratio, kernel, stride, in, out, num_layers)
EFFICIENTNET_B0: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
)


class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth ("row" mode): the identity in eval mode."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device).bernoulli_(1 - self.p)
        return x * keep / (1 - self.p)


class MBConv(nn.Module):
    """torchvision.models.efficientnet.MBConv."""

    def __init__(self, expand_ratio: int, k: int, stride: int, cin: int, cout: int, sd_prob: float,
                 norm_layer: Layer) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        exp = _make_divisible(cin * expand_ratio, 8)
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(ConvNormAct(cin, exp, 1, norm_layer=norm_layer, activation_layer=nn.SiLU))
        layers.append(ConvNormAct(exp, exp, k, stride, groups=exp, norm_layer=norm_layer, activation_layer=nn.SiLU))
        layers.append(SqueezeExcitation(exp, max(1, cin // 4), activation=partial(nn.SiLU, inplace=True)))
        layers.append(ConvNormAct(exp, cout, 1, norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(sd_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += x
        return result


class EfficientNet(nn.Module):
    """torchvision.models.efficientnet.EfficientNet (``efficientnet_b0()``: dropout 0.2, stochastic depth 0.2)."""

    def __init__(self, setting: Sequence[tuple[int, int, int, int, int, int]] = EFFICIENTNET_B0,
                 num_classes: int = 1000, stochastic_depth_prob: float = 0.2) -> None:
        super().__init__()
        norm_layer = nn.BatchNorm2d
        layers: list[nn.Module] = [ConvNormAct(3, setting[0][3], 3, 2, norm_layer=norm_layer,
                                               activation_layer=nn.SiLU)]
        total, stage_id = sum(cnf[5] for cnf in setting), 0
        for expand, k, stride, cin, cout, n in setting:
            stage: list[nn.Module] = []
            for i in range(n):
                sd_prob = stochastic_depth_prob * float(stage_id) / total
                stage.append(MBConv(expand, k, stride if i == 0 else 1, cin if i == 0 else cout, cout, sd_prob,
                                    norm_layer))
                stage_id += 1
            layers.append(nn.Sequential(*stage))
        last_in = setting[-1][4]
        layers.append(ConvNormAct(last_in, 4 * last_in, 1, norm_layer=norm_layer, activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2, inplace=True), nn.Linear(4 * last_in, num_classes))
        _init_kaiming(self, _linear_uniform)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _linear_uniform(m: nn.Linear) -> None:
    init_range = 1.0 / math.sqrt(m.out_features)
    nn.init.uniform_(m.weight, -init_range, init_range)
    nn.init.zeros_(m.bias)


def efficientnet_b0(num_classes: int = 1000, calibrate_image: int | None = None) -> nn.Module:
    """``torchvision.models.efficientnet_b0()`` (BatchNorm statistics: :func:`calibrate_batchnorm`)."""
    return calibrate_batchnorm(EfficientNet(num_classes=num_classes), calibrate_image)


# -------------------------------------------------------------------------------------------------------- ConvNeXt
class LayerNorm2d(nn.LayerNorm):
    """torchvision.models.convnext.LayerNorm2d: LayerNorm over channels of an NCHW tensor (permute, norm, permute)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    """torchvision.ops.misc.Permute."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    """torchvision.models.convnext.CNBlock: depthwise 7x7, channels-last LayerNorm + MLP, layer scale, residual."""

    def __init__(self, dim: int, layer_scale: float, sd_prob: float) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True), Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim, bias=True), nn.GELU(),
            nn.Linear(4 * dim, dim, bias=True), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(sd_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.layer_scale * self.block(x)
        result = self.stochastic_depth(result)
        result += x
        return result


class ConvNeXt(nn.Module):
    """torchvision.models.convnext.ConvNeXt (``convnext_tiny()``: dims 96-768, depths 3-3-9-3, sd 0.1)."""

    def __init__(self, dims: Sequence[int] = (96, 192, 384, 768), depths: Sequence[int] = (3, 3, 9, 3),
                 num_classes: int = 1000, stochastic_depth_prob: float = 0.1, layer_scale: float = 1e-6) -> None:
        super().__init__()
        norm_layer = partial(LayerNorm2d, eps=1e-6)
        layers: list[nn.Module] = [ConvNormAct(3, dims[0], 4, 4, padding=0, norm_layer=norm_layer,
                                               activation_layer=None, bias=True)]
        total, stage_id = sum(depths), 0
        for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
            stage = []
            for _ in range(depth):
                stage.append(CNBlock(dim, layer_scale, stochastic_depth_prob * stage_id / (total - 1.0)))
                stage_id += 1
            layers.append(nn.Sequential(*stage))
            if i + 1 < len(dims):
                layers.append(nn.Sequential(norm_layer(dim), nn.Conv2d(dim, dims[i + 1], kernel_size=2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(norm_layer(dims[-1]), nn.Flatten(1), nn.Linear(dims[-1], num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)))


def convnext_tiny(num_classes: int = 1000) -> nn.Module:
    """``torchvision.models.convnext_tiny()`` (LayerNorm only: nothing to calibrate)."""
    return ConvNeXt(num_classes=num_classes).eval()


# ---------------------------------------------------------------------------------------------------------- RegNet
def regnet_stages(depth: int, w_0: int, w_a: float, w_m: float, group_width: int,
                  bottleneck_multiplier: float = 1.0) -> tuple[list[int], list[int], list[int]]:
    """torchvision's BlockParams.from_init_params: (stage widths, stage depths, group widths)."""
    widths_cont = torch.arange(depth) * w_a + w_0
    block_capacity = torch.round(torch.log(widths_cont / w_0) / math.log(w_m))
    block_widths = (torch.round(torch.divide(w_0 * torch.pow(w_m, block_capacity), 8)) * 8).int().tolist()
    splits = [w != wp for w, wp in zip([*block_widths, 0], [0, *block_widths], strict=True)]
    stage_widths = [w for w, t in zip(block_widths, splits[:-1], strict=True) if t]
    stage_depths = torch.diff(torch.tensor([d for d, t in enumerate(splits) if t])).int().tolist()
    widths = [int(w * bottleneck_multiplier) for w in stage_widths]
    groups = [min(group_width, w) for w in widths]
    ws_bot = [_make_divisible(w, g) for w, g in zip(widths, groups, strict=True)]
    return [int(w / bottleneck_multiplier) for w in ws_bot], stage_depths, groups


class ResBottleneckBlock(nn.Module):
    """torchvision.models.regnet.ResBottleneckBlock (BottleneckTransform a/b/se/c and an optional projection)."""

    def __init__(self, width_in: int, width_out: int, stride: int, group_width: int, se_ratio: float | None) -> None:
        super().__init__()
        self.proj = None
        if width_in != width_out or stride != 1:
            self.proj = ConvNormAct(width_in, width_out, 1, stride, activation_layer=None)
        layers: dict[str, nn.Module] = {
            "a": ConvNormAct(width_in, width_out, 1),
            "b": ConvNormAct(width_out, width_out, 3, stride, groups=width_out // group_width),
        }
        if se_ratio:
            layers["se"] = SqueezeExcitation(width_out, round(se_ratio * width_in))
        layers["c"] = ConvNormAct(width_out, width_out, 1, activation_layer=None)
        self.f = nn.Sequential()
        for name, layer in layers.items():
            self.f.add_module(name, layer)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x) + self.f(x) if self.proj is not None else x + self.f(x)
        return self.activation(x)


class RegNet(nn.Module):
    """torchvision.models.regnet.RegNet with ResBottleneckBlock (bottleneck multiplier 1)."""

    def __init__(self, depth: int = 16, w_0: int = 48, w_a: float = 27.89, w_m: float = 2.09, group_width: int = 8,
                 se_ratio: float | None = 0.25, num_classes: int = 1000, stem_width: int = 32) -> None:
        super().__init__()
        self.stem = ConvNormAct(3, stem_width, 3, 2)
        widths, depths, groups = regnet_stages(depth, w_0, w_a, w_m, group_width)
        self.trunk_output = nn.Sequential()
        current = stem_width
        for i, (w, d, g) in enumerate(zip(widths, depths, groups, strict=True)):
            stage = nn.Sequential()
            for j in range(d):
                stage.add_module(f"block{i + 1}-{j}", ResBottleneckBlock(current if j == 0 else w, w,
                                                                         2 if j == 0 else 1, g, se_ratio))
            self.trunk_output.add_module(f"block{i + 1}", stage)
            current = w
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(current, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, mean=0.0, std=math.sqrt(2.0 / fan_out))
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                _linear_normal(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.trunk_output(self.stem(x))
        return self.fc(self.avgpool(x).flatten(start_dim=1))


def regnet_y_400mf(num_classes: int = 1000, calibrate_image: int | None = None) -> nn.Module:
    """``torchvision.models.regnet_y_400mf()``: depth 16, w_0 48, w_a 27.89, w_m 2.09, group width 8, SE 0.25
    (BatchNorm statistics: :func:`calibrate_batchnorm`)."""
    return calibrate_batchnorm(RegNet(num_classes=num_classes), calibrate_image)


__all__ = [
    "ConvNeXt", "EfficientNet", "MobileNetV3", "RegNet", "ResNet", "calibrate_batchnorm", "convnext_tiny",
    "efficientnet_b0",
    "mobilenet_v3_large", "regnet_stages", "regnet_y_400mf", "resnet",
]
