"""Fixtures for `graphsub optimize`: a small ONNX model with an op graphsub does not model, and fake timing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from graphsub.rules.rule import Rule, make_rule
from helpers import _node_count, install_timing, small_model


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    p = tmp_path / "small.onnx"
    onnx.save(small_model(), str(p))
    return p


@pytest.fixture
def fake_timing(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[bytes | str], float]], None]:
    """Replace onnxruntime timing by a function of the model (default: its node count)."""

    def install(fn: Callable[[bytes | str], float] = _node_count) -> None:
        install_timing(monkeypatch, fn)

    install()
    return install


@pytest.fixture
def bad_rule() -> Rule:
    """A deliberately wrong rule: ``a + b -> a`` (drops an operand)."""
    return make_rule("test_bad_add_drop", lambda p: {"y": p.add(p.var("a"), p.var("b"))},
                     lambda t, m: {"y": m.a}, exact=False, reason="test: deliberately drops an operand")
