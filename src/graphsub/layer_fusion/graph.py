"""The fusion view of a CNN: run-time ops, activation tensors and per-op row geometry.

:func:`fusion_graph` turns an IR :class:`~graphsub.ir.graph.Graph` into a :class:`FusionGraph`:

* **ops** are the IR compute nodes with at least one activation input, numbered ``0..n-1`` in
  the graph's canonical topological order;
* **views** (``flatten``, ``reshape``, ``squeeze``, ``unsqueeze``, ``identity``) are contracted:
  their consumers read the viewed tensor directly;
* **constants** (weights, and ops whose inputs are all constants) are folded: their elements
  count as the consuming op's weights (``weight[v]``), never as tensors;
* **tensors** are the op outputs (tensor id = op id) and the graph inputs (ids ``n..n+m-1``);
  every tensor has a ``(C, H, W)`` shape (batch 1; a rank-2 ``(1, F)`` tensor is ``(F, 1, 1)``).

Invariants: ``preds[v]`` lists distinct tensor ids, each an op ``< v`` or a graph input (so op
ids are a topological order); ``consumers[t]`` lists the ops reading tensor ``t`` in ascending
order; ``is_output[t]`` marks graph outputs.

>>> from graphsub import zoo
>>> fg = fusion_graph(zoo.get("resnet18"))
>>> fg.num_ops, fg.ops[0], fg.geom[0].kernel, fg.geom[0].stride   # flatten contracted
(48, 'conv2d', 7, 2)
>>> fg.shape[fg.num_ops], fg.preds[0]                              # the graph input tensor
((3, 224, 224), (48,))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from graphsub.errors import GraphError
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node
from graphsub.ops.common import resolve_pads

VIEW_OPS = frozenset({"flatten", "reshape", "squeeze", "unsqueeze", "identity"})
JOIN_OPS = frozenset({"add", "sub", "mul", "div", "concat"})
POOL_OPS = frozenset({"maxpool2d", "avgpool2d"})
DENSE_OPS = frozenset({"gemm", "matmul"})


@dataclass(frozen=True, slots=True)
class OpGeom:
    """Row geometry of one op, as seen by line-buffered execution.

    * ``kind``: ``conv``, ``dwconv`` (depthwise), ``dense`` (gemm/matmul), ``pool``,
      ``global`` (global average pool / spatial reduction), ``join`` (add/mul/concat... with
      >= 2 activation inputs), ``resize``, ``pad`` or ``eltwise`` (everything else);
    * ``kernel``: effective kernel height ``d * (K_h - 1) + 1`` (1 when not a window op);
    * ``stride``: input rows per output row (``Fraction`` for resizes: 1/2 when upsampling x2);
    * ``rows``: rows of each input the op keeps (``max(kernel, stride)`` for windows);
    * ``lookahead``: rows past the current one it needs (``kernel - 1 - pad_top``);
    * ``accum``: accumulator elements (the output size of a global op or dense layer).
    """

    kind: str
    kernel: int = 1
    stride: int | Fraction = 1
    rows: int = 1
    lookahead: int = 0
    accum: int = 0

    @property
    def is_global(self) -> bool:
        return self.kind in ("global", "dense")


@dataclass(frozen=True, slots=True)
class FusionGraph:
    """Ops, tensors and geometry of a CNN for fusion planning (see the module docstring)."""

    name: str
    ops: tuple[str, ...]
    node_ids: tuple[int, ...]
    preds: tuple[tuple[int, ...], ...]
    consumers: tuple[tuple[int, ...], ...]
    shape: tuple[tuple[int, int, int], ...]
    weight: tuple[int, ...]
    geom: tuple[OpGeom, ...]
    is_output: tuple[bool, ...]

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def num_tensors(self) -> int:
        return len(self.shape)

    def size(self, t: int) -> int:
        """Elements of tensor ``t`` (batch 1)."""
        c, h, w = self.shape[t]
        return c * h * w

    def succs(self, v: int) -> tuple[int, ...]:
        """Ops reading op ``v``'s output."""
        return self.consumers[v]

    def edges(self) -> list[tuple[int, int]]:
        """Op-to-op edges ``(u, v)``, ``u < v`` (graph-input tensors are not ops)."""
        return [(u, v) for v in range(self.num_ops) for u in self.preds[v] if u < self.num_ops]

    def label(self, v: int) -> str:
        return f"{v}:{self.ops[v]}"


