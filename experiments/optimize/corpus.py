"""Does ``graphsub optimize`` accept every model onnxruntime runs and write a drop-in replacement? Every suite model
and every model of the corpus of valid-but-unusual exports (``tests/corpus_models.py``).

Each model is optimized by ``graphsub optimize MODEL -o OUT --peers none --budget 20 --json`` in a fresh process (as a
user runs it, real timing), and what it writes is checked as ``tests/optimize/test_corpus.py`` checks it: onnxruntime
loads it; the inputs a caller feeds and the outputs are the same (names in order, element types, declared dims of the
inputs, rank and named symbolic dims of the outputs); ``metadata_props``, ``doc_string``, ``model_version`` and
``domain`` are kept (``interface_ok``); and onnxruntime (default optimizations, as users run it) computes the same
outputs on random inputs (``equivalent``: two draws; a suite model's inputs from its manifest specs, a corpus model's
at two sizes of its symbolic dims; rtol 1e-3, atol 1e-4, float16 ten times looser).

Per model: ``id``, ``source`` (suite / corpus), ``exit_code``, ``written``, ``kept_original`` / ``chosen`` (the
candidate written), ``interface_ok``, ``equivalent``, ``dropin`` (both), the first ``problems``, ``seconds`` (the
optimize process) and, on failure, its ``error``. Writes ``experiments/results/corpus.json``.

It times candidates (``optimize`` decides by measured latency), so run it alone on the machine; the whole suite takes
about half an hour (58 models, ~25-30 s each with the start-up and the checks):

  .venv/bin/python experiments/optimize/corpus.py
  .venv/bin/python experiments/optimize/corpus.py --models gru.ts.b1,mha_block.ts.b1 --no-corpus
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parents[2]  # the repository: experiments/optimize/ -> ../..
# the corpus and its checks are shared with tests/optimize/test_corpus.py: tests/corpus_models.py
sys.path.insert(0, str(ROOT / "tests"))
import corpus_models as cm  # noqa: E402

OUT = ROOT / "experiments" / "results" / "corpus.json"
SEEDS = (0, 1)


def optimize(model: Path, out: Path, budget: float, keep_slower: bool) -> dict[str, Any]:
    """``graphsub optimize`` in a fresh process: its exit code, wall time and JSON answer."""
    cmd = [sys.executable, "-m", "graphsub", "optimize", str(model), "-o", str(out), "--peers", "none", "--budget",
           f"{budget:g}", "--json", *(["--keep-slower"] if keep_slower else [])]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    seconds = round(time.perf_counter() - t, 1)
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        doc = {"error": (r.stderr or r.stdout)[-800:]}
    return {"exit_code": r.returncode, "seconds": seconds, "doc": doc}


def check(original: Path, out: Path, run: dict[str, Any], draws: Any) -> dict[str, Any]:
    """The record of one model: what the run did and the drop-in checks of what it wrote."""
    doc = run["doc"]
    rec: dict[str, Any] = {"exit_code": run["exit_code"], "seconds": run["seconds"], "written": out.is_file(),
                           "kept_original": doc.get("kept_original"), "chosen": doc.get("chosen"),
                           "decision": doc.get("decision"), "interface_ok": None, "equivalent": None, "dropin": False,
                           "problems": []}
    if "error" in doc:
        rec["error"] = str(doc["error"])[-800:]
    if run["exit_code"] != 0 or not out.is_file():
        return rec
    a = onnx.load(str(original), load_external_data=False)
    b = onnx.load(str(out), load_external_data=False)
    iface = cm.interface_problems(a, b)
    outs = cm.compare_outputs(str(original), str(out), draws(a))
    rec.update(interface_ok=not iface, equivalent=not outs, dropin=not iface and not outs, problems=(iface + outs)[:5])
    return rec


def suite_models(suite_dir: Path | None, ids: list[str] | None) -> list[tuple[str, Path, list[dict[str, Any]]]]:
    """(id, file, input specs) of the suite's models (all, or ``ids``)."""
    from graphsub.bench.suite.catalog import load_suite

    models = {m.id: m for m in load_suite(suite_dir)}
    unknown = sorted(set(ids or ()) - set(models))
    if unknown:
        raise SystemExit(f"not in the suite manifest: {', '.join(unknown)}")
    return [(i, models[i].path, list(models[i].inputs)) for i in (ids or sorted(models))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated suite ids (default: every suite model)")
    ap.add_argument("--no-suite", action="store_true", help="the corpus only")
    ap.add_argument("--no-corpus", action="store_true", help="the suite only")
    ap.add_argument("--suite-dir", type=Path, default=None,
                    help="default: $GRAPHSUB_SUITE_DIR or ~/.cache/graphsub/suite")
    ap.add_argument("--budget", type=float, default=20.0, help="optimize's --budget (seconds)")
    ap.add_argument("--keep-slower", action="store_true", help="optimize's --keep-slower: write the fastest verified "
                    "candidate even when it is not faster, so that the checks see rewritten models")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from graphsub.bench.suite.measure import make_feeds

    t0 = time.time()
    load = [os.getloadavg()[0]]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="graphsub-corpus-") as tmp:
        jobs: list[tuple[str, str, Path, Any]] = []
        if not args.no_suite:
            for mid, path, specs in suite_models(args.suite_dir, args.models.split(",") if args.models else None):
                jobs.append(("suite", mid, path, lambda m, specs=specs: [make_feeds(specs, s) for s in SEEDS]))
        if not args.no_corpus:
            for name, case in cm.CASES.items():
                path = Path(tmp) / f"{name}.onnx"
                onnx.save(case.build(), str(path))
                jobs.append(("corpus", name, path, lambda m, case=case: [
                    cm.feeds(case, m, sizes, s) for sizes in case.sizes for s in SEEDS]))
        for source, mid, path, draws in jobs:
            out = Path(tmp) / f"{mid}.out.onnx"
            run = optimize(path, out, args.budget, args.keep_slower)
            rec = {"id": mid, "source": source, **check(path, out, run, draws)}
            rows.append(rec)
            load.append(os.getloadavg()[0])
            print(json.dumps({k: rec[k] for k in ("id", "exit_code", "kept_original", "chosen", "dropin", "seconds")}),
                  flush=True)
            for f in Path(tmp).glob(f"{mid}.out.onnx*"):
                f.unlink()
    summary = {"models": len(rows), "exit_0": sum(r["exit_code"] == 0 for r in rows),
               "dropin": sum(bool(r["dropin"]) for r in rows),
               "optimized": sum(r["exit_code"] == 0 and r["kept_original"] is False for r in rows),
               "failures": {r["id"]: r.get("error") or r["problems"] for r in rows if not r["dropin"]}}
    doc = {"what": __doc__.split("\n\n")[0], "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)), "minutes": round((time.time() - t0) / 60, 1),
           "machine": platform.platform(), "cpus": os.cpu_count(), "budget_s": args.budget,
           "keep_slower": args.keep_slower,
           "load_avg_1min": {"min": min(load), "max": max(load)}, "summary": summary, "models": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
