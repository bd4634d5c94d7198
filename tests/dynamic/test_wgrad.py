"""Deferred weight gradients (graphsub.dynamic.wgrad): one GEMM per nn.Linear per backward pass, the same
gradients as autograd's own in every way a user asks for them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from graphsub.dynamic import wgrad
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import lazy
from graphsub.dynamic.plan import BatchState, build_plan, run_plan
from graphsub.dynamic.workloads.models import BinaryTreeLSTM, batch_loss
from graphsub.dynamic.workloads.sst import Vocab, encode_tree, synthetic_treebank


@pytest.fixture(autouse=True)
def _defer_small_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' Linears are small: defer them all (the size rule has a test of its own)."""
    monkeypatch.setattr(wgrad, "MIN_ELEMENTS", 0)


def _calls(bias: bool = True) -> tuple[nn.Linear, list[torch.Tensor]]:
    torch.manual_seed(0)
    lin = nn.Linear(7, 5, bias=bias)
    xs = [torch.randn(n, 7, requires_grad=True) for n in (4, 1, 3)] + [torch.randn(2, 3, 7, requires_grad=True)]
    return lin, xs


def _run(lin: nn.Linear, xs: list[torch.Tensor], defer: bool) -> torch.Tensor:
    """A loss over several calls of ``lin`` chained as a plan's levels are (each call reads the last one)."""
    with wgrad.deferring() if defer else torch.enable_grad():
        h = torch.zeros(5)
        out = []
        for x in xs:
            y = torch.tanh(lin(x) + h)
            h = y.reshape(-1, 5).mean(0)
            out.append(y.sum())
    return torch.stack(out).pow(2).sum()


def _grads(loss_fn: Callable[[bool], None], tensors: list[torch.Tensor]) -> dict[bool, list[torch.Tensor]]:
    got = {}
    for defer in (False, True):
        for t in tensors:
            t.grad = None
        loss_fn(defer)
        got[defer] = [t.grad.clone() if t.grad is not None else torch.zeros(()) for t in tensors]
    return got


@pytest.mark.parametrize("bias", [True, False])
def test_deferred_gradients_equal_autograds(bias: bool) -> None:
    lin, xs = _calls(bias)
    params = list(lin.parameters())
    seen: list[torch.Tensor] = []
    lin.weight.register_hook(lambda g: seen.append(g))
    got = _grads(lambda d: _run(lin, xs, d).backward(), [*params, *xs])
    for a, b in zip(got[False], got[True], strict=True):
        torch.testing.assert_close(a, b)
    assert len(seen) == 2  # a hook on the weight sees one summed gradient per pass, deferred or not
    assert nn.Linear.forward is wgrad._ORIG_FORWARD  # restored on leaving


def test_the_weight_gradient_is_one_gemm_however_many_calls() -> None:
    lin, xs = _calls()
    counts = {}
    for defer in (False, True):
        loss = _run(lin, xs, defer)
        with torch.profiler.profile() as prof:
            loss.backward()
        counts[defer] = sum(e.count for e in prof.key_averages() if e.key == "aten::mm")
    # autograd: per call one mm for the input and one for the weight (3 2-D calls as mm, 1 3-D call);
    # deferred: the first call as autograd's, the others' weight gradients in one mm
    assert counts[True] < counts[False]


def test_a_pass_that_skips_the_weight_leaves_nothing_behind() -> None:
    """``torch.autograd.grad`` w.r.t. an input only must not stash the calls for a later pass."""
    lin, xs = _calls()

    def twice(defer: bool) -> None:
        loss = _run(lin, xs, defer)
        torch.autograd.grad(loss, [xs[0]], retain_graph=True)
        loss.backward(retain_graph=True)
        loss.backward()

    got = _grads(twice, [*lin.parameters(), *xs])
    for a, b in zip(got[False], got[True], strict=True):
        torch.testing.assert_close(a, b)


def test_double_backward_through_deferred_calls() -> None:
    """A gradient penalty (create_graph): second-order terms through the weight are autograd's."""
    lin, xs = _calls()

    def penalty(defer: bool) -> None:
        loss = _run(lin, xs, defer)
        gx = torch.autograd.grad(loss, xs, create_graph=True)
        (loss + sum(g.pow(2).sum() for g in gx)).backward()

    got = _grads(penalty, [*lin.parameters(), *xs])
    for a, b in zip(got[False], got[True], strict=True):
        torch.testing.assert_close(a, b)


def test_no_grad_and_frozen_weights_run_as_always() -> None:
    lin, xs = _calls()
    with wgrad.deferring(), torch.no_grad():
        ys = [lin(x) for x in xs]
    assert all(y.grad_fn is None for y in ys)
    lin.weight.requires_grad_(False)
    got = _grads(lambda d: _run(lin, xs, d).backward(), [lin.bias, *xs])
    for a, b in zip(got[False], got[True], strict=True):
        torch.testing.assert_close(a, b)


def test_a_plan_with_deferred_weight_gradients_trains_as_without() -> None:
    trees = synthetic_treebank(12, seed=3, vocab_size=30)
    vocab = Vocab.build(trees)
    batch = [encode_tree(t, vocab) for t in trees]
    torch.manual_seed(0)
    model = BinaryTreeLSTM(40, emb_dim=10, hidden=6)
    got = {}
    for defer in (False, True):
        model.zero_grad()
        torch.manual_seed(2)
        with lazy(Reuse(depth=1, collect=0, batching=True, capture_modules=True)) as tr:
            loss = batch_loss(model, batch)
        plan = build_plan(tr.take_pending(), loss, layout=True)
        value, _, _ = run_plan(plan, plan.ops, BatchState(defer_weight_grads=defer))
        value.backward()
        got[defer] = (value.detach(), [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(got[True][0], got[False][0])
    for a, b in zip(got[True][1], got[False][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_under_torch_func_nothing_is_deferred() -> None:
    lin, xs = _calls()
    params = dict(lin.named_parameters())

    def loss(p: dict[str, torch.Tensor], defer: bool) -> torch.Tensor:
        with wgrad.deferring() if defer else torch.enable_grad():
            return sum(torch.func.functional_call(lin, p, (x,)).pow(2).sum() for x in xs)  # type: ignore[return-value]

    ref = torch.func.grad(loss)(params, False)
    got = torch.func.grad(loss)(params, True)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k])


def test_weights_under_the_size_rule_are_not_deferred(monkeypatch: pytest.MonkeyPatch) -> None:
    lin, xs = _calls()
    for limit, deferred in ((lin.weight.numel() + 1, False), (lin.weight.numel(), True)):
        monkeypatch.setattr(wgrad, "MIN_ELEMENTS", limit)
        with wgrad.deferring():
            ys = [lin(x) for x in xs]
        assert (type(ys[-1].grad_fn).__name__ == "_DeferredBackward") is deferred
