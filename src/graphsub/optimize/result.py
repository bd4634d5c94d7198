"""What :func:`graphsub.optimize.optimize` returns: :class:`OptimizeResult` (and :class:`Failure`, the
substitution that broke equivalence).  Plain data with ``to_dict()`` for ``--json``; imported by the
pipeline, the verification step and the HTML report alike, so it imports none of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from graphsub.ir.graph import Graph
from graphsub.optimize.decide import Verdict
from graphsub.rules.cleanup import CLEANUP
from graphsub.rules.rule import Rule
from graphsub.search.base import SearchResult, Step


def _finite(x: float) -> float | None:
    """JSON-safe: NaN and inf become None."""
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Failure:
    """The first substitution that breaks equivalence (from bisection), or why none was named."""

    step: int  # 1-based position in the sequence; 0 when unknown
    rule: str
    nodes: tuple[int, ...]
    output: str
    max_abs_diff: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rule": self.rule, "nodes": list(self.nodes), "output": self.output,
                "max_abs_diff": _finite(self.max_abs_diff), "message": self.message}


@dataclass
class OptimizeResult:
    """What :func:`~graphsub.optimize.optimize` did; ``graph`` is the model chosen (optimized or the
    original).  ``report`` is set by whoever writes the HTML report (the CLI's ``--report``)."""

    model: str
    original: Graph
    optimized: Graph
    graph: Graph
    search: SearchResult
    verified: bool
    max_abs_diff: float
    worst_output: str = ""
    latency_ms: dict[str, dict[str, Any]] = field(default_factory=dict)  # level -> {before, after, rounds}
    kept_original: bool = False
    decision: str = ""
    written: str | None = None
    failure: Failure | None = None
    threads: int = 1
    seeds: tuple[int, ...] = ()
    timings_s: dict[str, float] = field(default_factory=dict)
    rule_set: str = ""  # the rule-set spec (or "N rules" for a list)
    cost_model: str = ""
    rules: tuple[Rule, ...] = field(default=(), repr=False)  # to replay the sequence (report pictures)
    report: str | None = None  # where the HTML report was written
    candidates: list[Any] = field(default_factory=list)  # the portfolio (graphsub.optimize.portfolio.Candidate)
    portfolio_notes: list[str] = field(default_factory=list)  # sources that made no candidate, and why
    provider: str = "cpu"  # the ONNX Runtime execution provider the candidates were timed on
    chosen: str = ""  # the candidate written ("original" when none was faster); "" when nothing was timed
    time_budget_s: float | None = None  # the wall-time budget of the whole call (None: unbounded)
    # what ended the call early: "interrupt" (a stop request, the first Ctrl-C), "time" (the budget cut a phase
    # short or left no time for it), "" (every phase ran as planned)
    budget_stop: str = ""
    # the decision on the candidate shown (the chosen one, else the best confirmed): its speedup, interval, A/A ratio
    verdict: Verdict | None = None
    # the clean-up's own substitutions (graphsub.rules.cleanup), which a sequence records as its first step
    cleanup: tuple[Step, ...] = ()
    # the process's peak resident memory (MB) when the call ended (a command's whole run: it optimizes one model)
    peak_rss_mb: float | None = None

    @property
    def interrupted(self) -> bool:
        """Whether a stop was requested (the first Ctrl-C) during the call or its search."""
        return self.budget_stop == "interrupt" or self.search.stopped_by == "interrupt"

    @property
    def stopped_by(self) -> str:
        """``"interrupt"`` when interrupted, else ``"time"`` when the budget cut a phase after the search short,
        else the search's own ``stopped_by`` (``done``, ``time``, ...)."""
        return "interrupt" if self.interrupted else (self.budget_stop or self.search.stopped_by)

    def speedup(self, level: str) -> float | None:
        """The speedup under ``level`` (``all`` or ``disable``): for ``all``, the confirmed speedup of the candidate
        shown (:attr:`verdict`) when there is one, else ``before / after`` latency; None if not timed."""
        if level == "all" and self.verdict is not None and self.verdict.speedup is not None:
            return self.verdict.speedup
        lat = self.latency_ms.get(level)
        return lat["before"] / lat["after"] if lat and lat["after"] > 0 else None

    @property
    def chosen_candidate(self) -> Any:
        return next((c for c in self.candidates if c.name == self.chosen), None)

    @property
    def applied(self) -> list[dict[str, Any]]:
        """graphsub's substitutions in the model chosen (the search's, without a portfolio)."""
        cand = self.chosen_candidate
        steps = self.search.sequence if not self.candidates else (cand.steps if cand is not None else ())
        if steps and steps[0].rule == CLEANUP:  # the clean-up's substitutions, one by one
            steps = (*self.cleanup, *steps[1:])
        return [{"rule": s.rule, "nodes": list(s.nodes), "cost": _finite(s.cost)} for s in steps]

    def to_dict(self) -> dict[str, Any]:
        lat_all = self.latency_ms.get("all", {})
        lat_dis = self.latency_ms.get("disable", {})
        r = self.search
        v = self.verdict
        return {
            "model": self.model,
            "verified": self.verified,
            "max_abs_diff": _finite(self.max_abs_diff),
            "worst_output": self.worst_output,
            "latency_ms_before": lat_all.get("before"),
            "latency_ms_after": lat_all.get("after"),
            "latency_ms_before_disabled": lat_dis.get("before"),
            "latency_ms_after_disabled": lat_dis.get("after"),
            "speedup_ort_all": self.speedup("all"),
            "speedup_ort_disabled": self.speedup("disable"),
            "latency_rounds_ms": {lv: v.get("rounds") for lv, v in self.latency_ms.items()},
            "speedup": self.speedup("all"),
            "speedup_ci": None if v is None or v.speedup_ci is None else list(v.speedup_ci),
            "ci_level": None if v is None else v.ci_level,
            "aa_ratio": None if v is None else v.aa_ratio,
            "rounds": None if v is None else v.rounds,
            "sessions": None if v is None else v.groups,
            "confirmation": None if v is None else v.to_dict(),
            "kept_original": self.kept_original,
            "decision": self.decision,
            "written": self.written,
            "applied": self.applied,
            "failure": None if self.failure is None else self.failure.to_dict(),
            "algorithm": r.algorithm,
            "initial_cost": r.initial_cost,
            "best_cost": r.best_cost,
            "search_time_s": r.wall_time_s,
            "stopped_by": self.stopped_by,
            "search_stopped_by": r.stopped_by,
            "interrupted": self.interrupted,
            "time_budget_s": self.time_budget_s,
            "ops_before": self.original.num_ops,
            "ops_after": self.optimized.num_ops,
            "opaque_ops": sum(1 for _ in self.original.ops_of("opaque")),
            "threads": self.threads,
            "seeds": list(self.seeds),
            "timings_s": self.timings_s,
            "peak_rss_mb": self.peak_rss_mb,
            "rule_set": self.rule_set,
            "cost_model": self.cost_model,
            "report": self.report,
            "chosen": self.chosen or None,
            "provider": self.provider,
            "candidates": [c.to_dict() for c in self.candidates],
            "portfolio_notes": self.portfolio_notes,
        }


__all__ = ["Failure", "OptimizeResult"]
