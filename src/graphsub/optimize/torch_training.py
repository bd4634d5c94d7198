"""``optimize_module(..., training=True)``: a PyTorch module optimized for training, returned as a module.

PyTorch differentiates by itself, so the graph searched is the *forward* one with the trained weights as inputs
(:func:`graphsub.training.trainable_forward`): no rule can fold a transform of a trained weight into a constant,
and a merge or an enlargement of weights stays an op computed every step, which autograd differentiates. Steps:

1. export the module as it trains (:func:`graphsub.frontends.torch_export.export_module` with ``training=True``:
   batch norms with the batch's statistics, weights under their ``state_dict`` names, dropout left out) and import
   it;
2. optimize the trainable forward graph with :func:`graphsub.optimize.optimize` -- the same pipeline as every other
   model, with a :class:`ModuleTarget` as its target (:mod:`graphsub.optimize.target`): the budget planned from the
   registered sources' estimates, the main search and the sources of graphsub's own rules (``eqsat``; a peer's file
   or ONNX Runtime's contrib ops do not emit as a module), each candidate verified against the forward graph on
   random draws (:mod:`graphsub.equivalence`);
3. the target's check: each verified candidate is emitted as a module (:func:`graphsub.frontends.torch_emit.
   to_module`) holding copies of the module's parameters, and its loss and every gradient of ``loss.backward()`` on
   the example batch are compared with the module's own, by the one tolerance policy (float64 where float32
   rounding alone moves them);
4. the target's timing: full SGD steps (forward, backward, update) of the module and of each emitted candidate, in
   session groups of fresh units (each a :class:`~graphsub.optimize.train_step.TorchTrainer` on a new deep copy of
   the module, of the candidate's module and of the module again -- the A/A control), paired rounds, decided by
   :mod:`graphsub.optimize.decide` at ``alpha / k`` for ``k`` candidates (:func:`graphsub.optimize.race.
   confirm_each`). The fastest candidate the decision declares faster is chosen, otherwise the module itself; the
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
from typing import TYPE_CHECKING, Any

import numpy as np

from graphsub.equivalence import GradientCheck, Tolerance, check_gradients
from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.optimize import decide
from graphsub.optimize.candidates import Candidate
from graphsub.optimize.config import OptimizeConfig
from graphsub.optimize.result import OptimizeResult
from graphsub.optimize.target import Target
from graphsub.optimize.timing import Timers, resolve_timers
from graphsub.training import GRAD_PREFIX, freeze_params, trainable_forward

if TYPE_CHECKING:
    from graphsub.optimize.sources.base import Source


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



@dataclass(eq=False)
class ModuleTarget(Target):
    """A PyTorch module trained in PyTorch, as the target of :func:`graphsub.optimize.optimize` (see the module
    docstring): the graph optimized is the module's trainable forward graph; it accepts only the sources of graphsub's
    own rules (their candidates emit as modules); :meth:`check` emits a verified candidate as a module and compares its
    loss and every gradient with the module's own ``loss.backward()`` (:func:`_check_grads`); :meth:`makers` time full
    SGD steps of fresh copies of the module and of the emitted one (:func:`graphsub.optimize.train_step.torch_maker`).
    ``inputs`` and ``labels`` are torch tensors, ``params`` the trained weights' names, ``values`` their data."""

    module: Any
    inputs: Sequence[Any]
    labels: Any
    params: tuple[str, ...]
    values: Mapping[str, np.ndarray]
    cleanup = False  # the weights are trained: none is folded into a constant or merged with an equal one
    tolerance: Tolerance
    lr: float = 0.01
    steps: int = 3
    threads: int | None = None
    timers: Timers | None = None
    groups: int = decide.GROUPS
    rounds: int = decide.ROUNDS_PER_GROUP
    budget_ms: float = 200.0
    alpha: float = decide.ALPHA
    own_timing: bool = True
    emitted: dict[str, Any] = field(default_factory=dict)  # candidate name -> its emitted module (checked)
    checks: dict[str, GradientCheck] = field(default_factory=dict)  # candidate name -> its gradient check
    _reference: tuple[float, dict[str, np.ndarray]] | None = None

    def accepts(self, source: Source) -> bool:
        return source.graphs

    def emit(self, graph: Graph) -> Any:
        """``graph`` (a trainable forward graph) as a module holding the trained weights' values."""
        from graphsub.frontends.torch_emit import to_module

        return to_module(freeze_params(graph, dict(self.values)), trainable=self.params)

    def reference(self) -> tuple[float, dict[str, np.ndarray]]:
        """The module's own loss and gradients on the example batch (computed once)."""
        if self._reference is None:
            self._reference = _grads(self.module, self.inputs, self.labels)
        return self._reference

    def check(self, candidate: Candidate) -> str | None:
        if candidate.graph is None:
            return "no graph to emit as a PyTorch module"
        try:
            emitted = self.emit(candidate.graph)
        except GraphsubError as e:
            return f"cannot be emitted as a PyTorch module: {e}"
        opt = _grads(emitted.train(), self.inputs, self.labels)
        chk = _check_grads(self.module, emitted, dict(emitted.graph_names), self.params, self.inputs, self.labels,
                           self.reference(), opt, self.tolerance)
        self.checks[candidate.name] = chk
        if not chk.verified:
            return f"the emitted module's loss or gradients differ from the module's: {chk.error}"
        self.emitted[candidate.name] = emitted
        return None

    def maker(self, module: Any, name: str) -> decide.Maker:
        """Fresh units of SGD steps of copies of ``module`` (the module itself is never stepped)."""
        from graphsub.optimize.train_step import torch_maker

        return torch_maker(module, [x.numpy() for x in self.inputs], self.labels.numpy(), name=name, lr=self.lr,
                           threads=self.threads, steps=self.steps, timers=self.timers)

    def makers(self, candidate: Candidate) -> tuple[decide.Maker, decide.Maker]:
        return self.maker(self.module, "module"), self.maker(self.emitted[candidate.name], "optimized")

    def where(self, threads: int) -> str:
        return f"per training step in PyTorch at {self.threads or threads} thread(s)"


