"""``optimize_training``: optimize the training graph of a model (MetaFlow Sec. 6.3) for ONNX Runtime.

The forward graph is differentiated (:func:`graphsub.training.build_training`: the loss and the gradient of every
trained weight are its outputs, the trained weights are inputs), and that joint graph goes through the same
pipeline as an inference model (:func:`graphsub.optimize.optimize`: search, portfolio, verification of *every*
output -- the gradients included -- on random draws, end-to-end timing in onnxruntime, the faster one kept).
Then the chosen joint graph and the original one are run once more on the model's own weights, on a batch with
one-hot labels, and the largest difference of the loss and of any gradient is reported.

The written model's inputs are the data, the labels (``labels`` or ``target``) and the trained weights (each
with its value at step 0 as the initializer of the same name, so a runtime may leave it out); its outputs are
``loss`` and ``grad.<weight>``.

>>> from graphsub import zoo
>>> r = optimize_training(zoo.get("resnet", blocks=1), loss="mse", time_s=None, measure_latency=False,
...                       budget=None, seeds=1)
>>> r.verified, r.spec.params[:2], r.max_grad_abs_diff < 1e-3
(True, ('r1_conv1_w', 'r1_conv2_w'), True)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.data import materialize, random_inputs
from graphsub.ir.graph import Graph
from graphsub.optimize.config import OptimizeConfig
from graphsub.optimize.pipeline import load_input, optimize
from graphsub.optimize.result import OptimizeResult
from graphsub.optimize.sources.training import TrainingTarget, backward_rules, forward_first, uses_training_rules
from graphsub.optimize.timing import resolve_timers
from graphsub.training import GRAD_PREFIX, TrainingSpec, build_training, initial_params


@dataclass
class TrainingResult:
    """The optimize result of the joint graph, what the training graph is, and how the chosen graph's loss and
    gradients compare with the original's on the model's own weights."""

    result: OptimizeResult
    spec: TrainingSpec
    forward: Graph
    max_grad_abs_diff: float
    max_loss_abs_diff: float
    grad_norm: float  # the largest absolute gradient value (the scale max_grad_abs_diff is measured against)

    @property
    def verified(self) -> bool:
        return self.result.verified

    def to_dict(self) -> dict[str, Any]:
        d = self.result.to_dict()
        d.update(training=True, loss=self.spec.loss, batchnorm=self.spec.batchnorm, params=len(self.spec.params),
                 label_input=self.spec.label_input, max_grad_abs_diff=_finite(self.max_grad_abs_diff),
                 max_loss_abs_diff=_finite(self.max_loss_abs_diff), max_abs_grad=_finite(self.grad_norm),
                 speedup_train=self.result.speedup("all"))
        return d


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def training_feeds(joint: Graph, spec: TrainingSpec, params: Mapping[str, np.ndarray],
                   seed: int) -> dict[str, np.ndarray]:
    """Feeds of one training step: random data, one-hot labels (cross entropy; random targets for mse) and the
    weights ``params``."""
    feeds = random_inputs(joint, seed)
    feeds.update({k: np.asarray(v) for k, v in params.items()})
    if spec.loss == "cross_entropy" and spec.label_input is not None:
        shape = feeds[spec.label_input].shape
        rng = np.random.default_rng(seed)
        classes = rng.integers(0, shape[1], size=(shape[0], *shape[2:]))
        onehot = np.moveaxis(np.eye(shape[1], dtype=feeds[spec.label_input].dtype)[classes], -1, 1)
        feeds[spec.label_input] = np.ascontiguousarray(onehot)
    return feeds


def compare_steps(a: Any, b: Any, feeds: Mapping[str, np.ndarray], *, threads: int | None = None
                  ) -> tuple[float, float, float]:
    """Run two training models (ONNX bytes or paths) on ``feeds``: ``a`` as the reference
    (:class:`graphsub.equivalence.Reference`), ``b`` as users run it, compared by the one verifier
    (:func:`graphsub.equivalence.check`, float32 only): (largest loss difference, largest gradient difference, largest
    absolute gradient of ``a``). Reported numbers, deciding nothing; ExecutionError when either cannot run."""
    from graphsub.equivalence import GradientCheck, Reference, check
    from graphsub.errors import ExecutionError

    chk = check(Reference(a, threads=threads), b, [(0, feeds)], threads=threads, float64=False)
    if chk.failure not in ("", "tolerance"):
        raise ExecutionError(chk.error)
    g = GradientCheck.of([(d, 0.0) for d in chk.outputs if d.name == "loss" or d.name.startswith(GRAD_PREFIX)])
    return g.loss_abs_diff, g.max_grad_abs_diff, g.max_abs_grad


def optimize_training(model: str | os.PathLike[str] | Graph, *, output: str | os.PathLike[str] | None = None,
                      loss: str = "cross_entropy", params: Collection[str] | None = None,
                      loss_output: str | None = None, batchnorm: str = "batch", forward_s: float | None = None,
                      config: OptimizeConfig | None = None, **settings: Any) -> TrainingResult:
    """Build the training graph of ``model`` and optimize it with :func:`graphsub.optimize.optimize` (``config`` and
    ``settings`` as there: one :class:`~graphsub.optimize.config.OptimizeConfig`); see the module docstring. The
    joint graph is optimize's model and a :class:`~graphsub.optimize.sources.training.TrainingTarget` its target: its
    candidate sources ``backward-rules`` and ``forward-first`` join the portfolio, planned in the budget like the
    others, and the candidates are timed on a real step's inputs (:func:`training_feeds`).
    ``forward_s``: seconds of the :func:`forward_first` search (default: the main search's share of ``time_s``; 0
    leaves that candidate out); it counts in ``time_s``. The config's ``timers`` time the candidates and are the
    budget's clock (``started``, when given, is a reading of it). Raises GradientError when the model cannot be
    differentiated (naming the ops)."""
    from graphsub.frontends.onnx_export import export_graph
    from graphsub.frontends.onnx_io import attach_initializers

    cfg = OptimizeConfig.build(config, **settings).check()
    tm = resolve_timers(cfg.timers)
    cfg = dataclasses.replace(cfg, started=tm.clock() if cfg.started is None else cfg.started)
    _, fwd = load_input(model, dict(cfg.input_shapes) if cfg.input_shapes is not None else None)
    fwd = materialize(fwd, cfg.seed)
    joint, spec = build_training(fwd, loss=loss, params=params, output=loss_output, batchnorm=batchnorm)
    init = initial_params(fwd, spec)
    feeds = training_feeds(joint, spec, init, cfg.seed)
    target = TrainingTarget(spec, fwd, feeds, forward_s)  # its sources: backward-rules, forward-first
    res = optimize(joint, output=output, config=dataclasses.replace(cfg, input_shapes=None), target=target)
    loss_d = grad_d = scale = float("nan")
    if res.verified:
        original = export_graph(res.original).SerializeToString()
        cand = res.chosen_candidate
        chosen = cand.data if cand is not None else (export_graph(res.graph).SerializeToString())
        loss_d, grad_d, scale = compare_steps(original, chosen, feeds, threads=res.threads)
        if res.written:
            attach_initializers(res.written, init)
    return TrainingResult(res, spec, fwd, grad_d, loss_d, scale)


__all__ = ["TrainingResult", "TrainingTarget", "backward_rules", "compare_steps", "forward_first", "optimize_training",
           "training_feeds", "uses_training_rules"]
