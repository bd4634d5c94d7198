"""Export a decoder of :data:`~graphsub.bench.decoders.model.DECODERS` to one ONNX graph with each PyTorch exporter,
name its dimensions after the interface and check it against the PyTorch model at several sizes (see
:mod:`graphsub.bench.decoders`).  A failure is a :class:`DecoderExport` with a stage and a one-line reason, never a
file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from graphsub.bench.decoders.model import (
    BATCH,
    DECODERS,
    PAST,
    SEQ,
    TOTAL,
    FlatCache,
    Layout,
    build_decoder,
    feeds,
    torch_run,
)
from graphsub.bench.suite.export import ATOL, RTOL, _quiet, short_error
from graphsub.errors import GraphsubError
from graphsub.frontends.onnx_io import file_bytes
from graphsub.frontends.ort import make_session, run_session

EXPORTERS = ("torchscript", "dynamo")
EXPORTER_TAGS = {"torchscript": "ts", "dynamo": "dynamo"}
TORCHSCRIPT_OPSET = 17
#: (batch, sequence, past) the exporters trace at: all distinct and above 1 (no size-1 or equal-size specialisation)
TRACE_SHAPE = (2, 3, 5)
#: (batch, sequence, past) the check runs: a first decode step, a decode step after a 127-token prompt, a batch of
#: 7-token chunks on a 33-token past, a 128-token prefill
CHECK_SHAPES: tuple[tuple[int, int, int], ...] = ((1, 1, 0), (1, 1, 127), (2, 7, 33), (1, 128, 0))
#: the past lengths of the suite's decode graphs: a check at (1, 1, past) is added for each the model's positions fit
DECODE_PASTS = (128, 1024)
PAD = 3  # masked positions at the start of batch row 2 in the left-padded check
MANIFEST = "decoders.json"


# ------------------------------------------------------------------------------------------------- exporting
def _dynamic_axes(layout: Layout) -> dict[str, dict[int, str]]:
    seq = {0: BATCH, 1: SEQ}
    axes = {"input_ids": seq, "attention_mask": {0: BATCH, 1: TOTAL}, "logits": seq}
    if layout.takes_positions:
        axes["position_ids"] = seq
    axes |= {n: {0: BATCH, 2: PAST} for n in layout.pasts}
    return axes | {n: {0: BATCH, 2: TOTAL} for n in layout.presents}


def _dynamic_shapes(layout: Layout) -> tuple[Any, ...]:
    """torch.export's dynamic shapes for :class:`FlatCache`'s ``forward`` (the pasts: one tuple, ``*rest``)."""
    b, s, p = (torch.export.Dim(n) for n in (BATCH, SEQ, PAST))
    seq = {0: b, 1: s}
    rest = ((seq,) if layout.takes_positions else ()) + tuple({0: b, 2: p} for _ in layout.pasts)
    return seq, {0: b, 1: torch.export.Dim.DYNAMIC}, rest


#: a model with more bytes of weights than this is exported with its weights beside the graph (the protobuf limit
#: is 2 GB): ``<file>.data`` from the dynamo exporter, a file per weight from the TorchScript one
EXTERNAL_BYTES = 1 << 30


def weight_bytes(module: torch.nn.Module) -> int:
    """The bytes of ``module``'s parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def _run_exporter(module: FlatCache, path: Path, exporter: str) -> None:
    lay = module.layout
    args = tuple(torch.from_numpy(v) for v in feeds(lay, *TRACE_SHAPE).values())
    if exporter == "torchscript":
        torch.onnx.export(module, args, os.fspath(path), dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                          input_names=list(lay.inputs), output_names=list(lay.outputs),
                          dynamic_axes=_dynamic_axes(lay))
    elif exporter == "dynamo":
        torch.onnx.export(module, args, os.fspath(path), dynamo=True, input_names=list(lay.inputs),
                          output_names=list(lay.outputs), dynamic_shapes=_dynamic_shapes(lay),
                          external_data=weight_bytes(module) > EXTERNAL_BYTES,
                          verbose=False)
    else:
        raise ValueError(f"unknown exporter {exporter!r} (expected one of {EXPORTERS})")


