"""Every gradient rule agrees with PyTorch's autograd on every sample of its op.

For each op with a rule (:data:`graphsub.training.VJPS`) and each of its OpDef samples, the sample's float inputs
become trained weights, the loss is ``sum_j sum(out_j * c_j)`` with random cotangents ``c_j`` (constants), and the
gradients of :func:`~graphsub.training.training_graph` (run by the numpy executor) must equal
``torch.autograd.grad`` of the op's PyTorch implementation (``graphsub.frontends.torch_ops.run_sig``, in float64)
against the same cotangents. An op without a torch implementation (or one whose torch autograd cannot run) is
checked with central differences in float64 on its numpy reference instead; its test id ends in ``-fd``. A sample
whose rule deliberately refuses its configuration (``REFUSED_SAMPLES``, id ending in ``-refused``) must raise a
GradientError naming the op.

Samples without a float input or a float output (``cast`` to or from an integer type) have nothing to
differentiate; ``test_rules_math.py`` checks those. Batch norm's running statistics are constants (eval mode:
``batchnorm="frozen"``).

Each training graph is also checked to be lean: no reshape, expand or transpose that changes nothing, no slice or
pad of nothing, no multiplication by a constant one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch

from graphsub.data import random_array, slot_role
from graphsub.execute import run
from graphsub.frontends.torch_ops import TORCH_OPS, run_sig
from graphsub.ir import Builder, Graph
from graphsub.ir.builder import Value
from graphsub.ir.node import OpSig, Ref, make_sig
from graphsub.ops import REGISTRY
from graphsub.ops.types import FLOAT_DTYPES
from graphsub.training import VJPS, GradientError, training_graph
from graphsub.training.vjp import NO_GRADIENT_OPS

SEEDS = (0, 1)
RTOL, ATOL = 1e-3, 1e-4

#: input slots that are constants, never trained
NOT_TRAINED: dict[str, frozenset[int]] = {"batchnorm": frozenset({3, 4})}  # running mean and variance (eval mode)

#: ops checked with finite differences although torch implements them: op -> why torch's autograd cannot be used
FD_OPS: dict[str, str] = {}

#: samples whose rule deliberately refuses the configuration (GradientError naming the op): (op, sample) -> why
REFUSED_SAMPLES: dict[tuple[str, int], str] = {
    ("ms_fused_conv", i): "rules_nn differentiates FusedConv's Relu, Sigmoid and Tanh activations only"
    for i in (3, 4, 5)  # LeakyRelu, Clip, HardSigmoid
}

#: registered ops that have no gradient rule, and why (besides the gradient kernels, family "grad": no second
#: derivatives); training_graph refuses a graph that differentiates through one
NO_RULE: dict[str, str] = {
    "resize": "no rule yet: nearest resize would need a scatter-add by index, linear a transposed interpolation",
    "ms_mha": "no rule yet: onnxruntime MultiHeadAttention would need its whole attention backward decomposed",
    "ms_attention": "no rule yet: onnxruntime Attention is ms_mha after a packed projection (same reason)",
    "ms_rms_norm": "no rule yet: onnxruntime's inference-time RMSNorm kernels (decoders' inference graphs)",
    "ms_skip_rms_norm": "no rule yet: onnxruntime's inference-time RMSNorm kernels (decoders' inference graphs)",
    "ms_skip_rms_norm_sum": "no rule yet: onnxruntime's inference-time RMSNorm kernels (decoders' inference graphs)",
    "ms_gqa": "no rule yet: a decoder's inference-time attention with its key/value cache (same reason as ms_mha)",
    "ms_gqa_packed": "no rule yet: ms_gqa on a packed projection (same reason as ms_gqa)",
    "ms_rotary": "no rule yet: onnxruntime's inference-time rotary kernel (decoders' inference graphs)",
    "gather_nd": "no rule yet: a scatter-add at index tuples (the exporters' attention-mask lookups, never trained)",
    "opaque": "an ONNX node graphsub does not model: its function is unknown",
    "where": "no rule yet (it was opaque until 2026-11-27): dy would be split by the condition and summed to each "
             "branch's shape",
    "lstm": "no rule yet (opaque until 2026-11-27): backpropagation through time over the modelled steps; training "
            "graphs through an LSTM are refused with a clear error, as when it was opaque",
    "gru": "no rule yet (opaque until 2026-11-27): backpropagation through time, as for lstm",
}


def _no_rule_reason(op: str) -> str | None:
    if op in NO_RULE:
        return NO_RULE[op]
    if REGISTRY[op].family == "grad":
        return "a gradient kernel: training graphs need no second derivatives"
    return None


def _is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def _differentiable(op: str, i: int) -> bool:
    s = REGISTRY[op].samples[i]
    sig = make_sig(op, s.attrs, s.in_types)
    return any(_is_float(t.dtype) for t in sig.in_types) and any(_is_float(t.dtype) for t in sig.out_types)


def _method(op: str, i: int = -1) -> str:
    if (op, i) in REFUSED_SAMPLES:
        return "refused"
    return "fd" if op not in TORCH_OPS or op in FD_OPS else "torch"


CASES = [
    pytest.param(op, i, seed, id=f"{op}-{i}-seed{seed}-{_method(op, i)}")
    for op in sorted(VJPS)
    for i in range(len(REGISTRY[op].samples))
    if _differentiable(op, i)
    for seed in SEEDS
]


# ---------------------------------------------------------------------------------------------------- harness


def sample_arrays(sig: OpSig, roles: Sequence[str] | None, rng: np.random.Generator) -> list[np.ndarray]:
    return [random_array(t, rng, roles[k] if roles else slot_role(sig, k)) for k, t in enumerate(sig.in_types)]


def trained_slots(sig: OpSig) -> list[int]:
    skip = NOT_TRAINED.get(sig.op, frozenset())
    return [k for k, t in enumerate(sig.in_types) if _is_float(t.dtype) and k not in skip]


def cotangents(sig: OpSig, rng: np.random.Generator) -> dict[int, np.ndarray]:
    return {j: rng.standard_normal(t.shape).astype(np.float32)
            for j, t in enumerate(sig.out_types) if _is_float(t.dtype)}


def loss_graph(sig: OpSig, arrays: Sequence[np.ndarray], cots: dict[int, np.ndarray]) -> Graph:
    """``sum_j sum(op(x)_j * c_j)`` with every input a weight holding its array (``x0, x1, ...``)."""
    b = Builder(f"{sig.op}_loss")
    xs = [b.weight(f"x{k}", data=a) for k, a in enumerate(arrays)]
    outs = b.op_multi(sig.op, *xs, **dict(sig.attr))
    loss: Value | None = None
    for j, c in cots.items():
        term = b.mul(outs[j], b.weight(f"c{j}", data=c))
        if c.ndim:
            term = b.reduce_sum(term, axes=tuple(range(c.ndim)), keepdims=False)
        loss = term if loss is None else b.add(loss, term)
    assert loss is not None
    return b.build({"loss": loss})


def ir_grads(sig: OpSig, arrays: Sequence[np.ndarray], cots: dict[int, np.ndarray],
             slots: Sequence[int]) -> tuple[Graph, Graph, dict[int, np.ndarray]]:
    """The loss graph, its training graph and the gradients that computes."""
    g = loss_graph(sig, arrays, cots)
    names = [f"x{k}" for k in slots]
    t = training_graph(g, loss="output", params=names, batchnorm="frozen")
    assert t.output_names == ("loss", *(f"grad.{n}" for n in names))
    res = run(t, {n: arrays[k] for n, k in zip(names, slots, strict=True)})
    return g, t, {k: res[f"grad.x{k}"] for k in slots}


def torch_grads(sig: OpSig, arrays: Sequence[np.ndarray], cots: dict[int, np.ndarray],
                slots: Sequence[int]) -> dict[int, np.ndarray]:
    """Gradients by torch.autograd (float64) of ``sum_j sum(run_sig(sig, x)_j * c_j)``."""
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=k in slots) if _is_float(str(a.dtype))
          else torch.from_numpy(np.array(a)) for k, a in enumerate(arrays)]
    outs = run_sig(sig, ts)
    loss = sum((outs[j].double() * torch.from_numpy(c.astype(np.float64))).sum() for j, c in cots.items())
    assert isinstance(loss, torch.Tensor)
    got = torch.autograd.grad(loss, [ts[k] for k in slots], allow_unused=True)
    return {k: np.zeros(arrays[k].shape) if gk is None else gk.numpy() for k, gk in zip(slots, got, strict=True)}


def fd_grads(sig: OpSig, arrays: Sequence[np.ndarray], cots: dict[int, np.ndarray],
             slots: Sequence[int], eps: float = 1e-6) -> dict[int, np.ndarray]:
    """Central differences in float64 of ``sum_j sum(reference(x)_j * c_j)``."""
    ref = sig.opdef.reference
    assert ref is not None
    xs = [a.astype(np.float64) if _is_float(str(a.dtype)) else a for a in arrays]

    def f(vals: Sequence[np.ndarray]) -> float:
        outs = ref(vals, sig.attr)
        return float(sum(np.sum(np.asarray(outs[j], np.float64) * c) for j, c in cots.items()))

    out: dict[int, np.ndarray] = {}
    for k in slots:
        grad = np.zeros(xs[k].shape)
        for idx in np.ndindex(*xs[k].shape):
            hi, lo = [v.copy() for v in xs], [v.copy() for v in xs]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            grad[idx] = (f(hi) - f(lo)) / (2 * eps)
        out[k] = grad
    return out


_ONE_PRESERVING: dict[str, Callable[[OpSig], bool]] = {
    "reshape": lambda s: s.in_types[0].shape == s.out_types[0].shape,
    "expand": lambda s: s.in_types[0].shape == s.out_types[0].shape,
    "slice": lambda s: s.in_types[0].shape == s.out_types[0].shape and not any(st < 0 for st in s.attr["steps"] or ()),
    "pad": lambda s: not any(s.attr["pads"]),
    "transpose": lambda s: tuple(s.attr["perm"]) == tuple(range(len(s.attr["perm"]))),
}


def _is_const(t: Graph, r: Ref) -> bool:
    src = t.nodes[r.node].sig
    return src.op == "weight" and src.attr["name"] in t.params


def lean_violations(t: Graph, forward: Graph | None = None) -> list[str]:
    """Ops of ``t`` that do nothing: a no-op reshape/expand/slice/pad/transpose, a multiplication by a constant
    one (of a value that is not itself a constant: the loss seed times a cotangent is the harness's own). Those
    ``forward`` already had are not counted."""
    bad: list[str] = []
    for nid in t.nodes:
        node = t.nodes[nid]
        sig = node.sig
        check = _ONE_PRESERVING.get(sig.op)
        if check is not None and check(sig):
            bad.append(f"{sig.op} {sig.in_types[0].shape} -> {sig.out_types[0].shape}")
        if sig.op in ("mul", "smul", "div"):
            for slot, r in enumerate(node.inputs):
                other = node.inputs[1 - slot]
                if (sig.op == "div" and slot == 0) or not _is_const(t, r) or _is_const(t, other):
                    continue
                if np.all(np.asarray(t.params[t.nodes[r.node].sig.attr["name"]]) == 1):
                    bad.append(f"{sig.op} by a constant one")
    if forward is not None:
        for v in lean_violations(forward):
            bad.remove(v)
    return bad


# ---------------------------------------------------------------------------------------------------- tests


def check_gradients(sig: OpSig, seed: int, roles: Sequence[str] | None = None, method: str = "torch") -> Graph:
    """Compare the training graph's gradients of ``sum_j sum(op_j * c_j)`` with torch's (or finite differences)
    on random data of ``sig``'s input types; returns the training graph (checked to be lean)."""
    rng = np.random.default_rng([seed, sum(map(ord, repr(sig.attr))), sum(map(ord, sig.op))])
    arrays = sample_arrays(sig, roles, rng)
    cots = cotangents(sig, rng)
    slots = trained_slots(sig)
    g, t, got = ir_grads(sig, arrays, cots, slots)
    want = fd_grads(sig, arrays, cots, slots) if method == "fd" else torch_grads(sig, arrays, cots, slots)
    for k in slots:
        assert got[k].shape == arrays[k].shape
        assert got[k].dtype == arrays[k].dtype
        np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL, err_msg=f"gradient of input {k}")
    assert lean_violations(t, g) == []
    return t


