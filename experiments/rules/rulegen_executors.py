"""Rule generation on each executor: wall time per stage, rule count and the digest of rules.json (issue 23).

    .venv/bin/python experiments/rules/rulegen_executors.py --max-ops 2 [--executors serial,process,ray] \\
        [--ray-address A]

Runs ``generate`` once per executor (``process``: every core; ``ray``: ``--ray-address``, else a local Ray) and
writes ``experiments/results/rulegen_executors_n<max_ops>.json``: per executor the stage seconds, the counts and the
SHA-256 of the written document, which must be the same for all. Timing: run it alone on the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import time
from pathlib import Path

from graphsub.rules.generate.enumerate import EnumConfig
from graphsub.rules.generate.pipeline import generate
from graphsub.rules.generate.templates import resolve_ops

RESULTS = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-ops", type=int, default=2)
    ap.add_argument("--executors", default="serial,process,ray")
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--ray-address", default=None)
    args = ap.parse_args()
    cfg = EnumConfig(templates=resolve_ops(["taso"]), max_ops=args.max_ops)
    rows = []
    for ex in args.executors.split(","):
        load_before = os.getloadavg()
        t0 = time.perf_counter()
        gen = generate(cfg, num_shards=args.shards, executor=ex, ray_address=args.ray_address)
        wall = time.perf_counter() - t0
        text = json.dumps(gen.doc, indent=1) + "\n"  # what `graphsub rules generate` writes
        rows.append({"executor": ex, "wall_s": wall, "seconds": gen.seconds, "counts": gen.counts,
                     "sha256": hashlib.sha256(text.encode()).hexdigest(), "load_avg_before": load_before,
                     "load_avg_after": os.getloadavg(),
                     "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "seconds"}), flush=True)
    same = len({r["sha256"] for r in rows}) == 1
    package = {}
    if args.max_ops == 3:  # the package's generated rule set is this configuration's output
        import gzip

        from graphsub.rules.library import GENERATED_JSON

        with gzip.open(GENERATED_JSON) as f:
            ref = json.loads(f.read())["substitutions"]
        package = {"same_substitutions_as_package_generated_json": gen.doc["substitutions"] == ref}
        print(package)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"rulegen_executors_n{args.max_ops}.json").write_text(json.dumps(
        {"max_ops": args.max_ops, "cpus": os.cpu_count(), "same_file": same, **package, "runs": rows}, indent=1))
    print("same file on every executor:", same)


if __name__ == "__main__":
    main()
