"""The end-to-end pipeline behind ``graphsub optimize``: search, verify, time, keep only what is faster.

* :func:`optimize` (:mod:`.pipeline`) for an ONNX file, a zoo model or a Graph, returning an
  :class:`OptimizeResult` (:mod:`.result`);
* :func:`optimize_module` (:mod:`.torch_module`) for a PyTorch module, returning an onnxruntime-backed
  callable;
* the steps: :mod:`.verification` (finalize, check, bisect), :mod:`.race` (the timing step: screening, side-by-side
  and confirmation rounds within the deadline) on :mod:`.timing` (end-to-end latency and the keep/replace
  decision), :mod:`.output` (atomic writes), and :mod:`.report` (the HTML report);
* :class:`Timers` (:mod:`.timing`): the one seam every latency, confirmation and budget clock goes through
  (``timers=`` of :func:`optimize` and the training routes; :func:`using_timers` for callers that cannot pass it).

PyTorch is imported only when :func:`optimize_module` runs.
"""

from __future__ import annotations

from graphsub.optimize.pipeline import DEFAULT_ALGO, DEFAULT_COST, DEFAULT_RULES, ProgressFn, load_input, optimize
from graphsub.optimize.result import Failure, OptimizeResult
from graphsub.optimize.timing import Timers, using_timers
from graphsub.optimize.torch_module import OptimizedModule, optimize_module

__all__ = ["DEFAULT_ALGO", "DEFAULT_COST", "DEFAULT_RULES", "Failure", "OptimizeResult", "OptimizedModule",
           "ProgressFn", "Timers", "load_input", "optimize", "optimize_module", "using_timers"]
