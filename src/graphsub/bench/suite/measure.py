"""Timing variants of one model the way users run them, side by side, and the decision on each against ONNX Runtime
alone.

Every variant (the original under plain ONNX Runtime, each peer's output, graphsub's) gets :data:`SESSIONS` ONNX
Runtime sessions with ``ORT_ENABLE_ALL`` at a fixed intra-op thread count (1, or every core of the machine), used in
turn from round to round: two sessions of one file differ by a few percent for as long as they live
(:class:`~graphsub.optimize.timing.SessionPool`), and a user gets a new one on every start.  Sessions are created
once, outside the timing.  Then, for ``rounds`` rounds, every variant is timed in turn -- a median over repeats within
a small time budget -- the order rotating from round to round, so that drifting machine load and cache effects hit
all variants alike.  The machine's load average is read before and after.

**The A/A arm.** The baseline's file is timed a second time as a variant of its own, :func:`aa_name` (``ort (A/A)``),
with sessions of its own: what the measurement reads for the original against itself.  It is not a tool: it shows
up in no table, only in the baseline's ``aa_rounds_ms``.

**Session groups.** A :class:`~graphsub.optimize.timing.SessionPool` of ``n`` sessions runs call ``i`` on session
``i mod n``, and :func:`~graphsub.optimize.timing.time_candidates` calls every variant's pool exactly once per round
(it is given no session cache and no ``stop`` here), so round ``r`` of a variant ran on its session ``r mod n``
(``n``: :func:`~graphsub.optimize.timing.pool_size`, :data:`SESSIONS` unless the model is too big for several).  The
rounds of the baseline, a variant and the A/A arm whose session index is ``j`` form session group ``j`` of
:func:`graphsub.optimize.decide.verdict`: three sessions of their own, independent of the other groups' (with
``n`` differing between the two files, ``r mod min(n)``: :func:`groups_of`).

**The decision** (:func:`summarize`). Per variant, ``speedup`` is the median of the per-round ratios ``baseline /
variant`` (what the cells show; ``faster_rounds``, the share of rounds it was faster, is descriptive only), and
``verdict`` is :func:`graphsub.optimize.decide.verdict` on (baseline, variant, A/A) by session group: faster only when
its interval is above 1.0x, its speedup above :func:`min_speedup` and above what the A/A arm reads.  As the table
names the best of ``k`` variants, each is tested at ``ALPHA / k`` (Bonferroni), so that ``k`` variants that run as
the original make one "faster" at most :data:`~graphsub.optimize.decide.ALPHA` of the time.  Without an A/A arm, or
with fewer than :data:`~graphsub.optimize.decide.MIN_GROUPS` session groups (fewer rounds than that, or a model over
:data:`~graphsub.optimize.timing.POOL_MAX_BYTES`, which gets one session), a variant is not decided faster: the
head-to-head (:func:`graphsub.bench.suite.runner.head_to_head`) still decides graphsub against the best peer.

>>> r = summarize({"ort": [2.0, 2.2, 2.1], "x": [1.0, 2.4, 1.0]}, "ort")
>>> r["x"]["speedup"], round(r["x"]["faster_rounds"], 3), r["ort"]["speedup"], r["x"]["verdict"]
(2.0, 0.667, 1.0, None)
>>> aa = [2.0, 2.1, 2.0, 2.1, 2.0, 2.1]
>>> r = summarize({"ort": aa, "x": [1.0] * 6, "ort (A/A)": aa}, "ort", sessions={"ort": 3, "x": 3, "ort (A/A)": 3})
>>> v = r["x"]["verdict"]
>>> v["faster"], round(v["speedup"], 2), v["aa_ratio"], v["sessions"], r["x"]["session"], "ort (A/A)" in r
(True, 2.05, 1.0, 3, [0, 1, 2, 0, 1, 2], False)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.bench.records import load_avg
from graphsub.cost.env import all_cores
from graphsub.equivalence import Check, Reference, Tolerance, check
from graphsub.optimize import decide
from graphsub.optimize.peers import checker_verdict as checker
from graphsub.optimize.timing import Timers, pool_size, time_candidates


def parse_threads(text: str) -> list[int]:
    """``"1,all"`` -> ``[1, all_cores()]`` (duplicates dropped, order kept).

    >>> parse_threads("1, 1")
    [1]
    """
    out: list[int] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        n = all_cores() if piece == "all" else int(piece)
        if n < 1:
            raise ValueError(f"thread counts must be positive (or 'all'), got {piece!r}")
        if n not in out:
            out.append(n)
    if not out:
        raise ValueError("no thread count given")
    return out


def make_feeds(inputs: Sequence[Mapping[str, Any]], seed: int) -> dict[str, np.ndarray]:
    """Random inputs from specs ``{name, dtype, shape[, low, high, role]}``: floats standard normal, integers uniform
    in ``[low, high)`` (``low`` defaults to 0; ``high`` is required), booleans fair coins unless a range says
    otherwise (``low=1``: all true); inputs with ``role: attention_mask`` right-padded, as tokenizers pad (each row
    keeps its first L >= half of the positions); one generator per seed, drawn in the order of ``inputs``.  The same
    feeds serve the export check, the output check and the timing.

    >>> f = make_feeds([{"name": "ids", "dtype": "int64", "shape": [2, 3], "low": 0, "high": 5},
    ...                 {"name": "mask", "dtype": "int64", "shape": [2, 3], "low": 1, "high": 2}], seed=0)
    >>> bool((f["ids"] < 5).all()), bool((f["mask"] == 1).all())
    (True, True)
    """
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in inputs:
        name, dtype, shape = spec["name"], np.dtype(spec["dtype"]), tuple(int(d) for d in spec["shape"])
        if spec.get("role") == "attention_mask" and shape:
            keep = rng.integers((shape[-1] + 1) // 2, shape[-1] + 1, size=shape[:-1])
            feeds[name] = (np.arange(shape[-1]) < keep[..., None]).astype(dtype)
        elif dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(int(spec.get("low", 0)), int(spec.get("high", 2)), size=shape).astype(bool)
        elif dtype.kind in "iu":
            if "high" not in spec:
                raise ValueError(f"integer input {name!r} needs 'high' (and optionally 'low') in its spec")
            feeds[name] = rng.integers(int(spec.get("low", 0)), int(spec["high"]), size=shape, dtype=dtype)
        else:
            raise ValueError(f"input {name!r}: no random data for dtype {dtype}")
    return feeds


def check_output(
    original: Path,
    candidate: Path,
    inputs: Sequence[Mapping[str, Any]],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    rtol: float = 1e-3,
    atol: float = 1e-4,
) -> Check:
    """Does ``candidate`` load (ORT_ENABLE_ALL, 1 thread) and compute what ``original`` computes (ORT_DISABLE_ALL) on
    the random inputs :func:`make_feeds` draws from ``inputs`` for each seed, within ``Tolerance(rtol, atol)``? The
    one verifier, :func:`graphsub.equivalence.check`, with ``onnx.checker``'s verdict reported beside it. Never
    raises for a bad candidate."""
    draws = [(seed, make_feeds(inputs, seed)) for seed in seeds]
    return check(Reference(original), candidate, draws, Tolerance(rtol, atol), checker=checker(Path(candidate)))


#: sessions per variant, used in turn (module docstring): the session groups of a variant's verdict
SESSIONS = 3
#: what the A/A arm is called: the baseline's name and this
AA_SUFFIX = " (A/A)"
#: the measured rounds the stored verdicts leave out: they are the baseline's ``rounds_ms``, the variant's own, the
#: baseline's ``aa_rounds_ms`` and the variant's ``session`` (:func:`rounds_of` puts them back together)
_ROUND_LISTS = ("original_ms", "candidate_ms", "aa_ms", "group")


def aa_name(baseline: str) -> str:
    """The A/A arm's variant name (``ort`` -> ``ort (A/A)``)."""
    return baseline + AA_SUFFIX


