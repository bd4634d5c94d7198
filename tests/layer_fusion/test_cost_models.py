"""F_beta / F_D of the LBDF and BRR models on hand-worked groups (1 byte per element).

Every expected number is computed by hand in the comments, from the formulas in the module
docstrings of graphsub.layer_fusion.lbdf / graphsub.layer_fusion.brr."""

from __future__ import annotations

import math

from graphsub.ir.builder import Builder
from graphsub.ir.graph import Graph
from graphsub.layer_fusion import BRRCost, CostConfig, FusionPlan, LBDFCost, fusion_graph
from graphsub.zoo._net import Net, sym_pads

BIG = 1 << 30


def conv(net: Net, x, name: str, out_c: int, k: int, pad: int):  # type: ignore[no-untyped-def]
    return net.conv(x, f"{name}.w", out_c, (k, k), pads=sym_pads(pad), bias_name=f"{name}.b")


def basic_block() -> Graph:
    # x 8x10x10 -> conv3x3 p1 -> relu -> conv3x3 p1 -> add(., x) -> relu
    net = Net("basic")
    x = net.input("x", (1, 8, 10, 10))
    t = net.op("relu", conv(net, x, "c1", 8, 3, 1))
    t = conv(net, t, "c2", 8, 3, 1)
    return net.finish(net.op("relu", net.op("add", t, x)))


def bottleneck() -> Graph:
    # x 16x8x8 -> 1x1 (4) -> relu -> 3x3 p1 (4) -> relu -> 1x1 (16) -> add(., x) -> relu
    net = Net("bottleneck")
    x = net.input("x", (1, 16, 8, 8))
    t = net.op("relu", conv(net, x, "c1", 4, 1, 0))
    t = net.op("relu", conv(net, t, "c2", 4, 3, 1))
    t = conv(net, t, "c3", 16, 1, 0)
    return net.finish(net.op("relu", net.op("add", t, x)))


def se_block() -> Graph:
    # x 8x6x6 -> GAP -> 1x1 conv (2) -> relu -> 1x1 conv (8) -> sigmoid -> mul(x, .)
    net = Net("se")
    x = net.input("x", (1, 8, 6, 6))
    s = net.op("global_avgpool", x)
    s = net.op("relu", conv(net, s, "fc1", 2, 1, 0))
    s = net.op("sigmoid", conv(net, s, "fc2", 8, 1, 0))
    return net.finish(net.op("mul", x, s))


def test_lbdf_basic_block() -> None:
    fg = fusion_graph(basic_block())
    assert fg.ops == ("conv2d", "relu", "conv2d", "add", "relu")
    m = LBDFCost(fg, BIG)
    # weights: 2 convs x (8*8*3*3 + 8 bias) = 2 * 584 = 1168
    # line buffers (C*W*rows): x: max(3 rows for conv1, 1 for add) -> 8*10*3 = 240;
    #   conv1 out -> relu 1 row: 80; relu -> conv2 3 rows: 240; conv2 -> add: 80; add -> relu: 80
    #   total 720
    # skip: fork x; lambda(conv2) = 1 (conv1: 3-1-1) + 1 (conv2) = 2 rows, lambda(x) = 0
    #   -> SK = 8*10*2 = 160
    # output row staged: 8*10 = 80
    # F_beta = 1168 + 720 + 160 + 80 = 2128
    whole = tuple(range(5))
    assert m.fbeta(whole) == 2128
    # F_D = weights 1168 + read x 800 + write out 800 = 2768
    assert m.fd(whole) == 2768
    # weights as configuration: F_D drops the 1168
    assert LBDFCost(fg, BIG, CostConfig(weights_in_dram=False)).fd(whole) == 1600
    # 2 bytes per element doubles both
    m2 = LBDFCost(fg, BIG, CostConfig(bytes_per_elem=2))
    assert (m2.fbeta(whole), m2.fd(whole)) == (4256, 5536)
    # re-reading the skip from DRAM: SK 160 disappears, x is read once more (800)
    m3 = LBDFCost(fg, BIG, CostConfig(skip_reread=True))
    assert (m3.fbeta(whole), m3.fd(whole)) == (2128 - 160, 2768 + 800)


def test_lbdf_bottleneck() -> None:
    fg = fusion_graph(bottleneck())
    m = LBDFCost(fg, BIG)
    whole = tuple(range(fg.num_ops))
    # weights: 16*4+4 = 68; 4*4*9+4 = 148; 4*16+16 = 80 -> 296
    # line buffers: x (1 row: 1x1 conv, add) 16*8 = 128; c1->relu 32; relu->c2 (3 rows) 96;
    #   c2->relu 32; relu->c3 32; c3->add 128; add->relu 128 -> 576
    # skip: lambda(c3) = 0 + 1 + 0 = 1 row of x -> 16*8*1 = 128
    # output row 16*8 = 128;  F_beta = 296 + 576 + 128 + 128 = 1128
    assert m.fbeta(whole) == 1128
    # F_D = 296 + |x| 1024 + |out| 1024 = 2344
    assert m.fd(whole) == 2344


