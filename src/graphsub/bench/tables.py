"""Tables and plots from a results ``.jsonl`` of :func:`graphsub.bench.harness.run_grid`.

* :func:`summarize`: one row per configuration (everything but repeat and seed): means over the
  repeats of optimized cost, search time, peak memory, with status counts;
* :func:`write_table3`: OCGGS Table 3's layout -- rows models, columns algorithms x {optimized
  cost, search time, memory} -- as CSV (raw numbers) and markdown (sub-tables (a) cost,
  (b) time, (c) memory, like the paper), one table per cost model / K / cut-off;
* :func:`plot_traces`: best cost over time, one panel per model, one line per algorithm;
* :func:`plot_scaling`: OCGGS Fig. 4 / 5 style -- cost, search time and memory against the
  model size (e.g. ResNet blocks) or against K;
* :func:`write_summary`: all of the above plus ``<name>_report.md`` linking them.

A run that did not finish (stopped by its budget or killed) is marked ``†``: for the exact
algorithms (ENU, Pruning, DPP) its cost is then not a proven optimum (OCGGS prints "-"), and its
time is printed ``> cut-off`` when the time budget stopped it.

>>> rows = summarize([{"id": "a", "model": "sru", "algo": "greedy", "cost": "flops", "rules": "r", "k": 2,
...                    "cutoff_s": 10.0, "status": "ok", "best_cost": 2.0, "initial_cost": 3.0,
...                    "search_time_s": 0.5, "peak_mem_mb": 100.0, "stopped_by": "done"}])
>>> rows[0]["best_cost"], rows[0]["ok"], rows[0]["finished"]
(2.0, 1, 1)
"""

from __future__ import annotations

import csv
import json
import os
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from graphsub.bench.records import load_records
from graphsub.errors import GraphsubError

#: Display names (OCGGS's abbreviations) and the column order of the tables.
ALGO_LABELS = {"enum": "ENU", "pruning": "Pruning", "dpp": "DPP", "metaflow": "MF", "taso": "TS",
               "sampling": "Sampling", "greedy": "Greedy"}
#: Exact algorithms: a result is only an optimum when the run finished.
EXACT = frozenset({"enum", "pruning", "dpp"})
_CONFIG = ("cost", "rules", "k", "cutoff_s", "expansions", "memory_mb")
SUMMARY_COLUMNS = ("model", "algo", "cost", "rules", "k", "cutoff_s", "expansions", "params", "n", "ok", "timeout",
                   "error", "finished", "initial_cost", "best_cost", "best_cost_min", "best_cost_max", "improvement",
                   "search_time_s", "search_time_max_s", "peak_mem_mb", "search_mem_mb", "explored", "seq_len",
                   "stopped_by", "first_error")