def min_speedup() -> float:
    """The gain worth claiming: :data:`graphsub.optimize.decide.MIN_SPEEDUP`, the threshold ``optimize`` decides by,
    so that the suite never says "faster" by another one."""
    from graphsub.optimize.decide import MIN_SPEEDUP

    return MIN_SPEEDUP


@dataclass(frozen=True)
class TimingRun:
    """One side-by-side timing: per variant the median latency (ms) of each round (the A/A arm included, under
    :func:`aa_name`), its number of sessions (``sessions``; round ``r`` ran on session ``r mod n``), and the load
    averages."""

    threads: int
    rounds: dict[str, list[float]]
    load_avg_before: float | None
    load_avg_after: float | None
    sessions: dict[str, int] = field(default_factory=dict)

    def summary(self, baseline: str) -> dict[str, dict[str, Any]]:
        return summarize(self.rounds, baseline, sessions=self.sessions)


def groups_of(*sessions: Sequence[int]) -> tuple[int, ...]:
    """The session group of each round of arms whose round ``r`` ran on session ``r mod n_i`` (``sessions``: each
    arm's session index per round): ``r mod min(n_i)``, so that no group shares a session with another.

    >>> groups_of([0, 1, 2, 0, 1], [0, 0, 0, 0, 0])
    (0, 0, 0, 0, 0)
    >>> groups_of([0, 1, 2, 0], [0, 1, 2, 0])
    (0, 1, 2, 0)
    """
    n = min((max(s) + 1 for s in sessions if s), default=1)
    return tuple(r % n for r in range(min(len(s) for s in sessions)))


