"""Channels-first MLPs: the ``layout`` candidates of :mod:`graphsub.optimize.portfolio`.

PyTorch models written channels-last between convolutions -- ConvNeXt's block is the common case,
``dwconv -> permute(0, 2, 3, 1) -> LayerNorm -> Linear -> GELU -> Linear -> permute(0, 3, 1, 2) -> * gamma`` --
export as ``Transpose -> LayerNormalization -> MatMul -> Add -> (GELU) -> MatMul -> Add -> Transpose -> Mul``.
onnxruntime runs its convolutions in the blocked NCHWc layout, but a MatMul over the last axis of an NHWC tensor is
outside that layout, so every block pays a ReorderOutput, two transposes and a ReorderInput (18
ReorderInput and 22 ReorderOutput in ConvNeXt-T's optimized graph, ``experiments/results/channels_first.json``).

A ``MatMul`` by a constant ``W`` over the channel axis is a 1x1 convolution: ``transpose(x @ W, (0, 3, 1, 2)) ==
conv(transpose(x, (0, 3, 1, 2)), W^T[:, :, None, None])``, and so is the bias ``Add`` after it (the conv's bias).
Elementwise ops between the MatMuls (GELU, or its erf decomposition with scalar constants) commute with the
transpose; a bias over the last axis becomes one of shape ``[C, 1, 1]``. :func:`rewrite` therefore moves the
closing ``Transpose(0, 3, 1, 2)`` of such a region up to just after its ``LayerNormalization`` (which stays over
the last axis: no single ONNX op normalises over axis 1) and writes the region channels-first, ``MatMul (+ Add)``
as ``Conv``; a layer scale ``Mul`` by a constant ``[C, 1, 1]`` right after the region is folded into the last
``Conv``'s weights and bias. The arithmetic is the same up to float rounding (a conv sums in another order), and
every candidate is verified against the original before it is timed.

Measured (``experiments/results/channels_first.json``): ConvNeXt-T exported by TorchScript, ORT_ENABLE_ALL at 2
threads, 1.17x faster (1.20x the dynamo export; 1.10x / 1.12x at 1 thread); keeping the LayerNormalization
channels-last beat a hand-written channel-axis normalisation (ReduceMean / Sub / Mul / Sqrt / Div: 1.14x against
1.18x, measured 2026-11-27 at 675f4c4, see git history). Whether it pays depends on the model and the machine, so
it only makes candidates: the portfolio times them and keeps one only when it is faster.

Regions are accepted only when every tensor in them is used inside the region (or by its closing transpose) and
none is a graph output; anything else -- an op outside the list below, a non-constant weight, a bias of another
shape -- leaves that region as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
UNARY = frozenset({"Erf", "Gelu", "Tanh", "Sigmoid", "Relu", "Sqrt", "Neg", "Abs", "Exp", "Identity", "Softplus",
                   "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Mish", "FastGelu"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"})
SUFFIX = "__nchw"  # the channels-first twin of a region tensor (and the names of the new nodes)
TAG = "graphsub_cf"  # the new constants' names start with it


@dataclass
class ModelIndex:
    """Index of a model's main graph: producers, consumers, constants (initializers, ``Constant`` nodes, and the
    ``Identity`` of a constant)."""

    graph: onnx.GraphProto
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    consumers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, graph: onnx.GraphProto) -> ModelIndex:
        m = cls(graph)
        for init in graph.initializer:
            if not init.data_location:  # external data is not loaded here: such weights are left alone
                m.consts[init.name] = numpy_helper.to_array(init)
        for node in graph.node:
            for o in node.output:
                m.producer[o] = node
            for i in node.input:
                if i:
                    m.consumers.setdefault(i, []).append(node)
            if node.op_type == "Constant" and not node.domain:
                value = next((a for a in node.attribute if a.name == "value"), None)
                if value is not None:
                    m.consts[node.output[0]] = numpy_helper.to_array(value.t)
            elif node.op_type == "Identity" and not node.domain and node.input and node.input[0] in m.consts:
                m.consts[node.output[0]] = m.consts[node.input[0]]  # how torch's exporter shares a weight
        m.outputs = {o.name for o in graph.output}
        return m

    def uses(self, name: str) -> list[onnx.NodeProto]:
        return self.consumers.get(name, [])


def _perm(node: onnx.NodeProto) -> list[int] | None:
    for a in node.attribute:
        if a.name == "perm":
            return list(a.ints)
    return None


def _is_transpose(node: onnx.NodeProto, perm: list[int]) -> bool:
    return node.op_type == "Transpose" and not node.domain and _perm(node) == perm


def _ln_last_axis(m: ModelIndex, node: onnx.NodeProto) -> bool:
    """A LayerNormalization over the last axis whose mean / inverse-std outputs nobody reads."""
    if node.op_type != "LayerNormalization" or node.domain:
        return False
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    extra = [o for o in node.output[1:] if o]
    return axis in (-1, 3) and not any(m.uses(o) or o in m.outputs for o in extra)


@dataclass
class Region:
    """One channels-last region: its LayerNormalization, its nodes in graph order, its closing transposes."""

    ln: onnx.NodeProto
    nodes: list[onnx.NodeProto]
    exits: list[onnx.NodeProto]


def _const_ok(m: ModelIndex, name: str) -> bool:
    """A constant a region op may take: a scalar, or a vector over the last axis."""
    v = m.consts.get(name)
    return v is not None and (v.size == 1 or v.ndim == 1)


def _accepts(m: ModelIndex, node: onnx.NodeProto, inside: set[str]) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return node.domain == "com.microsoft" and node.op_type in ("Gelu", "FastGelu") and len(node.input) == 1
    if node.op_type == "MatMul":
        w = m.consts.get(node.input[1])
        return node.input[0] in inside and node.input[1] not in inside and w is not None and w.ndim == 2
    if node.op_type in UNARY:
        return len([i for i in node.input if i]) == 1
    if node.op_type in BINARY:
        return all(i in inside or _const_ok(m, i) for i in node.input) and any(i in inside for i in node.input)
    return False


def find_regions(model: onnx.ModelProto) -> list[Region]:
    """The channels-last regions of ``model``'s main graph that :func:`rewrite` would write channels-first."""
    return _find(ModelIndex.of(model.graph))