def _chw(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 4:
        return (shape[1], shape[2], shape[3])
    if len(shape) == 3:
        return (shape[1], shape[2], 1)
    n = shape[0] if shape else 1
    return (math.prod(shape) // max(n, 1), 1, 1)


def _geom(node: Node, n_act: int) -> OpGeom:
    sig = node.sig
    op = sig.op
    a = sig.attr
    out = sig.out_types[0].shape
    if op in ("conv2d", "ms_fused_conv") or op in POOL_OPS:
        x = sig.in_types[0].shape
        if op in POOL_OPS:
            kh, kw = a["kernel"]
            dh, dw = 1, 1
        else:
            kh, kw = sig.in_types[1].shape[2:]
            dh, dw = a["dilations"]
        sh, sw = a["strides"]
        top = resolve_pads(a["pads"], x[2:], (kh, kw), (sh, sw), (dh, dw))[0]
        k = dh * (kh - 1) + 1
        kind = "pool"
        if op not in POOL_OPS:
            w = sig.in_types[1].shape
            kind = "dwconv" if w[1] == 1 and x[1] == w[0] and x[1] > 1 else "conv"
        return OpGeom(kind, k, sh, max(k, sh), k - 1 - top)
    if op == "global_avgpool" or (op in ("reduce_mean", "reduce_sum") and len(out) == 4
                                  and {2, 3} <= {ax % 4 for ax in a["axes"]}):
        return OpGeom("global", accum=math.prod(out))
    if op in DENSE_OPS:
        return OpGeom("dense", accum=math.prod(out))
    if op == "resize":
        h_in, h_out = sig.in_types[0].shape[-2], out[-2]
        linear = a["mode"] == "linear"
        return OpGeom("resize", 2 if linear else 1, Fraction(h_in, h_out), 2 if linear else 1, int(linear))
    if op == "pad" and len(out) == 4:
        return OpGeom("pad", lookahead=-int(a["pads"][2]))
    if op in JOIN_OPS and n_act >= 2:
        return OpGeom("join")
    return OpGeom("eltwise")


def fusion_graph(graph: Graph) -> FusionGraph:
    """Extract the fusion view of ``graph`` (views contracted, constants folded)."""
    src: dict[int, int | None] = {}  # IR node id -> tensor id (None: constant)
    ops: list[str] = []
    node_ids: list[int] = []
    preds: list[tuple[int, ...]] = []
    shape: list[tuple[int, int, int]] = []
    weight: list[int] = []
    geom: list[OpGeom] = []
    topo = graph.topo_order()
    # ops first (tensor ids 0..n-1), graph inputs after: number the inputs afterwards
    pending_inputs: dict[int, int] = {}
    for nid in topo:
        node = graph.nodes[nid]
        op = node.sig.op
        if op == "input":
            pending_inputs[nid] = len(pending_inputs)
            src[nid] = -1 - pending_inputs[nid]  # provisional, remapped below
            continue
        if op == "weight" or op.startswith("const_"):
            src[nid] = None
            continue
        act_ins: list[int] = []
        wsum = 0
        for r in node.inputs:
            s = src[r.node]
            if s is None:
                wsum += graph.type_of(r).numel
            elif s not in act_ins:
                act_ins.append(s)
        if not act_ins:
            src[nid] = None
            continue
        if op in VIEW_OPS:
            src[nid] = act_ins[0]
            continue
        src[nid] = len(ops)
        ops.append(op)
        node_ids.append(nid)
        preds.append(tuple(act_ins))
        outs = node.sig.out_types
        c, h, w = _chw(outs[0].shape)
        if len(outs) > 1:  # multi-output (split): count all outputs as one tensor
            c = sum(t.numel for t in outs) // max(h * w, 1)
        shape.append((c, h, w))
        if op == "batchnorm":
            wsum = 2 * c  # scale and shift after folding
        weight.append(wsum)
        geom.append(_geom(node, len(act_ins)))
    n = len(ops)
    if n == 0:
        raise GraphError(f"{graph.name}: no run-time ops to fuse")

    def remap(t: int) -> int:
        return n + (-1 - t) if t < 0 else t

    preds = [tuple(remap(t) for t in p) for p in preds]
    for nid in graph.inputs:
        shape.append(_chw(graph.nodes[nid].sig.out_types[0].shape))
    consumers: list[list[int]] = [[] for _ in shape]
    for v, p in enumerate(preds):
        for t in p:
            consumers[t].append(v)
    is_output = [False] * len(shape)
    for r in graph.outputs:
        s = src.get(r.node)
        if s is not None:
            is_output[remap(s)] = True
    return FusionGraph(
        name=graph.name,
        ops=tuple(ops),
        node_ids=tuple(node_ids),
        preds=tuple(preds),
        consumers=tuple(tuple(c) for c in consumers),
        shape=tuple(shape),
        weight=tuple(weight),
        geom=tuple(geom),
        is_output=tuple(is_output),
    )


__all__ = ["DENSE_OPS", "JOIN_OPS", "POOL_OPS", "VIEW_OPS", "FusionGraph", "OpGeom", "fusion_graph"]
