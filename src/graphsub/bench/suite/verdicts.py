"""How the suite's stored records say "faster": per model and tool, the stored verdict against ONNX Runtime alone,
the best tool, the gap and the head-to-head against the best peer (what :mod:`graphsub.bench.suite.table` renders).

Every "faster" here is a decision of :mod:`graphsub.optimize.decide` made when the suite ran: the best tool is the
fastest of the variants whose stored ``verdict`` against ONNX Runtime alone (with the A/A arm,
:mod:`graphsub.bench.suite.measure`) says faster; "graphsub vs the best peer" is the stored head-to-head verdict
(:func:`graphsub.bench.suite.runner.head_to_head`); where two variants are compared side by side (a peer against
graphsub, graphsub after a peer against that peer) :func:`beats` applies :func:`graphsub.optimize.decide.verdict` to
their stored rounds by session group.

**Records written before the A/A decision** (no ``verdict`` in their timing entries, no verdict in their
head-to-head; the committed ``experiments/results/suite*.jsonl``) are classified by :func:`legacy_rule` -- the rule
those tables were published under, kept for them alone and marked wherever it speaks (:data:`LEGACY_NOTE`), so that
a re-rendered old table says what it said then and says that it has no interval. :func:`legacy_rule` is never
applied to a record that has verdicts.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from graphsub.bench.suite.measure import groups_of, min_speedup
from graphsub.bench.suite.runner import BASELINE, GRAPHSUB
from graphsub.optimize import decide

#: how a table marks what :func:`legacy_rule` classified
LEGACY_NOTE = "no interval: recorded before the A/A decision"


def timing_entry(o: Mapping[str, Any], threads: int) -> Mapping[str, Any]:
    """A tool's stored timing at ``threads`` ({} when it was not timed there)."""
    return o.get("timing", {}).get(str(threads), {})


def speedup(o: Mapping[str, Any], threads: int) -> float | None:
    """The median per-round ratio ORT-alone / variant side by side (what the cells show)."""
    return timing_entry(o, threads).get("speedup")


def legacy(o: Mapping[str, Any], threads: int) -> bool:
    """Whether a timing entry (or a head-to-head) was recorded before the A/A decision: it has no verdict."""
    t = timing_entry(o, threads)
    return bool(t) and "verdict" not in t


def legacy_rule(ratio: float, faster_share: float) -> str:
    """**For records written before the A/A decision only** (:func:`legacy`): ``"faster"``, ``"slower"`` or
    ``"tie"`` by the rule their tables were published under -- faster in at least 80% of the paired rounds by a
    median ratio of at least 1.03x (``ratio``: the other's latency / this one's per round, median; ``faster_share``:
    the share of rounds this one was faster).  Its false-positive rate is not bounded (session effects and the
    maximum over several tools are not accounted for): every new measurement is decided by
    :mod:`graphsub.optimize.decide`, never by this.

    >>> legacy_rule(1.05, 8 / 9), legacy_rule(0.95, 1 / 9), legacy_rule(1.05, 5 / 9)
    ('faster', 'slower', 'tie')
    """
    if faster_share >= 0.8 and ratio >= 1.03:
        return "faster"
    if 1.0 - faster_share >= 0.8 and ratio * 1.03 <= 1.0:
        return "slower"
    return "tie"


def _legacy_paired(ours: Sequence[float], theirs: Sequence[float]) -> tuple[float, float] | None:
    """``(median of theirs / ours per round, share of rounds ours was faster)``, the inputs of :func:`legacy_rule`."""
    if not ours or len(ours) != len(theirs):
        return None
    med = statistics.median(y / x for x, y in zip(ours, theirs, strict=True) if x > 0)
    return med, sum(x < y for x, y in zip(ours, theirs, strict=True)) / len(ours)


def verdict(o: Mapping[str, Any], threads: int) -> Mapping[str, Any] | None:
    """The stored decision on a variant against ONNX Runtime alone at ``threads`` (None: the baseline, a legacy
    record, or not measured)."""
    return timing_entry(o, threads).get("verdict")


