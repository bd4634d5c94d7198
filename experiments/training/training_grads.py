"""Gradient agreement of graphsub's training graphs with ``torch.autograd`` (issue 22, "must show").

Two tables, written to ``experiments/results/training_grads.{json,csv}``:

1. **Every zoo model** whose training graph can be built (the others are listed with the reason): the training graph
   (cross entropy on (batch, classes) logits, else mse; batch norm frozen, as the zoo's graphs are inference graphs)
   run in onnxruntime, against ``torch.autograd`` through the same forward graph emitted as a PyTorch module
   (:func:`graphsub.frontends.torch_emit.to_module`: torch's own backward, independent of graphsub's rules) in
   float64; graphsub in float32 beside torch in float32, both against torch in float64 (the float32 noise floor of
   the model at its random weights): the largest absolute difference, and the largest relative to that gradient's
   largest value (tensors below 1e-6 of the model's largest gradient -- true zeros such as attention key biases --
   only in absolute terms).
2. **MetaFlow's models as PyTorch modules** (:mod:`graphsub.bench.train_models`, exported as they train: batch norm
   on batch statistics): graphsub's training graph in float64 (numpy reference executor) against the module's
   autograd in float64 -- exactness -- and in float32 (onnxruntime) against float64 autograd, beside PyTorch's own
   float32 against float64 autograd: the float32 noise floor of the model at random initialisation.

Usage: ``.venv/bin/python experiments/training/training_grads.py [--seeds 2] [--skip-zoo]``
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphsub import zoo
from graphsub.bench.training_run import Case, joint, prepare, torch_grads
from graphsub.data import materialize, random_inputs
from graphsub.errors import GraphsubError
from graphsub.execute import run
from graphsub.frontends.onnx_export import export_graph
from graphsub.frontends.ort import make_session, run_session
from graphsub.frontends.torch_emit import to_module
from graphsub.frontends.torch_export import export_module
from graphsub.spec import ModelSpec
from graphsub.training import GRAD_PREFIX, build_training, initial_params

OUT = Path(__file__).resolve().parents[1] / "results"


#: a gradient tensor whose largest value is below this fraction of the model's largest gradient is compared only in
#: absolute terms (relative to itself it is noise: e.g. the key biases of attention, whose true gradient is zero)
TINY = 1e-6


def _worst(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray], names: Any) -> tuple[float, float, str]:
    """(largest absolute difference, largest difference relative to its tensor's largest value -- over tensors not
    negligible against the model's largest gradient --, that tensor's name)."""
    top = max((float(np.max(np.abs(ref[n]))) for n in names), default=0.0)
    worst_abs, worst_rel, where = 0.0, 0.0, ""
    for n in names:
        d = float(np.max(np.abs(np.asarray(ours[n], np.float64) - np.asarray(ref[n], np.float64))))
        size = float(np.max(np.abs(ref[n])))
        worst_abs = max(worst_abs, d)
        if size <= TINY * top:
            continue
        rel = d / size
        if rel > worst_rel:
            worst_rel, where = rel, n
    return worst_abs, worst_rel, where


def zoo_row(name: str, seed: int) -> dict[str, Any]:
    fwd = materialize(zoo.get(name), seed)
    shape = fwd.output_types[0].shape
    loss = "cross_entropy" if len(shape) == 2 else "mse"
    try:
        g, spec = build_training(fwd, loss=loss, batchnorm="frozen")
    except GraphsubError as e:
        return {"model": name, "seed": seed, "refused": str(e)}
    params = initial_params(fwd, spec)
    feeds = random_inputs(fwd, seed)
    rng = np.random.default_rng(seed)
    labels = (np.eye(shape[1], dtype=np.float32)[rng.integers(0, shape[1], size=shape[0])] if loss == "cross_entropy"
              else rng.standard_normal(shape).astype(np.float32))
    assert spec.label_input is not None
    sess = make_session(export_graph(g).SerializeToString(), optimization="all")
    outs = dict(zip(g.output_names, run_session(sess, {**feeds, **params, spec.label_input: labels}), strict=True))
    refs, losses = {}, {}
    for dtype in (torch.float32, torch.float64):  # torch's float32 result against float64: the noise floor
        m = to_module(fwd, trainable=spec.params).to(dtype)
        y = m(*(torch.from_numpy(feeds[n]).to(dtype) for n in fwd.input_names))
        y = y[0] if isinstance(y, tuple) else y
        f = torch.nn.functional.cross_entropy if loss == "cross_entropy" else torch.nn.functional.mse_loss
        lt = f(y, torch.from_numpy(labels).to(dtype))
        lt.backward()
        named, keys = dict(m.named_parameters()), m.graph_names
        ref = {}
        for n in spec.params:
            grad = named[keys[n]].grad
            ref[GRAD_PREFIX + n] = np.zeros(named[keys[n]].shape) if grad is None else grad.numpy()
        refs[dtype], losses[dtype] = ref, float(lt.detach())
    names = [GRAD_PREFIX + n for n in spec.params]
    a, r, where = _worst(outs, refs[torch.float64], names)
    ta, tr, twhere = _worst(refs[torch.float32], refs[torch.float64], names)
    return {"model": name, "seed": seed, "loss": loss, "params": len(spec.params), "ops_forward": fwd.num_ops,
            "ops_training": g.num_ops, "loss_abs_diff": abs(float(outs["loss"]) - losses[torch.float64]),
            "max_grad_abs_diff": a, "max_grad_rel_diff": r, "worst": where.removeprefix(GRAD_PREFIX),
            "torch32_max_grad_abs_diff": ta, "torch32_max_grad_rel_diff": tr,
            "torch32_worst": twhere.removeprefix(GRAD_PREFIX)}


def module_row(name: str, seed: int, batch: int) -> dict[str, Any]:
    case = prepare(name, batch=batch, seed=seed)
    g32, _, params32, data32 = joint(case)
    sess = make_session(export_graph(g32).SerializeToString(), optimization="all")
    ort32 = dict(zip(g32.output_names, run_session(sess, {**data32, **params32}), strict=True))
    _, t32 = torch_grads(case)
    m64 = copy.deepcopy(case.module).double()
    x64 = [x.astype(np.float64) for x in case.inputs]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m64.onnx")
        export_module(m64, [torch.from_numpy(x) for x in x64], path, training=True)
        fwd64 = ModelSpec.parse(path).load()
    c64 = Case(name, m64, x64, case.labels.astype(np.float64), fwd64, batch, case.image)
    g64, spec64, params64, data64 = joint(c64)
    t0 = time.perf_counter()
    ours64 = run(g64, {**data64, **params64})
    run_s = time.perf_counter() - t0
    loss64, t64 = torch_grads(c64)
    names = spec64.params
    ref64 = {GRAD_PREFIX + n: t64[n] for n in names}
    exact_a, exact_r, exact_w = _worst(ours64, ref64, [GRAD_PREFIX + n for n in names])
    o32_a, o32_r, o32_w = _worst(ort32, ref64, [GRAD_PREFIX + n for n in names])
    t32_a, t32_r, t32_w = _worst({GRAD_PREFIX + n: t32[n] for n in names}, ref64, [GRAD_PREFIX + n for n in names])
    return {"model": name, "seed": seed, "batch": batch, "image": case.image, "params": len(names),
            "ops_training": g64.num_ops, "reference_run_s": run_s,
            "f64_loss_abs_diff": abs(float(ours64["loss"]) - loss64), "f64_max_grad_abs_diff": exact_a,
            "f64_max_grad_rel_diff": exact_r, "f64_worst": exact_w.removeprefix(GRAD_PREFIX),
            "f32_ort_loss_abs_diff": abs(float(ort32["loss"]) - loss64), "f32_ort_max_grad_rel_diff": o32_r,
            "f32_ort_worst": o32_w.removeprefix(GRAD_PREFIX), "f32_torch_max_grad_rel_diff": t32_r,
            "f32_torch_worst": t32_w.removeprefix(GRAD_PREFIX), "f32_ort_max_grad_abs_diff": o32_a,
            "f32_torch_max_grad_abs_diff": t32_a}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--skip-zoo", action="store_true")
    ap.add_argument("--models", default="squeezenet,inception_v3,resnet50,encoder")
    args = ap.parse_args()
    zoo_rows = [] if args.skip_zoo else [zoo_row(n, s) for n in zoo.list_models() for s in range(args.seeds)]
    for r in zoo_rows:
        print(json.dumps(r))
    mod_rows = [module_row(n, s, args.batch) for n in args.models.split(",") for s in range(args.seeds)]
    for r in mod_rows:
        print(json.dumps(r))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "training_grads.json").write_text(json.dumps({"zoo": zoo_rows, "modules": mod_rows,
                                                         "load_avg": list(os.getloadavg())}, indent=2))
    with open(OUT / "training_grads.csv", "w", newline="") as f:
        keys = sorted({k for r in zoo_rows + mod_rows for k in r})
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in zoo_rows + mod_rows:
            w.writerow(r)


if __name__ == "__main__":
    main()
