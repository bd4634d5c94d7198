"""Graph -> torch.nn.Module (graphsub.frontends.torch_emit): the emitted module computes what the numpy
reference executor computes, keeps the weight names as state_dict keys, trains (autograd reaches every
trainable weight), refuses ops without a torch implementation, and its source is deterministic, valid,
self-contained Python."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import pytest
import torch

from graphsub import zoo
from graphsub.data import materialize, random_array, random_inputs, random_weights
from graphsub.errors import ExportError
from graphsub.execute import run
from graphsub.frontends.torch_emit import module_source, state_dict_keys, to_module
from graphsub.frontends.torch_ops import run_sig
from graphsub.ir import Builder
from graphsub.ir.graph import Graph
from graphsub.ir.node import make_sig
from graphsub.ops import REGISTRY

SEED = 5


def _outputs(module: torch.nn.Module, graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    out = module(*[torch.from_numpy(np.array(feeds[n])) for n in graph.input_names])
    outs = out if len(graph.outputs) > 1 else (out,)
    assert isinstance(outs, tuple) and len(outs) == len(graph.output_names)
    return dict(zip(graph.output_names, outs, strict=True))


def _check_against_reference(g: Graph, seed: int = SEED) -> torch.nn.Module:
    m = materialize(g, seed)
    feeds = random_inputs(m, seed)
    want = run(m, feeds)
    module = to_module(m)
    got = _outputs(module, m, feeds)
    for name, w in want.items():
        o = got[name].detach()
        assert tuple(o.shape) == w.shape, name
        assert str(o.dtype).removeprefix("torch.") == str(w.dtype), name
        np.testing.assert_allclose(o.numpy(), w, rtol=1e-3, atol=1e-3, err_msg=name)
    return module


ZOO = [
    pytest.param("resnet", {"blocks": 1}, id="resnet"),
    pytest.param("squeezenet", {}, id="squeezenet"),
    pytest.param("bert", {"layers": 1}, id="bert"),
    pytest.param("bert_corrected", {"layers": 1}, id="bert_corrected"),
    pytest.param("sru", {}, id="sru"),
    pytest.param("inception_e", {"blocks": 1}, id="inception_e"),
    pytest.param("mobilenet_v3_small", {"image_size": 64}, id="mobilenet_v3_small"),  # hardswish, SE blocks
    pytest.param("deeplabv3_mobilenet_v3_large", {"image_size": 32}, id="deeplabv3"),  # bilinear resize
    pytest.param("inception_v3", {}, id="inception_v3", marks=pytest.mark.slow),  # ~5 s
]


@pytest.mark.parametrize(("name", "kwargs"), ZOO)
def test_zoo_model_matches_reference_executor(name: str, kwargs: dict[str, Any]) -> None:
    _check_against_reference(zoo.get(name, **kwargs))


# ----------------------------------------------------------------------------- a graph with every kind of node


def _layout_graph() -> Graph:
    """Slice, gather (int weight and int input indices), pad, expand, cast, shape, resize, split, pools,
    weight transforms, constant generators; dotted, ONNX-style and clashing weight names; several outputs."""
    b = Builder("layout")
    x = b.input("x", (1, 4, 8, 8))
    ids = b.input("input.ids", (2, 3), "int64")
    emb = b.weight("embed.weight", (10, 6))
    picked = b.gather(emb, ids, axis=0)  # (2, 3, 6)
    rows = b.gather(picked, b.weight("onnx::Gather_7", (2,), dtype="int64"), axis=2)  # (2, 3, 2)
    back = b.slice(rows, starts=(-1,), ends=(-(2**63),), axes=(1,), steps=(-2,))  # (2, 2, 2)
    k = b.enlarge(b.weight("layer1.0.conv1.weight", (4, 4, 1, 1)), kernel=(3, 3))
    y = b.conv2d(x, k, b.weight("layer1.0.conv1.bias", (4,)), pads="SAME", act="relu")
    gw = b.merge_gconv(b.weight("/Constant_output_0", (4, 2, 3, 3)), groups=2, count=2)
    y = b.conv2d(b.pad(y, pads=(0, 0, 1, 1, 0, 0, 1, 1), mode="reflect"), gw, pads="VALID")
    y = b.maxpool2d(y, kernel=(2, 2), strides=(2, 2), pads="VALID")
    y = b.avgpool2d(b.resize(y, sizes=(1, 4, 6, 6), nearest_mode="floor",
                             coordinate_transformation_mode="asymmetric"),
                    kernel=(3, 3), strides=(1, 1), pads="SAME", count_include_pad=False)
    lo, hi = b.split(y, axis=1, sizes=(1, 3))
    eye = b.const_imm(n=6)
    z = b.matmul(b.reshape(hi, shape=(3, 6, 6)), eye)
    z = z * b.expand(b.weight("training", (1, 1, 6)), shape=(3, 6, 6))  # shadows nn.Module.training
    z = b.cast(b.cast(z, to="float64"), to="float32")
    edge = b.pad(b.weight("a", (3, 4)), pads=(2, 0, 1, 3), mode="edge")
    return b.build({"z": z, "lo": lo, "back": back, "edge": b.tanh(edge) + b.weight("a.b", (6, 7)),
                    "shape": b.shape(z, start=1)})


def test_every_kind_of_node_matches_reference() -> None:
    _check_against_reference(_layout_graph())


def test_weight_names_are_state_dict_keys() -> None:
    g = materialize(_layout_graph(), SEED)
    m = to_module(g)
    names = {g.nodes[n].sig.attr["name"] for n in g.ops_of("weight")}
    keys: dict[str, str] = m.graph_names  # type: ignore[assignment]
    assert set(keys) == names
    assert set(m.state_dict()) == set(keys.values())
    assert len(set(keys.values())) == len(keys)
    for dotted in ("embed.weight", "layer1.0.conv1.weight", "layer1.0.conv1.bias", "a"):
        assert keys[dotted] == dotted
    assert isinstance(m.get_submodule("layer1.0.conv1"), torch.nn.Module)
    for odd in ("onnx::Gather_7", "/Constant_output_0", "training", "a.b"):
        assert keys[odd] != odd and keys[odd].isidentifier(), keys[odd]
    assert m.training is True  # the weight named "training" did not shadow the flag
    for name, key in keys.items():
        np.testing.assert_array_equal(m.state_dict()[key].numpy(), g.params[name])


def test_state_dict_keys_are_deterministic_and_unique() -> None:
    names = ["z.w", "a", "a.b", "onnx::A", "onnx__A", "x.forward.y", "graph_names", "1.0", "", "b..c", "if.x"]
    keys = state_dict_keys(names)
    assert keys == state_dict_keys(list(reversed(names)))
    assert len(set(keys.values())) == len(names)
    assert keys["z.w"] == "z.w" and keys["a"] == "a" and keys["1.0"] == "1.0" and keys["if.x"] == "if.x"
    for odd in ("a.b", "onnx::A", "x.forward.y", "graph_names", "", "b..c"):
        assert keys[odd] != odd and "." not in keys[odd]
    assert keys["onnx__A"] == "onnx__A"  # a valid name keeps its key; the sanitized one moves aside


def test_load_state_dict_of_the_original_pytorch_model() -> None:
    """A PyTorch module exported to ONNX and imported: its own state dict loads into the emitted module (the
    names ONNX kept), and outputs and gradients then match the original's."""
    import onnx

    from graphsub.frontends.onnx_import import from_onnx
    from graphsub.frontends.torch_export import export_module
    from graphsub.zoo.torch_modules import InceptionCNN

    torch.manual_seed(0)
    original = InceptionCNN().eval()
    x = torch.randn(1, 3, 32, 32)  # smaller than EXAMPLES["InceptionCNN"]: it ends in a global pool
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        export_module(original, [x], path)
        g = from_onnx(onnx.load(path))
    sd = original.state_dict()
    shared = {n for n in g.leaves if n in sd}
    assert len(shared) >= 30
    module = to_module(g, params=random_weights(g, 1, only_missing=False, known=None))  # scrambled weights
    assert not torch.allclose(module(x), original(x), atol=1e-3)
    missing, unexpected = module.load_state_dict({k: v for k, v in sd.items() if k in shared}, strict=False)
    assert unexpected == [] and len(missing) == len(g.ops_of("weight")) - len(shared)
    module.load_state_dict({k: torch.from_numpy(np.array(g.params[n])) for n, k in module.graph_names.items()
                            if n not in shared}, strict=False)  # the weights ONNX renamed (BN folded)
    want, got = original(x), module(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    want.square().sum().backward()
    got.square().sum().backward()
    params = dict(module.named_parameters())
    for name, p in original.named_parameters():
        if name in shared:
            assert params[name].grad is not None, name
            torch.testing.assert_close(params[name].grad, p.grad, rtol=1e-3, atol=1e-4, msg=name)


# ----------------------------------------------------------------------------- training


def test_backward_reaches_every_trainable_weight() -> None:
    g = materialize(_layout_graph(), SEED)
    m = to_module(g)
    feeds = random_inputs(g, SEED)
    out = _outputs(m, g, feeds)
    floats = {n: t for n, t in g.params.items() if t.dtype.kind == "f"}
    assert {n for n, _ in m.named_parameters()} == {m.graph_names[n] for n in floats}
    assert [n for n, b in m.named_buffers() if n in m.state_dict()] == [m.graph_names["onnx::Gather_7"]]
    loss = sum(o.float().sum() for k, o in out.items() if o.dtype.is_floating_point)
    assert isinstance(loss, torch.Tensor) and loss.requires_grad
    loss.backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
    assert m.get_parameter("layer1.0.conv1.weight").grad.abs().sum() > 0  # type: ignore[union-attr]


def test_non_trainable_weights_are_buffers() -> None:
    g = materialize(zoo.get("resnet", blocks=1), SEED)
    m = to_module(g, trainable={"r1_conv1_w"})
    assert [n for n, _ in m.named_parameters()] == ["r1_conv1_w"]
    assert {n for n, _ in m.named_buffers()} == {"r1_short_w", "r1_conv2_w"}
    m(torch.ones(g.input_types[0].shape)).sum().backward()
    assert m.r1_conv1_w.grad is not None
    assert m.r1_short_w.grad is None and not m.r1_short_w.requires_grad
    assert not any(b.requires_grad for b in m.buffers())


def test_a_few_sgd_steps_reduce_the_loss() -> None:
    b = Builder("mlp")
    x = b.input("x", (16, 8))
    h = b.matmul(x, b.weight("fc1.weight", (8, 32)), act="relu") + b.weight("fc1.bias", (32,))
    g = materialize(b.build({"y": b.matmul(h, b.weight("fc2.weight", (32, 4))), "h": h}), SEED)
    m = to_module(g)
    xs = torch.from_numpy(random_inputs(g, SEED)["x"])
    target = torch.linspace(-1, 1, 64).reshape(16, 4)
    opt = torch.optim.SGD(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        y, _ = m(xs)
        loss = (y - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# ----------------------------------------------------------------------------- errors


def test_opaque_node_is_an_export_error_naming_it() -> None:
    b = Builder("with_opaque")
    x = b.input("x", (2, 3))
    y = b.op("opaque", b.relu(x), op_type="MysteryOp", domain="com.example", out_types=(((2, 3), "float32"),),
             input_slots=(0,), num_onnx_inputs=1, output_slots=(0,), num_onnx_outputs=1)
    g = b.build(b.sigmoid(y))
    nid = next(iter(g.ops_of("opaque")))
    for emit in (module_source, to_module):
        with pytest.raises(ExportError, match=rf"%{nid} \(opaque com\.example::MysteryOp\)"):
            emit(g)


def test_missing_data_and_bad_trainable_names_are_export_errors() -> None:
    g = _layout_graph()
    with pytest.raises(ExportError, match=r"weight '.+' of graph 'layout' has no data"):
        to_module(g, params={})
    m = materialize(g, SEED)
    with pytest.raises(ExportError, match="nope"):
        to_module(m, trainable={"nope"})
    with pytest.raises(ExportError, match="onnx::Gather_7"):
        to_module(m, trainable={"onnx::Gather_7"})
    with pytest.raises(ExportError, match="shape"):
        to_module(m, params={"a": np.zeros((4, 3), np.float32)})


# ----------------------------------------------------------------------------- source


def test_module_source_is_deterministic_self_contained_python() -> None:
    src = module_source(_layout_graph(), "LayoutNet")
    assert src == module_source(_layout_graph(), "LayoutNet")  # rebuilt graph: same source
    compile(src, "layout_net.py", "exec")
    imports = [line for line in src.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["import torch", "from graphsub.frontends import torch_ops"]
    g = materialize(_layout_graph(), SEED)
    reference = to_module(g)
    namespace: dict[str, Any] = {}
    exec(src, namespace)
    fresh = namespace["LayoutNet"]()
    fresh.load_state_dict(reference.state_dict())
    feeds = random_inputs(g, SEED)
    want, got = _outputs(reference, g, feeds), _outputs(fresh, g, feeds)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
    assert fresh.graph_names == reference.graph_names
    assert fresh.input_names == g.input_names and fresh.output_names == g.output_names


def test_forward_signature_and_single_output() -> None:
    src = module_source(zoo.get("resnet", blocks=1))
    assert "    def forward(self, input):" in src
    assert src.rstrip().endswith("return relu")
    assert "torch.no_grad" not in src and ".detach(" not in src


# ----------------------------------------------------------------------------- torch ops


WEIGHT_OPS = [pytest.param(n, i, id=f"{n}-{i}") for n, d in sorted(REGISTRY.items()) if d.weight_op
              and d.reference is not None for i in range(len(d.samples))]


@pytest.mark.parametrize(("name", "i"), WEIGHT_OPS)
def test_weight_transforms_match_reference(name: str, i: int) -> None:
    """Weight ops are not run by the CUDA model (test_torch_ops skips them) but run in emitted modules."""
    sample = REGISTRY[name].samples[i]
    sig = make_sig(name, sample.attrs, sample.in_types)
    rng = np.random.default_rng(i)
    xs = [random_array(t, rng, "any") for t in sample.in_types]
    (want,) = REGISTRY[name].reference(xs, sig.attr)  # type: ignore[misc]
    (got,) = run_sig(sig, [torch.from_numpy(np.array(x)) for x in xs])
    np.testing.assert_array_equal(got.numpy(), want)


EDGE_CASES = [
    ("gather", {"axis": 1}, [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([-1, 0, -4])]),
    ("pad", {"pads": (1, 0, 2, 3), "mode": "reflect"}, [np.arange(12, dtype=np.float32).reshape(3, 4)]),
    ("pad", {"pads": (0, 1, 0, 0, 2, 0), "mode": "edge"}, [np.arange(24, dtype=np.float32).reshape(2, 3, 4)]),
    ("pad", {"pads": (1, 2), "value": 7.0}, [np.arange(3, dtype=np.int64)]),
    ("slice", {"starts": (0,), "ends": (3,), "axes": (1,)}, [np.zeros((2, 0, 3), np.float32)]),
    ("slice", {"starts": (5, 0), "ends": (-100, 4), "steps": (-2, 3)}, [np.arange(42.0).reshape(7, 6)]),
    ("expand", {"shape": (2, 1, 1)}, [np.arange(3.0).reshape(3, 1)]),
    ("cast", {"to": "bool"}, [np.array([0.0, 0.5, -2.0])]),
    ("shape", {"start": -2}, [np.zeros((2, 3, 4))]),
]


@pytest.mark.parametrize(("op", "attrs", "xs"), EDGE_CASES)
def test_layout_op_edge_cases(op: str, attrs: dict[str, Any], xs: list[np.ndarray]) -> None:
    from graphsub.ops.types import make_type

    sig = make_sig(op, attrs, [make_type(x.shape, str(x.dtype)) for x in xs])
    (want,) = REGISTRY[op].reference(xs, sig.attr)  # type: ignore[misc]
    (got,) = run_sig(sig, [torch.from_numpy(x) for x in xs])
    assert got.dtype == torch.from_numpy(np.asarray(want)).dtype
    np.testing.assert_array_equal(got.numpy(), want)
