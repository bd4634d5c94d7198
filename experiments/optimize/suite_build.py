"""Build the real-model suite (``graphsub.bench.suite.catalog.build_suite``): every architecture of the catalog
exported with both PyTorch exporters at its batches, checked against its module, cached with a manifest.

    python experiments/optimize/suite_build.py        # everything, into $GRAPHSUB_SUITE_DIR or ~/.cache/...
    python experiments/optimize/suite_build.py --archs bert,resnet50 --exporters dynamo --batches 1 --out /tmp/suite

Not a timing benchmark: it prints one line per exported model and per failure, and the wall time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from graphsub.bench.suite.catalog import ARCHITECTURES, build_suite, load_failures, suite_dir


def _csv(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archs", help=f"comma-separated, default all: {','.join(ARCHITECTURES)}")
    ap.add_argument("--exporters", default="torchscript,dynamo", help="comma-separated (torchscript, dynamo)")
    ap.add_argument("--batches", help="comma-separated batch sizes (default: each architecture's own)")
    ap.add_argument("--out", type=Path, help="the suite folder (default: $GRAPHSUB_SUITE_DIR or ~/.cache/...)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    batches = [int(b) for b in _csv(args.batches) or []] or None
    out = args.out or suite_dir()
    t0 = time.perf_counter()
    models = build_suite(out, _csv(args.archs), tuple(_csv(args.exporters) or ()), batches, progress=not args.quiet)
    wall = time.perf_counter() - t0
    for m in models:
        print(f"ok      {m.id:<34} ops {m.ops:>5}  {m.size / 1e6:8.1f} MB  opset {m.opset}")
    for f in load_failures(out):
        print(f"failed  {f['id']:<34} {f['stage']}: {f['error']}")
    print(f"{len(models)} models in {out} ({wall:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
