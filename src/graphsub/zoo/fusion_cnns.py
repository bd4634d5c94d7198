"""CNNs for the layer-fusion experiments (issue 9, Mills et al. 2025), built in the IR with
torchvision's exact layer recipes: MobileNetV2, MobileNetV3-Small/Large, EfficientNet-B0/B3,
ResNet-101/152 and DeepLabV3 + MobileNetV3-Large.

Graphs look like ``torch.onnx.export(..., dynamo=False)`` of the torchvision models in eval
mode: batch norm folded into the convolutions (every conv has a bias), ReLU6 as ``clip(0, 6)``,
SiLU as ``sigmoid`` + ``mul``, ``hardswish`` / ``hardsigmoid(alpha=1/6)``, SE blocks as
``global_avgpool -> conv1x1 -> act -> conv1x1 -> gate -> mul``, dropout omitted, ``flatten``
before the classifier.  Input sizes are the paper's: 224x224, EfficientNet-B3 300x300,
DeepLabV3 513x513 (``image_size`` changes it; op counts do not depend on it).

Op counts (``num_ops``, flatten included; the TorchScript ONNX export has one fewer op, and
DeepLab's export adds two Shape->Concat chains): MobileNetV2 100, MobileNetV3-Large 140,
MobileNetV3-Small 122, EfficientNet-B0 239, EfficientNet-B3 386, ResNet-101 241,
ResNet-152 360, DeepLabV3-MobileNetV3-Large 154.

>>> g = mobilenet_v2()
>>> g.num_ops, g.output_types[0].shape
(100, (1, 1000))
"""

from __future__ import annotations

import math

import numpy as np

from graphsub.ir.builder import Value
from graphsub.ir.graph import Graph
from graphsub.zoo._net import Net, sym_pads
from graphsub.zoo.torchvision_cnn import _resnet

#: 1/6 as a float32 attribute comes back from ONNX, so a round trip is a fixed point
_SIXTH = float(str(np.float32(1.0 / 6.0)))  # as the ONNX importer reads it back

NUM_CLASSES = 1000


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """torchvision's ``_make_divisible``: round ``v`` to a multiple of ``divisor``, never
    below 90% of ``v``.

    >>> make_divisible(72 // 4), make_divisible(16 * 1.2), make_divisible(112 * 1.2)
    (24, 24, 136)
    """
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _act(net: Net, x: Value, act: str) -> Value:
    """Activation as exported to ONNX: relu, relu6 (clip), hardswish, silu (sigmoid*x)."""
    if act == "relu":
        return net.op("relu", x)
    if act == "relu6":
        return net.op("clip", x, min=0.0, max=6.0)
    if act == "hardswish":
        return net.op("hardswish", x)
    if act == "silu":
        return net.op("mul", x, net.op("sigmoid", x))
    if act == "none":
        return x
    raise ValueError(f"unknown activation {act!r}")


