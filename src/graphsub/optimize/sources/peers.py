"""The ``peers`` source: ``PEER``, the original passed through each peer
(:data:`graphsub.optimize.portfolio.PEER_MODULES` lists those a portfolio may use: ``onnxscript``'s
``optimize_for_ort``, ``onnxslim``, ``onnxsim``, ``onnxoptimizer``), in one step: every peer in a fresh process of
its own, as many at once as the machine has cores (:func:`graphsub.optimize.peers.run_peer`; a peer that fails or
hangs is only a missing candidate, with a note). Each output graphsub can import becomes a graph candidate, which
the derived sources build on (``PEER+search``, ``PEER+spelling``, ``PEER+layout``).

Estimate: :data:`~graphsub.optimize.budget.PEERS_EST_S` for them all; their timeout is the time left before the
tail and the searches on top of them, at least :data:`~graphsub.optimize.budget.PEERS_MIN_S`; a stop request (the
first Ctrl-C) stops them. Turn 50; drop rank :data:`~graphsub.optimize.budget.DROP_PEERS` (the last the planner
leaves out).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graphsub.errors import GraphsubError
from graphsub.optimize.budget import DROP_PEERS, PEERS_EST_S, PEERS_MIN_S
from graphsub.optimize.candidates import ORIGINAL, Candidate
from graphsub.optimize.sources.base import Context, Source, register


def make(ctx: Context, seconds: float) -> None:
    """Run every peer on the original, each stopped after ``seconds``; add their outputs."""
    ref = ctx.ref
    shapes = {ref.nodes[n].sig.attr["name"]: ref.nodes[n].sig.out_types[0].shape for n in ref.inputs}
    with tempfile.TemporaryDirectory(prefix=".graphsub-peers-") as tmp:
        src = Path(tmp) / "original.onnx"
        if isinstance(ctx.source, bytes):
            src.write_bytes(ctx.source)
        else:
            src = Path(ctx.source)
        results = run_peers(ctx.sources.peers, src, Path(tmp), shapes, time.perf_counter() + seconds)
        for peer in ctx.sources.peers:
            ctx.note(peer)
            _add(ctx, peer, results[peer], Path(tmp), shapes)


#: what a peer's process may hold at its peak, in multiples of the model's weights (onnxoptimizer on the 1 B decoder's
#: 4.4 GB held 16 GB when the kernel killed it for want of memory, two peers running at once; 2026-11-29)
PEER_MEMORY_FACTOR = 4.0


def _workers(peers: int, cores: int, src: Path) -> int:
    """How many peers run at once: one per core, fewer when that many copies of the model (each peer's process holds
    :data:`PEER_MEMORY_FACTOR` times its weights) would not fit the memory available now."""
    from graphsub.data import available_memory
    from graphsub.frontends.shared import file_bytes

    each = PEER_MEMORY_FACTOR * file_bytes(src)
    fit = int(available_memory() // each) if each > 0 else peers
    return max(1, min(peers, cores, fit))


def run_peers(peers: Sequence[str], src: Path, tmp: Path, shapes: Mapping[str, tuple[int, ...]],
              end: float) -> dict[str, Any]:
    """Every peer on ``src``, as many at once as the machine has cores and memory (:func:`_workers`; each in a process
    of its own: rewriting a model is no timing, and on big models the peers are most of the portfolio's time); their
    PeerResults. A peer
    is stopped at ``end`` (a ``time.perf_counter()`` reading) or on a stop request, and one whose turn comes later
    is not started."""
    from concurrent.futures import ThreadPoolExecutor

    from graphsub.cost.env import all_cores
    from graphsub.interrupt import stop_requested
    from graphsub.optimize.peers import PeerInput, PeerResult, kill_running, run_peer

    meta = PeerInput(transformer=None, input_shapes=dict(shapes))

    def one(peer: str) -> Any:
        left = end - time.perf_counter()
        if stop_requested() or left < 1.0:
            why = "interrupted" if stop_requested() else "no time left in the budget"
            return PeerResult(peer, "failed", f"not run: {why}", 0.0)
        return run_peer(peer, src, tmp / f"{peer}.onnx", meta, timeout_s=left, stop=stop_requested)

    with ThreadPoolExecutor(max_workers=_workers(len(peers), all_cores(), src)) as pool:
        futures = {peer: pool.submit(one, peer) for peer in peers}
        try:
            return {peer: f.result() for peer, f in futures.items()}
        except BaseException:  # Ctrl-C: stop the peers now rather than wait for them
            pool.shutdown(wait=False, cancel_futures=True)
            kill_running()
            raise


def _add(ctx: Context, peer: str, res: Any, tmp: Path, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Add ``peer``'s output (its PeerResult ``res``), with its graph when graphsub can import it."""
    dst = tmp / f"{peer}.onnx"
    if res.status != "ok":
        ctx.portfolio.notes.append(f"{peer}: {res.status}: {res.error}")
        return
    data = dst.read_bytes()
    if any(p.name != dst.name for p in tmp.iterdir() if p.name.startswith(dst.stem + ".")):
        from graphsub.frontends.onnx_io import read_model

        try:  # weights beside it (a large model): memory maps, held by reference (graphsub.frontends.shared)
            data = read_model(dst).SerializeToString()
        except GraphsubError as e:
            ctx.portfolio.notes.append(f"{peer}: its output's external data cannot be read ({e}); not a candidate")
            return
    cand = ctx.add("peers", Candidate(peer, data, base=ORIGINAL, seconds=res.seconds))
    if cand.same_as:
        return
    try:
        from graphsub.frontends.onnx_io import load

        cand.graph = load(dst, input_shapes=shapes)
    except (GraphsubError, ValueError) as e:
        ctx.portfolio.notes.append(f"{peer}: graphsub cannot import its output ({e}); no search on top")


PEERS = register(Source("peers", make, turns=(50,), estimate_s=lambda ctx: PEERS_EST_S,
                        applies=lambda ctx: bool(ctx.sources.peers), limit_s=lambda ctx: ctx.sources.peer_timeout_s,
                        min_s=PEERS_MIN_S, drop=DROP_PEERS))

__all__ = ["PEERS", "PEER_MEMORY_FACTOR", "make", "run_peers"]
