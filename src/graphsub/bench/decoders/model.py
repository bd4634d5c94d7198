"""The decoder catalog and the model the exporters see: :data:`DECODERS` (configs per size), :class:`FlatCache`
(the pasts as flat tensors in, the presents flat out, transformers' ``DynamicCache`` in between) and the inputs of one
call (:func:`feeds`).  See :mod:`graphsub.bench.decoders` for the interface.

>>> Layout(layers=2, kv_heads=2, head_dim=8, vocab=16).presents[-1]
'present.1.value'
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from graphsub.bench.suite.export import build_module

BATCH, SEQ, PAST, TOTAL = "batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"
SIZES = ("tiny", "small", "100m", "1b")
_SELF = "graphsub.bench.decoders.model"


# ----------------------------------------------------------------------------------------------- the catalog
@dataclass(frozen=True)
class Decoder:
    """One decoder family: ``transformers.<model_cls>(transformers.<config_cls>(**config))`` at each size of
    :data:`SIZES` (``sizes``: the config per size)."""

    name: str
    config_cls: str
    model_cls: str
    sizes: Mapping[str, Mapping[str, Any]] = field(hash=False)
    seed: int = 0

    @property
    def source(self) -> str:
        return f"transformers.{self.model_cls}"

    def config(self, size: str) -> dict[str, Any]:
        """The model config at ``size`` (KeyError for an unknown size)."""
        if size not in self.sizes:
            raise KeyError(f"unknown size {size!r} for {self.name}; known: {', '.join(self.sizes)}")
        return dict(self.sizes[size])


def _rotary(hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int, positions: int
            ) -> dict[str, Any]:
    return {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "intermediate_size": ffn, "vocab_size": vocab,
            "max_position_embeddings": positions}


def _gpt2(hidden: int, layers: int, heads: int, ffn: int, vocab: int, positions: int) -> dict[str, Any]:
    """GPT-2's config; its begin/end-of-text token is the vocabulary's last (50256 in GPT-2's own)."""
    return {"n_embd": hidden, "n_layer": layers, "n_head": heads, "n_inner": ffn, "vocab_size": vocab,
            "n_positions": positions, "bos_token_id": vocab - 1, "eos_token_id": vocab - 1}


#: The decoder families.  ``tiny``: 2 layers, hidden 64, 4 heads (2 key/value heads), vocabulary 256, for the tests;
#: ``small``: the suite's size (4 layers, hidden 256, 4 heads, 2 key/value heads, FFN 1024; Qwen2's vocabulary cut to
#: 32000 as in the suite), 2048 positions (a decode step on a 1,024-token past fits); ``100m``: the benchmark's
#: model of at least 100 M parameters (GPT-2 small's shape, 124 M; Llama/Qwen2 12 layers, hidden 768, 12 heads, 4
#: key/value heads, FFN 2048, vocabulary 32000: 124 M); ``1b``: the Llama-style model of about 1 B parameters (16
#: layers, hidden 2048, 32 heads, 8 key/value heads, FFN 8192 as Llama 3.2 1B, vocabulary 32000: 1.10 B, 4.4 GB of
#: float32 weights, exported with external data).
_LLAMA_SIZES = {"tiny": _rotary(64, 2, 4, 2, 128, 256, 512), "small": _rotary(256, 4, 4, 2, 1024, 32000, 2048),
                "100m": _rotary(768, 12, 12, 4, 2048, 32000, 2048)}
DECODERS: dict[str, Decoder] = {d.name: d for d in (
    Decoder("llama", "LlamaConfig", "LlamaForCausalLM",
            {**_LLAMA_SIZES, "1b": _rotary(2048, 16, 32, 8, 8192, 32000, 2048)}),
    Decoder("qwen2", "Qwen2Config", "Qwen2ForCausalLM", _LLAMA_SIZES),
    Decoder("gpt2", "GPT2Config", "GPT2LMHeadModel",
            {"tiny": _gpt2(64, 2, 4, 128, 256, 512), "small": _gpt2(256, 4, 4, 1024, 50257, 2048),
             "100m": _gpt2(768, 12, 12, 3072, 50257, 2048)}),
)}


def causal_lm(config_cls: str, model_cls: str, **config: Any) -> nn.Module:
    """``transformers.<model_cls>(transformers.<config_cls>(**config))`` in eval mode (the factory
    :func:`build_decoder` seeds and calls)."""
    import transformers

    return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config)).eval()


