"""Where one decode step's time goes, kernel by kernel: the kernel-level reason behind a missed decode target
(issue 55).

For each model given as ``LABEL=PATH`` (the first one is the baseline, ORT alone on the plain export), at one past
length and one thread count, with nothing else on the machine:

* **wall**: ms per decode step (one new token on a random cache of ``--past`` positions), in ``--rounds`` rounds of a
  fresh session per model, the models in rotating order, 20 warm-up runs and ``--steps`` timed runs per session; the
  median of the rounds' medians and their range;
* **kernels**: one more session per model with onnxruntime's profiler on, ``--steps`` runs: kernels per step and
  their time per step by operator type, split into the matrix products (MatMul, FusedMatMul, Gemm: the weights' and,
  in the plain export, attention's two), the attention kernel and the rest.

The profiler adds a few microseconds to every kernel, so its sums are not wall times and are compared within a
session only; the products' own time is hardly touched (each takes hundreds of microseconds), but it varies by
5-10% from one session to the next. **Headroom**: a variant's kernel time over its products' and its attention
kernel's (GroupQueryAttention, MultiHeadAttention, Attention) -- how much faster that session would run if every
other kernel cost nothing. A variant near 1.0x has nothing left to fuse: what remains is the weight products, the
same MLAS kernels in every variant.

  .venv/bin/python experiments/optimize/decode_kernels.py ort=V/ort.onnx builder=V/genai-builder/model.onnx \\
      graphsub=V/graphsub.onnx --family llama --size 100m --past 128 --threads 2 --name decode_kernels_llama_100m_128
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PRODUCTS = frozenset({"MatMul", "FusedMatMul", "Gemm"})
ATTENTION = frozenset({"GroupQueryAttention", "MultiHeadAttention", "Attention"})


def _session(path: str, threads: int, profile: bool = False) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = tempfile.mkdtemp() + "/p"
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _feeds(sess: Any, all_feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {i.name: all_feeds[i.name] for i in sess.get_inputs()}


def _wall_ms(path: str, feeds: dict[str, np.ndarray], threads: int, steps: int) -> float:
    sess = _session(path, threads)
    f = _feeds(sess, feeds)
    for _ in range(20):
        sess.run(None, f)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        sess.run(None, f)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _kernels(path: str, feeds: dict[str, np.ndarray], threads: int, steps: int) -> tuple[float, dict[str, float]]:
    """Kernels per step and microseconds per step by operator type, from one profiled session."""
    sess = _session(path, threads, profile=True)
    f = _feeds(sess, feeds)
    runs = 20 + steps
    for _ in range(runs):
        sess.run(None, f)
    events = json.loads(Path(sess.end_profiling()).read_text())
    us: dict[str, float] = collections.defaultdict(float)
    n = 0
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            us[e["args"]["op_name"]] += e["dur"] / runs
            n += 1
    return n / runs, dict(us)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="LABEL=PATH; the first is the baseline")
    ap.add_argument("--family", default="llama")
    ap.add_argument("--size", default="100m")
    ap.add_argument("--past", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("experiments/results"))
    ap.add_argument("--name", default="decode_kernels")
    args = ap.parse_args(argv)

    from graphsub.bench.decoders import DECODERS, Layout
    from graphsub.bench.decoders.model import feeds

    c = DECODERS[args.family].config(args.size)
    heads = c["num_attention_heads"]
    layout = Layout(c["num_hidden_layers"], c.get("num_key_value_heads") or heads, c["hidden_size"] // heads,
                    c["vocab_size"])
    models = dict(m.split("=", 1) for m in args.models)
    f = feeds(layout, 1, 1, args.past, seed=args.seed)
    load = [os.getloadavg()]
    walls: dict[str, list[float]] = {k: [] for k in models}
    labels = list(models)
    for r in range(args.rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            walls[label].append(_wall_ms(models[label], f, args.threads, args.steps))
    prof = {label: _kernels(path, f, args.threads, args.steps) for label, path in models.items()}
    load.append(os.getloadavg())

    base = labels[0]
    wall = {k: statistics.median(v) for k, v in walls.items()}
    lines = [f"# One decode step, kernel by kernel: {args.family} {args.size}, past {args.past}, "
             f"{args.threads} thread(s)", "",
             f"`python experiments/optimize/decode_kernels.py {' '.join(args.models)} --family {args.family} "
             f"--size {args.size} --past {args.past} --threads {args.threads} --steps {args.steps} "
             f"--rounds {args.rounds}`", "",
             f"- load average before {load[0]}, after {load[1]}", "",
             f"| variant | wall ms/step (range) | vs {base} | kernels/step | MatMul kernels ms/step "
             "| attention kernel ms/step | other kernels ms/step | headroom | top other kernels (us/step) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for k in labels:
        n, us = prof[k]
        mm = sum(v for op, v in us.items() if op in PRODUCTS) / 1e3
        att = sum(v for op, v in us.items() if op in ATTENTION) / 1e3
        other = {op: v for op, v in us.items() if op not in PRODUCTS | ATTENTION}
        rest = sum(other.values()) / 1e3
        top = ", ".join(f"{op} {v:.0f}" for op, v in sorted(other.items(), key=lambda kv: -kv[1])[:6])
        lines.append(f"| {k} | {wall[k]:.2f} ({min(walls[k]):.2f}-{max(walls[k]):.2f}) | "
                     f"{wall[base] / wall[k]:.3f}x | {n:.0f} | {mm:.2f} | {att:.2f} | {rest:.2f} | "
                     f"{(mm + att + rest) / (mm + att):.3f}x | {top} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
