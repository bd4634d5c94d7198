"""Export one suite module with one PyTorch exporter, as users run it, and check the file against the module.

* ``torchscript``: ``torch.onnx.export(module, args, path, dynamo=False, opset_version=17, input_names=...)``;
* ``dynamo``: ``torch.onnx.export(module, args, path, dynamo=True, input_names=..., external_data=False)`` at the
  exporter's default opset, with its default ONNX optimization; weights inline (one ``.onnx`` file).

Both keep the exporters' defaults otherwise (``do_constant_folding``, static shapes: no dynamic axes).  The check
loads the file in onnxruntime as users run it (ORT_ENABLE_ALL), runs it on the example inputs and compares every
output with the module's: ``max|ort - torch| <= ATOL + RTOL * max|torch|`` per output.  Any failure -- the exporter
raising, a file onnxruntime refuses, a run error, a different output count, NaN, a mismatch, or outputs that all
stay below :data:`DEGENERATE` (a check that anything passes) -- raises :class:`ExportFailure` with a one-line reason;
the partial file is removed.

Invariant: :func:`build_module` gives the same weights for the same seed (torch's global generator is seeded first).
Its modules have *trained-like* parameters (:func:`trained_like`): the libraries' initialisations leave biases at
exactly 0 and normalisation scales at exactly 1 (Hugging Face's ``_init_weights``, ``nn.MultiheadAttention``,
``nn.LayerNorm``, torchvision's BatchNorm and conv biases), which no trained checkpoint has and which a rewriter could
exploit (an addition of a zero bias removed) only on a fresh model.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import re
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from graphsub.errors import ExportError, GraphsubError
from graphsub.frontends.ort import make_session, run_session

EXPORTERS = ("torchscript", "dynamo")
TORCHSCRIPT_OPSET = 17
ATOL, RTOL = 1e-6, 1e-3
#: a module whose outputs all stay below this is useless for checking rewrites (any graph near 0 would pass)
DEGENERATE = 1e-3


class ExportFailure(ExportError):
    """An export that did not give a model matching its module; ``stage`` is export, load, run or check."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


@dataclass(frozen=True)
class Exported:
    """What an export produced: the file's op count / histogram, size, opset, and the check's error."""

    ops: int
    op_types: dict[str, int]
    size: int
    opset: int
    outputs: tuple[str, ...]
    max_abs_err: float
    ref_scale: float


#: the standard deviation of the noise :func:`trained_like` adds (Hugging Face's weight init: normal(0, 0.02))
TRAINED_NOISE = 0.02


def trained_like(module: torch.nn.Module, scale: float = TRAINED_NOISE) -> torch.nn.Module:
    """Add normal(0, ``scale``) noise (torch's global generator) to every one-dimensional floating parameter:
    biases and normalisation scales and shifts, which initialisations set to exactly 0 or 1. Returns ``module``.

    >>> m = trained_like(torch.nn.LayerNorm(4))
    >>> bool((m.weight != 1).all() and (m.bias != 0).all())
    True
    """
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1 and p.is_floating_point():
                p.add_(scale * torch.randn_like(p))
    return module


def build_module(factory: str, config: Mapping[str, Any], seed: int) -> torch.nn.Module:
    """``module:function`` called with ``config`` after ``torch.manual_seed(seed)``, with :func:`trained_like`
    parameters; the module in eval mode."""
    mod, _, fn = factory.partition(":")
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module: torch.nn.Module = getattr(importlib.import_module(mod), fn)(**config)
    return trained_like(module).eval()


def torch_outputs(module: torch.nn.Module, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The module's outputs on ``feeds`` (positional, in order), flattened to a list of arrays."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = module(*(torch.from_numpy(np.ascontiguousarray(v)) for v in feeds.values()))
    flat = out if isinstance(out, tuple | list) else (out,)
    return [t.detach().numpy() for t in flat]


def short_error(e: BaseException) -> str:
    """One line for a failure: the innermost cause's type and first line (the dynamo exporter's summary line)."""
    text = str(e)
    if "## Exception summary" in text:
        lines = text.split("## Exception summary", 1)[1].strip().splitlines()
        return re.sub(r"^<class '(?:[\w]+\.)*(\w+)'>", r"\1", lines[0])[:300] if lines else type(e).__name__
    while e.__cause__ is not None:
        e = e.__cause__
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first}"[:300]


