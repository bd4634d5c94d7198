"""The end-to-end pipeline behind ``graphsub optimize``: search, verify, time, keep only what is faster.

* :func:`optimize` (:mod:`.pipeline`) for an ONNX file, a zoo model or a Graph, returning an
  :class:`OptimizeResult` (:mod:`.result`);
* :func:`optimize_module` (:mod:`.torch_module`) for a PyTorch module, returning an onnxruntime-backed
  callable;
* the steps: :mod:`.verification` (finalize, check, bisect), :mod:`.timing` (end-to-end latency and the
  keep/replace decision), :mod:`.output` (atomic writes), and :mod:`.report` (the HTML report).

PyTorch is imported only when :func:`optimize_module` runs.
"""

from __future__ import annotations

from graphsub.optimize.pipeline import DEFAULT_ALGO, DEFAULT_COST, DEFAULT_RULES, ProgressFn, load_input, optimize
from graphsub.optimize.result import Failure, OptimizeResult
from graphsub.optimize.torch_module import OptimizedModule, optimize_module

__all__ = ["DEFAULT_ALGO", "DEFAULT_COST", "DEFAULT_RULES", "Failure", "OptimizeResult", "OptimizedModule",
           "ProgressFn", "load_input", "optimize", "optimize_module"]