def name_dims(model: onnx.ModelProto, layout: Layout) -> None:
    """Name the symbolic dimensions of ``model``'s inputs and outputs after the interface (module docstring), in
    place; ValueError when an input or output is missing or one of those dimensions is fixed."""
    values = {v.name: v for v in (*model.graph.input, *model.graph.output)}
    for name, axes in _dynamic_axes(layout).items():
        if name not in values:
            raise ValueError(f"the graph has no {name!r}")
        dims = values[name].type.tensor_type.shape.dim
        for axis, dim_name in axes.items():
            if dims[axis].HasField("dim_value"):
                raise ValueError(f"{name} dimension {axis} fixed at {dims[axis].dim_value}, not {dim_name}")
            dims[axis].dim_param = dim_name


class _Failed(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason = stage, reason


# -------------------------------------------------------------------------------------------------- checking
@dataclass(frozen=True)
class Case:
    """One size of the check: the largest error over the logits and over the presents, against the largest
    ``|torch|`` over all outputs; ``ok`` when every output is within its tolerance."""

    batch: int
    sequence: int
    past: int
    padded: bool
    logits_err: float
    present_err: float
    ref_scale: float
    ok: bool


def _errors(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> tuple[list[float], list[float]]:
    """Per output: max |got - ref| (inf for a shape mismatch, NaN stays NaN) and max |ref|."""
    errs, scales = [], []
    for g, r in zip(got, ref, strict=True):
        ok_shape = g.shape == r.shape
        errs.append(float(np.abs(g.astype(np.float64) - r).max()) if ok_shape and r.size else
                    (0.0 if ok_shape else float("inf")))
        scales.append(float(np.abs(r).max()) if r.size else 0.0)
    return errs, scales


def check_case(sess: Any, module: FlatCache, batch: int, sequence: int, past: int, pad: int = 0) -> Case:
    """One size of the check (module docstring) on an open session."""
    inputs = feeds(module.layout, batch, sequence, past, seed=batch * 1000 + sequence * 10 + past, pad=pad)
    names = {i.name for i in sess.get_inputs()}
    got = run_session(sess, {k: v for k, v in inputs.items() if k in names})
    errs, scales = _errors(got, torch_run(module, inputs))
    ok = len(got) == len(scales) and all(e <= ATOL + RTOL * s for e, s in zip(errs, scales, strict=True))
    return Case(batch, sequence, past, pad > 0, errs[0], max(errs[1:], default=0.0), max(scales), ok)


def verify(path: Path, module: FlatCache, shapes: Sequence[tuple[int, int, int]] = CHECK_SHAPES,
           padded: bool = True) -> list[Case]:
    """The check of ``path`` against ``module`` at ``shapes`` (and the left-padded (2, 7, 33) case when
    ``padded``), in onnxruntime under ORT_ENABLE_ALL."""
    sess = make_session(os.fspath(path), optimization="all")
    cases = [check_case(sess, module, *shape) for shape in shapes]
    if padded:
        cases.append(check_case(sess, module, 2, 7, 33, pad=PAD))
    return cases


# --------------------------------------------------------------------------------------------- export + check
@dataclass(frozen=True)
class DecoderExport:
    """One exported decoder (``path`` set) or one failure (``stage`` and ``error``: export, name, load or check,
    and a one-line reason)."""

    name: str
    size: str
    exporter: str
    source: str
    config: dict[str, Any] = field(hash=False)
    seed: int
    path: Path | None
    stage: str | None = None
    error: str | None = None
    cases: tuple[Case, ...] = ()
    attention: str | None = None
    opset: int = 0
    ops: int = 0
    file_size: int = 0
    export_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.path is not None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``path`` a string, ``cases`` dicts)."""
        return {**asdict(self), "path": None if self.path is None else os.fspath(self.path), "ok": self.ok}


def file_name(name: str, size: str, exporter: str) -> str:
    """``<name>.<size>.<ts|dynamo>.onnx``."""
    return f"{name}.{size}.{EXPORTER_TAGS[exporter]}.onnx"


def check_shapes(positions: int) -> tuple[tuple[int, int, int], ...]:
    """:data:`CHECK_SHAPES` and a decode step (1, 1, past) for each of :data:`DECODE_PASTS` that a model of
    ``positions`` positions holds.

    >>> check_shapes(2048)[-2:], len(check_shapes(512)) - len(CHECK_SHAPES)
    (((1, 1, 128), (1, 1, 1024)), 1)
    """
    return CHECK_SHAPES + tuple((1, 1, p) for p in DECODE_PASTS if p < positions)


def _export_and_check(module: FlatCache, path: Path, exporter: str) -> tuple[Case, ...]:
    """Export, name the dimensions, check; raises :class:`_Failed` (the caller removes the file)."""
    try:
        with _quiet():
            _run_exporter(module, path, exporter)
    except Exception as e:  # the exporters raise many types
        raise _Failed("export", short_error(e)) from e
    model = onnx.load(os.fspath(path), load_external_data=False)  # the weights stay where the exporter put them
    try:
        name_dims(model, module.layout)
    except ValueError as e:
        raise _Failed("name", str(e)) from e
    onnx.save(model, os.fspath(path))
    del model
    try:
        cases = tuple(verify(path, module, check_shapes(module.positions)))
    except GraphsubError as e:
        raise _Failed("load", short_error(e)) from e
    bad = next((c for c in cases if not c.ok), None)
    if bad is not None:
        raise _Failed("check", f"(batch, sequence, past) = ({bad.batch}, {bad.sequence}, {bad.past}"
                               f"{', padded' if bad.padded else ''}): max |ort - torch| = "
                               f"{max(bad.logits_err, bad.present_err):.3g} (max |torch| = {bad.ref_scale:.3g})")
    return cases


def export_decoder(name: str, out_dir: Path, exporter: str, size: str = "tiny") -> DecoderExport:
    """Build decoder ``name`` at ``size``, export it with ``exporter`` to ``out_dir`` / :func:`file_name` and check
    it; a failure is recorded in the result (no file is left), never raised."""
    d = DECODERS[name]
    path = Path(out_dir) / file_name(name, size, exporter)
    path.parent.mkdir(parents=True, exist_ok=True)
    base: dict[str, Any] = {"name": name, "size": size, "exporter": exporter, "source": d.source,
                            "config": d.config(size), "seed": d.seed}
    t0 = time.perf_counter()
    module = build_decoder(name, size)
    try:
        cases = _export_and_check(module, path, exporter)
    except _Failed as e:
        for p in (path, Path(f"{path}.data")):
            p.unlink(missing_ok=True)
        return DecoderExport(**base, path=None, stage=e.stage, error=e.reason)
    model = onnx.load(os.fspath(path), load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return DecoderExport(**base, path=path, cases=cases, attention=module.attn_implementation, opset=opset,
                         ops=len(model.graph.node), file_size=file_bytes(path),
                         export_s=round(time.perf_counter() - t0, 2))


def build_decoders(out_dir: Path, names: Sequence[str] | None = None, size: str = "small",
                   exporters: Sequence[str] = EXPORTERS) -> list[DecoderExport]:
    """Export ``names`` (default: all of :data:`DECODERS`) at ``size`` with ``exporters`` into ``out_dir`` and
    write :data:`MANIFEST` there (``{"decoders": [DecoderExport.to_dict(), ...]}``); returns the results, failures
    included."""
    results = [export_decoder(n, Path(out_dir), e, size) for n in (names or list(DECODERS)) for e in exporters]
    text = json.dumps({"decoders": [r.to_dict() for r in results]}, indent=1, sort_keys=True)
    (Path(out_dir) / MANIFEST).write_text(text + "\n", encoding="utf-8")
    return results


__all__ = ["CHECK_SHAPES", "DECODE_PASTS", "EXPORTERS", "EXTERNAL_BYTES", "MANIFEST", "Case", "DecoderExport",
           "build_decoders", "check_case", "check_shapes", "export_decoder", "file_name", "name_dims", "verify",
           "weight_bytes"]
