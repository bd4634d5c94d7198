"""Classic CNNs with torchvision's structures: SqueezeNet 1.0, VGG-16/19, AlexNet,
ResNet-18/50.

The graphs look like what ``torch.onnx.export`` produces for the torchvision models in
inference mode: separate ``relu`` nodes, ``gemm(x, W, b, trans_b=True)`` for ``Linear``,
dropout omitted, and ``flatten`` before the classifier.  An ``AdaptiveAvgPool2d`` whose
input already has the target size is a 1x1 average pool (VGG, AlexNet); to 1x1 it is a
``global_avgpool`` (SqueezeNet, ResNet).

``batchnorm=False`` (default): convolutions carry a bias (batch norm folded, as in most
exported inference models).  ``batchnorm=True``: convolutions have no bias and a
``batchnorm`` node follows each one (including convs that have no BN in torchvision,
e.g. SqueezeNet's and AlexNet's).

Input ``input`` (1, 3, 224, 224), output (1, 1000) for all models.  Weights are named like
the torchvision ``state_dict`` keys (``layer1.0.conv1.weight``, ``features.0.bias``,
``fc.weight``, ...); BN parameters use ``weight``/``bias``/``running_mean``/``running_var``.
Op counts below are ``num_ops`` (``flatten`` included); torchvision's ONNX exports without
the Flatten node have one op fewer.
"""

from __future__ import annotations

from graphsub.ir.builder import Value
from graphsub.ir.graph import Graph
from graphsub.zoo._net import Net, Seq, sym_pads

IMAGE = (1, 3, 224, 224)
NUM_CLASSES = 1000


def _conv(
    net: Net,
    x: Value,
    name: str,
    bn_name: str,
    out_c: int,
    k: int,
    *,
    stride: int = 1,
    pad: int = 0,
    batchnorm: bool,
    relu: bool = True,
) -> Value:
    """Conv (+ BN) (+ ReLU): weights ``{name}.weight`` and either ``{name}.bias`` or the BN
    parameters under ``bn_name``."""
    t = net.conv(
        x,
        f"{name}.weight",
        out_c,
        (k, k),
        strides=(stride, stride),
        pads=sym_pads(pad),
        bias_name=None if batchnorm else f"{name}.bias",
    )
    if batchnorm:
        t = net.batchnorm(t, bn_name)
    return net.op("relu", t) if relu else t


def _classifier(net: Net, x: Value, names: tuple[str, str, str]) -> Value:
    """flatten -> Linear 4096 + ReLU -> Linear 4096 + ReLU -> Linear 1000 (dropout omitted)."""
    t = net.op("flatten", x, axis=1)
    t = net.op("relu", net.linear(t, names[0], 4096))
    t = net.op("relu", net.linear(t, names[1], 4096))
    return net.linear(t, names[2], NUM_CLASSES)


# ----------------------------------------------------------------------------- SqueezeNet


def _fire(net: Net, x: Value, p: str, s: int, e1: int, e3: int, batchnorm: bool) -> Value:
    """Fire module (7 ops without BN): squeeze 1x1 + ReLU, expand 1x1 / 3x3 + ReLU, concat."""
    t = _conv(net, x, f"{p}.squeeze", f"{p}.squeeze_bn", s, 1, batchnorm=batchnorm)
    a = _conv(net, t, f"{p}.expand1x1", f"{p}.expand1x1_bn", e1, 1, batchnorm=batchnorm)
    b = _conv(net, t, f"{p}.expand3x3", f"{p}.expand3x3_bn", e3, 3, pad=1, batchnorm=batchnorm)
    return net.op("concat", a, b, axis=1)


