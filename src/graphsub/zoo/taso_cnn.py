"""The CNN benchmarks of TASO/OCGGS: Inception-v3, stacked Inception-E blocks, the OCGGS
ResNet blocks and ResNeXt-50.

The structures follow the OCGGS example scripts (``Experiment-code/OCGGS`` @ 7b4c361,
``examples/{inceptionv3,inceptionv3E,resnet,resnext50}.py``; ResNeXt-50 is identical to
TASO's ``examples/resnext50.py``), re-written against the graphsub builder.  Conventions
carried over from TASO:

* convolutions are ``conv2d`` with the activation fused (``act="relu"``) and no bias;
* weights carry shapes only (no data);
* grouped convolutions are expressed by the weight shape ``(O, C / groups, kh, kw)``;
* average pools count padding (``count_include_pad=True``), as cuDNN does in TASO.

Weight names are ``{block}_{branch}_{conv}_w`` (e.g. ``a1_b3_conv2_w``: InceptionA block 1,
branch 3, second convolution) so that every weight is unique and easy to find.
"""

from __future__ import annotations

from graphsub.ir.builder import Value
from graphsub.ir.graph import Graph
from graphsub.zoo._net import Net

RELU = "relu"
_S1 = (1, 1)
_S2 = (2, 2)


# ----------------------------------------------------------------------------- Inception


