"""Every OpDef is complete, and its reference implementation agrees with onnxruntime
(through the OpDef's own exporter) on each of its samples."""

from __future__ import annotations

import numpy as np
import pytest

from graphsub.data import random_array, slot_role
from graphsub.frontends.onnx_export import export_graph
from graphsub.frontends.ort import run_model
from graphsub.ir import Builder
from graphsub.ir.node import make_sig
from graphsub.ops import REGISTRY

# "opaque" is exercised by the frontend round-trip tests (it has no fixed semantics)
COMPUTE_OPS = sorted(name for name, d in REGISTRY.items() if not d.leaf and name != "opaque")
SAMPLES = [
    pytest.param(name, i, id=f"{name}-{i}")
    for name in COMPUTE_OPS
    for i in range(len(REGISTRY[name].samples))
]

#: the TASO operator set plus what real ONNX models need (issue #2)
REQUIRED_OPS = {
    "conv2d", "matmul", "add", "mul", "sub", "div", "smul", "relu", "sigmoid", "tanh",
    "maxpool2d", "avgpool2d", "global_avgpool", "batchnorm", "concat", "split", "transpose",
    "reshape", "enlarge", "merge_gconv", "const_iconv", "const_imm", "const_pool", "const_one",
    "gemm", "flatten", "clip", "identity", "erf", "pow", "sqrt", "reduce_mean", "softmax",
    "layernorm", "gather", "unsqueeze", "squeeze", "slice", "shape", "cast", "hardsigmoid",
    "hardswish", "resize", "pad",
}


def test_required_ops_registered() -> None:
    missing = REQUIRED_OPS - set(REGISTRY)
    assert not missing, f"ops missing from the registry: {sorted(missing)}"


@pytest.mark.parametrize("name", COMPUTE_OPS)
def test_opdef_complete(name: str) -> None:
    d = REGISTRY[name]
    assert d.doc.strip(), "doc"
    assert d.reference is not None, "reference implementation"
    assert d.onnx_export is not None, "ONNX exporter"
    assert d.onnx_import or d.onnx_import_note, "ONNX importer (or a note why none)"
    assert d.samples, "at least one sample checked against onnxruntime"
    for s in d.samples:  # samples are valid: shape inference succeeds, costs are sane ints
        sig = make_sig(name, s.attrs, s.in_types)
        assert sig.out_types
        flops = d.flops(sig.in_types, sig.out_types, sig.attr)
        nbytes = d.bytes_moved(sig.in_types, sig.out_types, sig.attr)
        assert isinstance(flops, int) and flops >= 0
        assert isinstance(nbytes, int) and nbytes >= 0


@pytest.mark.parametrize(("name", "i"), SAMPLES)
def test_reference_agrees_with_onnxruntime(name: str, i: int) -> None:
    d = REGISTRY[name]
    sample = d.samples[i]
    sig = make_sig(name, sample.attrs, sample.in_types)
    rng = np.random.default_rng(1234 + i)
    feeds = {}
    b = Builder(f"{name}_{i}")
    vals = []
    for k, t in enumerate(sample.in_types):
        role = sample.roles[k] if sample.roles else slot_role(sig, k)
        feeds[f"x{k}"] = random_array(t, rng, role)
        vals.append(b.input(f"x{k}", t.shape, t.dtype))
    outs = b.op_multi(name, *vals, **dict(sample.attrs))
    g = b.build(list(outs))
    expected = d.reference([feeds[f"x{k}"] for k in range(len(vals))], sig.attr)
    got = run_model(export_graph(g), feeds)
    assert len(got) == len(expected) == len(sig.out_types)
    for e, o, t in zip(expected, got, sig.out_types, strict=True):
        e = np.asarray(e)
        assert e.shape == t.shape, f"reference shape {e.shape} != inferred {t.shape}"
        assert o.shape == t.shape, f"onnxruntime shape {o.shape} != inferred {t.shape}"
        assert str(e.dtype) == t.dtype or t.dtype == "bfloat16", f"reference dtype {e.dtype} != {t.dtype}"
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(o, e, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(o, e)
