"""Repair a suite record written by commit 9b48708 (``suite21_b1``), whose runner aliased timing dicts.

There, a tool whose output was byte-identical to an earlier tool's got *the same* ``timing`` dict object, and
folding ``graphsub@N`` into ``graphsub`` then wrote graphsub's N-thread timing into that shared dict: where the
all-cores graphsub kept a file identical to tool X's (the original: X = ``ort``), X and its other twins showed
graphsub@N's timing at N threads. The value they had is the one ``fold_threads`` saved as graphsub's
``timing_all_cores_run[N]`` before writing, so the repair puts it back (checking first that the twin holds exactly
graphsub's current value, i.e. that it was aliased). The runner copies the dicts since then.

    .venv/bin/python benchmarks/suite_fix_aliasing.py benchmarks/results/suite21_b1.jsonl

keeps the input as ``*.raw.jsonl`` and re-renders the tables from the repaired records.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from graphsub.bench.suite.table import write_tables


def repair(rec: dict) -> list[str]:
    tools = rec["tools"]
    ours = tools.get("graphsub", {})
    twin = ours.get("same_as")
    fixed = []
    for n, real in ours.get("timing_all_cores_run", {}).items():
        if not twin:
            continue
        for t, o in tools.items():
            if t != "graphsub" and (t == twin or o.get("same_as") == twin) and o.get("timing", {}).get(n) == \
                    ours["timing"].get(n) and real != ours["timing"].get(n):
                o["timing"][n] = real
                fixed.append(f"{rec['model']}: {t} at {n} thread(s)")
    return fixed


def main(path: Path) -> None:
    raw = path.with_suffix(".raw.jsonl")
    if not raw.exists():
        shutil.copy(path, raw)
    records = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    for rec in records:
        for line in repair(rec):
            print("repaired", line)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_tables(records, path.parent, path.stem)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
