"""Search with the generated rules vs OCGGS's 157 on the Table 3 models (issue 8, item 4).

    .venv/bin/graphsub bench table3 --algos greedy,taso,sampling --rules generated --costs roofline:p100 \\
        --cutoff 60 --name rules_generated
    .venv/bin/python experiments/rules/rules_compare.py

Reads ``rules_generated.jsonl`` and the ``ocggs157`` runs of ``table3.jsonl`` (same models, K=10,
roofline:p100, 60 s cut-off) and writes ``experiments/results/rules_compare.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
ALGOS = ("greedy", "taso", "sampling")


def load(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("status") == "ok" and r.get("cost") == "roofline:p100" and r.get("k") == 10:
            out[(r["model"], r["algo"])] = r
    return out


def cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "n/a"
    imp = 100.0 * (1.0 - float(r["best_cost"]) / float(r["initial_cost"]))
    t = float(r["search_time_s"])
    stop = "" if r.get("stopped_by") == "done" else "†"
    return f"{imp:.1f}% ({t:.3g} s{stop})"


def main() -> None:
    gen = load(RESULTS / "rules_generated.jsonl")
    base = load(RESULTS / "table3.jsonl")
    models = sorted({m for m, _ in gen}, key=lambda m: [k[0] for k in gen].index(m))
    rules = {m: gen[(m, a)].get("num_rules") for m, a in gen}
    lines = ["# Search with the generated rules vs `ocggs157`", "",
             "Cost reduction (best / initial) and search time, roofline:p100, K=10, 60 s cut-off († = stopped by "
             f"it). `generated`: {next(iter(rules.values()))} rules (n=3, TASO's operator set); `ocggs157`: 157.", "",
             "| model | " + " | ".join(f"{a} generated | {a} ocggs157" for a in ALGOS) + " |",
             "|---|" + "---:|" * (2 * len(ALGOS))]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(f"{cell(gen.get((m, a)))} | {cell(base.get((m, a)))}" for a in ALGOS)
                     + " |")
    lines += ["", "On the CNNs the win of `ocggs157` is OCGGS's hand-written merge of two sibling convolutions "
              "(`ocggs_merge_convs_relu`, 10 times on Inception-v3): a rule over two convolutions *and their "
              "concatenated output*, with kernel enlargement for different sizes, which lies outside what the n=3 "
              "generator enumerates (its convolutions are stride 1 / SAME of the template kernel sizes).  On "
              "BERT, NasRNN and SRU the generated set finds the matmul merges itself (e.g. `gen_1361`), and on SRU "
              "a further rule that `ocggs157` lacks.  With 4,420 rules, matching is ~30x more work per graph, so "
              "TASO and Sampling stop at the cut-off."]
    out = RESULTS / "rules_compare.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
