"""100 SGD steps of the optimized training graph against the original module (issue 22, "must show").

For each model: the training graph optimized by graphsub (search and verification, no timing), run in onnxruntime
with its SGD update in numpy, against the original PyTorch module trained with autograd and ``torch.optim.SGD`` from
the same weights on the same batch; and the control: the module with every weight perturbed by 1e-7 against the
original. The optimized curve agrees with the original "to float rounding" when its distance is no larger than the
control's. Writes ``experiments/results/training_curves.json`` and ``training_curves.png``.

Usage: ``.venv/bin/python experiments/training/training_curves.py [--models squeezenet,encoder] [--steps 100]`` (the
runs of other models already in the JSON are kept unless ``--replace``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from graphsub.bench.training_run import loss_curves, prepare

OUT = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="squeezenet,encoder")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--replace", action="store_true", help="drop the runs of models not given (default: keep them)")
    args = ap.parse_args()
    rows = []
    for name in args.models.split(","):
        case = prepare(name, batch=args.batch)
        r = loss_curves(case, steps=args.steps, lr=args.lr, budget_s=args.budget)
        print(json.dumps({k: v for k, v in r.items() if k != "curves"}))
        rows.append(r)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "training_curves.json"
    if path.exists() and not args.replace:  # keep the other models' runs: one model at a time fits a session
        done = {r["model"] for r in rows}
        rows = [r for r in json.loads(path.read_text())["runs"] if r["model"] not in done] + rows
    path.write_text(json.dumps({"runs": rows, "load_avg": list(os.getloadavg())}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(rows), figsize=(6 * len(rows), 7), squeeze=False)
    for j, r in enumerate(rows):
        c = r["curves"]
        ax = axes[0][j]
        for k in ("original_torch", "optimized_ort", "control_torch"):
            ax.plot(c[k], label=k.replace("_", " "))
        ax.set_title(f"{r['model']}: loss over {r['steps']} SGD steps (lr {r['lr']})")
        ax.legend()
        ax = axes[1][j]
        base = np.asarray(c["original_torch"])
        for k in ("optimized_ort", "control_torch"):
            ax.semilogy(np.abs(np.asarray(c[k]) - base) + 1e-12, label=f"|{k} - original|")
        ax.set_xlabel("step")
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "training_curves.png", dpi=80)


if __name__ == "__main__":
    main()