def optimize_module_training_with(module: Any, example_inputs: Sequence[Any], config: OptimizeConfig) -> TrainedModule:
    """:func:`optimize_module_training` with the settings of one :class:`~graphsub.optimize.config.OptimizeConfig`
    (what ``graphsub optimize FILE.py:Class --training -o OUT.py`` runs)."""
    return optimize_module_training(module, example_inputs, config=config)


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
                             config: OptimizeConfig | None = None, budget_s: float | None = None,
                             groups: int = decide.GROUPS, rounds: int = decide.ROUNDS_PER_GROUP, steps: int = 3,
                             budget_ms: float = 200.0, alpha: float = decide.ALPHA, lr: float = 0.01,
                             **settings: Any) -> TrainedModule:
    """See the module docstring. ``config`` and ``settings`` are :func:`graphsub.optimize.optimize`'s (rules, cost,
    algorithm, seed, threads, ``min_speedup``, tolerances, timers, ``time_s``, ``eqsat_s`` ...); ``budget_s``: the
    main search's seconds (and, without a config or a ``time_s``, no bound on the whole call). ``labels``: one-hot
    (or soft) targets of the module's output for the timing and the gradient check (default: random one-hot). The
    timing of a candidate: ``groups`` session groups of ``rounds`` paired rounds (:func:`graphsub.optimize.decide.
    measure`), a round of a variant being at least ``steps`` SGD steps and as many more as fit in ``budget_ms``
    (their median); ``alpha``: the decision's false-positive rate. The config's timers
    (:class:`~graphsub.optimize.timing.Timers`; None: the current ones) time the steps by their step timer
    (:func:`graphsub.optimize.train_step.timer_factory`) on their ``clock``, which also times ``timings_s``.
    ``verified`` is False when the search's result fails a check (its graph against the forward graph in ONNX
    Runtime, or its emitted module's gradients against the module's); nothing else is then chosen."""
    import dataclasses

    import torch

    from graphsub.frontends.torch_emit import module_source
    from graphsub.optimize.pipeline import optimize
    from graphsub.search import Budget

    if budget_s is not None:
        settings.setdefault("budget", Budget(time_s=budget_s))
        if config is None:
            settings.setdefault("time_s", None)
    cfg = dataclasses.replace(OptimizeConfig.build(config, **settings).check(), measure_latency=True,
                              input_shapes=None)
    tm = resolve_timers(cfg.timers)
    clock = tm.clock
    t0 = clock()
    xs = [x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x)) for x in example_inputs]
    graph, names, state = _trainable_forward(module, xs)
    labels_t = torch.from_numpy(np.asarray(labels if labels is not None else
                                           one_hot(xs[0].shape[0], int(module(*xs).shape[1]), cfg.seed)))
    target = ModuleTarget(module, xs, labels_t, names, {n: state[n] for n in names}, Tolerance(cfg.rtol, cfg.atol),
                          lr=lr, steps=steps, threads=cfg.threads, timers=tm, groups=groups, rounds=rounds,
                          budget_ms=budget_ms, alpha=alpha)
    timings = {"export_s": clock() - t0}
    dropped = _no_dropout(module.train())
    torch_threads = torch.get_num_threads()  # the trainers set theirs: the caller's is restored
    try:
        res = optimize(graph, config=dataclasses.replace(cfg, timers=tm), target=target)
        t = clock()
        emitted_verdict = decide.verdict(  # informational: what emission alone changes
            decide.measure(target.maker(module, "module"), target.maker(target.emit(graph), "emitted_original"),
                           budget_ms=budget_ms, groups=decide.MIN_GROUPS, rounds_per_group=1, clock=clock),
            min_speedup=cfg.min_speedup, alpha=alpha)
        timings["emitted_s"] = clock() - t
        module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    finally:
        torch.set_num_threads(torch_threads)
        for m in dropped:
            m.train()
    chosen = None if res.kept_original else res.chosen_candidate
    searched = target.checks.get("search")
    verified = res.verified and (searched is None or searched.verified)
    check = target.checks.get(chosen.name if chosen is not None else "search") or searched
    final, source = module, ""
    if chosen is not None:
        final = target.emitted[chosen.name]
        keys = dict(final.graph_names)
        final.load_state_dict({keys[n]: torch.from_numpy(state[n]) for n in names}, strict=False)
        source = module_source(freeze_params(chosen.graph, dict(target.values)))
    timings.update({k: v for k, v in res.timings_s.items() if k != "total_s"}, total_s=clock() - t0)
    return TrainedModule(final, chosen is not None, verified, 0.0 if check is None else check.max_grad_abs_diff,
                         0.0 if check is None else check.loss_abs_diff, verdict=res.verdict,
                         emitted_verdict=emitted_verdict,
                         applied=[s.rule for s in (chosen.steps if chosen is not None else res.search.sequence)],
                         decision=_decision(res, chosen, verified, searched), graph=res.graph, params=names,
                         timings_s=timings, source=source)