def _mean(values: Iterable[Any]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def algo_order(algos: Iterable[str]) -> list[str]:
    """Algorithms in OCGGS's column order, then greedy, then any others alphabetically."""
    known = list(ALGO_LABELS)
    return sorted(set(algos), key=lambda a: (known.index(a) if a in known else len(known), a))


def _ordered(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def summarize(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (model, algorithm, cost, rules, K, cut-off, expansions, memory cap, params),
    in first-appearance order (see :data:`SUMMARY_COLUMNS`)."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        key = (r.get("model"), r.get("algo"), *(r.get(c) for c in _CONFIG),
               json.dumps(r.get("params") or {}, sort_keys=True))
        groups.setdefault(key, []).append(r)
    rows = []
    for key, rs in groups.items():
        ok = [r for r in rs if r.get("status") == "ok"]
        timed = [r for r in rs if r.get("search_time_s") is not None]
        bests = [float(r["best_cost"]) for r in ok if r.get("best_cost") is not None]
        errors = [r.get("error") for r in rs if r.get("status") == "error"]
        rows.append({
            "model": key[0], "algo": key[1], **dict(zip(_CONFIG, key[2:8], strict=True)), "params": key[8],
            "n": len(rs), "ok": len(ok), "timeout": sum(r.get("status") == "timeout" for r in rs),
            "error": len(errors), "finished": sum(r.get("stopped_by") == "done" for r in ok),
            "initial_cost": next((r["initial_cost"] for r in rs if r.get("initial_cost") is not None), None),
            "best_cost": _mean(bests), "best_cost_min": min(bests, default=None),
            "best_cost_max": max(bests, default=None), "improvement": _mean(r.get("improvement") for r in ok),
            "search_time_s": _mean(r["search_time_s"] for r in timed),
            "search_time_max_s": max((float(r["search_time_s"]) for r in timed), default=None),
            "peak_mem_mb": _mean(r.get("peak_mem_mb") for r in rs), "search_mem_mb": _mean(r.get("search_mem_mb")
                                                                                        for r in ok),
            "explored": _mean(r.get("explored") for r in ok), "seq_len": _mean(r.get("seq_len") for r in ok),
            "stopped_by": ",".join(sorted({str(r.get("stopped_by")) for r in rs if r.get("stopped_by")})),
            "first_error": errors[0] if errors else None,
        })
    return rows


def write_rows(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str],
               columns: Sequence[str] = SUMMARY_COLUMNS) -> Path:
    """Rows as CSV (``columns`` in order; missing values empty)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(dict(r))
    return p


# ----------------------------------------------------------------------------- Table 3


def _slug(text: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-") or "x"


def config_groups(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    """Rows grouped by (cost, rules, K, cut-off, expansions, memory cap), first-appearance order."""
    out: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(c) for c in _CONFIG), []).append(r)
    return out


def _suffixes(keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], str]:
    """A file-name suffix per config: the cost model, plus whichever other fields vary."""
    varying = [i for i in range(1, len(_CONFIG)) if len({k[i] for k in keys}) > 1]
    short = {"rules": "", "k": "k", "cutoff_s": "t", "expansions": "x", "memory_mb": "m"}
    return {k: "_".join([_slug(k[0]), *(f"{short[_CONFIG[i]]}{_slug(k[i])}" for i in varying)]) for k in keys}


def _finished(row: Mapping[str, Any]) -> bool:
    return row["ok"] > 0 and row["finished"] == row["ok"] and not row["timeout"]


def _cells(row: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(cost, time, memory) cells of one summary row."""
    if row is None:
        return "", "", ""
    if not row["ok"] and not row["timeout"]:
        return "error", "error", ""
    mark = "" if _finished(row) else "†"
    cost = f"{row['best_cost']:.4g}{mark}" if row["best_cost"] is not None else "-"
    stopped = set(str(row.get("stopped_by") or "").split(","))
    if stopped & {"time", "killed"}:
        time_cell = f"> {row['cutoff_s']:g}"
    elif row["search_time_s"] is None:
        time_cell = "-"
    else:
        time_cell = f"{row['search_time_s']:.3g}{mark}"
    mem = row.get("peak_mem_mb")
    mem_cell = "-" if mem is None else f"{'> ' if row['timeout'] else ''}{mem:.0f}"
    return cost, time_cell, mem_cell


def table3(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], dict[tuple[str, str], Mapping[str, Any]]]:
    """(models, algorithms, {(model, algo): summary row}) of one config group."""
    models = _ordered(r["model"] for r in rows)
    algos = algo_order(r["algo"] for r in rows)
    return models, algos, {(r["model"], r["algo"]): r for r in rows}


def table3_markdown(rows: Sequence[Mapping[str, Any]], title: str = "") -> str:
    """Markdown sub-tables (a) optimized cost, (b) search time (s), (c) peak memory (MB)."""
    models, algos, cell = table3(rows)
    head = "| model | " + " | ".join(ALGO_LABELS.get(a, a) for a in algos) + " |\n"
    sep = "|---|" + "---:|" * len(algos) + "\n"
    parts = [f"### {title}\n\n" if title else ""]
    for i, label in enumerate(("(a) optimized cost", "(b) search time (s)", "(c) peak memory (MB)")):
        parts.append(f"{label}\n\n{head}{sep}")
        for m in models:
            initial = next((r["initial_cost"] for r in rows if r["model"] == m and r["initial_cost"] is not None),
                           None)
            name = f"{m} (initial {initial:.4g})" if i == 0 and initial is not None else m
            parts.append(f"| {name} | " + " | ".join(_cells(cell.get((m, a)))[i] for a in algos) + " |\n")
        parts.append("\n")
    return "".join(parts)


