"""`graphsub.optimize_module`: export a PyTorch module, optimize, verify against the module, run in onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphsub.search import Budget

torch = pytest.importorskip("torch")
nn = torch.nn


class TwoHeads(nn.Module):
    """``relu(x) @ A + relu(x) @ B``: the default rules merge the two matmuls."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 32, bias=False)
        self.b = nn.Linear(32, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x)
        return self.a(h) + self.b(h)


def test_optimize_module_matches_the_module(tmp_path: Path) -> None:
    from graphsub.optimize import optimize_module

    torch.manual_seed(0)
    module = TwoHeads()
    x = torch.randn(8, 32)
    opt = optimize_module(module, (x,), output=tmp_path / "m.onnx", cost="roofline:cpu",
                          budget=Budget(time_s=5, k=4), timing_budget_ms=5)
    assert opt.path.exists() and opt.result.verified and opt.max_abs_diff_vs_module < 1e-4
    assert opt.result.search.sequence  # something was rewritten (kept or not, depending on the timing)
    y = opt(x)
    assert isinstance(y, torch.Tensor)
    with torch.no_grad():
        np.testing.assert_allclose(y.numpy(), module(x).numpy(), rtol=1e-4, atol=1e-5)
    assert isinstance(opt(x.numpy()), np.ndarray)