@contextlib.contextmanager
def _quiet() -> Any:
    """Silence the exporters' prints, warnings and log lines (the progress bar owns the terminal)."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _run_exporter(module: torch.nn.Module, args: tuple[torch.Tensor, ...], names: list[str], path: Path,
                  exporter: str) -> None:
    if exporter == "torchscript":
        torch.onnx.export(module, args, os.fspath(path), dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                          input_names=names)
    elif exporter == "dynamo":
        torch.onnx.export(module, args, os.fspath(path), dynamo=True, input_names=names, external_data=False,
                          verbose=False)
    else:
        raise ValueError(f"unknown exporter {exporter!r} (expected one of {EXPORTERS})")


def _check(path: Path, feeds: Mapping[str, np.ndarray], ref: Sequence[np.ndarray]) -> tuple[float, float]:
    """Load ``path`` in onnxruntime (ORT_ENABLE_ALL), run ``feeds``, compare with ``ref``: (max error, max |ref|)."""
    try:
        sess = make_session(os.fspath(path), optimization="all")
    except GraphsubError as e:
        raise ExportFailure("load", short_error(e)) from e
    names = {i.name for i in sess.get_inputs()}
    try:
        got = run_session(sess, {k: v for k, v in feeds.items() if k in names})
    except GraphsubError as e:
        raise ExportFailure("run", short_error(e)) from e
    if len(got) != len(ref):
        raise ExportFailure("check", f"{len(got)} outputs in onnxruntime, {len(ref)} in torch")
    err = scale = 0.0
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        if g.shape != r.shape:
            raise ExportFailure("check", f"output {i}: shape {g.shape} in onnxruntime, {r.shape} in torch")
        if not np.isfinite(r).all():
            raise ExportFailure("check", f"output {i}: the module's own output is not finite")
        e_i = float(np.abs(g.astype(np.float64) - r).max()) if r.size else 0.0
        s_i = float(np.abs(r).max()) if r.size else 0.0
        if not e_i <= ATOL + RTOL * s_i:  # NaN fails too
            raise ExportFailure("check", f"output {i}: max |ort - torch| = {e_i:.3g} (max |torch| = {s_i:.3g})")
        err, scale = max(err, e_i), max(scale, s_i)
    if scale < DEGENERATE:
        raise ExportFailure("check", f"degenerate outputs: max |torch| = {scale:.3g} < {DEGENERATE:g}")
    return err, scale


def export_checked(module: torch.nn.Module, feeds: Mapping[str, np.ndarray], path: Path,
                   exporter: str) -> Exported:
    """Export ``module`` (called with ``feeds``' values in order; input names = ``feeds``' keys) to ``path`` with
    ``exporter`` and check it; raises :class:`ExportFailure` (and removes what it wrote) when any step fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ref = torch_outputs(module, feeds)
    args = tuple(torch.from_numpy(np.ascontiguousarray(v)) for v in feeds.values())
    try:
        try:
            with _quiet():
                _run_exporter(module, args, list(feeds), path, exporter)
        except Exception as e:  # the exporters raise many types
            raise ExportFailure("export", short_error(e)) from e
        if not path.exists():
            raise ExportFailure("export", "the exporter wrote no file")
        if Path(f"{path}.data").exists():
            raise ExportFailure("export", "the exporter wrote external data (expected one file)")
        err, scale = _check(path, feeds, ref)
    except ExportFailure:
        for p in (path, Path(f"{path}.data")):
            p.unlink(missing_ok=True)
        raise
    model = onnx.load(os.fspath(path), load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return Exported(ops=len(model.graph.node), op_types=dict(sorted(Counter(n.op_type for n in model.graph.node)
                                                                    .items())),
                    size=path.stat().st_size, opset=opset, outputs=tuple(o.name for o in model.graph.output),
                    max_abs_err=err, ref_scale=scale)


__all__ = ["ATOL", "DEGENERATE", "EXPORTERS", "RTOL", "TRAINED_NOISE", "ExportFailure", "Exported", "build_module",
           "export_checked", "short_error", "torch_outputs", "trained_like"]
