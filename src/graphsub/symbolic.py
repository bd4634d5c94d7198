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

A decoder with a key/value cache (:func:`graphsub.frontends.cache.cache_dims`: inputs ``past*``, outputs
``present*``, their lengths ``past`` and ``total = past + sequence``) is also checked at its decoding sizes
(:data:`~graphsub.frontends.cache.CACHE_SIZES`: (batch, sequence, past) = (1, 1, 0), (1, 1, 127), (2, 7, 33),
(1, 128, 0); past 0 is an empty cache), with ``total`` = past + sequence at every size and an attention mask of
ones; every output is compared, the presents too.  Callers add sizes of their own (``sizes``, ``graphsub optimize
--check-sizes NAME=N,NAME=N``).

This sits beside :mod:`graphsub.equivalence` (it is an equivalence check, with its tolerances), above
:mod:`graphsub.frontends`, which only reads and writes the declarations.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.equivalence import DEFAULT_ATOL, DEFAULT_RTOL, OutputDiff, compare_arrays
from graphsub.errors import ExecutionError, GraphsubError, VerificationError
from graphsub.frontends.cache import CACHE_SIZES
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


def imported_sizes(iface: Interface, graph: Graph) -> dict[str, int]:
    """The sizes the free dims were imported at."""
    base: dict[str, int] = {}
    types = dict(zip(graph.input_names, graph.input_types, strict=True))
    for name, _ in iface.inputs:
        t = types.get(name)
        for a in iface.free_axes(name):
            base.setdefault(iface.free_key(name, a), t.shape[a] if t is not None and a < t.rank else 1)
    return base


def _trials(iface: Interface, graph: Graph, extra: Sequence[Mapping[str, int]] = ()) -> list[dict[str, int]]:
    """Sizes of the free dims to check at: each one above the imported size, then all at distinct larger sizes; for a
    key/value cache interface the total length is past + sequence there, and :func:`_cache_trials` follow; then the
    sizes ``extra`` give (:func:`_given_trial`)."""
    base = imported_sizes(iface, graph)
    cache = iface.cache
    first = {k: v + 1 for k, v in base.items()}
    second = {k: v + 2 + j for j, (k, v) in enumerate(base.items())}
    if cache is not None:
        first, second = cache.derived(first), cache.derived(second)
    trials = [first, second] if second != first else [first]
    for sizes in _cache_trials(iface, base) + [_given_trial(iface, base, e) for e in extra]:
        if sizes not in trials:
            trials.append(sizes)
    return trials


def _cache_trials(iface: Interface, base: Mapping[str, int]) -> list[dict[str, int]]:
    """The sizes of :data:`~graphsub.frontends.cache.CACHE_SIZES` for a model with a key/value cache interface (its
    free dims among ``base``; a size the user fixed stays), none without one or when the user fixed the total."""
    cache = iface.cache
    if cache is None or cache.total not in base:
        return []
    out = []
    for b, s, p in CACHE_SIZES:
        sizes = cache.derived({**cache.sizes(b, s, p), **{k: v for k, v in iface.bound.items()}})
        out.append({k: sizes.get(k, v) for k, v in base.items()})
    return out


def _given_trial(iface: Interface, base: Mapping[str, int], given: Mapping[str, int]) -> dict[str, int]:
    """The free dims' sizes at ``given`` (name -> size, e.g. from ``--check-sizes``): a free dim it leaves out keeps its
    imported size, a cache's total is past + sequence unless given; a name that is not a free dim is an error."""
    unknown = unknown_dims(iface, [given])
    if unknown:
        raise ValueError(f"check sizes name {unknown}, not a free symbolic dimension of the model's inputs "
                         f"({', '.join(iface.free) or 'none'})")
    sizes = {**base, **given}
    cache = iface.cache
    if cache is not None and cache.total not in given:
        sizes = {k: v for k, v in cache.derived(sizes).items() if k in base}
    return sizes


#: the key/value cache length a decoder's candidates are timed at by default (:func:`decode_feeds`)
DECODE_PAST = 128
#: the long cache a decoder's confirmed candidate must not be slower at (a kernel that wins on short caches can lose
#: on long ones: onnxruntime's MultiHeadAttention with past/present against the plain attention, 0.82x at 1,024)
LONG_PAST = 1024


