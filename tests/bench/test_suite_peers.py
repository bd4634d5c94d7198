"""The suite's peers: every peer run as its users run it on a tiny transformer encoder and a tiny conv net (each
output loads and verifies, or the peer says why not), the verification itself (wrong, unloadable, NaN originals),
crashing / hanging / failing peers isolated from the caller, and the view of ORT's optimized graph."""

from __future__ import annotations

import importlib.util
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

from graphsub.bench.suite.measure import check_output, make_feeds
from graphsub.optimize.peers import (
    FUSED_KERNELS,
    PEER_NAMES,
    PEERS,
    OrtView,
    PeerFailed,
    PeerInput,
    PeerResult,
    ort_view,
    require_library,
    run_peer,
    summarize_ops,
)

#: each peer's library: a missing one must show as ``not-installed``, never as a skipped test
LIBRARY = {
    "ort": "onnxruntime",
    "ort-transformers-0": "onnxruntime.transformers.optimizer",
    "ort-transformers-99": "onnxruntime.transformers.optimizer",
    "onnxscript": "onnxscript.rewriter.ort_fusions",
    "onnxslim": "onnxslim",
    "onnxsim": "onnxsim",
    "onnxoptimizer": "onnxoptimizer",
}
TRANSFORMER_ONLY = {"ort-transformers-0", "ort-transformers-99"}

ENCODER_INPUTS = [{"name": "x", "dtype": "float32", "shape": (1, 8, 32)}]
CONV_INPUTS = [{"name": "x", "dtype": "float32", "shape": (1, 3, 16, 16)}]
ENCODER_META = PeerInput(transformer={"model_type": "bert", "num_heads": 2, "hidden_size": 32})


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a missing parent package
        return False


# ------------------------------------------------------------------ tiny models, exported as users export them


def _export_encoder(path: Path) -> None:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False).eval()
    with warnings.catch_warnings():  # the legacy exporter's deprecation, the tracer's notes on shape checks
        warnings.simplefilter("ignore")
        torch.onnx.export(enc, (torch.randn(1, 8, 32),), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17)


def _export_convnet(path: Path) -> None:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(self.bn(self.c2(torch.relu(self.c1(x)))))

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(1, 3, 16, 16),), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17)


def _unary_model(path: Path, op: str, *, domain: str = "", opsets: tuple[tuple[str, int], ...] = (("", 17),)) -> Path:
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    graph = oh.make_graph([oh.make_node(op, ["x"], ["y"], domain=domain)], "g", [x], [y])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid(d, v) for d, v in opsets]), str(path))
    return path


def _add_const(path: Path, value: float) -> Path:
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    c = oh.make_tensor("c", TensorProto.FLOAT, [1], [value])
    graph = oh.make_graph([oh.make_node("Add", ["x", "c"], ["y"])], "g", [x], [y], initializer=[c])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), str(path))
    return path


SMALL_INPUTS = [{"name": "x", "dtype": "float32", "shape": (2, 4)}]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("peer-models")
    _export_encoder(root / "encoder.onnx")
    _export_convnet(root / "convnet.onnx")
    return {"encoder": root / "encoder.onnx", "convnet": root / "convnet.onnx"}


