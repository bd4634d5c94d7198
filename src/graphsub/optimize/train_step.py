"""Full training steps -- forward, backward, SGD update -- in ONNX Runtime and PyTorch eager, and their timers (used by
:func:`graphsub.optimize.torch_training.optimize_module_training` and ``graphsub training bench``).

Runners (each owns its weights and runs whole steps):

* :class:`OrtTrainer` -- a training graph (:mod:`graphsub.training`: outputs ``loss`` and ``grad.<w>``) in an
  onnxruntime session under ``ORT_ENABLE_ALL``; the SGD update ``w -= lr * grad`` is done in numpy, in place, the same
  code for the original and the optimized graph.
* :class:`TorchTrainer` -- an ``nn.Module`` in ``train()`` mode (dropout off, as in training graphs): cross entropy
  against one-hot labels,
  ``loss.backward()``, ``torch.optim.SGD.step()``.

Whether an optimized module trains faster is decided by :func:`graphsub.optimize.decide.compare`, whose units are
timers: :func:`graphsub.optimize.timing.step_timer` turns a trainer into one (warm-up steps once, then steps for
about the round's budget; the median step), and :func:`trainer_maker` makes a fresh trainer -- a new copy of the
module -- and its timer for every session group. The step timer is the seam of
:class:`graphsub.optimize.timing.Timers` (``step_timer``), so that a test fakes training-step times without running
them for long.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from graphsub.training import GRAD_PREFIX


class Trainer(Protocol):
    def step(self) -> float:
        """One full training step; returns the loss before the update."""
        ...

    def weights(self) -> dict[str, np.ndarray]:
        """The current weights, by name."""
        ...


class OrtTrainer:
    """SGD on a training graph in onnxruntime (``model``: ONNX bytes or a path)."""

    def __init__(self, model: bytes | str, params: Mapping[str, np.ndarray], data: Mapping[str, np.ndarray], *,
                 lr: float = 0.01, threads: int | None = None) -> None:
        from graphsub.frontends.ort import make_session

        self.sess = make_session(model, optimization="all", threads=threads)
        self.names = [o.name for o in self.sess.get_outputs()]
        if not self.names or self.names[0] != "loss":
            raise ValueError("a training model's first output is 'loss'")
        inputs = {i.name for i in self.sess.get_inputs()}
        self.params = {k: np.array(v, dtype=v.dtype, copy=True) for k, v in params.items()}
        self.feeds: dict[str, np.ndarray] = {k: v for k, v in data.items() if k in inputs}
        self.feeds.update(self.params)
        self.lr = np.float32(lr)
        self.targets = [(i, n[len(GRAD_PREFIX):]) for i, n in enumerate(self.names) if n.startswith(GRAD_PREFIX)]

    def step(self) -> float:
        outs = self.sess.run(None, self.feeds)
        for i, name in self.targets:
            w = self.params[name]
            w -= self.lr * outs[i]
        return float(np.asarray(outs[0]).reshape(()))

    def weights(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.params.items()}


class TorchTrainer:
    """SGD on an ``nn.Module`` with autograd (cross entropy against the one-hot ``labels``)."""

    def __init__(self, module: Any, inputs: Sequence[np.ndarray], labels: np.ndarray, *, lr: float = 0.01,
                 threads: int | None = None) -> None:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        self.torch = torch
        self.module = module.train()
        for m in module.modules():  # like for like: training graphs do not model dropout (export_module leaves it out)
            if isinstance(m, torch.nn.modules.dropout._DropoutNd):
                m.eval()
        self.inputs = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        self.labels = torch.from_numpy(np.ascontiguousarray(labels))
        self.opt = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=lr)

    def step(self) -> float:
        f = self.torch.nn.functional
        self.opt.zero_grad(set_to_none=True)
        out = self.module(*self.inputs)
        loss = f.cross_entropy(out, self.labels)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def weights(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.module.state_dict().items()}


def timer_factory(timers: Any = None) -> Callable[..., Callable[[float], float]]:
    """``timers``' step timer (None: the current timers), called as ``(trainer, *, steps, clock, name) -> timer``."""
    from graphsub.optimize.timing import resolve_timers

    return resolve_timers(timers).step_timer


def trainer_maker(new_trainer: Callable[[], Trainer], *, name: str, steps: int = 3, timers: Any = None
                  ) -> Callable[[], Callable[[float], float]]:
    """A :data:`graphsub.optimize.decide.Maker`: each call makes a fresh trainer (``new_trainer()``) and its timer
    (``timers``' step timer, on ``timers.clock``; None: the current timers)."""
    from graphsub.optimize.timing import resolve_timers

    tm = resolve_timers(timers)
    make = timer_factory(tm)
    return lambda: make(new_trainer(), steps=steps, clock=tm.clock, name=name)


def torch_maker(module: Any, inputs: Sequence[np.ndarray], labels: np.ndarray, *, name: str, lr: float = 0.01,
                threads: int | None = None, steps: int = 3, timers: Any = None
                ) -> Callable[[], Callable[[float], float]]:
    """:func:`trainer_maker` of :class:`TorchTrainer` s, each on a new deep copy of ``module`` (its weights as they
    are now: the module itself is never stepped) with the same batch, learning rate and threads."""
    import copy

    return trainer_maker(lambda: TorchTrainer(copy.deepcopy(module), inputs, labels, lr=lr, threads=threads),
                         name=name, steps=steps, timers=timers)


__all__ = ["OrtTrainer", "TorchTrainer", "Trainer", "timer_factory", "torch_maker", "trainer_maker"]
