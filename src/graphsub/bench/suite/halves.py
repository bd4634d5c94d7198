"""The suite's two halves: a *development* half that graphsub's passes may be tuned on, and a *held-out* half that
measures how they carry over to architectures nobody tuned them on.

The rule (fixed; change it only by adding to :data:`DEVELOPMENT_ADDED` with a reason):

* the 15 architectures of the suite before the split (:data:`ORIGINAL`: bert, distilbert, gpt2, vit, t5_encoder,
  whisper_encoder, transformer_encoder, mha_block, lstm, gru, resnet50, mobilenet_v3_large, efficientnet_b0,
  convnext_tiny, regnet_y_400mf) are *development*: graphsub's hand-written passes were written and tuned while
  looking at all of them, so none of them can honestly be held out;
* the tiny architectures of the tests (:data:`TINY`, :func:`~graphsub.bench.suite.catalog.small_architectures`)
  are *development*: they check the machinery and are never measured;
* every other architecture -- each one added to the catalog from the split on (the catalog's ``ADDED``), and any
  name the catalog does not know -- is *held-out*, unless :data:`DEVELOPMENT_ADDED` lists it with the reason it
  cannot be held out any more (e.g. a pass was written after looking at it).

Why: a speedup measured on the models a pass was tuned on says little about a user's model; the held-out half is
the honest estimate.  Work on graphsub looks at development models; the held-out half is run to report, and a pass
written after looking at a held-out model moves that model to development (listed below, with the reason).

>>> half("bert"), half("opt"), half("tiny_bert")
('development', 'held-out', 'development')
>>> sorted(HALVES)
['development', 'held-out']
"""

from __future__ import annotations

from typing import Literal

Half = Literal["development", "held-out"]
HALVES: tuple[Half, ...] = ("development", "held-out")

#: the 15 architectures of the suite before the split: graphsub's passes were tuned on all of them
ORIGINAL: frozenset[str] = frozenset({
    "bert", "distilbert", "gpt2", "vit", "t5_encoder", "whisper_encoder", "transformer_encoder", "mha_block", "lstm",
    "gru", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "regnet_y_400mf",
})

#: the tiny architectures of the tests (small_architectures): machinery checks, never measured
TINY: frozenset[str] = frozenset({"tiny_encoder", "tiny_lstm", "tiny_resnet", "tiny_bert"})

#: architectures added after the split that are development anyway: (name, why it cannot be held out)
DEVELOPMENT_ADDED: tuple[tuple[str, str], ...] = (
    ("swin", "the cleanup rules (graphsub.rules.library.cleanup: no-op Pad and Slice) were written after looking at "
             "Hugging Face Swin-T's TorchScript export and its graph after ONNX Runtime (2026-11-29)"),
    ("mobilevit", "Hugging Face MobileViT's TorchScript export was converted and its op histogram read while the "
                  "cleanup rules were written (2026-11-29)"),
    ("llama", "issue 55's decoder rules (graphsub.rules.library: decoder, gqa; RMSNorm, rotary, grouped-query "
              "attention) were written while looking at Llama decoders' exports, the same blocks (2026-11-29/30)"),
    ("qwen2", "issue 55's decoder rules were written while looking at Qwen2 decoders' exports, the same blocks "
              "(2026-11-29/30)"),
)

#: every development architecture; any other name is held-out
DEVELOPMENT: frozenset[str] = ORIGINAL | TINY | frozenset(name for name, _ in DEVELOPMENT_ADDED)


def half(arch: str) -> Half:
    """The half of architecture ``arch``: ``"development"`` when :data:`DEVELOPMENT` lists it, else
    ``"held-out"``."""
    return "development" if arch in DEVELOPMENT else "held-out"


def check_half(name: str) -> Half:
    """``name`` as a half; raises ValueError for anything else (the CLI's ``--half``)."""
    if name not in HALVES:
        raise ValueError(f"unknown half {name!r}; known: {', '.join(HALVES)}")
    return "development" if name == "development" else "held-out"


__all__ = ["DEVELOPMENT", "DEVELOPMENT_ADDED", "HALVES", "ORIGINAL", "TINY", "Half", "check_half", "half"]