@pytest.fixture(scope="module")
def peer_runs(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    """Every peer on both models: ``(model, peer) -> (result, output path)``."""
    out = tmp_path_factory.mktemp("peer-outputs")
    runs = {}
    for model, meta in (("encoder", ENCODER_META), ("convnet", PeerInput())):
        for peer in PEERS:
            dst = out / f"{model}.{peer}.onnx"
            runs[model, peer] = (run_peer(peer, models[model], dst, meta, timeout_s=300), dst)
    return runs


# ------------------------------------------------------------------ the registry and the real peers


def test_registry_order_and_names() -> None:
    assert PEER_NAMES == ("ort", "ort-transformers-0", "ort-transformers-99", "onnxscript", "onnxslim", "onnxsim",
                          "onnxoptimizer")
    assert set(LIBRARY) == set(PEERS)


@pytest.mark.parametrize("model", ["encoder", "convnet"])
def test_every_peer_runs_and_its_output_verifies(model: str, models: dict[str, Path],
                                                 peer_runs: dict[tuple[str, str], Any]) -> None:
    inputs = ENCODER_INPUTS if model == "encoder" else CONV_INPUTS
    for peer in PEERS:
        result, dst = peer_runs[model, peer]
        assert isinstance(result, PeerResult) and result.peer == peer
        if not _installed(LIBRARY[peer]):
            assert result.status == "not-installed", result
            continue
        if model == "convnet" and peer in TRANSFORMER_ONLY:
            assert result.status == "not-applicable", result
            assert not dst.exists()
            continue
        assert (result.status, result.error) == ("ok", ""), result
        assert result.seconds >= 0
        check = check_output(models[model], dst, inputs)
        assert check.loads and check.verified, (peer, check)
        assert check.max_abs_diff < 1e-3
        view = ort_view(dst, 1)
        assert view.ops > 0 and view.ops == sum(view.op_histogram.values())


def test_ort_peer_is_the_file_unchanged(models: dict[str, Path], peer_runs: dict[tuple[str, str], Any]) -> None:
    for model in ("encoder", "convnet"):
        result, dst = peer_runs[model, "ort"]
        assert result.status == "ok"
        assert dst.read_bytes() == models[model].read_bytes()


def test_transformer_peers_fuse_the_encoder(peer_runs: dict[tuple[str, str], Any]) -> None:
    """The transformer rewriters do something on a torch encoder: onnxscript fuses its attention."""
    _result, dst = peer_runs["encoder", "onnxscript"]
    assert ort_view(dst, 1).fused_kernels.get("MultiHeadAttention", 0) >= 1
    # the peer's output is smaller than the TorchScript export for every rewriter but ORT alone
    original_ops = len(onnx.load(str(peer_runs["encoder", "ort"][1])).graph.node)
    for peer in ("ort-transformers-99", "onnxscript", "onnxslim", "onnxsim", "onnxoptimizer"):
        assert len(onnx.load(str(peer_runs["encoder", peer][1])).graph.node) < original_ops, peer


def test_unknown_peer_is_a_caller_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown peer 'nope'"):
        run_peer("nope", tmp_path / "a.onnx", tmp_path / "b.onnx", PeerInput())


# ------------------------------------------------------------------ peers that fail, isolated from the caller
# (module-level functions: the peer's process imports them from this module)


def peer_segfault(src: Path, dst: Path, meta: PeerInput) -> None:
    dst.write_bytes(b"half a model")
    os.kill(os.getpid(), signal.SIGSEGV)


def peer_exit(src: Path, dst: Path, meta: PeerInput) -> None:
    print("about to give up")
    os._exit(3)


def peer_raises(src: Path, dst: Path, meta: PeerInput) -> None:
    dst.write_bytes(b"half a model")
    raise RuntimeError("cannot rewrite this\nsecond line of the message")


def peer_hangs(src: Path, dst: Path, meta: PeerInput) -> None:
    time.sleep(120)


def peer_reports_failure(src: Path, dst: Path, meta: PeerInput) -> None:
    raise PeerFailed("the tool's own check failed")


def peer_missing_library(src: Path, dst: Path, meta: PeerInput) -> None:
    require_library("graphsub_no_such_peer_library")


def peer_writes_nothing(src: Path, dst: Path, meta: PeerInput) -> None:
    pass


FAILING = {f.__name__.removeprefix("peer_"): f for f in (peer_segfault, peer_exit, peer_raises, peer_hangs,
                                                          peer_reports_failure, peer_missing_library,
                                                          peer_writes_nothing)}


@pytest.mark.parametrize(("name", "status", "error"), [
    ("segfault", "failed", "crashed: SIGSEGV"),
    ("exit", "failed", "exited with code 3 without a result (last output: about to give up)"),
    ("raises", "failed", "RuntimeError: cannot rewrite this"),
    ("hangs", "failed", "timeout after 3 s"),
    ("reports_failure", "failed", "the tool's own check failed"),
    ("missing_library", "not-installed", "graphsub_no_such_peer_library is not installed"),
    ("writes_nothing", "failed", "the peer wrote no output file"),
])
def test_failing_peers_are_reported_not_raised(name: str, status: str, error: str, tmp_path: Path) -> None:
    src = _unary_model(tmp_path / "m.onnx", "Relu")
    dst = tmp_path / "out" / "m.peer.onnx"
    dst.parent.mkdir()
    dst.write_bytes(b"stale output of an earlier run")
    # 3 s for the peer that hangs; the others get the time a peer's process needs to start on a loaded machine (at
    # load 6 the missing library's process was stopped at 3 s before it could say what was missing)
    result = run_peer(name, src, dst, PeerInput(), timeout_s=3 if name == "hangs" else 60, registry=FAILING)
    assert (result.peer, result.status) == (name, status)
    assert result.error == error if name != "segfault" else result.error.startswith(error)
    assert "\n" not in result.error
    assert not dst.exists(), "no half or stale output after a failure"
    assert list(dst.parent.iterdir()) == [], "the peer's private folder is removed"
    if name == "hangs":
        assert 3 <= result.seconds < 60


def peer_two_files(src: Path, dst: Path, meta: PeerInput) -> None:
    (dst.parent / (dst.name + ".data")).write_bytes(b"weights")
    dst.write_bytes(src.read_bytes())
    (Path.cwd() / "scratch.txt").write_text("a file the tool leaves in its working folder")


def test_output_files_are_installed_together(tmp_path: Path) -> None:
    src = _unary_model(tmp_path / "m.onnx", "Relu")
    dst = tmp_path / "out" / "m.peer.onnx"
    result = run_peer("two_files", src, dst, PeerInput(), registry={"two_files": peer_two_files})
    assert result.status == "ok", result
    assert sorted(p.name for p in dst.parent.iterdir()) == ["m.peer.onnx", "m.peer.onnx.data"]
    assert dst.read_bytes() == src.read_bytes()


# ------------------------------------------------------------------ verification


def test_wrong_candidate_does_not_verify(tmp_path: Path) -> None:
    original = _add_const(tmp_path / "a.onnx", 1.0)
    check = check_output(original, _add_const(tmp_path / "b.onnx", 1.5), SMALL_INPUTS)
    assert check.loads and not check.verified
    assert check.max_abs_diff == pytest.approx(0.5)
    assert check.error.startswith("output 'y', seed 0: outside tolerance")
    same = check_output(original, _add_const(tmp_path / "c.onnx", 1.0), SMALL_INPUTS)
    assert same.loads and same.verified and same.max_abs_diff == 0.0 and same.error == ""


def test_unloadable_candidates(tmp_path: Path) -> None:
    original = _unary_model(tmp_path / "a.onnx", "Relu")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not a model")
    for bad in (garbage, _unary_model(tmp_path / "u.onnx", "NoSuchOp", domain="example.nowhere",
                                      opsets=(("", 17), ("example.nowhere", 1))), tmp_path / "missing.onnx"):
        check = check_output(original, bad, SMALL_INPUTS)
        assert (check.loads, check.verified) == (False, False), bad
        assert check.error and "\n" not in check.error
        assert check.checker_ok == (bad.name == "u.onnx")  # onnx.checker does not know the domain, nor reject it


def test_nan_in_the_original_is_inconclusive(tmp_path: Path) -> None:
    original = _unary_model(tmp_path / "log.onnx", "Log")  # log of standard-normal inputs: NaN for negatives
    check = check_output(original, original, SMALL_INPUTS)
    assert check.loads and not check.verified
    assert "inconclusive" in check.error


def test_checker_reported_beside_not_decisive(tmp_path: Path) -> None:
    """ORT's optimizer writes com.microsoft ops without the opset import: onnx.checker rejects, ORT runs it."""
    original = _unary_model(tmp_path / "gelu.onnx", "Gelu", domain="com.microsoft",
                            opsets=(("", 17), ("com.microsoft", 1)))
    candidate = _unary_model(tmp_path / "gelu-noimport.onnx", "Gelu", domain="com.microsoft")
    check = check_output(original, candidate, SMALL_INPUTS)
    assert check.loads and check.verified
    assert not check.checker_ok and "com.microsoft" in check.checker_error


def test_output_count_mismatch(tmp_path: Path) -> None:
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    outs = [oh.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4]) for n in ("y", "z")]
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"]), oh.make_node("Neg", ["x"], ["z"])], "g", [x], outs)
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), str(tmp_path / "two.onnx"))
    check = check_output(tmp_path / "two.onnx", _unary_model(tmp_path / "one.onnx", "Relu"), SMALL_INPUTS)
    assert check.loads and not check.verified and check.error == "1 outputs instead of 2"


