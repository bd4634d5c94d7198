"""``optimize`` on a model whose weights are held by reference (:mod:`graphsub.frontends.shared`), as a model above
protobuf's 2 GB is: a small model with external data and the size limit lowered runs the whole pipeline -- load,
search, portfolio, verification, timing, write -- and its output is written with its weights beside it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphsub.frontends.onnx_export as onnx_export
from graphsub.frontends.ort import run_model
from graphsub.optimize import optimize

RNG = np.random.default_rng(1)
W = [RNG.standard_normal((128, 128)).astype(np.float32) / 8 for _ in range(3)]


def _chain(path: Path) -> None:
    """x -> (MatMul, Relu) x 3 with a transpose pair in between (something to clean up), weights external."""
    nodes, prev = [], "x"
    for i in range(3):
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        prev = f"r{i}"
    nodes += [helper.make_node("Transpose", [prev], ["t"], perm=[1, 0]),
              helper.make_node("Transpose", ["t"], ["y"], perm=[1, 0])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 128])],
                          [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(W)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(path), save_as_external_data=True, location=path.name + ".bin", size_threshold=1024)


def _expected(x: np.ndarray) -> np.ndarray:
    for w in W:
        x = np.maximum(x @ w, 0)
    return x


@pytest.mark.parametrize("peers", ["none", "auto"])
def test_optimize_with_held_weights_writes_them_beside_the_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  peers: str) -> None:
    monkeypatch.setattr(onnx_export, "SHARE_BYTES", 0)  # every graph counts as large
    src = tmp_path / "in" / "chain.onnx"
    src.parent.mkdir()
    _chain(src)
    before = {p.name: p.read_bytes() for p in src.parent.iterdir()}
    out = tmp_path / "out" / "chain.onnx"
    out.parent.mkdir()
    res = optimize(str(src), output=str(out), time_s=30, seed=0, peers=peers, keep_slower=True)
    assert res.verified, res.decision
    assert res.peak_rss_mb is not None and res.peak_rss_mb > 0
    # the weights beside the output, unless a peer's output with its weights inline (a small model's) was kept
    assert {p.name for p in out.parent.iterdir()} in ({"chain.onnx", "chain.onnx.data"}, {"chain.onnx"})
    assert "external data" not in " ".join(res.portfolio_notes)  # a peer's output with external data is a candidate
    x = RNG.standard_normal((4, 128)).astype(np.float32)
    np.testing.assert_allclose(run_model(str(out), {"x": x})[0], _expected(x), rtol=1e-4, atol=1e-5)
    assert {p.name: p.read_bytes() for p in src.parent.iterdir()} == before  # the input is never written


def test_peers_run_one_at_a_time_when_copies_would_not_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import graphsub.data as data
    from graphsub.optimize.sources import peers as source

    src = tmp_path / "chain.onnx"
    _chain(src)
    each = source.PEER_MEMORY_FACTOR * sum(w.nbytes for w in W)
    monkeypatch.setattr(data, "available_memory", lambda: int(3.5 * each))
    assert source._workers(4, 8, src) == 3 and source._workers(4, 2, src) == 2
    monkeypatch.setattr(data, "available_memory", lambda: int(0.5 * each))
    assert source._workers(4, 2, src) == 1  # never none


@pytest.mark.parametrize("peer", ["onnxsim", "onnxoptimizer", "onnxslim"])
def test_a_protobuf_bound_peer_is_not_applicable_above_2_gb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             peer: str) -> None:
    from graphsub.optimize import peers

    src = tmp_path / "chain.onnx"
    _chain(src)
    monkeypatch.setattr(peers, "PROTOBUF_LIMIT_BYTES", 1000)  # as if its files held more than 2 GB
    with pytest.raises(peers.PeerNotApplicable, match="one protobuf"):
        peers.PEERS[peer](src, tmp_path / "out.onnx", peers.PeerInput())


def test_candidates_are_screened_one_at_a_time_when_their_sessions_do_not_fit(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from graphsub.optimize import race

    monkeypatch.setattr(race, "sessions_that_fit", lambda models: 2)  # as a 4 GB model's on a 24 GB machine
    src = tmp_path / "chain.onnx"
    _chain(src)
    res = optimize(str(src), output=str(tmp_path / "out.onnx"), time_s=40, seed=0, peers="onnxslim,onnxscript",
                   spelling=True)
    assert res.verified, res.decision
    assert any("screened one at a time" in n for n in res.portfolio_notes), res.portfolio_notes
    distinct = [c for c in res.candidates if c.verified and not c.same_as]
    assert distinct and all(c.runs_as or c.screen_ratio is not None for c in distinct)  # each ranked, or a twin
    assert len([c for c in res.candidates if c.rounds_ms]) <= 1  # at most one beside the original: two sessions