def write_table3(rows: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike[str], name: str) -> list[Path]:
    """Per config group: ``<name>_table3_<suffix>.csv`` (model, initial cost, then per algorithm cost,
    time, memory, finished) and ``.md`` (see :func:`table3_markdown`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups = config_groups(rows)
    suffix = _suffixes(list(groups))
    paths = []
    for key, rs in groups.items():
        models, algos, cell = table3(rs)
        columns = ["model", "initial_cost"] + [f"{ALGO_LABELS.get(a, a)} {m}" for a in algos
                                               for m in ("cost", "time_s", "mem_mb", "finished")]
        table = []
        for m in models:
            row: dict[str, Any] = {"model": m, "initial_cost": next(
                (r["initial_cost"] for r in rs if r["model"] == m and r["initial_cost"] is not None), None)}
            for a in algos:
                c = cell.get((m, a))
                lab = ALGO_LABELS.get(a, a)
                if c is not None:
                    row.update({f"{lab} cost": c["best_cost"], f"{lab} time_s": c["search_time_s"],
                                f"{lab} mem_mb": c["peak_mem_mb"], f"{lab} finished": _finished(c)})
            table.append(row)
        base = out / f"{name}_table3_{suffix[key]}"
        paths.append(write_rows(table, base.with_suffix(".csv"), columns))
        md = base.with_suffix(".md")
        md.write_text(table3_markdown(rs, _config_title(key)), encoding="utf-8")
        paths.append(md)
    return paths


def _config_title(key: tuple[Any, ...]) -> str:
    cost, rules, k, cutoff, expansions, memory = key
    extra = "".join([f", expansions {expansions}" if expansions is not None else "",
                     f", memory cap {memory:g} MB" if memory is not None else ""])
    return f"cost {cost}, rules {rules}, K={k}, cut-off {cutoff:g} s{extra}"


# ----------------------------------------------------------------------------- plots


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close a figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def _colors(algos: Sequence[str]) -> dict[str, Any]:
    plt = _pyplot()
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {a: cycle[i % len(cycle)] for i, a in enumerate(algo_order(algos))}


def plot_traces(records: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike[str], name: str) -> list[Path]:
    """Best cost against search time per model (one panel each) and algorithm (one line per
    repeat), one figure per config group: ``<name>_trace_<suffix>.png``."""
    plt = _pyplot()
    ok = [r for r in records if r.get("status") == "ok" and r.get("trace")]
    groups = config_groups(ok)
    suffix = _suffixes(list(groups))
    out = Path(out_dir)
    paths = []
    for key, rs in groups.items():
        models = _ordered(r["model"] for r in rs)
        colors = _colors([r["algo"] for r in rs])
        ncols = min(3, len(models))
        nrows = -(-len(models) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.6 * nrows), squeeze=False)
        for ax, m in zip(axes.flat, models, strict=False):
            seen: set[str] = set()
            for r in (r for r in rs if r["model"] == m):
                pts = [(max(float(t), 1e-4), float(c)) for t, c in r["trace"]]
                end = max(float(r.get("search_time_s") or 0.0), pts[-1][0], 1e-4)
                pts.append((end, float(r["best_cost"])))
                label = None if r["algo"] in seen else ALGO_LABELS.get(r["algo"], r["algo"])
                seen.add(r["algo"])
                ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color=colors[r["algo"]],
                        label=label, alpha=0.85)
                ax.plot([end], [pts[-1][1]], "o" if r.get("stopped_by") == "done" else "x",
                        color=colors[r["algo"]])
            ax.set_xscale("log")
            ax.set_title(m, fontsize=10)
            ax.set_xlabel("search time (s)")
            ax.set_ylabel(f"best cost ({key[0]})")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(models):]:
            ax.axis("off")
        fig.suptitle(f"best cost over time: {_config_title(key)}  (o finished, x stopped by budget)", fontsize=10)
        paths.append(_save(fig, out / f"{name}_trace_{suffix[key]}.png"))
    return paths


def _split_model(text: str) -> tuple[str, dict[str, Any]]:
    """A zoo spec's name and parameters (``(text, {})`` for anything else)."""
    from graphsub.spec import ModelSpec

    try:
        spec = ModelSpec.parse(text)
    except GraphsubError:
        return text, {}
    return (spec.name, spec.zoo_kwargs) if spec.kind == "zoo" else (text, {})


def _scaling_series(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, list[tuple[float, Mapping[str, Any]]]]]:
    """(title, x label, [(x, row)]) for every family of rows that varies one numeric model
    parameter at fixed K, or K for a fixed model."""
    series = []
    by_cfg: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        base, _ = _split_model(r["model"])
        by_cfg.setdefault((base, r["cost"], r["rules"], r["cutoff_s"], r["expansions"]), []).append(r)
    for (base, cost, *_), rs in by_cfg.items():
        for k in _ordered(r["k"] for r in rs):
            at_k = [r for r in rs if r["k"] == k]
            specs = {r["model"]: _split_model(r["model"])[1] for r in at_k}
            keys = {key for kw in specs.values() for key in kw}
            varying = [key for key in keys if len({json.dumps(kw.get(key)) for kw in specs.values()}) > 1]
            if len(specs) > 1 and len(varying) == 1:
                key = varying[0]
                pts = [(float(specs[r["model"]][key]), r) for r in at_k
                       if isinstance(specs[r["model"]].get(key), int | float)]
                if len({x for x, _ in pts}) > 1:
                    series.append((f"{base} vs {key} ({cost}, K={k})", key, pts))
        for model in _ordered(r["model"] for r in rs):
            pts = [(float(r["k"]), r) for r in rs if r["model"] == model and r["k"] is not None]
            if len({x for x, _ in pts}) > 1:
                series.append((f"{model} vs K ({cost})", "K", pts))
    return series


