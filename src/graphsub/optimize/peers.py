"""The peers of ``graphsub bench suite``: the ONNX graph rewriters users would otherwise run, each run as its users
run it, and the two checks every output goes through (does it load, does it compute the same) plus the view of what
ONNX Runtime itself made of it.

* :data:`PEERS` -- ordered registry ``name -> peer``; a peer is a function ``(src, dst, meta) -> None`` that writes
  the tool's output model for ``src`` to ``dst`` with the tool's defaults (its README's Python usage). A peer signals
  "not for this model" with :class:`PeerNotApplicable`, a missing library with :class:`PeerNotInstalled`, and a
  failure the tool itself reports (onnxsim's check flag) with :class:`PeerFailed`.
* :func:`run_peer` runs one peer in a fresh interpreter (peers segfault, hang, or leave threads behind) and
  returns a :class:`PeerResult`; it never raises for a peer's failure. Invariant: afterwards ``dst`` is the peer's
  complete output when the status is ``ok`` and does not exist otherwise (the peer writes into a private folder next
  to ``dst``; the files are renamed into place only after the peer returned).
* :func:`check_feeds` -- the candidate loads in onnxruntime and computes what the original computes: the one
  verifier, :func:`graphsub.equivalence.check` against a :class:`graphsub.equivalence.Reference` (re-exported here
  under their older names, :class:`OutputCheck` being :class:`graphsub.equivalence.Check`). :func:`checker_verdict`
  is ``onnx.checker``'s verdict, reported beside it, never a reason to fail (ORT's optimizer output omits the
  com.microsoft opset import and so fails the checker while loading fine).
* :func:`ort_view` -- the graph ONNX Runtime actually runs under ORT_ENABLE_ALL (``optimized_model_filepath``): op
  count, histogram and the fused kernels (:data:`FUSED_KERNELS` and every op of ORT's own domains).

No peer gets ``PeerInput.input_shapes``: the tools are run as their READMEs show, without shapes (the field is there
for a peer that needs static shapes; none of the current ones does).

>>> sorted(PEERS) == sorted(PEER_NAMES) and PEER_NAMES[0] == "ort"
True
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from graphsub.equivalence import Check, Reference, Tolerance, check
from graphsub.errors import ExecutionError
from graphsub.frontends.ort import optimized_model

#: the result of :func:`check_feeds`: :class:`graphsub.equivalence.Check` (its older name)
OutputCheck = Check

PeerStatus = Literal["ok", "failed", "not-installed", "not-applicable"]

#: ORT's fused / layout kernels counted by op type (whatever their domain); every other op of ORT's own domains
#: (:data:`ORT_DOMAINS`) is counted too, as ``domain:op_type``. ORT's MatMulScaleFusion emits FusedMatMul (alpha).
FUSED_KERNELS: tuple[str, ...] = (
    "Attention", "MultiHeadAttention", "GroupQueryAttention", "EmbedLayerNormalization",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization", "SimplifiedLayerNormalization",
    "FusedConv", "FusedGemm", "FusedMatMul", "Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasSoftmax",
    "ReorderInput", "ReorderOutput",
)
ORT_DOMAINS: tuple[str, ...] = ("com.microsoft", "com.microsoft.nchwc")

#: above this many bytes of weights a peer's output is saved with external data (protobuf's 2 GiB limit)
EXTERNAL_DATA_BYTES = 1_800_000_000


class PeerNotApplicable(Exception):
    """The peer does not apply to this model (e.g. a transformer optimizer on a CNN)."""


class PeerNotInstalled(Exception):
    """The peer's library cannot be imported."""


class PeerFailed(Exception):
    """The peer itself reported a failure (e.g. onnxsim's check flag is False)."""


@dataclass(frozen=True)
class PeerInput:
    """What a peer may need besides the file: ``transformer`` = ``{"model_type", "num_heads", "hidden_size"}`` for
    transformer models (the ORT transformers optimizer's arguments), else None; ``input_shapes`` = static input
    shapes by input name (given to a peer only if its users pass them); ``provider``: where the model will run
    (``cuda``: the ORT transformers optimizer is told ``use_gpu``, as its GPU users do)."""

    transformer: dict[str, Any] | None = None
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    provider: str = "cpu"