def _find(m: ModelIndex) -> list[Region]:
    regions = []
    for t1 in m.graph.node:
        if not _is_transpose(t1, TO_NHWC):
            continue
        ln = m.uses(t1.output[0])
        if len(ln) != 1 or not _ln_last_axis(m, ln[0]) or ln[0].input[0] != t1.output[0]:
            continue
        region = _grow(m, ln[0])
        if region is not None:
            regions.append(region)
    return regions


def _grow(m: ModelIndex, ln: onnx.NodeProto) -> Region | None:
    """The region fed by ``ln``'s output, or None when it is not one :func:`rewrite` can take whole."""
    inside = {ln.output[0]}
    taken: dict[int, onnx.NodeProto] = {}
    exits: dict[int, onnx.NodeProto] = {}
    work = [ln.output[0]]
    while work:
        name = work.pop()
        if name in m.outputs:
            return None
        users = m.uses(name)
        if not users:
            return None
        for user in users:
            if id(user) in taken or id(user) in exits:
                continue
            if _is_transpose(user, TO_NCHW):
                exits[id(user)] = user
                continue
            # a binary op's other operand may be a region tensor the walk has not reached yet: it only needs a
            # producer here; the check after the walk, with every region tensor known, is the real one
            if not _accepts(m, user, inside | {i for i in user.input if i in m.producer}):
                return None
            taken[id(user)] = user
            for o in user.output:
                inside.add(o)
                work.append(o)
    # a binary op may read a region tensor found later in the walk: check every input again, now that all are known
    for node in taken.values():
        if not _accepts(m, node, inside):
            return None
    if not exits or not any(n.op_type == "MatMul" for n in taken.values()):
        return None
    order = {id(n): k for k, n in enumerate(m.graph.node)}
    return Region(ln, sorted(taken.values(), key=lambda n: order[id(n)]), list(exits.values()))


