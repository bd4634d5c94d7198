"""The experiments of ``graphsub training bench``: per model, the training step of the original and the optimized
model in ONNX Runtime and in PyTorch eager, gradient agreement with ``torch.autograd``, and SGD loss curves.

A case starts from a PyTorch module (:mod:`graphsub.bench.train_models`: MetaFlow's Inception-v3, SqueezeNet and
ResNet-50, and a transformer encoder), exported as users export it for training
(:func:`graphsub.frontends.torch_export.export_module` with ``training=True``) and imported:

* **onnxruntime**: the training graph of the import (:func:`graphsub.training.build_training`) is the original;
  :func:`graphsub.optimize.optimize` searches, verifies and times it (every output, gradients included), with the
  ``forward-first`` candidate (:func:`graphsub.optimize.training.forward_first`) in its portfolio and without the
  peers (their passes target inference graphs); the chosen graph is then timed against the original on its training
  step (the graph's run on the step-0 weights and the batch: loss and every gradient) in fresh sessions
  (:func:`graphsub.optimize.decide.session_makers`).
* **PyTorch**: the original is the user's module with autograd; the optimized one is the searched forward graph
  with the trained weights as inputs (:func:`graphsub.training.trainable_forward`: nothing trained is folded)
  emitted as an ``nn.Module`` (:func:`graphsub.frontends.torch_emit.to_module`) with the module's own parameters;
  :func:`~graphsub.optimize.torch_training.optimize_module_training` times full SGD steps of fresh copies of both;
  the emitted *unoptimized* graph is timed too, so that what the emitter alone changes is visible.

Every "faster" of a case is the verdict of :func:`graphsub.optimize.decide.compare` (session groups of fresh units,
an A/A control in each, a t-test whose false-positive rate is ``alpha``): a case's record carries ``faster``,
``speedup_train`` with its ``speedup_ci``, ``aa_ratio``, ``rounds`` and ``sessions``, and the whole verdict as
``confirmation`` (:meth:`graphsub.optimize.decide.Verdict.to_dict`). The timing goes through
:class:`graphsub.optimize.timing.Timers` (``timers=``): sessions for onnxruntime, the step timer for PyTorch.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.optimize import decide
from graphsub.optimize.timing import Timers, resolve_timers
from graphsub.optimize.train_step import OrtTrainer, TorchTrainer
from graphsub.training import GRAD_PREFIX, TrainingSpec, build_training, initial_params


@dataclass
class Case:
    """A model ready to train: the module, one batch (inputs, one-hot labels) and its imported forward graph."""

    name: str
    module: Any
    inputs: list[np.ndarray]
    labels: np.ndarray
    forward: Graph
    batch: int
    image: int | None


def prepare(name: str, *, batch: int = 8, image: int | None = None, num_classes: int = 100, seed: int = 0) -> Case:
    """Build catalog model ``name``, draw a batch, export it for training and import it."""
    import torch

    from graphsub.bench.train_models import TRAIN_MODELS, build_model
    from graphsub.frontends.torch_export import export_module
    from graphsub.spec import ModelSpec

    entry = TRAIN_MODELS[name]
    size = entry.default_image if image is None else image
    module = build_model(name, num_classes=num_classes, seed=seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(entry.input_shape(batch, size)).astype(np.float32)
    labels = np.eye(num_classes, dtype=np.float32)[rng.integers(0, num_classes, size=batch)]
    with tempfile.TemporaryDirectory(prefix="graphsub-train-") as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        export_module(module, [torch.from_numpy(x)], path, training=True)
        graph = ModelSpec.parse(path).load()
    return Case(name, module, [x], labels, graph.renamed(name), batch, size if name != "encoder" else None)


def joint(case: Case) -> tuple[Graph, TrainingSpec, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The training graph of ``case``, its spec, the module's weights (its feeds at step 0) and the batch feeds."""
    g, spec = build_training(case.forward, loss="cross_entropy")
    params = initial_params(case.forward, spec)
    data = {n: x for n, x in zip(spec.data_inputs, case.inputs, strict=True)}
    assert spec.label_input is not None
    data[spec.label_input] = case.labels
    return g, spec, params, data


