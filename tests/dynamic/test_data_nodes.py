"""Deferred data: ``torch.tensor([ints])`` inside a trace that batches module calls is a lazy data node
(:func:`graphsub.dynamic.record.data_node`), stacked by the plan; everywhere else it is an eager tensor."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from graphsub.dynamic.calls import DATA_KIDS
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyError, LazyTensor, build, lazy
from graphsub.dynamic.prefetch import prefetch
from graphsub.dynamic.workloads.models import BinaryTreeLSTM, batch_loss
from graphsub.dynamic.workloads.sst import Vocab, encode_tree, synthetic_treebank


def _capturing() -> Reuse:
    return Reuse(depth=1, collect=0, batching=True, capture_modules=True)


def test_word_ids_are_data_nodes_with_eager_values_and_tensor_manners() -> None:
    with lazy(_capturing()):
        ids = [3, 0, 7]
        t = torch.tensor(ids)
        one = torch.tensor([5], device=torch.device("cpu"), dtype=torch.int64)
        ids[0] = 99  # eager copies the list at the call: so does a data node
        assert type(t) is LazyTensor and t.kid in DATA_KIDS and type(one) is LazyTensor
        assert (tuple(t.shape), t.dtype, t.device) == ((3,), torch.int64, torch.device("cpu"))
        assert t.tolist() == [3, 0, 7] and int(one) == 5 and ["a", "b", "c", "d", "e", "f"][one] == "f"
        assert one.numpy().tolist() == [5]  # a method the tracer does not record sees the real tensor
        assert build(t + 1).tolist() == [4, 1, 8]  # ops on it are recorded as usual
        got = build(t)
    torch.testing.assert_close(got, torch.tensor([3, 0, 7]))


@pytest.mark.parametrize("args, kwargs", [
    (([1.5],), {}), (([True],), {}), (([[1]],), {}), (([],), {}), (((1, 2),), {}), (([1 << 63],), {}),
    (([1],), {"dtype": torch.int32}), (([1],), {"requires_grad": False}), (([1],), {"device": "meta"}),
])
def test_anything_but_a_flat_int64_list_on_the_cpu_stays_eager(args: tuple, kwargs: dict) -> None:
    with lazy(_capturing()):
        try:
            got = torch.tensor(*args, **kwargs)
        except (RuntimeError, OverflowError, ValueError) as e:  # what eager raises, raised at the call as eagerly
            with pytest.raises(type(e)):
                torch.tensor(*args, **kwargs)
            return
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, torch.tensor(*args, **kwargs))


@pytest.mark.parametrize("engine, deferred", [
    (None, False), (Reuse(depth=1, collect=0, batching=False, capture_modules=True), False), (Reuse(), False),
    (Reuse(depth=1, collect=0, batching=True), True), (_capturing(), True),
], ids=["plain", "capture unbatched", "thesis patterns", "op-level batching", "module batching"])
def test_only_traces_that_batch_while_recording_defer_word_ids(engine: Reuse | None, deferred: bool) -> None:
    with lazy(engine):
        got = torch.tensor([4])
        assert (type(got) is LazyTensor) is deferred
        assert build(got).tolist() == [4]


def test_a_module_body_probed_or_run_makes_its_own_tensors() -> None:
    class Offset(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + torch.tensor([1]).float()

    m = Offset()
    x = torch.randn(4, 1, 3)
    with lazy(_capturing()):
        outs = [m(x[i]) for i in range(4)]
        got = [build(o) for o in outs]
    for i in range(4):
        torch.testing.assert_close(got[i], m(x[i]))


def test_captured_tree_lstm_reads_its_word_ids_from_data_nodes_and_trains_as_eager() -> None:
    trees = synthetic_treebank(8, seed=3, vocab_size=30)
    vocab = Vocab.build(trees)
    batch = [encode_tree(t, vocab) for t in trees]
    torch.manual_seed(0)
    model = BinaryTreeLSTM(len(vocab), emb_dim=8, hidden=5)
    with lazy(_capturing()):
        emb_in = model.embed(batch[0].leaves()[0].wid)
        assert emb_in.inputs[0].kid in DATA_KIDS
    torch.manual_seed(1)
    ref = batch_loss(model, batch)
    g_ref = torch.autograd.grad(ref, list(model.parameters()), allow_unused=True)
    for how in ("captured", "prefetch"):
        torch.manual_seed(1)
        if how == "captured":
            with lazy(_capturing()):
                loss = build(batch_loss(model, batch))
        else:
            _, lazy_loss = next(iter(prefetch(model, [batch], lambda b: batch_loss(model, b), workers=1,
                                              capture_modules=True)))
            loss = build(lazy_loss)
        g = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
        torch.testing.assert_close(loss, ref)
        for a, b in zip(g_ref, g, strict=True):
            if a is None or b is None:
                assert a is None and b is None
            else:
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


_KWARGS = st.sampled_from([{}, {"device": "cpu"}, {"device": torch.device("cpu")}, {"dtype": torch.int64},
                           {"dtype": None}, {"dtype": torch.float32}, {"device": "cpu", "dtype": torch.int64}])


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(min_value=-(1 << 64), max_value=1 << 64), max_size=4), kwargs=_KWARGS)
def test_torch_tensor_under_a_batching_trace_is_what_eager_makes(values: list[int], kwargs: dict) -> None:
    try:
        ref = torch.tensor(values, **kwargs)
    except (RuntimeError, OverflowError, ValueError) as e:
        with lazy(_capturing()), pytest.raises(type(e)):
            torch.tensor(values, **kwargs)
        return
    with lazy(_capturing()):
        got = build(torch.tensor(values, **kwargs))
    assert got.dtype == ref.dtype and got.shape == ref.shape and torch.equal(got, ref)


def test_word_ids_changed_in_place_are_read_as_changed() -> None:
    emb = nn.Embedding(10, 3)
    ref = emb(torch.tensor([7])) + emb(torch.tensor([8]))
    with lazy(_capturing()):
        a, b = torch.tensor([2]), torch.tensor([3])
        a[0] = 7  # as eager code may do before using them
        b.add_(5)
        got = build(emb(a) + emb(b))
        with pytest.raises(LazyError, match="assigning into a lazy value"):
            got_lazy = emb(torch.tensor([1]))
            got_lazy[0] = 0.0
    torch.testing.assert_close(got, ref)
