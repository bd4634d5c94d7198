"""``graphsub dynamic ...``: dynamic-graph reuse (issue 10); ``bench`` runs the end-to-end comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from graphsub.cli.common import Exit, JsonOpt, SeedOpt, err, fail, wide

dynamic_app = typer.Typer(help="Dynamic-graph reuse (Liu 2019) and signature-keyed batching for define-by-run "
                               "PyTorch (Tree-LSTM, sequence LSTM).", no_args_is_help=True)


def _f(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _print(res: dict[str, Any]) -> None:
    from graphsub.bench.dynamic import STAGE_LABELS, STAGES

    con = wide(160)
    cfg = res["config"]
    if res.get("note"):
        err.print(f"[yellow]note:[/] {res['note']}")
    med = res["ms_per_batch"]
    modes = list(med)
    t = Table("stage", *[f"{m} (ms)" for m in modes],
              title=f"Table 6.4 layout: median ms per batch of {cfg['batch_size']} ({cfg['workload']}, {res['data']} "
                    f"data, emb {cfg['emb']}, hidden {cfg['hidden']}, {cfg['batches']} batches, "
                    f"first {cfg['warmup']} not counted)")
    for s in STAGES:
        t.add_row(STAGE_LABELS[s], *[_f(med[m][s]) for m in modes])
    if "speedup" in res:
        for s in ("forward", "backward", "full"):
            t.add_row(f"speedup {s} vs eager", *[_f(res["speedup"][m][s], ".2f") + "x" for m in modes])
    con.print(t)
    if "table_6_3" in res:
        t3 = Table("P_Depth", "occurrences", "frequent subgraphs", "avg occurrence", "avg op count",
                   "distinct signatures", "collisions",
                   title=f"Table 6.3: frequent subgraphs over the first {cfg['collect']} batches (P_Freq = 1)")
        for r in res["table_6_3"]:
            t3.add_row(str(r["depth"]), str(r["occurrences"]), str(r["frequent"]), _f(r["avg_occurrence"]),
                       _f(r["avg_op_count"], ".2f"), str(r["distinct_signatures"]), str(r["hash_collisions"]))
        con.print(t3)
    if res.get("recording"):
        t2 = Table("mode", "recording ms / batch", "recorded nodes / batch", "us / node",
                   title="recording (prefetch modes: in the worker processes)")
        for m, r in res["recording"].items():
            t2.add_row(m, _f(r["ms_per_batch"]), _f(r["nodes_per_batch"], ".0f"), _f(r["us_per_node"], ".2f"))
        con.print(t2)
    for m, c in (res.get("plan_cache") or {}).items():
        con.print(f"plan cache ({m}): {c['hits']} hits, {c['misses']} misses (hit rate {c['hit_rate']:.0%}), "
                  f"{c['entries']} of {c['size']} plans kept")
    if res.get("capture"):
        t4 = Table("callable", "captured", "keys captured / refused", "reason (last refusal)",
                   title="module-level capture: what was recorded as one node")
        for r in res["capture"]:
            t4.add_row(r["callable"], "yes" if r["captured"] else "no", f"{r['captured_keys']} / {r['refused_keys']}",
                       r["reason"] or "-")
        con.print(t4)
    probe = res.get("host_probe_ms")
    if probe:
        con.print(f"host probe (a fixed pure-Python loop, before each turn): median {probe['median']:.2f} ms, "
                  f"{probe['min']:.2f}-{probe['max']:.2f}; 1-minute load {res['loadavg'][0]} -> {res['loadavg'][1]}")
    if "training" in res:
        tr = res["training"]
        con.print(f"best mode: [bold]{res['best_mode']}[/], full step {res['speedup_full_step']:.2f}x eager; "
                  f"training equivalence over {tr['steps']} Adagrad steps: loss max |diff| "
                  f"{tr['loss_max_abs_diff']:.3g}, parameters max |diff| {tr['param_max_abs_diff']:.3g}")


@dynamic_app.command("bench")
def bench_cmd(
    batches: Annotated[int, typer.Option("--batches", min=1, help="Number of batches per mode.")] = 12,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Trees per batch.")] = 20,
    data: Annotated[str, typer.Option("--data", help="sst (real data, falls back to synthetic when absent) "
                                                     "or synthetic.")] = "sst",
    sst: Annotated[Path | None, typer.Option("--sst", help="Folder of SST's train.txt/dev.txt/test.txt (PTB trees; "
                                             "default: $GRAPHSUB_SST). Without it --data sst says so and uses the "
                                             "synthetic treebank.")] = None,
    depth: Annotated[int, typer.Option("--depth", min=1, help="P_Depth of the reuse mode.")] = 8,
    seed: SeedOpt = 0,
    workload: Annotated[str, typer.Option("--workload", help="treelstm (root label), seqlstm (sequence LSTM) or "
                                                             "treegru (Tree-GRU, every phrase labelled).")]
    = "treelstm",
    modes: Annotated[str, typer.Option("--modes", help="Comma-separated: eager,traced,reuse,reuse+batch,prefetch,"
                                                       "module+batch,module+prefetch (module+...: module calls "
                                                       "recorded as one node each and batched whole; ...prefetch: "
                                                       "recorded ahead by worker processes).")]
    = "eager,traced,reuse,reuse+batch,prefetch,module+batch,module+prefetch",
    workers: Annotated[int, typer.Option("--workers", min=0, help="Worker processes of the prefetch mode (0: record "
                                                               "in the main process).")] = 2,
    plan_cache: Annotated[int, typer.Option("--plan-cache", min=0, help="Plans kept by structure in the module "
                                                                   "modes (0: none); the second round repeats "
                                                                   "the first round's batches.")] = 64,
    vocab: Annotated[str, typer.Option("--vocab", help="batches: the vocabulary of the benched trees only; train: "
                                                       "the whole SST train split's (a larger embedding, whose "
                                                       "dense Adagrad update every mode pays).")] = "batches",
    fused_optimizer: Annotated[bool, typer.Option("--fused-optimizer/--loop-optimizer", help="torch's fused "
                                                  "Adagrad (one CPU kernel per parameter) in every mode, eager "
                                                  "included, or its default for-loop Adagrad.")] = False,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Leading batches left out of the medians.")] = 3,
    train_steps: Annotated[int, typer.Option("--train-steps", min=1, help="Steps of the training-equivalence "
                                                                          "run (eager vs the best mode).")] = 5,
    emb: Annotated[int, typer.Option("--emb", min=1, help="Embedding size.")] = 300,
    hidden: Annotated[int, typer.Option("--hidden", min=1, help="Hidden size.")] = 150,
    tables: Annotated[bool, typer.Option("--tables/--no-tables", help="Compute Table 6.3 (P_Depth 5..10).")] = True,
    backends: Annotated[bool, typer.Option("--backends", help="Also time python / fx / inductor pattern "
                                                              "functions (inductor compiles for seconds).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Eager vs traced vs reuse (thesis) vs reuse+batch vs prefetch per stage, Tables 6.3 / 6.4, training
    equivalence (eager vs the best mode)."""
    from graphsub.bench.dynamic import MODES, WORKLOADS, BenchConfig, bench_backends, run_bench

    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in mode_list if m not in MODES]
    if bad or not mode_list:
        fail(Exit.USAGE, f"unknown mode(s) {', '.join(bad) or '(none)'}; choose from {', '.join(MODES)}", as_json)
    if workload not in WORKLOADS:
        fail(Exit.USAGE, f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}", as_json)
    if data not in ("sst", "synthetic"):
        fail(Exit.USAGE, f"unknown data {data!r}; choose sst or synthetic", as_json)
    if sst is not None and not sst.is_dir():
        fail(Exit.BAD_INPUT, f"--sst {str(sst)!r} is not a folder (it should hold SST's train.txt, dev.txt, test.txt)",
             as_json)
    if vocab not in ("batches", "train"):
        fail(Exit.USAGE, f"unknown vocabulary {vocab!r}; choose batches or train", as_json)
    cfg = BenchConfig(batches=batches, batch_size=batch_size, data=data, sst_dir=None if sst is None else str(sst),
                      depth=depth, seed=seed, workload=workload,
                      emb=emb, hidden=hidden, warmup=warmup, train_steps=train_steps, modes=tuple(mode_list),
                      workers=workers, plan_cache=plan_cache, vocab=vocab, fused_optimizer=fused_optimizer)
    res = run_bench(cfg, tables=tables)
    if backends:
        res["backends"] = bench_backends(hidden=hidden, emb=emb)
    if as_json:
        print(json.dumps(res, indent=2, default=str))
        return
    _print(res)
    if backends:
        t = Table("pattern", "ops", "backend", "fwd+bwd us/call", "first call (s)", title="pattern backends")
        for r in res["backends"]:
            t.add_row(str(r["pattern"]), str(r["ops"]), r["backend"], _f(r["us_per_call"]),
                      _f(r["first_call_s"], ".2f"))
        wide(160).print(t)


__all__ = ["bench_cmd", "dynamic_app"]
