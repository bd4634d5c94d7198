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
4. time full SGD steps (forward, backward, update) of the module and of the emitted optimized one, and decide by
   :func:`graphsub.optimize.decide.compare`: session groups of fresh units (each a :class:`TorchTrainer` on a new
   deep copy of the module, of the optimized module and of the module again -- the A/A control), paired rounds,
   and a one-sided t-test over the groups whose false-positive rate is ``alpha``. The optimized module is chosen when
   the verdict says *faster* (:attr:`graphsub.optimize.decide.Verdict.faster`), otherwise the module itself; the
   decision text is the verdict's reason. The emitted *unoptimized* graph is timed against the module too, in a
   shorter measurement (:data:`~graphsub.optimize.decide.MIN_GROUPS` groups of one round): what emission alone
   changes, reported, never decided on. ``TrainedModule.source`` is then the chosen module's class as Python source
   (``graphsub optimize FILE.py:Class --training -o OUT.py`` writes it, with its weights as ``OUT.pt``).

The step times go through :class:`~graphsub.optimize.timing.Timers`' step timer
(:func:`graphsub.optimize.train_step.timer_factory`): a test fakes them there.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.equivalence import GradientCheck, Tolerance, check_gradients
from graphsub.errors import VerificationError
from graphsub.ir.graph import Graph
from graphsub.optimize import decide
from graphsub.optimize.config import OptimizeConfig
from graphsub.optimize.timing import Timers, resolve_timers
from graphsub.rules.rule import Rule
from graphsub.training import GRAD_PREFIX, freeze_params, trainable_forward


