"""Experiment drivers: what ``graphsub bench``, ``graphsub dynamic bench`` and the scripts in ``experiments/`` run.

* :mod:`.harness` -- grids of searches (algorithm x model x cost model x K x repeat), one process per run;
  :mod:`.presets` -- the seeds' grids (OCGGS Table 3, Figs. 4-5, ...); :mod:`.records` -- the resumable JSONL
  log; :mod:`.tables` -- tables and plots from it;
* :mod:`.dynamic` -- dynamic-graph reuse (the thesis' Tables 6.3-6.4): eager PyTorch vs lazy tracing, reuse,
  batching and prefetch;
* :mod:`.ir_micro`, :mod:`.matching`, :mod:`.roundtrip` -- IR, rule-matching and ONNX round-trip measurements.
"""
