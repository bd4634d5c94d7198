"""Which models a suite run covers: models of the built suite by id, architecture or glob, optionally only one half
of the suite (:mod:`.halves`: ``--half development|held-out``), and any ONNX file a user names (so that
``graphsub bench suite --models a.onnx,b.onnx`` runs on their own models; a half does not filter those).

A user's file is fed from its own graph: inputs as graphsub imports them, integer inputs in the range their
consumers accept (:func:`graphsub.data.input_specs`), inputs named like masks right-padded as tokenizers pad.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphsub.bench.suite.halves import check_half, half
from graphsub.bench.suite.runner import SuiteInput
from graphsub.errors import GraphsubError
from graphsub.spec import looks_like_path


def from_catalog(model: Any) -> SuiteInput:
    """A :class:`~graphsub.bench.suite.catalog.SuiteModel` as the runner's input."""
    meta = {"arch": model.arch, "exporter": model.exporter, "batch": model.batch, "half": half(model.arch)}
    return SuiteInput(model.id, Path(model.path), tuple(dict(i) for i in model.inputs), model.family,
                      model.transformer, meta)


def from_file(path: Path) -> SuiteInput:
    """A user's ONNX file as the runner's input (raises GraphsubError when graphsub cannot read it)."""
    from graphsub.data import input_specs
    from graphsub.spec import ModelSpec

    graph = ModelSpec.parse(str(path)).load()
    specs = input_specs(graph)
    for s in specs:  # masks by the exporters' naming: right-padded, as tokenizers pad
        if "mask" in str(s["name"]).lower() and s["dtype"] != "float32":
            s.update(role="attention_mask", low=0, high=2)
    return SuiteInput(path.stem, path, tuple(specs), "user", None, {"file": str(path)})


def select(patterns: Sequence[str] | None, suite: Sequence[Any], half_name: str | None = None) -> list[SuiteInput]:
    """The models named by ``patterns`` (all of ``suite`` when None): an ONNX path, a suite model id, an
    architecture name (all its exports) or a glob over ids (``bert.*.b1``); with ``half_name``, only the suite's
    models of that half (``development`` or ``held-out``).  Raises GraphsubError for a pattern that names nothing
    and for an unknown half."""
    if half_name is not None:
        try:
            wanted = check_half(half_name)
        except ValueError as e:
            raise GraphsubError(str(e)) from e
        suite = [m for m in suite if half(m.arch) == wanted]
    if patterns is None:
        return [from_catalog(m) for m in suite]
    out: dict[str, SuiteInput] = {}
    for pat in patterns:
        if looks_like_path(pat):
            if not Path(pat).is_file():
                raise GraphsubError(f"{pat}: no such file")
            inp = from_file(Path(pat))
            out[inp.id] = inp
            continue
        hits = [m for m in suite if m.id == pat or m.arch == pat or fnmatch.fnmatchcase(m.id, pat)]
        if not hits:
            known = sorted({m.arch for m in suite})
            where = "" if half_name is None else f" of the {half_name} half"
            raise GraphsubError(f"no suite model{where} matches {pat!r} (architectures: "
                                f"{', '.join(known) or 'none built'}; build the suite with "
                                "`graphsub bench suite --build`)")
        for m in hits:
            out.setdefault(m.id, from_catalog(m))
    return list(out.values())


__all__ = ["from_catalog", "from_file", "select"]