def test_lbdf_se_block_buffers_the_whole_map() -> None:
    fg = fusion_graph(se_block())
    m = LBDFCost(fg, BIG)
    whole = tuple(range(fg.num_ops))
    # weights: 8*2+2 = 18, 2*8+8 = 24 -> 42
    # line buffers: x 8*6 = 48; gap out 8, fc1 out 2, relu 2, fc2 8, sigmoid 8 -> 76
    # accumulators: GAP output 8
    # skip: the path x -> GAP -> ... -> sigmoid has a global op: lambda = H = 6 rows,
    #   lambda(x) = 0 -> SK = 8*6*6 = 288 (the whole map)
    # output row: 8*6 = 48;  F_beta = 42 + 76 + 8 + 288 + 48 = 462
    assert m.fbeta(whole) == 462
    # F_D = 42 + 288 + 288 = 618
    assert m.fd(whole) == 618
    # without the mul, no join: no skip buffer, the sigmoid output (8) is staged instead of a row
    # of the mul: 42 + (48 + 8+2+2+8) + 8 + 8 = 126
    assert m.fbeta(whole[:-1]) == 126
    # BRR cannot run an SE block fused (Optimus / the paper): infinite buffer requirement
    assert BRRCost(fg, BIG).fbeta(whole) == math.inf


def test_brr_optimus_chain() -> None:
    # x 4x16x16 -> conv A 3x3 p1 (8) -> conv B 3x3 p1 (8), PE parallelism k = 4
    b = Builder("chain")
    x = b.input("x", (1, 4, 16, 16))
    a = b.conv2d(x, b.weight("wa", (8, 4, 3, 3)), b.weight("ba", (8,)), pads=(1, 1, 1, 1))
    y = b.conv2d(a, b.weight("wb", (8, 8, 3, 3)), b.weight("bb", (8,)), pads=(1, 1, 1, 1))
    fg = fusion_graph(b.build(y))
    cfg = CostConfig(pe_channels=4)
    # sigma(B) = 1, sigma(A) = 1; m(B) = 1, m(A) = min(16, (1-1)*1 + 3) = 3
    # phase A (entry full):   A full 8*3*16 = 384, B partial 4*1*16 = 64   -> M0 = 448
    #                         D = 8*1*16 + 4*1*16 = 192
    # phase B (entry partial): input rows 4*min(2+3, 16)*16 = 320, A partial 4*3*16 = 192,
    #                         B full 8*1*16 = 128 -> M0 = 640; D = 4*1*16 + 64 + 128 = 256
    # weights W = (4*8*9 + 8) + (8*8*9 + 8) = 296 + 584 = 880
    big = BRRCost(fg, 1 << 20, cfg)
    assert big.fbeta((0, 1)) == 448          # phase A: D/(cap - M0) is smaller
    # W + M0 = 1328 <= buffer -> 1 tile: F_D = 880 + |x| 1024 + |y| 2048 = 3952
    assert big.fd((0, 1)) == 3952
    # 1000-byte buffer: both phases fit; A: 192/552 < B: 256/360 -> M0 = 448;
    # W + M0 > 1000 -> h = floor((1000 - 448) / 192) + 1 = 3 rows per tile, n = ceil(16/3) = 6
    # F_D = 880*6 + 1024 + 2048 = 8352
    small = BRRCost(fg, 1000, cfg)
    assert (small.fbeta((0, 1)), small.fd((0, 1))) == (448, 8352)
    # 500 bytes: only phase A fits; 400 bytes: neither -> invalid (F_beta >= buffer)
    assert BRRCost(fg, 500, cfg).valid((0, 1))
    assert not BRRCost(fg, 400, cfg).valid((0, 1))


def test_plan_metrics_and_unfusable_ops() -> None:
    fg = fusion_graph(basic_block())
    m = LBDFCost(fg, 2000)   # the whole block (2128) does not fit; every single op does
    assert not m.unfusable
    whole = FusionPlan([range(5)])
    c = m.evaluate(whole)
    assert not c.valid and c.invalid_groups == ((0, 1, 2, 3, 4),)
    split = FusionPlan([(0, 1), (2, 3, 4)])
    c = m.evaluate(split)
    assert c.valid and c.mbu == max(m.fbeta((0, 1)), m.fbeta((2, 3, 4)))
    assert c.dram == m.fd((0, 1)) + m.fd((2, 3, 4))
    # an op whose weights alone exceed the buffer is unfusable and left out of DRAM and MBU
    tiny = LBDFCost(fg, 500)   # conv weights 584 >= 500
    assert tiny.unfusable == frozenset({0, 2})
    c = tiny.evaluate(FusionPlan.singletons(5))
    assert c.dram == sum(tiny.fd((v,)) for v in (1, 3, 4))


def test_reference_unfusable_counts() -> None:
    # the layer-fusion study (Mills et al.): at 1 B and 256 KB, 16/385 EfficientNet-B3 and 119/359 ResNet-152 ops
    # have weights >= the buffer
    from graphsub import zoo

    for name, ops, unfusable in (("efficientnet_b3", 385, 16), ("resnet152", 359, 119)):
        fg = fusion_graph(zoo.get(name))
        m = LBDFCost(fg, 256 * 1024)
        assert (fg.num_ops, len(m.unfusable)) == (ops, unfusable)
        assert all(fg.weight[v] >= 256 * 1024 for v in m.unfusable)
