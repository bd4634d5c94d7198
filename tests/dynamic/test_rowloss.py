"""One-row losses of many examples run as one batched call (``graphsub.dynamic.rowloss``), with eager's values and
gradients; the variants that would not batch exactly still run member by member."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import build, lazy

_TARGETS = [0, 2, 1, 2, 0, 1]


def _losses(lin: nn.Linear, xs: list[torch.Tensor], loss: Any, kwargs: dict[str, Any],
            targets: list[int]) -> torch.Tensor:
    return torch.stack([loss(lin(x), torch.tensor([t]), **kwargs) for x, t in zip(xs, targets, strict=True)])


def _run(loss: Any, kwargs: dict[str, Any], targets: list[int] = _TARGETS) -> tuple[int, bool]:
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    xs = [torch.randn(1, 4) for _ in targets]
    ref = _losses(lin, xs, loss, kwargs, targets)
    ref.nansum().backward()
    grads = [p.grad.clone() for p in lin.parameters()]  # type: ignore[union-attr]
    lin.zero_grad()
    eng = Reuse(depth=1, collect=0, batching=True, capture_modules=True)
    with lazy(eng):
        out = _losses(lin, xs, loss, kwargs, targets)
    got = build(out)
    torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)  # the same numbers, NaN included
    got.nansum().backward()
    for p, g in zip(lin.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-6, atol=1e-7)
    return eng.last.calls, bool(torch.isnan(got).any())


@pytest.mark.parametrize("loss", [F.cross_entropy, lambda x, t, **k: F.nll_loss(F.log_softmax(x, 1), t, **k)],
                         ids=["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"ignore_index": 1}], ids=["mean", "sum", "ignore"])
def test_one_row_losses_are_one_call_with_eager_values(loss: Any, kwargs: dict[str, Any]) -> None:
    calls, nan = _run(loss, kwargs)
    # the Linear once, log_softmax once (nll), the losses once, the stack: no call per example
    assert calls <= 4, calls
    assert nan == ("ignore_index" in kwargs)  # an ignored target's mean is 0 / 0, as eagerly


@pytest.mark.parametrize("kwargs", [{"weight": torch.tensor([1.0, 2.0, 0.5])}, {"label_smoothing": 0.1}],
                         ids=["weight", "smoothing"])
def test_other_losses_stay_member_by_member_and_exact(kwargs: dict[str, Any]) -> None:
    calls, _ = _run(F.cross_entropy, kwargs)
    assert calls >= len(_TARGETS)  # not batched by the row-loss rule


def test_reduction_none_keeps_one_row_per_example_and_batches_as_any_row_op() -> None:
    calls, _ = _run(F.cross_entropy, {"reduction": "none"})
    assert calls <= 3
