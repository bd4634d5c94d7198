"""Round trip of every zoo model through ONNX (IR -> ONNX -> IR -> ONNX), outputs compared in
onnxruntime.  Writes experiments/results/zoo_roundtrip.json and .csv.
Run: .venv/bin/python experiments/infra/zoo_roundtrip.py"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from graphsub import zoo
from graphsub.bench.roundtrip import roundtrip

OUT = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rows = [roundtrip(zoo.get(name)).to_dict() for name in zoo.list_models()]
    (OUT / "zoo_roundtrip.json").write_text(json.dumps(rows, indent=2) + "\n")
    with open(OUT / "zoo_roundtrip.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{'model':15} {'ops':>4} {'reimp':>5} {'max|diff|':>9} {'fixed':>5} {'MB':>6}")
    for r in rows:
        print(f"{r['name']:15} {r['num_ops']:4} {r['reimported_ops']:5} {r['max_abs_diff']:9.3g} "
              f"{r['fixed_point']!s:>5} {r['onnx_bytes'] / 1e6:6.0f}")


if __name__ == "__main__":
    main()
