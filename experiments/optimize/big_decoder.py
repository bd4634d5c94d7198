"""The 1 B decoder (issue 55, must-have 6): ``graphsub optimize`` on a model of 4.4 GB of weights, then an independent
re-timing of what it wrote.

The run of ``graphsub optimize`` itself is the user's (``/usr/bin/time -v graphsub optimize IN -o OUT --json``, its
default budget: 75 s plus 400 s per GB); this script reads its JSON and ``/usr/bin/time``'s report (time to result,
peak RSS) and then, in a fresh process, with nothing else on the machine:

* **verifies** the output as ``graphsub bench decode`` does: greedy generation of ``--tokens`` tokens after a random
  16-token prompt (1 thread) gives the plain export's ids;
* **re-times** it against the plain export on each decode graph (one new token on a random 128- and 1,024-token cache)
  with :func:`graphsub.optimize.decide.compare` -- fresh session groups of the original, the output and the original
  again (the A/A control) in balanced orders, a 90% interval -- at ``--threads``, one group's sessions at a time (the
  machine holds three sessions of a 4.4 GB model, not the side-by-side run's seven);
* reads onnxruntime's fused kernels of both.

  /usr/bin/time -v graphsub optimize big/llama.1b.dynamo.onnx -o big/out/llama.1b.graphsub.onnx --json \\
      > big/optimize.json 2> big/optimize.err
  .venv/bin/python experiments/optimize/big_decoder.py big/llama.1b.dynamo.onnx big/out/llama.1b.graphsub.onnx \\
      --optimize-json big/optimize.json --time-report big/optimize.err --name big_decoder_llama_1b
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

GRAPHS = {"decode@128": (1, 128), "decode@1024": (1, 1024)}


def _time_report(path: Path | None) -> dict[str, Any]:
    """Wall time (s) and maximum resident set size (MB) from ``/usr/bin/time -v``'s report."""
    if path is None or not path.is_file():
        return {}
    text = path.read_text(errors="replace")
    out: dict[str, Any] = {}
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if rss:
        out["max_rss_mb"] = int(rss.group(1)) / 1024
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if wall:
        parts = [float(x) for x in wall.group(1).split(":")]
        out["wall_s"] = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    code = re.search(r"Exit status: (\d+)", text)
    if code:
        out["exit_status"] = int(code.group(1))
    return out


def _layout(family: str, size: str) -> Any:
    from graphsub.bench.decoders import DECODERS, Layout

    c = DECODERS[family].config(size)
    heads = c["num_attention_heads"]
    return Layout(c["num_hidden_layers"], c.get("num_key_value_heads") or heads, c["hidden_size"] // heads,
                  c["vocab_size"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("original", type=Path)
    ap.add_argument("optimized", type=Path)
    ap.add_argument("--optimize-json", type=Path)
    ap.add_argument("--time-report", type=Path)
    ap.add_argument("--family", default="llama")
    ap.add_argument("--size", default="1b")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--round-ms", type=float, default=2000.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("experiments/results"))
    ap.add_argument("--name", default="big_decoder_llama_1b")
    args = ap.parse_args(argv)

    from graphsub.bench.decoders import feeds, greedy_generate
    from graphsub.bench.records import machine_info, timestamp, versions
    from graphsub.bench.suite.measure import min_speedup
    from graphsub.frontends.onnx_io import file_bytes
    from graphsub.optimize import decide
    from graphsub.optimize.peers import ort_view

    layout = _layout(args.family, args.size)
    rec: dict[str, Any] = {"started_at": timestamp(), "original": str(args.original), "optimized": str(args.optimized),
                           "weights_bytes": file_bytes(args.original), "threads": args.threads,
                           "load_avg_before": os.getloadavg(), "command": " ".join(sys.argv)}
    if args.optimize_json and args.optimize_json.is_file():
        res = json.loads(args.optimize_json.read_text())
        rec["optimize"] = {k: res.get(k) for k in ("decision", "chosen", "kept_original", "verified", "speedup",
                                                   "speedup_ci", "aa_ratio", "peak_rss_mb", "timings_s",
                                                   "time_budget_s", "ops_before", "ops_after", "portfolio_notes",
                                                   "error", "exit_code")}
    rec["optimize_time"] = _time_report(args.time_report)
    prompt = np.random.default_rng(args.seed).integers(3, layout.vocab, 16).tolist()
    ref = greedy_generate(args.original, prompt, args.tokens, threads=1)
    got = greedy_generate(args.optimized, prompt, args.tokens, threads=1)
    rec["tokens_match"] = ref.tokens == got.tokens
    rec["first_mismatch"] = next((i for i, (a, b) in enumerate(zip(ref.tokens, got.tokens, strict=True))
                                  if a != b), None)
    rec["fused_kernels"] = {k: ort_view(p, threads=args.threads).fused_kernels
                            for k, p in (("original", args.original), ("optimized", args.optimized))}
    rec["timing"] = {}
    for graph, (seq, past) in GRAPHS.items():
        f = feeds(layout, 1, seq, past, seed=args.seed)
        makers = decide.session_makers(str(args.original), str(args.optimized), f, threads=args.threads)
        v = decide.compare(*makers, budget_ms=args.round_ms, min_speedup=min_speedup())
        entry = {k: x for k, x in v.to_dict().items() if k not in ("aa_ms", "group")}
        if entry.get("original_ms"):
            entry["original_tokens_per_s"] = 1000.0 / float(np.median(entry["original_ms"]))
        if entry.get("candidate_ms"):
            entry["optimized_tokens_per_s"] = 1000.0 / float(np.median(entry["candidate_ms"]))
        rec["timing"][graph] = entry
        print(f"{graph}: {v.speedup:.3f}x, 90% CI {v.speedup_ci}, A/A {v.aa_ratio}", flush=True)
    rec.update(load_avg_after=os.getloadavg(), finished_at=timestamp(), machine=machine_info(), versions=versions())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(rec, indent=1, default=str) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(rec))
    print(markdown(rec))
    return 0


def markdown(rec: dict[str, Any]) -> str:
    """The result as a short Markdown table."""
    opt, tm = rec.get("optimize", {}), rec.get("optimize_time", {})
    lines = [f"# graphsub optimize on a {rec['weights_bytes'] / 1e9:.2f} GB decoder", "",
             f"- decision: {opt.get('decision') or opt.get('error')}",
             f"- time to result: {tm.get('wall_s', float('nan')):.0f} s (budget {opt.get('time_budget_s')} s); peak "
             f"RSS {tm.get('max_rss_mb', float('nan')):.0f} MB (`/usr/bin/time`), {opt.get('peak_rss_mb')} MB "
             "(graphsub's own)",
             f"- greedy ids over the run's tokens identical: {rec['tokens_match']}",
             f"- fused kernels after ORT: original {rec['fused_kernels']['original']}, output "
             f"{rec['fused_kernels']['optimized']}",
             f"- load average before {rec['load_avg_before']}, after {rec['load_avg_after']}", "",
             f"| graph @{rec['threads']}t | original tok/s | output tok/s | speedup | 90% CI | A/A | faster |",
             "|---|---|---|---|---|---|---|"]
    for graph, e in rec["timing"].items():
        ci = e.get("speedup_ci") or [None, None]
        lines.append(f"| {graph} | {e.get('original_tokens_per_s', 0):.2f} | {e.get('optimized_tokens_per_s', 0):.2f} "
                     f"| {e.get('speedup') or 0:.3f}x | {ci[0] or 0:.3f}-{ci[1] or 0:.3f} "
                     f"| {e.get('aa_ratio') or 0:.3f} | {e.get('faster')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
