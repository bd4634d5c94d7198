"""The suite's results as a person reads them: per model and tool, verified?, latency, speedup over ONNX Runtime
alone, fused kernels after ONNX Runtime's optimizer; the best tool per model; where graphsub stands against the best
peer; the failures with the command that reproduces them.  Also the flat per-(model, tool) rows of ``--json``.

Every "faster" here is a decision of :mod:`graphsub.optimize.decide` made when the suite ran, read from the stored
records by :mod:`graphsub.bench.suite.verdicts` (records written before the A/A decision by its ``legacy_rule``,
marked wherever it speaks).

>>> def ok(ms, sp, ops, fk, **timing):
...     return {"status": "ok", "loads": True, "verified": True, "ops": ops, "fused_kernels": fk,
...             "timing": {"1": {"ms": ms[1], "speedup": sp, "rounds_ms": ms, **timing}}}
>>> rec = {"model": "m", "family": "cnn", "threads": [1], "tools": {
...     "ort": ok([2.0, 2.0, 2.1], 1.0, 5, {"FusedConv": 2}),
...     "onnxslim": ok([1.6, 1.6, 1.7], 1.25, 4, {"FusedConv": 2}),
...     "graphsub": ok([1.9, 1.9, 2.0], 1.05, 5, {})}}
>>> best_tool(rec, 1), gap(rec, 1)  # a record from before the A/A decision: the legacy rule
('onnxslim', ('onnxslim', 1.25, 1.05))
>>> behind([rec], [1])  # doctest: +NORMALIZE_WHITESPACE
['- m at 1 thread(s): side by side onnxslim 1.25x vs graphsub 1.05x (no interval: recorded before the A/A decision)
  -- FusedConv +2; ops after ORT 4 vs 5']
>>> v = {"faster": True, "slower": False, "speedup": 1.24, "speedup_ci": [1.2, 1.28], "ci_level": 0.95,
...      "aa_ratio": 1.003, "rounds": 7, "sessions": 3}
>>> rec["tools"]["onnxslim"]["timing"]["1"]["verdict"] = v  # a record with verdicts: they decide
>>> rec["tools"]["ort"]["timing"]["1"]["verdict"] = None
>>> best_tool(rec, 1), best_cell(rec, 1)
('onnxslim', 'onnxslim 1.24x (95% CI 1.20-1.28x, A/A 1.00x)')
>>> rec["tools"]["onnxslim"]["timing"]["1"]["verdict"] = {**v, "faster": False}
>>> best_cell(rec, 1)
'ort (no tool beyond noise)'
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graphsub.bench.suite.runner import BASELINE, GRAPHSUB
from graphsub.bench.suite.verdicts import (
    LEGACY_NOTE,
    beats,
    best_cell,
    best_tool,
    gap,
    interval_text,
    legacy,
    legacy_rule,
    speedup,
    timing_entry,
    verdict,
    versus,
    versus_text,
)
from graphsub.optimize import decide

#: short names of the fused kernels in tables
SHORT = {"SkipLayerNormalization": "SkipLN", "SkipSimplifiedLayerNormalization": "SkipRMSN",
         "LayerNormalization": "LN", "SimplifiedLayerNormalization": "RMSN", "MultiHeadAttention": "MHA",
         "EmbedLayerNormalization": "EmbLN", "ReorderInput": "ReorderIn", "ReorderOutput": "ReorderOut"}

def versus_counts(records: Sequence[Mapping[str, Any]], threads: int) -> list[str]:
    """Per model family and over all: on how many models graphsub is ahead of, tied with and behind the best peer
    in their head-to-head at ``threads``."""
    out = []
    fams = sorted({r.get("family", "?") for r in records})
    for fam, rs in [*((f, [r for r in records if r.get("family", "?") == f]) for f in fams),
                    *([("all", list(records))] if len(fams) > 1 else [])]:
        vs = [v[0] for r in rs if (v := versus(r, threads)) is not None]
        if vs:
            c = Counter(vs)
            out.append(f"- {fam}: ahead on {c['ahead']}, tie on {c['tie']}, behind on {c['behind']} "
                       f"(of {len(vs)} models with a head-to-head)")
    return out


def kernels(o: Mapping[str, Any]) -> str:
    """``"Attention 4, SkipLN 8"``: the fused kernels ONNX Runtime ran."""
    fk = o.get("fused_kernels") or {}
    return ", ".join(f"{SHORT.get(k.split(':')[-1], k.split(':')[-1])} {n}" for k, n in sorted(fk.items()) if n)


def cell(o: Mapping[str, Any] | None, threads: int) -> str:
    """One table cell: the speedup, or why there is none."""
    if o is None:
        return ""
    if o.get("status") != "ok":
        return {"not-applicable": "n/a", "not-installed": "missing"}.get(o.get("status", ""), "FAILED")
    if not o.get("loads"):
        return "no load"
    if not o.get("verified"):
        return "WRONG"
    sp = speedup(o, threads)
    if sp is None:
        return "-"
    return f"{sp:.2f}x" + (" (same after ORT)" if o.get("same_after_ort") else " (same file)" if o.get("same_as")
                           else "")


def tools_of(records: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        for t in r.get("tools", {}):
            seen.setdefault(t)
    return list(seen)


def speedup_table(records: Sequence[Mapping[str, Any]], threads: int) -> str:
    """Markdown: models x tools -> speedup over ONNX Runtime alone at ``threads``, the best tool, graphsub's gap."""
    tools = tools_of(records)
    head = ["model", "ORT ms", "ORT spread", *tools, "best", "graphsub vs the best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        base_t = timing_entry(r["tools"].get(BASELINE, {}), threads)
        base, rounds = base_t.get("ms"), base_t.get("rounds_ms") or []
        spread = f"{max(rounds) / min(rounds) - 1:.0%}" if rounds and min(rounds) > 0 else "-"
        g = gap(r, threads)
        alone = r["tools"].get(GRAPHSUB, {})
        v = versus(r, threads)
        behind = ("graphsub not timed" if not alone.get("verified") else
                  versus_text(v) if v is not None else "at least as fast" if g is None
                  else f"behind {g[0]}: {g[2]:.2f}x vs {g[1]:.2f}x")
        row = [r["model"], "-" if base is None else f"{base:.2f}", spread,
               *(cell(r["tools"].get(t), threads) for t in tools),
               best_cell(r, threads), behind]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def composition(records: Sequence[Mapping[str, Any]], threads: Sequence[int]) -> list[str]:
    """Where graphsub run after a peer changed the peer's output: one line per (model, peer, thread count) saying
    whether it was faster or slower than the peer's output beyond the noise (:func:`beats` both ways, each of the
    ``k`` comparisons of the model at ``ALPHA / (2 k)``), or within it."""
    out = []
    for r in records:
        pairs = [(t, o, t.partition("+")[2], r["tools"].get(t.partition("+")[2], {})) for t, o in r["tools"].items()
                 if t.startswith(GRAPHSUB + "+")]
        pairs = [(t, o, peer, p) for t, o, peer, p in pairs
                 if o.get("verified") and p.get("verified") and not o.get("same_as")]
        for n in threads:
            timed = [(t, o, peer, p) for t, o, peer, p in pairs if speedup(o, n) is not None
                     and speedup(p, n) is not None]
            for t, o, peer, p in timed:
                up, down = beats(o, p, n, family=2 * len(timed)), beats(p, o, n, family=2 * len(timed))
                said = (f"faster than {peer} alone by {up:.2f}x" if up else
                        f"SLOWER than {peer} alone by {down:.2f}x" if down else f"within noise of {peer} alone")
                mark = f" ({LEGACY_NOTE})" if legacy(o, n) else ""
                out.append(f"- {r['model']} at {n} thread(s): {t} {speedup(o, n):.2f}x vs {peer} "
                           f"{speedup(p, n):.2f}x -- {said}{mark}")
    return out


def kernel_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per model and tool, the op count and the fused kernels after ONNX Runtime's optimizer."""
    lines = ["| model | tool | ops after ORT | fused kernels after ORT |", "|---|---|---|---|"]
    for r in records:
        for t, o in r["tools"].items():
            if o.get("loads"):
                lines.append(f"| {r['model']} | {t} | {o.get('ops', '-')} | {kernels(o) or '-'} |")
    return "\n".join(lines) + "\n"


def kernel_diff(peer: Mapping[str, Any], ours: Mapping[str, Any], limit: int = 10) -> str:
    """What ONNX Runtime ran differently: ops of each type (fused kernels included) the peer's variant has more
    (+) or fewer (-) of than graphsub's after ORT's own optimization (the op histogram where recorded, else the
    fused kernels), and the op counts.  When nothing differs, no rewrite explains the gap: it says so.

    >>> kernel_diff({"ops": 38, "fused_kernels": {"Attention": 4, "FusedMatMul": 0}},
    ...             {"ops": 150, "fused_kernels": {"FusedMatMul": 4}})
    'Attention +4, FusedMatMul -4; ops after ORT 38 vs 150'
    >>> kernel_diff({"ops": 5, "op_histogram": {"Conv": 5}}, {"ops": 5, "op_histogram": {"Conv": 5}})
    'identical ops after ORT (5): no rewrite explains the gap (timing noise or node order)'
    """
    key = "op_histogram" if "op_histogram" in peer and "op_histogram" in ours else "fused_kernels"
    pk, ok = peer.get(key) or {}, ours.get(key) or {}
    diffs = sorted(((k, pk.get(k, 0) - ok.get(k, 0)) for k in set(pk) | set(ok) if pk.get(k, 0) != ok.get(k, 0)),
                   key=lambda kv: (":" not in kv[0] and key == "op_histogram", -abs(kv[1]), kv[0]))
    if not diffs and peer.get("ops") == ours.get("ops"):
        return f"identical ops after ORT ({peer.get('ops')}): no rewrite explains the gap (timing noise or node order)"
    parts = [f"{k.split(':')[-1]} {d:+d}" for k, d in diffs[:limit]] + (["..."] if len(diffs) > limit else [])
    return ", ".join(parts) + f"; ops after ORT {peer.get('ops')} vs {ours.get('ops')}"


def behind(records: Sequence[Mapping[str, Any]], threads: Sequence[int]) -> list[str]:
    """One line per (model, thread count) where a peer beats graphsub alone, side by side (:func:`gap`) or in their
    head-to-head (:func:`versus`): by how much in each, and what ONNX Runtime ran differently in the peer's variant
    (the input to the next round of rules)."""
    out = []
    for r in records:
        for n in threads:
            g, v = gap(r, n), versus(r, n)
            if g is None and (v is None or v[0] != "behind"):
                continue
            ours = r["tools"][GRAPHSUB]
            ours = ours.get("at_threads", {}).get(str(n), ours)  # the output of graphsub optimize --threads n
            h2h = "" if v is None else f"head-to-head: {versus_text(v)}"
            if g is None:
                assert v is not None
                out.append(f"- {r['model']} at {n} thread(s): {h2h} (side by side within noise) -- "
                           f"{kernel_diff(r['tools'][v[1]], ours)}")
                continue
            name, theirs, mine = g
            mark = f" ({LEGACY_NOTE})" if legacy(r["tools"][GRAPHSUB], n) else ""
            out.append(f"- {r['model']} at {n} thread(s): side by side {name} {theirs:.2f}x vs graphsub {mine:.2f}x"
                       + mark + (f"; {h2h}" if h2h else "") + f" -- {kernel_diff(r['tools'][name], ours)}")
    return out


def failures(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per output that failed, did not load or did not verify, with the command that reproduces it."""
    out = []
    for r in records:
        for t, o in r["tools"].items():
            if o.get("status") in ("not-applicable", "not-installed"):
                continue
            what = (f"failed: {o.get('error')}" if o.get("status") != "ok" else
                    f"does not load: {o.get('check_error', '')}" if not o.get("loads") else
                    f"wrong outputs (max abs diff {o.get('max_abs_diff', float('nan')):.3g})"
                    if not o.get("verified") else "")
            if what:  # a suite model by its id (the path is this machine's cache), a user's file by its path
                model = r["path"] if r.get("family") == "user" else r["model"]
                out.append(f"- {r['model']} / {t}: {what}. Reproduce: `graphsub bench suite --models {model} "
                           f"--peers {t.partition('+')[2] or t} --name repro --no-resume`")
    return out


def json_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per model and tool: ``verified``, ``loads``, ``ms``, ``speedup`` (the median per-round ratio),
    ``faster_rounds`` (descriptive), ``faster`` (its verdict against ONNX Runtime alone), ``speedup_ci`` and
    ``aa_ratio`` (the verdict's; None in a legacy record) and ``verdict`` (the whole stored decision: its speedup,
    ``rounds``, ``sessions``, ``alpha``, ``reason``, ...), each by thread count; ``ops``, ``fused_kernels``,
    ``status``, ``error``; graphsub's row also its ``head_to_head`` with the best peer (by thread count: the peer,
    ``ratio`` = peer / graphsub latency, and the verdict: ``faster``, ``slower``, ``speedup_ci``, ``aa_ratio``,
    ``rounds``, ``sessions``, the rounds)."""
    rows = []
    for r in records:
        for t, o in r["tools"].items():
            timing = o.get("timing", {})
            rows.append({"model": r["model"], "tool": t, "status": o.get("status"), "error": o.get("error") or None,
                         "verified": o.get("verified"), "loads": o.get("loads"),
                         "ms": {n: v.get("ms") for n, v in timing.items()},
                         "speedup": {n: v.get("speedup") for n, v in timing.items()},
                         "faster_rounds": {n: v.get("faster_rounds") for n, v in timing.items()},
                         "faster": {n: (v.get("verdict") or {}).get("faster") for n, v in timing.items()},
                         "speedup_ci": {n: (v.get("verdict") or {}).get("speedup_ci") for n, v in timing.items()},
                         "aa_ratio": {n: (v.get("verdict") or {}).get("aa_ratio") for n, v in timing.items()},
                         "verdict": {n: v.get("verdict") for n, v in timing.items()},
                         "ops": o.get("ops"), "fused_kernels": o.get("fused_kernels"),
                         **({"head_to_head": {n: v["head_to_head"] for n, v in timing.items() if "head_to_head" in v}}
                            if t == GRAPHSUB else {})})
    return rows


def plot(records: Sequence[Mapping[str, Any]], threads: Sequence[int], path: Path) -> Path:
    """Speedup over ONNX Runtime alone per model (one panel per thread count), one marker per tool."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tools = tools_of(records)
    markers = "os^vD<>phX*+x12348"
    fig, axes = plt.subplots(1, len(threads), figsize=(max(8.0, 0.45 * len(records)) * len(threads) / 1.5, 5.0),
                             squeeze=False)
    for ax, n in zip(axes[0], threads, strict=True):
        for i, t in enumerate(tools):
            pts = [(j, speedup(r["tools"][t], n)) for j, r in enumerate(records)
                   if t in r["tools"] and r["tools"][t].get("verified") and speedup(r["tools"][t], n) is not None]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)], label=t,
                           s=46 if t.startswith(GRAPHSUB) else 28, alpha=0.85)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(range(len(records)), [r["model"] for r in records], rotation=70, fontsize=7)
        ax.set_ylabel("speedup over ORT_ENABLE_ALL")
        ax.set_title(f"{n} thread(s)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def rule_family(rule: str) -> str:
    """The rule set a rule name comes from, by its prefix (``ortsp_ln_sum`` -> ``ort-spelling``).

    >>> rule_family("ortsp_ln_sum"), rule_family("cpu_reshape_noop"), rule_family("taso_pb_031")
    ('ort-spelling', 'cpu', 'taso-pb')
    """
    prefixes = (("ortsp_", "ort-spelling"), ("ort_", "ort"), ("cpu_", "cpu"), ("alg_", "algebra"), ("mf_", "metaflow"),
                ("taso_pb_", "taso-pb"), ("gen_", "generated"), ("layout_", "layout"))
    return next((fam for pre, fam in prefixes if rule.startswith(pre)), "builtin")


def choices(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per model, what graphsub's portfolio kept: the candidate (and the peer or search it was built on), the rule
    families that made it, and its own measured speedup (confirmed: with the interval and A/A ratio of its
    confirmation, :mod:`graphsub.optimize.decide`, where recorded) at the thread count it decided at: one
    row per thread count, each its own run (``graphsub optimize --threads N``)."""
    lines = ["| model | kept | built on | rule families (substitutions) | its speedup | threads | candidates | "
             "time to result |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        ours = r["tools"].get(GRAPHSUB, {})
        for g in sorted([ours, *ours.get("at_threads", {}).values()], key=lambda g: g.get("threads") or 0):
            if g.get("status") != "ok" or "chosen" not in g:
                continue
            cands = {c["name"]: c for c in g.get("candidates", [])}
            kept = cands.get(g["chosen"], {})
            fams = Counter(rule_family(rule) for rule in kept.get("rules", []))
            sp = kept.get("confirm_speedup") or kept.get("speedup")
            conf = kept.get("confirmation") or {}
            its = "-" if sp is None else f"{sp:.3f}x" + (f" ({interval_text(conf)})" if conf.get("speedup_ci") else "")
            lines.append(f"| {r['model']} | {g['chosen']} | {g.get('chosen_base') or '-'} | "
                         + (", ".join(f"{f} ({n} rules)" for f, n in fams.items()) or "-")
                         + f" | {its} | {g.get('threads', '-')} | {len(cands)} | "
                         + ("-" if g.get("seconds") is None else f"{g['seconds']:.1f} s") + " |")
    return lines


#: the time to result ``graphsub optimize`` must keep to on every suite model (issue 20)
TIME_TO_RESULT_S = 90.0


def time_to_result(records: Sequence[Mapping[str, Any]], limit_s: float = TIME_TO_RESULT_S) -> list[str]:
    """How long each ``graphsub optimize`` run took, wall time of its process (loading, search, verification,
    portfolio, timing and writing): the longest, and every run over ``limit_s``.

    >>> recs = [{"model": "a", "tools": {"graphsub": {"status": "ok", "seconds": 61.0, "threads": 2,
    ...          "at_threads": {"1": {"status": "ok", "seconds": 93.5, "threads": 1}}}}}]
    >>> time_to_result(recs)
    ['- 2 runs of graphsub optimize: longest 93.5 s (a, 1 thread(s)), median 77.2 s; over 90 s: 1 (a at 1 thread(s))']
    """
    runs = [(float(g["seconds"]), r["model"], g.get("threads", "?")) for r in records
            for g in [r["tools"].get(GRAPHSUB, {}), *r["tools"].get(GRAPHSUB, {}).get("at_threads", {}).values()]
            if g.get("status") == "ok" and "seconds" in g]
    if not runs:
        return []
    top = max(runs)
    over = [f"{m} at {n} thread(s)" for s, m, n in sorted(runs, reverse=True) if s > limit_s]
    return [f"- {len(runs)} runs of graphsub optimize: longest {top[0]:.1f} s ({top[1]}, {top[2]} thread(s)), median "
            f"{statistics.median(s for s, _, _ in runs):.1f} s; over {limit_s:g} s: {len(over)}"
            + (f" ({', '.join(over)})" if over else "")]


def family_geomeans(records: Sequence[Mapping[str, Any]], threads: int) -> list[str]:
    """Geometric means of each tool's speedup per model family (failed or wrong outputs count as 1.0x: the user
    keeps the original)."""
    out = []
    for fam in sorted({r.get("family", "?") for r in records}):
        rs = [r for r in records if r.get("family", "?") == fam]
        for t in tools_of(rs):
            g = geomean([(speedup(r["tools"][t], threads) if r["tools"].get(t, {}).get("verified") else None) or 1.0
                         for r in rs if t in r["tools"] and r["tools"][t].get("status") != "not-applicable"])
            if g is not None:
                out.append(f"- {fam} ({len(rs)} models), {t}: {g:.3f}x")
    return out


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def write_tables(records: Sequence[Mapping[str, Any]], out_dir: Path, name: str, *, plots: bool = True
                 ) -> dict[str, str]:
    """``<name>.md`` (the tables and failures) and ``<name>.png`` (the plot) in ``out_dir``."""
    threads = sorted({int(n) for r in records for n in r.get("threads", [])})
    parts = [f"# {name}: models x tools, speedup over ONNX Runtime alone (ORT_ENABLE_ALL)\n\n",
             "Cells: median of the per-round ratios ORT-alone / variant (alternating rounds, three sessions a "
             "variant used in turn); (same file) = byte-"
             "identical to another variant's output, timed once; (same after ORT) = ONNX Runtime runs it exactly "
             "as another variant (the same optimized graph: same kernels, same shapes), timed once; FAILED = the "
             "tool failed, no load = ONNX Runtime "
             "rejects the output, WRONG = outputs differ from the original, n/a = the tool does not apply. ORT "
             "spread: slowest / fastest round of the original, minus 1. Best = the fastest tool whose speedup the "
             "decision (graphsub.optimize.decide: a t-test over session groups, with the original timed a second "
             "time as an A/A control) calls faster -- its interval above 1.0x, its speedup above graphsub "
             "optimize's threshold and above what the A/A control reads; each of the k tools of a model is tested "
             f"at {decide.ALPHA:g}/k, so that tools no faster than the original make one 'best' at most "
             f"{decide.ALPHA:.0%} of the time -- with that speedup, its interval and the A/A ratio. Rows marked "
             f"({LEGACY_NOTE}) were measured before that decision: classified by the rule of their time (faster in "
             "80% of the rounds by 1.03x), with no interval.\n\n"]
    for n in threads:
        parts += [f"## {n} thread(s)\n\n", speedup_table(records, n), "\n"]
        for t in tools_of(records):
            g = geomean([speedup(r["tools"][t], n) or 0.0 for r in records
                         if t in r["tools"] and r["tools"][t].get("verified")])
            if g is not None:
                parts.append(f"- geometric mean, {t}: {g:.3f}x\n")
        counts = versus_counts(records, n)
        if counts:
            parts += ["\ngraphsub against the best peer, head-to-head (graphsub.optimize.decide.compare: fresh "
                      "session groups of the peer, graphsub and the peer again as the A/A control; ahead/behind = "
                      "the decision says faster/slower):\n\n", "\n".join(counts), "\n"]
        parts.append("\n")
    for n in threads:
        parts += [f"## Geometric means by family, {n} thread(s) (a failed or wrong output counts as 1.0x)\n\n",
                  "\n".join(family_geomeans(records, n)), "\n\n"]
    chosen = choices(records)
    if len(chosen) > 2:
        parts += ["## What graphsub kept (its portfolio)\n\n", "\n".join(chosen), "\n\n"]
    ttr = time_to_result(records)
    if ttr:
        parts += ["## graphsub's time to result (`graphsub optimize`, the whole command)\n\n", "\n".join(ttr), "\n\n"]
    lag = behind(records, threads)
    parts += ["## Where a peer beats graphsub\n\n", "\n".join(lag) if lag else "nowhere", "\n\n"]
    comp = composition(records, threads)
    parts += ["## graphsub after a peer (where it changed the peer's output)\n\n",
              "\n".join(comp) if comp else "graphsub kept every peer's output unchanged", "\n\n"]
    parts += ["## Fused kernels after ONNX Runtime's optimizer\n\n", kernel_table(records), "\n"]
    fails = failures(records)
    parts += ["## Failures\n\n", "\n".join(fails) if fails else "none", "\n"]
    md = out_dir / f"{name}.md"
    md.write_text("".join(parts), encoding="utf-8")
    files = {"markdown": str(md)}
    if plots and records and threads:
        files["plot"] = str(plot(records, threads, out_dir / f"{name}.png"))
    return files


__all__ = [
    "LEGACY_NOTE",
    "TIME_TO_RESULT_S",
    "beats",
    "behind",
    "best_cell",
    "best_tool",
    "cell",
    "choices",
    "composition",
    "failures",
    "family_geomeans",
    "gap",
    "geomean",
    "interval_text",
    "json_rows",
    "kernel_diff",
    "kernel_table",
    "kernels",
    "legacy",
    "legacy_rule",
    "plot",
    "rule_family",
    "speedup",
    "speedup_table",
    "time_to_result",
    "tools_of",
    "verdict",
    "versus",
    "versus_counts",
    "versus_text",
    "write_tables",
]
