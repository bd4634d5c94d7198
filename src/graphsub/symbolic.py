"""Symbolic dimensions kept symbolic in what graphsub writes: the equivalence check at other sizes.

graphsub's IR has static shapes (the import fixes each symbolic dimension of an input to what ``--input-shape`` says,
or to 1), so a model exported from it accepts only those sizes. Every write of a model made from an original with
free symbolic dimensions goes through :func:`keep_symbolic`: the original's ``dim_param`` names are restored on the
output's inputs and outputs (:func:`graphsub.frontends.dims.restore`, from the original's declared
:func:`~graphsub.frontends.dims.interface`), and the result is run beside the original in onnxruntime at two other
sizes (:func:`check_other_sizes`). It is written only when it computes what the original computes there (its plain
meaning, or what onnxruntime's own kernels make of it, e.g. MatMulNBits for int4 weights); otherwise
:class:`~graphsub.errors.VerificationError` (exit 1) names the ``--input-shape`` options that give a static model
instead. An original that declares symbolic dimensions but itself fails at other sizes cannot be compared there: the
output keeps the declared dims, with a warning.

This sits beside :mod:`graphsub.equivalence` (it is an equivalence check, with its tolerances), above
:mod:`graphsub.frontends`, which only reads and writes the declarations.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.equivalence import DEFAULT_ATOL, DEFAULT_RTOL, OutputDiff, compare_arrays
from graphsub.errors import ExecutionError, VerificationError
from graphsub.frontends.dims import (
    Interface,
    Model,
    Source,
    as_candidate,
    as_proto,
    display_name,
    interface,
    restored,
    source_for_session,
    with_metadata,
)
from graphsub.ir.graph import Graph

log = logging.getLogger("graphsub")


def _trials(iface: Interface, graph: Graph) -> list[dict[str, int]]:
    """Sizes of the free dims to check at: each one above the imported size, then all at distinct larger sizes."""
    base: dict[str, int] = {}
    types = dict(zip(graph.input_names, graph.input_types, strict=True))
    for name, _ in iface.inputs:
        t = types.get(name)
        for a in iface.free_axes(name):
            base.setdefault(iface.free_key(name, a), t.shape[a] if t is not None and a < t.rank else 1)
    first = {k: v + 1 for k, v in base.items()}
    second = {k: v + 2 + j for j, (k, v) in enumerate(base.items())}
    return [first, second] if second != first else [first]


def _feeds(iface: Interface, graph: Graph, sizes: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:
    from graphsub.data import random_inputs

    shapes: dict[str, tuple[int, ...]] = {}
    for name, t in zip(graph.input_names, graph.input_types, strict=True):
        axes = iface.free_axes(name)
        if axes:
            shape = list(t.shape)
            for a in axes:
                shape[a] = sizes[iface.free_key(name, a)]
            shapes[name] = tuple(shape)
    return random_inputs(graph, seed, shapes=shapes)


def _one_line(e: BaseException, head: int = 100, tail: int = 200) -> str:
    """``e`` on one line; a long message keeps its start and its end (onnxruntime says what failed last)."""
    text = " ".join(str(e).split())
    return text if len(text) <= head + tail else text[:head] + " ... " + text[-tail:]


def _advice(iface: Interface, graph: Graph) -> str:
    types = dict(zip(graph.input_names, graph.input_types, strict=True))
    fixes = [f"--input-shape {n}={'x'.join(map(str, types[n].shape))}" for n, _ in iface.inputs
             if iface.free_axes(n) and n in types]
    return (f"to write a model with static shapes instead, give the sizes it will run at with --input-shape, e.g. "
            f"{' '.join(fixes)} (the sizes imported); nothing written")


def _first_diff(pairs: Sequence[tuple[str, int, int]], got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                rtol: float, atol: float) -> OutputDiff | None:
    """The first output pair ``(name, reference index, candidate index)`` outside tolerance (its OutputDiff), or
    None."""
    for name, ri, ci in pairs:
        diff, _ = compare_arrays(name, got[ci], want[ri], rtol, atol)
        if not diff.ok:
            return diff
    return None


def check_other_sizes(original: Source, model: Any, iface: Interface, graph: Graph, *, seed: int = 0,
                rtol: float | None = None, atol: float | None = None) -> list[dict[str, int]]:
    """Run ``model`` (with symbolic dims restored) beside ``original`` at the sizes of :func:`_trials`; the sizes
    checked (none, with a warning, when the original itself runs at none of them: it declares sizes it does not
    accept, and the output declares the same).  Raises VerificationError when the model fails or differs at a size
    where the original runs."""
    from graphsub.frontends.ort import make_session, run_session

    rtol = DEFAULT_RTOL if rtol is None else rtol
    atol = DEFAULT_ATOL if atol is None else atol
    ref_src = source_for_session(original)
    names = ", ".join(repr(k) for k in iface.free)
    lead = f"the output cannot keep the symbolic dimension(s) {names} of the input model"
    why = "graphsub computes at the static sizes it imported"
    try:
        ref = make_session(ref_src, optimization="disable", threads=1)
        cand = make_session(model, optimization="all", threads=1)
    except ExecutionError as e:
        raise VerificationError(f"{lead}: with them symbolic, {_one_line(e)}; {_advice(iface, graph)}") from e
    as_run: list[Any] = []  # the original as users run it (ORT_ENABLE_ALL), made when needed

    def differs(feeds: Mapping[str, np.ndarray], got: Sequence[np.ndarray],
                want: Sequence[np.ndarray]) -> OutputDiff | None:
        """The first output outside tolerance against the original's plain meaning and, failing that, against the
        original as onnxruntime runs it (whose own kernels -- MatMulNBits for int4 weights, QDQ fusions -- may round
        otherwise, and the candidate's with them); None when one of them agrees."""
        bad = _first_diff(pairs, got, want, rtol, atol)
        if bad is None:
            return None
        try:
            if not as_run:
                as_run.append(make_session(ref_src, optimization="all", threads=1))
            also = run_session(as_run[0], {n: v for n, v in feeds.items() if n in ref_inputs})
        except ExecutionError:
            return bad
        return bad if _first_diff(pairs, got, also, rtol, atol) is not None else None

    cand_inputs = {i.name for i in cand.get_inputs()}
    ref_inputs = {i.name for i in ref.get_inputs()}
    ref_names = [o.name for o in ref.get_outputs()]
    cand_names = [o.name for o in cand.get_outputs()]
    pairs = ([(n, i, cand_names.index(n)) for i, n in enumerate(ref_names)] if sorted(ref_names) == sorted(cand_names)
             else [(n, i, i) for i, n in enumerate(ref_names)])
    checked: list[dict[str, int]] = []
    skipped = ""
    for k, sizes in enumerate(_trials(iface, graph)):
        at = ", ".join(f"{n}={v}" for n, v in sizes.items())
        feeds = _feeds(iface, graph, sizes, seed + k)
        try:
            want = run_session(ref, {n: v for n, v in feeds.items() if n in ref_inputs})
        except ExecutionError as e:
            skipped = skipped or f"the original itself fails at {at}: {_one_line(e)}"
            continue
        try:
            got = run_session(cand, {n: v for n, v in feeds.items() if n in cand_inputs})
        except ExecutionError as e:
            raise VerificationError(f"{lead}: at {at} it fails to run where the input model runs ({why}): "
                                    f"{_one_line(e)}; {_advice(iface, graph)}") from e
        if len(got) != len(want):
            raise VerificationError(f"{lead}: it has {len(got)} outputs, the original {len(want)}")
        diff = differs(feeds, got, want)
        if diff is not None:
            raise VerificationError(
                f"{lead}: at {at} output {diff.name!r} differs from the input model's ({why}): {diff.reason}, "
                f"max abs diff {diff.max_abs_diff:.3g}; {_advice(iface, graph)}")
        checked.append(dict(sizes))
    if not checked:  # it declares them symbolic but runs only at the imported sizes: so does the output
        log.warning("the input model declares symbolic dimension(s) %s but does not run at other sizes (%s); the "
                    "output declares them as it does (use --input-shape for static shapes)", names, skipped)
    return checked


def keep_symbolic(original: Source | None, candidate: Model, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  graph: Graph | None = None, seed: int = 0, rtol: float | None = None,
                  atol: float | None = None, iface: Interface | None = None) -> Model:
    """The model to write for ``candidate`` (a ModelProto or serialized bytes, computed from ``original`` imported
    with ``input_shapes``): ``candidate`` itself when the original has no free symbolic dimension (none, or all
    fixed by ``input_shapes``; also when ``original`` is None: a zoo model), else a copy with the original's
    symbolic dims restored, checked at other sizes (:func:`check_other_sizes`; ``graph``: the imported original, whose
    inputs' roles give the random data, imported here when not given; ``iface``: ``interface(original,
    input_shapes)`` when the caller has it). Either way the original's own description (``metadata_props``,
    ``doc_string``, ``model_version``, ``domain``) is carried over (:func:`graphsub.frontends.dims.with_metadata`).
    Raises VerificationError (exit code 1) when the candidate does not keep the dims, naming the ``--input-shape``
    options that give a static model."""
    if original is None:
        return candidate
    iface = iface or interface(original, input_shapes)
    candidate = with_metadata(candidate, iface.metadata)  # a drop-in replacement says what the original says of itself
    if not iface.free:  # no input size to vary: outputs sized at run time (a Loop's) are declared as the original does
        return as_candidate(restored(candidate, iface), candidate) if iface.free_outputs else candidate
    model = restored(candidate, iface)
    if graph is None:
        from graphsub.frontends.onnx_import import from_onnx

        graph = from_onnx(as_proto(original), input_shapes=input_shapes)
    checked = check_other_sizes(original, model, iface, graph, seed=seed, rtol=rtol, atol=atol)
    if checked:
        at = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in checked)
        log.info("kept the symbolic dimension(s) %s of %s (checked against the original at %s)",
                 ", ".join(iface.free), display_name(original), at)
    return as_candidate(model, candidate)


__all__ = ["check_other_sizes", "keep_symbolic"]
