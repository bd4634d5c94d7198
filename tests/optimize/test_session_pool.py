"""Several sessions per timed model, used in turn (:class:`graphsub.optimize.timing.SessionPool`): the side-by-side
rounds and the paired confirmation rounds create ``copies`` sessions a model and rotate them, so that one session's
luck is not read as the model's speed; a model too big for copies gets one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from graphsub.optimize.timing import POOL_MAX_BYTES, SessionPool, Timers, pool_size, time_candidates


def _fake(made: list[str], latency: dict[str, list[float]]) -> Callable[..., Callable[[float], float]]:
    """A session factory: session ``i`` of model ``m`` always takes ``latency[m][i]`` ms (its luck)."""

    def make(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        name = model.decode() if isinstance(model, bytes) else model
        i = sum(1 for x in made if x == name)
        made.append(name)
        return lambda budget_ms: latency[name][i]

    return make


def test_a_pool_uses_its_sessions_in_turn() -> None:
    pool = SessionPool([lambda ms: 1.0, lambda ms: 2.0, lambda ms: 3.0])
    assert [pool(10.0) for _ in range(7)] == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0]
    with pytest.raises(ValueError, match="at least one"):
        SessionPool([])


def test_side_by_side_rounds_rotate_copies_of_each_model() -> None:
    made: list[str] = []
    timers = Timers(session=_fake(made, {"a": [10.0, 12.0, 14.0], "b": [11.0, 11.0, 11.0]}))
    out = time_candidates({"a": b"a", "b": b"b"}, {}, threads=1, budget_ms=1.0, rounds=6, copies=3, timers=timers)
    assert sorted(made) == ["a"] * 3 + ["b"] * 3
    assert out["a"] == [10.0, 12.0, 14.0, 10.0, 12.0, 14.0]  # one lucky session no longer decides a's speed
    assert out["b"] == [11.0] * 6
    made.clear()
    assert time_candidates({"a": b"a"}, {}, threads=1, budget_ms=1.0, rounds=2, timers=timers) == {"a": [10.0, 10.0]}
    assert made == ["a"]  # one session by default


def test_a_big_model_gets_one_session(tmp_path: Path) -> None:
    assert pool_size(b"small", 3) == 3 and pool_size(b"small", 0) == 1
    assert pool_size(b"too big", 3, max_bytes=4) == 1 and pool_size(b"fits", 3, max_bytes=4) == 3
    assert pool_size("/no/such/file.onnx", 3, max_bytes=4) == 3  # unknown size: as asked (loading it fails later)
    big = tmp_path / "big.onnx"
    big.touch()
    os.truncate(big, POOL_MAX_BYTES + 1)  # sparse: no memory, no disk
    assert pool_size(str(big), 3) == 1  # the default limit


def test_real_sessions_in_a_pool_time_the_same_model() -> None:
    """Against onnxruntime: three sessions of a tiny model, each timed, all positive."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sessions: dict[str, Callable[[float], float]] = {}
    out = time_candidates({"m": model}, {"x": np.ones((4, 8), np.float32)}, threads=1, budget_ms=2.0, rounds=3,
                          copies=3, sessions=sessions)
    pool = sessions["m"]
    assert isinstance(pool, SessionPool) and len(pool.timers) == 3 and pool.calls == 3
    assert len(out["m"]) == 3 and all(ms > 0 for ms in out["m"])