@dataclass(frozen=True)
class PeerResult:
    """``status``: ok | failed | not-installed | not-applicable; ``error``: one line saying why (empty when ok);
    ``seconds``: the peer's own run time, importing its library included (the whole child process, interpreter
    start included, when it crashed or timed out)."""

    peer: str
    status: PeerStatus
    error: str
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)  # what the tool returned (JSON-able), e.g. graphsub's decision

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OrtView:
    """The graph ONNX Runtime runs: ``ops`` nodes (subgraphs included), ``op_histogram`` keyed ``op_type`` for the
    ONNX domain and ``domain:op_type`` otherwise, ``fused_kernels`` the counts of :data:`FUSED_KERNELS` and of ORT's
    own domains' ops (only those present); ``signature`` its fingerprint (:mod:`graphsub.frontends.ort_signature`:
    equal for graphs ORT runs with the same kernels on the same shapes)."""

    ops: int
    op_histogram: dict[str, int]
    fused_kernels: dict[str, int]
    signature: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PeerFn = Callable[[Path, Path, PeerInput], "dict[str, Any] | None"]


# --------------------------------------------------------------------------- the peers, as their users run them


def require_library(module: str) -> Any:
    """Import a peer's library; a missing one is :class:`PeerNotInstalled` (other ImportErrors are failures)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise PeerNotInstalled(f"{module} is not installed") from e
        raise


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(len(t.raw_data) or t.ByteSize() for t in model.graph.initializer)


def _save(model: onnx.ModelProto, dst: Path) -> None:
    """``onnx.save``, with the weights in ``<dst>.data`` only when the model is too large for one protobuf."""
    if _weight_bytes(model) > EXTERNAL_DATA_BYTES:
        onnx.save(model, str(dst), save_as_external_data=True, location=dst.name + ".data")
    else:
        onnx.save(model, str(dst))


def _has_external_data(src: Path) -> bool:
    return _uses_external_data(onnx.load(str(src), load_external_data=False))


def _uses_external_data(model: onnx.ModelProto) -> bool:
    return any(onnx.external_data_helper.uses_external_data(t) for t in model.graph.initializer)


def _is_large(src: Path) -> bool:
    """Weights in external data or too many for one protobuf: the output gets external data too."""
    model = onnx.load(str(src), load_external_data=False)
    return _uses_external_data(model) or _weight_bytes(model) > EXTERNAL_DATA_BYTES


def peer_ort(src: Path, dst: Path, meta: PeerInput) -> None:
    """ONNX Runtime alone: users load the file as it is; ORT_ENABLE_ALL happens at session creation."""
    if _has_external_data(src):
        _save(onnx.load(str(src)), dst)
    else:
        shutil.copyfile(src, dst)


def _ort_transformers(src: Path, dst: Path, meta: PeerInput, opt_level: int) -> None:
    """``optimizer.optimize_model(path, model_type, num_heads, hidden_size, opt_level)`` then
    ``save_model_to_file`` (the CLI ``python -m onnxruntime.transformers.optimizer`` does the same)."""
    if meta.transformer is None:
        raise PeerNotApplicable("not a transformer model (no model_type/num_heads/hidden_size)")
    optimizer = require_library("onnxruntime.transformers.optimizer")
    t = meta.transformer
    model = optimizer.optimize_model(str(src), model_type=t["model_type"], num_heads=int(t["num_heads"]),
                                     hidden_size=int(t["hidden_size"]), opt_level=opt_level,
                                     use_gpu=meta.provider == "cuda")
    model.save_model_to_file(str(dst), use_external_data_format=_weight_bytes(model.model) > EXTERNAL_DATA_BYTES)


def peer_ort_transformers_0(src: Path, dst: Path, meta: PeerInput) -> None:
    """The ORT transformers optimizer's Python fusions only (opt_level 0)."""
    _ort_transformers(src, dst, meta, 0)


def peer_ort_transformers_99(src: Path, dst: Path, meta: PeerInput) -> None:
    """ORT_ENABLE_ALL offline (CPU), then the Python fusions (opt_level 99)."""
    _ort_transformers(src, dst, meta, 99)


