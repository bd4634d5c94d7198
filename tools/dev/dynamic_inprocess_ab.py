"""The dynamic engine of an earlier commit against the working tree's, in one process, interleaved batch by batch.

    .venv/bin/python tools/dev/dynamic_inprocess_ab.py --base COMMIT --workloads treelstm,seqlstm,treegru

The speed of this VM drifts by up to 1.5x within minutes, far more than a change to the engine moves a step, so two
``graphsub dynamic bench`` runs minutes apart cannot tell such a change from the drift.  Here the package as it was at
``--base`` is extracted from git under another name (``graphsub_base``), both versions build the same model (same
seed, same weights) and optimizer (fused Adagrad), and each batch is stepped by one and then the other (the order
alternating), ``--rounds`` times over the workload's 20 SST batches (the first round left out); ``module+batch``,
no plan cache.  Reported per stage: the median over batches of each version, and the ratio working tree / base.
Writes ``--out`` (default ``dynamic_inprocess_ab.json`` in the current directory; the last A/B of the engine is
``experiments/results/dynamic_inprocess_ab.json``).  Run it alone on the machine: it is a timing
benchmark.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]  # the repository: tools/dev/ -> ../..
STAGES = ("trace", "plan", "forward", "backward", "step", "full")


def extract(ref: str, dest: Path) -> None:
    """``src/graphsub`` at git ``ref`` as the package ``graphsub_base`` under ``dest``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src/graphsub"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    pkg = dest / "graphsub_base"
    (dest / "src" / "graphsub").rename(pkg)
    for f in pkg.rglob("*.py"):
        text = f.read_text()
        text = re.sub(r"\bgraphsub\.", "graphsub_base.", text)
        text = re.sub(r"\bfrom graphsub import\b", "from graphsub_base import", text)
        text = re.sub(r"^import graphsub$", "import graphsub_base", text, flags=re.M)
        f.write_text(text)


def setup(pkg: str, workload: str) -> dict[str, Any]:
    bd = importlib.import_module(pkg + ".bench.dynamic")
    dy = importlib.import_module(pkg + ".dynamic")
    sst = importlib.import_module(pkg + ".dynamic.workloads.sst")
    cfg = bd.BenchConfig(batches=20, data="sst", workload=workload, plan_cache=0, fused_optimizer=True)
    work = bd.load_workload(cfg)
    r = bd.Runner("module+batch", cfg, work.vocab)
    return {"r": r, "loss": bd.loss_fn(cfg), "lazy": dy.lazy, "build": dy.build,
            "batches": [[sst.encode_tree(t, work.vocab) for t in raw] for raw in work.batches]}


def step(s: dict[str, Any], batch: list[Any]) -> tuple[dict[str, float], float]:
    r = s["r"]
    torch.manual_seed(1)
    clock = time.perf_counter
    t0 = clock()
    r.opt.zero_grad()
    with s["lazy"](r.engine, examples=len(batch)):
        lazy_loss = s["loss"](r.model, batch)
    t1 = clock()
    loss = s["build"](lazy_loss)
    t2 = clock()
    loss.backward()
    t3 = clock()
    r.opt.step()
    t4 = clock()
    plan = r.engine.last.optimize_s
    return ({"trace": t1 - t0, "plan": plan, "forward": t2 - t1 - plan, "backward": t3 - t2, "step": t4 - t3,
             "full": t4 - t0}, float(loss.detach()))


def compare(workload: str, rounds: int) -> dict[str, Any]:
    sides = {"base": setup("graphsub_base", workload), "tree": setup("graphsub", workload)}
    times: dict[str, dict[str, list[float]]] = {v: {k: [] for k in STAGES} for v in sides}
    losses: dict[str, list[float]] = {v: [] for v in sides}
    n = len(sides["base"]["batches"])
    for rnd in range(rounds):
        for i in range(n):
            for v in (("base", "tree") if (i + rnd) % 2 == 0 else ("tree", "base")):
                gc.collect()
                got, value = step(sides[v], sides[v]["batches"][i])
                losses[v].append(value)
                if rnd > 0:
                    for k, x in got.items():
                        times[v][k].append(x)
    med = {v: {k: 1000 * statistics.median(xs) for k, xs in t.items()} for v, t in times.items()}
    return {"ms": med, "tree_over_base": {k: med["tree"][k] / med["base"][k] for k in STAGES},
            "loss_max_abs_diff": max(abs(a - b) for a, b in zip(losses["base"], losses["tree"], strict=True))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git commit of the baseline (the engine before the change)")
    ap.add_argument("--workloads", default="treelstm,seqlstm,treegru")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("dynamic_inprocess_ab.json"), help="the results file (JSON)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        extract(args.base, Path(tmp))
        sys.path.insert(0, tmp)
        load0 = os.getloadavg()[0]
        res: dict[str, Any] = {"command": f"tools/dev/dynamic_inprocess_ab.py --base {args.base} --workloads "
                                          f"{args.workloads} --rounds {args.rounds}",
                               "base": args.base, "head": subprocess.run(
                                   ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                                   capture_output=True, text=True).stdout.strip(),
                               "threads": 1, "mode": "module+batch", "optimizer": "fused Adagrad", "workloads": {}}
        for w in args.workloads.split(","):
            res["workloads"][w] = got = compare(w, args.rounds)
            print(w, {k: round(v, 3) for k, v in got["tree_over_base"].items()}, flush=True)
        res["loadavg"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