def plot_scaling(rows: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike[str], name: str) -> list[Path]:
    """OCGGS Fig. 4/5 style figures from summary rows: optimized cost, search time and peak
    memory against a model size parameter (blocks, length) or against K, one line per algorithm
    (hollow markers: did not finish).  ``<name>_scaling_<series>.png``."""
    plt = _pyplot()
    out = Path(out_dir)
    paths = []
    for title, xlabel, pts in _scaling_series(rows):
        colors = _colors([r["algo"] for _, r in pts])
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
        metrics = (("best_cost", "optimized cost"), ("search_time_s", "search time (s)"),
                   ("peak_mem_mb", "peak memory (MB)"))
        for ax, (field, label) in zip(axes, metrics, strict=True):
            for a in algo_order(r["algo"] for _, r in pts):
                line = sorted((x, r) for x, r in pts if r["algo"] == a and r[field] is not None)
                if not line:
                    continue
                xs, ys = [x for x, _ in line], [float(r[field]) for _, r in line]
                ax.plot(xs, ys, "-", color=colors[a], label=ALGO_LABELS.get(a, a))
                for x, r in line:
                    ax.plot([x], [float(r[field])], "o", color=colors[a],
                            markerfacecolor=colors[a] if _finished(r) else "none")
            if field == "search_time_s":
                ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(title, fontsize=10)
        paths.append(_save(fig, out / f"{name}_scaling_{_slug(title)}.png"))
    return paths


# ----------------------------------------------------------------------------- everything


def write_summary(source: str | os.PathLike[str] | Sequence[Mapping[str, Any]], out_dir: str | os.PathLike[str] | None
                 = None, name: str | None = None, *, plots: bool = True) -> dict[str, list[str]]:
    """Summary CSV, Table-3 tables, plots and ``<name>_report.md`` from a results ``.jsonl`` (or
    its records).  ``out_dir`` defaults to the file's directory (for records: ``results/`` in the current
    directory), ``name`` to its stem.  Returns the written paths by kind."""
    records: Sequence[Mapping[str, Any]]
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        records = load_records(path)
        out = Path(out_dir) if out_dir is not None else path.parent
        name = name or path.stem
    else:
        records = list(source)
        out = Path(out_dir if out_dir is not None else "results")
        name = name or "bench"
    out.mkdir(parents=True, exist_ok=True)
    rows = summarize(records)
    files: dict[str, list[str]] = {"summary": [str(write_rows(rows, out / f"{name}_summary.csv"))]}
    files["table3"] = [str(p) for p in write_table3(rows, out, name)]
    files["plots"] = [str(p) for p in (plot_traces(records, out, name) + plot_scaling(rows, out, name))] if plots \
        else []
    md = [f"# {name}\n\n", f"{len(records)} runs: " + ", ".join(
        f"{sum(r.get('status') == s for r in records)} {s}" for s in ("ok", "timeout", "error")) + ".\n\n",
        "† = did not finish within its budget (exact algorithms: not a proven optimum; OCGGS prints '-'); "
        "'> T' = stopped by the time cut-off T; memory = peak RSS of the run's process (MB).\n\n"]
    for key, rs in config_groups(rows).items():
        md.append(table3_markdown(rs, _config_title(key)))
    errors = [r for r in records if r.get("status") == "error"]
    if errors:
        md.append("## errors\n\n" + "".join(f"- {r.get('model')} {r.get('algo')} {r.get('cost')}: "
                                              f"{r.get('error')}\n" for r in errors) + "\n")
    if files["plots"]:
        md.append("## plots\n\n" + "".join(f"![{Path(p).stem}]({Path(p).name})\n" for p in files["plots"]))
    report = out / f"{name}_report.md"
    report.write_text("".join(md), encoding="utf-8")
    files["report"] = [str(report)]
    return files


__all__ = [
    "ALGO_LABELS",
    "EXACT",
    "SUMMARY_COLUMNS",
    "algo_order",
    "config_groups",
    "plot_scaling",
    "plot_traces",
    "summarize",
    "table3",
    "table3_markdown",
    "write_rows",
    "write_summary",
    "write_table3",
]
