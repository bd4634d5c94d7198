"""Training graphs (MetaFlow Sec. 6.3): forward and backward as one graph, optimized like any other.

:func:`training_graph` differentiates an inference graph in reverse mode with per-op vector-Jacobian rules written
in IR ops (:mod:`.vjp`, :mod:`.rules_math`, :mod:`.rules_nn`); the result's outputs are the loss and the gradient
of every trainable weight, so every rule, search and cost model applies to it unchanged.
"""

from __future__ import annotations

from graphsub.training.graph import (
    BATCHNORM_MODES,
    GRAD_PREFIX,
    LOSSES,
    TrainingSpec,
    build_training,
    default_params,
    freeze_params,
    initial_params,
    trainable_forward,
    training_graph,
)
from graphsub.training.vjp import VJPS, GradientError, VjpCtx, register_vjp

__all__ = ["BATCHNORM_MODES", "GRAD_PREFIX", "LOSSES", "VJPS", "GradientError", "TrainingSpec", "VjpCtx",
           "build_training", "default_params", "freeze_params", "initial_params", "register_vjp", "trainable_forward",
           "training_graph"]
