"""The optimization report: one self-contained HTML file for an :class:`~graphsub.optimize.OptimizeResult`.

Sections (each a ``<section id=...>``): ``summary`` (model, verdict, what was written and why, search
settings), ``performance`` (cost and measured onnxruntime latency before/after under
``ORT_ENABLE_ALL``, with speedups, and the portfolio of candidates), ``histogram`` (op counts before vs
after), ``substitutions`` (step, rule, where, cost delta, cumulative cost), ``trace`` (best cost vs
search time) and ``regions`` (pictures of the changed regions, first ``max_pictures`` steps).

Invariants: CSS is inline; every image is a PNG ``data:`` URI; there are no scripts and no external
references (no ``http(s)://``, no ``src`` outside ``data:``); every string from the model, rules or
result is escaped with :func:`html.escape`.  When the optimizer kept the original (or verification
failed), the report still shows what the search found and says that it was not written.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable
from pathlib import Path

from graphsub.optimize.output import write_bytes
from graphsub.optimize.report.plots import histogram_png, trace_png
from graphsub.optimize.report.regions import Change, describe, draw_change, replay_changes
from graphsub.optimize.result import OptimizeResult

MAX_PICTURES = 8
MAX_WHERE = 6  # matched nodes listed per table row before "+N more"

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#222;margin:0;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:18px 28px 40px}
h1{font-size:1.5em;margin:.4em 0 .2em}h2{font-size:1.15em;margin:0 0 .6em;color:#1d3f66}
h3{font-size:1em;margin:1em 0 .3em}
section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:14px 18px;margin:14px 0}
table{border-collapse:collapse;font-size:.9em}th,td{padding:4px 10px;border-bottom:1px solid #e4e7eb;
text-align:left;vertical-align:top}th{background:#f0f2f5}td.num,th.num{text-align:right;
font-variant-numeric:tabular-nums}
.kv th{background:none;font-weight:600;width:200px}.muted{color:#6b7280}.small{font-size:.85em}
.verdict{padding:10px 14px;border-radius:5px;margin:8px 0 12px;font-weight:600}
.ok{background:#e6f4ea;border:1px solid #9bd3a8}.warn{background:#fff6e0;border:1px solid #f0cf7a}
.bad{background:#fdecea;border:1px solid #f1a7a0}.better{color:#1e7b34}.worse{color:#b3261e}
tr.fail td{background:#fdecea}img{max-width:100%;height:auto;display:block}
code{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.92em}
.legend span{display:inline-block;padding:1px 8px;border-radius:4px;margin-right:8px;border:1px solid #aaa}
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _num(x: float | None, fmt: str = ".6g") -> str:
    return "&ndash;" if x is None or not math.isfinite(x) else format(x, fmt)


def _ratio(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "&ndash;"
    cls = "better" if x > 1.0 else "worse" if x < 1.0 else ""
    return f'<span class="{cls}">{x:.3f}&times;</span>'


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], *, numeric: Iterable[int] = (),
           row_class: Iterable[str] | None = None) -> str:
    """A table from already-escaped cells; columns in ``numeric`` are right-aligned."""
    num = set(numeric)
    ths = "".join(f'<th class="num">{h}</th>' if i in num else f"<th>{h}</th>" for i, h in enumerate(head))
    classes = list(row_class) if row_class is not None else None
    body = []
    for r, row in enumerate(rows):
        tds = "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>" for i, c in enumerate(row))
        cls = f' class="{classes[r]}"' if classes and classes[r] else ""
        body.append(f"<tr{cls}>{tds}</tr>")
    return f"<table><thead><tr>{ths}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _kv(rows: Iterable[tuple[str, str]]) -> str:
    return '<table class="kv">' + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _verdict(res: OptimizeResult) -> tuple[str, str]:
    """``(css class, escaped text)`` of the headline: what was written and why."""
    n = len(res.search.sequence)
    if not res.verified:
        return "bad", f"Verification FAILED: nothing was written. {_e(res.decision)}."
    if n == 0:
        return "warn", f"No cheaper equivalent graph was found. {_e(res.decision)}."
    if res.kept_original:
        head = (f"The optimized graph was NOT written (the original model was written to <code>{_e(res.written)}"
                "</code> instead)" if res.written
                else "The optimized graph was NOT chosen (no output file was requested)")
        return "warn", f"{head}. Why: {_e(res.decision)}. The sections below show what the search found."
    head = (f"The optimized model was written to <code>{_e(res.written)}</code>" if res.written
            else "The optimized model was chosen (no output file was requested)")
    return "ok", f"{head}. Why: {_e(res.decision)}."


def _summary(res: OptimizeResult) -> str:
    r = res.search
    cls, text = _verdict(res)
    diff = ("&ndash;" if not res.search.sequence else
            f"{_num(res.max_abs_diff, '.3g')}" + (f" (worst output <code>{_e(res.worst_output)}</code>)"
                                                   if res.worst_output else ""))
    rows = [
        ("model", f"<code>{_e(res.model)}</code>"),
        ("verified", ("yes" if res.verified else "<b>no</b>") + f" &mdash; {len(res.seeds)} random input draw(s), "
         f"seeds {_e(', '.join(map(str, res.seeds)))}"),
        ("max abs diff", diff),
        ("result written", f"<code>{_e(res.written)}</code> ({'original' if res.kept_original else 'optimized'} "
         "model)" if res.written else "nothing written"),
        ("search algorithm", _e(r.algorithm) + f" &mdash; stopped by {_e(r.stopped_by)}, "
         f"{r.stats.expanded} graphs expanded, {r.stats.generated} generated"),
        ("rule set", _e(res.rule_set or "?") + (f" ({len(res.rules)} rules)" if res.rules else "")),
        ("cost model", _e(res.cost_model or "?")),
        ("search time", f"{r.wall_time_s:.2f} s"),
        ("ops", f"{res.original.num_ops} &rarr; {res.optimized.num_ops} "
         f"({len(r.sequence)} substitution(s) applied)"),
        ("onnxruntime threads", str(res.threads)),
    ]
    if res.failure is not None:
        f = res.failure
        rows.insert(3, ("failing substitution", f"step {f.step}: <code>{_e(f.rule)}</code> at nodes "
                        f"{_e(list(f.nodes))} &mdash; {_e(f.message)}"))
    return (f'<section id="summary"><h2>Summary</h2><div class="verdict {cls}">{text}</div>{_kv(rows)}'
            "</section>")


def _performance(res: OptimizeResult) -> str:
    r = res.search
    cost_rows = [[f"cost ({_e(res.cost_model or 'model')})", _num(r.initial_cost), _num(r.best_cost),
                  _ratio(r.initial_cost / r.best_cost if r.best_cost else None)]]
    lat_rows = []
    for level, label in (("all", "ORT_ENABLE_ALL"), ("disable", "ORT_DISABLE_ALL")):
        lat = res.latency_ms.get(level)
        if lat:
            lat_rows.append([f"latency {label} (ms, median)", _num(lat["before"], ".4g"), _num(lat["after"], ".4g"),
                             _ratio(res.speedup(level))])
    note = ""
    if not lat_rows:
        why = "verification failed" if not res.verified else "timing was switched off"
        note = f'<p class="muted">Latency was not measured ({why}).</p>'
    else:
        v = res.verdict
        if v is not None and v.speedup is not None and v.speedup_ci is not None and v.aa_ratio is not None:
            note = (f'<p class="small">Confirmed speedup <b>{v.speedup:.3f}x</b>, {v.ci_level:.0%} interval '
                    f"{v.speedup_ci[0]:.3f}-{v.speedup_ci[1]:.3f}x; A/A control (the original against fresh "
                    f"sessions of itself) {v.aa_ratio:.3f}x; {v.rounds} rounds in {v.groups} session groups "
                    f"(onnxruntime, {res.threads} thread(s)). {_e(v.reason)}.</p>")
        else:
            rounds = len(res.latency_ms.get("all", {}).get("rounds") or [])
            note = (f'<p class="muted small">onnxruntime, {res.threads} thread(s); median of repeats'
                    + (f", median over {rounds} alternating rounds" if rounds else "")
                    + ". Speedup = before / after (not confirmed).</p>")
    table = _table(["", "before", "after", "speedup"], cost_rows + lat_rows, numeric=(1, 2, 3))
    return f'<section id="performance"><h2>Cost and latency</h2>{table}{note}{_candidates(res)}</section>'


def _candidates(res: OptimizeResult) -> str:
    """The portfolio: every candidate, its source, verification and measured speed (the chosen one in bold)."""
    if not res.candidates:
        return ""
    rows = []
    for c in res.candidates:
        d = c.to_dict()
        name = f"<b>{_e(c.name)}</b>" if c.name == res.chosen else _e(c.name)
        verdict = "same file as " + _e(c.same_as) if c.same_as else {True: "yes", False: "no: " + _e(c.error),
                                                                      None: ""}[c.verified]
        v = c.confirmation
        interval = ("" if v is None or v.speedup_ci is None else f"{v.speedup_ci[0]:.3f}-{v.speedup_ci[1]:.3f}x")
        rows.append([name, _e(", ".join(c.rules[:6]) + (" ..." if len(c.rules) > 6 else "")), verdict,
                     _num(d["ms"], ".4g") if d["ms"] is not None else "", _ratio(c.speedup),
                     _ratio(c.confirm_speedup), interval, _ratio(None if v is None else v.aa_ratio),
                     "" if v is None else _e(v.reason)])
    table = _table(["candidate", "graphsub rules", "verified", "ms", "side by side", "confirmed", "interval",
                    "A/A", "decision"], rows, numeric=(3, 4, 5, 6, 7))
    notes = "".join(f"<li>{_e(n)}</li>" for n in res.portfolio_notes)
    return f"<h3>Candidates</h3>{table}" + (f'<ul class="muted small">{notes}</ul>' if notes else "")


def _histogram(res: OptimizeResult) -> str:
    before, after = res.original.op_histogram(), res.optimized.op_histogram()
    uri = histogram_png(before, after)
    return ('<section id="histogram"><h2>Op types before and after</h2>'
            f'<img alt="op histogram before and after" src="{uri}">'
            '<p class="muted small">Compute ops only (inputs, weights and constants are not counted); '
            "after = the search result with weight-only subgraphs folded.</p></section>")


def _substitutions(res: OptimizeResult, changes: list[Change], replay_error: str) -> str:
    seq = res.search.sequence
    if not seq:
        return ('<section id="substitutions"><h2>Applied substitutions</h2>'
                '<p class="muted">No substitution lowered the cost.</p></section>')
    rows, classes = [], []
    prev = res.search.initial_cost
    fail_step = res.failure.step if res.failure is not None else 0
    for i, st in enumerate(seq, 1):
        ch = changes[i - 1] if i - 1 < len(changes) else None
        nodes = list(st.nodes)
        shown = describe(ch.before, nodes[:MAX_WHERE]) if ch else ", ".join(f"%{n}" for n in nodes[:MAX_WHERE])
        more = f" +{len(nodes) - MAX_WHERE} more" if len(nodes) > MAX_WHERE else ""
        delta = st.cost - prev
        rows.append([str(i), f"<code>{_e(st.rule)}</code>", _e(shown + more),
                     f'<span class="{"better" if delta < 0 else "worse" if delta > 0 else ""}">{delta:+.4g}</span>',
                     _num(st.cost)])
        classes.append("fail" if i == fail_step else "")
        prev = st.cost
    table = _table(["step", "rule", "where (matched nodes)", "cost delta", "cost after"], rows, numeric=(0, 3, 4),
                   row_class=classes)
    extra = (f'<p class="muted small">Could not replay the whole sequence: {_e(replay_error)}.</p>'
             if replay_error else "")
    return f'<section id="substitutions"><h2>Applied substitutions ({len(seq)})</h2>{table}{extra}</section>'


def _trace(res: OptimizeResult) -> str:
    r = res.search
    uri = trace_png(r.trace, initial=r.initial_cost, best=r.best_cost)
    return ('<section id="trace"><h2>Best cost vs search time</h2>'
            f'<img alt="best cost vs search time" src="{uri}"></section>')


def _regions(res: OptimizeResult, changes: list[Change], replay_error: str, max_pictures: int) -> str:
    n = len(res.search.sequence)
    head = '<section id="regions"><h2>Changed regions</h2>'
    if n == 0:
        return head + '<p class="muted">Nothing changed.</p></section>'
    legend = ('<p class="legend small"><span style="background:#f4b6b0">removed</span>'
              '<span style="background:#fbd9a5">matched, kept</span><span style="background:#b9e4b3">added</span>'
              '<span style="background:#cfe0f6">rewired</span>'
              '<span style="background:#eeeeee">context (1 hop)</span> Each step is drawn in the graph just '
              "before it (left) and just after it (right); columns are topological depth.</p>")
    parts = [head, legend]
    for ch in changes[:max_pictures]:
        parts.append(f"<h3>Step {ch.index}: <code>{_e(ch.rule)}</code></h3>"
                     f'<p class="small muted">removed: {_e(describe(ch.before, sorted(ch.removed)) or "none")}; '
                     f'added: {_e(describe(ch.after, sorted(ch.added)) or "none")}</p>'
                     f'<img alt="step {ch.index} before and after" src="{draw_change(ch)}">')
    drawn = min(len(changes), max_pictures)
    if drawn < n:
        why = f" (replay stopped: {_e(replay_error)})" if replay_error and len(changes) < max_pictures else ""
        parts.append(f'<p class="muted">{n - drawn} more substitution(s) not drawn{why}.</p>')
    return "".join(parts) + "</section>"


def render_report(result: OptimizeResult, *, max_pictures: int = MAX_PICTURES, title: str | None = None) -> str:
    """The report for ``result`` as one self-contained HTML document (see the module docstring)."""
    seq = result.search.sequence
    changes, replay_error = replay_changes(result.original, result.rules, seq) if seq else ([], "")
    name = title or f"graphsub optimize: {result.model}"
    body = [_summary(result), _performance(result), _histogram(result), _substitutions(result, changes, replay_error),
            _trace(result), _regions(result, changes, replay_error, max_pictures)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(name)}</title><style>{CSS}</style></head>\n<body><main>"
            f"<h1>{_e(name)}</h1>" + "\n".join(body) + "</main></body></html>\n")


def write_report(result: OptimizeResult, path: str | os.PathLike[str], *, max_pictures: int = MAX_PICTURES,
                 title: str | None = None) -> Path:
    """Render the report, write it atomically to ``path`` (UTF-8) and record where in ``result.report``."""
    text = render_report(result, max_pictures=max_pictures, title=title)
    written = write_bytes(text.encode("utf-8"), path, suffix=".html")
    result.report = os.fspath(path)
    return written


__all__ = ["MAX_PICTURES", "render_report", "write_report"]