def _cna(
    net: Net,
    x: Value,
    name: str,
    out_c: int,
    k: int,
    *,
    stride: int = 1,
    groups: int = 1,
    dilation: int = 1,
    act: str = "none",
) -> Value:
    """torchvision ``Conv2dNormActivation`` with BN folded: conv (+bias) then activation;
    padding ``(k - 1) // 2 * dilation``."""
    c_in = x.dim(1)
    w = net.weight(f"{name}.weight", (out_c, c_in // groups, k, k))
    b = net.weight(f"{name}.bias", (out_c,))
    pad = (k - 1) // 2 * dilation
    t = net.op("conv2d", x, w, b, strides=(stride, stride), pads=sym_pads(pad),
               dilations=(dilation, dilation))
    return _act(net, t, act)


def _se(net: Net, x: Value, p: str, squeeze: int, act: str, gate: str) -> Value:
    """Squeeze-Excitation: GAP -> fc1 (1x1 conv) -> act -> fc2 -> gate -> x * scale."""
    s = net.op("global_avgpool", x)
    s = _cna(net, s, f"{p}.fc1", squeeze, 1, act=act)
    s = _cna(net, s, f"{p}.fc2", x.dim(1), 1)
    gated = net.op("hardsigmoid", s, alpha=_SIXTH, beta=0.5) if gate == "hardsigmoid" else net.op("sigmoid", s)
    return net.op("mul", x, gated)


def _head(net: Net, x: Value, hidden: tuple[tuple[int, str], ...]) -> Value:
    """GAP -> flatten -> (Linear + act)* -> Linear 1000 (dropout omitted)."""
    t = net.op("flatten", net.op("global_avgpool", x), axis=1)
    for i, (n, act) in enumerate(hidden):
        t = _act(net, net.linear(t, f"classifier.{3 * i}", n), act)
    return net.linear(t, f"classifier.{3 * len(hidden)}", NUM_CLASSES)


# ----------------------------------------------------------------------------- MobileNetV2

_MBV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
         (6, 320, 1, 1))


def mobilenet_v2(image_size: int = 224) -> Graph:
    """MobileNetV2 (torchvision ``mobilenet_v2``, width 1.0).

    * 100 ops: 52 conv2d, 35 clip (ReLU6), 10 add, global_avgpool, flatten, gemm.
    * stem conv 32 3x3 s2; 17 inverted residuals (t, c, n, s) as in the paper; conv 1280 1x1.
    """
    net = Net("mobilenet_v2")
    t = net.input("input", (1, 3, image_size, image_size))
    t = _cna(net, t, "features.0.0", 32, 3, stride=2, act="relu6")
    i = 1
    for exp, c, n, s in _MBV2:
        for j in range(n):
            x = t
            stride = s if j == 0 else 1
            hidden = x.dim(1) * exp
            p = f"features.{i}.conv"
            k = 0
            if exp != 1:
                t = _cna(net, t, f"{p}.{k}.0", hidden, 1, act="relu6")
                k += 1
            t = _cna(net, t, f"{p}.{k}.0", hidden, 3, stride=stride, groups=hidden, act="relu6")
            t = _cna(net, t, f"{p}.{k + 1}", c, 1)
            if stride == 1 and x.dim(1) == c:
                t = net.op("add", x, t)
            i += 1
    t = _cna(net, t, f"features.{i}.0", 1280, 1, act="relu6")
    return net.finish(_head(net, t, ()))


# ----------------------------------------------------------------------------- MobileNetV3

# (input, kernel, expanded, out, use_se, activation, stride)
_MBV3_LARGE = (
    (16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2), (24, 3, 72, 24, False, "RE", 1),
    (24, 5, 72, 40, True, "RE", 2), (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1), (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1), (160, 5, 960, 160, True, "HS", 1),
)
_MBV3_SMALL = (
    (16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1),
)


def _mbv3_features(net: Net, x: Value, cfg: tuple[tuple[int, int, int, int, bool, str, int], ...],
                   dilated: bool) -> Value:
    """MobileNetV3 ``features``: stem, inverted residuals, last 1x1 conv (6 x last channels).

    ``dilated`` (DeepLab backbone): the last stage (the final stride-2 block and after) uses
    dilation 2 and stride 1, as ``mobilenet_v3_large(dilated=True)``."""
    t = _cna(net, x, "features.0.0", 16, 3, stride=2, act="hardswish")
    last_s2 = max(i for i, c in enumerate(cfg) if c[6] == 2)
    for i, (c_in, k, exp, c_out, use_se, act_name, s) in enumerate(cfg, start=1):
        assert t.dim(1) == c_in
        act = "relu" if act_name == "RE" else "hardswish"
        dil = 2 if dilated and i - 1 >= last_s2 else 1
        stride = 1 if dil > 1 else s
        p = f"features.{i}.block"
        x0, j = t, 0
        if exp != c_in:
            t = _cna(net, t, f"{p}.{j}.0", exp, 1, act=act)
            j += 1
        t = _cna(net, t, f"{p}.{j}.0", exp, k, stride=stride, groups=exp, dilation=dil, act=act)
        j += 1
        if use_se:
            t = _se(net, t, f"{p}.{j}", make_divisible(exp // 4), "relu", "hardsigmoid")
            j += 1
        t = _cna(net, t, f"{p}.{j}.0", c_out, 1)
        if s == 1 and c_in == c_out:
            t = net.op("add", t, x0)
    return _cna(net, t, f"features.{len(cfg) + 1}.0", 6 * t.dim(1), 1, act="hardswish")


def mobilenet_v3_large(image_size: int = 224) -> Graph:
    """MobileNetV3-Large (torchvision ``mobilenet_v3_large``).

    * 140 ops: 62 conv2d (16 of them in the 8 SE blocks), 21 hardswish, 19 relu,
      8 hardsigmoid, 8 mul, 10 add, 9 global_avgpool, flatten, 2 gemm.
    """
    net = Net("mobilenet_v3_large")
    t = _mbv3_features(net, net.input("input", (1, 3, image_size, image_size)), _MBV3_LARGE, False)
    return net.finish(_head(net, t, ((1280, "hardswish"),)))


def mobilenet_v3_small(image_size: int = 224) -> Graph:
    """MobileNetV3-Small (torchvision ``mobilenet_v3_small``).

    * 122 ops: 52 conv2d (9 SE blocks), 19 hardswish, 14 relu, 9 hardsigmoid, 9 mul, 6 add,
      10 global_avgpool, flatten, 2 gemm.
    """
    net = Net("mobilenet_v3_small")
    t = _mbv3_features(net, net.input("input", (1, 3, image_size, image_size)), _MBV3_SMALL, False)
    return net.finish(_head(net, t, ((1024, "hardswish"),)))


# ----------------------------------------------------------------------------- EfficientNet

# (expand_ratio, kernel, stride, input_channels, out_channels, num_layers)
_EFFNET = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
           (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))


def _efficientnet(name: str, width: float, depth: float, image_size: int) -> Graph:
    net = Net(name)
    t = net.input("input", (1, 3, image_size, image_size))
    stem = make_divisible(_EFFNET[0][3] * width)
    t = _cna(net, t, "features.0.0", stem, 3, stride=2, act="silu")
    for si, (e, k, s, c_in, c_out, n) in enumerate(_EFFNET, start=1):
        c_in, c_out = make_divisible(c_in * width), make_divisible(c_out * width)
        for j in range(math.ceil(n * depth)):
            stride, cin = (s, c_in) if j == 0 else (1, c_out)
            assert t.dim(1) == cin
            p = f"features.{si}.{j}.block"
            x0, li = t, 0
            expanded = make_divisible(cin * e)
            if expanded != cin:
                t = _cna(net, t, f"{p}.{li}", expanded, 1, act="silu")
                li += 1
            t = _cna(net, t, f"{p}.{li}", expanded, k, stride=stride, groups=expanded, act="silu")
            t = _se(net, t, f"{p}.{li + 1}", max(1, cin // 4), "silu", "sigmoid")
            t = _cna(net, t, f"{p}.{li + 2}", c_out, 1)
            if stride == 1 and cin == c_out:
                t = net.op("add", t, x0)
    t = _cna(net, t, f"features.{len(_EFFNET) + 1}", 4 * t.dim(1), 1, act="silu")
    t = net.op("flatten", net.op("global_avgpool", t), axis=1)
    return net.finish(net.linear(t, "classifier.1", NUM_CLASSES))


def efficientnet_b0(image_size: int = 224) -> Graph:
    """EfficientNet-B0 (torchvision ``efficientnet_b0``: width 1.0, depth 1.0), 16 MBConv.

    * 239 ops: 81 conv2d, 65 sigmoid, 81 mul (SiLU and SE gates), 9 add, 17 global_avgpool,
      flatten, gemm.
    """
    return _efficientnet("efficientnet_b0", 1.0, 1.0, image_size)


def efficientnet_b3(image_size: int = 300) -> Graph:
    """EfficientNet-B3 (torchvision ``efficientnet_b3``: width 1.2, depth 1.4, 300x300),
    26 MBConv, stem 40 channels, head 1536.

    * 386 ops: 130 conv2d, 104 sigmoid, 104 mul, 19 add, 27 global_avgpool, flatten, gemm.
    """
    return _efficientnet("efficientnet_b3", 1.2, 1.4, image_size)


# ----------------------------------------------------------------------------- ResNet


def resnet101() -> Graph:
    """ResNet-101 (torchvision ``resnet101``, v1.5): 241 ops (104 conv2d, 100 relu, 33 add,
    maxpool, global_avgpool, flatten, gemm)."""
    return _resnet("resnet101", True, (3, 4, 23, 3), False)


def resnet152() -> Graph:
    """ResNet-152 (torchvision ``resnet152``, v1.5): 360 ops (155 conv2d, 151 relu, 50 add,
    maxpool, global_avgpool, flatten, gemm)."""
    return _resnet("resnet152", True, (3, 8, 36, 3), False)


# ----------------------------------------------------------------------------- DeepLabV3


def deeplabv3_mobilenet_v3_large(image_size: int = 513, num_classes: int = 21) -> Graph:
    """DeepLabV3 with a dilated MobileNetV3-Large backbone (torchvision
    ``deeplabv3_mobilenet_v3_large``, ``aux_loss=False``) at 513x513.

    * backbone ``features`` (output stride 16: 960 x 33 x 33 at 513), then ``DeepLabHead``:
      ASPP (1x1 conv; 3x3 convs with dilation 12, 24, 36; pooling branch GAP -> 1x1 conv ->
      ReLU -> bilinear resize), concat (1280), 1x1 projection, 3x3 conv, 1x1 classifier conv,
      and a final bilinear resize to the input size.
    * 154 ops: 70 conv2d, 20 hardswish, 26 relu, 8 hardsigmoid, 8 mul, 10 add,
      9 global_avgpool, 1 concat, 2 resize (no flatten or gemm).
    """
    net = Net("deeplabv3_mobilenet_v3_large")
    x = net.input("input", (1, 3, image_size, image_size))
    f = _mbv3_features(net, x, _MBV3_LARGE, True)
    h, w = f.dim(2), f.dim(3)
    branches = [_cna(net, f, "classifier.0.convs.0.0", 256, 1, act="relu")]
    for i, rate in enumerate((12, 24, 36), start=1):
        branches.append(_cna(net, f, f"classifier.0.convs.{i}.0", 256, 3, dilation=rate, act="relu"))
    pooled = _cna(net, net.op("global_avgpool", f), "classifier.0.convs.4.1", 256, 1, act="relu")
    branches.append(net.op("resize", pooled, sizes=(1, 256, h, w), mode="linear",
                           coordinate_transformation_mode="pytorch_half_pixel"))
    t = net.op("concat", *branches, axis=1)
    t = _cna(net, t, "classifier.0.project.0", 256, 1, act="relu")
    t = _cna(net, t, "classifier.1", 256, 3, act="relu")
    t = _cna(net, t, "classifier.4", num_classes, 1)
    t = net.op("resize", t, sizes=(1, num_classes, image_size, image_size), mode="linear",
               coordinate_transformation_mode="pytorch_half_pixel")
    return net.finish(t)


__all__ = [
    "deeplabv3_mobilenet_v3_large",
    "efficientnet_b0",
    "efficientnet_b3",
    "make_divisible",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "mobilenet_v3_small",
    "resnet101",
    "resnet152",
]
