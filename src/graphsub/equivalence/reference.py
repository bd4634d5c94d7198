"""The reference runner and the check of a candidate against it.

* :class:`Reference` runs the original -- a Graph (exported with its weights), ONNX bytes or a path -- under
  ``ORT_DISABLE_ALL`` (the model's plain meaning), once per input draw, and keeps its outputs. A reference that
  cannot load or run is the input's fault: :class:`~graphsub.errors.ReferenceFailed`, never blamed on a candidate.
* :func:`check` runs a candidate (a Graph, bytes or a path) as users run it (``ORT_ENABLE_ALL``) on the reference's
  draws and compares every output with a :class:`~graphsub.equivalence.tolerance.Tolerance`; it returns a
  :class:`Check` and never raises for a bad candidate.
* **float64 for training graphs.** A training graph (:func:`is_training`: outputs ``loss`` and ``grad.*``) whose
  float32 outputs differ beyond the tolerance, and only that, is run once more in float64 -- both sides, by graphsub's
  reference executor (:func:`as_float64`, :mod:`graphsub.execute`) -- and compared at
  :meth:`~graphsub.equivalence.tolerance.Tolerance.float64`. A gradient summed over a batch in another order moves by
  float32 rounding alone -- far beyond ``rtol`` when the sum cancels, as the weight gradient of a convolution before a
  batch norm does -- while an exact rewrite agrees in float64 to ~1e-13 and a wrong one does not. The candidate is
  then verified, and :attr:`Check.float64` says by how much float32 evaluation order moved which output.

>>> from graphsub.ir import Builder
>>> def g(swap):
...     b = Builder(); x = b.input("x", (4, 4)); y = b.input("y", (4, 4))
...     return b.build(b.add(y, x) if swap else b.add(x, y))
>>> c = check(Reference(g(False)), g(True), [0, 1])
>>> c.verified, c.seeds, c.worst_output
(True, (0, 1), 'output')
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from graphsub.data import random_inputs, random_weights
from graphsub.equivalence.tolerance import DEFAULT_TOLERANCE, OutputDiff, Tolerance
from graphsub.equivalence.tolerance import one_line as _one_line
from graphsub.errors import ExecutionError, GraphsubError, ReferenceFailed, VerificationError
from graphsub.ir.graph import Graph
from graphsub.training import GRAD_PREFIX

if TYPE_CHECKING:
    from graphsub.frontends.ort import Session

#: what :func:`check` accepts as a model: a Graph, serialized ONNX or a path to an ONNX file
Model = Graph | bytes | str | os.PathLike[str]
#: an input draw: a seed (inputs from :func:`graphsub.data.random_inputs` of the reference graph) or ``(seed, feeds)``
Draw = int | tuple[int, Mapping[str, np.ndarray]]


def is_training(names: Sequence[str]) -> bool:
    """Whether outputs ``names`` are a training graph's: ``loss`` and gradients (``grad.*``), nothing else."""
    return "loss" in names and len(names) > 1 and all(n == "loss" or n.startswith(GRAD_PREFIX) for n in names)