def summarize(rounds: Mapping[str, Sequence[float]], baseline: str, *,
              sessions: Mapping[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """Per variant but the A/A arm (module docstring): ``ms`` (median of the round medians), ``speedup`` (median of
    the per-round ratios baseline / variant), ``faster_rounds`` (share of rounds faster than the baseline;
    descriptive), the ``rounds_ms`` themselves and the ``session`` each ran on (``sessions``: per variant its number
    of sessions; None: one each), and ``verdict``: :meth:`graphsub.optimize.decide.Verdict.to_dict` against the
    baseline without the rounds (they are in the record: :func:`rounds_of`), None for the baseline itself and when
    there is no A/A arm.  The baseline's entry keeps the A/A arm's rounds as ``aa_rounds_ms``."""
    base, aa = rounds[baseline], rounds.get(aa_name(baseline))
    n_of = dict(sessions or {})
    tested = [n for n in rounds if n not in (baseline, aa_name(baseline))]
    alpha = decide.ALPHA / max(1, len(tested))
    threshold = min_speedup() if aa is not None and tested else 1.0
    out: dict[str, dict[str, Any]] = {}
    for name, ms in rounds.items():
        if name == aa_name(baseline):
            continue
        ratios = [b / v for b, v in zip(base, ms, strict=True) if v > 0]
        session = [r % max(1, n_of.get(name, 1)) for r in range(len(ms))]
        entry: dict[str, Any] = {"ms": statistics.median(ms), "speedup": statistics.median(ratios) if ratios else None,
                                 "faster_rounds": sum(v < b for b, v in zip(base, ms, strict=True)) / len(ms),
                                 "rounds_ms": list(ms), "session": session, "verdict": None}
        if name == baseline:
            if aa is not None:
                entry["aa_rounds_ms"] = list(aa)
        elif aa is not None:
            base_session = [r % max(1, n_of.get(baseline, 1)) for r in range(len(base))]
            m = decide.Rounds(a=tuple(base), b=tuple(ms), c=tuple(aa), group=groups_of(base_session, session))
            entry["verdict"] = stored(decide.verdict(m, min_speedup=threshold, alpha=alpha))
        out[name] = entry
    return out


def stored(v: decide.Verdict) -> dict[str, Any]:
    """A verdict as a timing entry keeps it: :meth:`~graphsub.optimize.decide.Verdict.to_dict` without the measured
    rounds (the entries around it have them: :func:`rounds_of`)."""
    return {k: x for k, x in v.to_dict().items() if k not in _ROUND_LISTS}


def rounds_of(base: Mapping[str, Any], variant: Mapping[str, Any]) -> decide.Rounds | None:
    """The rounds a stored verdict rests on, from the timing entries of the baseline and the variant at one thread
    count (None: a record without them, made before the A/A arm)."""
    a, b, c = base.get("rounds_ms") or [], variant.get("rounds_ms") or [], base.get("aa_rounds_ms") or []
    if not a or not len(a) == len(b) == len(c) or "session" not in base or "session" not in variant:
        return None
    return decide.Rounds(tuple(a), tuple(b), tuple(c), groups_of(base["session"], variant["session"]))


def time_variants(paths: Mapping[str, Path | bytes], feeds: Mapping[str, np.ndarray], *, threads: int, rounds: int = 7,
                  budget_ms: float = 300.0, provider: str = "cpu", copies: int = SESSIONS,
                  timers: Timers | None = None, baseline: str | None = None) -> TimingRun:
    """Time every model of ``paths`` (variant name -> ONNX file or serialized model) on ``feeds`` under
    ``ORT_ENABLE_ALL`` with ``threads`` intra-op threads on ``provider`` (numpy feeds in, numpy outputs out, as
    users call a session), in ``rounds`` alternating rounds (see the module docstring); with ``baseline`` (one of
    ``paths``), its file once more as the A/A arm (:func:`aa_name`), with sessions of its own.  Raises ExecutionError
    when a model cannot be loaded or run (check loading first). ``timers``: how the sessions are timed
    (:class:`~graphsub.optimize.timing.Timers`; None: the current ones)."""
    before = load_avg()
    models = {name: p if isinstance(p, bytes) else str(p) for name, p in paths.items()}
    if baseline is not None:
        models[aa_name(baseline)] = models[baseline]
    per_round = time_candidates(models, dict(feeds), threads=threads, budget_ms=budget_ms, rounds=rounds,
                                provider=provider, copies=copies, timers=timers)
    return TimingRun(threads, per_round, before, load_avg(), {n: pool_size(m, copies) for n, m in models.items()})


__all__ = ["AA_SUFFIX", "SESSIONS", "TimingRun", "aa_name", "all_cores", "check_output", "groups_of", "make_feeds",
           "min_speedup", "parse_threads", "rounds_of", "stored", "summarize", "time_variants"]