def test_make_feeds() -> None:
    specs = [{"name": "ids", "dtype": "int64", "shape": (2, 5), "low": 3, "high": 7},
             {"name": "mask", "dtype": "bool", "shape": (2, 5)},
             {"name": "x", "dtype": "float32", "shape": (4,)}]
    a, b = make_feeds(specs, 0), make_feeds(specs, 0)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["ids"].dtype == np.int64 and a["ids"].min() >= 3 and a["ids"].max() < 7
    assert a["mask"].dtype == np.bool_ and a["x"].dtype == np.float32
    assert not np.array_equal(a["x"], make_feeds(specs, 1)["x"])
    with pytest.raises(ValueError, match="needs 'high'"):
        make_feeds([{"name": "ids", "dtype": "int32", "shape": (1,)}], 0)


# ------------------------------------------------------------------ what ORT runs


def test_ort_view_counts_fusions(models: dict[str, Path]) -> None:
    """The conv net's erf-spelled GELU becomes com.microsoft Gelu; its convolutions run in the NCHWc layout."""
    view = ort_view(models["convnet"], 1)
    assert isinstance(view, OrtView)
    assert view.fused_kernels["Gelu"] == 1
    assert view.fused_kernels["com.microsoft.nchwc:Conv"] == 2
    assert view.op_histogram["com.microsoft:Gelu"] == 1
    assert "Erf" not in view.op_histogram and "BatchNormalization" not in view.op_histogram
    encoder = ort_view(models["encoder"], 2)
    assert encoder.fused_kernels.get("SkipLayerNormalization", 0) >= 1