def torch_grads(case: Case) -> tuple[float, dict[str, np.ndarray]]:
    """The loss and the gradient of every parameter of the module, by ``torch.autograd`` (``train()`` mode, dropout
    off as in the export)."""
    import torch

    m = case.module.train()
    for sub in m.modules():
        if isinstance(sub, torch.nn.modules.dropout._DropoutNd):
            sub.eval()
    m.zero_grad(set_to_none=True)
    out = m(*(torch.from_numpy(x) for x in case.inputs))
    loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(case.labels))
    loss.backward()
    grads = {k: p.grad.detach().numpy().copy() for k, p in m.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def grad_agreement(case: Case, *, threads: int | None = None, rtol: float = 1e-4, atol: float = 1e-5,
                   float64: bool = True) -> dict[str, Any]:
    """The training graph in onnxruntime (``ORT_ENABLE_ALL``, as users run it) against ``torch.autograd`` on the
    module: largest absolute and relative difference of the loss and of every gradient (relative to the gradient's
    largest absolute value), and the verdict of the one tolerance policy (:func:`graphsub.equivalence.check_gradients`
    with ``Tolerance(rtol, atol)``): ``verified``, ``verified_in`` (``float32``, ``float64`` or None), ``error`` and
    ``float64``. When float32 differs by tolerance alone and ``float64``, graphsub's training graph in float64 (the
    reference executor, :func:`graphsub.equivalence.as_float64`) is compared with the module's autograd in double
    precision: float32 evaluation order alone does not fail the agreement."""
    from graphsub.equivalence import Tolerance, as_float64, check_gradients
    from graphsub.execute import run
    from graphsub.frontends.onnx_export import export_graph
    from graphsub.frontends.ort import make_session, run_session

    g, spec, params, data = joint(case)
    sess = make_session(export_graph(g).SerializeToString(), optimization="all", threads=threads)
    outs = dict(zip(g.output_names, run_session(sess, {**data, **params}), strict=True))
    loss, want = torch_grads(case)

    def named(loss_value: Any, grads: dict[str, np.ndarray], prefixed: bool) -> dict[str, Any]:
        return {"loss": loss_value, **{GRAD_PREFIX + n: grads[GRAD_PREFIX + n if prefixed else n]
                                       for n in spec.params}}

    def in_float64() -> tuple[dict[str, Any], dict[str, Any]]:
        feeds = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in {**data, **params}.items()}
        ours = run(as_float64(g), feeds)
        c64 = dataclasses.replace(case, module=copy.deepcopy(case.module).double(),
                                  inputs=[x.astype(np.float64) for x in case.inputs],
                                  labels=case.labels.astype(np.float64))
        loss64, theirs = torch_grads(c64)
        return named(ours["loss"], ours, True), named(loss64, theirs, False)

    chk = check_gradients(named(outs["loss"], outs, True), named(loss, want, False), Tolerance(rtol, atol),
                          float64=in_float64 if float64 else None)
    worst_abs, worst_rel, worst_name = 0.0, 0.0, ""
    for name in spec.params:
        got = outs[GRAD_PREFIX + name]
        ref = want[name]
        d = float(np.max(np.abs(got - ref)))
        rel = d / max(float(np.max(np.abs(ref))), 1e-12)
        if rel > worst_rel:
            worst_rel, worst_name = rel, name
        worst_abs = max(worst_abs, d)
    missing = sorted(set(want) - set(spec.params))
    return {"model": case.name, "params": len(spec.params), "grads_compared": len(spec.params),
            "untrained_in_graph": missing, "loss_abs_diff": abs(float(outs["loss"]) - loss),
            "max_grad_abs_diff": worst_abs, "max_grad_rel_diff": worst_rel, "worst_grad": worst_name,
            "verified": chk.verified, "error": chk.error, "float64": chk.float64,
            "verified_in": ("float64" if chk.float64 else "float32") if chk.verified else None}


