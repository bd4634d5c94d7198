"""Verification step of :func:`graphsub.optimize.optimize`: finalize a searched graph, check it against the
input on several random draws with the one verifier (:func:`graphsub.equivalence.check`, through
:func:`verify_graph`), and bisect a failing substitution sequence to the first step that breaks
equivalence (the sequence is replayed from the input graph by rule name and node ids, see
:mod:`graphsub.rules.replay`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from graphsub.equivalence import Check
from graphsub.errors import GraphsubError, ReferenceFailed
from graphsub.ir.graph import Graph
from graphsub.optimize.result import Failure
from graphsub.rules.replay import replay
from graphsub.rules.rule import Rule
from graphsub.search.base import Step


def finalize(reference: Graph, candidate: Graph, seed: int) -> Graph:
    """``candidate`` with data for every weight (the reference's where shared) and weight-only
    subgraphs folded into constants: what gets exported."""
    from graphsub.data import random_weights
    from graphsub.rules.apply import fold_weights

    weights = random_weights(candidate, seed, known=dict(reference.params))
    return fold_weights(candidate.with_params({k: v for k, v in weights.items() if k in candidate.leaves}))


def check_reference(source: bytes | str, reference: Graph, seed: int, *, threads: int | None = None) -> None:
    """Run the input model (``source``: its serialized bytes or its path; ``reference``: its graph, for the random
    inputs) once, as the reference runner runs it (:class:`graphsub.equivalence.Reference`); ReferenceFailed (bad
    input) when onnxruntime rejects it or it fails. What an optimize call in which the input never ran does before it
    writes the original back: a model onnxruntime cannot run is refused in every command, not passed through."""
    from graphsub.data import random_inputs
    from graphsub.equivalence import Reference

    Reference(source, threads=threads).outputs(seed, random_inputs(reference, seed))


def check(reference: Graph, candidate: Graph, seeds: Sequence[int], *, rtol: float = 1e-4,
          atol: float = 1e-5, threads: int | None = None) -> tuple[bool, float, str]:
    """Compare ``candidate`` with ``reference`` (both with weight data) on random inputs for every
    seed: ``(equivalent, max abs diff, worst output)``.  A candidate with a different interface, or
    one that cannot be exported or run, fails (the third item then says why).  Raises ReferenceFailed when the
    reference itself cannot run on the random inputs."""
    ok, diff, worst, _ = check_seeds(reference, candidate, seeds, rtol=rtol, atol=atol, threads=threads)
    return ok, diff, worst


#: the exception class a :class:`graphsub.equivalence.Check` failure stands for, as :func:`check_seeds` names it
_FAILURE_CLASS = {"interface": "VerificationError", "export": "ExportError", "load": "ExecutionError",
                  "run": "ExecutionError"}


def verify_graph(reference: Graph, candidate: Graph, seeds: Sequence[int], *, rtol: float = 1e-4,
                 atol: float = 1e-5, threads: int | None = None, stop: Callable[[], bool] | None = None,
                 optimization: str = "all") -> Check:
    """The one verifier (:func:`graphsub.equivalence.check`) on Graphs: ``candidate`` against
    ``Reference(reference)`` on the random draws ``seeds`` (weights missing from either drawn with the first seed),
    both sessions at ``threads``, the candidate as users run it (``optimization``), with ``Tolerance(rtol, atol)``;
    a training graph that fails by float32 rounding alone is re-checked in float64 (``Check.float64`` says so).
    ``stop()`` ends it after the first seed. Raises ReferenceFailed when the reference cannot run, ShapeError when
    the two cannot fit in memory."""
    from graphsub.equivalence import Reference, Tolerance, check_memory
    from graphsub.equivalence import check as check_model

    check_memory(reference, candidate)
    ref = Reference(reference, seed=seeds[0] if seeds else 0, known=candidate.params, threads=threads)
    chk = check_model(ref, candidate, seeds, Tolerance(rtol, atol), threads=threads, stop=stop,
                      optimization=optimization)
    if chk.failure == "reference":
        raise ReferenceFailed(chk.error)  # not the candidate's fault: no substitution is to blame
    return chk


def check_seeds(reference: Graph, candidate: Graph, seeds: Sequence[int], *, rtol: float = 1e-4,
                atol: float = 1e-5, threads: int | None = None,
                stop: Callable[[], bool] | None = None,
                optimization: str = "all") -> tuple[bool, float, str, tuple[int, ...]]:
    """:func:`check`, and the seeds it compared on: all of them, unless ``stop()`` says so after one (the first
    seed is always compared; a budget that ran out leaves the others). :func:`verify_graph` as a tuple."""
    chk = verify_graph(reference, candidate, seeds, rtol=rtol, atol=atol, threads=threads, stop=stop,
                       optimization=optimization)
    if chk.failure in _FAILURE_CLASS:
        return False, float("inf"), f"<{_FAILURE_CLASS[chk.failure]}: {chk.error}>", chk.seeds
    return chk.verified, chk.max_abs_diff, chk.worst_output, chk.seeds


def bisect(graph: Graph, reference: Graph, rules: Sequence[Rule], steps: Sequence[Step], seeds: Sequence[int],
           seed: int, stop: Callable[[], bool] | None = None, **tol: Any) -> Failure:
    """The first step of ``steps`` after which ``graph`` (replayed) no longer matches ``reference``.

    Assumes that the whole sequence fails and the empty one passes; O(log n) verifications. When ``stop()`` says so
    between two of them, the Failure names the range the first bad step is in (``step`` 0).
    """
    lo, hi = 0, len(steps)
    diff, output = float("nan"), ""
    while hi - lo > 1:
        if stop is not None and stop():
            return Failure(0, "", (), output, diff, f"the budget ran out while bisecting: the first substitution "
                           f"that breaks equivalence is one of {lo + 1}..{hi} of {len(steps)}")
        mid = (lo + hi) // 2
        try:
            ok, d, o = check(reference, finalize(reference, replay(graph, rules, steps[:mid]), seed), seeds, **tol)
        except GraphsubError as e:
            s = steps[mid - 1]
            return Failure(mid, s.rule, s.nodes, "", float("nan"), f"replaying the sequence failed: {e}")
        if ok:
            lo = mid
        else:
            hi, diff, output = mid, d, o
    s = steps[hi - 1]
    if output == "":  # the full sequence: re-check it for the output name
        with contextlib.suppress(GraphsubError):
            _, diff, output = check(reference, finalize(reference, replay(graph, rules, steps[:hi]), seed), seeds,
                                    **tol)
    return Failure(hi, s.rule, s.nodes, output, diff,
                   f"substitution {hi}/{len(steps)} ({s.rule} at nodes {list(s.nodes)}) breaks output "
                   f"{output!r} (max abs diff {diff:.3g})")


__all__ = ["Failure", "bisect", "check", "check_reference", "check_seeds", "finalize", "replay", "verify_graph"]