def peer_onnxscript(src: Path, dst: Path, meta: PeerInput) -> None:
    """``onnx_ir.load`` -> ``onnxscript.rewriter.ort_fusions.optimize_for_ort`` -> ``onnx_ir.save``
    (``optimize_for_ort`` runs ``onnxscript.optimizer.optimize`` itself before and after its fusions; 0.7.2 returns
    ``(model, fusion counts)``)."""
    ir = require_library("onnx_ir")
    fusions = require_library("onnxscript.rewriter.ort_fusions")
    model = ir.load(str(src))
    model, _counts = fusions.optimize_for_ort(model)
    ir.save(model, str(dst), external_data=dst.name + ".data" if _is_large(src) else None)


def peer_onnxslim(src: Path, dst: Path, meta: PeerInput) -> None:
    """``onnxslim.slim(input, output)``: the default pipeline of ``onnxslim in.onnx out.onnx``. It serializes the
    model as one protobuf too (on the 4.4 GB decoder: "EncodeError: Failed to serialize proto", after 12 GB and
    minutes), so it does not apply above 2 GB."""
    _fits_one_protobuf("onnxslim", src)
    onnxslim = require_library("onnxslim")
    onnxslim.slim(str(src), str(dst))


#: what one protobuf holds: a peer that hands the whole model to C++ as one serialized message cannot take more
PROTOBUF_LIMIT_BYTES = 2**31 - 1


def _fits_one_protobuf(peer: str, src: Path) -> None:
    """Raise PeerNotApplicable when ``src``'s files hold more than :data:`PROTOBUF_LIMIT_BYTES` (for ``peer``, whose
    rewrite takes the model as one protobuf)."""
    from graphsub.frontends.shared import file_bytes

    size = file_bytes(src)
    if size > PROTOBUF_LIMIT_BYTES:
        raise PeerNotApplicable(f"{peer} takes the model as one protobuf, which holds at most 2 GB ({size / 1e9:.1f} "
                                "GB here)")


def peer_onnxsim(src: Path, dst: Path, meta: PeerInput) -> None:
    """``model, check = onnxsim.simplify(model)`` with its defaults; ``check`` False is a failure (its README asserts
    it), so nothing is saved then."""
    _fits_one_protobuf("onnxsim", src)
    onnxsim = require_library("onnxsim")
    model, check = onnxsim.simplify(str(src))
    if not check:
        raise PeerFailed("onnxsim: its own check of the simplified model failed (check=False)")
    _save(model, dst)


def peer_onnxoptimizer(src: Path, dst: Path, meta: PeerInput) -> None:
    """``onnxoptimizer.optimize(model)`` with its default (fuse and elimination) passes."""
    _fits_one_protobuf("onnxoptimizer", src)
    onnxoptimizer = require_library("onnxoptimizer")
    _save(onnxoptimizer.optimize(onnx.load(str(src))), dst)


#: the peers in report order; ``ort`` (the original file under ORT_ENABLE_ALL) is the baseline of every speedup
PEERS: dict[str, PeerFn] = {
    "ort": peer_ort,
    "ort-transformers-0": peer_ort_transformers_0,
    "ort-transformers-99": peer_ort_transformers_99,
    "onnxscript": peer_onnxscript,
    "onnxslim": peer_onnxslim,
    "onnxsim": peer_onnxsim,
    "onnxoptimizer": peer_onnxoptimizer,
}
PEER_NAMES: tuple[str, ...] = tuple(PEERS)


# --------------------------------------------------------------------------- running a peer in its own process


