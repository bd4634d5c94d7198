"""The one verifier: does a candidate compute what the original computes?

Every check of graphsub goes through this package, with one tolerance policy and one reference runner:

* :mod:`graphsub.equivalence.tolerance` -- :class:`Tolerance` (``rtol``, ``atol``) and :func:`compare_arrays`:
  ``|a - b| <= atol + rtol * max(|b|, rms(b))`` per element, NaN/inf in the reference "inconclusive" (a failure).
* :mod:`graphsub.equivalence.reference` -- :class:`Reference`: the original (a Graph, ONNX bytes or a path) run once
  per input draw under ``ORT_DISABLE_ALL``, its outputs kept; :func:`check`: a candidate run as users run it
  (``ORT_ENABLE_ALL``) against it, returning a :class:`Check` (never raising for a bad candidate); a training graph
  whose float32 outputs differ by rounding alone is verified in float64 (:func:`as_float64`).
* :mod:`graphsub.equivalence.gradients` -- :func:`check_gradients`: loss and gradients given as arrays (a PyTorch
  module's), with an optional float64 re-check.
* :mod:`graphsub.equivalence.graphs` -- :func:`equivalent`: two Graphs, raising (ReferenceFailed when the original
  fails, ExecutionError when the candidate does).

>>> from graphsub.ir import Builder
>>> def g(swap):
...     b = Builder(); x = b.input("x", (4, 4)); y = b.input("y", (4, 4))
...     return b.build(b.add(y, x) if swap else b.add(x, y))
>>> equivalent(g(False), g(True)).equivalent
True
>>> check(Reference(g(False)), g(True), [0, 1], Tolerance(1e-4, 1e-5)).verified
True
"""

from __future__ import annotations

from graphsub.equivalence.gradients import GradFn, GradientCheck, check_gradients
from graphsub.equivalence.graphs import EquivalenceReport, check_memory, equivalent
from graphsub.equivalence.reference import Check, Draw, Model, Reference, as_float64, check, is_training
from graphsub.equivalence.tolerance import (
    CHUNK,
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    DEFAULT_TOLERANCE,
    FLOAT64_FACTOR,
    OutputDiff,
    Tolerance,
    compare_arrays,
)

__all__ = ["CHUNK", "DEFAULT_ATOL", "DEFAULT_RTOL", "DEFAULT_TOLERANCE", "FLOAT64_FACTOR", "Check", "Draw",
           "EquivalenceReport", "GradFn", "GradientCheck", "Model", "OutputDiff", "Reference", "Tolerance",
           "as_float64", "check", "check_gradients", "check_memory", "compare_arrays", "equivalent", "is_training"]