def verdict_fields(v: decide.Verdict) -> dict[str, Any]:
    """A case record's view of a verdict: ``faster``, ``speedup_train``, ``speedup_ci``, ``aa_ratio``, ``rounds``,
    ``sessions``, the verdict's ``reason`` and the whole verdict (``confirmation``)."""
    return {"faster": v.faster, "speedup_train": v.speedup,
            "speedup_ci": None if v.speedup_ci is None else list(v.speedup_ci), "aa_ratio": v.aa_ratio,
            "rounds": v.rounds, "sessions": v.groups, "reason": v.reason, "confirmation": v.to_dict()}


def _median(xs: Any) -> float | None:
    return statistics.median(xs) if len(xs) else None


def ort_case(case: Case, *, threads: int, budget_s: float, seed: int = 0, groups: int = decide.GROUPS,
             rounds: int = decide.ROUNDS_PER_GROUP, budget_ms: float = 200.0, min_speedup: float = decide.MIN_SPEEDUP,
             alpha: float = decide.ALPHA, timers: Timers | None = None) -> dict[str, Any]:
    """Optimize the training graph for onnxruntime at ``threads`` and time the training step of both: ``groups``
    session groups of ``rounds`` paired rounds of ``budget_ms`` each (:func:`graphsub.optimize.decide.compare`, fresh
    sessions of ``timers``; None: the current ones)."""
    from graphsub.frontends.onnx_export import export_graph
    from graphsub.optimize import optimize
    from graphsub.optimize.training import backward_rules, compare_steps, forward_first

    tm = resolve_timers(timers)
    g, spec, params, data = joint(case)
    t0 = time.perf_counter()
    cands = [backward_rules(g, threads=threads, deadline_s=0.2 * budget_s),
             forward_first(case.forward, spec, budget_s=0.16 * budget_s, seed=seed, threads=threads)]
    res = optimize(g, time_s=budget_s, started=t0, threads=threads, seed=seed, peers=(),
                   extra_candidates=[c for c in cands if c is not None], timing_feeds={**data, **params},
                   min_speedup=min_speedup, timers=tm)
    opt_s = time.perf_counter() - t0
    original = export_graph(g).SerializeToString()
    cand = res.chosen_candidate
    chosen = cand.data if cand is not None else original
    loss_d, grad_d, scale = compare_steps(original, chosen, {**data, **params}, threads=threads)
    a, b = decide.session_makers(original, chosen, {**data, **params}, threads=threads, timers=tm)
    v = decide.compare(a, b, budget_ms=budget_ms, min_speedup=min_speedup, alpha=alpha, groups=groups,
                       rounds_per_group=rounds, clock=tm.clock)
    m = v.measured
    return {"runtime": "onnxruntime", "model": case.name, "batch": case.batch, "image": case.image,
            "threads": threads, "verified": res.verified, "chosen": res.chosen or "original",
            "max_grad_abs_diff": grad_d, "max_loss_abs_diff": loss_d, "max_abs_grad": scale,
            "step_ms_original": _median(m.a), "step_ms_optimized": _median(m.b), **verdict_fields(v),
            "rounds_ms": {"original": list(m.a), "optimized": list(m.b), "original_again": list(m.c)},
            "load_avg": list(os.getloadavg()), "optimize_s": opt_s, "decision": res.decision,
            "applied": [s["rule"] for s in res.applied], "ops_joint": g.num_ops,
            "candidates": {c.name: c.speedup for c in res.candidates},
            "candidate_notes": {c.name: c.error or (f"same file as {c.same_as}" if c.same_as else "")
                                for c in res.candidates},
            "candidate_rules": {c.name: [s.rule for s in c.steps] for c in res.candidates},
            "speedup_in_optimize": res.speedup("all")}


