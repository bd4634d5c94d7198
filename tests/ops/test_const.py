"""Constant generators (graphsub.ops.const): values, the identities they exist for (identity
conv / matmul, depthwise conv == average pooling), attribute validation and export."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from graphsub.errors import AttrError
from graphsub.ir import Builder, make_sig
from graphsub.ops.registry import ExportNode, get_op

CONST_OPS = ("const_iconv", "const_imm", "const_pool", "const_one")


def value(op: str, **attrs: Any) -> np.ndarray:
    sig = make_sig(op, attrs, ())
    fn = sig.opdef.reference
    assert fn is not None
    (out,) = fn([], sig.attr)
    assert out.shape == sig.out_types[0].shape and str(out.dtype) == sig.out_types[0].dtype
    return out


def conv2d_same(x: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """Plain NCHW cross-correlation, stride 1, zero 'same' padding (odd kernels)."""
    n, _, h, wd = x.shape
    o, i, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (kh // 2, (kh - 1) // 2), (kw // 2, (kw - 1) // 2)))
    out = np.zeros((n, o, h, wd), dtype=np.float64)
    per_group = o // groups
    for oc in range(o):
        g = oc // per_group
        for dy in range(kh):
            for dx in range(kw):
                patch = xp[:, g * i:(g + 1) * i, dy:dy + h, dx:dx + wd]
                out[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, dy, dx])
    return out


@pytest.mark.parametrize("op", CONST_OPS)
def test_opdef_flags(op: str) -> None:
    d = get_op(op)
    assert d.weight_op and not d.leaf and d.inputs == () and d.family == "const"
    assert not d.onnx_import and d.onnx_import_note and d.onnx_export and d.doc
    assert len(d.samples) >= 2
    for s in d.samples:
        sig = make_sig(op, s.attrs, s.in_types)
        assert d.flops((), sig.out_types, sig.attr) == 0
        assert d.bytes_moved((), sig.out_types, sig.attr) == 0


@pytest.mark.parametrize(("shape", "groups"), [((4, 4, 3, 3), 1), ((3, 3, 1, 5), 1),
                                                ((4, 1, 3, 3), 4)])
def test_iconv_is_identity(shape: tuple[int, ...], groups: int) -> None:
    w = value("const_iconv", shape=shape)
    assert w.sum() == shape[0]
    x = np.random.default_rng(0).standard_normal((2, shape[0], 5, 6)).astype(np.float32)
    np.testing.assert_allclose(conv2d_same(x, w, groups), x, atol=1e-6)


def test_imm_and_one() -> None:
    eye = value("const_imm", n=4)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(x @ eye, x)
    ones = value("const_one", shape=(2, 3), dtype="int64")
    assert ones.dtype == np.int64 and ones.tolist() == [[1, 1, 1], [1, 1, 1]]
    assert value("const_one", shape=()).shape == ()


def test_pool_is_average() -> None:
    w = value("const_pool", shape=(2, 1, 3, 3))
    np.testing.assert_allclose(w, np.full((2, 1, 3, 3), 1 / 9))
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)
    got = conv2d_same(x, w, groups=2)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    avg = np.mean([xp[:, :, dy:dy + 4, dx:dx + 4] for dy in range(3) for dx in range(3)], axis=0)
    np.testing.assert_allclose(got, avg, atol=1e-6)  # avgpool with count_include_pad


@pytest.mark.parametrize(("op", "attrs", "match"), [
    ("const_iconv", {"shape": (4, 4, 2, 3)}, "odd"),
    ("const_iconv", {"shape": (4, 2, 3, 3)}, "I == O or I == 1"),
    ("const_iconv", {"shape": (4, 4, 3)}, "four positive ints"),
    ("const_pool", {"shape": (4, 2, 3, 3)}, "depthwise"),
    ("const_pool", {"shape": (4, 1, 0, 3)}, "four positive ints"),
    ("const_imm", {"n": 0}, "n must be >= 1"),
    ("const_one", {"shape": (2, -1)}, "negative"),
    ("const_one", {"shape": (2,), "dtype": "complex64"}, "dtype"),
])
def test_bad_attrs(op: str, attrs: Mapping[str, Any], match: str) -> None:
    with pytest.raises(AttrError, match=match):
        make_sig(op, attrs, ())


class RecordingExportCtx:
    opset = 17

    def __init__(self) -> None:
        self.nodes: list[tuple[str, list[str], dict[str, Any], list[str]]] = []

    def emit(self, op_type: str, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None,
             *, outputs: Sequence[str] | None = None, num_outputs: int = 1,
             domain: str = "") -> list[str]:
        self.nodes.append((op_type, list(inputs), dict(attrs or {}), list(outputs or [])))
        return list(outputs or [])

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        raise AssertionError("constants are exported as Constant nodes")


@pytest.mark.parametrize("op", CONST_OPS)
def test_export_constant_node(op: str) -> None:
    d = get_op(op)
    sig = make_sig(op, d.samples[-1].attrs, ())
    ctx = RecordingExportCtx()
    assert d.onnx_export is not None
    d.onnx_export(ctx, ExportNode(op, sig.attr, (), ("y",), (), sig.out_types))
    ((op_type, inputs, attrs, outputs),) = ctx.nodes
    assert (op_type, inputs, outputs) == ("Constant", [], ["y"])
    np.testing.assert_array_equal(attrs["value"], value(op, **dict(sig.attr)))


def test_in_a_graph() -> None:
    b = Builder()
    x = b.input("x", (3, 4))
    g = b.build(b.add(x, b.const_one(shape=(3, 4))))
    assert sorted(n.op for n in g.nodes.values()) == ["add", "const_one", "input"]
