"""Did every portfolio member of ``graphsub optimize``'s default run get its turn? (issue 54, must-have 2)

Reads ``graphsub bench suite`` record files and, for the ``graphsub`` tool (the default command), sorts each model's
portfolio notes into: members **left out for time** (``skipped: no time left in the budget``, or a source the planner
dropped), members **not needed** (a candidate onnxruntime runs exactly as another one, so it is not timed; a peer
whose output graphsub cannot import), and the rest, which ran. Per model: the weights' size, the run's time and the
budget it had (75 s plus 400 s per GB), which members were left out for time, and whether the budget cut the
decision short. Writes a Markdown table to stdout (or ``--out``).

  .venv/bin/python experiments/optimize/budget_members.py experiments/results/rules_alone_dev.jsonl \\
      experiments/results/rules_alone_heldout.jsonl --out experiments/results/budget_members.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

SKIPPED = re.compile(r"^(?P<member>[^:]+): skipped: (no time left in the budget|the .* budget leaves no time for it)")
NOT_NEEDED = re.compile(r"^timing: (?P<member>\S+) not timed: onnxruntime runs it exactly as")
BASE_S, PER_GB_S = 75.0, 400.0


def _records(paths: list[Path]) -> list[dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                if "id" in rec and "tools" in rec:
                    by_id[rec["id"]] = rec
    return list(by_id.values())


def classify(notes: list[str]) -> tuple[list[str], list[str]]:
    """(members left out for time, members not needed) from one run's portfolio notes."""
    skipped = [m["member"] for n in notes if (m := SKIPPED.match(n))]
    not_needed = [m["member"] for n in notes if (m := NOT_NEEDED.match(n))]
    return skipped, not_needed


def summarize(paths: list[Path]) -> str:
    rows, left_out_models = [], 0
    recs = sorted(_records(paths), key=lambda r: (r.get("meta", {}).get("half", ""), r["id"]))
    for rec in recs:
        g = rec["tools"].get("graphsub") or {}
        if not g:
            continue
        mb = os.path.getsize(rec["path"]) / 1e6 if os.path.exists(rec["path"]) else float("nan")
        skipped, not_needed = classify(list(g.get("portfolio_notes") or []))
        left_out_models += bool(skipped)
        decision = str(g.get("decision") or "")
        cut = "yes" if "budget cut" in decision else ""
        rows.append(f"| {rec['id']} | {rec.get('meta', {}).get('half', '')} | {mb:.0f} | "
                    f"{g.get('seconds', 0):.0f} | {BASE_S + PER_GB_S * mb / 1e3:.0f} | {len(not_needed)} | "
                    f"{', '.join(skipped) or '-'} | {cut} | {g.get('chosen') or ''} |")
    head = ["# Portfolio members of the default optimize run, per suite model", "",
            f"Sources: {', '.join(p.name for p in paths)}. {len(rows)} models; {left_out_models} had a member left "
            "out for time. 'Not needed': candidates onnxruntime runs exactly as another one (not timed).", "",
            "| model | half | MB | run s | budget s | not needed | left out for time | budget cut | kept |",
            "|---|---|---:|---:|---:|---:|---|---|---|"]
    return "\n".join(head + rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = summarize(args.records)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
