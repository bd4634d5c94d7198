"""``optimize_module(..., training=True)``: a PyTorch module optimized for training, returned as a module.

PyTorch differentiates by itself, so the graph searched is the *forward* one with the trained weights as inputs
(:func:`graphsub.training.trainable_forward`): no rule can fold a transform of a trained weight into a constant,
and a merge or an enlargement of weights stays an op computed every step, which autograd differentiates. Steps:

1. export the module as it trains (:func:`graphsub.frontends.torch_export.export_module` with ``training=True``:
   batch norms with the batch's statistics, weights under their ``state_dict`` names, dropout left out) and import
   it;
2. search the trainable forward graph (rules, cost model, budget as :func:`graphsub.search.search`), and verify the
   result against it on random draws (:func:`graphsub.optimize.verification.check_seeds`);
3. emit both graphs as modules (:func:`graphsub.frontends.torch_emit.to_module`) holding copies of the module's
   parameters, and check the optimized one against the module itself: the loss and every gradient of
   ``loss.backward()`` on the example batch;
4. time full SGD steps (forward, backward, update) of the module, the emitted original graph and the emitted
   optimized one in interleaved rounds; the optimized module is chosen when it is faster than the user's module
   (median of per-round ratios above ``min_speedup`` and faster in 80% of the rounds), otherwise the module itself.
   ``TrainedModule.source`` is then the chosen module's class as Python source (``graphsub optimize FILE.py:Class
   --training -o OUT.py`` writes it, with its weights as ``OUT.pt``).
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsub.errors import VerificationError
from graphsub.ir.graph import Graph
from graphsub.optimize.timing import Timers, resolve_timers
from graphsub.training import freeze_params, trainable_forward


@dataclass
class TrainedModule:
    """The module to train (``module``: the optimized emitted module, or the user's own when it was not faster) and
    what was measured."""

    module: Any
    optimized: bool
    verified: bool
    max_grad_abs_diff: float
    max_loss_abs_diff: float
    speedup_train: float | None
    speedup_emitted_original: float | None  # user module / emitted original graph: what emission alone changes
    faster_rounds: float | None
    applied: list[str] = field(default_factory=list)
    decision: str = ""
    rounds_ms: dict[str, list[float]] = field(default_factory=dict)
    graph: Graph | None = None
    params: tuple[str, ...] = ()
    timings_s: dict[str, float] = field(default_factory=dict)
    aa: tuple[float, float] | None = None  # the module against a copy of itself: (ratio, faster rounds), noise floor
    source: str = ""  # the optimized module's class (frontends.torch_emit.module_source) when it was chosen

    def state_bytes(self) -> bytes:
        """``torch.save`` of the module's state dict (the weights file written beside :attr:`source`)."""
        import io

        import torch

        buf = io.BytesIO()
        torch.save(self.module.state_dict(), buf)
        return buf.getvalue()

    def to_dict(self) -> dict[str, Any]:
        return {"training": True, "runtime": "pytorch", "optimized": self.optimized, "verified": self.verified,
                "max_grad_abs_diff": self.max_grad_abs_diff, "max_loss_abs_diff": self.max_loss_abs_diff,
                "speedup_train": self.speedup_train, "speedup_emitted_original": self.speedup_emitted_original,
                "faster_rounds": self.faster_rounds, "applied": self.applied, "decision": self.decision,
                "rounds_ms": self.rounds_ms, "params": len(self.params), "timings_s": self.timings_s,
                "aa_ratio": None if self.aa is None else self.aa[0]}


def one_hot(batch: int, classes: int, seed: int) -> np.ndarray:
    """Random one-hot labels (batch, classes), float32."""
    rng = np.random.default_rng(seed)
    return np.eye(classes, dtype=np.float32)[rng.integers(0, classes, size=batch)]


def _grads(module: Any, inputs: Sequence[Any], labels: Any) -> tuple[float, dict[str, np.ndarray]]:
    import torch

    module.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(module(*inputs), labels)
    loss.backward()
    grads = {k: p.grad.detach().numpy().copy() for k, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


def _no_dropout(module: Any) -> list[Any]:
    import torch

    subs = [m for m in module.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training]
    for m in subs:
        m.eval()
    return subs


def optimize_module_training(module: Any, example_inputs: Sequence[Any], *, labels: Any = None,
                             rules: str = "default", cost: str = "fused[min]", algo: str = "taso",
                             budget_s: float = 12.0, seed: int = 0, threads: int | None = None,
                             min_speedup: float = 1.03, rounds: int = 5, steps: int = 3, lr: float = 0.01,
                             rtol: float = 1e-4, atol: float = 1e-5, timers: Timers | None = None) -> TrainedModule:
    """See the module docstring. ``labels``: one-hot (or soft) targets of the module's output for the timing and
    the gradient check (default: random one-hot). ``timers`` (:class:`~graphsub.optimize.timing.Timers`; None: the
    current ones): the training steps are timed by its ``train_steps`` on its ``clock``, which also times the steps
    of ``timings_s``. Raises VerificationError when the optimized module's loss or gradients differ from the
    module's."""
    import torch

    from graphsub.cost import get_model
    from graphsub.data import materialize
    from graphsub.frontends.torch_emit import module_source, to_module
    from graphsub.frontends.torch_export import export_module
    from graphsub.optimize.train_step import TorchTrainer
    from graphsub.optimize.verification import check_seeds
    from graphsub.rules.library import resolve_rules
    from graphsub.search import Budget, search
    from graphsub.spec import ModelSpec

    tm = resolve_timers(timers)
    clock = tm.clock
    t0 = clock()
    timings: dict[str, float] = {}
    xs = [x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x)) for x in example_inputs]
    with tempfile.TemporaryDirectory(prefix="graphsub-train-") as tmp:
        path = os.path.join(tmp, "module.onnx")
        export_module(module, xs, path, training=True)
        fwd = ModelSpec.parse(path).load()
    state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    trained = [n for n, p in module.named_parameters() if p.requires_grad]
    names = tuple(n for n in trained if n in {fwd.nodes[i].sig.attr["name"] for i in fwd.ops_of("weight")})
    graph, names = trainable_forward(fwd, params=names)
    timings["export_s"] = clock() - t0
    t = clock()
    cm = get_model(cost, threads=threads, progress=False)
    result = search(graph, resolve_rules(rules), cm, Budget(time_s=budget_s), seed, algo=algo)
    timings["search_s"] = clock() - t
    t = clock()
    best = result.best if result.sequence else graph
    ok = True
    if result.sequence:
        ok, _, _, _ = check_seeds(materialize(graph, seed), materialize(best, seed), (seed, seed + 1000), rtol=rtol,
                                  atol=atol)
        if not ok:
            best = graph
    timings["verify_s"] = clock() - t
    values = {n: state[n] for n in names}
    emitted = {k: to_module(freeze_params(g, values), trainable=names) for k, g in (("original", graph),
                                                                                     ("optimized", best))}
    labels_t = torch.from_numpy(np.asarray(labels if labels is not None else
                                           one_hot(xs[0].shape[0], int(module(*xs).shape[1]), seed)))
    dropped = _no_dropout(module.train())
    try:
        loss_ref, grads_ref = _grads(module, xs, labels_t)
        loss_opt, grads_opt = _grads(emitted["optimized"].train(), xs, labels_t)
        named: Any = emitted["optimized"]
        keys: dict[str, str] = dict(named.graph_names)  # graph weight name -> the module's state_dict key
        grad_d = max((float(np.max(np.abs(grads_ref[n] - grads_opt[keys[n]]))) for n in names), default=0.0)
        loss_d = abs(loss_ref - loss_opt)
        scale = max((float(np.max(np.abs(grads_ref[n]))) for n in names), default=1.0)
        if grad_d > atol + 10 * rtol * scale or loss_d > atol + rtol * abs(loss_ref):
            raise VerificationError(f"the optimized module's gradients differ from the module's: max abs diff "
                                    f"{grad_d:.3g} (largest gradient {scale:.3g}), loss diff {loss_d:.3g}")
        timings["check_s"] = clock() - t
        t = clock()
        x_np, y_np = [x.numpy() for x in xs], labels_t.numpy()
        runners = {"module": TorchTrainer(module, x_np, y_np, lr=lr, threads=threads),
                   "emitted_original": TorchTrainer(emitted["original"], x_np, y_np, lr=lr, threads=threads),
                   "optimized": TorchTrainer(emitted["optimized"], x_np, y_np, lr=lr, threads=threads),
                   "module_again": TorchTrainer(copy.deepcopy(module), x_np, y_np, lr=lr, threads=threads)}
        module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})  # timing steps moved it
        timed = tm.train_steps(runners, rounds=rounds, steps=steps, clock=clock)
        module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        timings["time_s"] = clock() - t
    finally:
        for m in dropped:
            m.train()
    speedup = timed.speedup("module", "optimized")
    aa = (timed.speedup("module", "module_again"), timed.faster_rounds("module", "module_again"))
    faster = timed.faster_rounds("module", "optimized")
    chosen = bool(result.sequence) and ok and speedup > min_speedup and faster >= 0.8
    final = emitted["optimized"] if chosen else module
    source = ""
    if chosen:
        final.load_state_dict({keys[n]: torch.from_numpy(state[n]) for n in names}, strict=False)
        source = module_source(freeze_params(best, values))
    decision = (f"optimized module {speedup:.3f}x faster per training step (faster in {faster:.0%} of the rounds)"
                if chosen else f"kept the module: the optimized one is {speedup:.3f}x per step (faster in {faster:.0%}"
                               f" of the rounds; {min_speedup:g}x and 80% needed)")
    timings["total_s"] = clock() - t0
    return TrainedModule(final, chosen, ok, grad_d, loss_d, speedup,
                         timed.speedup("module", "emitted_original"), faster,
                         [s.rule for s in result.sequence], decision, timed.rounds_ms, best, names, timings, aa,
                         source)


__all__ = ["TrainedModule", "one_hot", "optimize_module_training"]