@pytest.mark.parametrize(("op", "i", "seed"), CASES)
def test_gradient_matches_autograd(op: str, i: int, seed: int) -> None:
    sample = REGISTRY[op].samples[i]
    sig = make_sig(op, sample.attrs, sample.in_types)
    if (op, i) in REFUSED_SAMPLES:
        with pytest.raises(GradientError, match=re.escape(op)):
            check_gradients(sig, seed, sample.roles)
        return
    check_gradients(sig, seed, sample.roles, _method(op, i))


def test_finite_differences_agree_with_torch() -> None:
    """The fallback harness itself: both references agree on a few ops with torch implementations."""
    for op, i in (("tanh", 0), ("layernorm", 1), ("slice", 1)):
        sample = REGISTRY[op].samples[i]
        sig = make_sig(op, sample.attrs, sample.in_types)
        rng = np.random.default_rng(7)
        arrays = sample_arrays(sig, sample.roles, rng)
        cots = cotangents(sig, rng)
        slots = trained_slots(sig)
        fd, tg = fd_grads(sig, arrays, cots, slots), torch_grads(sig, arrays, cots, slots)
        for k in slots:
            np.testing.assert_allclose(fd[k], tg[k], rtol=RTOL, atol=ATOL, err_msg=op)


def test_every_op_has_a_rule_or_a_reason() -> None:
    unexplained = [op for op, d in REGISTRY.items()
                   if op not in VJPS and op not in NO_GRADIENT_OPS and not d.leaf and _no_rule_reason(op) is None]
    assert unexplained == [], "ops without a gradient rule: write one or list them in NO_RULE with a reason"
    stale = sorted(set(NO_RULE) & (set(VJPS) | NO_GRADIENT_OPS))
    assert stale == [], "NO_RULE lists ops that now have a rule"
    assert set(NO_RULE) <= set(REGISTRY)


