"""Pricing a model by the kernels of onnxruntime's own optimized graph (graphsub.cost.ort_kernels)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphsub.cost.ort_kernels import KernelPrice, OrtKernelPricer, calibration, fit_calibration, kernel_counts
from graphsub.errors import ExecutionError

FEEDS = {"x": np.random.default_rng(1).random((1, 4, 16)).astype(np.float32)}


def test_kernel_counts_show_ort_fusions(encoder_like: Any) -> None:
    counts = kernel_counts(encoder_like(), threads=1)
    assert "LayerNormalization" in counts  # the nine primitive ops became one kernel
    assert "ReduceMean" not in counts and "Erf" not in counts
    assert sum(counts.values()) <= 5  # LayerNormalization, Gemm between two Reshapes, Gelu


def test_price_sums_the_kernels_and_caches_them(tmp_path: Path, encoder_like: Any) -> None:
    model = encoder_like()
    pricer = OrtKernelPricer(threads=1, cache=tmp_path / "k.sqlite", budget_ms=2.0)
    first = pricer.price(model, FEEDS)
    assert Counter(op for op, _ in first.kernels) == Counter(kernel_counts(model, threads=1))
    assert first.measured == len(first.kernels) > 0 and not first.unpriced
    assert all(ms >= 0 for _, ms in first.kernels) and first.overhead_ms > 0
    assert first.estimate_ms(1) >= first.sum_ms
    again = OrtKernelPricer(threads=1, cache=tmp_path / "k.sqlite", budget_ms=2.0).price(model, FEEDS)
    assert again.measured == 0 and again.kernels == first.kernels  # every kernel from the cache


def test_kernels_with_subgraphs_are_reported_unpriced(tmp_path: Path, encoder_like: Any) -> None:
    feeds = {**FEEDS, "c": np.array(True)}
    price = OrtKernelPricer(threads=1, cache=tmp_path / "k.sqlite", budget_ms=2.0).price(
        encoder_like(with_if=True), feeds)
    assert price.unpriced == ["If"] and price.kernels


def test_rejected_model_is_an_execution_error(tmp_path: Path) -> None:
    with pytest.raises(ExecutionError, match="rejected"):
        OrtKernelPricer(threads=1, cache=tmp_path / "k.sqlite").price(b"not a model", FEEDS)


def test_fit_recovers_scale_and_per_kernel_term() -> None:
    pts = [(s, n, 1.5 * s + 0.004 * n) for s, n in [(1.0, 10), (2.0, 50), (5.0, 40), (0.5, 200)]]
    scale, per_kernel = fit_calibration(pts)
    assert scale == pytest.approx(1.5) and per_kernel == pytest.approx(0.004)
    assert fit_calibration([]) == (1.0, 0.0)
    # a negative per-kernel fit falls back to a scale alone
    scale, per_kernel = fit_calibration([(1.0, 100, 1.0), (2.0, 10, 2.0), (3.0, 1, 3.1)])
    assert per_kernel == 0.0 and scale > 0


def test_calibration_only_where_fitted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("graphsub.cost.ort_kernels.CALIBRATION", {8: (1.2, 0.003)})
    assert calibration(8) == (1.2, 0.003) and calibration(6) == calibration(1) == (1.0, 0.0)
    price = KernelPrice(kernels=[("MatMul", 1.0), ("Gelu", 0.5)], overhead_ms=0.01)
    assert price.estimate_ms(8) == pytest.approx(1.2 * 1.5 + 2 * 0.003 + 0.01)
    assert price.counts() == {"MatMul": 1, "Gelu": 1} and list(price.by_op()) == ["MatMul", "Gelu"]