def squeezenet(batchnorm: bool = False) -> Graph:
    """SqueezeNet 1.0 (torchvision ``squeezenet1_0``).

    * 65 ops (64 without flatten): 26 conv2d, 26 relu, 3 maxpool2d (3x3 s2, ceil mode),
      8 concat, 1 global_avgpool, 1 flatten; ``batchnorm=True`` adds 26 batchnorm (91).
    * conv 96 7x7 s2 -> maxpool -> fire2-4 -> maxpool -> fire5-8 -> maxpool -> fire9 ->
      conv 1000 1x1 + ReLU -> global average pool -> flatten.
    """
    net = Net("squeezenet")
    seq = Seq()
    x = net.input("input", IMAGE)
    i = seq.take(3 if batchnorm else 2)
    t = _conv(net, x, f"features.{i}", f"features.{i + 1}", 96, 7, stride=2, batchnorm=batchnorm)
    fire_groups = (  # (squeeze, expand1x1, expand3x3) per fire module, after each maxpool
        ((16, 64, 64), (16, 64, 64), (32, 128, 128)),
        ((32, 128, 128), (48, 192, 192), (48, 192, 192), (64, 256, 256)),
        ((64, 256, 256),),
    )
    for specs in fire_groups:
        seq.take()
        t = net.maxpool(t, (3, 3), (2, 2), sym_pads(0), ceil_mode=True)
        for s, e1, e3 in specs:
            t = _fire(net, t, f"features.{seq.take()}", s, e1, e3, batchnorm)
    t = _conv(net, t, "classifier.1", "classifier.1_bn", NUM_CLASSES, 1, batchnorm=batchnorm)
    t = net.op("global_avgpool", t)
    return net.finish(net.op("flatten", t, axis=1))


# ----------------------------------------------------------------------------- VGG / AlexNet

_VGG_CFG: dict[str, tuple[int | str, ...]] = {
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"),
    "vgg19": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"),
}


def _vgg(name: str, batchnorm: bool) -> Graph:
    net = Net(name)
    seq = Seq()
    t = net.input("input", IMAGE)
    for v in _VGG_CFG[name]:
        if v == "M":
            seq.take()
            t = net.maxpool(t, (2, 2), (2, 2), sym_pads(0))
            continue
        assert isinstance(v, int)
        i = seq.take(3 if batchnorm else 2)
        t = _conv(net, t, f"features.{i}", f"features.{i + 1}", v, 3, pad=1, batchnorm=batchnorm)
    # AdaptiveAvgPool2d((7, 7)) on a 7x7 map
    t = net.avgpool(t, (1, 1), (1, 1), sym_pads(0))
    return net.finish(_classifier(net, t, ("classifier.0", "classifier.3", "classifier.6")))


def vgg16(batchnorm: bool = False) -> Graph:
    """VGG-16 (torchvision ``vgg16``, ``vgg16_bn`` layout with ``batchnorm=True``).

    * 38 ops (37 without flatten): 13 conv2d + 13 relu, 5 maxpool2d (2x2 s2), 1 avgpool2d
      (adaptive 7x7 on a 7x7 map = 1x1 pool), flatten, 3 gemm + 2 relu; +13 batchnorm.
    """
    return _vgg("vgg16", batchnorm)


def vgg19(batchnorm: bool = False) -> Graph:
    """VGG-19 (torchvision ``vgg19``; ``vgg19_bn`` layout with ``batchnorm=True``).

    * 44 ops (43 without flatten): 16 conv2d + 16 relu, 5 maxpool2d, 1 avgpool2d, flatten,
      3 gemm + 2 relu; +16 batchnorm.
    """
    return _vgg("vgg19", batchnorm)


def alexnet(batchnorm: bool = False) -> Graph:
    """AlexNet (torchvision ``alexnet``).

    * 20 ops (19 without flatten): 5 conv2d + 5 relu, 3 maxpool2d (3x3 s2), 1 avgpool2d
      (adaptive 6x6 on a 6x6 map = 1x1 pool), flatten, 3 gemm + 2 relu; +5 batchnorm.
    * conv 64 11x11 s4 p2 -> pool -> conv 192 5x5 p2 -> pool -> conv 384 / 256 / 256 3x3 p1
      -> pool (256 x 6 x 6) -> classifier 9216 -> 4096 -> 4096 -> 1000.
    """
    net = Net("alexnet")
    seq = Seq()
    step = 3 if batchnorm else 2
    t = net.input("input", IMAGE)
    layers: tuple[tuple[int, int, int, int, bool], ...] = (
        # out, kernel, stride, pad, maxpool after
        (64, 11, 4, 2, True),
        (192, 5, 1, 2, True),
        (384, 3, 1, 1, False),
        (256, 3, 1, 1, False),
        (256, 3, 1, 1, True),
    )
    for out_c, k, s, pad, pool in layers:
        i = seq.take(step)
        t = _conv(
            net, t, f"features.{i}", f"features.{i + 1}", out_c, k,
            stride=s, pad=pad, batchnorm=batchnorm,
        )
        if pool:
            seq.take()
            t = net.maxpool(t, (3, 3), (2, 2), sym_pads(0))
    t = net.avgpool(t, (1, 1), (1, 1), sym_pads(0))  # AdaptiveAvgPool2d((6, 6)) on 6x6
    return net.finish(_classifier(net, t, ("classifier.1", "classifier.4", "classifier.6")))


