"""The end-to-end pipeline behind ``graphsub optimize``: search, verify, time, keep only what is faster.

* :func:`optimize` (:mod:`.pipeline`) for an ONNX file, a zoo model or a Graph, returning an
  :class:`OptimizeResult` (:mod:`.result`); every setting of a call is one :class:`OptimizeConfig` (:mod:`.config`),
  which the command line builds;
* :func:`optimize_module` (:mod:`.torch_module`) for a PyTorch module, returning an onnxruntime-backed
  callable (or, for training, the module optimized for training in PyTorch);
* one pipeline, several targets (:mod:`.target`): inference in ONNX Runtime, an ONNX training graph
  (:mod:`.training`), a PyTorch module trained in PyTorch (:mod:`.torch_training`); the candidates come from the
  registered candidate sources (:mod:`.sources`), with the budget planned from their estimates (:mod:`.budget`);
* the steps: :mod:`.verification` (finalize, check, bisect), :mod:`.race` (the timing step: screening, side-by-side
  rounds, then each leader confirmed within the deadline) on :mod:`.timing` (end-to-end latency) and :mod:`.decide`
  (the one decision "faster": session groups with an A/A control, a test with a bounded false-positive rate),
  :mod:`.output` (atomic writes), and :mod:`.report` (the HTML report);
* :class:`Timers` (:mod:`.timing`): the one seam every latency, confirmation and budget clock goes through
  (``timers=`` of :func:`optimize` and the training routes; :func:`using_timers` for callers that cannot pass it).

PyTorch is imported only when :func:`optimize_module` runs.
"""

from __future__ import annotations

from graphsub.optimize.config import DEFAULT_ALGO, DEFAULT_COST, DEFAULT_RULES, OptimizeConfig, ProgressFn
from graphsub.optimize.pipeline import load_input, optimize
from graphsub.optimize.result import Failure, OptimizeResult
from graphsub.optimize.target import Target
from graphsub.optimize.timing import Timers, using_timers
from graphsub.optimize.torch_module import OptimizedModule, optimize_module

__all__ = ["DEFAULT_ALGO", "DEFAULT_COST", "DEFAULT_RULES", "Failure", "OptimizeConfig", "OptimizeResult",
           "OptimizedModule", "ProgressFn", "Target", "Timers", "load_input", "optimize", "optimize_module",
           "using_timers"]
