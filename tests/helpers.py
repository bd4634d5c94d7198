"""Shared test helpers (importable because pytest puts tests/ on sys.path, see pyproject)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from graphsub.execute import run
from graphsub.frontends.onnx_io import to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir import Builder, Graph


def make_rand(seed: int) -> Callable[..., np.ndarray]:
    """A float32 standard-normal generator with its own seeded stream (one per test module)."""
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return rand


def ops_of(g: Graph) -> list[str]:
    """Sorted op names of the compute nodes."""
    return sorted(g.node(n).op for n in g.nodes if not g.node(n).is_leaf)


def build(op: str, shapes: list[tuple[int, ...]], **attrs: Any) -> Graph:
    """A graph applying ``op`` to fresh float32 inputs ``x0, x1, ...``."""
    b = Builder(op)
    xs = [b.input(f"x{i}", s) for i, s in enumerate(shapes)]
    return b.build(b.op(op, *xs, **attrs))


def check_ort(g: Graph, feeds: dict[str, np.ndarray], opset: int | None = None) -> np.ndarray:
    """Run ``g`` with the reference executor and in onnxruntime; assert they agree."""
    (ref,) = run(g, feeds).values()
    (got,) = run_model(to_onnx(g, opset=opset), feeds)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    return ref


@pytest.fixture(autouse=True)
def no_stop_request() -> Iterator[None]:
    """No pending stop request before or after a test (a Ctrl-C flag left behind would end the next searches at
    once). Autouse in the modules that import it: ``from helpers import no_stop_request  # noqa: F401``."""
    from graphsub import interrupt

    interrupt.clear()
    yield
    interrupt.clear()
