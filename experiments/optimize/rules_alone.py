"""How much of graphsub's gain do its rules and searches reach alone -- no peer's output, no hand-ordered pass?

Reads a ``graphsub bench suite`` record file that has the tools ``graphsub`` (the default: peers, hand-ordered passes,
the searches), ``graphsub-own`` (``--peers none``) and ``graphsub-rules`` (``--peers none --no-spelling``: the
clean-up, the main search, equality saturation and the search priced by onnxruntime's kernels, ``search-ort``, with
the rules that re-express the passes), each output re-timed by the suite against ONNX Runtime alone in fresh session
groups with an A/A arm. Per model and thread count: each tool's speedup over ORT_ENABLE_ALL, the share of graphsub's
gain that ``graphsub-rules`` reaches (``(rules - 1) / (graphsub - 1)``, shown where graphsub's gain is at least
:data:`MIN_GAIN`; otherwise the model is counted as "no gain to share"), which candidate each graphsub tool kept, and
the rules behind the ``graphsub-rules`` win. Writes ``experiments/results/NAME.md`` next to the record file.

Produce the records first (timing: run it alone on the machine), e.g. the development half at batch 1:

  graphsub bench suite --half development --models '*.ts.b1' --peers onnxslim --alone --threads all \\
      --out experiments/results --name rules_alone_dev
  .venv/bin/python experiments/optimize/rules_alone.py experiments/results/rules_alone_dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

#: a gain smaller than this (over ORT) is within the A/A spread of this machine: no share is computed for it
MIN_GAIN = 0.03
TOOLS = ("onnxslim", "onnxsim", "graphsub", "graphsub-own", "graphsub-rules")


def _speedup(tool: dict[str, Any], threads: str) -> float | None:
    t = (tool.get("timing") or {}).get(threads) or {}
    v = t.get("verdict") or {}
    return v.get("speedup", t.get("speedup"))


def _records(path: Path) -> list[dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if "id" in rec and "tools" in rec:
                by_id[rec["id"]] = rec  # a resumed run's later record of a model wins
    return list(by_id.values())


def summarize(path: Path) -> str:
    recs = _records(path)
    threads = sorted({t for r in recs for tool in r["tools"].values() for t in (tool.get("timing") or {})})
    lines = [f"# Rules and searches alone: {path.name}", "",
             f"{len(recs)} models; each speedup is the suite's re-timing over ORT_ENABLE_ALL (fresh session groups, "
             "A/A arm); share = (graphsub-rules - 1) / (graphsub - 1) where graphsub gained at least "
             f"{MIN_GAIN:.0%}.", ""]
    loads = [r.get("timing_load_avg") for r in recs if r.get("timing_load_avg")]
    if loads:
        flat = [x for la in loads for x in (la if isinstance(la, list) else [la]) if isinstance(x, (int, float))]
        if flat:
            lines += [f"Load average while timing: {min(flat):.2f}-{max(flat):.2f}.", ""]
    for th in threads:
        present = [t for t in TOOLS if any(t in r["tools"] for r in recs)]
        lines += [f"## {th} thread(s)", "",
                  "| model | " + " | ".join(present) + " | share | graphsub kept | graphsub-rules kept | "
                  "rules behind graphsub-rules |",
                  "|---|" + "---|" * (len(present) + 4)]
        logs: dict[str, list[float]] = {t: [] for t in present}
        shares: list[float] = []
        no_gain = 0
        for r in sorted(recs, key=lambda r: r["id"]):
            tools = r["tools"]
            cells = []
            for t in present:
                s = _speedup(tools.get(t, {}), th)
                if s is not None and s > 0:
                    logs[t].append(math.log(s))
                cells.append("-" if s is None else f"{s:.3f}x")
            g, rl = _speedup(tools.get("graphsub", {}), th), _speedup(tools.get("graphsub-rules", {}), th)
            if g is None or rl is None:
                share = "-"
            elif g - 1 < MIN_GAIN:
                share, no_gain = "no gain", no_gain + 1
            else:
                shares.append((rl - 1) / (g - 1))
                share = f"{shares[-1]:.0%}"
            rules = sorted({a.split(" x")[0] for a in tools.get("graphsub-rules", {}).get("rules", [])} - {"cleanup"})
            lines.append(f"| {r['id']} | " + " | ".join(cells) + f" | {share} | "
                         f"{tools.get('graphsub', {}).get('chosen', '-')} | "
                         f"{tools.get('graphsub-rules', {}).get('chosen', '-')} | {', '.join(rules[:8]) or '-'} |")
        geo = " | ".join(f"{math.exp(sum(v) / len(v)):.3f}x" if v else "-" for v in logs.values())
        lines.append(f"| **geomean** | {geo} | | | | |")
        lines.append("")
        if shares:
            at90 = sum(s >= 0.9 for s in shares)
            median = sorted(shares)[len(shares) // 2]
            lines += [f"Share of graphsub's gain reached by graphsub-rules: median {median:.0%}, at least 90% on "
                      f"{at90} of {len(shares)} models with a gain ({no_gain} without one).", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", type=Path, help="a bench suite .jsonl with graphsub, graphsub-own and graphsub-rules")
    ap.add_argument("--out", type=Path, default=None, help="the markdown summary (default: RECORDS with .summary.md)")
    args = ap.parse_args()
    text = summarize(args.records)
    out = args.out or args.records.with_suffix(".summary.md")
    out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
