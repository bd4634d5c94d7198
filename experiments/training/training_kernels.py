"""The convolution-gradient kernels of ResNet-50's training graph in ONNX Runtime: as differentiated, and as the
``training`` rules spell them (:mod:`graphsub.rules.library.training`).

For every distinct ``conv2d_grad_w`` / ``conv2d_grad_x`` of ResNet-50's training graph (batch 8, image 112, the
training bench's shapes), a one-node graph is built, the rule applied, both exported and timed in paired rounds
(:func:`graphsub.optimize.decide.compare`: fresh session groups with an A/A control, ``ORT_ENABLE_ALL``) at each
thread count; the outputs are compared.
Writes ``experiments/results/training_kernels.json`` (per kernel: shapes, ms before/after, ratio, max abs diff).
Timing: run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.bench.training_run import joint, prepare
from graphsub.frontends.onnx_export import export_graph
from graphsub.frontends.ort import make_session, run_session
from graphsub.ir.builder import Builder
from graphsub.ir.graph import Graph
from graphsub.optimize import decide
from graphsub.rules.apply import apply
from graphsub.rules.library import get_set
from graphsub.rules.match import find_matches

OUT = Path(__file__).resolve().parents[1] / "results" / "training_kernels.json"
RULE_OF = {"conv2d_grad_w": "trn_grad_w_gemm", "conv2d_grad_x": "trn_grad_x_conv"}


def kernels(g: Graph) -> dict[tuple[Any, ...], tuple[str, tuple[tuple[int, ...], ...], dict[str, Any]]]:
    """Distinct (op, input shapes, attributes) of the conv-gradient nodes of ``g``."""
    out = {}
    for op in RULE_OF:
        for nid in g.ops_of(op):
            n = g.node(nid)
            shapes = tuple(g.type_of(r).shape for r in n.inputs)
            attrs = dict(n.attr)
            out[(op, shapes, tuple(sorted((k, str(v)) for k, v in attrs.items())))] = (op, shapes, attrs)
    return out


def one_node(op: str, shapes: tuple[tuple[int, ...], ...], attrs: dict[str, Any]) -> Graph:
    b = Builder(op)
    ins = [b.input(f"in{i}", s) for i, s in enumerate(shapes)]
    return b.build(b.op1(op, *ins, **attrs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,all", help="thread counts ('all': every core)")
    ap.add_argument("--budget-ms", type=float, default=150.0, help="timing per round and kernel")
    args = ap.parse_args()
    rules = {r.name: r for r in get_set("training")}
    g, *_ = joint(prepare("resnet50", batch=8))
    threads = [os.cpu_count() or 1 if t == "all" else int(t) for t in args.threads.split(",")]
    rows = []
    for op, shapes, attrs in kernels(g).values():
        src = one_node(op, shapes, attrs)
        matches = find_matches(src, rules[RULE_OF[op]])
        row: dict[str, Any] = {"op": op, "shapes": shapes, "attrs": {k: str(v) for k, v in attrs.items()},
                               "rule": RULE_OF[op], "applies": bool(matches)}
        if matches:
            dst = apply(src, matches[0]).graph
            a, b = export_graph(src).SerializeToString(), export_graph(dst).SerializeToString()
            rng = np.random.default_rng(0)
            feeds = {f"in{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
            ra, rb = (run_session(make_session(m, optimization="all"), feeds)[0] for m in (a, b))
            row["max_abs_diff"] = float(np.max(np.abs(ra - rb)))
            row["max_abs"] = float(np.max(np.abs(ra)))
            for t in threads:
                v = decide.compare(*decide.session_makers(a, b, feeds, threads=t), budget_ms=args.budget_ms)
                row[f"t{t}"] = {"before_ms": statistics.median(v.measured.a),
                                "after_ms": statistics.median(v.measured.b), **v.to_dict()}
        rows.append(row)
        print(op, shapes, attrs.get("strides"), {k: v for k, v in row.items() if k.startswith("t")}, flush=True)
    OUT.write_text(json.dumps({"model": "resnet50", "batch": 8, "image": 112, "load_avg": os.getloadavg(),
                               "cpus": os.cpu_count(), "kernels": rows}, indent=1))


if __name__ == "__main__":
    main()
