"""The whole generator: enumerate (sharded) -> candidates -> confirm -> prune -> emit -> verify.

:func:`generate` returns a :class:`Generated` holding the rules.json document
(:mod:`.emit`), per-stage counts and timings.  After pruning, every substitution is turned into
rules and checked with the numeric verifier (:func:`~graphsub.rules.soundness.numeric.verify_rule`,
real float/integer semantics with the true ReLU); substitutions with a failing rule or no
usable direction are dropped and counted.

>>> from graphsub.rules.generate.enumerate import EnumConfig
>>> g = generate(EnumConfig(templates=("matmul", "transpose"), max_ops=2))
>>> "matmul(matmul(x1,w1),w2) == matmul(x1,matmul(w1,w2))" in [s["text"] for s in g.doc["substitutions"]]
True
>>> g.counts["candidates"] >= g.counts["after_renaming"] >= g.counts["confirmed"] >= g.counts["emitted"]
True
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.rules.generate.emit import FORMAT, VERSION, load_substitutions, ref, to_rules
from graphsub.rules.generate.enumerate import EnumConfig, GraphCode, evaluate
from graphsub.rules.generate.fingerprint import random_inputs
from graphsub.rules.generate.parallel import ShardResult, merge, run_shards
from graphsub.rules.generate.prune import (
    Pair,
    Stats,
    candidate_pairs,
    confirm,
    pair_text,
    prune_common,
)
from graphsub.rules.generate.templates import Meta

Progress = Callable[[str, int, int | None], None]  # (stage, advance, total)


@dataclass
class Generated:
    """Result of :func:`generate`: the rules.json document, stage counts and timings."""

    doc: dict[str, Any]
    stats: Stats
    seconds: dict[str, float] = field(default_factory=dict)
    peak_bytes: int = 0
    #: the emitted pairs (aligned with ``doc["substitutions"]``) and their canonical keys
    pairs: list[Pair] = field(default_factory=list)
    #: canonical keys of the pairs after the renaming stage and after the common-subgraph stage
    stage_keys: dict[str, set[tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    #: fingerprints of all enumerated graphs
    fingerprints: set[int] = field(default_factory=set)

    @property
    def counts(self) -> dict[str, int]:
        s = self.stats
        return {"graphs": s.graphs, "fingerprints": s.fingerprints, "candidates": s.candidates,
                "after_renaming": s.renaming, "confirmed": s.confirmed, "after_common_subgraph": s.common_subgraph,
                "emitted": len(self.doc["substitutions"]),
                "rules": sum(len(x.get("directions", [])) for x in self.doc["substitutions"])}


def _side_json(cfg: EnumConfig, g: GraphCode) -> tuple[list[dict[str, Any]], dict[int, str]]:
    temps = cfg.template_objs
    names: dict[int, str] = {j: v.name for j, v in enumerate(cfg.variables)}
    metas: list[Meta] = [Meta(v.shape) for v in cfg.variables]
    weights = [v.weight for v in cfg.variables]
    ops: list[dict[str, Any]] = []
    for i, (t, ins) in enumerate(g.ops):
        tmpl = temps[t]
        out = tmpl.infer([metas[j] for j in ins], [j < len(weights) and weights[j] for j in ins])
        assert out is not None
        groups = None
        if tmpl.op == "conv2d":
            c, cg = metas[ins[0]].shape[1], metas[ins[1]].shape[1]
            groups = 1 if c == cg else (-1 if cg == 1 else c // cg)
        ops.append({"template": tmpl.name, "op": tmpl.op, "attrs": {k: list(v) if isinstance(v, tuple) else v
                                                                    for k, v in tmpl.attrs},
                    "in": [names[j] for j in ins], "groups": groups})
        for k, m in enumerate(out):
            names[len(metas)] = ref(i, k)
            metas.append(m)
    return ops, names


def pair_json(cfg: EnumConfig, sid: int, p: Pair) -> dict[str, Any]:
    a, na = _side_json(cfg, p.a)
    b, nb = _side_json(cfg, p.b)
    text = "; ".join(f"{x} == {y}" for x, y in pair_text(cfg, p))
    return {"id": sid, "text": text, "a": a, "b": b, "outputs": [[na[x], nb[y]] for x, y in p.outputs]}


def doc_header(cfg: EnumConfig) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION,
            "config": {"templates": list(cfg.templates), "max_ops": cfg.max_ops, "seed": cfg.seed},
            "variables": {v.name: {"shape": list(v.shape), "weight": v.weight} for v in cfg.variables}}


def verify_chunk(header: dict[str, Any], subs: Sequence[dict[str, Any]]) -> list[list[str] | str]:
    """Per substitution (rules.json entries under ``header``): the directions whose rules pass numeric verification,
    or the reason it is dropped. A unit of work of the verify stage (runs in worker processes and Ray tasks)."""
    from graphsub.rules.soundness.numeric import verify_rule

    out: list[list[str] | str] = []
    for s in load_substitutions({**header, "substitutions": list(subs)}):
        rules = to_rules(s)
        if not rules:
            out.append("emit: no direction whose target reads only source variables")
        elif any(not verify_rule(r, header["config"]["seed"]).passed for r in rules):
            out.append("numeric verification failed")
        else:
            out.append([r.name.rsplit("_", 1)[1] for r in rules])
    return out


#: substitutions per unit of work of the verify stage
VERIFY_CHUNK = 64


def _verify(doc: dict[str, Any], stats: Stats, progress: Progress | None, par: dict[str, Any]) -> list[int]:
    """Indices of the substitutions whose rules all pass numeric verification (``par``: executor options)."""
    from graphsub.distributed.executors import chunks, map_ordered

    header = {k: v for k, v in doc.items() if k != "substitutions"}
    pieces = chunks(doc["substitutions"], VERIFY_CHUNK)
    total = len(doc["substitutions"])
    results = map_ordered(verify_chunk, pieces, context=header, **par,
                          on_done=(lambda k, r: progress("verify", len(r), total)) if progress else None)
    kept: list[int] = []
    for n, (raw, r) in enumerate(zip(doc["substitutions"], (x for xs in results for x in xs), strict=True)):
        if isinstance(r, str):
            stats.drop(r)
        else:
            raw["directions"] = r
            kept.append(n)
    return kept


def generate(cfg: EnumConfig, *, num_shards: int = 1, executor: str = "serial", workers: int | None = None,
             checkpoint: Path | None = None, tests: int = 3, progress: Progress | None = None,
             measure_memory: bool = False, ray_address: str | None = None) -> Generated:
    """Run the generator (see the module docstring). Every stage runs on ``executor`` (serial, process or ray;
    :mod:`graphsub.distributed.executors`): the enumeration's shards, the confirm stage's and the renaming stage's
    pieces of the candidate pairs, the verification's pieces of the substitutions; the output is the same on every
    executor."""
    from graphsub.distributed.executors import check_executor

    check_executor(executor)
    par: dict[str, Any] = {"executor": executor, "workers": workers, "ray_address": ray_address}
    stats = Stats()
    secs: dict[str, float] = {}
    if measure_memory:
        tracemalloc.start()
    t0 = time.perf_counter()

    def shard_done(s: int, r: ShardResult) -> None:
        if progress:
            progress("enumerate", 1, num_shards)

    shards = run_shards(cfg, num_shards=num_shards, checkpoint=checkpoint, on_done=shard_done, **par)
    merged = merge(shards)
    secs["enumerate"] = time.perf_counter() - t0
    secs["enumerate_cpu"] = sum(r.seconds for r in shards)
    stats.graphs = len(merged)
    stats.fingerprints = len(np.unique(merged.fps))
    t1 = time.perf_counter()
    cands = candidate_pairs(merged.fps)
    stats.candidates = len(cands)
    keys: list[tuple[tuple[str, str], ...]] = []
    pairs = confirm(cfg, merged.codes, cands, tests, stats,
                    progress=progress, keys=keys, **par)
    secs["confirm"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    keys2: list[tuple[tuple[str, str], ...]] = []
    pairs = prune_common(pairs, stats, keys, keys2)
    stats.common_subgraph = len(pairs)
    secs["prune_common"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    doc = {**doc_header(cfg), "substitutions": [pair_json(cfg, i, p) for i, p in enumerate(pairs)]}
    kept = _verify(doc, stats, progress, par)
    doc["substitutions"] = [doc["substitutions"][i] for i in kept]
    secs["emit_verify"] = time.perf_counter() - t3
    secs["total"] = time.perf_counter() - t0
    peak = 0
    if measure_memory:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    gen = Generated(doc, stats, secs, peak, [pairs[i] for i in kept],
                    {"confirmed": set(keys), "renaming": set(keys2)}, set(merged.fps.tolist()))
    doc["stats"] = {**gen.counts, "dropped": dict(sorted(stats.dropped.items()))}
    return gen


def check_pair(cfg: EnumConfig, p: Pair, seeds: int = 4) -> bool:
    """Do both sides agree (with the pair's mapping) on ``seeds`` random residue inputs?"""
    for s in range(seeds):
        inp = random_inputs(cfg.variables, 10_000 + s)
        va, vb = evaluate(cfg, p.a, inp), evaluate(cfg, p.b, inp)
        if any(va[x].shape != vb[y].shape or (va[x] != vb[y]).any() for x, y in p.outputs):
            return False
    return True


__all__ = ["VERIFY_CHUNK", "Generated", "check_pair", "doc_header", "generate", "pair_json", "verify_chunk"]
