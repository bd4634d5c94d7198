"""Loss and gradients given as arrays -- a PyTorch module's, onnxruntime's outputs of a training step -- checked with
the one tolerance policy, with the float64 re-check as an option (:func:`check_gradients`).

>>> c = check_gradients({"loss": 1.0, "w": [1.0, -2.00015]}, {"loss": 1.0, "w": [1.0, -2.0]})
>>> c.verified, c.worst, round(c.max_grad_abs_diff, 6), c.max_abs_grad
(True, 'w', 0.00015, 2.0)
>>> check_gradients({"loss": 1.0, "w": [1.0, -2.01]}, {"loss": 1.0, "w": [1.0, -2.0]}).error
'w: outside tolerance (max abs diff 0.01, largest value 2)'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from graphsub.equivalence.tolerance import DEFAULT_TOLERANCE, OutputDiff, Tolerance
from graphsub.equivalence.tolerance import one_line as _one_line
from graphsub.errors import GraphsubError


@dataclass(frozen=True)
class GradientCheck:
    """The loss and gradients of a candidate against a reference's (:func:`check_gradients`): ``verified`` (in
    float64 where ``float64`` says so), the loss difference, the largest gradient difference, the largest absolute
    reference gradient (its scale), the output with the largest excess (``worst``), why not verified (``error``) and
    every output's diff."""

    verified: bool
    loss_abs_diff: float
    max_grad_abs_diff: float
    max_abs_grad: float
    worst: str
    error: str = ""
    outputs: tuple[OutputDiff, ...] = ()
    float64: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, diffs: Sequence[tuple[OutputDiff, float]], *, error: str = "", float64: str = "") -> GradientCheck:
        """The summary of per-output diffs (``loss`` and the gradients, with their excess)."""
        grads = [d for d, _ in diffs if d.name != "loss"]
        loss = next((d.max_abs_diff for d, _ in diffs if d.name == "loss"), float("nan"))
        worst = max(diffs, key=lambda de: de[1])[0].name if diffs else ""
        ok = all(d.ok for d, _ in diffs) and not error
        if not ok and not error:
            bad = max((de for de in diffs if not de[0].ok), key=lambda de: de[1])[0]
            error = (f"{bad.name}: {bad.reason} (max abs diff {bad.max_abs_diff:.3g}, largest value "
                     f"{bad.max_abs_ref:.3g})")
        return cls(ok, loss, max((d.max_abs_diff for d in grads), default=0.0),
                   max((d.max_abs_ref for d in grads), default=0.0), worst, error, tuple(d for d, _ in diffs), float64)


GradFn = Callable[[], tuple[Mapping[str, Any], Mapping[str, Any]]]


def check_gradients(got: Mapping[str, Any], want: Mapping[str, Any], tolerance: Tolerance = DEFAULT_TOLERANCE, *,
                    float64: GradFn | None = None) -> GradientCheck:
    """Compare the loss (key ``loss``) and every gradient (every other key of ``want``) of a candidate (``got``)
    with a reference's, each with ``tolerance``; a key of ``want`` missing from ``got`` fails. ``float64``: a
    function giving both again computed in float64 (e.g. two modules in double precision), called only when the
    float32 comparison fails by tolerance alone: when everything agrees at :meth:`Tolerance.float64`, the check
    passes, and ``float64`` says so."""
    missing = [k for k in want if k not in got]
    if missing:
        return GradientCheck(False, float("nan"), float("inf"), 0.0, missing[0], f"missing: {', '.join(missing)}")
    diffs = [tolerance.compare(k, got[k], want[k]) for k in want]
    first = GradientCheck.of(diffs)
    if first.verified or float64 is None or any(d.reason != "outside tolerance" for d, _ in diffs if not d.ok):
        return first
    tol64 = tolerance.float64()
    try:
        got64, want64 = float64()
        diffs64 = [tol64.compare(k, got64[k], want64[k]) for k in want]
    except (GraphsubError, ArithmeticError, KeyError, RuntimeError, TypeError, ValueError) as e:
        return GradientCheck.of(diffs, error=f"{first.error}; float64 re-check impossible: {_one_line(e)}")
    bad = [d for d, _ in diffs64 if not d.ok]
    if bad:
        return GradientCheck.of(diffs, error=f"{first.error}; {bad[0].name} differs in float64 too (max abs diff "
                                              f"{bad[0].max_abs_diff:.3g})")
    moved = max((de for de in diffs if not de[0].ok), key=lambda de: de[1])[0]
    note = (f"verified in float64: float32 evaluation order moves {moved.name} by {moved.max_abs_diff:.3g} "
            f"(float64 agrees within rtol {tol64.rtol:.3g}, atol {tol64.atol:.3g})")
    kept = [(d if d.ok else OutputDiff(d.name, d.max_abs_diff, d.max_rel_diff, d.max_abs_ref, True,
                                       f"verified in float64 (max abs diff {d64.max_abs_diff:.3g})"), min(e, 0.0))
            for (d, e), (d64, _) in zip(diffs, diffs64, strict=True)]
    return GradientCheck.of(kept, float64=note)



__all__ = ["GradFn", "GradientCheck", "check_gradients"]
