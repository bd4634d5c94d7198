"""The projection fold into LSTM/GRU input weights (``cpu_{lstm,gru}_input_fold*``), measured in ONNX Runtime.

For ``rnn(Linear(x))`` exported by torch (TorchScript exporter, opset 17, sequence-first, batch 1), the rules are
applied everywhere (:func:`graphsub.optimize.portfolio.rewrite_everywhere`), the outputs compared, and the original and
folded models timed by :func:`graphsub.optimize.decide.compare` (fresh session groups, an A/A control,
ORT_ENABLE_ALL) at 1 and 2 threads. Writes ``experiments/results/rnn_fold.json``; run it alone.

    .venv/bin/python experiments/optimize/rnn_fold.py
"""

from __future__ import annotations

import io
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from graphsub.bench.records import load_avg
from graphsub.frontends.onnx_io import load
from graphsub.frontends.ort import run_model
from graphsub.optimize import decide
from graphsub.optimize.portfolio import export_bytes, rewrite_everywhere
from graphsub.rules.library.recurrent import rules

CASES = [("lstm", 256, 256, 256, 64), ("gru", 256, 256, 256, 64), ("lstm", 128, 256, 128, 128),
         ("gru", 128, 256, 128, 128)]  # cell, K (projection input), I (projection output), H, sequence


class Projected(nn.Module):
    def __init__(self, cell: str, k: int, i: int, h: int) -> None:
        super().__init__()
        self.proj = nn.Linear(k, i)
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(i, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(self.proj(x))[0]


def main() -> None:
    rows = []
    for cell, k, i, h, s in CASES:
        torch.manual_seed(0)
        buf = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(Projected(cell, k, i, h).eval(), (torch.randn(s, 1, k),), buf, dynamo=False,
                              opset_version=17, input_names=["x"], output_names=["y"])
        src = buf.getvalue()
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "m.onnx").write_bytes(src)
            folded, steps = rewrite_everywhere(load(Path(tmp) / "m.onnx"), rules())
        data = export_bytes(folded)
        feeds = {"x": np.random.default_rng(0).standard_normal((s, 1, k)).astype(np.float32)}
        diff = float(np.abs(run_model(data, feeds)[0] - run_model(src, feeds)[0]).max())
        row = {"cell": cell, "K": k, "I": i, "H": h, "seq": s, "rules": [st.rule for st in steps],
               "max_abs_diff": diff, "load_avg_before": load_avg()}
        for threads in (1, 2):
            v = decide.compare(*decide.session_makers(src, data, feeds, threads=threads), budget_ms=300.0)
            row[f"threads_{threads}"] = {"before_ms": statistics.median(v.measured.a),
                                         "after_ms": statistics.median(v.measured.b), **v.to_dict()}
        row["load_avg_after"] = load_avg()
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    out = Path(__file__).resolve().parents[1] / "results" / "rnn_fold.json"
    out.write_text(json.dumps({"what": __doc__.split("\n\n")[0], "cpu_count": os.cpu_count(), "rows": rows},
                              indent=1) + "\n")
    for r in rows:
        print(f"{r['cell']} K={r['K']} I={r['I']} H={r['H']} S={r['seq']}: "
              + ", ".join(f"{n} thread(s) {r[f'threads_{n}']['speedup']:.3f}x "
                          f"({r[f'threads_{n}']['reason']})" for n in (1, 2))
              + f"; max |diff| {r['max_abs_diff']:.1e}")


if __name__ == "__main__":
    main()
