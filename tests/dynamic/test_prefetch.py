"""Batched plans and recording ahead in worker processes (issue 10, beyond the thesis)."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyError, build, lazy
from graphsub.dynamic.plan import BatchState, build_plan, run_plan
from graphsub.dynamic.prefetch import PrefetchError, prefetch
from graphsub.dynamic.wire import from_wire, to_wire
from graphsub.dynamic.workloads.models import BinaryTreeLSTM, batch_loss
from graphsub.dynamic.workloads.sst import Vocab, encode_tree, synthetic_treebank


@pytest.fixture(scope="module")
def batches() -> list:
    trees = synthetic_treebank(24, seed=11, vocab_size=40)
    vocab = Vocab.build(trees)
    enc = [encode_tree(t, vocab) for t in trees]
    return [enc[i:i + 6] for i in range(0, 24, 6)]


def _train(batches: list, how: str, workers: int = 1) -> tuple[list[float], torch.Tensor]:
    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)  # dropout 0.5 at the root: masks must match eager
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    losses: list[float] = []

    def step(loss: torch.Tensor) -> None:
        loss.backward()
        opt.step()
        losses.append(float(build(loss).detach()))

    if how == "prefetch":
        for _, loss in prefetch(model, batches, lambda b: batch_loss(model, b), workers=workers):
            opt.zero_grad()
            torch.manual_seed(1)
            step(loss)
    else:
        eng = Reuse(depth=1, collect=0, batching=True)
        for b in batches:
            opt.zero_grad()
            torch.manual_seed(1)
            if how == "eager":
                step(batch_loss(model, b))
            else:
                with lazy(eng):
                    loss = batch_loss(model, b)
                step(loss)
    return losses, model.composer.linear.weight.detach().clone()


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_prefetched_training_matches_eager(batches: list, workers: int) -> None:
    ref, w_ref = _train(batches, "eager")
    got, w = _train(batches, "prefetch", workers)
    same, w_same = _train(batches, "batched")
    assert max(abs(a - b) for a, b in zip(ref, got, strict=True)) < 1e-5
    assert torch.allclose(w, w_ref, atol=1e-5)
    assert got == same and torch.equal(w, w_same)  # the plan run in the main process is the in-process run


def test_plan_survives_the_wire_and_runs_like_the_trace() -> None:
    lin = nn.Linear(4, 6)
    xs = [torch.randn(1, 4) for _ in range(5)]
    eng = Reuse(depth=1, collect=0, batching=True, defer_masks=True)
    with lazy(eng) as tr:
        hs = [F.dropout(torch.tanh(lin(x)), 0.5, True) for x in xs]
        out = torch.cat(hs[::-1], dim=1).sum()
    assert sorted(order for order, *_ in tr.masks.values()) == [0, 1, 2, 3, 4]  # drawn later, in this order
    plan = build_plan(tr.take_pending(), out, tr.masks)
    wire = pickle.loads(pickle.dumps(to_wire(plan, {id(p): k for k, p in enumerate(lin.parameters())}, set())))
    got = from_wire(wire, list(lin.parameters()), ops := {})
    torch.manual_seed(3)
    value, calls, _ = run_plan(got, ops, BatchState())
    torch.manual_seed(3)
    ref = torch.cat([F.dropout(torch.tanh(lin(x)), 0.5, True) for x in xs][::-1], dim=1).sum()
    assert torch.allclose(value, ref) and calls < 3 * 5
    value.backward()
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0


def test_wire_refuses_a_tensor_requiring_grad_outside_the_model() -> None:
    w = torch.ones(3, 3, requires_grad=True)
    with lazy(Reuse(depth=1, collect=0, batching=True)) as tr:
        out = (torch.ones(1, 3) @ w).sum()
    plan = build_plan(tr.take_pending(), out)
    with pytest.raises(LazyError, match="not a parameter"):
        to_wire(plan, {}, set())


def test_batches_of_an_iterator_are_sent_and_train_as_a_list_read_by_position(batches: list) -> None:
    """A list of batches is read by position from the workers' fork-time copy; batches of any other iterable are
    pickled to them one by one: the same training either way."""
    from_list, w_list = _train(batches, "prefetch", 2)
    from_iter, w_iter = _train((b for b in batches), "prefetch", 2)  # type: ignore[arg-type]
    assert from_list == from_iter and torch.equal(w_list, w_iter)


def test_worker_errors_reach_the_main_process(batches: list) -> None:
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)

    def bad(b: list) -> torch.Tensor:
        raise ValueError("no such tree")

    with pytest.raises(PrefetchError, match="no such tree"):
        for _ in prefetch(model, batches, bad):
            pass
    with pytest.raises(PrefetchError, match="not a lazy value"):
        for _ in prefetch(model, batches, lambda b: 3.0):
            pass
    with pytest.raises(ValueError, match="workers"):
        next(prefetch(model, batches, bad, workers=-1))


def test_a_dead_worker_is_reported_at_once(batches: list) -> None:
    import os

    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)

    def die(b: list) -> torch.Tensor:
        os._exit(3)

    with pytest.raises(PrefetchError, match="died"):
        for _ in prefetch(model, batches, die, timeout=60):
            pass
