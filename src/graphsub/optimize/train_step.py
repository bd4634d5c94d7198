"""Full training steps -- forward, backward, SGD update -- in ONNX Runtime and PyTorch eager, timed in interleaved
rounds (used by :func:`graphsub.optimize.torch_training.optimize_module_training` and ``graphsub training bench``).

Runners (each owns its weights and runs whole steps):

* :class:`OrtTrainer` -- a training graph (:mod:`graphsub.training`: outputs ``loss`` and ``grad.<w>``) in an
  onnxruntime session under ``ORT_ENABLE_ALL``; the SGD update ``w -= lr * grad`` is done in numpy, in place, the same
  code for the original and the optimized graph.
* :class:`TorchTrainer` -- an ``nn.Module`` in ``train()`` mode (dropout off, as in training graphs): cross entropy
  against one-hot labels,
  ``loss.backward()``, ``torch.optim.SGD.step()``.

:func:`time_interleaved` runs the runners in rounds whose order rotates (drifting load hits all alike) and reports
per round the median step time of each; speedups are medians of per-round ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass
class Timed:
    """Per runner: the median step time of each round (ms)."""

    rounds_ms: dict[str, list[float]] = field(default_factory=dict)
    load_avg: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def median_ms(self, name: str) -> float:
        return statistics.median(self.rounds_ms[name])

    def speedup(self, base: str, other: str) -> float:
        """Median over rounds of ``base / other`` (per-round ratios)."""
        return statistics.median(a / b for a, b in zip(self.rounds_ms[base], self.rounds_ms[other], strict=True))

    def faster_rounds(self, base: str, other: str) -> float:
        pairs = list(zip(self.rounds_ms[base], self.rounds_ms[other], strict=True))
        return sum(a > b for a, b in pairs) / max(len(pairs), 1)


def time_interleaved(runners: Mapping[str, Trainer], *, rounds: int = 5, steps: int = 3, warmup: int = 2,
                     stop: Callable[[], bool] | None = None, clock: Callable[[], float] = time.perf_counter) -> Timed:
    """Each round runs ``steps`` steps of every runner, one step of each in turn (the order rotating per round), and
    records each one's median step; ``warmup`` steps of each first. ``stop`` ends the rounds early (at least one is
    run). Give the same model twice under two names (an A/A control) to measure the noise floor of a ratio. Steps
    are timed on ``clock`` (seconds; :class:`graphsub.optimize.timing.Timers` passes its own)."""
    import os

    names = list(runners)
    for n in names:
        for _ in range(warmup):
            runners[n].step()
    out = Timed({n: [] for n in names}, os.getloadavg())
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        ts: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(steps):
            for n in order:
                t = clock()
                runners[n].step()
                ts[n].append((clock() - t) * 1e3)
        for n in names:
            out.rounds_ms[n].append(statistics.median(ts[n]))
        if stop is not None and stop():
            break
    return out


__all__ = ["OrtTrainer", "Timed", "TorchTrainer", "Trainer", "time_interleaved"]
