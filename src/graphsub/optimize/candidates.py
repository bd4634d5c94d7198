"""The records of the portfolio step -- :class:`Candidate` and :class:`Portfolio` -- and the two helpers every
candidate source uses (:func:`export_bytes`, :func:`rewrite_everywhere`).

They sit below both :mod:`graphsub.optimize.portfolio` (verification, timing records, the choice) and the candidate
sources (:mod:`graphsub.optimize.sources`), which the portfolio runs: a source module imports these records, never
the portfolio, so that there is no import cycle. :mod:`graphsub.optimize.portfolio` re-exports every name here.

>>> p = Portfolio()
>>> a = p.add(Candidate("a", b"model"))
>>> b = p.add(Candidate("b", b"model"))
>>> b.same_as, [c.name for c in p.distinct]
('a', ['a'])
"""

from __future__ import annotations

import hashlib
import math
import statistics
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphsub.ir.graph import Graph
from graphsub.optimize.decide import Verdict
from graphsub.rules.cleanup import CLEANUP
from graphsub.rules.rule import Rule
from graphsub.search.base import Step

ORIGINAL = "original"


@dataclass
class Candidate:
    """One model the portfolio may keep. ``data`` is the serialized ONNX model; ``graph`` is set when graphsub
    can represent it (then search and spelling can work on top of it); ``steps`` are graphsub's substitutions
    that made it from its ``base`` (the candidate it was built on, or the original)."""

    name: str
    data: bytes
    graph: Graph | None = None
    base: str = ORIGINAL
    steps: tuple[Step, ...] = ()
    seconds: float = 0.0
    verified: bool | None = None
    max_abs_diff: float = math.nan
    error: str = ""
    float64: str = ""  # how its float64 re-check went, when float32 rounding alone moved a gradient (training graphs)
    same_as: str = ""  # a candidate with the same file (not timed twice)
    runs_as: str = ""  # the original or a candidate onnxruntime runs exactly as this one (not timed twice)
    rounds_ms: list[float] = field(default_factory=list)
    speedup: float | None = None
    faster_rounds: float | None = None
    screen_ratio: float | None = None  # original / candidate in the screening round, when there was one
    confirmation: Verdict | None = None  # the decision on it in fresh session groups with an A/A control
    spliced: bool = False  # its file is its graph written over its base's file (keeps the symbolic dims)
    kernels: int = 0  # the kernels onnxruntime runs for it in the side-by-side rounds (0: not read)

    @property
    def confirm_speedup(self) -> float | None:
        """The speedup its confirmation measured (None: not confirmed)."""
        return None if self.confirmation is None else self.confirmation.speedup

    @property
    def digest(self) -> str:
        """The SHA-256 of its file: equal files are one candidate (:meth:`Portfolio.add`)."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def rules(self) -> list[str]:
        """The rules behind it, in order of first use (its base's too, when the base is graphsub's)."""
        return list(dict.fromkeys(s.rule for s in self.steps))

    def to_dict(self) -> dict[str, Any]:
        """Its record for ``--json`` and the report."""
        ms = statistics.median(self.rounds_ms) if self.rounds_ms else None
        return {"name": self.name, "base": self.base, "verified": self.verified,
                "max_abs_diff": self.max_abs_diff if math.isfinite(self.max_abs_diff) else None,
                "error": self.error, "float64": self.float64 or None, "same_as": self.same_as or None,
                "runs_as": self.runs_as or None, "ms": ms,
                "speedup": self.speedup,
                "faster_rounds": self.faster_rounds, "screen_ratio": self.screen_ratio, "rounds_ms": self.rounds_ms,
                "confirm_speedup": self.confirm_speedup,
                "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),
                "seconds": self.seconds,
                "substitutions": len(self.steps), "rules": self.rules, "spliced": self.spliced,
                "kernels": self.kernels or None,
                "ops": None if self.graph is None else self.graph.num_ops}


@dataclass
class Portfolio:
    """What :func:`graphsub.optimize.portfolio.collect` gathers: the candidates in the order they were made, and one
    line per source that made none (a peer that failed, an import graphsub could not do)."""

    candidates: list[Candidate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    original_rounds: list[float] = field(default_factory=list)  # the original's per-round times (ms)
    skipped: list[str] = field(default_factory=list)  # the sources (and checks) left out for lack of time or a stop

    def add(self, cand: Candidate) -> Candidate:
        """Append ``cand``; one with the same file as an earlier candidate is marked ``same_as`` it."""
        for other in self.candidates:
            if other.digest == cand.digest:
                cand.same_as = other.name
                break
        self.candidates.append(cand)
        return cand

    @property
    def distinct(self) -> list[Candidate]:
        """The candidates that are not a copy of an earlier one, in order."""
        return [c for c in self.candidates if not c.same_as]


def rewrite_everywhere(graph: Graph, rules: Sequence[Rule], limit: int = 10_000,
                       stop: Callable[[], bool] | None = None) -> tuple[Graph, tuple[Step, ...]]:
    """:func:`graphsub.rules.everywhere.rewrite_everywhere` (``rules`` wherever they match, in linear time), its
    substitutions as search steps."""
    from graphsub.rules.everywhere import rewrite_everywhere as everywhere

    out, steps = everywhere(graph, rules, limit, stop)
    return out, tuple(Step(s.rule, s.nodes, math.nan) for s in steps)


#: the first step of a search that started from the cleaned graph (:func:`graphsub.rules.cleanup.clean` as a whole)
CLEANUP_STEP = Step(CLEANUP, (), math.nan)
_CLEANED: weakref.WeakKeyDictionary[Graph, tuple[Graph, tuple[Step, ...]]] = weakref.WeakKeyDictionary()


def cleaned_start(graph: Graph, *, stop: Callable[[], bool] | None = None) -> tuple[Graph, tuple[Step, ...]]:
    """:func:`graphsub.rules.cleanup.clean` of ``graph`` and its substitutions as steps, computed once per graph
    object (the main search, equality saturation and the searches on top of the same graph share it); a run cut
    short by ``stop`` is not kept."""
    from graphsub.rules.cleanup import clean

    hit = _CLEANED.get(graph)
    if hit is not None:
        return hit
    out, steps = clean(graph, stop=stop)
    result = out, tuple(Step(s.rule, s.nodes, math.nan) for s in steps)
    if stop is None or not stop():
        _CLEANED[graph] = result
    return result


def export_bytes(graph: Graph) -> bytes:
    """The serialized ONNX model of a graph with data for every weight."""
    from graphsub.frontends.onnx_export import export_graph

    return bytes(export_graph(graph).SerializeToString())


__all__ = ["CLEANUP_STEP", "ORIGINAL", "Candidate", "Portfolio", "cleaned_start", "export_bytes", "rewrite_everywhere"]