# ----------------------------------------------------------------------------- ResNet


def _basic(net: Net, x: Value, p: str, planes: int, stride: int, batchnorm: bool) -> Value:
    """BasicBlock: conv3x3 (stride) + BN + ReLU, conv3x3 + BN, (downsample), add, ReLU."""
    t = _conv(net, x, f"{p}.conv1", f"{p}.bn1", planes, 3, stride=stride, pad=1,
              batchnorm=batchnorm)
    t = _conv(net, t, f"{p}.conv2", f"{p}.bn2", planes, 3, pad=1, batchnorm=batchnorm,
              relu=False)
    return _residual(net, x, t, p, planes, stride, batchnorm)


def _bottleneck(net: Net, x: Value, p: str, planes: int, stride: int, batchnorm: bool) -> Value:
    """Bottleneck (ResNet v1.5, stride on the 3x3 conv): 1x1, 3x3, 1x1 (4 x planes)."""
    t = _conv(net, x, f"{p}.conv1", f"{p}.bn1", planes, 1, batchnorm=batchnorm)
    t = _conv(net, t, f"{p}.conv2", f"{p}.bn2", planes, 3, stride=stride, pad=1,
              batchnorm=batchnorm)
    t = _conv(net, t, f"{p}.conv3", f"{p}.bn3", 4 * planes, 1, batchnorm=batchnorm,
              relu=False)
    return _residual(net, x, t, p, 4 * planes, stride, batchnorm)


def _residual(
    net: Net, x: Value, t: Value, p: str, out_c: int, stride: int, batchnorm: bool
) -> Value:
    """``relu(t + identity)``; the identity is a 1x1 conv (+ BN) when the shape changes."""
    if stride != 1 or x.dim(1) != out_c:
        x = _conv(net, x, f"{p}.downsample.0", f"{p}.downsample.1", out_c, 1, stride=stride,
                  batchnorm=batchnorm, relu=False)
    return net.op("relu", net.op("add", t, x))


def _resnet(name: str, bottleneck: bool, layers: tuple[int, int, int, int],
            batchnorm: bool) -> Graph:
    net = Net(name)
    x = net.input("input", IMAGE)
    t = _conv(net, x, "conv1", "bn1", 64, 7, stride=2, pad=3, batchnorm=batchnorm)
    t = net.maxpool(t, (3, 3), (2, 2), sym_pads(1))
    block = _bottleneck if bottleneck else _basic
    for li, (n, planes) in enumerate(zip(layers, (64, 128, 256, 512), strict=True), start=1):
        for bi in range(n):
            stride = 2 if li > 1 and bi == 0 else 1
            t = block(net, t, f"layer{li}.{bi}", planes, stride, batchnorm)
    t = net.op("flatten", net.op("global_avgpool", t), axis=1)
    return net.finish(net.linear(t, "fc", NUM_CLASSES))


def resnet18(batchnorm: bool = False) -> Graph:
    """ResNet-18 (torchvision ``resnet18``).

    * 49 ops (48 without flatten): 20 conv2d, 17 relu, 1 maxpool2d, 8 add,
      1 global_avgpool, 1 flatten, 1 gemm; ``batchnorm=True`` adds 20 batchnorm (69).
    """
    return _resnet("resnet18", False, (2, 2, 2, 2), batchnorm)


def resnet50(batchnorm: bool = False) -> Graph:
    """ResNet-50 (torchvision ``resnet50``, v1.5: stride on the 3x3 conv).

    * 122 ops (121 without flatten): 53 conv2d, 49 relu, 1 maxpool2d, 16 add,
      1 global_avgpool, 1 flatten, 1 gemm; ``batchnorm=True`` adds 53 batchnorm (175).
    """
    return _resnet("resnet50", True, (3, 4, 6, 3), batchnorm)


__all__ = ["alexnet", "resnet18", "resnet50", "squeezenet", "vgg16", "vgg19"]