class _Writer:
    """Emits the channels-first nodes of one region and the constants they need."""

    def __init__(self, m: ModelIndex, tag: str):
        self.m = m
        self.tag = tag
        self.values: dict[str, np.ndarray] = {}  # the new constants, written out by :meth:`initializers`

    def const(self, value: np.ndarray, what: str) -> str:
        name = f"{self.tag}_{what}{len(self.values)}"
        self.values[name] = value
        return name

    def initializers(self) -> list[onnx.TensorProto]:
        return [numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in self.values.items()]

    def channel_const(self, name: str) -> str:
        v = self.m.consts[name]
        if v.size == 1:
            return name
        return self.const(v.reshape(-1, 1, 1), "c")


def _twin(name: str) -> str:
    return name + SUFFIX


def rewrite(model: onnx.ModelProto) -> int:
    """Write every region :func:`find_regions` finds channels-first, in place; returns how many were rewritten."""
    g = model.graph
    names = {i.name for i in g.initializer} | {t for n in g.node for t in (*n.input, *n.output)}
    if any(SUFFIX in t or t.startswith(TAG) for t in names):
        return 0  # names this pass would make are taken (a model it already rewrote): left as it is
    m = ModelIndex.of(g)
    regions = _find(m)
    if not regions:
        return 0
    w = _Writer(m, TAG)
    before: dict[int, list[onnx.NodeProto]] = {}  # new nodes to emit before the node of this id
    after: dict[int, list[onnx.NodeProto]] = {}  # ... after it
    drop: set[int] = set()
    rename: dict[str, str] = {}
    for region in regions:
        after.setdefault(id(region.ln), []).append(
            helper.make_node("Transpose", [region.ln.output[0]], [_twin(region.ln.output[0])], perm=TO_NCHW))
        folded: set[int] = set()
        inside = _region_tensors(region)
        for node in region.nodes:
            drop.add(id(node))
            if id(node) in folded:
                continue
            new, bias_add = _channels_first(node, inside, m, w)
            if bias_add is not None:
                folded.add(id(bias_add))
            before.setdefault(id(node), []).extend(new)
        for t2 in region.exits:
            drop.add(id(t2))
            rename[t2.output[0]] = _twin(t2.input[0])
        for t2 in region.exits:
            _fold_scale(t2, m, w, before, drop, rename)
    nodes: list[onnx.NodeProto] = []
    for node in g.node:
        nodes.extend(before.get(id(node), []))
        if id(node) not in drop:
            nodes.append(node)
        nodes.extend(after.get(id(node), []))
    for node in nodes:
        for k, i in enumerate(node.input):
            while i in rename:
                i = rename[i]
            node.input[k] = i
    for out in g.output:  # a closing transpose's output that the graph returns: keep its name
        target = out.name
        while target in rename:
            target = rename[target]
        if target != out.name:
            nodes.append(helper.make_node("Identity", [target], [out.name]))
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(w.initializers())
    drop_unused(g)
    return len(regions)


def _channels_first(node: onnx.NodeProto, inside: set[str], m: ModelIndex,
                    w: _Writer) -> tuple[list[onnx.NodeProto], onnx.NodeProto | None]:
    """The NCHW nodes for region node ``node`` and the bias ``Add`` folded into it (a MatMul's), if any."""
    if node.op_type == "MatMul":
        weight = m.consts[node.input[1]]
        kernel = w.const(weight.T.reshape(weight.shape[1], weight.shape[0], 1, 1), "w")
        ins = [_twin(node.input[0]), kernel]
        out = node.output[0]
        users = m.uses(out)
        add = users[0] if len(users) == 1 and users[0].op_type == "Add" and not users[0].domain else None
        bias = None if add is None else next((i for i in add.input if i != out), None)
        b = None if bias is None else m.consts.get(bias)
        if add is not None and b is not None and b.ndim == 1 and b.shape[0] == weight.shape[1] and \
                add.input[0] != add.input[1]:
            ins.append(w.const(b, "b"))
            out = add.output[0]
        else:
            add = None
        return [helper.make_node("Conv", ins, [_twin(out)], kernel_shape=[1, 1],
                                 name=(node.name or out) + SUFFIX)], add
    ins = [_twin(i) if i in inside else w.channel_const(i) for i in node.input]
    new = helper.make_node(node.op_type, ins, [_twin(o) for o in node.output], domain=node.domain,
                           name=(node.name or node.output[0]) + SUFFIX)
    new.attribute.extend(node.attribute)
    return [new], None


