"""Export a BERT-style text encoder to ONNX the way most users do, for ``make demo``.

A Hugging Face ``BertModel`` built from a configuration (random weights: nothing is downloaded), exported with
``torch.onnx.export`` and dynamic batch and sequence axes, then checked in onnxruntime against PyTorch. ``make demo``
then runs ``graphsub optimize`` on the file, fixing the symbolic axes to the shapes it will be served at.

    python examples/export_encoder.py out/encoder.onnx
"""

from __future__ import annotations

import sys

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


def main(path: str) -> None:
    torch.manual_seed(0)
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    model = Encoder(BertModel(config)).eval()
    ids = torch.randint(0, config.vocab_size, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), path, dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                        "attention_mask": {0: "batch", 1: "sequence"},
                                        "last_hidden_state": {0: "batch", 1: "sequence"}})
        want = model(ids, mask).numpy()
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    err = float(np.abs(got - want).max())
    if err > 1e-3:
        raise SystemExit(f"the exported model differs from PyTorch (max abs diff {err:.3g})")
    print(f"exported BertModel ({config.num_hidden_layers} layers, hidden {config.hidden_size}) to {path}; "
          f"onnxruntime matches PyTorch (max abs diff {err:.2g})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "encoder.onnx")