REFUSED = sorted(op for op in REGISTRY if op not in VJPS and _no_rule_reason(op) is not None)


def _opaque_graph() -> Graph:
    b = Builder("with_opaque")
    w = b.weight("x0", data=np.ones((2, 3), np.float32))
    (v,) = b.op_multi("opaque", w, op_type="Foo", out_types=(((2, 3), "float32"),), input_slots=(0,),
                      num_onnx_inputs=1, reason="test")
    return b.build({"loss": b.reduce_sum(v, axes=(0, 1), keepdims=False)})


@pytest.mark.parametrize("op", REFUSED)
def test_op_without_rule_is_refused_by_name(op: str) -> None:
    if op == "opaque":
        g, params = _opaque_graph(), ["x0"]
    else:
        samples = [i for i in range(len(REGISTRY[op].samples)) if _differentiable(op, i)]
        if not samples:
            pytest.skip(f"{op} has no sample with a float input and output")
        sample = REGISTRY[op].samples[samples[0]]
        sig = make_sig(op, sample.attrs, sample.in_types)
        rng = np.random.default_rng(0)
        g = loss_graph(sig, sample_arrays(sig, sample.roles, rng), cotangents(sig, rng))
        params = [f"x{k}" for k in trained_slots(sig)]
    with pytest.raises(GradientError, match=rf"no gradient for op\(s\) .*\b{re.escape(op)}\b"):
        training_graph(g, loss="output", params=params)