def as_float64(graph: Graph, params: Mapping[str, np.ndarray] | None = None) -> Graph:
    """``graph`` with every float32 input, weight (its data cast: the same values), dtype attribute and opaque
    node's output type in float64, for :func:`graphsub.execute.run`. ``params``: weight data beside
    ``graph.params``. An opaque node runs in onnxruntime in float64: where onnxruntime has no float64 kernel for it,
    running the graph is an ExecutionError."""
    from graphsub.ir.builder import Builder, Value

    def f64(dtype: str) -> str:
        return "float64" if dtype == "float32" else dtype

    data = {**graph.params, **(params or {})}
    b = Builder(graph.name)
    vals: dict[int, tuple[Value, ...]] = {}
    for nid in graph.inputs:  # first, in their order
        t = graph.nodes[nid].sig.out_types[0]
        vals[nid] = (b.input(graph.nodes[nid].sig.attr["name"], t.shape, f64(t.dtype)),)
    for nid in graph.topo_order():
        node = graph.nodes[nid]
        sig = node.sig
        if nid in vals:
            continue
        if sig.op == "weight":
            name, t = sig.attr["name"], sig.out_types[0]
            if name in data:
                vals[nid] = (b.weight(name, data=np.asarray(data[name], dtype=f64(t.dtype))),)
            else:
                vals[nid] = (b.weight(name, t.shape, dtype=f64(t.dtype)),)
            continue
        kinds = {a.name: a.kind for a in sig.opdef.attrs}
        attrs: dict[str, Any] = {k: f64(v) if kinds.get(k) == "dtype" else v for k, v in sig.attrs}
        if sig.op == "opaque":  # runs in onnxruntime on its float64 inputs, declaring float64 outputs
            attrs["out_types"] = tuple((shape, f64(dtype)) for shape, dtype in attrs["out_types"])
        vals[nid] = b.op_multi(sig.op, *(vals[r.node][r.index] for r in node.inputs), **attrs)
    return b.build({n: vals[r.node][r.index] for n, r in zip(graph.output_names, graph.outputs, strict=True)})


def _f64_feeds(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}