# ------------------------------------------------------------------------------------------------ the wrapper
@dataclass(frozen=True)
class Layout:
    """The cache's shape and the interface's names: ``layers`` key/value pairs of ``[batch, kv_heads, length,
    head_dim]``."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    takes_positions: bool = True

    @property
    def pasts(self) -> tuple[str, ...]:
        return tuple(f"past_key_values.{i}.{kv}" for i in range(self.layers) for kv in ("key", "value"))

    @property
    def presents(self) -> tuple[str, ...]:
        return tuple(f"present.{i}.{kv}" for i in range(self.layers) for kv in ("key", "value"))

    @property
    def inputs(self) -> tuple[str, ...]:
        return ("input_ids", "attention_mask", *(("position_ids",) if self.takes_positions else ()), *self.pasts)

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("logits", *self.presents)


def layout_of(model: nn.Module) -> Layout:
    """The cache layout of a transformers causal LM (from its config)."""
    c: Any = model.config
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    takes = "position_ids" in inspect.signature(model.forward).parameters
    return Layout(c.num_hidden_layers, kv, head_dim, c.vocab_size, takes)


class FlatCache(nn.Module):
    """A transformers causal LM called with the cache as flat tensors (:class:`Layout`'s inputs, in order): the
    pasts become a ``DynamicCache``; returns the logits and the presents, flat."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.layout = layout_of(model)
        config: Any = model.config
        self.attn_implementation = str(getattr(config, "_attn_implementation", None))
        self.positions = int(config.max_position_embeddings)  # GPT-2's n_positions, through its attribute map

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *rest: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        extra = {"position_ids": rest[0]} if self.layout.takes_positions else {}
        pasts = rest[1:] if self.layout.takes_positions else rest
        cache = DynamicCache([(pasts[2 * i], pasts[2 * i + 1]) for i in range(self.layout.layers)])
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=cache, use_cache=True, **extra)
        return (out.logits, *(t for layer in out.cache.layers for t in (layer.keys, layer.values)))


def build_decoder(name: str, size: str = "tiny", seed: int | None = None) -> FlatCache:
    """The seeded decoder ``name`` at ``size`` (trained-like biases and norms, as the suite's modules:
    :func:`graphsub.bench.suite.export.build_module`), wrapped in :class:`FlatCache`, in eval mode."""
    d = DECODERS[name]
    config = {"config_cls": d.config_cls, "model_cls": d.model_cls, **d.config(size)}
    model = build_module(f"{_SELF}:causal_lm", config, d.seed if seed is None else seed)
    return FlatCache(model).eval()


# -------------------------------------------------------------------------------------------------- inputs
def position_ids(mask: np.ndarray, sequence: int) -> np.ndarray:
    """The positions of the last ``sequence`` tokens under ``mask`` (``[batch, total]``), as ``generate`` computes
    them: each row counts from its first unmasked token; masked positions get 1.

    >>> position_ids(np.array([[0, 0, 1, 1], [1, 1, 1, 1]]), 2).tolist()
    [[0, 1], [2, 3]]
    """
    pos = np.cumsum(mask, axis=-1) - 1
    pos = np.where(mask == 0, 1, pos)
    return np.ascontiguousarray(pos[:, -sequence:]).astype(np.int64)


def feeds(layout: Layout, batch: int, sequence: int, past: int, seed: int = 0, pad: int = 0
          ) -> dict[str, np.ndarray]:
    """Inputs for one call: random token ids and pasts (normal(0, 1), float32), a mask of ones whose batch row 2
    (when there is one) has its first ``pad`` positions masked, and the matching positions."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, past + sequence), dtype=np.int64)
    if batch > 1:
        mask[1, :pad] = 0
    out = {"input_ids": rng.integers(0, layout.vocab, (batch, sequence), dtype=np.int64), "attention_mask": mask}
    if layout.takes_positions:
        out["position_ids"] = position_ids(mask, sequence)
    for name in layout.pasts:
        out[name] = rng.standard_normal((batch, layout.kv_heads, past, layout.head_dim)).astype(np.float32)
    return out


def torch_run(module: FlatCache, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``module`` on ``inputs`` (in :class:`Layout` order): the logits and presents as arrays."""
    with torch.no_grad():
        out = module(*(torch.from_numpy(np.ascontiguousarray(inputs[n])) for n in module.layout.inputs))
    return [t.numpy() for t in out]


__all__ = ["BATCH", "DECODERS", "PAST", "SEQ", "SIZES", "TOTAL", "Decoder", "FlatCache", "Layout", "build_decoder",
           "causal_lm", "feeds", "layout_of", "position_ids", "torch_run"]
