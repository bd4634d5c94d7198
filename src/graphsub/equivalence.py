"""Numeric equivalence of two graphs in onnxruntime.

:func:`equivalent` feeds both graphs the same random inputs (and, for weights without data,
the same random weights -- seeded by name, see :mod:`graphsub.data`) and compares every output
element with ``|a - b| <= atol + rtol * max(|b|, rms(b))``: the usual allclose test, except that
an element is never held to a tighter bound than ``rtol`` times the output's RMS.  Rounding
errors of an element computed from sums of O(rms) terms are O(eps * rms) whatever the element's
own magnitude, so plain allclose fails correct rewrites of deep networks on elements that
happen to be near zero; a wrong rewrite still changes elements by O(rms) and fails.

A reference output containing NaN or inf makes the check vacuous, so it counts as a failure
("inconclusive"), never as a pass.  The report names the worst output.

>>> from graphsub.ir import Builder
>>> def g(swap):
...     b = Builder(); x = b.input("x", (4, 4)); y = b.input("y", (4, 4))
...     return b.build(b.add(y, x) if swap else b.add(x, y))
>>> equivalent(g(False), g(True)).equivalent
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from graphsub.data import random_inputs, random_weights
from graphsub.errors import ExecutionError, ReferenceFailed, VerificationError
from graphsub.ir.graph import Graph

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5
#: outputs larger than this many elements are compared a chunk of this size at a time
CHUNK = 1 << 20


@dataclass(frozen=True)
class OutputDiff:
    name: str
    max_abs_diff: float
    max_rel_diff: float
    max_abs_ref: float
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class EquivalenceReport:
    """Result of :func:`equivalent`; ``worst_output`` is the output with the largest excess
    over tolerance (or the largest difference when all pass)."""

    equivalent: bool
    max_abs_diff: float
    max_rel_diff: float
    worst_output: str
    outputs: list[OutputDiff] = field(default_factory=list)
    trials: int = 1
    seed: int = 0
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_arrays(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[OutputDiff, float]:
    """Compare ``a`` (candidate) to ``b`` (reference); returns the diff and the worst excess."""
    inf = float("inf")
    if a.shape != b.shape:
        return OutputDiff(name, inf, inf, 0.0, False, f"shape {a.shape} != {b.shape}"), inf
    if a.size == 0:
        return OutputDiff(name, 0.0, 0.0, 0.0, True), -1.0
    if a.size > CHUNK:
        return _compare_chunked(name, a.reshape(-1), b.reshape(-1), rtol, atol)
    af = a.astype(np.float64)
    bf = b.astype(np.float64)
    if not np.isfinite(bf).all():
        bad = int((~np.isfinite(bf)).sum())
        return OutputDiff(name, inf, inf, 0.0, False,
                          f"inconclusive: the reference output has {bad} NaN/inf value(s)"), inf
    if not np.isfinite(af).all():
        return OutputDiff(name, inf, inf, float(np.abs(bf).max()), False, "candidate output has NaN/inf"), inf
    diff = np.abs(af - bf)
    ref = np.abs(bf)
    rms = float(np.sqrt(np.mean(np.square(bf))))
    excess = diff - (atol + rtol * np.maximum(ref, rms))
    worst = float(excess.max())
    max_abs = float(diff.max())
    with np.errstate(over="ignore", divide="ignore"):
        max_rel = float((diff / np.maximum(ref, np.finfo(np.float64).tiny)).max()) if max_abs > 0 else 0.0
    ok = worst <= 0
    return OutputDiff(name, max_abs, max_rel, float(ref.max()), ok, "" if ok else "outside tolerance"), worst


def _compare_chunked(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[OutputDiff, float]:
    """:func:`compare_arrays` of two flat arrays, :data:`CHUNK` elements at a time (float64 temporaries of a chunk,
    not of the whole output: a 1 GB output would otherwise need ~10 GB)."""
    inf = float("inf")
    n = a.size
    spans = [(i, min(i + CHUNK, n)) for i in range(0, n, CHUNK)]
    bad_ref = bad_cand = 0
    sumsq = max_ref = 0.0
    for lo, hi in spans:
        bf = b[lo:hi].astype(np.float64)
        fin = np.isfinite(bf)
        bad_ref += int(bf.size - np.count_nonzero(fin))
        if not bad_ref:
            sumsq += float(np.dot(bf, bf))
            max_ref = max(max_ref, float(np.abs(bf).max()))
            bad_cand += int(hi - lo - np.count_nonzero(np.isfinite(a[lo:hi].astype(np.float64))))
    if bad_ref:
        return OutputDiff(name, inf, inf, 0.0, False,
                          f"inconclusive: the reference output has {bad_ref} NaN/inf value(s)"), inf
    if bad_cand:
        return OutputDiff(name, inf, inf, max_ref, False, "candidate output has NaN/inf"), inf
    rms = math.sqrt(sumsq / n)
    worst, max_abs, max_rel = -inf, 0.0, 0.0
    tiny = np.finfo(np.float64).tiny
    for lo, hi in spans:
        bf = b[lo:hi].astype(np.float64)
        diff = np.abs(a[lo:hi].astype(np.float64) - bf)
        ref = np.abs(bf)
        worst = max(worst, float((diff - (atol + rtol * np.maximum(ref, rms))).max()))
        max_abs = max(max_abs, float(diff.max()))
        with np.errstate(over="ignore", divide="ignore"):
            max_rel = max(max_rel, float((diff / np.maximum(ref, tiny)).max()))
    ok = worst <= 0
    return OutputDiff(name, max_abs, max_rel if max_abs > 0 else 0.0, max_ref, ok,
                      "" if ok else "outside tolerance"), worst


def _check_memory(g1: Graph, g2: Graph) -> None:
    """ShapeError when running both graphs cannot fit in memory: the random inputs, the outputs of both, and the
    largest value of each graph (a lower bound of what each session holds; both are alive while the other runs)."""
    from graphsub.data import check_sizes

    need = [(f"input {n!r}", t) for n, t in zip(g1.input_names, g1.input_types, strict=True)]
    need += [(f"output {n!r} of each model", t) for n, t in zip(g1.output_names, g1.output_types, strict=True)] * 2
    for label, g in (("original", g1), ("candidate", g2)):
        types = [(nid, t) for nid, node in g.nodes.items() if not node.is_leaf for t in node.sig.out_types]
        if types:
            nid, big = max(types, key=lambda it: it[1].nbytes)
            need.append((f"{g.nodes[nid].sig.op} node %{nid} of the {label} model", big))
    check_sizes(need, total=True, purpose="running both models on random inputs: the values of")


def equivalent(
    g1: Graph,
    g2: Graph,
    *,
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    trials: int = 1,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    threads: int | None = None,
) -> EquivalenceReport:
    """Compare ``g2`` against ``g1`` (the reference) on random inputs in onnxruntime.

    Interfaces must match: same input names/types and same number of outputs with the same
    types (outputs are matched by position).  Raises VerificationError when they do not.

    Every failure is a GraphsubError, never an onnxruntime exception: ReferenceFailed when onnxruntime
    rejects ``g1`` or cannot run it on the random inputs (nothing can be verified against it);
    ExecutionError when it rejects or cannot run ``g2``; ShapeError when the random data would not fit
    in memory (:func:`graphsub.data.check_sizes`).
    """
    from graphsub.frontends.onnx_export import export_graph
    from graphsub.frontends.ort import make_session, run_session

    if trials < 1:  # no draw would prove nothing, and report "equivalent"
        raise VerificationError(f"trials must be at least 1, got {trials}")
    for tol_name, tol in (("rtol", rtol), ("atol", atol)):
        if not math.isfinite(tol) or tol < 0:
            raise VerificationError(f"{tol_name} must be a finite number >= 0, got {tol}")
    if dict(zip(g1.input_names, g1.input_types, strict=True)) != dict(
        zip(g2.input_names, g2.input_types, strict=True)
    ):
        raise VerificationError(
            f"inputs differ: {dict(zip(g1.input_names, g1.input_types, strict=True))} vs "
            f"{dict(zip(g2.input_names, g2.input_types, strict=True))}"
        )
    if g1.output_types != g2.output_types:
        raise VerificationError(f"outputs differ: {list(g1.output_types)} vs {list(g2.output_types)}")
    _check_memory(g1, g2)
    shared = dict(g1.params)
    for k, v in g2.params.items():
        shared.setdefault(k, v)
    # g2 reuses g1's arrays for every shared name: random data depends on the consumers
    # (scales, roles such as "positive"), which a rewrite may change
    w1 = random_weights(g1, seed, known=shared)
    w2 = random_weights(g2, seed, known={**shared, **w1})
    try:
        s1 = make_session(export_graph(g1, params=w1), threads=threads)
    except ExecutionError as e:
        raise ReferenceFailed(f"the original model cannot be loaded in onnxruntime, so nothing can be verified "
                              f"against it: {e}") from e
    try:
        s2 = make_session(export_graph(g2, params=w2), threads=threads)
    except ExecutionError as e:
        raise ExecutionError(f"the candidate model cannot be loaded in onnxruntime: {e}") from e
    worst: dict[str, tuple[float, OutputDiff]] = {}  # per output: largest excess seen
    for t in range(trials):
        feeds = dict(inputs) if inputs is not None and t == 0 else random_inputs(g1, seed + t)
        try:
            o1 = run_session(s1, feeds)
        except ExecutionError as e:
            raise ReferenceFailed(f"the original model fails on random inputs (seed {seed + t}), so no rewrite of "
                                  f"it can be verified: {e}") from e
        try:
            o2 = run_session(s2, feeds)
        except ExecutionError as e:
            raise ExecutionError(f"the candidate model fails on random inputs (seed {seed + t}): {e}") from e
        if len(o1) != len(g1.output_names) or len(o2) != len(o1):
            raise VerificationError(f"onnxruntime returned {len(o1)} and {len(o2)} outputs for "
                                    f"{len(g1.output_names)} graph outputs")
        for name, a, b in zip(g1.output_names, o2, o1, strict=True):
            d, excess = compare_arrays(name, a, b, rtol, atol)
            if name not in worst or excess > worst[name][0]:
                worst[name] = (excess, d)
    outs = [d for _, d in worst.values()]
    worst_name = max(worst, key=lambda k: worst[k][0]) if worst else ""
    return EquivalenceReport(
        equivalent=all(d.ok for d in outs),
        max_abs_diff=max((d.max_abs_diff for d in outs), default=0.0),
        max_rel_diff=max((d.max_rel_diff for d in outs), default=0.0),
        worst_output=worst_name,
        outputs=outs,
        trials=trials,
        seed=seed,
        rtol=rtol,
        atol=atol,
    )


__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "EquivalenceReport", "OutputDiff", "compare_arrays", "equivalent"]