def _load_graph(model: bytes | str | os.PathLike[str]) -> Graph:
    """A Graph of an ONNX model given as bytes or a path (ImportError_ when it cannot be imported)."""
    from graphsub.frontends.onnx_io import load

    if not isinstance(model, bytes):
        return load(model)
    with tempfile.TemporaryDirectory(prefix="graphsub-f64-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as fh:
            fh.write(model)
        return load(path)


def _run64(graph64: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    from graphsub.execute import run

    return list(run(graph64, {k: v for k, v in _f64_feeds(feeds).items() if k in graph64.input_names}).values())


def _feed(sess: Session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {i.name: feeds[i.name] for i in sess.get_inputs() if i.name in feeds}


class Reference:
    """The original model, run once per input draw under ``ORT_DISABLE_ALL`` at ``threads`` intra-op threads (1 by
    default; None: onnxruntime's default), its outputs kept per draw seed: checking many candidates against one
    original loads and runs it once, not once per candidate.

    ``original`` is a Graph -- exported with its weights, random ones where it has no data, drawn with ``seed``
    (``known``: data for weights it lacks, e.g. the candidate's) -- or ONNX bytes or a path. Its float64 form
    (:meth:`outputs64`) is made on first use; ``as_graph``: the original as a Graph with its weights when
    ``original`` is that graph's ONNX export (a re-import of the file may hold ops without float64 kernels). Every
    failure of the original is ReferenceFailed."""

    def __init__(self, original: Model, *, seed: int = 0, known: Mapping[str, np.ndarray] | None = None,
                 threads: int | None = 1, as_graph: Graph | None = None) -> None:
        self.original = original
        self.as_graph = as_graph
        self.seed = seed
        self.threads = threads
        self.graph: Graph | None = original if isinstance(original, Graph) else None
        self.weights: dict[str, np.ndarray] = {}
        self.known: dict[str, np.ndarray] = {}  # weight data a Graph candidate shares with the original
        if self.graph is not None:
            shared = {**(known or {}), **self.graph.params}
            self.weights = random_weights(self.graph, seed, known=shared)
            self.known = {**shared, **self.weights}
        self._session: Session | None = None
        self._failed = ""
        self._outputs: dict[int, list[np.ndarray]] = {}
        self._graph64: Graph | str | None = None
        self._outputs64: dict[int, list[np.ndarray]] = {}

    def session(self) -> Session:
        from graphsub.frontends.ort import make_session

        if self._session is None and not self._failed:
            orig = self.original
            try:
                if isinstance(orig, Graph):
                    from graphsub.frontends.onnx_export import export_graph

                    src: bytes | str = export_graph(orig, params=self.weights).SerializeToString()
                else:
                    src = orig if isinstance(orig, bytes) else os.fspath(orig)
                self._session = make_session(src, optimization="disable", threads=self.threads, prepack=False)
            except GraphsubError as e:
                self._failed = (f"the original model cannot be loaded in onnxruntime, so nothing can be verified "
                                f"against it: {_one_line(e)}")
        if self._session is None:
            raise ReferenceFailed(self._failed)
        return self._session

    def inputs(self, seed: int) -> dict[str, np.ndarray]:
        """The random inputs of draw ``seed`` (a Graph reference only: a file's draws come with their feeds)."""
        if self.graph is None:
            raise VerificationError("a reference given as ONNX needs (seed, feeds) draws, not seeds alone")
        return random_inputs(self.graph, seed)

    def outputs(self, seed: int, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The original's outputs on the draw ``seed`` (``feeds``: its inputs; computed once per seed)."""
        from graphsub.frontends.ort import run_session

        got = self._outputs.get(seed)
        if got is None:
            sess = self.session()
            try:
                got = self._outputs[seed] = run_session(sess, _feed(sess, feeds))
            except ExecutionError as e:
                raise ReferenceFailed(f"the original model fails on random inputs (seed {seed}), so no rewrite of "
                                      f"it can be verified: {_one_line(e)}") from e
        return got

    def graph64(self) -> Graph:
        """The original in float64 (:func:`as_float64`); VerificationError (or ImportError_) when it has none."""
        if self._graph64 is None:
            orig = self.original
            try:
                g = orig if isinstance(orig, Graph) else self.as_graph or _load_graph(orig)
                self._graph64 = as_float64(g, self.weights)
            except GraphsubError as e:
                self._graph64 = _one_line(e)
        if isinstance(self._graph64, str):
            raise VerificationError(f"the original: {self._graph64}")
        return self._graph64

    def outputs64(self, seed: int, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The original's outputs on draw ``seed`` in float64 by graphsub's reference executor (once per seed)."""
        got = self._outputs64.get(seed)
        if got is None:
            got = self._outputs64[seed] = _run64(self.graph64(), feeds)
        return got


@dataclass(frozen=True)
class Check:
    """The verdict of :func:`check`. ``loads``: onnxruntime accepts the candidate (at the check's optimization level);
    ``verified``: every output of every draw compared is within tolerance (in float64 where ``float64`` says so);
    ``max_abs_diff``: the largest float32 difference seen (inf when not comparable); ``error``: why it is not
    verified (one line); ``failure``: what failed -- ``reference`` (the original: not the candidate's fault),
    ``interface``, ``export``, ``load``, ``run`` or ``tolerance`` -- empty when verified; ``worst_output``: the output
    with the largest excess over tolerance; ``outputs``: per output, its worst float32 diff over the draws (one
    verified in float64 is ok, its reason says so); ``seeds``: the draws compared; ``float64``: what the float64
    re-check of a training graph found; ``checker_ok`` / ``checker_error``: ``onnx.checker``'s verdict when it was
    run (reported, never decisive)."""

    loads: bool
    verified: bool
    max_abs_diff: float
    error: str = ""
    checker_ok: bool = True
    checker_error: str = ""
    failure: str = ""
    worst_output: str = ""
    outputs: tuple[OutputDiff, ...] = ()
    seeds: tuple[int, ...] = ()
    float64: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pairs(ref: Session, cand: Session) -> list[tuple[str, int, int]] | str:
    """Output pairs ``(name, reference index, candidate index)``: by name when both have the same names, else by
    position; a string says why they cannot be paired."""
    rn = [o.name for o in ref.get_outputs()]
    cn = [o.name for o in cand.get_outputs()]
    if len(rn) != len(cn):
        return f"{len(cn)} outputs instead of {len(rn)}"
    if sorted(rn) == sorted(cn):
        return [(n, i, cn.index(n)) for i, n in enumerate(rn)]
    return [(n, i, i) for i, n in enumerate(rn)]


def _interface(ref: Graph, cand: Graph) -> str:
    """Why Graph ``cand`` cannot stand in for ``ref`` (inputs by name, outputs by position), or ''."""
    ri = dict(zip(ref.input_names, ref.input_types, strict=True))
    ci = dict(zip(cand.input_names, cand.input_types, strict=True))
    if ri != ci:
        return f"inputs differ: {ri} vs {ci}"
    if ref.output_types != cand.output_types:
        return f"outputs differ: {list(ref.output_types)} vs {list(cand.output_types)}"
    return ""


def _candidate(reference: Reference, candidate: Model, threads: int | None,
               optimization: str) -> tuple[Session | None, str, str, Any]:
    """The candidate's session, or None with the failure and its error; and what its float64 form is made from (a
    Graph with its weights, or the ONNX model)."""
    from graphsub.frontends.ort import make_session

    if isinstance(candidate, Graph):
        from graphsub.frontends.onnx_export import export_graph

        why = _interface(reference.graph, candidate) if reference.graph is not None else ""
        if why:
            return None, "interface", why, None
        weights = random_weights(candidate, reference.seed, known=reference.known)
        try:
            src: bytes | str = export_graph(candidate, params=weights).SerializeToString()
        except GraphsubError as e:
            return None, "export", _one_line(e), None
        source: Any = (candidate, weights)
    else:
        src = source = candidate if isinstance(candidate, bytes) else os.fspath(candidate)
    try:
        return make_session(src, optimization=optimization, threads=threads, prepack=False), "", "", source
    except GraphsubError as e:
        return None, "load", _one_line(e), None


def check(reference: Reference, candidate: Model, draws: Sequence[Draw], tolerance: Tolerance = DEFAULT_TOLERANCE, *,
          threads: int | None = 1, checker: tuple[bool, str] = (True, ""), stop: Callable[[], bool] | None = None,
          float64: bool = True, optimization: str = "all",
          as_graph: Callable[[], Graph | None] | None = None) -> Check:
    """Does ``candidate`` load (as users run it: ``ORT_ENABLE_ALL``, at ``threads``) and compute what ``reference``
    computes on every draw (a seed, or ``(seed, feeds)``), within ``tolerance``? Never raises for a bad candidate,
    nor for a bad reference (``failure`` is ``reference`` then). ``optimization``: the candidate's onnxruntime
    optimization level (``disable``: its plain meaning, for a graph users do not run in onnxruntime as it is -- a
    rule's rewrite before its weights are folded, which onnxruntime's own constant folding may refuse). Outputs
    pair by name when both have the same names, else by position. The draws are compared in order up to the first
    that fails; ``stop()`` (e.g. a budget) ends the check after the first draw. A training graph that fails by
    tolerance alone is re-checked in float64 (module docstring; ``float64=False``: never). ``checker``:
    ``onnx.checker``'s verdict on the candidate, reported. ``as_graph()``: the candidate as a Graph with its weights
    when the candidate is that graph's ONNX export (None: not known), for the float64 re-check."""
    from graphsub.frontends.ort import run_session

    def done(loads: bool, failure: str, error: str, diff: float = float("inf"), **kw: Any) -> Check:
        return Check(loads, not failure, diff, error, *checker, failure, **kw)

    ref_error = ""
    try:
        ref_sess = reference.session()
    except ReferenceFailed as e:
        ref_error = str(e)
    sess, why, error, source = _candidate(reference, candidate, threads, optimization)
    if ref_error:
        return done(sess is not None, "reference", ref_error)
    if sess is None:
        return done(False, why, error)
    pairs = _pairs(ref_sess, sess)
    if isinstance(pairs, str):
        return done(True, "interface", pairs)
    training = float64 and is_training([name for name, _, _ in pairs])
    made: list[Graph] = []

    def cand64() -> Graph:  # the candidate in float64, made once
        if not made:
            own = None if as_graph is None or isinstance(source, tuple) else as_graph()
            g, w = source if isinstance(source, tuple) else (own or _load_graph(source), None)
            made.append(as_float64(g, w))
        return made[0]

    worst: dict[str, tuple[float, OutputDiff]] = {}
    seeds: list[int] = []
    notes: list[str] = []
    for draw in draws:
        if seeds and stop is not None and stop():
            break
        seed, feeds = (int(draw), None) if isinstance(draw, (int, np.integer)) else draw
        seeds.append(seed)
        try:
            feeds = reference.inputs(seed) if feeds is None else feeds
            want = reference.outputs(seed, feeds)
        except (ReferenceFailed, VerificationError) as e:
            return done(True, "reference", str(e), seeds=tuple(seeds))
        try:
            got = run_session(sess, _feed(sess, feeds))
        except ExecutionError as e:
            return done(True, "run", f"the candidate model fails on random inputs (seed {seed}): {_one_line(e)}",
                        seeds=tuple(seeds))
        diffs = {name: tolerance.compare(name, got[ci], want[ri]) for name, ri, ci in pairs}
        bad = [d for d, _ in diffs.values() if not d.ok]
        if bad and training and all(d.reason == "outside tolerance" for d in bad):
            note, kept = _recheck64(reference, cand64, seed, feeds, pairs, tolerance, diffs)
            notes.append(note)
            if kept is not None:
                diffs, bad = kept, []
        for name, (d, excess) in diffs.items():
            if name not in worst or excess > worst[name][0]:
                worst[name] = (excess, d)
        if bad:
            error = f"output {bad[0].name!r}, seed {seed}: {bad[0].reason} (max abs diff {bad[0].max_abs_diff:.3g})"
            error += f"; {notes[-1]}" if notes else ""
            return done(True, "tolerance", error, **_summary(worst, seeds, notes))
    return done(True, "", "", **_summary(worst, seeds, notes))


def _summary(worst: Mapping[str, tuple[float, OutputDiff]], seeds: Sequence[int],
             notes: Sequence[str]) -> dict[str, Any]:
    outs = tuple(d for _, d in worst.values())
    return {"diff": max((d.max_abs_diff for d in outs), default=0.0), "outputs": outs, "seeds": tuple(seeds),
            "worst_output": max(worst, key=lambda k: worst[k][0]) if worst else "",
            "float64": "; ".join(dict.fromkeys(notes))}


def _recheck64(reference: Reference, cand64: Callable[[], Graph], seed: int, feeds: Mapping[str, np.ndarray],
               pairs: Sequence[tuple[str, int, int]], tolerance: Tolerance,
               diffs: Mapping[str, tuple[OutputDiff, float]]) -> tuple[str, dict[str, tuple[OutputDiff, float]] | None]:
    """The float64 re-check of one draw of a training graph: (what it found, the diffs to keep -- the float32 ones,
    with the outputs float64 verified marked ok -- or None when float64 does not agree or cannot run)."""
    tol64 = tolerance.float64()
    try:
        want = reference.outputs64(seed, feeds)
        got = _run64(cand64(), feeds)
    except GraphsubError as e:
        return f"float64 re-check impossible: {_one_line(e)}", None
    if len(got) != len(want):
        return f"float64 re-check impossible: {len(got)} outputs instead of {len(want)}", None
    out: dict[str, tuple[OutputDiff, float]] = {}
    for name, ri, ci in pairs:
        d64, _ = tol64.compare(name, got[ci], want[ri])
        if not d64.ok:
            return (f"output {name!r} differs in float64 too: {d64.reason} (max abs diff {d64.max_abs_diff:.3g}, "
                    f"rtol {tol64.rtol:.3g}, atol {tol64.atol:.3g})"), None
        d, excess = diffs[name]
        if not d.ok:
            d = OutputDiff(name, d.max_abs_diff, d.max_rel_diff, d.max_abs_ref, True,
                           f"verified in float64 (max abs diff {d64.max_abs_diff:.3g})")
            excess = 0.0
        out[name] = (d, excess)
    moved = max((d for d, _ in diffs.values() if not d.ok), key=lambda d: diffs[d.name][1])
    return (f"verified in float64: float32 evaluation order moves {moved.name} by {moved.max_abs_diff:.3g} "
            f"(float64 agrees within rtol {tol64.rtol:.3g}, atol {tol64.atol:.3g})"), out



__all__ = ["Check", "Draw", "Model", "Reference", "as_float64", "check", "is_training"]
