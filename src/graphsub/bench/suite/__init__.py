"""The real-model suite: models exported from other projects (Hugging Face, torch, torchvision structures) with both
PyTorch exporters, the peers users would otherwise run on them, and graphsub beside and after each peer, timed as
users run ONNX Runtime (``graphsub bench suite``).

* :mod:`.catalog` -- the models and how each is built (:mod:`.models`: Hugging Face and torch.nn; :mod:`.tv_models`:
  CNNs in torchvision's structure; :mod:`.models_more` and :mod:`.tv_models_more`: the architectures added since the
  split into halves) and exported (:mod:`.export`: both PyTorch exporters, checked in ONNX Runtime), cached in a
  folder the suite owns with a manifest; :mod:`.halves` -- the development half (the 15 architectures graphsub was
  tuned on) and the held-out half (every architecture added since);
* :mod:`.peers` -- each peer run as its users run it;
* :mod:`.measure` -- verification of every output, end-to-end timing in alternating rounds, and what ONNX Runtime's
  own optimizer made of each variant (ops, fused kernels);
* :mod:`.runner` -- the resumable JSONL run over models x tools x thread counts; :mod:`.select` -- which models
  (suite ids, architectures, globs, or a user's ONNX files); :mod:`.table` -- the rendered tables and plot.
"""
