"""Rewritten variants of a graph, for calibrating cost models against real latencies.

The calibration (:mod:`graphsub.cost.calibrate`) needs several functionally equivalent graphs
per model whose latencies differ in ways a cost model should rank correctly:

* ``merge_siblings`` -- TASO/MetaFlow's "merge convs / matmuls sharing an input": siblings
  ``conv2d(x, w_i)`` with equal strides, pads, dilations, activation and kernel become one
  ``conv2d(x, concat(w_i))`` followed by ``split``; with ``enlarge=True`` a 1x1 sibling is first
  zero-padded to the others' odd kernel (OCGGS Figure 1).  Sibling ``matmul(x, W_i)`` with 2-D
  constant ``W_i`` merge the same way along the last axis.  Weight concatenation/enlarging is
  weight-only, hence free (folded before run time).
* ``roundtrip`` -- export and re-import through ONNX, which un-fuses activations
  (``conv2d(act=relu)`` -> ``conv2d`` + ``relu``).
* ``rule_variant`` -- greedily apply rules from :mod:`graphsub.rules` when that library is
  available (returns None otherwise).
* ``mbnet`` -- a small MobileNet-style network (depthwise 3x3 + pointwise 1x1 blocks) whose
  batchnorms and activations are a large share of the run time, written three ways (equivalent
  once the batchnorm parameters are folded into the conv weights and biases)
  (``folded``: ``conv2d(act=relu)`` with the batchnorm folded into the weights; ``relu``: a
  separate ``relu``; ``bn``: ``conv2d`` -> ``batchnorm`` -> ``relu``).  With all optimizations
  onnxruntime runs the three at the same speed; a sum of per-op times cannot know that.

Every function returns a new graph or None when nothing applies; none changes the function
computed (checked numerically in ``tests/cost/test_cost_variants.py``; ``mbnet`` variants up to
folding the batchnorm parameters).

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> x = b.input("x", (1, 16, 8, 8))
>>> g = b.build(b.concat(b.conv2d(x, b.weight("a", (8, 16, 3, 3)), pads=(1, 1, 1, 1)),
...                      b.conv2d(x, b.weight("b", (8, 16, 1, 1))), axis=1))
>>> merge_siblings(g) is None, merge_siblings(g, enlarge=True).op_histogram()
(True, {'concat': 2, 'conv2d': 1, 'enlarge': 1, 'split': 1})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphsub.errors import GraphsubError
from graphsub.ir.analysis import weight_only_map
from graphsub.ir.builder import Builder, Value
from graphsub.ir.edit import GraphEdit
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref


def _conv_key(graph: Graph, nid: int, wo: Mapping[int, bool], enlarge: bool) -> tuple[Any, ...] | None:
    node = graph.nodes[nid]
    a = node.sig.attr
    x_t, w_t = node.sig.in_types[0], node.sig.in_types[1]
    if w_t.shape[1] != x_t.shape[1] or not all(wo[r.node] for r in node.inputs[1:]):
        return None  # grouped conv, or weights computed at run time
    kernel, pads = w_t.shape[2:], tuple(a["pads"])
    if enlarge and kernel == (1, 1) and pads == (0, 0, 0, 0) and tuple(a["dilations"]) == (1, 1):
        return ("1x1", a["strides"], a["act"], len(node.inputs))
    return (kernel, pads, a["strides"], a["dilations"], a["act"], len(node.inputs))


def _sibling_groups(graph: Graph, enlarge: bool) -> list[tuple[str, Ref, list[int]]]:
    wo = weight_only_map(graph)
    groups: list[tuple[str, Ref, list[int]]] = []
    for pid in graph.topo_order():
        if wo[pid]:
            continue
        by_key: dict[tuple[Any, ...], list[int]] = {}
        for cid, slot in graph.users(pid):
            node = graph.nodes[cid]
            if slot != 0 or wo[cid]:
                continue
            if node.sig.op == "conv2d":
                key = _conv_key(graph, cid, wo, enlarge)
                if key is not None:
                    by_key.setdefault(("conv2d", node.inputs[0], *key), []).append(cid)
            elif node.sig.op == "matmul" and node.sig.in_types[1].rank == 2 and wo[node.inputs[1].node]:
                by_key.setdefault(("matmul", node.inputs[0], node.sig.attr["act"]), []).append(cid)
        ones = {k[1:]: v for k, v in by_key.items() if k[0] == "conv2d" and k[2] == "1x1"}
        for key, ids in by_key.items():
            if key[0] == "conv2d" and key[2] == "1x1":
                continue
            ids = list(dict.fromkeys(ids))
            if key[0] == "conv2d" and enlarge:
                kernel, pads, strides, dil, act, n_in = key[2:]
                odd = kernel[0] % 2 == 1 and kernel[1] % 2 == 1
                sym = pads == (kernel[0] // 2, kernel[1] // 2, kernel[0] // 2, kernel[1] // 2)
                if odd and sym and tuple(dil) == (1, 1):
                    ids += ones.pop((key[1], "1x1", strides, act, n_in), [])
            if len(ids) >= 2:
                groups.append((key[0], key[1], ids))
        for key, ids in ones.items():  # 1x1 siblings with no kxk partner: merge among themselves
            if len(ids) >= 2:
                groups.append(("conv2d", key[0], ids))
    return groups


def _merge_convs(graph: Graph, e: GraphEdit, x: Ref, ids: list[int]) -> None:
    nodes = [graph.nodes[i] for i in ids]
    big = max(nodes, key=lambda n: n.sig.in_types[1].shape[2] * n.sig.in_types[1].shape[3])
    kernel = big.sig.in_types[1].shape[2:]
    ws, bs = [], []
    for n in nodes:
        w = n.inputs[1]
        if n.sig.in_types[1].shape[2:] != kernel:
            w = e.op("enlarge", w, kernel=kernel)
        ws.append(w)
        if len(n.inputs) > 2:
            bs.append(n.inputs[2])
    ins = [x, e.op("concat", *ws, axis=0)]
    if bs:
        ins.append(e.op("concat", *bs, axis=0))
    a = big.sig.attr
    y = e.op("conv2d", *ins, strides=a["strides"], pads=a["pads"], dilations=a["dilations"], act=a["act"])
    sizes = tuple(n.sig.out_types[0].shape[1] for n in nodes)
    outs = e.op_multi("split", [y], {"axis": 1, "sizes": sizes})
    for nid, o in zip(ids, outs, strict=True):
        e.replace(Ref(nid, 0), o)


def _merge_matmuls(graph: Graph, e: GraphEdit, x: Ref, ids: list[int]) -> None:
    nodes = [graph.nodes[i] for i in ids]
    w = e.op("concat", *(n.inputs[1] for n in nodes), axis=1)
    y = e.op("matmul", x, w, act=nodes[0].sig.attr["act"])
    rank = nodes[0].sig.out_types[0].rank
    sizes = tuple(n.sig.out_types[0].shape[-1] for n in nodes)
    outs = e.op_multi("split", [y], {"axis": rank - 1, "sizes": sizes})
    for nid, o in zip(ids, outs, strict=True):
        e.replace(Ref(nid, 0), o)


def merge_siblings(graph: Graph, *, enlarge: bool = False, ops: tuple[str, ...] = ("conv2d", "matmul"),
                   max_groups: int | None = None) -> Graph | None:
    """Merge sibling convs/matmuls sharing an input (see the module docstring); None if none apply."""
    groups = [g for g in _sibling_groups(graph, enlarge) if g[0] in ops]
    if max_groups is not None:
        groups = groups[:max_groups]
    if not groups:
        return None
    e = graph.edit()
    for kind, x, ids in groups:
        (_merge_convs if kind == "conv2d" else _merge_matmuls)(graph, e, x, ids)
    return e.commit()


MBNET_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2))


def mbnet(variant: str = "folded", size: int = 112, width: int = 32) -> Graph:
    """MobileNet-v1-style network on ``1x3x(2*size)^2`` (see the module docstring for variants).

    >>> [mbnet(v, size=16).op_histogram() for v in ("folded", "bn")][1]["batchnorm"]
    13
    """
    if variant not in ("folded", "relu", "bn"):
        raise ValueError(f"mbnet variant must be folded, relu or bn, not {variant!r}")
    b = Builder(f"mbnet_{variant}")
    k = [0]

    def unit(x: Value, out: int, kernel: int, stride: int, depthwise: bool) -> Value:
        k[0] += 1
        w = b.weight(f"w{k[0]}", (out, 1 if depthwise else x.dim(1), kernel, kernel))
        pads = (kernel // 2,) * 4
        if variant == "folded":
            return b.conv2d(x, w, b.weight(f"b{k[0]}", (out,)), strides=(stride, stride), pads=pads, act="relu")
        if variant == "relu":
            return b.relu(b.conv2d(x, w, b.weight(f"b{k[0]}", (out,)), strides=(stride, stride), pads=pads))
        y = b.conv2d(x, w, strides=(stride, stride), pads=pads)
        return b.relu(b.batchnorm(y, *(b.weight(f"{n}{k[0]}", (out,)) for n in ("g", "o", "m", "v"))))

    x = unit(b.input("x", (1, 3, 2 * size, 2 * size)), width, 3, 2, False)
    for out, stride in MBNET_BLOCKS:
        x = unit(x, x.dim(1), 3, stride, True)
        x = unit(x, out, 1, 1, False)
    return b.build(b.global_avgpool(x))


def roundtrip(graph: Graph, seed: int = 0) -> Graph | None:
    """Export to ONNX and import again (activations become separate nodes); None if unchanged."""
    from graphsub.data import materialize
    from graphsub.frontends.onnx_io import from_onnx, to_onnx

    g2 = from_onnx(to_onnx(materialize(graph, seed)), name=graph.name)
    return None if g2.op_histogram() == graph.op_histogram() else g2


def rule_variant(graph: Graph, set_name: str = "default", max_steps: int = 20) -> Graph | None:
    """Apply the first match of each rule in turn (up to ``max_steps`` substitutions) if
    :mod:`graphsub.rules` provides rule sets; None when unavailable or nothing applies."""
    try:
        from graphsub.rules import apply, find_matches, get_set

        rules = get_set(set_name)
    except (ImportError, GraphsubError):
        return None
    g, steps = graph, 0
    for rule in rules:
        if steps >= max_steps:
            break
        try:
            matches = find_matches(g, rule)
        except (GraphsubError, TypeError):
            continue
        if matches:
            try:
                g = apply(g, matches[0]).graph
                steps += 1
            except GraphsubError:
                continue
    return g if steps else None


__all__ = ["MBNET_BLOCKS", "mbnet", "merge_siblings", "roundtrip", "rule_variant"]
