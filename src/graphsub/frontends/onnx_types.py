"""Types and shapes of an ONNX graph's values, for :mod:`graphsub.frontends.onnx_import`: the inputs made static
(``input_shapes``, shared ``dim_param`` names, ``default_dim``; a key/value cache's total length as past + sequence:
:mod:`graphsub.frontends.cache`), ONNX shape inference on a light copy (large initializers become typed inputs),
the declared outputs checked against what the graph computes, and -- where inference leaves gaps and the inputs are
small -- one onnxruntime run to complete it."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import onnx
from onnx import helper

from graphsub.errors import GraphsubError, ImportError_
from graphsub.frontends.onnx_checks import check_size
from graphsub.ops.types import DTYPE_OF_ONNX_CODE, FLOAT_DTYPES, TensorType, dtype_of

log = logging.getLogger("graphsub")

#: whether an import says at which sizes it took an input's free symbolic dims (:func:`quiet_sizes`)
_ANNOUNCE: ContextVar[bool] = ContextVar("graphsub_announce_sizes", default=True)


@contextmanager
def quiet_sizes() -> Iterator[None]:
    """Imports inside it do not log the sizes they took free symbolic dims at: the imports an optimize call makes
    after the user's (the input again at other sizes, a peer's output) would repeat the user's warning, once per
    input each (33 lines instead of 11 on GPT-2 with a cache, 2026-11-30)."""
    token = _ANNOUNCE.set(False)
    try:
        yield
    finally:
        _ANNOUNCE.reset(token)


#: constant subgraphs are folded at import only up to this many elements (shape arithmetic, not weights)
FOLD_LIMIT = 4096


def tensor_type(name: str, tp: onnx.TypeProto, *, what: str) -> TensorType | None:
    """TensorType of a value's TypeProto; None when the shape is not fully static."""
    if not tp.HasField("tensor_type"):
        raise ImportError_(f"{what} {name!r} is not a tensor (sequence/map/optional unsupported)")
    tt = tp.tensor_type
    if tt.elem_type not in DTYPE_OF_ONNX_CODE:
        dt = onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type else "undefined"
        raise ImportError_(f"{what} {name!r} has unsupported dtype {dt}")
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(d.dim_value)
    return TensorType(tuple(dims), DTYPE_OF_ONNX_CODE[tt.elem_type])


def _derived_sizes(graph: onnx.GraphProto, bound: Mapping[str, int], default_dim: int | None) -> dict[str, int]:
    """Sizes of the symbolic dimensions that are sums of others: a key/value cache's total length, ``past +
    sequence`` (:func:`graphsub.frontends.cache.cache_dims`), when ``input_shapes`` leave it free."""
    from graphsub.frontends.cache import cache_dims
    from graphsub.frontends.dims import declared

    if default_dim is None:
        return {}
    cache = cache_dims(*declared(graph))
    if cache is None or cache.total in bound:
        return {}
    return {cache.total: bound.get(cache.past, default_dim) + bound.get(cache.sequence, default_dim)}


def static_inputs(
    graph: onnx.GraphProto, input_shapes: Mapping[str, Sequence[int]], default_dim: int | None,
    sizes: Mapping[str, int] | None = None,
) -> dict[str, TensorType]:
    """The static type of each graph input: ``input_shapes`` fix inputs (and the dim names they size, in every
    input); a symbolic dim that stays free is imported at its size in ``sizes`` (by ``dim_param`` name), else at
    ``default_dim`` (None: an error); a cache's total length is past + sequence."""
    from graphsub.frontends.dims import bound_params

    init_names = {t.name for t in graph.initializer}
    bound = bound_params(graph, input_shapes)  # a name --input-shape gives a size has it in every input
    sizes = {k: v for k, v in (sizes or {}).items() if k not in bound}
    derived = _derived_sizes(graph, {**sizes, **bound}, default_dim)
    out: dict[str, TensorType] = {}
    for vi in graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ImportError_(f"graph input {vi.name!r} is not a tensor")
        if tt.elem_type not in DTYPE_OF_ONNX_CODE:
            raise ImportError_(f"graph input {vi.name!r} has an unsupported dtype")
        if vi.name in input_shapes:
            shape = tuple(int(d) for d in input_shapes[vi.name])
            declared = list(tt.shape.dim) if tt.HasField("shape") else []
            if declared and len(declared) != len(shape):
                raise ImportError_(
                    f"--input-shape for {vi.name!r} has rank {len(shape)}, the model says {len(declared)}"
                )
            for d, s in zip(declared, shape, strict=False):
                if d.HasField("dim_value") and d.dim_value != s:
                    raise ImportError_(
                        f"input shape for {vi.name!r}: dimension {s} contradicts the model's {d.dim_value}"
                    )
        else:
            if not tt.HasField("shape"):
                raise ImportError_(f"graph input {vi.name!r} has no shape; pass input_shapes")
            dims: list[int] = []
            symbolic: list[str] = []  # the free dims, each as NAME=SIZE
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(d.dim_value)
                    continue
                if d.dim_param and d.dim_param in bound:
                    dims.append(bound[d.dim_param])
                    continue
                if d.dim_param in derived:  # a cache's total length: past + sequence, or the model cannot run
                    dims.append(derived[d.dim_param])
                elif d.dim_param and d.dim_param in sizes:
                    dims.append(sizes[d.dim_param])
                else:
                    dims.append(-1 if default_dim is None else default_dim)
                symbolic.append(f"{d.dim_param or '?'}={dims[-1]}")
            if symbolic and default_dim is None:
                names = [x.rpartition("=")[0] for x in symbolic]
                raise ImportError_(
                    f"graph input {vi.name!r} has symbolic dimensions {names}; give static shapes "
                    f"(e.g. --input-shape {vi.name}=1x3x224x224)"
                )
            if symbolic and _ANNOUNCE.get():
                total = [n for n in derived if any(x.startswith(f"{n}=") for x in symbolic)]
                log.warning(
                    "input %r: symbolic dimension(s) imported at %s%s (optimize --sizes NAME=N chooses them; "
                    "--input-shape makes them static); written models keep them symbolic where they can",
                    vi.name, ", ".join(symbolic), "".join(f"; {n} = past + sequence" for n in total),
                )
            shape = tuple(dims)
        if any(s <= 0 for s in shape) and shape:
            raise ImportError_(f"input {vi.name!r}: impossible shape {shape}")
        out[vi.name] = TensorType(shape, DTYPE_OF_ONNX_CODE[tt.elem_type])
        check_size(f"input {vi.name!r}", out[vi.name])
    unknown = set(input_shapes) - set(out)
    if unknown:
        raise ImportError_(f"input_shapes names unknown inputs {sorted(unknown)}; inputs: {sorted(out)}")
    return out


