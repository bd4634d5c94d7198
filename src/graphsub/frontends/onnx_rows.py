"""Sequence activations written as rows: the ``rows`` candidates of :mod:`graphsub.optimize.portfolio`.

Transformer exports carry their activations as ``[batch, sequence, hidden]`` tensors (``[sequence, batch, hidden]``
for ``nn.MultiheadAttention``), batch 1 included.  onnxruntime fuses each projection (``MatMul`` by a constant plus
a bias ``Add``) into a ``Gemm``, but ``Gemm`` is two-dimensional, so on a rank-3 input it wraps every one in
``Reshape -> Gemm -> Reshape``, and the CPU provider's ``Reshape`` kernel copies its tensor: whisper-tiny's encoder
exported at batch 1 runs 52 ``Reshape`` kernels, 6-7% of its time at 2 threads (5-15 us each, profiled).

Between two attention cores every op of a transformer layer works on the last axis alone -- projections, bias and
residual additions, ``LayerNormalization``, GELU, the feed-forward block -- so the same computation can be written
on *rows*: ``[a, b, c]`` as ``[a * b, c]``.  Merging the two leading axes keeps the row-major order of the elements,
so each op computes exactly the values it did; onnxruntime then makes plain ``Gemm`` nodes, and the only reshapes
left are the ones that split and merge attention heads, which the graph had anyway (they now read the rows tensor
directly: a ``Reshape`` to a constant shape does not care how its input was shaped).

:func:`rewrite` takes every node of the main graph whose output is a static rank-3 tensor and that works on the
last axis only (see ``_accepts`` for the list and the rules on the other operands' shapes); a value such a node reads
from outside gets one ``Reshape`` in, and a value read outside gets one ``Reshape`` out (under its old name), unless
the reader is itself a ``Reshape`` to a constant shape.  A connected part is rewritten only when the ``Gemm``
reshapes it saves (two per projection with a bias) outnumber the reshapes it adds.  Whether it pays still depends on
the model and the machine, so this only makes candidates: the portfolio verifies and times them, and keeps one only
when it is faster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from graphsub.frontends.onnx_layout import ModelIndex, drop_unused, rewrite_serialized

SUFFIX = "__rows"  # the rows twin of a tensor (and the names of the new nodes)
TAG = "graphsub_rows"  # the new constants' names start with it
LIGHT_BYTES = 4096  # initializers up to this size keep their data for shape inference (shape targets, axes)
MIN_OPSET = 13  # Softmax / LogSoftmax over one axis (opset 13 semantics), Reshape with a shape input

UNARY = frozenset({"Erf", "Gelu", "Tanh", "Sigmoid", "Relu", "Sqrt", "Neg", "Abs", "Exp", "Log", "Reciprocal",
                   "Identity", "Softplus", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Cast", "Mish"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum"})
LAST_AXIS = frozenset({"Softmax", "LogSoftmax", "LayerNormalization"})
MS_ELEMENTWISE = frozenset({"Gelu", "FastGelu", "BiasGelu", "QuickGelu"})  # com.microsoft, over the last axis

Shape = tuple[int, ...]


@dataclass
class _Plan:
    """What :func:`rewrite` will do: the nodes taken (by position), the rows shape of every region tensor."""

    taken: dict[int, tuple[int, int]] = field(default_factory=dict)  # node position -> its (a, b)
    rows: dict[str, Shape] = field(default_factory=dict)  # region tensor -> its rows shape
    parts: int = 0  # connected parts taken


def _static_shapes(model: onnx.ModelProto) -> dict[str, Shape]:
    """Every tensor of the main graph whose shape onnx's inference knows in full (and has no empty dimension).

    Inference runs on a copy whose large initializers are declared as inputs of their type and shape instead of
    carrying their data: only small ones (shape targets, axes) are read by it, and copying a model's weights into
    onnx's checker and back is most of the time otherwise (0.7 s on a 65 MB GPT-2, against 0.1 s)."""
    light = onnx.ModelProto()
    light.CopyFrom(model)
    g0 = light.graph
    big = [t for t in g0.initializer if t.ByteSize() > LIGHT_BYTES]
    keep = [t for t in g0.initializer if t.ByteSize() <= LIGHT_BYTES]
    del g0.initializer[:]
    g0.initializer.extend(keep)
    g0.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in big)
    inferred = shape_inference.infer_shapes(light, data_prop=True)
    out: dict[str, Shape] = {}
    g = inferred.graph
    for vi in (*g.value_info, *g.input, *g.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if all(d > 0 for d in dims):  # no symbolic dimension, and no empty one (a 0 in a Reshape target copies)
            out[vi.name] = tuple(dims)
    return out


def rows_shape(shape: Shape, a: int, b: int) -> Shape | None:
    """The shape an operand of shape ``shape`` takes beside a rank-3 ``[a, b, c]`` tensor written as ``[a * b, c]``,
    broadcasting to the same elements; None when no 2-D shape does (e.g. ``[1, b, c]`` against ``a > 1``).

    >>> rows_shape((2, 5, 8), 2, 5), rows_shape((1, 1, 8), 2, 5), rows_shape((8,), 2, 5), rows_shape((1, 5, 8), 2, 5)
    ((10, 8), (1, 8), (8,), None)
    """
    if len(shape) <= 1:
        return shape
    if len(shape) == 2:
        p, c = shape
        return shape if p == 1 or (a == 1 and p == b) else None
    if len(shape) != 3:
        return None
    q, p, c = shape
    if (q, p) == (a, b):
        return (a * b, c)
    if q == 1 and (p == 1 or a == 1):
        return (p, c)
    return None


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for at in node.attribute:
        if at.name == name:
            return helper.get_attribute_value(at)
    return default


class _Finder:
    """Decides which nodes :func:`rewrite` takes (module docstring)."""

    def __init__(self, m: ModelIndex, shapes: dict[str, Shape]):
        self.m = m
        self.shapes = shapes

    def rank3(self, name: str) -> Shape | None:
        s = self.shapes.get(name)
        return s if s is not None and len(s) == 3 and name not in self.m.consts else None

    def shape(self, name: str) -> Shape | None:
        c = self.m.consts.get(name)
        return tuple(c.shape) if c is not None else self.shapes.get(name)

    def unused(self, names: list[str]) -> bool:
        return not any(o and (self.m.uses(o) or o in self.m.outputs) for o in names)

    def operands_ok(self, node: onnx.NodeProto, ins: list[str], a: int, b: int, out_c: int) -> bool:
        """Every operand of an elementwise node has a rows shape that broadcasts as the original did."""
        for i in ins:
            s = self.shape(i)
            if s is None or len(s) > 3 or (len(s) >= 1 and s[-1] not in (1, out_c)):
                return False
            if rows_shape(s, a, b) is None:
                return False
        return True

    def accepts(self, node: onnx.NodeProto) -> tuple[int, int] | None:
        """``(a, b)`` of a node that works on the last axis of its static ``[a, b, c]`` output, else None."""
        if not node.output or not node.output[0]:
            return None
        out = self.rank3(node.output[0])
        if out is None:
            return None
        a, b, c = out
        op, ins = node.op_type, [i for i in node.input if i]
        if node.domain == "com.microsoft":
            ok = op in MS_ELEMENTWISE and len(node.output) == 1 and self.operands_ok(node, ins, a, b, c)
            return (a, b) if ok and self.rank3(ins[0]) == out else None
        if node.domain not in ("", "ai.onnx"):
            return None
        if op in UNARY or op == "Dropout":
            ok = len(ins) >= 1 and self.rank3(ins[0]) == out and self.unused(list(node.output[1:]))
            ok = ok and (op != "Dropout" or all(i in self.m.consts for i in ins[1:]))
            return (a, b) if ok and (op == "Dropout" or len(ins) == 1) else None
        if op in BINARY:
            ok = any(self.rank3(i) is not None for i in ins) and self.operands_ok(node, ins, a, b, c)
            return (a, b) if ok else None
        if op in LAST_AXIS:
            src = self.rank3(ins[0]) if ins else None
            if src is None or src[:2] != (a, b) or _attr(node, "axis", -1) not in (-1, 2):
                return None
            if op == "LayerNormalization" and (not self.unused(list(node.output[1:])) or
                                               any(len(self.shape(i) or ()) > 1 for i in ins[1:])):
                return None
            return (a, b)
        if op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"):
            axes = _attr(node, "axes")
            if axes is None and len(node.input) > 1 and node.input[1]:
                axes = self.m.consts.get(node.input[1])
            src = self.rank3(ins[0]) if ins else None
            ok = src is not None and src[:2] == (a, b) and axes is not None and \
                [int(x) for x in np.asarray(axes).reshape(-1)] in ([-1], [2]) and _attr(node, "keepdims", 1) == 1
            return (a, b) if ok else None
        if op == "MatMul":
            w = self.m.consts.get(node.input[1])
            src = self.rank3(node.input[0])
            return (a, b) if src is not None and src[:2] == (a, b) and w is not None and w.ndim == 2 else None
        if op == "Reshape":
            return (a, b) if len(node.input) == 2 and node.input[1] in self.m.consts else None
        if op == "Split":
            src = self.rank3(ins[0]) if ins else None
            outs = [self.rank3(o) if o else None for o in node.output]
            ok = src is not None and src[:2] == (a, b) and _attr(node, "axis", 0) in (-1, 2) and \
                all(s is not None and s[:2] == (a, b) for s in outs)
            return (a, b) if ok else None
        return None


def _reads_rows(node: onnx.NodeProto, k: int, m: ModelIndex) -> bool:
    """Whether input ``k`` of the non-region ``node`` may be fed the rows tensor: a Reshape's data to a constant
    target without zeros (a zero would copy a dimension of the input, which the rows tensor does not have)."""
    if node.op_type != "Reshape" or node.domain or k != 0 or len(node.input) < 2:
        return False
    target = m.consts.get(node.input[1])
    return target is not None and not bool((target == 0).any())


def plan(model: onnx.ModelProto, shapes: dict[str, Shape] | None = None) -> _Plan:
    """The nodes :func:`rewrite` would take (module docstring); empty when none.  ``shapes``: the static shapes of
    the main graph's tensors, when known (else inferred here)."""
    g = model.graph
    if not any(o.domain in ("", "ai.onnx") and o.version >= MIN_OPSET for o in model.opset_import):
        return _Plan()
    m = ModelIndex.of(g)
    f = _Finder(m, _static_shapes(model) if shapes is None else shapes)
    taken: dict[int, tuple[int, int]] = {}
    for k, node in enumerate(g.node):
        ab = f.accepts(node)
        if ab is not None:
            taken[k] = ab
    out_of = {o: k for k in taken for o in g.node[k].output if o}
    # connected parts (through region tensors), each kept only when it saves more reshapes than it adds
    parent = list(range(len(g.node)))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for k in taken:
        for i in g.node[k].input:
            if i in out_of:
                parent[root(k)] = root(out_of[i])
    sub_reads = _subgraph_reads(g)
    saved: dict[int, int] = {}
    added: dict[int, int] = {}
    entries: set[tuple[int, str]] = set()
    for k in taken:
        r = root(k)
        node = g.node[k]
        if node.op_type == "MatMul" and not node.domain and _bias_add(m, node):
            saved[r] = saved.get(r, 0) + 2
        elif node.op_type == "Reshape" and not node.domain and node.input[0] not in out_of and \
                f.shapes.get(node.input[0]) == _merged(f.shapes[node.output[0]]):
            saved[r] = saved.get(r, 0) + 1  # back to rank 3 after a 2-D op (a Gemm): now a no-op
        for i in node.input:
            if i and i not in out_of and f.rank3(i) is not None and node.op_type != "Reshape":
                entries.add((r, i))
    for r, _ in entries:
        added[r] = added.get(r, 0) + 1
    pos = {id(n): k for k, n in enumerate(g.node)}
    for name, k in out_of.items():
        readers = [u for u in m.uses(name) if pos[id(u)] not in taken]
        for u in readers:  # a reader that flattened it for a 2-D op (a Gemm) now reshapes to the shape it has
            target = m.consts.get(u.input[1]) if u.op_type == "Reshape" and len(u.input) > 1 else None
            if target is not None and u.input[0] == name and _reads_rows(u, 0, m) and \
                    f.shapes.get(u.output[0]) == _merged(f.shapes[name]):
                saved[root(k)] = saved.get(root(k), 0) + 1
        if name in m.outputs or name in sub_reads or any(
                not _reads_rows(u, j, m) for u in readers for j, i in enumerate(u.input) if i == name):
            added[root(k)] = added.get(root(k), 0) + 1
    keep = {r for r in saved if saved[r] > added.get(r, 0)}
    p = _Plan(parts=len(keep))
    for k, ab in taken.items():
        if root(k) in keep:
            p.taken[k] = ab
            for o in g.node[k].output:
                if o:
                    s = f.shapes[o]
                    p.rows[o] = (s[0] * s[1], s[2])
    return p


def _merged(shape: Shape) -> Shape:
    return (shape[0] * shape[1], shape[2])


def _bias_add(m: ModelIndex, mm: onnx.NodeProto) -> bool:
    """Whether the MatMul ``mm`` is a projection onnxruntime makes a Gemm of: its one reader adds a constant vector."""
    users = m.uses(mm.output[0])
    if len(users) != 1 or users[0].op_type != "Add" or users[0].domain:
        return False
    other = [i for i in users[0].input if i != mm.output[0]]
    return len(other) == 1 and other[0] in m.consts and m.consts[other[0]].ndim == 1


def _subgraph_reads(g: onnx.GraphProto) -> set[str]:
    names: set[str] = set()
    for n in g.node:
        for at in n.attribute:
            for sub in ([at.g] if at.type == onnx.AttributeProto.GRAPH else list(at.graphs)):
                names.update(i for s in sub.node for i in s.input)
                names |= _subgraph_reads(sub)
    return names


class _Writer:
    def __init__(self) -> None:
        self.inits: list[onnx.TensorProto] = []

    def const(self, value: np.ndarray, what: str) -> str:
        name = f"{TAG}_{what}{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def reshape(self, src: str, shape: Shape, dst: str) -> onnx.NodeProto:
        return helper.make_node("Reshape", [src, self.const(np.array(shape, dtype=np.int64), "shape")], [dst],
                                name=dst + "_reshape")


def rewrite(model: onnx.ModelProto) -> int:
    """Write the nodes :func:`plan` takes on rows, in place; returns how many connected parts were rewritten (0:
    none)."""
    g = model.graph
    names = {i.name for i in g.initializer} | {t for n in g.node for t in (*n.input, *n.output)}
    if any(SUFFIX in t or t.startswith(TAG) for t in names):
        return 0  # names this pass would make are taken (a model it already rewrote): left as it is
    shapes = _static_shapes(model)
    p = plan(model, shapes)
    if not p.taken:
        return 0
    m = ModelIndex.of(g)
    w = _Writer()
    entered: dict[str, str] = {}
    nodes: list[onnx.NodeProto] = []
    exits = _exits(g, p, m)
    for k, node in enumerate(g.node):
        if k not in p.taken:
            new = onnx.NodeProto()
            new.CopyFrom(node)
            for j, i in enumerate(node.input):
                if i in p.rows and _reads_rows(node, j, m):
                    new.input[j] = i + SUFFIX
            nodes.append(new)
            continue
        a, b = p.taken[k]
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = (node.name or node.output[0]) + SUFFIX
        if node.op_type == "Reshape" and not node.domain:
            new.input[1] = w.const(np.array(p.rows[node.output[0]], dtype=np.int64), "shape")
            if node.input[0] in p.rows:
                new.input[0] = node.input[0] + SUFFIX
        else:
            for j, i in enumerate(node.input):
                if not i:
                    continue
                if i in p.rows:
                    new.input[j] = i + SUFFIX
                    continue
                s = m.consts[i].shape if i in m.consts else shapes.get(i)
                if s is None or len(s) < 2 or (node.op_type == "MatMul" and j == 1):
                    continue  # scalars, vectors over the last axis, the MatMul's weight: as they are
                target = rows_shape(tuple(s), a, b)
                if target is None or tuple(target) == tuple(s):
                    continue
                if i in m.consts:
                    new.input[j] = w.const(m.consts[i].reshape(target), "c")
                else:
                    if i not in entered:
                        entered[i] = i + SUFFIX
                        nodes.append(w.reshape(i, target, entered[i]))
                    new.input[j] = entered[i]
            _last_axis(new, w, m)
        for j, o in enumerate(node.output):
            if o:
                new.output[j] = o + SUFFIX
        nodes.append(new)
        for o in node.output:
            if o in exits:
                nodes.append(w.reshape(o + SUFFIX, shapes[o], o))
    known = dict(shapes)
    known.update({o + SUFFIX: r for o, r in p.rows.items()})
    known.update({v: _merged(shapes[k]) for k, v in entered.items()})  # an entry merges the two leading axes
    nodes = _without_noop_reshapes(nodes, known, m.outputs | _subgraph_reads(g))
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(w.inits)
    drop_unused(g)
    return p.parts


def _without_noop_reshapes(nodes: list[onnx.NodeProto], shapes: dict[str, Shape],
                           keep: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` less every Reshape whose input already has its output's shape (a Gemm's flattening and unflattening
    of what is now a rows tensor), its readers reading its input instead; one whose output the graph returns or a
    subgraph reads stays.  (onnxruntime keeps such reshapes, and its CPU kernel copies.)"""
    rename: dict[str, str] = {}
    out = []
    for n in nodes:
        for j, i in enumerate(n.input):
            while i in rename:
                i = rename[i]
            n.input[j] = i
        if n.op_type == "Reshape" and not n.domain and n.output[0] not in keep and \
                shapes.get(n.input[0]) is not None and shapes.get(n.input[0]) == shapes.get(n.output[0]):
            rename[n.output[0]] = n.input[0]
            continue
        out.append(n)
    return out


def _exits(g: onnx.GraphProto, p: _Plan, m: ModelIndex) -> set[str]:
    """Region tensors that must keep their old name and shape: graph outputs, subgraph reads, and values read by a
    node outside the region that cannot take the rows tensor."""
    out = {o for o in p.rows if o in m.outputs} | (set(p.rows) & _subgraph_reads(g))
    for k, node in enumerate(g.node):
        if k in p.taken:
            continue
        for j, i in enumerate(node.input):
            if i in p.rows and not _reads_rows(node, j, m):
                out.add(i)
    return out


def _last_axis(node: onnx.NodeProto, w: _Writer, m: ModelIndex) -> None:
    """A node that named the last axis of a rank-3 tensor as axis 2 names it -1 (the last of two)."""
    for at in node.attribute:
        if at.name == "axis" and at.i == 2:
            at.i = -1
        if at.name == "axes" and list(at.ints) == [2]:
            del at.ints[:]
            at.ints.append(-1)
    if node.op_type.startswith("Reduce") and len(node.input) > 1 and node.input[1] in m.consts and \
            [int(x) for x in m.consts[node.input[1]].reshape(-1)] == [2]:
        node.input[1] = w.const(np.array([-1], dtype=np.int64), "axes")


def rewrite_bytes(data: bytes) -> tuple[bytes, int] | None:
    """:func:`rewrite` on a serialized model; None when nothing is rewritten."""
    return rewrite_serialized(data, rewrite)


__all__ = ["plan", "rewrite", "rewrite_bytes", "rows_shape"]