def _one_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _describe(e: BaseException) -> str:
    msg = _one_line(str(e))
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _child_main(payload: str, result: str) -> None:
    """Body of the peer's process: runs the pickled ``(peer, src, out, meta)`` of ``payload`` and writes
    ``(status, error, seconds, info)`` as JSON to ``result`` (``info``: the dict the peer returned, if any)."""
    with open(payload, "rb") as f:
        fn, src, out, meta = pickle.load(f)
    status, error, info = "ok", "", None
    t0 = time.perf_counter()
    try:
        info = fn(Path(src), Path(out), meta)
        if not Path(out).is_file():
            status, error = "failed", "the peer wrote no output file"
    except PeerNotApplicable as e:
        status, error = "not-applicable", _one_line(str(e))
    except PeerNotInstalled as e:
        status, error = "not-installed", _one_line(str(e))
    except PeerFailed as e:
        status, error = "failed", _one_line(str(e))
    except BaseException as e:  # a peer's bug of any kind is its failure, reported, never raised
        status, error = "failed", _describe(e)
    seconds = time.perf_counter() - t0
    Path(result).write_text(json.dumps([status, error, seconds, info if isinstance(info, dict) else {}], default=str))


def _log_tail(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return _one_line(lines[-1], 200) if lines else ""


def _exit_reason(code: int | None, log: Path) -> str:
    if code is not None and code < 0:
        try:
            what = f"crashed: {signal.Signals(-code).name}"
        except ValueError:
            what = f"crashed: signal {-code}"
    else:
        what = f"exited with code {code} without a result"
    tail = _log_tail(log)
    return f"{what} (last output: {tail})" if tail else what


def _install(out: Path, dst: Path) -> None:
    """Rename the peer's files (the model and any external data beside it) from ``out`` next to ``dst``; the model
    file itself last."""
    for p in sorted(out.iterdir()):
        if p.name != dst.name and p.is_file():
            os.replace(p, dst.parent / p.name)
    os.replace(out / dst.name, dst)


def run_peer(
    name: str,
    src: Path,
    dst: Path,
    meta: PeerInput,
    *,
    timeout_s: float = 600,
    registry: Mapping[str, PeerFn] | None = None,
    stop: Callable[[], bool] | None = None,
) -> PeerResult:
    """Run peer ``name`` (from ``registry``, default :data:`PEERS`) on ``src`` in a fresh process, writing ``dst``.

    Never raises for the peer's failure: an exception, a crash (signal or exit), a timeout (the process is killed)
    or a failure the tool reports give ``failed`` with a one-line ``error``; ``dst`` exists afterwards only when the
    status is ``ok``. ``stop`` (polled a few times a second, e.g. :func:`graphsub.interrupt.stop_requested`) ends the
    peer early like a timeout. Raises ValueError for an unknown name."""
    peers = PEERS if registry is None else registry
    if name not in peers:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(peers)}")
    src, dst = Path(src).resolve(), Path(dst).resolve()
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    (tmp / "out").mkdir()
    (tmp / "cwd").mkdir()  # files a peer drops in its working folder are not its output
    t0 = time.perf_counter()
    try:
        message, timed_out, exitcode = _spawn(peers[name], src, tmp / "out" / dst.name, meta, tmp, timeout_s, stop)
        wall = time.perf_counter() - t0
        if message is None:
            if timed_out == "stopped":
                error = "stopped (interrupted)"
            else:
                error = f"timeout after {timeout_s:.3g} s" if timed_out else _exit_reason(exitcode, tmp / "peer.log")
            return PeerResult(name, "failed", error, wall)
        status, error, seconds, info = message
        if status == "ok":
            _install(tmp / "out", dst)
        return PeerResult(name, status, error, float(seconds), info)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: peer processes running now (in any thread), so that an interrupted portfolio can stop them all
_LIVE: set[subprocess.Popen[bytes]] = set()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group of the peer we started, nothing else
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def kill_running() -> None:
    """Stop every peer process still running (an interrupt: the threads waiting on them then return at once)."""
    for proc in list(_LIVE):
        _kill(proc)


