"""The whole suite from runs that each covered part of it: per thread count, every tool's geometric mean over
ORT_ENABLE_ALL (a failed or wrong output counts as 1.0x), graphsub's by family, where a peer beats graphsub beyond
the noise (:func:`graphsub.bench.suite.table.gap`) and on how many models graphsub is the fastest tool.

    python experiments/optimize/suite_combine.py --out experiments/results/suite_combined.md \\
        suite.jsonl@all suite_convnext.jsonl@all suite.jsonl@1 suite_convnext.jsonl@1

``FILE@N`` reads FILE (under experiments/results unless a path) at N threads (``all``: the largest count in it).
A model that a later part has too replaces the earlier part's record of it (a rerun, say after a fix: the header
names every part, so the replacement is on record).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from graphsub.bench.records import load_records
from graphsub.bench.suite.table import best_tool, gap, speedup, time_to_result

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _geo(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summarize(label: str, rows: list[tuple[dict[str, Any], int]]) -> list[str]:
    tools = sorted({t for r, _ in rows for t in r["tools"] if "+" not in t})
    lines = [f"## {label}: {len(rows)} models", "", "| tool | geometric mean over ORT_ENABLE_ALL |", "|---|---|"]
    for t in tools:
        xs = []
        for r, n in rows:
            o = r["tools"].get(t)
            xs.append((speedup(o, n) if o and o.get("verified") else None) or 1.0)
        lines.append(f"| {t} | {_geo(xs):.3f}x |")
    fam: dict[str, list[float]] = {}
    for r, n in rows:
        fam.setdefault(r["family"], []).append(speedup(r["tools"].get("graphsub", {}), n) or 1.0)
    lines += ["", "graphsub by family: " + ", ".join(f"{f} {_geo(v):.3f}x ({len(v)})" for f, v in sorted(fam.items()))]
    behind = [(r["id"], g) for r, n in rows if (g := gap(r, n))]
    lines.append(f"graphsub at least as fast as the best peer (beyond the noise) on {len(rows) - len(behind)} of "
                 f"{len(rows)}; the fastest tool on {sum(best_tool(r, n) == 'graphsub' for r, n in rows)}")
    lines += [f"- behind on {m}: {p} {ps:.3f}x vs graphsub {gs:.3f}x" for m, (p, ps, gs) in behind]
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("parts", nargs="+", help="FILE.jsonl@N (N: a thread count or 'all')")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    groups: dict[str, dict[str, tuple[dict[str, Any], int]]] = {}
    for part in args.parts:
        name, _, n = part.rpartition("@")
        path = Path(name) if "/" in name else RESULTS / name
        for rec in load_records(path):
            count = max(rec["threads"]) if n == "all" else int(n)
            groups.setdefault("all cores" if n == "all" else f"{n} thread(s)", {})[rec["id"]] = (rec, count)
    text = "\n".join(line for label, rows in groups.items() for line in summarize(label, list(rows.values())))
    records = {rid: rec for rows in groups.values() for rid, (rec, _) in rows.items()}
    text += "\n## graphsub's time to result (`graphsub optimize`, the whole command)\n\n"
    text += "\n".join(time_to_result(list(records.values())) or ["no graphsub run recorded"]) + "\n"
    head = "# The whole suite, combined from: " + ", ".join(args.parts) + "\n\n"
    print(head + text)
    if args.out:
        args.out.write_text(head + text)


if __name__ == "__main__":
    main()