def _region_tensors(region: Region) -> set[str]:
    names = {region.ln.output[0]}
    for node in region.nodes:
        names.update(node.output)
    return names


def _fold_scale(t2: onnx.NodeProto, m: ModelIndex, w: _Writer, before: dict[int, list[onnx.NodeProto]],
                drop: set[int], rename: dict[str, str]) -> None:
    """Fold a layer scale ``Mul(t2's output, gamma)``, ``gamma`` a constant of shape ``[C, 1, 1]`` or
    ``[1, C, 1, 1]``, into the Conv that now computes ``t2``'s input (when nothing else reads that value)."""
    users = m.uses(t2.output[0])
    if len(users) != 1 or t2.output[0] in m.outputs or len(m.uses(t2.input[0])) != 1:
        return
    mul = users[0]
    if mul.op_type != "Mul" or mul.domain or len(mul.input) != 2 or mul.input[0] == mul.input[1]:
        return
    gamma = m.consts.get(mul.input[1] if mul.input[0] == t2.output[0] else mul.input[0])
    src = _twin(t2.input[0])
    conv = next((n for ns in before.values() for n in ns if n.op_type == "Conv" and n.output[0] == src), None)
    if gamma is None or conv is None:
        return
    kernel = w.values[conv.input[1]]
    channels = kernel.shape[0]
    if gamma.shape not in ((channels, 1, 1), (1, channels, 1, 1)):
        return
    scale = gamma.reshape(-1).astype(kernel.dtype)
    w.values[conv.input[1]] = kernel * scale[:, None, None, None]
    if len(conv.input) > 2:
        w.values[conv.input[2]] = w.values[conv.input[2]] * scale
    drop.add(id(mul))
    rename[mul.output[0]] = src


def drop_unused(g: onnx.GraphProto) -> None:
    """Remove initializers and value_info no node reads any more (the MatMul weights that became kernels)."""
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    _subgraph_inputs(g.node, used)
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    produced = {o for n in g.node for o in n.output} | {i.name for i in g.input}
    vi = [v for v in g.value_info if v.name in produced]
    del g.value_info[:]
    g.value_info.extend(vi)


def _subgraph_inputs(nodes: Sequence[onnx.NodeProto], used: set[str]) -> None:
    """Names read inside subgraphs (If / Loop / Scan bodies may read outer initializers)."""
    for n in nodes:
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                used.update(i for s in sub.node for i in s.input)
                _subgraph_inputs(sub.node, used)


def rewrite_serialized(data: bytes, rewrite_fn: Callable[[onnx.ModelProto], int]) -> tuple[bytes, int] | None:
    """An in-place ``rewrite_fn`` (returning how many places it rewrote) on a serialized model: the new bytes and
    that count; None when nothing is rewritten, or when the weights live in side files this blob cannot carry."""
    model = onnx.load_from_string(data)
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer):
        return None
    n = rewrite_fn(model)
    if not n:
        return None
    return model.SerializeToString(), n


def rewrite_bytes(data: bytes) -> tuple[bytes, int] | None:
    """:func:`rewrite` on a serialized model; None when nothing is rewritten."""
    return rewrite_serialized(data, rewrite)


__all__ = ["ModelIndex", "Region", "drop_unused", "find_regions", "rewrite", "rewrite_bytes", "rewrite_serialized"]