def _spawn(fn: PeerFn, src: Path, out: Path, meta: PeerInput, tmp: Path, timeout_s: float,
           stop: Callable[[], bool] | None = None) -> tuple[list[Any] | None, bool | str, int | None]:
    """Run :func:`_child_main` in a fresh interpreter with this process's ``sys.path``, in its own process group
    (killed whole on timeout, or when ``stop()`` says so), working folder ``tmp/cwd``, output to ``tmp/peer.log``:
    (its result or None, whether it was killed for time -- ``"stopped"`` when for ``stop`` --, exit code)."""
    payload, result = tmp / "peer.payload", tmp / "peer.result"
    payload.write_bytes(pickle.dumps((fn, str(src), str(out), meta)))
    code = f"from graphsub.optimize.peers import _child_main; _child_main({str(payload)!r}, {str(result)!r})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    timed_out: bool | str = False
    with open(tmp / "peer.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=env, cwd=tmp / "cwd", start_new_session=True)
        _LIVE.add(proc)
        end = time.perf_counter() + timeout_s
        try:
            while True:
                try:
                    proc.wait(max(0.0, min(0.2, end - time.perf_counter())) if stop is not None else timeout_s)
                    break
                except subprocess.TimeoutExpired:
                    if stop is not None and stop():
                        timed_out = "stopped"
                        break
                    if stop is None or time.perf_counter() >= end:
                        timed_out = True
                        break
        finally:  # also on Ctrl-C: the peer's session does not see the terminal's SIGINT
            _kill(proc)
            _LIVE.discard(proc)
    message = json.loads(result.read_text()) if result.is_file() else None
    return message, timed_out, proc.returncode


# --------------------------------------------------------------------------- verification of an output


def checker_verdict(path: Path) -> tuple[bool, str]:
    try:
        onnx.checker.check_model(str(path))
    except Exception as e:  # onnx raises ValidationError and others
        return False, _describe(e)
    return True, ""


def check_feeds(
    original: Path | bytes,
    candidate: Path | bytes,
    feeds: Sequence[tuple[int, Mapping[str, np.ndarray]]],
    *,
    rtol: float = 1e-3,
    atol: float = 1e-4,
    checker: tuple[bool, str] = (True, ""),
    reference: Reference | None = None,
) -> OutputCheck:
    """:func:`graphsub.equivalence.check` of ``candidate`` against ``reference`` (default: a new
    :class:`~graphsub.equivalence.Reference` of ``original``) on the ``(seed, feeds)`` draws with
    ``Tolerance(rtol, atol)``: kept for the callers of this older name. Never raises for a bad candidate."""
    ref = reference if reference is not None else Reference(original)
    return check(ref, candidate, feeds, Tolerance(rtol, atol), checker=checker)


# --------------------------------------------------------------------------- what ONNX Runtime runs


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    from graphsub.frontends.shared import graphs_in

    for g in graphs_in(graph):
        yield from g.node


def summarize_ops(model: onnx.ModelProto) -> OrtView:
    """Op count, histogram and fused kernels of ``model`` (what :func:`ort_view` reports for ORT's graph)."""
    hist: Counter[str] = Counter()
    fused: Counter[str] = Counter()
    for node in _nodes(model.graph):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        key = f"{domain}:{node.op_type}" if domain else node.op_type
        hist[key] += 1
        if node.op_type in FUSED_KERNELS:
            fused[node.op_type] += 1
        elif domain in ORT_DOMAINS:
            fused[key] += 1
    from graphsub.frontends.ort_signature import signature

    return OrtView(sum(hist.values()), dict(sorted(hist.items())), dict(sorted(fused.items())), signature(model))


def ort_view(path: Path, threads: int) -> OrtView:
    """The graph ONNX Runtime runs for ``path`` under ORT_ENABLE_ALL with ``threads`` intra-op threads (CPU)
    (:func:`graphsub.frontends.ort.optimized_model`). Raises ExecutionError when onnxruntime rejects the model."""
    try:
        return summarize_ops(optimized_model(str(path), threads=threads))
    except ExecutionError as e:
        raise ExecutionError(f"{path}: {e}") from e


__all__ = [
    "EXTERNAL_DATA_BYTES",
    "FUSED_KERNELS",
    "ORT_DOMAINS",
    "PEERS",
    "PEER_NAMES",
    "PROTOBUF_LIMIT_BYTES",
    "OrtView",
    "OutputCheck",
    "PeerFailed",
    "PeerFn",
    "PeerInput",
    "PeerNotApplicable",
    "PeerNotInstalled",
    "PeerResult",
    "PeerStatus",
    "Reference",
    "check_feeds",
    "checker_verdict",
    "kill_running",
    "ort_view",
    "require_library",
    "run_peer",
    "summarize_ops",
]