def test_summarize_ops_keys() -> None:
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [oh.make_node("FusedConv", ["x"], ["a"], domain="com.microsoft"),
             oh.make_node("LayerNormalization", ["a"], ["b"]),
             oh.make_node("ReorderInput", ["b"], ["c"], domain="com.microsoft.nchwc"),
             oh.make_node("Conv", ["c"], ["d"], domain="com.microsoft.nchwc"),
             oh.make_node("Relu", ["d"], ["y"])]
    view = summarize_ops(oh.make_model(oh.make_graph(nodes, "g", [x], [y])))
    assert view.ops == 5
    assert view.op_histogram == {"LayerNormalization": 1, "Relu": 1, "com.microsoft.nchwc:Conv": 1,
                                 "com.microsoft.nchwc:ReorderInput": 1, "com.microsoft:FusedConv": 1}
    assert view.fused_kernels == {"FusedConv": 1, "LayerNormalization": 1, "ReorderInput": 1,
                                  "com.microsoft.nchwc:Conv": 1}
    assert {"Attention", "SkipLayerNormalization", "FusedConv", "ReorderOutput"} <= set(FUSED_KERNELS)


def test_an_interrupt_stops_running_peers(tmp_path: Path) -> None:
    """Peers run in their own sessions (the terminal's Ctrl-C does not reach them); an interrupted portfolio stops
    them with ``kill_running``: the thread waiting on a hung peer returns at once, its folder removed."""
    import threading

    from graphsub.optimize import peers

    src = _unary_model(tmp_path / "m.onnx", "Relu")
    out: list[object] = []
    t0 = time.perf_counter()
    worker = threading.Thread(target=lambda: out.append(run_peer("hangs", src, tmp_path / "o.onnx", PeerInput(),
                                                                 timeout_s=60, registry=FAILING)))
    worker.start()
    while not peers._LIVE and time.perf_counter() - t0 < 30:
        time.sleep(0.05)
    peers.kill_running()
    worker.join(30)
    assert not worker.is_alive() and time.perf_counter() - t0 < 30 and not peers._LIVE
    (res,) = out
    assert res.status == "failed" and "SIGKILL" in res.error  # type: ignore[attr-defined]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
