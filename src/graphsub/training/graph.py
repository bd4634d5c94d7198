"""``training_graph``: an inference graph -> one graph computing the loss and the gradient of every trainable weight.

MetaFlow (SysML'19, Sec. 3 and 6.3) optimizes a training graph -- training samples and labels in, derivatives of
every trainable parameter out -- with the same substitutions and search as an inference graph. This module builds
that graph in the IR by reverse-mode differentiation:

1. **replay** the forward graph into a new builder. Trainable weights become graph *inputs* (their values change
   every step, so no rule may fold a transform of them into a constant: a weight transform stays an op computed
   each step, and the cost models price it). Other weights (running statistics, constants) stay weights.
   With ``batchnorm="batch"`` (PyTorch's ``train()`` mode) each ``batchnorm`` becomes ``batchnorm_train``, which
   normalises with the batch's own statistics (mean and biased variance over N, H, W); ``"frozen"`` keeps the
   running statistics (``eval()`` mode, as when fine-tuning).
2. build the **loss** on the chosen output: ``cross_entropy`` against soft or one-hot ``labels`` (mean over the
   batch, as ``torch.nn.functional.cross_entropy``), ``mse`` against ``target`` (mean), or an output that already
   is a scalar.
3. **sweep** backwards in reverse topological order, calling each op's vector-Jacobian product
   (:mod:`graphsub.training.vjp`) and summing the gradients of values used more than once.

The result's outputs are ``loss`` then ``grad.<weight name>`` for every trainable weight, in the order the weights
appear in the forward graph.

>>> from graphsub.ir import Builder
>>> b = Builder("mlp")
>>> x = b.input("x", (4, 3))
>>> w = b.weight("w", data=np.ones((3, 2), np.float32))
>>> t = training_graph(b.build(b.matmul(x, w)), loss="mse")
>>> t.output_names, t.input_names
(('loss', 'grad.w'), ('x', 'w', 'target'))
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from graphsub.ir.builder import Builder, Value
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.types import FLOAT_DTYPES
from graphsub.training import rules_math, rules_nn, rules_shape  # noqa: F401  (registrations)
from graphsub.training.vjp import NO_GRADIENT_OPS, VJPS, Grad, GradientError, VjpCtx

LOSSES = ("cross_entropy", "mse")
BATCHNORM_MODES = ("batch", "frozen")
GRAD_PREFIX = "grad."

#: inputs of these ops are statistics or shapes, never trained (slot indices)
_NOT_TRAINED_SLOTS = {"batchnorm": (3, 4)}


@dataclass(frozen=True)
class TrainingSpec:
    """How a training graph was built (what :func:`training_graph` chose), for reports and for the runtimes."""

    loss: str
    params: tuple[str, ...]
    data_inputs: tuple[str, ...]
    label_input: str | None
    batchnorm: str


def default_params(graph: Graph) -> tuple[str, ...]:
    """The weights a user trains: floating-point weights with more than one element, except those read only as
    batch-norm running statistics. Scalars (exporters' constants such as ``sqrt(2)`` in GELU) are not trained."""
    out: list[str] = []
    for nid in sorted(graph.ops_of("weight")):
        sig = graph.nodes[nid].sig
        t = sig.out_types[0]
        if t.dtype not in FLOAT_DTYPES or t.numel <= 1:
            continue
        users = graph.users(nid)
        if users and all(slot in _NOT_TRAINED_SLOTS.get(graph.nodes[c].sig.op, ()) for c, slot in users):
            continue
        out.append(sig.attr["name"])
    return tuple(out)


def training_graph(graph: Graph, *, loss: str = "cross_entropy", params: Collection[str] | None = None,
                   output: str | None = None, batchnorm: str = "batch") -> Graph:
    """The joint forward + backward graph of ``graph`` (see the module docstring).

    ``output`` names the forward output the loss is built on (default: the first). ``loss`` is one of
    :data:`LOSSES`, or ``"output"`` when that output already is the loss (a float tensor of one element).
    ``params`` are the weights to train (default :func:`default_params`). Weight data are kept for the weights that
    stay weights; trainable weights become inputs and their data are in :func:`initial_params`.
    Raises GradientError naming every op on the path from a trained weight to the loss that has no rule.
    """
    return build_training(graph, loss=loss, params=params, output=output, batchnorm=batchnorm)[0]


def build_training(graph: Graph, *, loss: str = "cross_entropy", params: Collection[str] | None = None,
                   output: str | None = None, batchnorm: str = "batch") -> tuple[Graph, TrainingSpec]:
    """:func:`training_graph`, and the :class:`TrainingSpec` that says what it chose."""
    if loss not in (*LOSSES, "output"):
        raise GradientError(f"unknown loss {loss!r}; choose one of {', '.join((*LOSSES, 'output'))}")
    if batchnorm not in BATCHNORM_MODES:
        raise GradientError(f"unknown batchnorm mode {batchnorm!r}; choose one of {', '.join(BATCHNORM_MODES)}")
    ordered = _trained(graph, params)
    out_index = _output_index(graph, output)
    b = Builder(f"{graph.name}_train")
    ctx = VjpCtx(b)
    vals, param_vals = _replay(graph, b, ctx, set(ordered), batchnorm)
    y = vals[graph.outputs[out_index].node][graph.outputs[out_index].index]
    loss_val, seed, label_name = _loss(ctx, y, loss)
    grads = _sweep(graph, ctx, y, seed, param_vals)
    outs: dict[str, Value] = {"loss": loss_val}
    for name in ordered:
        pv = param_vals[name]
        g = grads.get(_key(pv))
        outs[GRAD_PREFIX + name] = g if g is not None else ctx.zeros(pv.shape, pv.dtype)
    g_out = b.build(outs)
    data = tuple(n for n in graph.input_names if n not in ordered)
    return g_out, TrainingSpec(loss, ordered, data, label_name, batchnorm)


def trainable_forward(graph: Graph, *, params: Collection[str] | None = None,
                      batchnorm: str = "batch") -> tuple[Graph, tuple[str, ...]]:
    """The forward half of the training graph: ``graph`` with its trained weights as inputs and batch norm in the
    chosen mode, and the names of those weights. This is what a search rewrites for a runtime that differentiates by
    itself (PyTorch's autograd): no transform of a trained weight can be folded into a constant. Give the result
    to :func:`training_graph` with the same ``params`` to differentiate it, or to :func:`freeze_params` to turn the
    weights back into weights."""
    if batchnorm not in BATCHNORM_MODES:
        raise GradientError(f"unknown batchnorm mode {batchnorm!r}; choose one of {', '.join(BATCHNORM_MODES)}")
    ordered = _trained(graph, params)
    b = Builder(graph.name)
    vals, _ = _replay(graph, b, VjpCtx(b, prefix="fwd_const"), set(ordered), batchnorm)
    outs = {n: vals[r.node][r.index] for n, r in zip(graph.output_names, graph.outputs, strict=True)}
    return b.build(outs), ordered


def freeze_params(graph: Graph, values: Mapping[str, np.ndarray]) -> Graph:
    """``graph`` with the inputs named in ``values`` turned into weights holding those values (the inverse of the
    replay in :func:`trainable_forward`, once a search is done)."""
    b = Builder(graph.name)
    vals: dict[int, tuple[Value, ...]] = {}
    for nid in graph.topo_order():
        node = graph.nodes[nid]
        sig = node.sig
        if sig.op in ("input", "weight"):
            name, t = sig.attr["name"], sig.out_types[0]
            if name in values:
                vals[nid] = (b.weight(name, data=np.asarray(values[name], dtype=t.dtype).reshape(t.shape)),)
            elif sig.op == "input":
                vals[nid] = (b.input(name, t.shape, t.dtype),)
            else:
                data = graph.params.get(name)
                w = b.weight(name, t.shape, dtype=t.dtype) if data is None else b.weight(name, data=np.asarray(data))
                vals[nid] = (w,)
            continue
        vals[nid] = b.op_multi(sig.op, *(vals[r.node][r.index] for r in node.inputs), **dict(sig.attrs))
    return b.build({n: vals[r.node][r.index] for n, r in zip(graph.output_names, graph.outputs, strict=True)})


def initial_params(graph: Graph, spec_or_params: TrainingSpec | Sequence[str]) -> dict[str, np.ndarray]:
    """The data of the trained weights of ``graph`` (the forward graph), keyed by name: the feeds of the training
    graph's weight inputs at step 0. KeyError names a weight without data (materialize the graph first)."""
    names = spec_or_params.params if isinstance(spec_or_params, TrainingSpec) else tuple(spec_or_params)
    missing = [n for n in names if n not in graph.params]
    if missing:
        raise KeyError(f"weights without data: {', '.join(missing)}")
    return {n: np.asarray(graph.params[n]) for n in names}


# ---------------------------------------------------------------------------------------------------- internals


def _key(v: Value) -> tuple[int, int]:
    return (v.ref.node, v.ref.index)


def _trained(graph: Graph, params: Collection[str] | None) -> tuple[str, ...]:
    """The trained leaves (weights, or inputs already standing for trained weights) in graph order."""
    trained = default_params(graph) if params is None else tuple(params)
    leaves = {graph.nodes[n].sig.attr["name"]: n for op in ("weight", "input") for n in graph.ops_of(op)}
    unknown = [p for p in trained if p not in leaves]
    if unknown:
        raise GradientError(f"not weights of {graph.name!r}: {', '.join(unknown)}")
    for p in trained:
        t = graph.nodes[leaves[p]].sig.out_types[0]
        if t.dtype not in FLOAT_DTYPES:
            raise GradientError(f"weight {p!r} is {t.dtype}; only floating-point weights are trained")
    ordered = tuple(n for n in (graph.nodes[i].sig.attr["name"] for i in sorted(leaves.values())) if n in trained)
    if not ordered:
        raise GradientError(f"{graph.name!r} has no trainable weight (floating-point weights of more than one "
                            "element); name them with params=")
    return ordered


def _output_index(graph: Graph, output: str | None) -> int:
    if output is None:
        return 0
    if output not in graph.output_names:
        raise GradientError(f"{graph.name!r} has no output {output!r}; outputs: {', '.join(graph.output_names)}")
    return graph.output_names.index(output)


def _replay(graph: Graph, b: Builder, ctx: VjpCtx, trained: set[str],
            batchnorm: str) -> tuple[dict[int, tuple[Value, ...]], dict[str, Value]]:
    """Copy ``graph`` into ``b``: trained weights as inputs, batch norm in the chosen mode."""
    vals: dict[int, tuple[Value, ...]] = {}
    params: dict[str, Value] = {}
    for nid in graph.topo_order():
        node = graph.nodes[nid]
        sig = node.sig
        if sig.op in ("input", "weight"):
            name, t = sig.attr["name"], sig.out_types[0]
            if name in trained:
                v = params[name] = b.input(name, t.shape, t.dtype)
            elif sig.op == "input":
                v = b.input(name, t.shape, t.dtype)
            elif name in graph.params:
                v = b.weight(name, data=np.asarray(graph.params[name]))
            else:
                v = b.weight(name, t.shape, dtype=t.dtype)
            vals[nid] = (v,)
            continue
        ins = [vals[r.node][r.index] for r in node.inputs]
        if sig.op == "batchnorm" and batchnorm == "batch":  # train() mode: the batch's own statistics
            vals[nid] = (b.op1("batchnorm_train", *ins[:3], epsilon=sig.attr["epsilon"]),)
            continue
        vals[nid] = b.op_multi(sig.op, *ins, **dict(sig.attrs))
    return vals, params


def _loss(ctx: VjpCtx, y: Value, loss: str) -> tuple[Value, Value, str | None]:
    """The loss value, the gradient of the loss w.r.t. ``y`` (written directly: stable and short), and the name
    of the label input."""
    b = ctx.b
    if y.dtype not in FLOAT_DTYPES:
        raise GradientError(f"the loss output is {y.dtype}; a loss needs a floating-point output")
    if loss == "output":
        if int(np.prod(y.shape)) != 1:
            raise GradientError(f"loss='output' needs an output of one element, got shape {y.shape}")
        return y, ctx.op("expand", ctx.scalar(1.0, y), shape=y.shape) if y.shape else ctx.scalar(1.0, y), None
    axes = tuple(range(len(y.shape)))
    if loss == "mse":
        target = b.input("target", y.shape, y.dtype)
        diff = ctx.op("sub", y, target)
        value = ctx.op("reduce_mean", ctx.op("mul", diff, diff), axes=axes, keepdims=False)
        return value, ctx.scale(diff, 2.0 / max(int(np.prod(y.shape)), 1)), "target"
    if len(y.shape) < 2:
        raise GradientError(f"cross_entropy needs (batch, classes, ...) logits, got shape {y.shape}")
    labels = b.input("labels", y.shape, y.dtype)
    n = int(np.prod(y.shape)) // y.shape[1]  # batch and spatial positions, as torch's mean reduction
    prob = ctx.op("softmax", y, axis=1)
    # log(p + tiny): a probability that underflows to 0 gives log(tiny) (about -87 in float32), not -inf, so that
    # 0 * log(p) of the other classes stays 0 (the IR has no max to write a shifted log-softmax with)
    tiny = float(np.finfo(np.dtype(y.dtype)).tiny) if y.dtype in ("float16", "float32", "float64") else 1e-38
    logp = ctx.op("log", ctx.op("add", prob, ctx.scalar(tiny, y)))
    total = ctx.op("reduce_sum", ctx.op("mul", labels, logp), axes=axes, keepdims=False)
    value = ctx.scale(total, -1.0 / n)
    # d/dy of -sum(labels * log_softmax(y)) / n = (softmax(y) * sum_c labels - labels) / n
    lsum = ctx.op("reduce_sum", labels, axes=(1,), keepdims=True)
    seed = ctx.scale(ctx.op("sub", ctx.op("mul", prob, lsum), labels), 1.0 / n)
    return value, seed, "labels"


def _sweep(graph: Graph, ctx: VjpCtx, y: Value, seed: Value, params: dict[str, Value]) -> dict[tuple[int, int], Value]:
    """Reverse-mode sweep over the forward ops between the trained weights and ``y`` (the builder's ids are a
    topological order: every node so far is forward or loss)."""
    b = ctx.b
    fwd = sorted(b.nodes)
    live: set[int] = {p.ref.node for p in params.values()}
    for nid in fwd:
        node = b.nodes[nid]
        if any(r.node in live for r in node.inputs) and node.sig.op not in NO_GRADIENT_OPS:
            live.add(nid)
    if y.ref.node not in live:
        return {}
    # ...and which of those reach y
    needed: set[int] = {y.ref.node}
    for nid in reversed(fwd):
        if nid in needed:
            needed.update(r.node for r in b.nodes[nid].inputs if r.node in live)
    missing = sorted({b.nodes[n].sig.op for n in needed if b.nodes[n].sig.op not in VJPS
                      and not b.nodes[n].sig.opdef.leaf})
    if missing:
        raise GradientError(f"{graph.name!r}: no gradient for op(s) {', '.join(missing)} on the path from the "
                            "trained weights to the loss (train fewer weights with params=, or keep those parts "
                            "out of the model)")
    grads: dict[tuple[int, int], list[Value]] = {_key(y): [seed]}
    done: dict[tuple[int, int], Value] = {}
    for nid in reversed(fwd):
        if nid not in needed:
            continue
        node = b.nodes[nid]
        nouts = len(node.sig.out_types)
        gouts: list[Grad] = [_total(ctx, grads.pop((nid, i), [])) for i in range(nouts)]
        if node.sig.opdef.leaf:
            if gouts[0] is not None:
                done[(nid, 0)] = gouts[0]
            continue
        if all(g is None for g in gouts):
            continue
        ins = [Value(b, r, b.nodes[r.node].sig.out_types[r.index]) for r in node.inputs]
        outs = [Value(b, Ref(nid, i), t) for i, t in enumerate(node.sig.out_types)]
        gins = VJPS[node.sig.op](ctx, ins, outs, gouts, node.sig.attr)
        if len(gins) != len(ins):
            raise GradientError(f"VJP of {node.sig.op} returned {len(gins)} gradients for {len(ins)} inputs")
        for r, v, g in zip(node.inputs, ins, gins, strict=True):
            if g is None or r.node not in live:
                continue
            if g.shape != v.shape:
                raise GradientError(f"VJP of {node.sig.op}: gradient of shape {g.shape} for an input {v.shape}")
            grads.setdefault((r.node, r.index), []).append(g)
    return done


def _total(ctx: VjpCtx, parts: list[Value]) -> Grad:
    """The sum of the gradient contributions of one value (a balanced tree of adds)."""
    while len(parts) > 1:
        parts = [ctx.op("add", parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0] if parts else None


__all__ = ["BATCHNORM_MODES", "GRAD_PREFIX", "LOSSES", "TrainingSpec", "build_training", "default_params",
           "freeze_params", "initial_params", "trainable_forward", "training_graph"]