@dataclass
class TrainedModule:
    """The module to train (``module``: the optimized emitted module, or the user's own when it was not faster) and
    what was measured: ``verdict`` -- the decision on the optimized module against the module
    (:class:`graphsub.optimize.decide.Verdict`: its speedup and interval, the A/A ratio, rounds and session groups);
    ``emitted_verdict`` -- the emitted unoptimized graph against the module (informational)."""

    module: Any
    optimized: bool
    verified: bool
    max_grad_abs_diff: float
    max_loss_abs_diff: float
    verdict: decide.Verdict | None = None
    emitted_verdict: decide.Verdict | None = None
    applied: list[str] = field(default_factory=list)
    decision: str = ""
    graph: Graph | None = None
    params: tuple[str, ...] = ()
    timings_s: dict[str, float] = field(default_factory=dict)
    source: str = ""  # the optimized module's class (frontends.torch_emit.module_source) when it was chosen

    @property
    def speedup_train(self) -> float | None:
        """The optimized module's speedup per training step (the verdict's), None when not measured."""
        return None if self.verdict is None else self.verdict.speedup

    @property
    def speedup_emitted_original(self) -> float | None:
        """The emitted unoptimized graph's speedup over the module: what emission alone changes."""
        return None if self.emitted_verdict is None else self.emitted_verdict.speedup

    @property
    def aa_ratio(self) -> float | None:
        """The module against fresh copies of itself (the A/A control of the verdict): the noise floor."""
        return None if self.verdict is None else self.verdict.aa_ratio

    @property
    def rounds_ms(self) -> dict[str, list[float]]:
        """Per variant, its median step (ms) in each round: ``module``, ``optimized`` and ``module_again`` (the
        verdict's rounds) and ``emitted_original`` (the emitted measurement's)."""
        out: dict[str, list[float]] = {}
        if self.verdict is not None:
            m = self.verdict.measured
            out.update(module=list(m.a), optimized=list(m.b), module_again=list(m.c))
        if self.emitted_verdict is not None:
            out["emitted_original"] = list(self.emitted_verdict.measured.b)
        return out

    def state_bytes(self) -> bytes:
        """``torch.save`` of the module's state dict (the weights file written beside :attr:`source`)."""
        import io

        import torch

        buf = io.BytesIO()
        torch.save(self.module.state_dict(), buf)
        return buf.getvalue()

    def write(self, output: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write the chosen module as ``OUT.py`` (its class, :attr:`source`) and ``OUT.pt`` (its state dict), each
        atomically; only an optimized module has a class to write (ValueError otherwise)."""
        from graphsub.optimize.output import write_bytes

        if not self.optimized:
            raise ValueError("the module itself was kept: there is no optimized module to write")
        output = Path(output)
        weights = output.with_suffix(".pt")
        header = (f"# Written by graphsub optimize --training: {type(self.module).__name__} computes the optimized "
                  f"training forward graph.\n# Load it with: m = GraphModule(); "
                  f"m.load_state_dict(torch.load({weights.name!r}))\n# (the parameters keep the original module's "
                  "state_dict names: its own weights load too).\n")
        write_bytes(self.state_bytes(), weights, suffix=".pt")
        return write_bytes((header + self.source).encode(), output, suffix=".py"), weights

    def to_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {"training": True, "runtime": "pytorch", "optimized": self.optimized, "verified": self.verified,
                "max_grad_abs_diff": self.max_grad_abs_diff, "max_loss_abs_diff": self.max_loss_abs_diff,
                "speedup_train": self.speedup_train,
                "speedup_ci": None if v is None or v.speedup_ci is None else list(v.speedup_ci),
                "aa_ratio": self.aa_ratio, "rounds": 0 if v is None else v.rounds,
                "sessions": 0 if v is None else v.groups,
                "speedup_emitted_original": self.speedup_emitted_original, "applied": self.applied,
                "decision": self.decision, "confirmation": None if v is None else v.to_dict(),
                "emitted_original": None if self.emitted_verdict is None else self.emitted_verdict.to_dict(),
                "rounds_ms": self.rounds_ms, "params": len(self.params), "timings_s": self.timings_s}


#: the share of the budget (``time_s``) the PyTorch route's forward search gets; the rest: export, the gradient
#: check and the timed training steps
SEARCH_SHARE = 0.4


def optimize_module_training_with(module: Any, example_inputs: Sequence[Any], config: OptimizeConfig) -> TrainedModule:
    """:func:`optimize_module_training` with the settings of one :class:`~graphsub.optimize.config.OptimizeConfig`
    (what ``graphsub optimize FILE.py:Class --training -o OUT.py`` runs): its rules, cost, algorithm, seed, threads,
    threshold, tolerances and timers; the forward search gets :data:`SEARCH_SHARE` of ``time_s``."""
    from graphsub.optimize.config import DEFAULT_BUDGET_S

    cfg = config.check()
    budget_s = SEARCH_SHARE * cfg.time_s if cfg.time_s is not None else DEFAULT_BUDGET_S
    return optimize_module_training(module, example_inputs, rules=cfg.rules, cost=cfg.cost, algo=cfg.algo,
                                    budget_s=budget_s, seed=cfg.seed, threads=cfg.threads,
                                    min_speedup=cfg.min_speedup, rtol=cfg.rtol, atol=cfg.atol, timers=cfg.timers)


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


def _check_grads(module: Any, emitted: Any, keys: Mapping[str, str], names: Sequence[str], xs: Sequence[Any],
                 labels: Any, ref: tuple[float, dict[str, np.ndarray]], opt: tuple[float, dict[str, np.ndarray]],
                 tolerance: Tolerance) -> GradientCheck:
    """The loss and every gradient of the emitted module (``opt``) against the module's (``ref``), by the one
    tolerance policy (:func:`graphsub.equivalence.check_gradients`); when they differ by tolerance alone, both are
    computed again in float64 (copies of the two modules in double precision) and compared at
    :meth:`~graphsub.equivalence.Tolerance.float64`: float32 evaluation order alone does not reject an exact
    module. ``keys``: graph weight name -> the emitted module's parameter name."""
    import copy

    def named(loss: float, grads: Mapping[str, np.ndarray], key: Mapping[str, str] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"loss": loss}
        for n in names:
            k = key.get(n, n) if key is not None else n
            if k in grads:
                out[GRAD_PREFIX + n] = grads[k]
        return out

    def in_float64() -> tuple[dict[str, Any], dict[str, Any]]:
        x64, y64 = [x.double() for x in xs], labels.double()
        loss_r, grads_r = _grads(copy.deepcopy(module).double(), x64, y64)
        loss_o, grads_o = _grads(copy.deepcopy(emitted).double(), x64, y64)
        return named(loss_o, grads_o, keys), named(loss_r, grads_r, None)

    want = {"loss": ref[0], **{GRAD_PREFIX + n: ref[1][n] for n in names if n in ref[1]}}
    return check_gradients(named(opt[0], opt[1], keys), want, tolerance, float64=in_float64)


def _no_dropout(module: Any) -> list[Any]:
    import torch

    subs = [m for m in module.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training]
    for m in subs:
        m.eval()
    return subs


def optimize_module_training(module: Any, example_inputs: Sequence[Any], *, labels: Any = None,
                             rules: str | Sequence[Rule] = "default", cost: str = "fused[min]", algo: str = "taso",
                             budget_s: float = 12.0, seed: int = 0, threads: int | None = None,
                             min_speedup: float = decide.MIN_SPEEDUP, groups: int = decide.GROUPS,
                             rounds: int = decide.ROUNDS_PER_GROUP, steps: int = 3, budget_ms: float = 200.0,
                             alpha: float = decide.ALPHA, lr: float = 0.01, rtol: float = 1e-4, atol: float = 1e-5,
                             timers: Timers | None = None) -> TrainedModule:
    """See the module docstring. ``labels``: one-hot (or soft) targets of the module's output for the timing and
    the gradient check (default: random one-hot). The timing: ``groups`` session groups of ``rounds`` paired rounds
    (:func:`graphsub.optimize.decide.compare`), a round of a variant being at least ``steps`` SGD steps and as many
    more as fit in ``budget_ms`` (their median); ``alpha``: the decision's false-positive rate. ``timers``
    (:class:`~graphsub.optimize.timing.Timers`; None: the current ones): the steps are timed by its step timer
    (:func:`graphsub.optimize.train_step.timer_factory`) on its ``clock``, which also times the steps of
    ``timings_s``. Raises VerificationError when the optimized module's loss or gradients differ from the
    module's."""
    import torch

    from graphsub.cost import get_model
    from graphsub.data import materialize
    from graphsub.frontends.torch_emit import module_source, to_module
    from graphsub.frontends.torch_export import export_module
    from graphsub.optimize.train_step import torch_maker
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
        grad_check = _check_grads(module, named, keys, names, xs, labels_t, (loss_ref, grads_ref),
                                  (loss_opt, grads_opt), Tolerance(rtol, atol))
        grad_d, loss_d = grad_check.max_grad_abs_diff, grad_check.loss_abs_diff
        if not grad_check.verified:
            raise VerificationError(f"the optimized module's loss or gradients differ from the module's: "
                                    f"{grad_check.error}")
        timings["check_s"] = clock() - t
        t = clock()
        x_np, y_np = [x.numpy() for x in xs], labels_t.numpy()

        def maker(m: Any, name: str) -> decide.Maker:  # fresh copies: the module itself is never stepped
            return torch_maker(m, x_np, y_np, name=name, lr=lr, threads=threads, steps=steps, timers=tm)

        verdict = decide.compare(maker(module, "module"), maker(emitted["optimized"], "optimized"),
                                 budget_ms=budget_ms, min_speedup=min_speedup, alpha=alpha, groups=groups,
                                 rounds_per_group=rounds, clock=clock)
        emitted_verdict = decide.verdict(  # informational: what emission alone changes
            decide.measure(maker(module, "module"), maker(emitted["original"], "emitted_original"),
                           budget_ms=budget_ms, groups=decide.MIN_GROUPS, rounds_per_group=1, clock=clock),
            min_speedup=min_speedup, alpha=alpha)
        module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        timings["time_s"] = clock() - t
    finally:
        for m in dropped:
            m.train()
    chosen = bool(result.sequence) and ok and verdict.faster
    final = emitted["optimized"] if chosen else module
    source = ""
    if chosen:
        final.load_state_dict({keys[n]: torch.from_numpy(state[n]) for n in names}, strict=False)
        source = module_source(freeze_params(best, values))
    if chosen:
        decision = f"chose the optimized module: per training step it is {verdict.reason}"
    elif not result.sequence:
        decision = "kept the module: no cheaper equivalent graph found"
    elif not ok:
        decision = "kept the module: the optimized graph failed verification"
    elif verdict.speedup is None:
        decision = f"kept the module: the optimized one's training steps were not measured ({verdict.reason})"
    else:
        decision = f"kept the module: per training step the optimized one is {verdict.reason}"
    timings["total_s"] = clock() - t0
    return TrainedModule(final, chosen, ok, grad_d, loss_d, verdict=verdict, emitted_verdict=emitted_verdict,
                         applied=[s.rule for s in result.sequence], decision=decision, graph=best, params=names,
                         timings_s=timings, source=source)


__all__ = ["SEARCH_SHARE", "TrainedModule", "one_hot", "optimize_module_training", "optimize_module_training_with"]