def light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for ONNX shape inference: initializers of more than :data:`FOLD_LIMIT` elements become
    graph inputs of their type (shape inference reads no weight data beyond shape arithmetic's)."""
    skel = onnx.ModelProto()
    skel.CopyFrom(model)
    g = skel.graph
    keep: list[onnx.TensorProto] = []
    move: list[onnx.TensorProto] = []
    for t in g.initializer:
        (keep if math.prod(t.dims) <= FOLD_LIMIT else move).append(t)
    for t in move:
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del g.initializer[:]
    g.initializer.extend(keep)
    return skel


def infer_types(model: onnx.ModelProto,
                 inputs: Mapping[str, TensorType]) -> tuple[dict[str, TensorType], set[str]]:
    """ONNX shape inference on a light copy (large initializers become typed inputs), and the names of the graph
    outputs whose type comes from their declaration alone (inference did not give one)."""
    skel = light_copy(model)
    g = skel.graph
    init_names = {t.name for t in g.initializer}
    for vi in g.output:  # inferred afresh: a wrong declaration must not become the type of the value
        vi.ClearField("type")
    for vi in g.input:
        if vi.name in inputs and vi.name not in init_names:
            given = inputs[vi.name]
            vi.type.tensor_type.ClearField("shape")
            for d in given.shape:
                vi.type.tensor_type.shape.dim.add().dim_value = d
    try:
        inferred = onnx.shape_inference.infer_shapes(skel, strict_mode=False, data_prop=True)
    except Exception as e:  # onnx raises InferenceError and others
        log.warning("ONNX shape inference failed (%s); relying on graphsub's own inference", e)
        inferred = skel
    out: dict[str, TensorType] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in DTYPE_OF_ONNX_CODE:
            t = tensor_type(vi.name, vi.type, what="value")
            if t is not None:
                out[vi.name] = t
    declared_only: set[str] = set()
    for vi in model.graph.output:  # declared types: for the outputs that inference left open
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in DTYPE_OF_ONNX_CODE:
            t = tensor_type(vi.name, vi.type, what="value")
            if t is None or vi.name in inputs:
                continue
            if vi.name not in out:
                out[vi.name] = t
                declared_only.add(vi.name)
            elif out[vi.name].dtype != t.dtype:
                raise ImportError_(f"graph output {vi.name!r} is declared {t.dtype} but the graph computes "
                                   f"{out[vi.name].dtype}: malformed model")
            elif out[vi.name] != t:
                log.warning("graph output %r is declared %s but the graph computes %s; using %s",
                            vi.name, t, out[vi.name], out[vi.name])
    missing = [o for node in model.graph.node for o in node.output if o and o not in out and o not in inputs]
    if missing:
        out.update(runtime_types(model, inputs, missing))
    return out, declared_only


def runtime_types(model: onnx.ModelProto, inputs: Mapping[str, TensorType],
                   names: Sequence[str]) -> dict[str, TensorType]:
    """The types of values ONNX shape inference left open, read off one onnxruntime run of the model on inputs of the
    static input shapes (zeros for integers: always valid indices; ones for floats and booleans).

    Exporters leave such values behind (a mask ``Expand``-ed to a shape computed from ``Shape`` ops, then ``Where``):
    with static input shapes their shapes are fixed, but only a run tells them.  A value whose shape depends on the
    data (``NonZero``) gets the shape of this run; the numeric check of every result guards what is built on it.
    Returns what the run gave (nothing when the model does not run)."""
    from graphsub.data import allocation_limit
    from graphsub.frontends.ort import make_session, run_session

    need = sum(t.nbytes for t in inputs.values())
    if 4 * need > allocation_limit():  # the inputs, and at least as much again for the values of the run
        log.info("not running the model to complete shape inference: its inputs take %d bytes", need)
        return {}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    present = {o.name for o in probe.graph.output}
    for name in names:
        if name not in present:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
    feeds = {n: (np.ones if t.dtype in FLOAT_DTYPES or t.dtype == "bool" else np.zeros)(t.shape, dtype=t.dtype)
             for n, t in inputs.items()}
    try:
        values = run_session(make_session(probe.SerializeToString(), optimization="disable", threads=1), feeds, names)
    except GraphsubError as e:
        log.info("could not run the model to complete shape inference: %s", e)
        return {}
    return {n: TensorType(tuple(int(d) for d in v.shape), dtype_of(v)) for n, v in zip(names, values, strict=True)
            if dtype_of(v) in FLOAT_DTYPES or v.dtype.kind in "iub"}


__all__ = ["FOLD_LIMIT", "infer_types", "quiet_sizes", "runtime_types", "static_inputs", "tensor_type"]
