"""``optimize_module``: optimize a PyTorch module through ONNX and get back an onnxruntime callable.

The module is exported with torch's ONNX exporter (:mod:`graphsub.frontends.torch_export`: TorchScript-based,
opset 17, static shapes from ``example_inputs``), optimized with :func:`graphsub.optimize.optimize` (verified,
timed, the original kept unless faster), and the written model is checked once more against the *module's own
outputs* on the example inputs and on random draws of the same shapes.  PyTorch is imported lazily.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.equivalence import compare_arrays
from graphsub.errors import VerificationError
from graphsub.frontends.torch_export import export_module
from graphsub.optimize.config import OptimizeConfig
from graphsub.optimize.pipeline import optimize
from graphsub.optimize.result import OptimizeResult


@dataclass
class OptimizedModule:
    """A callable backed by onnxruntime (``ORT_ENABLE_ALL``) running the chosen model at ``path``."""

    path: Path
    result: OptimizeResult
    max_abs_diff_vs_module: float
    input_names: tuple[str, ...]
    session: Any

    def __call__(self, *inputs: Any) -> Any:
        """Run on tensors or arrays; returns torch tensors for torch inputs, else arrays (one output
        unwrapped)."""
        as_torch = bool(inputs) and type(inputs[0]).__module__.startswith("torch")
        feeds = {n: _to_numpy(x) for n, x in zip(self.input_names, inputs, strict=True)}
        outs = [np.asarray(o) for o in self.session.run(None, feeds)]
        if as_torch:
            import torch

            res: list[Any] = [torch.from_numpy(o) for o in outs]
        else:
            res = list(outs)
        return res[0] if len(res) == 1 else tuple(res)


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return np.asarray(x.detach().cpu().numpy())
    return np.asarray(x)


def _draws(example: Sequence[Any], seed: int, n: int) -> list[list[np.ndarray]]:
    """The example inputs, then ``n`` random draws (float inputs redrawn, others kept)."""
    base = [_to_numpy(x) for x in example]
    rng = np.random.default_rng(seed)
    out = [base]
    for _ in range(n):
        out.append([rng.standard_normal(x.shape).astype(x.dtype) if x.dtype.kind == "f" else x for x in base])
    return out


def optimize_module(module: Any, example_inputs: Sequence[Any], *, output: str | os.PathLike[str] | None = None,
                    draws: int = 2, training: bool = False, config: OptimizeConfig | None = None,
                    **settings: Any) -> Any:
    """Export, optimize (``config`` and ``settings`` as for :func:`graphsub.optimize.optimize`), verify against
    the module, and return an :class:`OptimizedModule`.  ``output``: where the ONNX model goes (default: a new
    temporary directory).  Raises VerificationError when the graph-level or the module-level check fails.

    ``training=True``: optimize the module for training in PyTorch instead and return a
    :class:`~graphsub.optimize.torch_training.TrainedModule`, whose ``module`` is an ``nn.Module`` holding the
    module's parameters (the optimized emitted module, or the module itself when that was not faster per SGD step);
    without ``config``, ``settings`` go to :func:`~graphsub.optimize.torch_training.optimize_module_training`,
    with one, :func:`~graphsub.optimize.torch_training.optimize_module_training_with` takes its settings."""
    if training:
        from graphsub.optimize.torch_training import optimize_module_training, optimize_module_training_with

        if config is not None:
            return optimize_module_training_with(module, example_inputs, OptimizeConfig.build(config, **settings))
        return optimize_module_training(module, example_inputs, **settings)
    cfg = OptimizeConfig.build(config, **settings).check()
    seed, rtol, atol = cfg.seed, cfg.rtol, cfg.atol
    import torch

    from graphsub.frontends.ort import make_session

    module = module.eval()
    workdir = Path(tempfile.mkdtemp(prefix="graphsub-module-"))
    src = workdir / "exported.onnx"
    out = Path(output) if output is not None else workdir / "optimized.onnx"
    try:
        names = export_module(module, example_inputs, src)
        res = optimize(src, output=out, config=cfg)
    finally:  # the exported model is only needed while optimizing
        src.unlink(missing_ok=True)
        if output is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    if not res.verified:
        raise VerificationError(res.decision)
    sess = make_session(str(out), optimization="all", threads=res.threads)
    worst = 0.0
    for feeds in _draws(example_inputs, seed, draws):
        with torch.no_grad():
            want = module(*(torch.from_numpy(x) for x in feeds))
        wants = [want] if isinstance(want, torch.Tensor) else list(want)
        got = sess.run(None, dict(zip(names, feeds, strict=True)))
        for i, (g, w) in enumerate(zip(got, wants, strict=True)):
            d, _ = compare_arrays(f"output {i}", np.asarray(g), w.detach().numpy(), rtol, atol)
            worst = max(worst, d.max_abs_diff)
            if not d.ok:
                raise VerificationError(f"the optimized model differs from the module on {d.name}: "
                                        f"{d.reason} (max abs diff {d.max_abs_diff:.3g})")
    return OptimizedModule(out, res, worst, names, sess)


__all__ = ["OptimizedModule", "optimize_module"]
