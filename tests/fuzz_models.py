"""Hostile ONNX inputs for fuzzing the CLI: small valid models and seeded mutations of them.

Shared by ``tests/cli/test_cli_fuzz.py`` (in-process, a fixed set), ``tests/frontends/test_hostile_import.py`` and
``experiments/infra/fuzz_campaign.py`` (subprocesses, many more).  Everything here is deterministic given the seed.

* :func:`base_models`: a handful of tiny valid models built with ``onnx.helper`` (Conv/Relu/Add,
  MatMul/Reshape, a symbolic batch dim).
* :func:`truncations`, :func:`byte_flips`: byte-level mutations of a serialized model.
* :data:`STRUCTURAL`: named structural mutations (duplicate output names, dangling inputs, cycles,
  unknown ops/domains, wrong initializer dtype/shape, huge/negative/zero dims, ...), each a function
  ``ModelProto -> ModelProto | bytes`` applied to a copy of :func:`conv_model` or :func:`matmul_model`.
* :func:`special_files`: files that are not ONNX models at all (empty, text, garbage, a directory).

>>> sorted(base_models())
['conv', 'matmul', 'symbolic']
>>> len(truncations(b"0123456789", 3, seed=0))
3
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _vi(name: str, shape: list[int | str] | None, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(graph: onnx.GraphProto, opset: int = OPSET) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="fuzz")
    m.ir_version = 8
    return m


def _arr(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def conv_model() -> onnx.ModelProto:
    """``y = relu(conv(x, w) + b) + x`` on a 1x2x4x4 input (Conv, Relu, Add)."""
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c", "b"], ["cb"], name="bias"),
         helper.make_node("Relu", ["cb"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "x"], ["y"], name="res")],
        "conv", [_vi("x", [1, 2, 4, 4])], [_vi("y", [1, 2, 4, 4])],
        initializer=[numpy_helper.from_array(_arr(rng, 2, 2, 3, 3), "w"),
                     numpy_helper.from_array(_arr(rng, 1, 2, 1, 1), "b")],
    )
    return _model(g)


def matmul_model() -> onnx.ModelProto:
    """``y = reshape(relu(x @ w1) @ w2 + x, [2, 4, 2])`` (MatMul, Relu, Add, Reshape)."""
    rng = np.random.default_rng(1)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
         helper.make_node("Relu", ["h"], ["hr"], name="relu"),
         helper.make_node("MatMul", ["hr", "w2"], ["o"], name="mm2"),
         helper.make_node("Add", ["o", "x"], ["s"], name="res"),
         helper.make_node("Reshape", ["s", "shape"], ["y"], name="reshape")],
        "matmul", [_vi("x", [2, 8])], [_vi("y", [2, 4, 2])],
        initializer=[numpy_helper.from_array(_arr(rng, 8, 8), "w1"),
                     numpy_helper.from_array(_arr(rng, 8, 8), "w2"),
                     numpy_helper.from_array(np.array([2, 4, 2], np.int64), "shape")],
    )
    return _model(g)


def symbolic_model() -> onnx.ModelProto:
    """``y = relu(x @ w)`` with a symbolic batch dimension ``N``."""
    rng = np.random.default_rng(2)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
         helper.make_node("Relu", ["t"], ["y"], name="relu")],
        "symbolic", [_vi("x", ["N", 4])], [_vi("y", ["N", 4])],
        initializer=[numpy_helper.from_array(_arr(rng, 4, 4), "w")],
    )
    return _model(g)


def graphsub_export() -> bytes:
    """A model as graphsub writes it: a small conv/relu/add/matmul graph built in the IR, exported with weights."""
    from graphsub.data import materialize
    from graphsub.frontends.onnx_io import to_onnx
    from graphsub.ir import Builder

    b = Builder("graphsub_export")
    x = b.input("x", (1, 2, 4, 4))
    y = b.conv2d(x, b.weight("w", (2, 2, 3, 3)), pads="SAME", act="relu")
    z = b.add(y, x)
    g = b.build({"y": b.matmul(b.reshape(z, shape=(2, 16)), b.weight("m", (16, 4)))})
    return to_onnx(materialize(g, 0)).SerializeToString()


def base_models() -> dict[str, onnx.ModelProto]:
    """The valid starting points of every mutation (each passes onnx's full check: a mutation is the only fault)."""
    models = {"conv": conv_model(), "matmul": matmul_model(), "symbolic": symbolic_model()}
    for m in models.values():
        onnx.checker.check_model(m, full_check=True)
        assert len(m.graph.node) >= 2 and m.graph.output, "a base model needs something to mutate"
    return models


# ----------------------------------------------------------------------------- byte mutations

def truncations(data: bytes, n: int, *, seed: int) -> list[bytes]:
    """``n`` prefixes of ``data`` (always including the empty prefix and one byte short)."""
    rng = random.Random(seed)
    cuts = {0, max(len(data) - 1, 0)}
    while len(cuts) < min(n, len(data)):
        cuts.add(rng.randrange(len(data)))
    return [data[:c] for c in sorted(cuts)][:n]


def byte_flips(data: bytes, n: int, *, seed: int, flips: int = 3) -> list[bytes]:
    """``n`` copies of ``data`` with ``flips`` random bytes replaced by random values each."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        buf = bytearray(data)
        for _ in range(flips):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        out.append(bytes(buf))
    return out


# ----------------------------------------------------------------------------- structural mutations

Mutation = Callable[[onnx.ModelProto], "onnx.ModelProto | bytes"]


def _node(m: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in m.graph.node if n.name == name)


def _init(m: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in m.graph.initializer if t.name == name)


def _set_input_dims(m: onnx.ModelProto, dims: list[int | str]) -> onnx.ModelProto:
    shape = m.graph.input[0].type.tensor_type.shape
    shape.ClearField("dim")
    for d in dims:
        if isinstance(d, str):
            shape.dim.add().dim_param = d
        else:
            shape.dim.add().dim_value = d
    return m


def _dup_output(m: onnx.ModelProto) -> onnx.ModelProto:
    """Two nodes produce ``h`` (onnxruntime rejects this)."""
    _node(m, "mm2").output[0] = "h"
    _node(m, "res").input[0] = "h"
    return m


def _dup_output_same_type(m: onnx.ModelProto) -> onnx.ModelProto:
    """A second Relu writes ``r`` again (same type: only the duplicate name is wrong)."""
    m.graph.node.insert(3, helper.make_node("Relu", ["c"], ["r"], name="relu2"))
    return m


def _dup_graph_output(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.output.append(_vi("y", [1, 2, 4, 4]))
    return m


def _input_also_produced(m: onnx.ModelProto) -> onnx.ModelProto:
    """A node writes the graph input ``x``."""
    _node(m, "relu").output[0] = "x"
    _node(m, "res").input[0] = "x"
    return m


def _initializer_also_produced(m: onnx.ModelProto) -> onnx.ModelProto:
    """A node writes the initializer ``w2``."""
    m.graph.node.insert(0, helper.make_node("Relu", ["w1"], ["w2"], name="shadow"))
    return m


def _dangling_input(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "relu").input[0] = "nowhere"
    return m


def _dangling_output(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.output[0].name = "nowhere"
    return m


def _cycle(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "conv").input[0] = "r"
    return m


def _self_loop(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "relu").input[0] = "r"
    return m


def _unknown_op(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "relu").op_type = "Frobnicate"
    return m


def _unknown_domain(m: onnx.ModelProto) -> onnx.ModelProto:
    n = _node(m, "relu")
    n.domain = "com.example.nothing"
    m.opset_import.append(helper.make_opsetid("com.example.nothing", 1))
    return m


def _undeclared_domain(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "relu").domain = "com.undeclared"
    return m


def _unknown_op_typed(m: onnx.ModelProto) -> onnx.ModelProto:
    """An unknown op whose output type is declared (graphsub keeps it opaque; onnxruntime rejects it)."""
    _node(m, "relu").op_type = "Frobnicate"
    m.graph.value_info.append(_vi("r", [1, 2, 4, 4]))
    return m


def _init_wrong_dtype(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w")
    arr = numpy_helper.to_array(t).astype(np.float64)
    t.CopyFrom(numpy_helper.from_array(arr, "w"))
    return m


def _init_wrong_shape(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w")
    t.CopyFrom(numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w"))
    return m


def _init_wrong_dtype_int(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w1")
    t.CopyFrom(numpy_helper.from_array(np.ones((8, 8), np.int64), "w1"))
    return m


def _init_short_data(m: onnx.ModelProto) -> onnx.ModelProto:
    """Declared dims bigger than the raw data."""
    t = _init(m, "w1")
    del t.dims[:]
    t.dims.extend([8, 16])
    return m


def _init_huge_dims(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w1")
    del t.dims[:]
    t.dims.extend([100_000, 100_000, 100_000])
    return m


def _init_negative_dims(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w1")
    del t.dims[:]
    t.dims.extend([-8, -8])
    return m


def _init_undefined_dtype(m: onnx.ModelProto) -> onnx.ModelProto:
    _init(m, "w1").data_type = 0
    return m


def _init_string(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w1")
    t.CopyFrom(helper.make_tensor("w1", TensorProto.STRING, [2], [b"a", b"b"]))
    return m


def _init_external_missing(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w1")
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "missing_weights.bin"
    return m


def _init_external_escape(m: onnx.ModelProto) -> onnx.ModelProto:
    t = _init(m, "w1")
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "../../../../etc/passwd"
    return m


def _reshape_bad_shape(m: onnx.ModelProto) -> onnx.ModelProto:
    """Reshape to a shape of the wrong element count."""
    _init(m, "shape").CopyFrom(numpy_helper.from_array(np.array([3, 5, 7], np.int64), "shape"))
    return m


def _reshape_runtime_input(m: onnx.ModelProto) -> onnx.ModelProto:
    """The Reshape's target shape is a graph input (known only at run time)."""
    m.graph.initializer.remove(_init(m, "shape"))
    m.graph.input.append(_vi("shape", [3], TensorProto.INT64))
    return m


def _reshape_float_shape(m: onnx.ModelProto) -> onnx.ModelProto:
    _init(m, "shape").CopyFrom(numpy_helper.from_array(np.array([2, 4, 2], np.float32), "shape"))
    return m


def _huge_dims(m: onnx.ModelProto) -> onnx.ModelProto:
    return _set_input_dims(m, [100_000, 100_000, 100_000, 4])


def _huge_dim(m: onnx.ModelProto) -> onnx.ModelProto:
    return _set_input_dims(m, [1 << 62, 2, 4, 4])


def _negative_dim(m: onnx.ModelProto) -> onnx.ModelProto:
    return _set_input_dims(m, [-1, 2, 4, 4])


def _zero_dim(m: onnx.ModelProto) -> onnx.ModelProto:
    return _set_input_dims(m, [0, 2, 4, 4])


def _symbolic_dims(m: onnx.ModelProto) -> onnx.ModelProto:
    return _set_input_dims(m, ["N", "C", "H", "W"])


def _wrong_rank(m: onnx.ModelProto) -> onnx.ModelProto:
    return _set_input_dims(m, [1, 2, 4])


def _no_input_shape(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.input[0].type.tensor_type.ClearField("shape")
    return m


def _input_string_dtype(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    return m


def _input_undefined_dtype(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.input[0].type.tensor_type.elem_type = 0
    return m


def _input_not_tensor(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.input[0].type.CopyFrom(helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [1])))
    return m


def _output_wrong_type(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    return m


def _output_wrong_shape(m: onnx.ModelProto) -> onnx.ModelProto:
    _set = m.graph.output[0].type.tensor_type.shape
    _set.ClearField("dim")
    for d in (7, 7):
        _set.dim.add().dim_value = d
    return m


def _empty_graph(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.ClearField("node")
    m.graph.ClearField("output")
    return m


def _no_nodes(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.ClearField("node")
    return m


def _no_outputs(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.ClearField("output")
    return m


def _no_inputs(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.ClearField("input")
    return m


def _output_is_input(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.output[0].name = "x"
    return m


def _no_graph(m: onnx.ModelProto) -> onnx.ModelProto:
    m.ClearField("graph")
    return m


def _missing_opset(m: onnx.ModelProto) -> onnx.ModelProto:
    m.ClearField("opset_import")
    return m


def _old_opset(m: onnx.ModelProto) -> onnx.ModelProto:
    m.opset_import[0].version = 1
    return m


def _future_opset(m: onnx.ModelProto) -> onnx.ModelProto:
    m.opset_import[0].version = 999
    return m


def _future_ir(m: onnx.ModelProto) -> onnx.ModelProto:
    m.ir_version = 99
    return m


def _bad_attr_type(m: onnx.ModelProto) -> onnx.ModelProto:
    n = _node(m, "conv")
    del n.attribute[:]
    n.attribute.append(helper.make_attribute("pads", "one"))
    return m


def _bad_attr_value(m: onnx.ModelProto) -> onnx.ModelProto:
    n = _node(m, "conv")
    del n.attribute[:]
    n.attribute.append(helper.make_attribute("pads", [-5, 100, 1]))
    return m


def _huge_pads(m: onnx.ModelProto) -> onnx.ModelProto:
    n = _node(m, "conv")
    del n.attribute[:]
    n.attribute.append(helper.make_attribute("pads", [1 << 40] * 4))
    return m


def _unknown_attr(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "relu").attribute.append(helper.make_attribute("flavour", 3))
    return m


def _zero_strides(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "conv").attribute.append(helper.make_attribute("strides", [0, 0]))
    return m


def _wrong_arity(m: onnx.ModelProto) -> onnx.ModelProto:
    _node(m, "relu").input.append("x")
    return m


def _no_node_inputs(m: onnx.ModelProto) -> onnx.ModelProto:
    del _node(m, "relu").input[:]
    return m


def _empty_names(m: onnx.ModelProto) -> onnx.ModelProto:
    for n in m.graph.node:
        n.name = ""
    return m


def _nested_subgraph(m: onnx.ModelProto) -> onnx.ModelProto:
    """An If whose branches read an outer value."""
    branch = helper.make_graph([helper.make_node("Relu", ["c"], ["z"])], "b", [], [_vi("z", [1, 2, 4, 4])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    m.graph.initializer.append(cond)
    relu = _node(m, "relu")
    relu.CopyFrom(helper.make_node("If", ["cond"], ["r"], name="relu", then_branch=branch, else_branch=branch))
    return m


def _garbage_tail(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString() + b"\x00\xff" * 16


def _doubled(m: onnx.ModelProto) -> bytes:
    data = m.SerializeToString()
    return data + data


STRUCTURAL: dict[str, tuple[str, Mutation]] = {
    # name: (base model, mutation)
    "dup_output": ("matmul", _dup_output),
    "dup_output_same_type": ("conv", _dup_output_same_type),
    "dup_graph_output": ("conv", _dup_graph_output),
    "input_also_produced": ("conv", _input_also_produced),
    "initializer_also_produced": ("matmul", _initializer_also_produced),
    "dangling_input": ("conv", _dangling_input),
    "dangling_output": ("conv", _dangling_output),
    "cycle": ("conv", _cycle),
    "self_loop": ("conv", _self_loop),
    "unknown_op": ("conv", _unknown_op),
    "unknown_op_typed": ("conv", _unknown_op_typed),
    "unknown_domain": ("conv", _unknown_domain),
    "undeclared_domain": ("conv", _undeclared_domain),
    "init_wrong_dtype": ("conv", _init_wrong_dtype),
    "init_wrong_dtype_int": ("matmul", _init_wrong_dtype_int),
    "init_wrong_shape": ("conv", _init_wrong_shape),
    "init_short_data": ("matmul", _init_short_data),
    "init_huge_dims": ("matmul", _init_huge_dims),
    "init_negative_dims": ("matmul", _init_negative_dims),
    "init_undefined_dtype": ("matmul", _init_undefined_dtype),
    "init_string": ("matmul", _init_string),
    "init_external_missing": ("matmul", _init_external_missing),
    "init_external_escape": ("matmul", _init_external_escape),
    "reshape_bad_shape": ("matmul", _reshape_bad_shape),
    "reshape_runtime_input": ("matmul", _reshape_runtime_input),
    "reshape_float_shape": ("matmul", _reshape_float_shape),
    "huge_dims": ("conv", _huge_dims),
    "huge_dim": ("conv", _huge_dim),
    "negative_dim": ("conv", _negative_dim),
    "zero_dim": ("conv", _zero_dim),
    "symbolic_dims": ("conv", _symbolic_dims),
    "wrong_rank": ("conv", _wrong_rank),
    "no_input_shape": ("conv", _no_input_shape),
    "input_string_dtype": ("conv", _input_string_dtype),
    "input_undefined_dtype": ("conv", _input_undefined_dtype),
    "input_not_tensor": ("conv", _input_not_tensor),
    "output_wrong_type": ("conv", _output_wrong_type),
    "output_wrong_shape": ("conv", _output_wrong_shape),
    "empty_graph": ("conv", _empty_graph),
    "no_nodes": ("conv", _no_nodes),
    "no_outputs": ("conv", _no_outputs),
    "no_inputs": ("conv", _no_inputs),
    "output_is_input": ("conv", _output_is_input),
    "no_graph": ("conv", _no_graph),
    "missing_opset": ("conv", _missing_opset),
    "old_opset": ("conv", _old_opset),
    "future_opset": ("conv", _future_opset),
    "future_ir": ("conv", _future_ir),
    "bad_attr_type": ("conv", _bad_attr_type),
    "bad_attr_value": ("conv", _bad_attr_value),
    "huge_pads": ("conv", _huge_pads),
    "unknown_attr": ("conv", _unknown_attr),
    "zero_strides": ("conv", _zero_strides),
    "wrong_arity": ("conv", _wrong_arity),
    "no_node_inputs": ("conv", _no_node_inputs),
    "empty_names": ("conv", _empty_names),
    "nested_subgraph": ("conv", _nested_subgraph),
    "garbage_tail": ("conv", _garbage_tail),
    "doubled": ("conv", _doubled),
}


def structural(name: str) -> bytes:
    """The serialized model of structural mutation ``name`` (see :data:`STRUCTURAL`)."""
    base, fn = STRUCTURAL[name]
    m = onnx.ModelProto()
    m.CopyFrom(base_models()[base])
    out = fn(m)
    return out if isinstance(out, bytes) else out.SerializeToString()


# ----------------------------------------------------------------------------- random structural edits

_OPS = ("Relu", "Add", "Mul", "MatMul", "Conv", "Reshape", "Sigmoid", "Transpose", "Concat", "Identity", "Gemm",
        "Softmax", "Flatten", "Squeeze", "Unsqueeze", "Gather", "Slice", "Split", "ReduceSum", "Cast", "Where",
        "Frobnicate")
_DIMS = (0, 1, 2, 3, 7, -1, -7, 1 << 31, 10**6, 10**12)
_ATTRS = (("axis", 5), ("axis", -9), ("perm", [3, 0]), ("pads", [1, 1]), ("group", 0), ("group", 3),
          ("kernel_shape", [9, 9]), ("to", 99), ("to", 8), ("keepdims", 7), ("alpha", float("nan")),
          ("strides", [0, 1]), ("dilations", [100, 100]), ("allowzero", 1), ("transB", 1), ("noop_with_empty_axes", 1))


def _names(m: onnx.ModelProto) -> list[str]:
    names = [i.name for i in m.graph.input] + [t.name for t in m.graph.initializer]
    return names + [o for n in m.graph.node for o in n.output]


def _edit(m: onnx.ModelProto, rng: random.Random) -> str:
    """One random edit of ``m`` in place; returns what it did."""
    g = m.graph
    kind = rng.randrange(12)
    if kind == 0 and g.node:
        n = rng.choice(g.node)
        n.op_type = rng.choice(_OPS)
        return f"op {n.name}->{n.op_type}"
    if kind == 1 and g.node:
        n = rng.choice(g.node)
        if n.input:
            i = rng.randrange(len(n.input))
            n.input[i] = rng.choice([*_names(m), "", "ghost"])
            return f"input {n.name}[{i}]->{n.input[i]!r}"
    if kind == 2 and g.node:
        n = rng.choice(g.node)
        n.output[0] = rng.choice([*_names(m), ""])
        return f"output {n.name}->{n.output[0]!r}"
    if kind == 3 and g.input:
        vi = rng.choice(g.input)
        dims = vi.type.tensor_type.shape.dim
        if dims:
            k = rng.randrange(len(dims))
            dims[k].dim_value = rng.choice(_DIMS)
            return f"dim {vi.name}[{k}]->{dims[k].dim_value}"
    if kind == 4 and g.node:
        n = rng.choice(g.node)
        name, value = rng.choice(_ATTRS)
        for a in list(n.attribute):
            if a.name == name:
                n.attribute.remove(a)
        n.attribute.append(helper.make_attribute(name, value))
        return f"attr {n.name}.{name}={value}"
    if kind == 5 and g.node:
        n = rng.choice(g.node)
        g.node.remove(n)
        return f"delete {n.name}"
    if kind == 6 and g.node:
        n = rng.choice(g.node)
        g.node.insert(rng.randrange(len(g.node) + 1), n)
        return f"duplicate {n.name}"
    if kind == 7 and g.initializer:
        t = rng.choice(g.initializer)
        t.data_type = rng.choice([0, 2, 6, 7, 8, 10, 11, 16, 99])
        return f"dtype {t.name}->{t.data_type}"
    if kind == 8 and g.initializer:
        t = rng.choice(g.initializer)
        if t.dims:
            k = rng.randrange(len(t.dims))
            t.dims[k] = rng.choice(_DIMS)
            return f"init dim {t.name}[{k}]->{t.dims[k]}"
    if kind == 9:
        m.opset_import[0].version = rng.choice([1, 6, 11, 13, 18, 21, 28, 30])
        return f"opset->{m.opset_import[0].version}"
    if kind == 10 and g.node:
        o = rng.choice(g.node).output[0]
        g.output.append(_vi(o, None))
        return f"add output {o}"
    if kind == 11 and g.node:
        n = rng.choice(g.node)
        n.domain = rng.choice(["ai.onnx", "com.microsoft", "ai.onnx.ml", "com.example"])
        return f"domain {n.name}->{n.domain}"
    return "nothing"


def random_structural(n: int, *, seed: int) -> list[tuple[str, bytes]]:
    """``n`` models, each a base model after one to three random structural edits: ``(description, bytes)``."""
    rng = random.Random(seed)
    bases = base_models()
    out = []
    for _ in range(n):
        name = rng.choice(sorted(bases))
        m = onnx.ModelProto()
        m.CopyFrom(bases[name])
        what = [_edit(m, rng) for _ in range(rng.randint(1, 3))]
        out.append((f"{name}: {'; '.join(what)}", m.SerializeToString()))
    return out


# ----------------------------------------------------------------------------- not models at all

SPECIAL_BYTES: dict[str, bytes] = {
    "empty": b"",
    "text": b"this is not an onnx model\n",
    "json": b'{"graph": {"node": []}}',
    "zeros": bytes(4096),
    "ones": b"\xff" * 4096,
    "random": random.Random(7).randbytes(2048),
    "utf16": "ir_version: 8".encode("utf-16"),
    "varint_bomb": b"\x3a\xff\xff\xff\xff\x0f",  # graph field claiming a 4 GB length
}


def special_files(directory: Path) -> dict[str, Path]:
    """Write :data:`SPECIAL_BYTES` as ``.onnx`` files into ``directory``, plus a directory named like a model
    and a path that does not exist; returns ``{name: path}``."""
    out = {}
    for name, data in SPECIAL_BYTES.items():
        p = directory / f"special_{name}.onnx"
        p.write_bytes(data)
        out[name] = p
    d = directory / "special_dir.onnx"
    d.mkdir(exist_ok=True)
    out["directory"] = d
    out["missing"] = directory / "does_not_exist.onnx"
    return out


__all__ = ["OPSET", "SPECIAL_BYTES", "STRUCTURAL", "base_models", "byte_flips", "conv_model", "graphsub_export",
           "matmul_model", "random_structural", "special_files", "structural", "symbolic_model", "truncations"]
