"""A capturing engine records without the lazy function mode once its first traces showed they need none
(``graphsub.dynamic.lazy.ModeNeed``); a program with calls that only the mode sees keeps it; probes see every
call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphsub.dynamic import capture
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyTensor, ModeNeed, build, lazy
from graphsub.dynamic.workloads.models import BinaryTreeLSTM, batch_loss
from graphsub.dynamic.workloads.sst import Vocab, encode_tree, synthetic_treebank


def _engine() -> Reuse:
    return Reuse(depth=1, collect=0, batching=True, capture_modules=True)


def _mode_on() -> bool:
    return bool(torch._C._is_torch_function_mode_enabled())


def test_a_captured_tree_lstm_drops_the_mode_after_its_first_traces_and_trains_as_eager() -> None:
    trees = synthetic_treebank(20, seed=4, vocab_size=40)
    vocab = Vocab.build(trees)
    enc = [encode_tree(t, vocab) for t in trees]
    batches = [enc[i:i + 5] for i in range(0, 20, 5)]
    params = {}
    modes = []
    for how in ("eager", "captured"):
        torch.manual_seed(0)
        model = BinaryTreeLSTM(50, emb_dim=8, hidden=5)
        opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
        eng = _engine()
        for b in batches:
            opt.zero_grad()
            torch.manual_seed(1)  # dropout at the root: the same masks either way
            if how == "eager":
                loss = batch_loss(model, b)
            else:
                with lazy(eng):
                    modes.append(_mode_on())
                    loss = batch_loss(model, b)
                assert type(loss) is LazyTensor
            loss.backward()
            opt.step()
        params[how] = [p.detach().clone() for p in model.parameters()]
    assert modes == [True] * ModeNeed.QUIET + [False] * (len(batches) - ModeNeed.QUIET)
    assert eng.report()["lazy_mode"].startswith("dropped after 2 traces")
    for pe, pc in zip(params["eager"], params["captured"], strict=True):
        torch.testing.assert_close(pe, pc, atol=1e-6, rtol=1e-5)


def test_a_program_with_calls_only_the_mode_sees_keeps_it_and_batches_them() -> None:
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(3, 3))
    lin = nn.Linear(3, 2)
    eng = _engine()
    for step in range(ModeNeed.QUIET + 2):
        xs = [torch.randn(1, 3) for _ in range(6)]
        ref = torch.cat([lin(torch.tanh(x @ w)) for x in xs]).sum()  # x @ w: a parameter and data, no lazy value
        with lazy(eng):
            assert _mode_on(), step
            out = torch.cat([lin(torch.tanh(x @ w)) for x in xs]).sum()
        torch.testing.assert_close(build(out), ref)
        assert eng.last.calls < 6  # the six x @ w recorded and batched, not run one by one
    assert eng.mode_need.needed and eng.report()["lazy_mode"].startswith("every trace")


class _Noisy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, True)  # random numbers: refused, masks drawn in eager's order


class _Drawing(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn(3)  # a draw with no lazy value in it: only the probe's mode sees it


class _ValueDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) if x.sum() > 0 else -x


@pytest.mark.parametrize(("make", "reason"), [(_Noisy, "draws random numbers"), (_Drawing, "draws random numbers"),
                                              (_ValueDependent, "reads a tensor's value")])
def test_probes_see_every_call_in_a_trace_without_the_mode(make: type, reason: str) -> None:
    torch.manual_seed(0)
    emb = nn.Embedding(10, 3)
    mod = make()
    eng = _engine()
    eng.mode_need.quiet = ModeNeed.QUIET  # as after two quiet traces
    torch.manual_seed(5)
    ref = torch.stack([mod(emb(torch.tensor([i]))) for i in range(4)]).sum()
    capture.reset_report()
    torch.manual_seed(5)
    with lazy(eng):
        assert not _mode_on()
        out = torch.stack([mod(emb(torch.tensor([i]))) for i in range(4)]).sum()
    torch.testing.assert_close(build(out), ref)
    row = {r["callable"]: r for r in capture.report()}[make.__name__]
    assert not row["captured"] and reason in row["reason"]
