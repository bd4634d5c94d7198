"""Export a BERT-style text encoder to ONNX the way most users do, for ``make demo``.

A Hugging Face ``BertModel`` built from a configuration (random weights: nothing is downloaded), exported with
``torch.onnx.export``'s defaults (the TorchScript exporter, shapes fixed at the example input's: batch 1, 128
tokens, as for a fixed-shape serving endpoint), then checked in onnxruntime against PyTorch. ``make demo`` then runs
``graphsub optimize`` on the file.

    python examples/export_encoder.py out/encoder.onnx            # static shapes (torch.onnx.export's default)
    python examples/export_encoder.py out/encoder.onnx --dynamic  # symbolic batch and sequence axes

With ``--dynamic``, pass ``--input-shape input_ids=1x128 --input-shape attention_mask=1x128`` to ``graphsub
optimize`` to fix the axes to the served shapes. On such a file ONNX Runtime's shape inference already stops its
SkipLayerNormalization fusion (the one that slows post-LayerNorm encoders on CPU), so graphsub's margin is smaller
there: 1.08x at 1 thread, 1.12x at 2 (``experiments/results/demo_encoder_ab.json``).
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
import torch
from transformers import BertConfig, BertModel

SEQ = 128


class Encoder(torch.nn.Module):
    """What a serving export usually wraps: token ids and mask in, the last hidden state out."""

    def __init__(self, bert: BertModel) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def main(path: str, dynamic: bool = False) -> None:
    torch.manual_seed(0)
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    model = Encoder(BertModel(config)).eval()
    with torch.no_grad():  # a trained model's statistics: Hugging Face's init leaves biases at 0 and LayerNorm
        for param in model.parameters():  # scales at 1, which a rewriter could exploit only on a fresh model
            param.add_(0.02 * torch.randn_like(param))
    ids = torch.randint(0, config.vocab_size, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
            "last_hidden_state": {0: "batch", 1: "sequence"}} if dynamic else None
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), path, dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_axes=axes)
        want = model(ids, mask).numpy()
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    err = float(np.abs(got - want).max())
    if err > 1e-3:
        raise SystemExit(f"the exported model differs from PyTorch (max abs diff {err:.3g})")
    shapes = "symbolic batch and sequence" if dynamic else f"input shapes 1x{SEQ}"
    print(f"exported BertModel ({config.num_hidden_layers} layers, hidden {config.hidden_size}, {shapes}) to {path}; "
          f"onnxruntime matches PyTorch (max abs diff {err:.2g})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Export a random-weight BERT encoder to ONNX (make demo's model).")
    parser.add_argument("path", nargs="?", default="encoder.onnx")
    parser.add_argument("--dynamic", action="store_true", help="symbolic batch and sequence axes")
    args = parser.parse_args()
    main(args.path, args.dynamic)