def _inception_a(net: Net, x: Value, p: str, channels: int) -> Value:
    """InceptionA (11 ops: 7 conv, 1 avgpool, 3 binary concats); 35x35 grid."""
    t1 = net.conv(x, f"{p}_b1_conv1_w", 64, (1, 1), act=RELU)
    t2 = net.conv(x, f"{p}_b2_conv1_w", 48, (1, 1), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv2_w", 64, (5, 5), act=RELU)
    t3 = net.conv(x, f"{p}_b3_conv1_w", 64, (1, 1), act=RELU)
    t3 = net.conv(t3, f"{p}_b3_conv2_w", 96, (3, 3), act=RELU)
    t3 = net.conv(t3, f"{p}_b3_conv3_w", 96, (3, 3), act=RELU)
    t4 = net.avgpool(x, (3, 3), _S1, "SAME", act=RELU, count_include_pad=True)
    t4 = net.conv(t4, f"{p}_b4_conv1_w", channels, (1, 1), act=RELU)
    t12 = net.op("concat", t1, t2, axis=1)
    t34 = net.op("concat", t3, t4, axis=1)
    return net.op("concat", t12, t34, axis=1)


def _inception_b(net: Net, x: Value, p: str) -> Value:
    """InceptionB, grid reduction 35 -> 17 (7 ops: 4 conv, 1 avgpool, 2 concats)."""
    t1 = net.conv(x, f"{p}_b1_conv1_w", 384, (3, 3), strides=_S2, pads="VALID", act=RELU)
    t2 = net.conv(x, f"{p}_b2_conv1_w", 64, (1, 1), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv2_w", 96, (3, 3), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv3_w", 96, (3, 3), strides=_S2, pads="VALID", act=RELU)
    # the peer script pools with *avg* here (torchvision uses max); kept for fidelity
    t3 = net.avgpool(x, (3, 3), _S2, "VALID", count_include_pad=True)
    t12 = net.op("concat", t1, t2, axis=1)
    return net.op("concat", t12, t3, axis=1)


def _inception_c(net: Net, x: Value, p: str, c: int) -> Value:
    """InceptionC with factorised 7x7 convolutions (14 ops: 10 conv, 1 avgpool, 3 concats)."""
    t1 = net.conv(x, f"{p}_b1_conv1_w", 192, (1, 1), act=RELU)
    t2 = net.conv(x, f"{p}_b2_conv1_w", c, (1, 1), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv2_w", c, (1, 7), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv3_w", 192, (7, 1), act=RELU)
    t3 = net.conv(x, f"{p}_b3_conv1_w", c, (1, 1), act=RELU)
    t3 = net.conv(t3, f"{p}_b3_conv2_w", c, (7, 1), act=RELU)
    t3 = net.conv(t3, f"{p}_b3_conv3_w", c, (1, 7), act=RELU)
    t3 = net.conv(t3, f"{p}_b3_conv4_w", c, (7, 1), act=RELU)
    t3 = net.conv(t3, f"{p}_b3_conv5_w", 192, (1, 7), act=RELU)
    t4 = net.avgpool(x, (3, 3), _S1, "SAME", act=RELU, count_include_pad=True)
    t4 = net.conv(t4, f"{p}_b4_conv1_w", 192, (1, 1), act=RELU)
    t12 = net.op("concat", t1, t2, axis=1)
    t34 = net.op("concat", t3, t4, axis=1)
    return net.op("concat", t12, t34, axis=1)


def _inception_d(net: Net, x: Value, p: str) -> Value:
    """InceptionD, grid reduction 17 -> 8 (8 ops: 6 conv, 1 maxpool, one 3-input concat)."""
    t1 = net.conv(x, f"{p}_b1_conv1_w", 192, (1, 1), act=RELU)
    t1 = net.conv(t1, f"{p}_b1_conv2_w", 320, (3, 3), strides=_S2, pads="VALID", act=RELU)
    t2 = net.conv(x, f"{p}_b2_conv1_w", 192, (1, 1), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv2_w", 192, (1, 7), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv3_w", 192, (7, 1), act=RELU)
    t2 = net.conv(t2, f"{p}_b2_conv4_w", 192, (3, 3), strides=_S2, pads="VALID", act=RELU)
    t3 = net.maxpool(x, (3, 3), _S2, "VALID")
    return net.op("concat", t1, t2, t3, axis=1)


def _inception_e(net: Net, x: Value, p: str) -> Value:
    """InceptionE with expanded filter banks; 8x8 grid, 2048 output channels
    (13 ops: 9 conv, 1 maxpool, two 2-input concats and one 4-input concat)."""
    t1 = net.conv(x, f"{p}_b1_conv1_w", 320, (1, 1), act=RELU)
    t2 = net.conv(x, f"{p}_b2_conv1_w", 384, (1, 1), act=RELU)
    t2a = net.conv(t2, f"{p}_b2_conv2a_w", 384, (1, 3), act=RELU)
    t2b = net.conv(t2, f"{p}_b2_conv2b_w", 384, (3, 1), act=RELU)
    t2 = net.op("concat", t2a, t2b, axis=1)
    t3 = net.conv(x, f"{p}_b3_conv1_w", 448, (1, 1), act=RELU)
    t3 = net.conv(t3, f"{p}_b3_conv2_w", 384, (3, 3), act=RELU)
    t3a = net.conv(t3, f"{p}_b3_conv3a_w", 384, (1, 3), act=RELU)
    t3b = net.conv(t3, f"{p}_b3_conv3b_w", 384, (3, 1), act=RELU)
    t3 = net.op("concat", t3a, t3b, axis=1)
    t4 = net.maxpool(x, (3, 3), _S1, "SAME")
    t4 = net.conv(t4, f"{p}_b4_conv1_w", 192, (1, 1), act=RELU)
    return net.op("concat", t1, t2, t3, t4, axis=1)


def inception_v3() -> Graph:
    """Inception-v3 as in OCGGS ``examples/inceptionv3.py`` (Table 2: 11 blocks, 138 ops).

    * Input ``input`` (1, 3, 299, 299); output (1, 2048, 1, 1) (no classifier).
    * 138 ops: 94 conv2d, 5 maxpool2d, 9 avgpool2d, 30 concat.
    * Stem (5 conv + 2 maxpool) -> 3x InceptionA (pool branch 32/64/64 channels) ->
      InceptionB -> 4x InceptionC (7x7 width 128/160/160/192) -> InceptionD -> 2x InceptionE
      -> 8x8 average pool.  Every convolution has a fused ReLU.
    * Multi-branch concats are binary trees in A, B, C (as in OCGGS and MetaFlow), n-ary in
      D and E.  TASO's own ``inceptionv3.py`` (batch 32, n-ary concats, 119 ops) differs.
    * The average pools in A and C have a fused ReLU and InceptionB pools with an average
      pool, both as in the peer script.
    """
    net = Net("inception_v3")
    x = net.input("input", (1, 3, 299, 299))
    t = net.conv(x, "stem_conv1_w", 32, (3, 3), strides=_S2, pads="VALID", act=RELU)
    t = net.conv(t, "stem_conv2_w", 32, (3, 3), pads="VALID", act=RELU)
    t = net.conv(t, "stem_conv3_w", 64, (3, 3), pads="SAME", act=RELU)
    t = net.maxpool(t, (3, 3), _S2, "VALID")
    t = net.conv(t, "stem_conv4_w", 80, (1, 1), pads="VALID", act=RELU)
    t = net.conv(t, "stem_conv5_w", 192, (3, 3), pads="VALID", act=RELU)
    t = net.maxpool(t, (3, 3), _S2, "VALID")
    for i, ch in enumerate((32, 64, 64), start=1):
        t = _inception_a(net, t, f"a{i}", ch)
    t = _inception_b(net, t, "b")
    for i, c in enumerate((128, 160, 160, 192), start=1):
        t = _inception_c(net, t, f"c{i}", c)
    t = _inception_d(net, t, "d")
    t = _inception_e(net, t, "e1")
    t = _inception_e(net, t, "e2")
    t = net.avgpool(t, (8, 8), _S1, "VALID", count_include_pad=True)
    return net.finish(t)


def inception_e(blocks: int = 3) -> Graph:
    """``blocks`` chained InceptionE blocks, as in OCGGS ``examples/inceptionv3E.py -n N``.

    * Input ``input`` (1, 1280, 8, 8) (the InceptionD output of Inception-v3); output
      (1, 2048, 8, 8).
    * ``13 * blocks`` ops: per block 9 conv2d, 1 maxpool2d, 3 concat.
    """
    if blocks < 1:
        raise ValueError(f"inception_e: blocks must be >= 1, got {blocks}")
    net = Net("inception_e")
    t = net.input("input", (1, 1280, 8, 8))
    for i in range(1, blocks + 1):
        t = _inception_e(net, t, f"e{i}")
    return net.finish(t)


# ----------------------------------------------------------------------------- ResNet blocks


def resnet(blocks: int = 8) -> Graph:
    """The OCGGS ResNet benchmark (``examples/resnet.py -n N``; Table 2: 8 blocks, 40 ops).

    * Input ``input`` (1, 256, 14, 14); output (1, 256, 14, 14).
    * ``5 * blocks`` ops.  Block: ``t = conv3x3(x) + relu; t = conv3x3(t)``; shortcut
      ``s = conv1x1(x) + relu`` (always present, even without a shape change, as in the
      peer script); ``relu(add(s, t))``.  All convs 256 channels, stride 1, SAME.
    """
    if blocks < 1:
        raise ValueError(f"resnet: blocks must be >= 1, got {blocks}")
    net = Net("resnet")
    t = net.input("input", (1, 256, 14, 14))
    for i in range(1, blocks + 1):
        p = f"r{i}"
        y = net.conv(t, f"{p}_conv1_w", 256, (3, 3), act=RELU)
        y = net.conv(y, f"{p}_conv2_w", 256, (3, 3))
        s = net.conv(t, f"{p}_short_w", 256, (1, 1), act=RELU)
        t = net.op("relu", net.op("add", s, y))
    return net.finish(t)


# ----------------------------------------------------------------------------- ResNeXt-50


def _resnext_block(net: Net, x: Value, p: str, stride: int, c: int, groups: int = 32) -> Value:
    """Bottleneck with a grouped 3x3 conv; 5 ops, 6 with the projection shortcut."""
    s = (stride, stride)
    t = net.conv(x, f"{p}_conv1_w", c, (1, 1), act=RELU)
    t = net.conv(t, f"{p}_conv2_w", c, (3, 3), strides=s, act=RELU, groups=groups)
    t = net.conv(t, f"{p}_conv3_w", 2 * c, (1, 1))
    if stride > 1 or x.dim(1) != 2 * c:
        x = net.conv(x, f"{p}_short_w", 2 * c, (1, 1), strides=s, act=RELU)
    return net.op("relu", net.op("add", x, t))


def resnext50() -> Graph:
    """ResNeXt-50 (32x4d-style widths) as in TASO/OCGGS ``examples/resnext50.py`` (86 ops).

    * Input ``input`` (1, 3, 224, 224); output (1, 2048, 7, 7) (no classifier).
    * 86 ops: 53 conv2d, 1 maxpool2d, 16 add, 16 relu.
    * Stem: conv 64 7x7 s2 + ReLU, maxpool 3x3 s2 (SAME).  Stages of 3/4/6/3 blocks with
      bottleneck width c = 128/256/512/1024 (output 2c), 32 groups in the 3x3 conv
      (weight ``(c, c/32, 3, 3)``); the first block of stages 2-4 has stride 2.  A 1x1
      projection shortcut (with ReLU, as in the peers) is added when the shape changes.
    """
    net = Net("resnext50")
    x = net.input("input", (1, 3, 224, 224))
    t = net.conv(x, "stem_conv_w", 64, (7, 7), strides=_S2, act=RELU)
    t = net.maxpool(t, (3, 3), _S2, "SAME")
    for stage, (n, c) in enumerate(((3, 128), (4, 256), (6, 512), (3, 1024)), start=1):
        for i in range(1, n + 1):
            stride = 2 if stage > 1 and i == 1 else 1
            t = _resnext_block(net, t, f"s{stage}b{i}", stride, c)
    return net.finish(t)


__all__ = ["inception_e", "inception_v3", "resnet", "resnext50"]
