"""IR microbenchmark: one-node substitution vs graph copy (NasNet-A), structural hash times of
the zoo, and edit/copy scaling with graph size.  Writes experiments/results/ir_micro.json and
ir_micro.png.  Run: make bench-ir  (or .venv/bin/python experiments/infra/ir_micro.py)."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import onnxruntime

from graphsub import zoo
from graphsub.bench.ir_micro import edit_vs_copy, hash_times, scaling

OUT = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                    "processor": platform.processor(), "onnxruntime": onnxruntime.__version__},
        "nasnet_a": edit_vs_copy(zoo.get("nasnet_a")),
        "hash_times": hash_times(),
        "scaling_resnet": scaling(),
    }
    (OUT / "ir_micro.json").write_text(json.dumps(result, indent=2) + "\n")
    n = result["nasnet_a"]
    print(f"NasNet-A ({n['num_nodes']} nodes): copy {n['copy_s'] * 1e6:.0f} us, one-node edit "
          f"first/middle/last {n['edit_first_s'] * 1e6:.1f}/{n['edit_middle_s'] * 1e6:.1f}/"
          f"{n['edit_last_s'] * 1e6:.1f} us (copy/edit = {n['copy_over_edit_middle']:.0f}x); "
          f"edit + incremental hash middle {n['edit_middle_plus_hash_s'] * 1e6:.0f} us, "
          f"hash from scratch {n['hash_from_scratch_s'] * 1e6:.0f} us")
    for r in result["hash_times"]:
        print(f"  hash {r['model']:15} {r['num_nodes']:5} nodes {r['hash_s'] * 1e6:8.0f} us "
              f"({r['hash_per_node_us']:.2f} us/node)")
    for r in result["scaling_resnet"]:
        print(f"  resnet blocks={r['blocks']:4} nodes={r['num_nodes']:5} copy {r['copy_s'] * 1e6:9.0f} us  "
              f"edit {r['edit_middle_s'] * 1e6:6.1f} us")
    plot(result)


def plot(result: dict) -> None:  # type: ignore[type-arg]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["scaling_resnet"]
    nodes = [r["num_nodes"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("copy_s", "copy whole graph"), ("hash_from_scratch_s", "structural hash (scratch)"),
                       ("edit_middle_plus_hash_s", "one-node edit + incremental hash"),
                       ("edit_middle_s", "one-node edit")):
        ax.loglog(nodes, [r[key] * 1e6 for r in rows], marker="o", label=label)
    ax.set_xlabel("graph size (nodes, OCGGS ResNet with n blocks)")
    ax.set_ylabel("time (us, median)")
    ax.set_title("Substitution cost vs graph size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "ir_micro.png", dpi=120)


if __name__ == "__main__":
    main()
