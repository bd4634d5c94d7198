"""How much faster is ``make demo``'s output than the file the user exported?  A long interleaved A/B (issue 20,
item 6: why the demo sometimes keeps the original).

    make demo      # writes out/encoder.onnx (static shapes) and graphsub's out/encoder_fast.onnx
    .venv/bin/python experiments/optimize/demo_encoder_ab.py out/encoder.onnx out/encoder_fast.onnx \\
        --out demo_encoder_ab_static

    # the same encoder exported with symbolic batch and sequence axes (what the demo used until 2026-11-26)
    .venv/bin/python examples/export_encoder.py out/encoder_dyn.onnx --dynamic
    .venv/bin/graphsub optimize out/encoder_dyn.onnx -o out/encoder_best.onnx --keep-slower \\
        --input-shape input_ids=1x128 --input-shape attention_mask=1x128 --budget 120
    .venv/bin/python experiments/optimize/demo_encoder_ab.py out/encoder_dyn.onnx out/encoder_best.onnx --threads 1,2

Times, under ORT_ENABLE_ALL in rotating order: the exported file as the user ships it (static shapes, or symbolic
batch and sequence), the same file with its shapes fixed (``onnxruntime.tools``; the same as shipped when they
already are: ONNX Runtime then fuses SkipLayerNormalization, which shape inference stops on the symbolic file), the
same fixed file with that fusion switched off in the session, and graphsub's candidate.  Each round times every
variant 20 times (median); the speedups are medians of the per-round ratios against the shipped file, with the share
of rounds above 1.03x (what ``graphsub optimize`` needs in 80% of its rounds).  Writes
``experiments/results/OUT.json`` (``--out``, default ``demo_encoder_ab``; that file holds the symbolic-axes export of
2026-11-26, made before the demo's encoder got trained-like weights).  Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed

OUT = Path(__file__).resolve().parents[1] / "results"


def _fixed(path: str, seq: int, into: Path) -> str:
    model = onnx.load(path)
    make_dim_param_fixed(model.graph, "batch", 1)
    make_dim_param_fixed(model.graph, "sequence", seq)
    onnx.save(model, into)
    return str(into)


def _session(path: str, threads: int, disabled: list[str] | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"], disabled_optimizers=disabled or [])


def measure(original: str, candidate: str, threads: int, seq: int, rounds: int, fixed: str) -> dict[str, Any]:
    sessions = {"shipped": _session(original, threads), "fixed shapes": _session(fixed, threads),
                "fixed shapes, SkipLayerNormFusion off": _session(fixed, threads, ["SkipLayerNormFusion"]),
                "graphsub candidate": _session(candidate, threads)}
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 1000, (1, seq)).astype(np.int64),
             "attention_mask": np.ones((1, seq), np.int64)}
    for s in sessions.values():
        for _ in range(20):
            s.run(None, feeds)
    ms: dict[str, list[float]] = {k: [] for k in sessions}
    names = list(sessions)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:  # rotating order
            ts = []
            for _ in range(20):
                t0 = time.perf_counter()
                sessions[k].run(None, feeds)
                ts.append(time.perf_counter() - t0)
            ms[k].append(1000 * statistics.median(ts))
    base = ms[names[0]]
    out: dict[str, Any] = {}
    for k, v in ms.items():
        ratios = [a / b for a, b in zip(base, v, strict=True)]
        out[k] = {"ms": statistics.median(v), "speedup": statistics.median(ratios),
                  "rounds_above_1.03": sum(x > 1.03 for x in ratios) / len(ratios),
                  "min": min(ratios), "max": max(ratios)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("original")
    ap.add_argument("candidate")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default="demo_encoder_ab", help="result file name under experiments/results (no .json)")
    args = ap.parse_args()
    res: dict[str, Any] = {"command": f"experiments/optimize/demo_encoder_ab.py {args.original} {args.candidate} "
                                      f"--threads {args.threads} --seq {args.seq} --rounds {args.rounds} "
                                      f"--out {args.out}",
                           "onnxruntime": ort.__version__, "loadavg": list(os.getloadavg()[:2]), "threads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        fixed = _fixed(args.original, args.seq, Path(tmp) / "fixed.onnx")
        for t in (int(x) for x in args.threads.split(",")):
            res["threads"][str(t)] = measure(args.original, args.candidate, t, args.seq, args.rounds, fixed)
            print(t, json.dumps(res["threads"][str(t)], indent=1))
    OUT.mkdir(exist_ok=True)
    (OUT / f"{args.out}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
