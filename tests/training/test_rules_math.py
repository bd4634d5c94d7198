"""Targeted checks of the arithmetic and shape gradient rules beyond the OpDef samples: the shape cases of
matmul, strided and backward slices, edge and reflect padding, broadcast operands, constant exponents, casts,
zero gradients (unused outputs, weights off the loss path), and the helpers of :class:`VjpCtx`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from test_vjp_samples import check_gradients, lean_violations

from graphsub.execute import run
from graphsub.ir import Builder, Graph
from graphsub.ir.node import make_sig
from graphsub.ops.layout import INT64_MAX, INT64_MIN
from graphsub.ops.types import TensorType, make_type
from graphsub.training import VjpCtx, training_graph


def f32(*shape: int) -> TensorType:
    return make_type(shape, "float32")


def i64(*shape: int) -> TensorType:
    return make_type(shape, "int64")


def case(op: str, types: tuple[TensorType, ...], attrs: dict[str, Any] | None = None,
         roles: tuple[str, ...] | None = None, note: str = "") -> Any:
    shapes = "x".join(str(list(t.shape)).replace(" ", "") for t in types)
    return pytest.param(op, types, attrs or {}, roles, id=f"{op}-{note or shapes}")


EXTRA = [
    # matmul: every 1-D / batched / broadcast combination, the folded linear-layer path, outer products
    case("matmul", (f32(5), f32(5)), note="dot"),
    case("matmul", (f32(5), f32(5, 2)), note="vector-matrix"),
    case("matmul", (f32(3, 4, 5), f32(5)), {"act": "relu"}, note="batched matrix-vector"),
    case("matmul", (f32(2, 1, 3, 4), f32(4, 6)), {"act": "relu"}, note="linear layer fold"),
    case("matmul", (f32(2, 3, 4), f32(4, 1)), note="fold with one column"),
    case("matmul", (f32(3, 4), f32(2, 4, 5)), note="2-D a, batched b"),
    case("matmul", (f32(2, 3, 1), f32(2, 1, 5)), {"act": "tanh"}, note="batched outer product"),
    case("matmul", (f32(1, 4), f32(4, 1)), note="1x1 result"),
    case("matmul", (f32(2, 1, 3, 4), f32(1, 5, 4, 2)), {"act": "sigmoid"}, note="two-sided batch broadcast"),
    # gemm: every transpose pair and c shape
    case("gemm", (f32(3, 4), f32(5, 4), f32()), {"trans_b": True, "beta": 0.5}, note="scalar c"),
    case("gemm", (f32(4, 3), f32(4, 5), f32(1, 1)), {"trans_a": True, "alpha": 2.0}, note="c 1x1"),
    case("gemm", (f32(3, 4), f32(4, 5), f32(3, 1)), {"beta": -1.0}, note="column c"),
    case("gemm", (f32(3, 4), f32(4, 5), f32(3, 5)), {"alpha": 0.25, "beta": 3.0}, note="full c"),
    case("ms_fused_matmul", (f32(2, 3, 4, 5), f32(5, 6)), {"alpha": 0.5}, note="batched a, 2-D b"),
    case("ms_fused_matmul", (f32(6, 4), f32(3, 5, 6)), {"trans_a": True, "trans_b": True}, note="2-D a, both T"),
    # strided, backward and empty slices
    case("slice", (f32(7, 9),), {"starts": (1, 8), "ends": (6, 0), "axes": (0, 1), "steps": (2, -3)},
         note="strided and backward"),
    case("slice", (f32(10,),), {"starts": (0,), "ends": (10,), "steps": (3,)}, note="spread cut at the end"),
    case("slice", (f32(10,),), {"starts": (2,), "ends": (10,), "steps": (4,)}, note="spread fits"),
    case("slice", (f32(4, 6),), {"starts": (1,), "ends": (6,), "axes": (1,), "steps": (9,)}, note="one element"),
    case("slice", (f32(3, 5),), {"starts": (-1,), "ends": (INT64_MIN,), "axes": (1,), "steps": (-1,)},
         note="reverse"),
    case("slice", (f32(3, 8),), {"starts": (6,), "ends": (1,), "axes": (1,), "steps": (-2,)}, note="backward step 2"),
    case("slice", (f32(3, 5),), {"starts": (0,), "ends": (INT64_MAX,), "axes": (0,)}, note="whole axis"),
    case("slice", (f32(3, 5),), {"starts": (4,), "ends": (2,), "axes": (1,)}, note="empty"),
    # padding
    case("pad", (f32(1, 3),), {"pads": (0, 2, 0, 3), "mode": "edge"}, note="edge of one element"),
    case("pad", (f32(2, 2),), {"pads": (1, 0, 0, 2), "mode": "edge"}, note="edge of two"),
    case("pad", (f32(2, 4),), {"pads": (0, 3, 0, 0), "mode": "reflect"}, note="reflect before"),
    case("pad", (f32(2, 4),), {"pads": (1, 0, 1, 2), "mode": "reflect"}, note="reflect after"),
    case("pad", (f32(2, 4),), {"pads": (0, 0, 0, 0)}, note="no padding"),
    # broadcast operands
    case("div", (f32(3, 1), f32(1, 4)), roles=("any", "nonzero"), note="outer"),
    case("sub", (f32(), f32(2, 3)), note="scalar minus"),
    case("mul", (f32(2, 3, 4), f32(3, 1)), note="stretched and added axes"),
    case("pow", (f32(2, 3), f32(3)), roles=("positive", "any"), note="broadcast exponent"),
    case("expand", (f32(1, 3, 1),), {"shape": (2, 1, 3, 4)}, note="added and stretched"),
    case("smul", (f32(2, 3), f32(1, 1)), note="rank-2 scalar"),
    # reductions and normalisations
    case("reduce_sum", (f32(2, 1, 3),), {"axes": (1,), "keepdims": False}, note="size-1 axis"),
    case("reduce_mean", (f32(2, 3, 4),), {"axes": (0, 1), "keepdims": False}, note="leading axes"),
    case("reduce_sum", (f32(2, 3, 4),), {"axes": (0, 2), "keepdims": True}, note="keepdims"),
    case("softmax", (f32(3, 4, 5),), {"axis": 0}, note="axis 0"),
    case("layernorm", (f32(3, 4, 6), f32(1, 6), f32(4, 1)), {"axis": 1}, note="broadcast scale and bias"),
    case("layernorm", (f32(5, 7), f32(7)), {"epsilon": 1e-2}, note="no bias"),
    case("batchnorm", (f32(2, 3, 5), f32(3), f32(3), f32(3), f32(3)), roles=("any", "any", "any", "any", "positive"),
         note="rank 3"),
    # gather with negative indices
    case("gather", (f32(5, 4), i64(3, 2)), roles=("any", "any"), note="negative indices"),
    case("gather", (f32(2, 5, 3), i64(4)), {"axis": -2}, roles=("any", "index:5"), note="negative axis"),
    case("ms_skip_layernorm", (f32(2, 5, 8), f32(1, 5, 8), f32(8), f32(8), f32(8)), {"epsilon": 1e-5},
         note="broadcast skip and bias"),
    case("ms_bias_gelu", (f32(3, 2, 4), f32(4)), note="rank 3"),
]


@pytest.mark.parametrize(("op", "types", "attrs", "roles"), EXTRA)
def test_gradient_matches_autograd_extra(op: str, types: tuple[TensorType, ...], attrs: dict[str, Any],
                                         roles: tuple[str, ...] | None) -> None:
    sig = make_sig(op, attrs, types)
    for seed in (0, 1):
        check_gradients(sig, seed, roles)


# ---------------------------------------------------------------------------------------------------- helpers


def grads_of(b: Builder, loss: Any, params: dict[str, np.ndarray], **kw: Any) -> tuple[Graph, dict[str, np.ndarray]]:
    t = training_graph(b.build({"loss": loss}), loss="output", params=list(params), **kw)
    out = run(t, params)
    return t, {k[len("grad."):]: v for k, v in out.items() if k.startswith("grad.")}


def ops_of(t: Graph) -> list[str]:
    return [t.nodes[n].sig.op for n in t.nodes if not t.nodes[n].sig.opdef.leaf]


def test_unbroadcast_shapes_and_ops() -> None:
    b = Builder()
    ctx = VjpCtx(b)
    g = b.input("g", (2, 3, 4))
    cases = {(4,): 1, (3, 4): 1, (1, 3, 1): 1, (3, 1): 2, (1, 1, 1): 1, (): 1, (2, 3, 4): 0, (1,): 2}
    outs = {}
    for shape, n_ops in cases.items():
        before = len(b.nodes)
        v = ctx.unbroadcast(g, shape)
        assert v.shape == shape
        assert len(b.nodes) - before == n_ops, f"{shape}: {len(b.nodes) - before} ops"
        if shape != (2, 3, 4):
            outs[str(shape)] = v
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    res = run(b.build(outs), {"g": x})
    for shape in cases:
        if shape == (2, 3, 4):
            continue
        lead = 3 - len(shape)
        want = x.sum(axis=tuple(range(lead)))
        want = want.sum(axis=tuple(i for i, d in enumerate(shape) if d == 1), keepdims=True).reshape(shape)
        np.testing.assert_allclose(res[str(shape)], want, rtol=1e-5, atol=1e-5)


def test_reshape_of_a_reshape_reshapes_the_original() -> None:
    b = Builder()
    x = b.weight("x", data=np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    y = b.reshape(b.reshape(x, shape=(6, 4)), shape=(24,))
    c = np.linspace(-1, 1, 24, dtype=np.float32)
    loss = b.reduce_sum(b.mul(y, b.weight("c", data=c)), axes=(0,), keepdims=False)
    t, grads = grads_of(b, loss, {"x": np.asarray(b.params["x"])})
    np.testing.assert_allclose(grads["x"], c.reshape(2, 3, 4))
    assert ops_of(t).count("reshape") == 3  # two forward, one backward
    assert lean_violations(t) == []


@pytest.mark.parametrize("e", [0.0, 1.0, 2.0, 3.0, 0.5, -1.5])
def test_pow_constant_exponent_is_folded(e: float) -> None:
    rng = np.random.default_rng(3)
    xv = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    c = rng.standard_normal((3, 4)).astype(np.float32)
    b = Builder()
    x = b.weight("x", data=xv)
    y = b.pow(x, b.weight("e", data=np.asarray(e, np.float32)))
    loss = b.reduce_sum(b.mul(y, b.weight("c", data=c)), axes=(0, 1), keepdims=False)
    t, grads = grads_of(b, loss, {"x": xv})
    xt = torch.tensor(xv, dtype=torch.float64, requires_grad=True)
    (want,) = torch.autograd.grad((xt ** e * torch.from_numpy(c).double()).sum(), [xt])
    np.testing.assert_allclose(grads["x"], want.numpy(), rtol=1e-4, atol=1e-5)
    assert ops_of(t).count("pow") == (1 if e in (0.0, 1.0, 2.0) else 2)  # the forward, and x^(e-1) if needed
    assert "log" not in ops_of(t)
    assert lean_violations(t) == []


def test_pow_integer_exponent_tensor() -> None:
    rng = np.random.default_rng(4)
    xv = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    ev = rng.integers(-2, 4, (3, 4)).astype(np.int64)
    c = rng.standard_normal((3, 4)).astype(np.float32)
    b = Builder()
    x = b.weight("x", data=xv)
    loss = b.reduce_sum(b.mul(b.pow(x, b.weight("e", data=ev)), b.weight("c", data=c)), axes=(0, 1),
                        keepdims=False)
    _, grads = grads_of(b, loss, {"x": xv})
    np.testing.assert_allclose(grads["x"], ev * xv.astype(np.float64) ** (ev - 1) * c, rtol=1e-4, atol=1e-5)


def test_cast_between_floats_and_to_integers() -> None:
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((3, 4)).astype(np.float32) * 3
    c = rng.standard_normal((3, 4)).astype(np.float32)
    b = Builder()
    x = b.weight("x", data=xv)
    wide = b.cast(x, to="float64")
    back = b.cast(b.mul(wide, b.cast(b.weight("c", data=c), to="float64")), to="float32")
    via_int = b.cast(b.cast(x, to="int64"), to="float32")
    total = b.add(back, via_int)
    loss = b.reduce_sum(total, axes=(0, 1), keepdims=False)
    _, grads = grads_of(b, loss, {"x": xv})
    assert grads["x"].dtype == np.float32
    np.testing.assert_allclose(grads["x"], c, rtol=1e-6)  # the integer path contributes nothing


def test_unused_split_outputs_get_zero_gradients() -> None:
    rng = np.random.default_rng(6)
    xv = rng.standard_normal((2, 10)).astype(np.float32)
    c = rng.standard_normal((2, 3)).astype(np.float32)
    for used, concat in (((1,), False), ((0, 2), True), ((3,), False)):
        b = Builder()
        x = b.weight("x", data=xv)
        parts = b.split(x, axis=1, sizes=(1, 3, 2, 3, 1) if used != (3,) else (1, 2, 4, 3))
        loss = None
        want = np.zeros_like(xv)
        offsets = np.cumsum([0, *(p.shape[1] for p in parts)])
        for k in used:
            ck = c[:, : parts[k].shape[1]]
            term = b.reduce_sum(b.mul(parts[k], b.weight(f"c{k}", data=ck)), axes=(0, 1), keepdims=False)
            loss = term if loss is None else b.add(loss, term)
            want[:, offsets[k]: offsets[k + 1]] = ck
        t, grads = grads_of(b, loss, {"x": xv})
        np.testing.assert_array_equal(grads["x"], want)
        assert ("concat" in ops_of(t)) == concat  # zeros at the ends are padding, not a concatenated tensor
        assert lean_violations(t) == []


def test_weight_off_the_loss_path_gets_zeros() -> None:
    rng = np.random.default_rng(7)
    xv, wv, uv = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3))
    b = Builder()
    x, w, u = b.weight("x", data=xv), b.weight("w", data=wv), b.weight("u", data=uv)
    side = b.exp(u)  # computed, never reaches the loss
    loss = b.reduce_sum(b.mul(x, w), axes=(0, 1), keepdims=False)
    g = b.build({"loss": loss, "side": side})
    t = training_graph(g, loss="output", output="loss", params=["x", "w", "u"])
    out = run(t, {"x": xv, "w": wv, "u": uv})
    np.testing.assert_allclose(out["grad.x"], wv)
    np.testing.assert_allclose(out["grad.w"], xv)
    np.testing.assert_array_equal(out["grad.u"], np.zeros_like(uv))
    assert "exp" not in ops_of(t)


def test_frozen_batchnorm_statistics_get_no_gradient() -> None:
    rng = np.random.default_rng(8)
    arrays = {"x": rng.standard_normal((2, 3, 4, 4)), "s": rng.standard_normal(3), "bias": rng.standard_normal(3),
              "m": rng.standard_normal(3), "v": rng.uniform(0.5, 1.5, 3)}
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    b = Builder()
    vals = [b.weight(k, data=v) for k, v in arrays.items()]
    loss = b.reduce_sum(b.mul(b.batchnorm(*vals), b.batchnorm(*vals)), axes=(0, 1, 2, 3), keepdims=False)
    _, grads = grads_of(b, loss, arrays, batchnorm="frozen")
    np.testing.assert_array_equal(grads["m"], 0)
    np.testing.assert_array_equal(grads["v"], 0)
    ts = {k: torch.tensor(v, dtype=torch.float64, requires_grad=k in ("x", "s", "bias")) for k, v in arrays.items()}
    y = torch.nn.functional.batch_norm(ts["x"], ts["m"], ts["v"], ts["s"], ts["bias"], False, 0.0, 1e-5)
    want = torch.autograd.grad((y * y).sum(), [ts["x"], ts["s"], ts["bias"]])
    for k, w in zip(("x", "s", "bias"), want, strict=True):
        np.testing.assert_allclose(grads[k], w.numpy(), rtol=1e-3, atol=1e-4)
