"""Shape-family ops (graphsub.ops.shape and graphsub.ops.layout): shape inference and its
errors, numpy references, importers (through a fake OnnxImportCtx) and exporters (through a
recording OnnxExportCtx)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from graphsub.errors import AttrError, ShapeError
from graphsub.ir import Builder, TensorType, make_sig
from graphsub.ops.registry import ONNX_IMPORTERS, ExportNode, Imported, Unsupported, get_op

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SHAPE_OPS = ("concat", "split", "transpose", "reshape", "flatten", "unsqueeze", "squeeze",
             "expand", "shape", "slice", "gather", "pad", "resize")


class FakeImportCtx:
    """OnnxImportCtx over explicit input types, constant inputs and attributes."""

    def __init__(self, op_type: str, in_types: Sequence[TensorType | None],
                 consts: Mapping[int, Any] | None = None, attrs: Mapping[str, Any] | None = None,
                 opset: int = 17, num_outputs: int = 1):
        self.op_type, self.domain, self.opset, self.name = op_type, "", opset, "node"
        self.in_types = list(in_types)
        self.consts = {i: np.asarray(v) for i, v in (consts or {}).items()}
        self.attrs = dict(attrs or {})
        self.num_inputs, self.num_outputs = len(self.in_types), num_outputs

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def has_input(self, i: int) -> bool:
        return i < self.num_inputs and self.in_types[i] is not None

    def input_type(self, i: int) -> TensorType:
        t = self.in_types[i]
        assert t is not None
        return t

    def const_input(self, i: int) -> np.ndarray | None:
        return self.consts.get(i)

    def output_used(self, i: int) -> bool:
        return i < self.num_outputs


def imp(op_type: str, x: Sequence[int], consts: Mapping[int, Any] | None = None,
        attrs: Mapping[str, Any] | None = None, n_inputs: int = 1, **kw: Any) -> Imported:
    """Import an ONNX node whose input 0 has shape ``x``; ``consts`` are constant inputs and
    inputs below ``n_inputs`` exist (non-constant unless in ``consts``)."""
    consts = dict(consts or {})
    n = max([n_inputs, *(i + 1 for i in consts)])
    types: list[TensorType | None] = [TensorType(tuple(x))] + [
        TensorType((1,), "int64") if i in consts or i < n_inputs else None for i in range(1, n)
    ]
    importer = next(fn for name, fn in ONNX_IMPORTERS[("", op_type)]
                    if get_op(name).family == "shape")
    return importer(FakeImportCtx(op_type, types, consts, attrs, **kw))


class RecordingExportCtx:
    """OnnxExportCtx that records emitted nodes and constants."""

    def __init__(self, opset: int = 17):
        self.opset = opset
        self.nodes: list[tuple[str, list[str], dict[str, Any]]] = []
        self.consts: dict[str, np.ndarray] = {}

    def emit(self, op_type: str, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None,
             *, outputs: Sequence[str] | None = None, num_outputs: int = 1,
             domain: str = "") -> list[str]:
        self.nodes.append((op_type, list(inputs), dict(attrs or {})))
        return list(outputs or [f"t{len(self.nodes)}"])

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        name = f"{hint}{len(self.consts)}"
        self.consts[name] = np.asarray(array)
        return name


def export(op: str, in_types: Sequence[TensorType], opset: int = 17,
           **attrs: Any) -> RecordingExportCtx:
    sig = make_sig(op, attrs, in_types)
    ctx = RecordingExportCtx(opset)
    node = ExportNode(op, sig.attr, tuple(f"in{i}" for i in range(len(in_types))),
                      tuple(f"out{i}" for i in range(len(sig.out_types))),
                      sig.in_types, sig.out_types)
    fn = sig.opdef.onnx_export
    assert fn is not None
    fn(ctx, node)
    return ctx


def out_shape(op: str, *shapes: Sequence[int], **attrs: Any) -> tuple[int, ...]:
    (t, *_) = make_sig(op, attrs, [TensorType(tuple(s)) for s in shapes]).out_types
    return t.shape


def ref(op: str, *xs: np.ndarray, **attrs: Any) -> Sequence[np.ndarray]:
    sig = make_sig(op, attrs, [TensorType(x.shape, str(x.dtype)) for x in xs])
    fn = sig.opdef.reference
    assert fn is not None
    outs = fn(list(xs), sig.attr)
    assert [o.shape for o in outs] == [t.shape for t in sig.out_types]
    return outs


def arange(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


# ----------------------------------------------------------------------------- registry


@pytest.mark.parametrize("op", SHAPE_OPS)
def test_opdef_complete_and_samples_infer(op: str) -> None:
    d = get_op(op)
    assert d.family == "shape" and d.doc and d.reference and d.onnx_export and d.onnx_import
    assert len(d.samples) >= 2
    for s in d.samples:
        sig = make_sig(op, s.attrs, s.in_types)
        assert d.flops(sig.in_types, sig.out_types, sig.attr) >= 0


def test_cost_model() -> None:
    x = TensorType((2, 3, 4))
    for op, attrs in (("reshape", {"shape": (6, 4)}), ("flatten", {}), ("shape", {}),
                      ("squeeze", {}), ("unsqueeze", {"axes": (0,)})):
        sig = make_sig(op, attrs, [x])
        assert sig.opdef.bytes_moved(sig.in_types, sig.out_types, sig.attr) == 0
    sig = make_sig("transpose", {"perm": (2, 1, 0)}, [x])
    assert sig.opdef.flops(sig.in_types, sig.out_types, sig.attr) == 0
    assert sig.opdef.bytes_moved(sig.in_types, sig.out_types, sig.attr) == 2 * x.nbytes
    x4 = TensorType((1, 2, 4, 4))
    for mode, k in (("nearest", 1), ("linear", 4)):
        sig = make_sig("resize", {"sizes": (1, 2, 8, 8), "mode": mode}, [x4])
        assert sig.opdef.flops(sig.in_types, sig.out_types, sig.attr) == k * 128


# ----------------------------------------------------------------------------- concat / split


def test_concat() -> None:
    assert out_shape("concat", (2, 3), (2, 5), axis=-1) == (2, 8)
    a, b = arange(2, 3), arange(1, 3)
    np.testing.assert_array_equal(ref("concat", a, b, axis=0)[0], np.vstack([a, b]))
    with pytest.raises(ShapeError, match=r"concat: shapes .* differ"):
        out_shape("concat", (2, 3), (3, 3), axis=1)
    with pytest.raises(ShapeError, match="rank >= 1"):
        out_shape("concat", (), (), axis=0)
    with pytest.raises(ShapeError, match="dtype"):
        make_sig("concat", {"axis": 0}, [TensorType((2,)), TensorType((2,), "int64")])
    with pytest.raises(ShapeError, match="axis 2 out of range"):
        out_shape("concat", (2, 3), axis=2)
    got = imp("Concat", (2, 3, 4), attrs={"axis": -2}, n_inputs=2)
    assert got == Imported("concat", {"axis": 1}, (0, 1))


def test_split_infer_and_reference() -> None:
    b = Builder()
    x = b.input("x", (2, 7))
    parts = b.split(x, axis=-1, sizes=(3, 4))
    assert [p.shape for p in parts] == [(2, 3), (2, 4)]
    a = arange(2, 7)
    outs = ref("split", a, axis=1, sizes=(3, 0, 4))
    np.testing.assert_array_equal(np.concatenate(outs, axis=1), a)
    assert outs[1].shape == (2, 0)
    with pytest.raises(ShapeError, match=r"split: sizes \(3, 3\) do not add up"):
        out_shape("split", (2, 7), axis=1, sizes=(3, 3))
    with pytest.raises(AttrError, match="sizes"):
        out_shape("split", (2, 7), axis=1, sizes=(8, -1))


def test_split_import() -> None:
    got = imp("Split", (6, 4), consts={1: [2, 4]}, num_outputs=2)
    assert got == Imported("split", {"axis": 0, "sizes": [2, 4]}, (0,))
    got = imp("Split", (6, 4), attrs={"split": [1, 3], "axis": -1}, opset=11, num_outputs=2)
    assert got.attrs == {"axis": 1, "sizes": [1, 3]}
    assert imp("Split", (6, 4), num_outputs=3).attrs["sizes"] == [2, 2, 2]
    got = imp("Split", (7, 4), attrs={"num_outputs": 3}, opset=18, num_outputs=3)
    assert got.attrs["sizes"] == [3, 3, 1]
    with pytest.raises(Unsupported, match="divisible"):
        imp("Split", (7, 4), num_outputs=3)
    with pytest.raises(Unsupported, match="not a constant"):
        imp("Split", (6, 4), n_inputs=2, num_outputs=2)


def test_split_export_uses_split_input() -> None:
    ctx = export("split", [TensorType((6, 4))], axis=0, sizes=(2, 4))
    ((op, ins, attrs),) = ctx.nodes
    assert op == "Split" and attrs == {"axis": 0}
    assert ctx.consts[ins[1]].tolist() == [2, 4] and ctx.consts[ins[1]].dtype == np.int64


# ----------------------------------------------------------------------------- transpose / reshape


def test_transpose() -> None:
    assert out_shape("transpose", (2, 3, 4), perm=(1, 2, 0)) == (3, 4, 2)
    a = arange(2, 3, 4)
    np.testing.assert_array_equal(ref("transpose", a, perm=(2, 0, 1))[0], a.transpose(2, 0, 1))
    with pytest.raises(AttrError, match="not a permutation"):
        out_shape("transpose", (2, 3), perm=(0, 0))
    assert imp("Transpose", (2, 3, 4)).attrs == {"perm": [2, 1, 0]}


def test_reshape() -> None:
    assert out_shape("reshape", (2, 3, 4), shape=(4, -1)) == (4, 6)
    a = arange(2, 3, 4)
    np.testing.assert_array_equal(ref("reshape", a, shape=(-1, 2))[0], a.reshape(12, 2))
    with pytest.raises(AttrError, match="at most one -1"):
        out_shape("reshape", (2, 3), shape=(-1, -1))
    with pytest.raises(AttrError, match="at most one -1"):
        out_shape("reshape", (2, 3), shape=(0, 6))
    with pytest.raises(ShapeError, match=r"cannot reshape f32\[2,3\]"):
        out_shape("reshape", (2, 3), shape=(4, -1))
    with pytest.raises(ShapeError, match="6 elements"):
        out_shape("reshape", (2, 3), shape=(7,))


def test_reshape_import() -> None:
    got = imp("Reshape", (2, 3, 4), consts={1: np.array([0, -1, 2], np.int64)})
    assert got == Imported("reshape", {"shape": [2, -1, 2]}, (0,))
    with pytest.raises(Unsupported, match="allowzero"):
        imp("Reshape", (2, 3), consts={1: [0, 6]}, attrs={"allowzero": 1})
    assert imp("Reshape", (2, 3), consts={1: [3, 2]}, attrs={"allowzero": 1}).attrs == {
        "shape": [3, 2]}
    with pytest.raises(Unsupported, match="not a constant"):
        imp("Reshape", (2, 3), n_inputs=2)
    ctx = export("reshape", [TensorType((2, 3))], shape=(-1,))
    assert ctx.consts[ctx.nodes[0][1][1]].tolist() == [6]  # the -1 is resolved in the canonical signature


def test_flatten() -> None:
    assert out_shape("flatten", (2, 3, 4)) == (2, 12)
    assert out_shape("flatten", (2, 3, 4), axis=0) == (1, 24)
    assert out_shape("flatten", (2, 3, 4), axis=3) == (24, 1)
    assert out_shape("flatten", (2, 3, 4), axis=-1) == (6, 4)
    with pytest.raises(AttrError, match="flatten: axis 4 out of range"):
        out_shape("flatten", (2, 3, 4), axis=4)
    np.testing.assert_array_equal(ref("flatten", arange(2, 3, 4), axis=-2)[0], arange(2, 12))
    assert imp("Flatten", (2, 3, 4), attrs={"axis": -1}).attrs == {"axis": 2}


# ----------------------------------------------------------------------------- (un)squeeze


def test_unsqueeze() -> None:
    assert out_shape("unsqueeze", (3, 4), axes=(0, -1)) == (1, 3, 4, 1)
    assert ref("unsqueeze", arange(3, 4), axes=(1, -1))[0].shape == (3, 1, 4, 1)
    with pytest.raises(AttrError, match="duplicate axes"):
        out_shape("unsqueeze", (3, 4), axes=(0, -4))
    with pytest.raises(ShapeError, match="out of range"):
        out_shape("unsqueeze", (3, 4), axes=(3,))
    assert imp("Unsqueeze", (3, 4), consts={1: [-1, 0]}).attrs == {"axes": [0, 3]}
    assert imp("Unsqueeze", (3, 4), attrs={"axes": [1]}, opset=11).attrs == {"axes": [1]}
    with pytest.raises(Unsupported):
        imp("Unsqueeze", (3, 4), n_inputs=2)


def test_squeeze() -> None:
    assert out_shape("squeeze", (1, 3, 1, 4)) == (3, 4)
    assert out_shape("squeeze", (1, 3, 1, 4), axes=(-2,)) == (1, 3, 4)
    assert ref("squeeze", arange(1, 3, 1), axes=(0,))[0].shape == (3, 1)
    with pytest.raises(ShapeError, match=r"squeeze: axes \[1\] of f32\[1,3,1,4\] do not have"):
        out_shape("squeeze", (1, 3, 1, 4), axes=(1,))
    assert imp("Squeeze", (1, 3, 1, 4)).attrs == {"axes": [0, 2]}
    assert imp("Squeeze", (1, 3, 1, 4), consts={1: [-2]}).attrs == {"axes": [2]}
    assert imp("Squeeze", (1, 3), attrs={"axes": [0]}, opset=12).attrs == {"axes": [0]}


def test_axes_exporters() -> None:
    ctx = export("squeeze", [TensorType((1, 3, 1))])
    ((op, ins, _),) = ctx.nodes
    assert op == "Squeeze" and ctx.consts[ins[1]].tolist() == [0, 2]
    ctx = export("squeeze", [TensorType((2, 3))])
    assert ctx.nodes == [("Squeeze", ["in0"], {})]
    ctx = export("unsqueeze", [TensorType((2, 3))], opset=11, axes=(0,))
    assert ctx.nodes == [("Unsqueeze", ["in0"], {"axes": [0]})]


# ----------------------------------------------------------------------------- expand / shape


def test_expand() -> None:
    assert out_shape("expand", (3, 1), shape=(2, 1, 4)) == (2, 3, 4)
    assert out_shape("expand", (2, 1, 5), shape=(4, 1)) == (2, 4, 5)
    a = arange(3, 1)
    got = ref("expand", a, shape=(2, 3, 4))[0]
    np.testing.assert_array_equal(got, np.broadcast_to(a, (2, 3, 4)))
    assert got.flags.writeable
    with pytest.raises(ShapeError, match="not broadcastable"):
        out_shape("expand", (3, 2), shape=(4,))
    assert imp("Expand", (3, 1), consts={1: [2, 3, 4]}).attrs == {"shape": [2, 3, 4]}


def test_shape_op() -> None:
    sig = make_sig("shape", {"start": 1, "end": -1}, [TensorType((2, 3, 4, 5))])
    assert sig.out_types == (TensorType((2,), "int64"),)
    assert ref("shape", arange(2, 3, 4, 5), start=1, end=-1)[0].tolist() == [3, 4]
    assert ref("shape", arange(2, 3), start=-9, end=9)[0].tolist() == [2, 3]
    assert ref("shape", arange(2, 3), start=2)[0].shape == (0,)
    assert imp("Shape", (2, 3), attrs={"start": 1}).attrs == {"start": 1}
    assert export("shape", [TensorType((2, 3))]).nodes == [("Shape", ["in0"], {})]
    assert export("shape", [TensorType((2, 3))], end=1).nodes == [("Shape", ["in0"], {"end": 1})]


# ----------------------------------------------------------------------------- slice


@pytest.mark.parametrize(("start", "end", "step"), [
    (1, 1000, 1), (-1, INT64_MIN, -1), (10, 2, -1), (-100, -2, 2), (3, 3, 1), (-1, -100, -3),
    (0, -1, -1), (5, INT64_MAX, 2),
])
def test_slice_clamping_matches_python(start: int, end: int, step: int) -> None:
    a = np.arange(7, dtype=np.float32)
    got = ref("slice", a, starts=(start,), ends=(end,), axes=(0,), steps=(step,))[0]
    np.testing.assert_array_equal(got, a[start:end:step])


def test_slice_infer_errors_and_defaults() -> None:
    assert out_shape("slice", (4, 10), starts=(1, 2), ends=(3, -1)) == (2, 7)
    with pytest.raises(AttrError, match="non-zero"):
        out_shape("slice", (4,), starts=(0,), ends=(2,), steps=(0,))
    with pytest.raises(AttrError, match="same length"):
        out_shape("slice", (4,), starts=(0,), ends=(2, 3))
    with pytest.raises(AttrError, match="duplicate axes"):
        out_shape("slice", (4, 4), starts=(0, 0), ends=(2, 2), axes=(1, -1))


def test_slice_import_and_export() -> None:
    consts = {1: [1, -1], 2: [INT64_MAX, INT64_MIN], 3: [-1, 0], 4: [1, -1]}
    assert imp("Slice", (5, 6), consts=consts).attrs == {
        "starts": [1, -1], "ends": [INT64_MAX, INT64_MIN], "axes": [1, 0], "steps": [1, -1]}
    with pytest.raises(Unsupported, match="disagree"):  # onnx says empty, onnxruntime not
        imp("Slice", (5, 6), consts={1: [-1], 2: [2**31 - 1], 3: [0], 4: [-1]})
    assert imp("Slice", (5, 6), consts={1: [0], 2: [2]}).attrs["axes"] == [0]
    with pytest.raises(Unsupported, match="starts"):
        imp("Slice", (5, 6), consts={2: [1]}, n_inputs=2)
    ctx = export("slice", [TensorType((5, 6))], starts=(-1, 1), ends=(INT64_MIN, 1000),
                 axes=(0, -1), steps=(-2, 1))
    ((op, ins, _),) = ctx.nodes
    assert op == "Slice"
    assert [ctx.consts[n].tolist() for n in ins[1:]] == [[4, 1], [INT64_MIN, 6], [0, 1], [-2, 1]]


# ----------------------------------------------------------------------------- gather


def test_gather() -> None:
    b = Builder()
    x = b.input("x", (2, 5, 3))
    idx = b.input("i", (4, 2), "int64")
    assert b.gather(x, idx, axis=1).shape == (2, 4, 2, 3)
    a = arange(5, 2)
    got = ref("gather", a, np.array([[0, -1], [2, 2]], np.int64))[0]
    np.testing.assert_array_equal(got, a[[[0, 4], [2, 2]]])
    assert ref("gather", a, np.array(3, np.int32), axis=0)[0].shape == (2,)
    with pytest.raises(ShapeError, match="indices must be int64 or int32"):
        make_sig("gather", {}, [TensorType((5,)), TensorType((2,))])
    assert get_op("gather").input_roles == ("any", "index")
    got = imp("Gather", (5, 2), attrs={"axis": -1}, n_inputs=2)
    assert got == Imported("gather", {"axis": 1}, (0, 1))


# ----------------------------------------------------------------------------- pad


def test_pad() -> None:
    assert out_shape("pad", (2, 3), pads=(1, 0, 2, 4)) == (5, 7)
    a = arange(2, 3)
    got = ref("pad", a, pads=(1, 0, 0, 2), value=-1.0)[0]
    np.testing.assert_array_equal(got, np.pad(a, ((1, 0), (0, 2)), constant_values=-1))
    got = ref("pad", a, pads=(0, 2, 0, 1), mode="reflect")[0]
    assert got[0].tolist() == [2, 1, 0, 1, 2, 1]
    assert ref("pad", a, pads=(0, 2, 0, 0), mode="edge")[0][1].tolist() == [3, 3, 3, 4, 5]
    with pytest.raises(AttrError, match="must be 4 ints >= 0"):
        out_shape("pad", (2, 3), pads=(1, 0, -1, 0))
    with pytest.raises(AttrError, match="must be 4 ints"):
        out_shape("pad", (2, 3), pads=(1, 0))
    with pytest.raises(ShapeError, match="reflect pads"):
        out_shape("pad", (2, 3), pads=(0, 3, 0, 0), mode="reflect")
    with pytest.raises(AttrError, match="mode"):
        out_shape("pad", (2, 3), pads=(0, 0, 0, 0), mode="wrap")


def test_pad_import_and_export() -> None:
    got = imp("Pad", (1, 2, 3), consts={1: [0, 0, 1, 0, 0, 2], 2: np.float32(0.5)},
              attrs={"mode": b"constant"})
    assert got == Imported("pad", {"pads": [0, 0, 1, 0, 0, 2], "mode": "constant",
                                   "value": 0.5}, (0,))
    got = imp("Pad", (1, 2, 3), consts={1: [1, 2], 3: [-1]}, attrs={"mode": "edge"}, opset=18)
    assert got.attrs == {"pads": [0, 0, 1, 0, 0, 2], "mode": "edge"}
    with pytest.raises(Unsupported, match="negative"):
        imp("Pad", (2, 3), consts={1: [0, -1, 0, 0]})
    with pytest.raises(Unsupported, match="wrap"):
        imp("Pad", (2, 3), consts={1: [0, 1, 0, 0]}, attrs={"mode": "wrap"})
    with pytest.raises(Unsupported, match="constant_value"):
        imp("Pad", (2, 3), consts={1: [0, 1, 0, 0]}, n_inputs=3)
    ctx = export("pad", [TensorType((2, 3), "int64")], pads=(0, 1, 0, 0), value=7)
    ((op, ins, attrs),) = ctx.nodes
    assert op == "Pad" and attrs == {"mode": "constant"}
    assert ctx.consts[ins[2]].dtype == np.int64 and ctx.consts[ins[2]] == 7
    assert len(export("pad", [TensorType((2, 3))], pads=(0, 1, 0, 0)).nodes[0][1]) == 2


# ----------------------------------------------------------------------------- resize


def _resize1d(v: Sequence[float], n: int, **attrs: Any) -> list[float]:
    x = np.asarray(v, dtype=np.float32).reshape(1, 1, 1, -1)
    return ref("resize", x, sizes=(1, 1, 1, n), **attrs)[0].reshape(-1).tolist()


def test_resize_infer() -> None:
    assert out_shape("resize", (1, 3, 4, 4), sizes=(1, 3, 8, 2)) == (1, 3, 8, 2)
    with pytest.raises(ShapeError, match="only the last two dims"):
        out_shape("resize", (1, 3, 4, 4), sizes=(1, 6, 8, 8))
    with pytest.raises(ShapeError, match="only the last two dims"):
        out_shape("resize", (1, 3, 4, 4), sizes=(1, 3, 0, 8))
    with pytest.raises(AttrError, match="every dim"):
        out_shape("resize", (1, 3, 4, 4), sizes=(8, 8))
    with pytest.raises(ShapeError, match="linear mode"):
        make_sig("resize", {"sizes": (2, 4), "mode": "linear"}, [TensorType((2, 2), "int64")])
    with pytest.raises(AttrError, match="coordinate_transformation_mode"):
        out_shape("resize", (1, 1, 2, 2), sizes=(1, 1, 4, 4),
                  coordinate_transformation_mode="tf_crop_and_resize")


def test_resize_reference() -> None:
    a = arange(1, 2, 3, 4)
    np.testing.assert_array_equal(ref("resize", a, sizes=(1, 2, 6, 8))[0],
                                  a.repeat(2, axis=2).repeat(2, axis=3))
    assert _resize1d([0, 1], 4, mode="linear") == [0, 0.25, 0.75, 1]
    assert _resize1d([0, 1], 3, mode="linear",
                     coordinate_transformation_mode="align_corners") == [0, 0.5, 1]
    assert _resize1d([0, 1, 2, 3], 1, mode="linear",
                     coordinate_transformation_mode="pytorch_half_pixel") == [0]
    assert _resize1d([0, 1, 2, 3], 1, mode="linear") == [1.5]
    # asymmetric 4 -> 8: source 0, .5, 1, ... ; ties go down / up by nearest_mode
    v = [0, 1, 2, 3]
    kw = {"coordinate_transformation_mode": "asymmetric"}
    assert _resize1d(v, 8, **kw) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert _resize1d(v, 8, nearest_mode="round_prefer_ceil", **kw) == [0, 1, 1, 2, 2, 3, 3, 3]
    assert _resize1d(v, 8, nearest_mode="ceil", **kw) == [0, 1, 1, 2, 2, 3, 3, 3]
    assert _resize1d(v, 3, nearest_mode="floor", **kw) == [0, 1, 2]


def test_resize_import() -> None:
    x = (1, 3, 4, 6)
    got = imp("Resize", x, consts={2: np.array([1, 1, 2, 0.5], np.float32)},
              attrs={"mode": "linear"})
    assert got == Imported("resize", {"sizes": [1, 3, 8, 3], "mode": "linear",
                                      "coordinate_transformation_mode": "half_pixel",
                                      "nearest_mode": "round_prefer_floor"}, (0,))
    got = imp("Resize", x, consts={1: np.zeros(0, np.float32), 2: np.zeros(0, np.float32),
                                   3: [1, 3, 5, 7]},
              attrs={"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
              opset=11)
    assert got.attrs["sizes"] == [1, 3, 5, 7] and got.attrs["nearest_mode"] == "floor"
    got = imp("Resize", x, consts={3: [2, 3]}, attrs={"axes": [-1, 2]}, opset=18)
    assert got.attrs["sizes"] == [1, 3, 3, 2]
    with pytest.raises(Unsupported, match="not sizes / dim"):
        imp("Resize", (1, 1, 5, 5), consts={2: np.array([1, 1, 1.5, 1.5], np.float32)})
    with pytest.raises(Unsupported, match="non-spatial"):
        imp("Resize", x, consts={3: [1, 6, 4, 6]})
    with pytest.raises(Unsupported, match="cubic"):
        imp("Resize", x, consts={3: [1, 3, 8, 8]}, attrs={"mode": "cubic"})
    with pytest.raises(Unsupported, match="antialias"):
        imp("Resize", x, consts={3: [1, 3, 8, 8]}, attrs={"antialias": 1})
    with pytest.raises(Unsupported, match="sizes is not a constant"):
        imp("Resize", x, n_inputs=4)
    with pytest.raises(Unsupported, match="tf_crop_and_resize"):
        imp("Resize", x, consts={3: [1, 3, 8, 8]},
            attrs={"coordinate_transformation_mode": "tf_crop_and_resize"})
    ctx = export("resize", [TensorType(x)], sizes=(1, 3, 2, 12), mode="linear")
    ((op, ins, attrs),) = ctx.nodes
    assert op == "Resize" and ins[1:3] == ["", ""] and ctx.consts[ins[3]].tolist() == [1, 3, 2, 12]
    assert attrs["mode"] == "linear" and attrs["nearest_mode"] == "round_prefer_floor"