def interval_text(v: Mapping[str, Any], *, aa: bool = True) -> str:
    """``"95% CI 1.20-1.28x, A/A 1.00x"``: a verdict's interval (and A/A ratio) as the tables say it."""
    ci, level = v.get("speedup_ci"), v.get("ci_level")
    parts = [] if ci is None else [f"{level:.0%} CI {ci[0]:.2f}-{ci[1]:.2f}x" if level else
                                   f"CI {ci[0]:.2f}-{ci[1]:.2f}x"]
    if aa and v.get("aa_ratio") is not None:
        parts.append(f"A/A {v['aa_ratio']:.2f}x")
    return ", ".join(parts) or v.get("reason", "not measured")


def _best(rec: Mapping[str, Any], threads: int) -> tuple[str, Mapping[str, Any] | None] | None:
    """:func:`best_tool` with the verdict that makes it best (None for the baseline and for legacy records)."""
    base = rec["tools"].get(BASELINE, {})
    if speedup(base, threads) is None:
        return None
    tools = [(t, o) for t, o in rec["tools"].items()
             if t != BASELINE and o.get("verified") and speedup(o, threads) is not None]
    scored: list[tuple[float, str, Mapping[str, Any] | None]]
    if legacy(base, threads):
        scored = [(r, t, None) for t, o in tools if (r := beats(o, base, threads)) is not None]
    else:
        scored = [(float(v["speedup"]), t, v) for t, o in tools if (v := verdict(o, threads)) and v.get("faster")]
    if not scored:
        return BASELINE, None
    best = max(scored, key=lambda x: (x[0], "+" not in x[1], x[1]))  # ties: one tool
    return best[1], best[2]


def best_tool(rec: Mapping[str, Any], threads: int) -> str | None:
    """The verified tool with the highest speedup over ONNX Runtime alone at ``threads`` among those whose stored
    verdict says faster (each tested at ``ALPHA / k`` of ``k`` variants, :func:`graphsub.bench.suite.measure.summarize`;
    ranked by the verdicts' speedups); the baseline when none is; None when the baseline was not timed.  A legacy
    record: by :func:`legacy_rule` (:func:`beats`)."""
    b = _best(rec, threads)
    return None if b is None else b[0]


def best_cell(rec: Mapping[str, Any], threads: int) -> str:
    """The "best" column: the best tool with its verdict's speedup, interval and A/A ratio; ``ort (no tool beyond
    noise)``; a legacy record's marked as such."""
    b = _best(rec, threads)
    if b is None:
        return "-"
    old = legacy(rec["tools"].get(BASELINE, {}), threads)
    name, v = b
    if name == BASELINE:
        return f"{BASELINE} (no tool beyond noise{f'; {LEGACY_NOTE}' if old else ''})"
    return f"{name} ({LEGACY_NOTE})" if v is None else f"{name} {v['speedup']:.2f}x ({interval_text(v)})"


def beats(a: Mapping[str, Any], b: Mapping[str, Any], threads: int, *, family: int = 1) -> float | None:
    """The speedup of variant ``a`` over ``b`` when ``a`` is faster than ``b`` beyond the noise side by side at
    ``threads``; else None.  Their stored rounds by session group (round ``r`` on session ``r mod n`` of each,
    :func:`graphsub.bench.suite.measure.groups_of`) decided by :func:`graphsub.optimize.decide.verdict` at
    ``ALPHA / family`` (``family``: how many such comparisons the caller makes at once) and ``graphsub optimize``'s
    threshold; ``b``'s rounds stand in for the A/A arm (only the baseline has one), so the interval over session
    groups decides.  A legacy record (no sessions recorded): :func:`legacy_rule` on the median ratio."""
    ta, tb = timing_entry(a, threads), timing_entry(b, threads)
    ra, rb = ta.get("rounds_ms") or [], tb.get("rounds_ms") or []
    if not ra or len(ra) != len(rb):
        return None
    if "session" not in ta or "session" not in tb:
        paired = _legacy_paired(ra, rb)
        return paired[0] if paired is not None and legacy_rule(*paired) == "faster" else None
    m = decide.Rounds(a=tuple(rb), b=tuple(ra), c=tuple(rb), group=groups_of(tb["session"], ta["session"]))
    v = decide.verdict(m, min_speedup=min_speedup(), alpha=decide.ALPHA / max(1, family))
    return v.speedup if v.faster else None


