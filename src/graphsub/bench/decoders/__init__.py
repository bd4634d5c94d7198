"""Decoder LLMs as users run them: token by token, with a key/value cache.  A small catalog of causal LMs built from
configs (Llama with grouped-query attention, Qwen2 with biases on the query/key/value projections, GPT-2; random
weights from a fixed seed, nothing downloaded), each exported to *one* ONNX graph with the cache as inputs and
outputs -- the interface ONNX Runtime GenAI runs -- checked against the PyTorch model at several sizes, and a greedy
generation loop over such a file.

**The interface** (ONNX Runtime GenAI's names, its model builder's dimension names)::

    input_ids                      int64  [batch_size, sequence_length]
    attention_mask                 int64  [batch_size, total_sequence_length]
    position_ids                   int64  [batch_size, sequence_length]      (all three families take it)
    past_key_values.{i}.key/value  float  [batch_size, kv_heads, past_sequence_length, head_dim]
    logits                         float  [batch_size, sequence_length, vocab]
    present.{i}.key/value          float  [batch_size, kv_heads, total_sequence_length, head_dim]

with ``total_sequence_length = past_sequence_length + sequence_length``.  The same graph serves the prefill (past
length 0: empty past tensors) and every decode step (sequence length 1, the presents fed back as the pasts).  Both
exporters see :class:`FlatCache`, which takes the pasts as flat tensors, builds transformers' ``DynamicCache`` from
them and returns the presents flat:

* ``torchscript``: ``torch.onnx.export(..., dynamo=False, opset_version=17, dynamic_axes=...)``, named axes;
* ``dynamo``: ``torch.onnx.export(..., dynamo=True, dynamic_shapes=...)`` with named ``torch.export.Dim`` s for the
  batch, sequence and past lengths (the mask's length is a free ``Dim.DYNAMIC``: torch.export derives the presents'
  as ``past_sequence_length + sequence_length``), weights inline -- or, above :data:`EXTERNAL_BYTES` (the ``1b``
  size's 4.4 GB), in ``<file>.data`` beside it.

Both trace at (batch, sequence, past) = :data:`TRACE_SHAPE`; the graph inputs' and outputs' dimensions are then named
as above (:func:`name_dims`; an exporter that fixed one of them fails the export).

**The check** (:func:`verify`): onnxruntime (ORT_ENABLE_ALL) against the PyTorch model at (batch, sequence, past) =
:data:`CHECK_SHAPES`, random pasts (normal(0, 1)) and a mask of ones, plus the (2, 7, 33) case with batch row 2
left-padded (its first :data:`PAD` positions masked, its positions counted from its first real token, as ``generate``
does): logits and every present, ``max|ort - torch| <= ATOL + RTOL * max|torch|`` per output
(:mod:`graphsub.bench.suite.export`'s tolerance).  A failed export or check leaves no file; its
:class:`DecoderExport` records the stage and a one-line reason.

The modules: :mod:`.model` (the catalog, :class:`FlatCache`, inputs), :mod:`.export` (both exporters, the
dimension names, the check), :mod:`.generate` (the greedy loops).  Importing the package imports torch and onnx;
transformers only when a model is built.

>>> DECODERS["llama"].config("tiny")["num_key_value_heads"], DECODERS["gpt2"].source
(2, 'transformers.GPT2LMHeadModel')
>>> Layout(layers=1, kv_heads=2, head_dim=8, vocab=16).inputs
('input_ids', 'attention_mask', 'position_ids', 'past_key_values.0.key', 'past_key_values.0.value')
"""

from graphsub.bench.decoders.export import (
    CHECK_SHAPES,
    DECODE_PASTS,
    EXPORTERS,
    EXTERNAL_BYTES,
    MANIFEST,
    Case,
    DecoderExport,
    build_decoders,
    check_shapes,
    export_decoder,
    file_name,
    name_dims,
    verify,
)
from graphsub.bench.decoders.generate import Generation, greedy_generate, torch_greedy
from graphsub.bench.decoders.model import (
    BATCH,
    DECODERS,
    PAST,
    SEQ,
    SIZES,
    TOTAL,
    Decoder,
    FlatCache,
    Layout,
    build_decoder,
    causal_lm,
    feeds,
    layout_of,
    position_ids,
    torch_run,
)

__all__ = [
    "BATCH", "CHECK_SHAPES", "DECODERS", "DECODE_PASTS", "EXPORTERS", "EXTERNAL_BYTES", "MANIFEST", "PAST", "SEQ",
    "SIZES", "TOTAL",
    "Case", "Decoder", "DecoderExport", "FlatCache", "Generation", "Layout", "build_decoder", "build_decoders",
    "causal_lm", "check_shapes", "export_decoder", "feeds", "file_name", "greedy_generate", "layout_of", "name_dims",
    "position_ids", "torch_greedy", "torch_run", "verify",
]
