"""Training loss curves of the Tree-LSTM on SST: eager vs batching, prefetch and module capture (same seed, data).

    .venv/bin/python experiments/dynamic/dynamic_loss_curve.py --steps 60

Writes ``experiments/results/dynamic_loss_curve.json`` and ``.png``: the per-step losses of each mode, and the
largest absolute difference from eager so far at every step (float rounding differs between one batched
GEMM and many small ones, and Adagrad's first steps amplify it on parameters whose gradient is ~0).  The
control ``eager, weights x (1 + 1e-7)`` is eager training from initial weights changed by about one float32
rounding step: how far rounding alone moves this training run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from graphsub.bench.dynamic import PREFETCH_MODES, BenchConfig, Runner, load_workload, run_prefetch

OUT = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--data", default="sst")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = BenchConfig(batches=args.steps, data=args.data, workers=args.workers)
    work = load_workload(cfg)
    curves: dict[str, list[float]] = {}
    for mode in ("eager", "eager, weights x (1 + 1e-7)", "reuse+batch", "prefetch", "module+batch", "module+prefetch"):
        r = Runner(mode.split(",")[0], cfg, work.vocab)
        if "1e-7" in mode:
            with torch.no_grad():
                for p in r.model.parameters():
                    p.mul_(1 + 1e-7)
        if mode in PREFETCH_MODES:
            run_prefetch(r, cfg, work.batches)
        else:
            for b in work.batches:
                torch.manual_seed(cfg.seed + 1)
                r.step(b)
        curves[mode] = r.losses
        print(f"{mode}: final loss {r.losses[-1]:.4f}")
    diffs = {m: [max(abs(a - b) for a, b in zip(curves["eager"][:k + 1], v[:k + 1], strict=True))
                 for k in range(len(v))] for m, v in curves.items() if m != "eager"}
    res = {"data": work.data, "steps": args.steps, "batch_size": cfg.batch_size, "losses": curves,
           "max_abs_diff_so_far": diffs, "max_abs_diff": {m: d[-1] for m, d in diffs.items()}}
    OUT.mkdir(exist_ok=True)
    (OUT / "dynamic_loss_curve.json").write_text(json.dumps(res, indent=1))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for m, v in curves.items():
        a1.plot(range(1, len(v) + 1), v, label=m, lw=1.2 if m == "eager" else 0.8,
                ls="-" if m == "eager" else "--")
    a1.set_xlabel("training step (batch of 20 SST trees)")
    a1.set_ylabel("loss")
    a1.set_title("Tree-LSTM training loss, same seed and data")
    a1.legend()
    for m, d in diffs.items():
        a2.semilogy(range(1, len(d) + 1), [max(x, 1e-9) for x in d], label=m)
    a2.set_xlabel("training step")
    a2.set_ylabel("max |loss - eager loss| so far")
    a2.set_title("difference from eager")
    a2.legend()
    fig.tight_layout()
    fig.savefig(OUT / "dynamic_loss_curve.png", dpi=110)
    print(json.dumps(res["max_abs_diff"]))


if __name__ == "__main__":
    main()
