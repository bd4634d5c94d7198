"""An ONNX-level layout rewrite of graphsub's portfolio alone, against the original, in onnxruntime.

``--pass layout`` (default): channels-last MLPs written channels-first (graphsub.frontends.onnx_layout): how much
faster onnxruntime runs ConvNeXt-T once its block MLPs are 1x1 convolutions.  ``--pass rows``: transformer
activations ``[batch, sequence, hidden]`` written as ``[batch * sequence, hidden]`` rows (graphsub.frontends.onnx_rows),
on the suite's transformer exports.  Both also show what onnxruntime's optimized graph looks like before and after.

    .venv/bin/python experiments/optimize/channels_first.py   # the suite's convnext_tiny exports (graphsub bench suite)
    .venv/bin/python experiments/optimize/channels_first.py --pass rows --models bert.ts.b1,whisper_encoder.ts.b1

For each model (the suite's cached ``convnext_tiny.{ts,dynamo}.b1.onnx``) and thread count (1 and all cores): the
original and the rewritten file under ORT_ENABLE_ALL, in rotating order, ``--rounds`` rounds of ``--reps`` runs each
(median per round); the speedup is the median of the per-round ratios, with the share of rounds the rewrite won.
Also the outputs' max abs difference on one random input and the kernel counts of the graph onnxruntime runs
(``optimized_model_filepath``). Writes ``experiments/results/channels_first.json`` (``rows_layout.json`` with
``--pass rows``). Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from graphsub.frontends import onnx_layout, onnx_rows

OUT = Path(__file__).resolve().parents[1] / "results"
SUITE = Path.home() / ".cache" / "graphsub" / "suite"


def _session(data: bytes, threads: int, save: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if save:
        so.optimized_model_filepath = save
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _kernels(data: bytes) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "opt.onnx")
        _session(data, 1, path)
        ops = Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)
    return dict(ops.most_common())


PASSES = {"layout": (onnx_layout.rewrite_bytes, "channels-first", "channels_first"),
          "rows": (onnx_rows.rewrite_bytes, "rows", "rows_layout")}


def _feeds(sess: ort.InferenceSession) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        out[inp.name] = rng.standard_normal(shape).astype(np.float32) if inp.type == "tensor(float)" else \
            np.ones(shape, dtype=np.int64)  # token ids / masks
    return out


def measure(name: str, threads: int, rounds: int, reps: int, which: str = "layout") -> dict[str, Any]:
    rewrite, label, _ = PASSES[which]
    original = (SUITE / f"{name}.onnx").read_bytes()
    got = rewrite(original)
    if got is None:
        raise SystemExit(f"{name}: nothing for --pass {which} to rewrite")
    rewritten, regions = got
    variants = {"original": original, label: rewritten}
    sessions = {k: _session(v, threads) for k, v in variants.items()}
    feeds = _feeds(sessions["original"])
    outs = {k: s.run(None, feeds)[0] for k, s in sessions.items()}
    per: dict[str, list[float]] = {k: [] for k in sessions}
    names = list(sessions)
    for r in range(rounds):
        for k in names[r % 2:] + names[:r % 2]:
            s = sessions[k]
            for _ in range(2):
                s.run(None, feeds)
            t = []
            for _ in range(reps):
                t0 = time.perf_counter()
                s.run(None, feeds)
                t.append(time.perf_counter() - t0)
            per[k].append(1000 * statistics.median(t))
    ratios = [a / b for a, b in zip(per["original"], per[label], strict=True)]
    return {"model": name, "threads": threads, "pass": which, "regions": regions,
            "max_abs_diff": float(np.max(np.abs(outs["original"] - outs[label]))),
            "ms": {k: statistics.median(v) for k, v in per.items()}, "rounds_ms": per,
            "speedup": statistics.median(ratios), "won_rounds": sum(x > 1 for x in ratios) / len(ratios),
            "ort_kernels": {k: _kernels(v) for k, v in variants.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="convnext_tiny.ts.b1,convnext_tiny.dynamo.b1")
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--pass", dest="which", choices=sorted(PASSES), default="layout")
    args = ap.parse_args()
    load_before = os.getloadavg()[:2]
    rows = [measure(m, int(t), args.rounds, args.reps, args.which) for t in args.threads.split(",")
            for m in args.models.split(",")]
    res = {"command": "experiments/optimize/channels_first.py " + " ".join(f"--{'pass' if k == 'which' else k} {v}"
                                                                 for k, v in vars(args).items()),
           "onnxruntime": ort.__version__, "load_before_after": [load_before, os.getloadavg()[:2]], "rows": rows}
    OUT.mkdir(exist_ok=True)
    _, label, stem = PASSES[args.which]
    (OUT / f"{stem}.json").write_text(json.dumps(res, indent=1))
    for r in rows:
        print(f"{r['model']:28s} {r['threads']} thr  {r['ms']['original']:.1f} -> {r['ms'][label]:.1f} ms"
              f"  {r['speedup']:.3f}x (won {r['won_rounds']:.0%})  diff {r['max_abs_diff']:.1e}")


if __name__ == "__main__":
    main()
