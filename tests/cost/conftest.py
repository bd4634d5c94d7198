"""Keep every cost test away from the user's real cache directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GRAPHSUB_CACHE", str(tmp_path / "ops.sqlite"))


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def _encoder_like(with_if: bool = False) -> bytes:
    """x -> LayerNorm spelt out in primitive ops -> MatMul + bias -> GELU spelt out with Erf (what exporters
    write; onnxruntime fuses both)."""
    d = 16
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [
        n("ReduceMean", ["x"], ["mu"], axes=[-1]), n("Sub", ["x", "mu"], ["xc"]),
        n("Pow", ["xc", "two"], ["sq"]), n("ReduceMean", ["sq"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Div", ["xc", "sd"], ["xn"]),
        n("Mul", ["xn", "gamma"], ["xg"]), n("Add", ["xg", "beta"], ["ln"]),
        n("MatMul", ["ln", "w"], ["mm"]), n("Add", ["mm", "b"], ["h"]),
        n("Div", ["h", "sqrt2"], ["hd"]), n("Erf", ["hd"], ["he"]), n("Add", ["he", "one"], ["h1"]),
        n("Mul", ["h", "h1"], ["hm"]), n("Mul", ["hm", "half"], ["y"]),
    ]
    inits = [_init("two", 2.0), _init("eps", 1e-5), _init("gamma", rng.random(d)), _init("beta", rng.random(d)),
             _init("w", rng.random((d, d))), _init("b", rng.random(d)), _init("sqrt2", np.sqrt(2.0)),
             _init("one", 1.0), _init("half", 0.5)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, d])]
    if with_if:
        then = helper.make_graph([n("Identity", ["y"], ["t"])], "then", [],
                                 [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4, d])])
        other = helper.make_graph([n("Neg", ["y"], ["e"])], "else", [],
                                  [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4, d])])
        nodes.append(n("If", ["c"], ["z"], then_branch=then, else_branch=other))
        outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, d])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, d])]
    if with_if:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    g = helper.make_graph(nodes, "enc", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def encoder_like() -> Callable[..., bytes]:
    """A small encoder block as exporters write it (LayerNorm and GELU spelt out), serialized."""
    return _encoder_like