def gap(rec: Mapping[str, Any], threads: int) -> tuple[str, float, float] | None:
    """``(peer, its speedup, graphsub's speedup)`` for the fastest peer that beats graphsub alone (``graphsub`` run
    on the original) at ``threads`` beyond the noise side by side (:func:`beats`, each of the ``k`` peers at
    ``ALPHA / k``); None when none does, or graphsub alone was not timed.  (The ``graphsub+PEER`` variants start
    from a peer's output: never behind that peer.)"""
    ours = rec["tools"].get(GRAPHSUB, {})
    if not ours.get("verified") or speedup(ours, threads) is None:
        return None
    peers = [(t, o) for t, o in rec["tools"].items()
             if not t.startswith(GRAPHSUB) and o.get("verified") and speedup(o, threads) is not None]
    ahead = [(speedup(o, threads) or 0.0, t) for t, o in peers if beats(o, ours, threads, family=len(peers))]
    if not ahead:
        return None
    best_peer, name = max(ahead)
    return name, best_peer, speedup(ours, threads) or 0.0


def versus(rec: Mapping[str, Any], threads: int) -> tuple[str, str, float, str] | None:
    """graphsub against the best peer at ``threads`` in their head-to-head (fresh session groups with an A/A
    control, :func:`graphsub.bench.suite.runner.head_to_head`): ``(verdict, peer, ratio, evidence)``, ``ratio`` =
    peer / graphsub latency (above 1: graphsub faster); the verdict is the stored one: ``ahead`` (faster),
    ``behind`` (slower) or ``tie`` (neither; the same file is a tie); ``evidence`` its interval and A/A ratio.  A
    legacy head-to-head (no verdict): :func:`legacy_rule` on its ratio and share of rounds, marked "no interval"
    (the row's "best" cell says why, :data:`LEGACY_NOTE`).  None when there was no head-to-head.

    >>> h = {"peer": "p", "same_file": False, "ratio": 1.05, "faster": True, "slower": False,
    ...      "speedup_ci": [1.02, 1.08], "ci_level": 0.9, "aa_ratio": 0.998}
    >>> versus({"tools": {"graphsub": {"timing": {"2": {"head_to_head": h}}}}}, 2)
    ('ahead', 'p', 1.05, '90% CI 1.02-1.08x, A/A 1.00x')
    >>> old = {"peer": "p", "ratio": 1.05, "faster_rounds": 8 / 9, "rounds_graphsub_ms": [1.0] * 9}
    >>> versus({"tools": {"graphsub": {"timing": {"2": {"head_to_head": old}}}}}, 2)
    ('ahead', 'p', 1.05, '8/9 rounds; no interval')
    """
    h = timing_entry(rec["tools"].get(GRAPHSUB, {}), threads).get("head_to_head")
    if not h:
        return None
    if h.get("same_file"):
        return "tie", h["peer"], 1.0, "same file"
    r = h.get("ratio")
    if r is None:
        return None
    if "faster" in h:
        word = "ahead" if h["faster"] else "behind" if h.get("slower") else "tie"
        return word, h["peer"], r, interval_text(h)
    f = h.get("faster_rounds")
    if f is None:
        return None
    n = len(h.get("rounds_graphsub_ms") or [])
    share = f"{round(f * n)}/{n} rounds" if n else f"{f:.0%} of rounds"
    word = {"faster": "ahead", "slower": "behind", "tie": "tie"}[legacy_rule(r, f)]
    return word, h["peer"], r, f"{share}; no interval"


def versus_text(v: tuple[str, str, float, str]) -> str:
    """``"ahead of onnxslim: 1.05x head-to-head (90% CI 1.02-1.08x, A/A 1.00x)"``: a :func:`versus` verdict as the
    tables say it."""
    word, peer, r, evidence = v
    if evidence == "same file":
        return f"tie with {peer} (same file)"
    said = {"ahead": "ahead of", "behind": "behind", "tie": "tie with"}[word]
    return f"{said} {peer}: {r:.2f}x head-to-head ({evidence})"


__all__ = ["LEGACY_NOTE", "beats", "best_cell", "best_tool", "gap", "interval_text", "legacy", "legacy_rule", "speedup",
           "timing_entry", "verdict", "versus", "versus_text"]
