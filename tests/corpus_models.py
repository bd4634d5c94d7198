"""A corpus of valid-but-unusual ONNX models, as real exporters and tools write them: every one passes
``onnx.checker.check_model(full_check=True)`` (where onnx knows its ops) and runs in onnxruntime, so ``graphsub
optimize`` must accept it and write a drop-in replacement.

Shared by ``tests/optimize/test_corpus.py`` (each model through ``graphsub optimize``, parametrized by name) and
``experiments/optimize/corpus.py`` (the same checks on every suite model and this corpus, one process per model).

* :data:`CASES`: name -> :class:`Case` (how to build the model, the sizes of its symbolic dimensions to run it at,
  the inputs whose values matter: a shape tensor, a condition);
* :func:`feeds`: random inputs for a case's model at one of its sizes;
* :func:`dropin_problems`: what keeps a written model from replacing the original (interface, metadata, outputs).

>>> sorted(CASES)[:3]
['constants', 'contrib_ms', 'fp16']
>>> all(check(c) is None for c in CASES.values())
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64
Sizes = Mapping[str, int]
Fixed = Callable[[Sizes, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class Case:
    """One corpus model: ``build()`` makes it; ``sizes``: the values of its symbolic dimensions to run it at (the
    first one is what graphsub imports by default: every symbolic dimension 1); ``fixed``: inputs whose values the
    model's meaning constrains (name -> ``fn(sizes, rng)``); ``full_check``: onnx's checker knows every op (False for
    onnxruntime's contrib domain)."""

    name: str
    build: Callable[[], onnx.ModelProto]
    sizes: tuple[dict[str, int], ...] = ({},)
    fixed: Mapping[str, Fixed] = field(default_factory=dict)
    full_check: bool = True


def _vi(name: str, dtype: int, shape: Sequence[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _w(rng: np.random.Generator, name: str, *shape: int, dtype: Any = np.float32,
       scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)


def _i64(name: str, values: Sequence[int] | int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _model(graph: onnx.GraphProto, opset: int = 17, ir: int | None = None, **kw: Any) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *kw.pop("extra_opsets", ())],
                          producer_name=kw.pop("producer_name", "corpus"), **kw)
    if ir is not None:
        m.ir_version = ir
    return m


def _n(op: str, ins: Sequence[str], outs: Sequence[str], **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, list(ins), list(outs), name=f"{op}_{outs[0] or ins[0]}", **attrs)


# ------------------------------------------------------------------------------------------------ run-time shapes
def runtime_reshape() -> onnx.ModelProto:
    """MobileViT's unfold as Hugging Face exports it: the patch shapes are computed at run time from ``Shape(x)``
    (``Gather -> Div -> Mul -> Unsqueeze -> Concat -> Reshape``), with a symbolic batch; value_info from shape
    inference on the intermediates, as exporters leave it."""
    rng = np.random.default_rng(1)
    nodes = [_n("Shape", ["x"], ["s"])]
    for k, d in enumerate("bchw"):
        nodes.append(_n("Gather", ["s", f"i{k}"], [d], axis=0))
    nodes += [_n("Div", ["h", "two"], ["h2"]), _n("Div", ["w", "two"], ["w2"]), _n("Mul", ["b", "c"], ["bc"]),
              _n("Mul", ["bc", "h2"], ["bch2"]), _n("Mul", ["h2", "w2"], ["np_"])]
    for v in ("b", "c", "bch2", "w2", "np_"):
        nodes.append(_n("Unsqueeze", [v, "ax0"], [v + "_u"]))
    nodes += [_n("Concat", ["bch2_u", "two_u", "w2_u", "two_u"], ["shape1"], axis=0),
              _n("Reshape", ["x", "shape1"], ["r1"]), _n("Transpose", ["r1"], ["t1"], perm=[0, 2, 1, 3]),
              _n("Concat", ["b_u", "c_u", "np__u", "four_u"], ["shape2"], axis=0),
              _n("Reshape", ["t1", "shape2"], ["r2"]), _n("Transpose", ["r2"], ["t2"], perm=[0, 3, 2, 1]),
              _n("MatMul", ["t2", "W"], ["m"]), _n("Relu", ["m"], ["rl"]),
              _n("Concat", ["b_u", "minus1"], ["shape3"], axis=0), _n("Reshape", ["rl", "shape3"], ["y"])]
    inits = [*(_i64(f"i{k}", k) for k in range(4)), _i64("two", 2), _i64("ax0", [0]), _i64("two_u", [2]),
             _i64("four_u", [4]), _i64("minus1", [-1]), _w(rng, "W", 4, 6)]
    g = helper.make_graph(nodes, "mobilevit_unfold", [_vi("x", F, ["batch", 4, 8, 8])], [_vi("y", F, ["batch", 384])],
                          inits)
    return onnx.shape_inference.infer_shapes(_model(g, 17))


def shape_input_reshape() -> onnx.ModelProto:
    """``y = Reshape(relu(x), shape)`` with the target shape a graph input (int64 [3]): its values are only known at
    run time, and random integers are not a valid shape."""
    g = helper.make_graph([_n("Relu", ["x"], ["r"]), _n("Reshape", ["r", "shape"], ["y"])], "shape_input",
                          [_vi("x", F, ["batch", 12]), _vi("shape", I64, [3])], [_vi("y", F, [None, None, None])])
    return _model(g, 17)


# ------------------------------------------------------------------------------------------------ control flow
def _if_branch(name: str, op: str, src: str, out: str, shape: Sequence[int | str]) -> onnx.GraphProto:
    return helper.make_graph([_n(op, [src], [out])], name, [], [_vi(out, F, shape)])


def if_outer() -> onnx.ModelProto:
    """``y = If(sum(x) > 0, relu(a), -a) * x`` whose branches read ``a = x + x`` from the outer graph."""
    nodes = [_n("Add", ["x", "x"], ["a"]), _n("ReduceSum", ["x"], ["s"], keepdims=0),
             _n("Greater", ["s", "zero"], ["c"]),
             _n("If", ["c"], ["yi"], then_branch=_if_branch("then", "Relu", "a", "t", ["batch", 4]),
                else_branch=_if_branch("else", "Neg", "a", "e", ["batch", 4])),
             _n("Mul", ["yi", "x"], ["y"])]
    g = helper.make_graph(nodes, "if_outer", [_vi("x", F, ["batch", 4])], [_vi("y", F, ["batch", 4])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return _model(g, 17)


def loop_outer_nested_if() -> onnx.ModelProto:
    """A ``Loop`` (trip count an input) whose body reads ``b = x * 2`` from the outer graph inside a nested ``If``,
    with a loop-carried value and a scan output (stacked per iteration)."""
    inner_t = helper.make_graph([_n("Add", ["acc", "b"], ["nt"])], "inner_then", [], [_vi("nt", F, [2, 4])])
    inner_e = helper.make_graph([_n("Sub", ["acc", "b"], ["ne"])], "inner_else", [], [_vi("ne", F, [2, 4])])
    body = helper.make_graph(
        [_n("Identity", ["cond_in"], ["cond_out"]), _n("Mod", ["i", "two"], ["im"]),
         _n("Equal", ["im", "zero"], ["ev"]),
         _n("If", ["ev"], ["acc_out"], then_branch=inner_t, else_branch=inner_e),
         _n("ReduceSum", ["acc_out"], ["tot"], keepdims=0)],
        "body", [_vi("i", I64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc", F, [2, 4])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", F, [2, 4]), _vi("tot", F, [])],
        [_i64("two", 2), _i64("zero", 0)])
    nodes = [_n("Mul", ["x", "k2"], ["b"]), _n("Loop", ["n", "true", "x"], ["y", "sums"], body=body),
             _n("Relu", ["y"], ["yr"])]
    g = helper.make_graph(nodes, "loop_outer", [_vi("x", F, [2, 4]), _vi("n", I64, [])],
                          [_vi("yr", F, [2, 4]), _vi("sums", F, ["iters"])],
                          [numpy_helper.from_array(np.array(2, np.float32), "k2"),
                           numpy_helper.from_array(np.array(True), "true")])
    return _model(g, 17)


def scan() -> onnx.ModelProto:
    """``Scan`` over the sequence axis of ``x [batch?, seq, 4]``: a running state ``h = tanh(h @ U + x_t + bias)``,
    ``bias`` read from the outer graph; final state and the per-step outputs."""
    rng = np.random.default_rng(2)
    body = helper.make_graph(
        [_n("MatMul", ["h", "U"], ["hu"]), _n("Add", ["hu", "xt"], ["s1"]), _n("Add", ["s1", "bias"], ["s2"]),
         _n("Tanh", ["s2"], ["h_out"]), _n("Identity", ["h_out"], ["step"])],
        "scan_body", [_vi("h", F, [2, 4]), _vi("xt", F, [2, 4])], [_vi("h_out", F, [2, 4]), _vi("step", F, [2, 4])],
        [_w(rng, "U", 4, 4)])
    nodes = [_n("Mul", ["h0", "one"], ["h0s"]),
             _n("Scan", ["h0s", "x"], ["hN", "steps"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                scan_output_axes=[1])]
    g = helper.make_graph(nodes, "scan", [_vi("h0", F, [2, 4]), _vi("x", F, [2, "seq", 4])],
                          [_vi("hN", F, [2, 4]), _vi("steps", F, [2, "seq", 4])],
                          [_w(rng, "bias", 4), numpy_helper.from_array(np.array(1, np.float32), "one")])
    return _model(g, 17)


# ------------------------------------------------------------------------------------------------ dtypes
def qdq_int8() -> onnx.ModelProto:
    """onnxruntime.quantization's QDQ format: activations int8 through QuantizeLinear/DequantizeLinear pairs, weights
    int8 per-channel (DequantizeLinear on the initializer), the conv bias int32, around Conv and MatMul."""
    rng = np.random.default_rng(3)
    wq = rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)
    ws = (rng.random(4) * 0.01 + 0.005).astype(np.float32)
    xs = np.float32(0.02)
    bias = rng.integers(-500, 500, 4, dtype=np.int32)
    mq = rng.integers(-127, 128, (64, 5), dtype=np.int8)
    nodes = [_n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), _n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             _n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             _n("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
             _n("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]), _n("Relu", ["c"], ["cr"]),
             _n("QuantizeLinear", ["cr", "as", "az"], ["aq"]), _n("DequantizeLinear", ["aq", "as", "az"], ["ad"]),
             _n("Flatten", ["ad"], ["fl"], axis=1), _n("QuantizeLinear", ["fl", "as", "az"], ["fq"]),
             _n("DequantizeLinear", ["fq", "as", "az"], ["fd"]), _n("DequantizeLinear", ["mq", "ms"], ["md"]),
             _n("MatMul", ["fd", "md"], ["mm"]), _n("Add", ["mm", "mb"], ["y"])]
    inits = [numpy_helper.from_array(xs, "xs"), numpy_helper.from_array(np.int8(0), "xz"),
             numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.zeros(4, np.int8), "wz"), numpy_helper.from_array(bias, "bq"),
             numpy_helper.from_array((ws * xs).astype(np.float32), "bs"),
             numpy_helper.from_array(np.float32(0.05), "as"), numpy_helper.from_array(np.int8(-3), "az"),
             numpy_helper.from_array(mq, "mq"), numpy_helper.from_array(np.float32(0.004), "ms"), _w(rng, "mb", 5)]
    g = helper.make_graph(nodes, "qdq", [_vi("x", F, ["batch", 3, 8, 8])], [_vi("y", F, ["batch", 5])], inits)
    return _model(g, 17)


def _attention(dtype: int, shape: Sequence[int | str], name: str) -> onnx.ModelProto:
    """An attention-like block in ``dtype`` (inputs, weights, outputs): MatMul, Transpose, Add, Softmax,
    LayerNormalization on ``x`` of ``shape`` ``[batch, seq, 16]``."""
    rng = np.random.default_rng(4)
    h = helper.tensor_dtype_to_np_dtype(dtype)
    nodes = [_n("MatMul", ["x", "Wq"], ["q"]), _n("MatMul", ["x", "Wk"], ["k"]),
             _n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), _n("MatMul", ["q", "kt"], ["sc"]),
             _n("Mul", ["sc", "scale"], ["scs"]), _n("Softmax", ["scs"], ["p"], axis=-1),
             _n("MatMul", ["p", "x"], ["ctx"]), _n("Add", ["ctx", "x"], ["res"]),
             _n("LayerNormalization", ["res", "g", "bt"], ["y"], axis=-1, epsilon=1e-5)]
    inits = [_w(rng, "Wq", 16, 16, dtype=h), _w(rng, "Wk", 16, 16, dtype=h),
             numpy_helper.from_array(np.array(0.25, h), "scale"), _w(rng, "g", 16, dtype=h, scale=1.0),
             _w(rng, "bt", 16, dtype=h)]
    g = helper.make_graph(nodes, name, [_vi("x", dtype, shape)], [_vi("y", dtype, shape)], inits)
    return _model(g, 17)


def fp16() -> onnx.ModelProto:
    """The attention-like block in float16 (inputs, weights, outputs), a symbolic batch."""
    return _attention(F16, ["batch", 5, 16], "fp16")


def symbolic_attention() -> onnx.ModelProto:
    """The attention-like block in float32 with a symbolic batch and sequence (imported at 1 and 1)."""
    return _attention(F, ["batch", "seq", 16], "symbolic_attention")


def mixed_cast() -> onnx.ModelProto:
    """float32 in, float16 compute (Cast fp32 -> fp16, MatMul, Relu), Cast back and a float32 bias; two outputs, one
    float32 and one float16 (as ``onnxconverter_common.float16`` with ``keep_io_types`` writes a partial model)."""
    rng = np.random.default_rng(5)
    nodes = [_n("Cast", ["x"], ["xh"], to=F16), _n("MatMul", ["xh", "W"], ["mh"]), _n("Relu", ["mh"], ["rh"]),
             _n("Cast", ["rh"], ["rf"], to=F), _n("Add", ["rf", "b"], ["y"]), _n("Mul", ["rh", "half"], ["yh"])]
    inits = [_w(rng, "W", 8, 8, dtype=np.float16), _w(rng, "b", 8),
             numpy_helper.from_array(np.array(0.5, np.float16), "half")]
    g = helper.make_graph(nodes, "mixed", [_vi("x", F, ["batch", 8])],
                          [_vi("y", F, ["batch", 8]), _vi("yh", F16, ["batch", 8])], inits)
    return _model(g, 17)


# ------------------------------------------------------------------------------------------------ opsets
def opset9() -> onnx.ModelProto:
    """An opset 9 model in IR version 4's style: every initializer also listed as a graph input (overridable),
    BatchNormalization of opset 9, Upsample with a scales input, Reshape with a shape initializer, Flatten and Gemm."""
    rng = np.random.default_rng(6)
    inits = [_w(rng, "cw", 4, 2, 3, 3), _w(rng, "bn_s", 4, scale=1.0), _w(rng, "bn_b", 4), _w(rng, "bn_m", 4),
             numpy_helper.from_array((rng.random(4) + 0.5).astype(np.float32), "bn_v"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"), _i64("shp", [1, 4, 8, 8]),
             _w(rng, "gw", 5, 256), _w(rng, "gb", 5)]
    nodes = [_n("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
             _n("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], epsilon=1e-5),
             _n("Relu", ["bn"], ["r"]), _n("Upsample", ["r", "scales"], ["u"], mode="nearest"),
             _n("Reshape", ["u", "shp"], ["rs"]), _n("Flatten", ["rs"], ["fl"], axis=1),
             _n("Gemm", ["fl", "gw", "gb"], ["y"], transB=1)]
    inputs = [_vi("x", F, [1, 2, 4, 4])] + [_vi(t.name, t.data_type, list(t.dims)) for t in inits]
    g = helper.make_graph(nodes, "opset9", inputs, [_vi("y", F, [1, 5])], inits)
    return _model(g, 9, ir=4)


def opset21() -> onnx.ModelProto:
    """Opset 21 (IR 10): an int4 weight dequantized blockwise-free per tensor, Gelu (opset 20), ReduceMean with its
    axes as an input (opset 18), Pad with a constant value, a symbolic batch."""
    rng = np.random.default_rng(7)
    w4 = helper.make_tensor("w4", TensorProto.INT4, [8, 8], rng.integers(-8, 8, 64).tolist())
    nodes = [_n("DequantizeLinear", ["w4", "ws"], ["wd"]), _n("MatMul", ["x", "wd"], ["m"]),
             _n("Gelu", ["m"], ["g"], approximate="tanh"), _n("ReduceMean", ["g", "axes"], ["mean"], keepdims=1),
             _n("Sub", ["g", "mean"], ["c"]), _n("Pad", ["c", "pads", "pv"], ["y"], mode="constant")]
    inits = [w4, numpy_helper.from_array(np.float32(0.1), "ws"), _i64("axes", [-1]), _i64("pads", [0, 1, 0, 1]),
             numpy_helper.from_array(np.float32(0.5), "pv")]
    g = helper.make_graph(nodes, "opset21", [_vi("x", F, ["batch", 8])], [_vi("y", F, ["batch", 10])], inits)
    return _model(g, 21, ir=10)


# ------------------------------------------------------------------------------------------------ interface
def interface() -> onnx.ModelProto:
    """A transformer-style interface: int64 token ids and a float mask ``["batch", "seq"]``, an input the graph never
    reads, three outputs in an order that is neither alphabetical nor the order they are computed in (one of them a
    graph input passed through), anonymous and named symbolic output dims, and what the model says of itself
    (metadata_props, doc strings, producer, model version, domain)."""
    rng = np.random.default_rng(8)
    nodes = [_n("Gather", ["emb", "input_ids"], ["e"], axis=0), _n("Unsqueeze", ["mask", "ax2"], ["mu"]),
             _n("Mul", ["e", "mu"], ["em"]), _n("MatMul", ["em", "W"], ["hidden"]),
             _n("ReduceMean", ["hidden"], ["pooled"], axes=[1], keepdims=0), _n("Tanh", ["hidden"], ["logits"])]
    g = helper.make_graph(
        nodes, "interface",
        [_vi("input_ids", I64, ["batch", "seq"]), _vi("mask", F, ["batch", "seq"]), _vi("unused", F, [3])],
        [_vi("pooled", F, ["batch", 8]), _vi("logits", F, ["batch", "seq", 8]), _vi("mask", F, ["batch", "seq"]),
         _vi("hidden", F, ["batch", None, 8])],
        [_w(rng, "emb", 20, 8), _w(rng, "W", 8, 8), _i64("ax2", [2])], doc_string="the graph's doc string")
    m = _model(g, 17, producer_name="corpus-exporter", producer_version="3.1", doc_string="a model's doc string",
               model_version=7, domain="ai.example.corpus")
    helper.set_model_props(m, {"author": "corpus", "license": "Apache-2.0", "zz_first_key": "order kept", "a": "1"})
    return m


def constants() -> onnx.ModelProto:
    """What exporters leave around: Constant nodes with ``value_ints``, ``value_float``, ``value_floats`` and
    ``sparse_value``; a Split with its ``split`` input (opset 13+); Clip with an empty-string optional input; an
    inference Dropout with a ratio and an unused mask; an Identity chain into an output; an initializer that is itself
    a graph output; an initializer no node reads."""
    rng = np.random.default_rng(9)
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "sv"),
                                       numpy_helper.from_array(np.array([1, 6], np.int64), "si"), [8])
    nodes = [helper.make_node("Constant", [], ["sizes"], value_ints=[3, 5]),
             helper.make_node("Constant", [], ["alpha"], value_float=0.5),
             helper.make_node("Constant", [], ["row"], value_floats=[float(v) for v in range(8)]),
             helper.make_node("Constant", [], ["sp"], sparse_value=sparse),
             _n("Add", ["x", "sp"], ["xs"]), _n("Mul", ["xs", "alpha"], ["xa"]),
             _n("Split", ["xa", "sizes"], ["p1", "p2"], axis=1), _n("Clip", ["p1", "", "cmax"], ["cl"]),
             _n("Dropout", ["p2", "ratio"], ["dr", "dmask"]), _n("Concat", ["cl", "dr"], ["cat"], axis=1),
             _n("Add", ["cat", "row"], ["s"]), _n("MatMul", ["s", "W"], ["m"]),
             _n("Identity", ["m"], ["id1"]), _n("Identity", ["id1"], ["id2"]), _n("Identity", ["id2"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(0.7), "cmax"), numpy_helper.from_array(np.float32(0.1), "ratio"),
             _w(rng, "W", 8, 4), _w(rng, "table", 2, 3), _w(rng, "never_read", 5)]
    g = helper.make_graph(nodes, "constants", [_vi("x", F, ["batch", 8])],
                          [_vi("y", F, ["batch", 4]), _vi("table", F, [2, 3])], inits)
    return _model(g, 17)


def outputs_kinds() -> onnx.ModelProto:
    """Outputs of other kinds: int64 indices (TopK's second output, ArgMax), a scalar (rank 0), a bool."""
    nodes = [_n("TopK", ["x", "k"], ["vals", "idx"], axis=-1), _n("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
             _n("ReduceSum", ["vals"], ["total"], keepdims=0), _n("Greater", ["vals", "zero"], ["pos"])]
    g = helper.make_graph(nodes, "outputs", [_vi("x", F, ["batch", 6])],
                          [_vi("total", F, []), _vi("idx", I64, ["batch", 2]), _vi("vals", F, ["batch", 2]),
                           _vi("am", I64, ["batch"]), _vi("pos", TensorProto.BOOL, ["batch", 2])],
                          [_i64("k", [2]), numpy_helper.from_array(np.float32(0), "zero")])
    return _model(g, 17)


def local_function() -> onnx.ModelProto:
    """A model-local function (``FunctionProto``, as the dynamo exporter writes modules): ``custom::ScaledGelu``
    called twice, with an attribute reference."""
    fn = helper.make_function(
        "custom", "ScaledGelu", ["a"], ["out"],
        [helper.make_node("Constant", [], ["k"], value_float=0.5), helper.make_node("Mul", ["a", "k"], ["ak"]),
         helper.make_node("Gelu", ["ak"], ["out"])],
        [helper.make_opsetid("", 20)])
    rng = np.random.default_rng(10)
    nodes = [_n("MatMul", ["x", "W"], ["m"]), helper.make_node("ScaledGelu", ["m"], ["g1"], domain="custom"),
             helper.make_node("ScaledGelu", ["g1"], ["y"], domain="custom")]
    g = helper.make_graph(nodes, "functions", [_vi("x", F, ["batch", 8])], [_vi("y", F, ["batch", 8])],
                          [_w(rng, "W", 8, 8)])
    m = _model(g, 20, extra_opsets=[helper.make_opsetid("custom", 1)], functions=[fn])
    return m


def contrib_ms() -> onnx.ModelProto:
    """onnxruntime's contrib ops (``com.microsoft``), as its transformer optimizer writes them: FusedMatMul with
    ``transB`` and ``alpha``, BiasGelu."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("FusedMatMul", ["x", "W"], ["m"], domain="com.microsoft", transB=1, alpha=0.5),
             helper.make_node("BiasGelu", ["m", "b"], ["g"], domain="com.microsoft"), _n("Add", ["g", "x"], ["y"])]
    g = helper.make_graph(nodes, "contrib", [_vi("x", F, ["batch", 8])], [_vi("y", F, ["batch", 8])],
                          [_w(rng, "W", 8, 8), _w(rng, "b", 8)])
    return _model(g, 17, extra_opsets=[helper.make_opsetid("com.microsoft", 1)])


def _shape_value(sizes: Sizes, rng: np.random.Generator) -> np.ndarray:
    return np.array([sizes.get("batch", 1), 3, 4], np.int64)


def _positive(sizes: Sizes, rng: np.random.Generator) -> np.ndarray:
    return np.array(3, np.int64)


def _ids(sizes: Sizes, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 20, (sizes.get("batch", 1), sizes.get("seq", 1)), dtype=np.int64)


_BATCH = ({"batch": 1}, {"batch": 3})
CASES: dict[str, Case] = {c.name: c for c in (
    Case("runtime_reshape", runtime_reshape, _BATCH),
    Case("shape_input_reshape", shape_input_reshape, _BATCH, {"shape": _shape_value}),
    Case("if_outer", if_outer, _BATCH),
    Case("loop_outer_nested_if", loop_outer_nested_if, fixed={"n": _positive}),
    Case("scan", scan, ({"seq": 1}, {"seq": 5})),
    Case("qdq_int8", qdq_int8, _BATCH),
    Case("fp16", fp16, _BATCH),
    Case("symbolic_attention", symbolic_attention, ({"batch": 1, "seq": 1}, {"batch": 2, "seq": 5})),
    Case("mixed_cast", mixed_cast, _BATCH),
    Case("opset9", opset9),
    Case("opset21", opset21, _BATCH),
    Case("interface", interface, ({"batch": 1, "seq": 1}, {"batch": 2, "seq": 6}), {"input_ids": _ids}),
    Case("constants", constants, _BATCH),
    Case("outputs_kinds", outputs_kinds, _BATCH),
    Case("local_function", local_function, _BATCH),
    Case("contrib_ms", contrib_ms, _BATCH, full_check=False),
)}


# ------------------------------------------------------------------------------------------------ checks
def feed_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds: the graph inputs that are not initializers (those are overridable defaults)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def feeds(case: Case, model: onnx.ModelProto, sizes: Sizes, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for ``model`` with its symbolic dims at ``sizes`` (a name not given: 1; an anonymous one: 2):
    floats standard normal, integers in [0, 4), booleans fair coins; the case's ``fixed`` inputs from its functions."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for vi in feed_inputs(model):
        if vi.name in case.fixed:
            out[vi.name] = case.fixed[vi.name](sizes, rng)
            continue
        tt = vi.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else sizes.get(d.dim_param, 1 if d.dim_param else 2)
                      for d in tt.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype.kind == "f":
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            out[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[vi.name] = rng.integers(0, 4, shape).astype(dtype)
    return out


def check(case: Case) -> str | None:
    """None when the case's model is valid (onnx's checker, full) and onnxruntime runs it at each of its sizes;
    else what fails."""
    import onnxruntime as ort

    m = case.build()
    try:
        onnx.checker.check_model(m, full_check=case.full_check)
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for k, sizes in enumerate(case.sizes):
            sess.run(None, feeds(case, m, sizes, k))
    except Exception as e:
        return f"{case.name}: {type(e).__name__}: {e}"
    return None


def _dims(vi: onnx.ValueInfoProto) -> tuple[int | str, ...] | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim)


def _signature(vis: Sequence[onnx.ValueInfoProto], exact: bool) -> list[tuple[str, int, Any]]:
    """(name, element type, dims) of each value, in order: the dims as declared (``exact``: inputs, which onnxruntime
    checks feeds against), else the named symbolic ones at their positions (outputs; an output declared without a
    shape: None)."""
    out = []
    for vi in vis:
        dims = _dims(vi)
        if dims is not None and not exact:
            dims = tuple(d if isinstance(d, str) and d else "?" for d in dims)
        out.append((vi.name, vi.type.tensor_type.elem_type, dims))
    return out


def interface_problems(original: onnx.ModelProto, written: onnx.ModelProto) -> list[str]:
    """How ``written``'s declared interface differs from ``original``'s: the fed inputs (names in order, element types,
    dims as declared), the outputs (names in order, element types, rank and named symbolic dims); ``metadata_props``
    (in order), ``doc_string``, ``model_version``, ``domain``. Initializers the original also lists as inputs (opset
    9's style) are overridable defaults, not inputs a caller must feed: they are not compared."""
    problems = []
    outs_a = _signature(original.graph.output, exact=False)
    outs_b = [(n, t, None if k < len(outs_a) and outs_a[k][2] is None else d)  # declared without a shape: any
              for k, (n, t, d) in enumerate(_signature(written.graph.output, exact=False))]
    for what, sa, sb in (("inputs", _signature(feed_inputs(original), True), _signature(feed_inputs(written), True)),
                         ("outputs", outs_a, outs_b)):
        if sa != sb:
            problems.append(f"{what}: {sa} became {sb}")
    for key in ("metadata_props", "doc_string", "model_version", "domain"):
        va, vb = getattr(original, key), getattr(written, key)
        if key == "metadata_props":
            va, vb = [(p.key, p.value) for p in va], [(p.key, p.value) for p in vb]
        if va != vb:
            problems.append(f"{key}: {va!r} became {vb!r}")
    return problems


def output_problems(case: Case, original: onnx.ModelProto, written: onnx.ModelProto, *, seeds: int = 2,
                    rtol: float = 1e-3, atol: float = 1e-4) -> list[str]:
    """:func:`compare_outputs` on ``seeds`` random draws (:func:`feeds`) at each of the case's sizes."""
    draws = [feeds(case, original, sizes, seed) for sizes in case.sizes for seed in range(seeds)]
    return compare_outputs(original, written, draws, rtol=rtol, atol=atol)


def compare_outputs(original: onnx.ModelProto | bytes | str, written: onnx.ModelProto | bytes | str,
                    draws: Sequence[Mapping[str, np.ndarray]], *, rtol: float = 1e-3,
                    atol: float = 1e-4) -> list[str]:
    """Run both models (protos, serialized, or paths) in onnxruntime as users do (its default optimizations) on each
    draw of inputs; where their outputs differ (paired by name: dtype, shape, values within ``rtol``/``atol``,
    float16 ten times looser; integer and boolean outputs exactly), or where the written one fails to load or run."""
    import onnxruntime as ort

    def session(m: onnx.ModelProto | bytes | str) -> Any:
        src = m.SerializeToString() if isinstance(m, onnx.ModelProto) else m
        return ort.InferenceSession(src, providers=["CPUExecutionProvider"])

    a = session(original)
    try:
        b = session(written)
    except Exception as e:
        return [f"onnxruntime does not load the written model: {type(e).__name__}: {e}"]
    names = [o.name for o in a.get_outputs()]
    problems = []
    for k, f in enumerate(draws):
        at = "draw " + str(k) + " " + str({n: tuple(v.shape) for n, v in f.items()})
        want = a.run(None, dict(f))
        try:
            got = dict(zip([o.name for o in b.get_outputs()], b.run(None, dict(f)), strict=True))
        except Exception as e:
            problems.append(f"{at}: the written model fails: {type(e).__name__}: {e}")
            continue
        for name, w in zip(names, want, strict=True):
            g = got.get(name)
            if g is None or g.dtype != w.dtype or g.shape != w.shape:
                problems.append(f"{at}: output {name!r}: {None if g is None else (g.dtype, g.shape)} != "
                                f"{(w.dtype, w.shape)}")
            elif w.dtype.kind == "f":
                loose = 10.0 if w.dtype == np.float16 else 1.0
                if not np.allclose(g, w, rtol=rtol * loose, atol=atol * loose, equal_nan=True):
                    err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
                    problems.append(f"{at}: output {name!r} differs (max abs {err:.3g})")
            elif not np.array_equal(g, w):
                problems.append(f"{at}: output {name!r} differs")
    return problems


def dropin_problems(case: Case, original: onnx.ModelProto, written: onnx.ModelProto) -> list[str]:
    """Everything that keeps ``written`` from replacing ``original`` (:func:`interface_problems`, then
    :func:`output_problems`); empty when it is a drop-in replacement."""
    return interface_problems(original, written) + output_problems(case, original, written)


__all__ = ["CASES", "Case", "check", "compare_outputs", "dropin_problems", "feed_inputs", "feeds",
           "interface_problems", "output_problems"]
