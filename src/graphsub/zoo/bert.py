"""The BERT benchmark of TASO/OCGGS (``examples/bert.py``): a stack of self-attention layers.

Both peers end each layer with ``matmul(input, linear)`` -- the layer *input*, not the
attention output -- so the whole attention branch is dead code in their graph (a bug, by
all appearances).  TASO keeps it alive because every unconsumed tensor is a graph output.

* ``variant="faithful"`` (default) reproduces that graph: each layer's attention result is
  an extra graph output (``attn0`` .. ``attn7``) so the op count stays 113, matching the
  peers' tables.
* ``variant="corrected"`` is real scaled dot-product attention: the attention result feeds the
  final linear layer, keys are transposed per head (``perm (1, 2, 0)``, so ``logits = q @ k^T``),
  logits are scaled by ``1/sqrt(64)`` (``mul`` by a constant weight ``l{i}_scale`` that carries
  its data) and a softmax turns them into weights.  16 ops per layer, 129 in all, one output.

The faithful variant keeps the peers' other simplifications: no softmax or scaling, and the
key transposed with perm ``(1, 0, 2)`` like the query (``logits = q @ k``; the shapes agree
because the sequence length equals the head size, 64).  Without the softmax the corrected
graph would be cubic in its input per layer and overflow float32 with random weights from
about 4 layers on; without the scaling the softmax saturates and the model becomes chaotic in
float32 (rounding differences of 1e-7 grow to O(1) over 8 layers), which would make numeric
equivalence checks of rewritten models meaningless.
"""

from __future__ import annotations

import numpy as np

from graphsub.ir.builder import Value
from graphsub.ir.graph import Graph
from graphsub.zoo._net import Net

SEQ = 64
HIDDEN = 1024
HEADS = 16
VARIANTS = ("faithful", "corrected")


def _attention(net: Net, x: Value, p: str, corrected: bool) -> tuple[Value, Value]:
    """One layer (14 ops: 6 matmul, 4 reshape, 4 transpose; corrected: + mul, softmax).
    Returns (layer output, attention result)."""
    d = x.dim(1)
    head = d // HEADS
    qkv = []
    for n in ("q", "k", "v"):
        w = net.weight(f"{p}_w{n}", (d, d))
        t = net.op("matmul", x, w)
        t = net.op("reshape", t, shape=(SEQ, HEADS, head))
        perm = (1, 2, 0) if corrected and n == "k" else (1, 0, 2)
        qkv.append(net.op("transpose", t, perm=perm))
    q, k, v = qkv
    logits = net.op("matmul", q, k)
    if corrected:
        scale = net.b.weight(f"{p}_scale", data=np.asarray(1.0 / np.sqrt(head), dtype=np.float32))
        logits = net.op("softmax", net.op("mul", logits, scale), axis=-1)
    out = net.op("matmul", logits, v)
    out = net.op("transpose", out, perm=(1, 0, 2))
    out = net.op("reshape", out, shape=(SEQ, d))
    wo = net.weight(f"{p}_wo", (d, d))
    y = net.op("matmul", out if corrected else x, wo)
    return y, out


def bert(variant: str = "faithful", layers: int = 8) -> Graph:
    """BERT-style attention stack from TASO/OCGGS ``examples/bert.py`` (Table 2: 8 blocks,
    113 ops).

    * Input ``input`` (64, 1024) (sequence 64, hidden 1024, 16 heads of 64), passed through
      a ReLU as in the OCGGS script; output ``output`` (64, 1024).
    * ``14 * layers + 1`` ops: 6 matmul, 4 reshape, 4 transpose per layer, plus the ReLU
      (113 = 48 matmul + 32 reshape + 32 transpose + 1 relu); the corrected variant adds a
      scaling mul and a softmax per layer (129).
    * ``variant``: ``"faithful"`` (the peers' graph, attention results as extra outputs
      ``attn{i}`` (64, 1024)) or ``"corrected"`` (attention feeds the linear layer); see
      the module docstring.  The corrected graph is named ``bert_corrected``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"bert: variant must be one of {list(VARIANTS)}, got {variant!r}")
    if layers < 1:
        raise ValueError(f"bert: layers must be >= 1, got {layers}")
    corrected = variant == "corrected"
    net = Net("bert_corrected" if corrected else "bert")
    t = net.op("relu", net.input("input", (SEQ, HIDDEN)))
    dead: dict[str, Value] = {}
    for i in range(layers):
        t, attn = _attention(net, t, f"l{i}", corrected)
        dead[f"attn{i}"] = attn
    if corrected:
        return net.finish(t)
    return net.finish_many({"output": t, **dead})


__all__ = ["VARIANTS", "bert"]