def decode_feeds(original: Source, graph: Graph, input_shapes: Mapping[str, Sequence[int]] | None = None, *,
                 seed: int = 0, past: int = DECODE_PAST) -> tuple[dict[str, np.ndarray], str] | None:
    """Inputs of one decode step -- batch 1, sequence 1, a ``past``-long cache, an attention mask of ones -- for an
    ONNX decoder with a key/value cache (:func:`graphsub.frontends.cache.cache_dims`) whose cache dims are free, and
    a line saying so; None for any other model.  ``optimize`` times a decoder's candidates there by default: the
    step generation repeats, where the imported sizes (never 1) would time a short prefill instead."""
    iface = interface(original, input_shapes)
    cache = iface.cache
    if cache is None or not {cache.sequence, cache.past} <= set(iface.free):
        return None
    base = imported_sizes(iface, graph)
    step = cache.derived({**cache.sizes(1, 1, past), **iface.bound})
    sizes = {k: step.get(k, v) for k, v in base.items()}
    at = ", ".join(f"{k}={v}" for k, v in sizes.items())
    return _feeds(iface, graph, sizes, seed), f"timing: at a decode step ({at}; --sizes times at others)"


def unknown_dims(iface: Interface, sizes: Sequence[Mapping[str, int]]) -> str:
    """The names in ``sizes`` that are not free symbolic dimensions of ``iface`` ("" when none), quoted.

    >>> from graphsub.frontends.dims import Interface
    >>> unknown_dims(Interface(inputs=(("x", ("batch", 8)),), outputs=()), [{"batch": 2, "seq": 3}])
    "'seq'"
    """
    free = set(iface.free)
    return ", ".join(repr(n) for n in dict.fromkeys(n for s in sizes for n in s) if n not in free)


