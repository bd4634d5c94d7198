"""Re-measure the post-enumeration stages of the n=3 generation (confirm, prune, emit) with the
current code, from a checkpoint of the enumeration shards (``experiments/rules/rulegen.py --checkpoint DIR``).

    .venv/bin/python tools/dev/rulegen_remeasure.py --checkpoint /tmp/rulegen-ckpt-n3

Writes ``--out`` (default ``rulegen_n3_remeasure.json`` in the current directory): stage counts, seconds and the
peak RSS of this process (the enumeration's own wall time and memory are in ``experiments/results/rulegen.json``).
A development check after changing those stages, not an experiment of ``experiments/``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from graphsub.rules.generate.enumerate import EnumConfig
from graphsub.rules.generate.pipeline import generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("rulegen_n3_remeasure.json"), help="the results file (JSON)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    gen = generate(EnumConfig(max_ops=3), num_shards=args.shards, executor="process", workers=args.workers,
                   checkpoint=args.checkpoint)
    row = {"max_ops": 3, "counts": gen.counts, "seconds": {k: round(v, 2) for k, v in gen.seconds.items()},
           "wall_seconds": round(time.perf_counter() - t0, 2),
           "peak_rss_self_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "note": "enumeration shards loaded from the checkpoint; confirm/prune/emit run with the current code"}
    args.out.write_text(json.dumps(row, indent=1))
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