def _trainable_forward(module: Any, xs: Sequence[Any]) -> tuple[Graph, tuple[str, ...], dict[str, np.ndarray]]:
    """The module exported as it trains (step 1 of the module docstring), as a trainable forward graph; the names of
    its trained weights (``state_dict`` names) and the module's state dict as arrays."""
    from graphsub.frontends.torch_export import export_module
    from graphsub.spec import ModelSpec

    with tempfile.TemporaryDirectory(prefix="graphsub-train-") as tmp:
        path = os.path.join(tmp, "module.onnx")
        export_module(module, xs, path, training=True)
        fwd = ModelSpec.parse(path).load()
    state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    trained = [n for n, p in module.named_parameters() if p.requires_grad]
    names = tuple(n for n in trained if n in {fwd.nodes[i].sig.attr["name"] for i in fwd.ops_of("weight")})
    graph, names = trainable_forward(fwd, params=names)
    return graph, names, state


def _decision(res: OptimizeResult, chosen: Candidate | None, verified: bool, searched: GradientCheck | None) -> str:
    """One line: the module chosen, or why the module itself was kept."""
    v = res.verdict
    if chosen is not None and v is not None:
        return f"chose the optimized module ({chosen.name}): per training step it is {v.reason}"
    if not res.verified:
        return f"kept the module: the optimized graph failed verification ({res.decision})"
    if not verified and searched is not None:
        return f"kept the module: the optimized module's loss or gradients differ from the module's: {searched.error}"
    if not res.candidates:
        return "kept the module: no cheaper equivalent graph found"
    if not any(c.verified for c in res.candidates):
        errors = "; ".join(f"{c.name}: {c.error}" for c in res.candidates if c.error)
        return f"kept the module: no candidate passed the checks ({errors or 'none verified'})"
    if v is None or v.speedup is None:
        return f"kept the module: the optimized one's training steps were not measured ({res.decision})"
    return f"kept the module: per training step the optimized one is {v.reason}"


__all__ = ["ModuleTarget", "TrainedModule", "one_hot", "optimize_module_training", "optimize_module_training_with"]
