"""The real-model suite: models exported from other projects (Hugging Face, torch, torchvision structures) with both
PyTorch exporters, the peers users would otherwise run on them, and graphsub beside and after each peer, timed as
users run ONNX Runtime (``graphsub bench suite``).

* :mod:`.catalog` -- the models and how each is built and exported (cached in a folder the suite owns);
* :mod:`.peers` -- each peer run as its users run it;
* :mod:`.measure` -- verification of every output, end-to-end timing in alternating rounds, and what ONNX Runtime's
  own optimizer made of each variant (ops, fused kernels);
* :mod:`.runner` -- the resumable JSONL run over models x tools x thread counts, and the rendered table.
"""
