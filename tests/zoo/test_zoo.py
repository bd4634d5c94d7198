"""The model zoo: exact op counts and histograms (the peers' tables), shapes, sized variants,
determinism, registry behaviour."""

from __future__ import annotations

import pytest

from graphsub import zoo
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph

# name -> (num_ops, op histogram, input shapes, output shapes) for the default parameters
EXPECTED: dict[str, tuple[int, dict[str, int], list[tuple[int, ...]], list[tuple[int, ...]]]] = {
    "inception_v3": (
        138,
        {"conv2d": 94, "maxpool2d": 5, "avgpool2d": 9, "concat": 30},
        [(1, 3, 299, 299)],
        [(1, 2048, 1, 1)],
    ),
    "inception_e": (
        39,
        {"conv2d": 27, "maxpool2d": 3, "concat": 9},
        [(1, 1280, 8, 8)],
        [(1, 2048, 8, 8)],
    ),
    "resnet": (
        40,
        {"conv2d": 24, "add": 8, "relu": 8},
        [(1, 256, 14, 14)],
        [(1, 256, 14, 14)],
    ),
    "resnext50": (
        86,
        {"conv2d": 53, "maxpool2d": 1, "add": 16, "relu": 16},
        [(1, 3, 224, 224)],
        [(1, 2048, 7, 7)],
    ),
    "nasnet_a": (
        383,
        {"conv2d": 217, "maxpool2d": 7, "avgpool2d": 51, "add": 90, "concat": 18},
        [(1, 3, 224, 224)],
        [(1, 5120, 7, 7)],
    ),
    "sru": (
        11,
        {"matmul": 3, "sigmoid": 2, "mul": 4, "add": 2},
        [(1, 1024), (1, 1024)],
        [(1, 1024)],
    ),
    "nasrnn": (
        230,
        {"matmul": 80, "add": 55, "mul": 20, "relu": 10, "sigmoid": 25, "tanh": 40},
        [(1, 512)] * 5,
        [(1, 512)],
    ),
    "bert": (
        113,
        {"matmul": 48, "reshape": 32, "transpose": 32, "relu": 1},
        [(64, 1024)],
        [(64, 1024)] * 9,
    ),
    "bert_corrected": (
        129,
        {"matmul": 48, "reshape": 32, "transpose": 32, "relu": 1, "softmax": 8, "mul": 8},
        [(64, 1024)],
        [(64, 1024)],
    ),
    "squeezenet": (
        65,
        {"conv2d": 26, "relu": 26, "maxpool2d": 3, "concat": 8, "global_avgpool": 1,
         "flatten": 1},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "vgg16": (
        38,
        {"conv2d": 13, "relu": 15, "maxpool2d": 5, "avgpool2d": 1, "flatten": 1, "gemm": 3},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "vgg19": (
        44,
        {"conv2d": 16, "relu": 18, "maxpool2d": 5, "avgpool2d": 1, "flatten": 1, "gemm": 3},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "alexnet": (
        20,
        {"conv2d": 5, "relu": 7, "maxpool2d": 3, "avgpool2d": 1, "flatten": 1, "gemm": 3},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "resnet18": (
        49,
        {"conv2d": 20, "relu": 17, "maxpool2d": 1, "add": 8, "global_avgpool": 1,
         "flatten": 1, "gemm": 1},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "resnet50": (
        122,
        {"conv2d": 53, "relu": 49, "maxpool2d": 1, "add": 16, "global_avgpool": 1,
         "flatten": 1, "gemm": 1},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    # layer-fusion CNNs (issue 9); counts derived by hand in graphsub.zoo.fusion_cnns
    "resnet101": (
        241,
        {"add": 33, "conv2d": 104, "flatten": 1, "gemm": 1, "global_avgpool": 1, "maxpool2d": 1,
         "relu": 100},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "resnet152": (
        360,
        {"add": 50, "conv2d": 155, "flatten": 1, "gemm": 1, "global_avgpool": 1, "maxpool2d": 1,
         "relu": 151},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "mobilenet_v2": (
        100,
        {"add": 10, "clip": 35, "conv2d": 52, "flatten": 1, "gemm": 1, "global_avgpool": 1},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "mobilenet_v3_small": (
        122,
        {"add": 6, "conv2d": 52, "flatten": 1, "gemm": 2, "global_avgpool": 10, "hardsigmoid": 9,
         "hardswish": 19, "mul": 9, "relu": 14},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "mobilenet_v3_large": (
        140,
        {"add": 10, "conv2d": 62, "flatten": 1, "gemm": 2, "global_avgpool": 9, "hardsigmoid": 8,
         "hardswish": 21, "mul": 8, "relu": 19},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "efficientnet_b0": (
        239,
        {"add": 9, "conv2d": 81, "flatten": 1, "gemm": 1, "global_avgpool": 17, "mul": 65,
         "sigmoid": 65},
        [(1, 3, 224, 224)],
        [(1, 1000)],
    ),
    "efficientnet_b3": (
        386,
        {"add": 19, "conv2d": 130, "flatten": 1, "gemm": 1, "global_avgpool": 27, "mul": 104,
         "sigmoid": 104},
        [(1, 3, 300, 300)],
        [(1, 1000)],
    ),
    "deeplabv3_mobilenet_v3_large": (
        154,
        {"add": 10, "concat": 1, "conv2d": 70, "global_avgpool": 9, "hardsigmoid": 8,
         "hardswish": 20, "mul": 8, "relu": 26, "resize": 2},
        [(1, 3, 513, 513)],
        [(1, 21, 513, 513)],
    ),
}

_CACHE: dict[str, Graph] = {}


def built(name: str) -> Graph:
    if name not in _CACHE:
        _CACHE[name] = zoo.get(name)
    return _CACHE[name]


def test_every_model_is_tested() -> None:
    assert set(EXPECTED) == set(zoo.list_models())
    assert set(zoo.MODELS) == set(zoo.list_models())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_model_structure(name: str) -> None:
    num_ops, hist, in_shapes, out_shapes = EXPECTED[name]
    g = built(name)
    assert g.name == name
    assert g.num_ops == num_ops == zoo.MODELS[name].expected_ops
    assert g.op_histogram() == dict(sorted(hist.items()))
    assert [t.shape for t in g.input_types] == in_shapes
    assert [t.shape for t in g.output_types] == out_shapes
    assert all(t.dtype == "float32" for t in (*g.input_types, *g.output_types))
    # TASO semantics: every op output is consumed or is a graph output
    outs = set(g.outputs)
    for nid in g.nodes:
        node = g.node(nid)
        if node.op in ("input", "weight"):
            continue
        assert g.users(nid) or any(r.node == nid for r in outs), f"{name}: %{nid} is dead"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_build_is_deterministic(name: str) -> None:
    g1, g2 = zoo.get(name), zoo.MODELS[name].builder(**zoo.MODELS[name].params)
    assert g1 == g2
    assert g1.structural_hash() == g2.structural_hash()
    assert sorted(g1.leaves) == sorted(g2.leaves)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_inputs_and_weights_are_named(name: str) -> None:
    g = built(name)
    names = g.input_names
    if name in ("sru",):
        assert names == ("x0", "c")
    elif name == "nasrnn":
        assert names == tuple(f"x{i}" for i in range(5))
    else:
        assert names == ("input",)
    weights = [g.node(n).sig.attr["name"] for n in g.weights()]
    assert weights and len(set(weights)) == len(weights)
    # shapes only, no data -- except the attention scale constants of the corrected BERT
    assert all(k.endswith("_scale") for k in g.params) and (bool(g.params) == (name == "bert_corrected"))


def test_taso_model_counts_match_peer_tables() -> None:
    # OCGGS Table 2 (NasNet-A: the script's 383; the paper's 293 = 383 - 90 adds)
    table = {"inception_v3": 138, "resnet": 40, "resnext50": 86, "nasnet_a": 383, "sru": 11,
             "nasrnn": 230, "bert": 113}
    assert {n: built(n).num_ops for n in table} == table
    assert built("nasnet_a").num_ops - built("nasnet_a").op_histogram()["add"] == 293


def test_torchvision_counts_without_flatten() -> None:
    # compute ops excluding Flatten, as in torchvision's ONNX exports
    want = {"resnet18": 48, "vgg16": 37, "squeezenet": 64, "vgg19": 43, "alexnet": 19,
            "resnet50": 121}
    got = {n: built(n).num_ops - built(n).op_histogram()["flatten"] for n in want}
    assert got == want


@pytest.mark.parametrize("blocks", [1, 2, 4, 8])
def test_resnet_blocks(blocks: int) -> None:
    g = zoo.get("resnet", blocks=blocks)
    assert g.num_ops == 5 * blocks
    assert g.op_histogram() == {"add": blocks, "conv2d": 3 * blocks, "relu": blocks}


@pytest.mark.parametrize("blocks", [1, 2, 3, 5])
def test_inception_e_blocks(blocks: int) -> None:
    g = zoo.get("inception_e", blocks=blocks)
    assert g.num_ops == 13 * blocks
    assert g.output_types[0].shape == (1, 2048, 8, 8)


@pytest.mark.parametrize("length", [1, 2, 20])
def test_sru_length(length: int) -> None:
    g = zoo.get("sru", length=length)
    assert g.num_ops == 11 * length
    assert g.input_names == (*(f"x{i}" for i in range(length)), "c")
    assert g.output_names == tuple(f"h{i}" for i in range(length))


@pytest.mark.parametrize("length", [1, 5, 10])
def test_nasrnn_length(length: int) -> None:
    g = zoo.get("nasrnn", length=length)
    assert g.num_ops == 46 * length
    assert "h_init" in g.leaves and g.node(g.leaf("h_init")).op == "weight"


def test_bert_variants() -> None:
    faithful, corrected = built("bert"), built("bert_corrected")
    assert zoo.get("bert", variant="corrected") == corrected
    assert faithful != corrected
    assert faithful.output_names == ("output", *(f"attn{i}" for i in range(8)))
    assert corrected.output_names == ("output",)
    # faithful: the output chain never reads the attention results
    out = faithful.outputs[0].node
    seen, stack = set(), [out]
    while stack:
        nid = stack.pop()
        if nid not in seen:
            seen.add(nid)
            stack.extend(r.node for r in faithful.node(nid).inputs)
    assert not any(faithful.node(n).op == "transpose" for n in seen)
    assert zoo.get("bert", layers=2).num_ops == 29
    assert zoo.get("bert_corrected", layers=2).num_ops == 33
    with pytest.raises(GraphsubError, match="variant"):
        zoo.get("bert", variant="fixed")


@pytest.mark.parametrize(
    ("name", "extra"),
    [("squeezenet", 26), ("vgg16", 13), ("vgg19", 16), ("alexnet", 5), ("resnet18", 20),
     ("resnet50", 53)],
)
def test_batchnorm_variant(name: str, extra: int) -> None:
    g = zoo.get(name, batchnorm=True)
    base = built(name)
    assert g.num_ops == base.num_ops + extra
    assert g.op_histogram()["batchnorm"] == extra == base.op_histogram()["conv2d"]
    assert g.output_types == base.output_types
    conv_bias = [n for n in g.ops_of("conv2d") if len(g.node(n).inputs) == 3]
    assert not conv_bias
    assert all(len(base.node(n).inputs) == 3 for n in base.ops_of("conv2d"))


def test_intermediate_shapes() -> None:
    def in_shapes(g: Graph, op: str) -> list[tuple[int, ...]]:
        return sorted(g.type_of(g.node(n).inputs[0]).shape for n in g.ops_of(op))

    # classifier inputs: AlexNet 256*6*6, VGG 512*7*7
    assert in_shapes(built("alexnet"), "gemm")[-1] == (1, 9216)
    assert in_shapes(built("vgg16"), "gemm")[-1] == (1, 25088)
    # SqueezeNet ceil-mode pools: 109 -> 54 -> 27 -> 13
    pools = in_shapes(built("squeezenet"), "maxpool2d")
    assert sorted(s[2] for s in pools) == [27, 54, 109]
    assert in_shapes(built("squeezenet"), "global_avgpool") == [(1, 1000, 13, 13)]
    # ResNeXt grouped convs: 32 groups everywhere
    g = built("resnext50")
    for n in g.ops_of("conv2d"):
        x, w = (g.type_of(r).shape for r in g.node(n).inputs[:2])
        if w[2] == 3:
            assert x[1] // w[1] == 32
    # Inception-v3 grid sizes before the blocks: 35 (A), 17 (C), 8 (E)
    g = built("inception_v3")
    assert in_shapes(g, "avgpool2d")[-1] == (1, 2048, 8, 8)


def test_registry() -> None:
    assert zoo.list_models()[0] == "inception_v3"
    assert set(zoo.list_models(family="torchvision")) == {
        "squeezenet", "vgg16", "vgg19", "alexnet", "resnet18", "resnet50", "resnet101", "resnet152",
        "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b3",
        "deeplabv3_mobilenet_v3_large"}
    assert len(zoo.list_models(tag="fusion")) == 12
    assert zoo.list_models(tag="rnn") == ["sru", "nasrnn"]
    m = zoo.MODELS["resnet"]
    assert m.params == {"blocks": 8} and m.family == "taso" and "sized" in m.tags
    with pytest.raises(TypeError):
        m.params["blocks"] = 2  # type: ignore[index]
    assert hash(m) == hash(zoo.MODELS["resnet"])


def test_unknown_model_and_parameter() -> None:
    with pytest.raises(zoo.ZooError, match=r"known models: .*resnet50") as e:
        zoo.get("resnet51")
    assert isinstance(e.value, GraphsubError)
    with pytest.raises(zoo.ZooError, match=r"accepted: \[.blocks.\]"):
        zoo.get("resnet", depth=3)
    with pytest.raises(zoo.ZooError, match="blocks"):
        zoo.get("resnet", blocks=0)