def _feeds(iface: Interface, graph: Graph, sizes: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:
    """Random inputs at ``sizes`` (the roles are the imported graph's); a cache interface's attention mask (an
    integer input declared ``[batch, total]``) is all ones: every position attended."""
    from graphsub.data import random_inputs

    shapes: dict[str, tuple[int, ...]] = {}
    for name, t in zip(graph.input_names, graph.input_types, strict=True):
        axes = iface.free_axes(name)
        if axes:
            shape = list(t.shape)
            for a in axes:
                shape[a] = sizes[iface.free_key(name, a)]
            shapes[name] = tuple(shape)
    feeds = random_inputs(graph, seed, shapes=shapes)
    cache = iface.cache
    if cache is not None:
        for name, dims in iface.inputs:
            if dims == (cache.batch, cache.total) and name in feeds and feeds[name].dtype.kind in "iub":
                feeds[name] = np.ones_like(feeds[name])
    return feeds


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


class SizeCheck:
    """The check of :func:`check_other_sizes`, made once for an original and run on any number of candidates: the
    original's session, its outputs at each trial size and the random inputs there are made on first use and kept
    (the portfolio checks every candidate with one, :func:`graphsub.optimize.pipeline._portfolio`).  Calling it on a
    candidate (with symbolic dims restored) returns the sizes checked or raises VerificationError."""

    def __init__(self, original: Source, iface: Interface, graph: Graph, *, seed: int = 0,
                 rtol: float | None = None, atol: float | None = None,
                 sizes: Sequence[Mapping[str, int]] = ()) -> None:
        self.original, self.iface, self.graph, self.seed = original, iface, graph, seed
        self.rtol = DEFAULT_RTOL if rtol is None else rtol
        self.atol = DEFAULT_ATOL if atol is None else atol
        self.trials = _trials(iface, graph, sizes)
        self.trials.append(imported_sizes(iface, graph))  # the last: only for models graphsub verified otherwise
        self._ref_src = source_for_session(original)
        self._sessions: dict[str, Any] = {}  # "plain" / "as_run": the original without / with ORT's optimizations
        self._feeds: dict[int, dict[str, np.ndarray]] = {}
        self._want: dict[tuple[str, int], list[np.ndarray] | ExecutionError] = {}
        names = ", ".join(repr(k) for k in iface.free)
        self.names = names
        self.lead = f"the output cannot keep the symbolic dimension(s) {names} of the input model"

    def _session(self, kind: str) -> Any:
        from graphsub.frontends.ort import make_session

        if kind not in self._sessions:
            self._sessions[kind] = make_session(self._ref_src, optimization="disable" if kind == "plain" else "all",
                                                threads=1, prepack=False)
        return self._sessions[kind]

    def feeds(self, k: int) -> dict[str, np.ndarray]:
        if k not in self._feeds:
            self._feeds[k] = _feeds(self.iface, self.graph, self.trials[k], self.seed + k)
        return self._feeds[k]

    def want(self, kind: str, k: int) -> list[np.ndarray]:
        """The original's outputs at trial ``k`` (``kind``: "plain", or "as_run": as users run it); raises
        ExecutionError when it fails there."""
        from graphsub.frontends.ort import run_session

        key = (kind, k)
        if key not in self._want:
            try:
                sess = self._session(kind)
                ins = {i.name for i in sess.get_inputs()}
                self._want[key] = list(run_session(sess, {n: v for n, v in self.feeds(k).items() if n in ins}))
            except ExecutionError as e:
                self._want[key] = e
        got = self._want[key]
        if isinstance(got, ExecutionError):
            raise got
        return got

    def __call__(self, model: Any, *, imported: bool = False) -> list[dict[str, int]]:
        """Check ``model``; ``imported``: at the imported sizes too (a model no other check compared there: a
        :func:`graphsub.frontends.splice.splice` of a verified candidate)."""
        from graphsub.frontends.ort import make_session, run_session

        why = "graphsub computes at the static sizes it imported"
        try:
            ref = self._session("plain")
            cand = make_session(model, optimization="all", threads=1, prepack=False)
        except ExecutionError as e:
            raise VerificationError(f"{self.lead}: with them symbolic, {_one_line(e)}; "
                                    f"{_advice(self.iface, self.graph)}") from e
        cand_inputs = {i.name for i in cand.get_inputs()}
        ref_names = [o.name for o in ref.get_outputs()]
        cand_names = [o.name for o in cand.get_outputs()]
        pairs = ([(n, i, cand_names.index(n)) for i, n in enumerate(ref_names)]
                 if sorted(ref_names) == sorted(cand_names) else [(n, i, i) for i, n in enumerate(ref_names)])
        checked: list[dict[str, int]] = []
        skipped = ""
        for k, trial in enumerate(self.trials if imported else self.trials[:-1]):
            at = ", ".join(f"{n}={v}" for n, v in trial.items())
            try:
                want = self.want("plain", k)
            except ExecutionError as e:
                skipped = skipped or f"the original itself fails at {at}: {_one_line(e)}"
                continue
            try:
                got = run_session(cand, {n: v for n, v in self.feeds(k).items() if n in cand_inputs})
            except ExecutionError as e:
                raise VerificationError(f"{self.lead}: at {at} it fails to run where the input model runs ({why}): "
                                        f"{_one_line(e)}; {_advice(self.iface, self.graph)}") from e
            if len(got) != len(want):
                raise VerificationError(f"{self.lead}: it has {len(got)} outputs, the original {len(want)}")
            diff = self._differs(k, pairs, got, want)
            if diff is not None:
                raise VerificationError(
                    f"{self.lead}: at {at} output {diff.name!r} differs from the input model's ({why}): "
                    f"{diff.reason}, max abs diff {diff.max_abs_diff:.3g}; {_advice(self.iface, self.graph)}")
            checked.append(dict(trial))
        if not checked:  # it declares them symbolic but runs only at the imported sizes: so does the output
            log.warning("the input model declares symbolic dimension(s) %s but does not run at other sizes (%s); the "
                        "output declares them as it does (use --input-shape for static shapes)", self.names, skipped)
        return checked

    def _differs(self, k: int, pairs: Sequence[tuple[str, int, int]], got: Sequence[np.ndarray],
                 want: Sequence[np.ndarray]) -> OutputDiff | None:
        """The first output outside tolerance against the original's plain meaning and, failing that, against the
        original as onnxruntime runs it (whose own kernels -- MatMulNBits for int4 weights, QDQ fusions -- may round
        otherwise, and the candidate's with them); None when one of them agrees."""
        bad = _first_diff(pairs, got, want, self.rtol, self.atol)
        if bad is None:
            return None
        try:
            also = self.want("as_run", k)
        except ExecutionError:
            return bad
        return bad if _first_diff(pairs, got, also, self.rtol, self.atol) is not None else None


def check_other_sizes(original: Source, model: Any, iface: Interface, graph: Graph, *, seed: int = 0,
                      rtol: float | None = None, atol: float | None = None,
                      sizes: Sequence[Mapping[str, int]] = ()) -> list[dict[str, int]]:
    """Run ``model`` (with symbolic dims restored) beside ``original`` at the sizes of :func:`_trials` (``sizes``:
    more, name -> size, e.g. ``--check-sizes``); every output is compared (a cache's presents too); the sizes
    checked (none, with a warning, when the original itself runs at none of them: it declares sizes it does not
    accept, and the output declares the same).  Raises VerificationError when the model fails or differs at a size
    where the original runs (:class:`SizeCheck`, which keeps the original's outputs for more candidates)."""
    return SizeCheck(original, iface, graph, seed=seed, rtol=rtol, atol=atol, sizes=sizes)(model)


def size_check(original: Source | None, graph: Graph, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
               seed: int = 0, rtol: float | None = None, atol: float | None = None,
               sizes: Sequence[Mapping[str, int]] = ()) -> SizeCheck | None:
    """The :class:`SizeCheck` a model computed from ``original`` (imported as ``graph`` with ``input_shapes``) passes
    before it is written, None when there is nothing to check (no file, or no free symbolic dimension)."""
    if original is None:
        return None
    iface = interface(original, input_shapes)
    if not iface.free:
        return None
    return SizeCheck(original, iface, graph, seed=seed, rtol=rtol, atol=atol, sizes=sizes)


def keep_spliced(original: Source, final: Graph, base: Graph, *,
                 input_shapes: Mapping[str, Sequence[int]] | None = None, seed: int = 0,
                 iface: Interface | None = None, sizes: Sequence[Mapping[str, int]] = (),
                 checker: SizeCheck | None = None, sized: Any = None) -> Any:
    """``final`` (derived from ``base``, an import of ``original``) written over ``original``'s own nodes
    (:func:`graphsub.frontends.splice.splice_symbolic`; ``sized``: its own reshape targets in symbols, a
    :class:`~graphsub.frontends.splice.Sized`) when that keeps the free symbolic dims -- checked at other sizes and at
    the imported ones (:func:`keep_symbolic`) --, else None: for a model whose plain export lost them. Returns a
    ModelProto."""
    from graphsub.frontends.splice import splice_symbolic

    iface = iface or interface(original, input_shapes)
    try:
        model = splice_symbolic(final, base, iface, sized)
        if model is None:
            return None
        kept = keep_symbolic(original, model, input_shapes=input_shapes, graph=base, seed=seed, iface=iface,
                             sizes=sizes, checker=checker, imported=True)
    except GraphsubError:
        return None
    return kept


def keep_symbolic(original: Source | None, candidate: Model, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  graph: Graph | None = None, seed: int = 0, rtol: float | None = None,
                  atol: float | None = None, iface: Interface | None = None,
                  sizes: Sequence[Mapping[str, int]] = (), checker: SizeCheck | None = None,
                  imported: bool = False) -> Model:
    """The model to write for ``candidate`` (a ModelProto or serialized bytes, computed from ``original`` imported
    with ``input_shapes``): ``candidate`` itself when the original has no free symbolic dimension (none, or all
    fixed by ``input_shapes``; also when ``original`` is None: a zoo model), else a copy with the original's
    symbolic dims restored, checked at other sizes (:func:`check_other_sizes`; ``graph``: the imported original, whose
    inputs' roles give the random data, imported here when not given; ``iface``: ``interface(original,
    input_shapes)`` when the caller has it; ``sizes``: more sizes to check at, name -> size; ``checker``: a
    :class:`SizeCheck` of this original made before, which the other arguments of the check then leave;
    ``imported``: compare at the imported sizes too, for a candidate not verified there). Either way the
    original's own description (``metadata_props``, ``doc_string``, ``model_version``, ``domain``) is carried over
    (:func:`graphsub.frontends.dims.with_metadata`). Raises VerificationError (exit code 1) when the candidate does
    not keep the dims, naming the ``--input-shape`` options that give a static model."""
    if original is None:
        return candidate
    iface = iface or interface(original, input_shapes)
    candidate = with_metadata(candidate, iface.metadata)  # a drop-in replacement says what the original says of itself
    if not iface.free:  # no input size to vary: outputs sized at run time (a Loop's) are declared as the original does
        return as_candidate(restored(candidate, iface), candidate) if iface.free_outputs else candidate
    model = restored(candidate, iface)
    if checker is None:
        if graph is None:
            from graphsub.frontends.onnx_import import from_onnx

            graph = from_onnx(as_proto(original), input_shapes=input_shapes)
        checker = SizeCheck(original, iface, graph, seed=seed, rtol=rtol, atol=atol, sizes=sizes)
    checked = checker(model, imported=imported)
    if checked:
        at = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in checked)
        log.info("kept the symbolic dimension(s) %s of %s (checked against the original at %s)",
                 ", ".join(iface.free), display_name(original), at)
    return as_candidate(model, candidate)


__all__ = ["DECODE_PAST", "LONG_PAST", "SizeCheck", "check_other_sizes", "decode_feeds", "imported_sizes",
           "keep_symbolic", "size_check", "unknown_dims"]