def torch_case(case: Case, *, threads: int, budget_s: float, seed: int = 0, groups: int = decide.GROUPS,
               rounds: int = decide.ROUNDS_PER_GROUP, steps: int = 3, budget_ms: float = 200.0,
               min_speedup: float = decide.MIN_SPEEDUP, alpha: float = decide.ALPHA,
               timers: Timers | None = None) -> dict[str, Any]:
    """Optimize the module for training in PyTorch (:func:`graphsub.optimize.torch_training.optimize_module_training`,
    which decides by :func:`graphsub.optimize.decide.compare` on fresh copies of the module and of the optimized one)
    and report its verdict, and the step times of the module, the emitted original graph and the emitted optimized
    one."""
    import torch

    from graphsub.optimize.torch_training import optimize_module_training

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    r = optimize_module_training(case.module, [torch.from_numpy(x) for x in case.inputs], labels=case.labels,
                                 budget_s=budget_s, seed=seed, threads=threads, groups=groups, rounds=rounds,
                                 steps=steps, budget_ms=budget_ms, min_speedup=min_speedup, alpha=alpha,
                                 timers=timers)
    med = {k: _median(v) for k, v in r.rounds_ms.items()}
    assert r.verdict is not None
    return {"runtime": "pytorch", "model": case.name, "batch": case.batch, "image": case.image, "threads": threads,
            "verified": r.verified, "chosen": "optimized" if r.optimized else "original",
            "max_grad_abs_diff": r.max_grad_abs_diff, "max_loss_abs_diff": r.max_loss_abs_diff,
            "step_ms_original": med.get("module"), "step_ms_emitted_original": med.get("emitted_original"),
            "step_ms_optimized": med.get("optimized"), **verdict_fields(r.verdict),
            "speedup_emitted_original": r.speedup_emitted_original,
            "emitted_original": None if r.emitted_verdict is None else r.emitted_verdict.to_dict(),
            "rounds_ms": r.rounds_ms, "load_avg": list(os.getloadavg()), "optimize_s": time.perf_counter() - t0,
            "decision": r.decision, "applied": r.applied}


def loss_curves(case: Case, *, steps: int = 100, lr: float = 0.01, threads: int | None = None, budget_s: float = 12.0,
                seed: int = 0, perturb: float = 1e-7, backward: bool = True) -> dict[str, Any]:
    """``steps`` SGD steps on the same batch from the module's weights: the optimized training graph in
    onnxruntime against the original module in PyTorch, and the control -- the module with its weights perturbed by
    ``perturb`` -- against the original. The first two agree to float rounding when the control differs as much.
    ``backward``: also apply the ``backward-rules`` candidate (the conv-gradient rewrites) to the searched graph."""
    import torch

    from graphsub.frontends.onnx_export import export_graph
    from graphsub.optimize import optimize
    from graphsub.optimize.training import backward_rules

    g, _, params, data = joint(case)
    res = optimize(g, time_s=budget_s, threads=threads, seed=seed, peers=(), measure_latency=False, seeds=1)
    applied = [s.rule for s in res.search.sequence] if res.verified else []
    graph = res.graph if res.verified else g
    if backward:  # the backward-rules candidate on top of the search's graph (as the portfolio would time it)
        cand = backward_rules(graph, threads=threads)
        if cand is not None:
            graph, applied = cand[1], applied + [s.rule for s in cand[2]]
    chosen = export_graph(graph).SerializeToString()
    ort = OrtTrainer(chosen, params, data, lr=lr, threads=threads)
    state = {k: v.detach().clone() for k, v in case.module.state_dict().items()}
    curves: dict[str, list[float]] = {"optimized_ort": [], "original_torch": [], "control_torch": []}
    ref = TorchTrainer(case.module, case.inputs, case.labels, lr=lr, threads=threads)
    for _ in range(steps):
        curves["original_torch"].append(ref.step())
        curves["optimized_ort"].append(ort.step())
    case.module.load_state_dict(state)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in case.module.parameters():
            p.add_(perturb * torch.randn(p.shape, generator=gen))
    ctl = TorchTrainer(case.module, case.inputs, case.labels, lr=lr, threads=threads)
    for _ in range(steps):
        curves["control_torch"].append(ctl.step())
    case.module.load_state_dict(state)
    a, b, c = (np.asarray(curves[k]) for k in ("original_torch", "optimized_ort", "control_torch"))
    return {"model": case.name, "steps": steps, "lr": lr, "applied": applied,
            "verified": res.verified, "loss_first": float(a[0]), "loss_last": float(a[-1]),
            "max_abs_diff_optimized": float(np.max(np.abs(a - b))),
            "max_abs_diff_control": float(np.max(np.abs(a - c))), "curves": curves}


__all__ = ["Case", "grad_agreement", "joint", "loss_curves", "ort_case", "prepare", "torch_case", "torch_grads",
           "verdict_fields"]
