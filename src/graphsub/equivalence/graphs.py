"""Two Graphs compared (:func:`equivalent`): the check of :mod:`graphsub.equivalence.reference`, raising (the
package's docstring, :mod:`graphsub.equivalence`, has the example)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from graphsub.equivalence.reference import Draw, Reference, _interface, check
from graphsub.equivalence.tolerance import DEFAULT_ATOL, DEFAULT_RTOL, OutputDiff, Tolerance
from graphsub.errors import ExecutionError, ExportError, ReferenceFailed, VerificationError
from graphsub.ir.graph import Graph


@dataclass(frozen=True)
class EquivalenceReport:
    """Result of :func:`equivalent`; ``worst_output`` is the output with the largest excess over tolerance (or the
    largest difference when all pass); ``float64``: set when a training graph was verified in float64."""

    equivalent: bool
    max_abs_diff: float
    max_rel_diff: float
    worst_output: str
    outputs: list[OutputDiff] = field(default_factory=list)
    trials: int = 1
    seed: int = 0
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    float64: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_memory(g1: Graph, g2: Graph) -> None:
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
    """Compare ``g2`` against ``g1`` (the reference) on ``trials`` random input draws (seeds ``seed``,
    ``seed + 1``, ...; ``inputs`` replace the first), weights shared by name and the missing ones drawn with
    ``seed``: :func:`~graphsub.equivalence.reference.check` of ``g2`` against ``Reference(g1)``, both sessions at
    ``threads`` (None: onnxruntime's default). This compares what the two graphs mean -- both run under
    ``ORT_DISABLE_ALL`` --, as rules and searches hold them, before their weights are folded; the checks of the
    candidates graphsub writes run them as users do (:func:`graphsub.optimize.verification.verify_graph`).

    Interfaces must match: same input names/types and same number of outputs with the same types (outputs are
    matched by position); VerificationError when they do not. Every failure is a GraphsubError, never an onnxruntime
    exception: ReferenceFailed when onnxruntime rejects ``g1`` or cannot run it on the inputs (nothing can be
    verified against it); ExecutionError when it rejects or cannot run ``g2``; ExportError when ``g2`` cannot be
    exported; ShapeError when the random data would not fit in memory (:func:`graphsub.data.check_sizes`).
    """
    if trials < 1:  # no draw would prove nothing, and report "equivalent"
        raise VerificationError(f"trials must be at least 1, got {trials}")
    tol = Tolerance(rtol, atol)
    why = _interface(g1, g2)
    if why:
        raise VerificationError(why)
    check_memory(g1, g2)
    reference = Reference(g1, seed=seed, known=g2.params, threads=threads)
    draws: list[Draw] = [seed + t for t in range(trials)]
    if inputs is not None:
        draws[0] = (seed, dict(inputs))
    c = check(reference, g2, draws, tol, threads=threads, optimization="disable")
    if c.failure == "reference":
        raise ReferenceFailed(c.error)
    if c.failure in ("load", "export"):
        cls = ExportError if c.failure == "export" else ExecutionError
        raise cls(f"the candidate model cannot be {'exported' if c.failure == 'export' else 'loaded in onnxruntime'}: "
                  f"{c.error}")
    if c.failure == "run":
        raise ExecutionError(c.error)
    if c.failure == "interface":
        raise VerificationError(c.error)
    outs = list(c.outputs)
    return EquivalenceReport(
        equivalent=c.verified,
        max_abs_diff=c.max_abs_diff,
        max_rel_diff=max((d.max_rel_diff for d in outs), default=0.0),
        worst_output=c.worst_output,
        outputs=outs,
        trials=trials,
        seed=seed,
        rtol=rtol,
        atol=atol,
        float64=c.float64,
    )




__all__ = ["EquivalenceReport", "check_memory", "equivalent"]
