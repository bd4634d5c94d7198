"""The suite's transformer and recurrent modules, built the way users build them: Hugging Face models from a config
(random weights, nothing downloaded) and torch's own ``nn.TransformerEncoder``, ``nn.MultiheadAttention``,
``nn.LSTM`` and ``nn.GRU``.  The CNNs are in :mod:`.tv_models`.

Every factory takes only JSON-able keyword arguments (the catalog records them as the architecture's config) and
returns a module in eval mode whose ``forward`` takes the catalog's inputs positionally, in the catalog's order, and
returns a tensor or a tuple of tensors.  Weights come from torch's global generator: seed it first
(:func:`graphsub.bench.suite.export.build_module` does).  ``transformers`` is imported only by the Hugging Face
factories.

A Hugging Face model is wrapped in :class:`Positional` (positional inputs -> the model's keyword arguments; its
``ModelOutput`` -> the tuple of its tensors, as the exporters flatten it) so that both exporters see the same call;
the wrapper records the attention implementation the model chose (``attn_implementation``: transformers' default,
``sdpa`` for all of them today).

>>> import torch
>>> _ = torch.manual_seed(0)
>>> m = lstm(input_size=8, hidden_size=16, num_layers=1)
>>> tuple(m(torch.zeros(2, 5, 8)).shape)
(2, 5, 16)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


class Positional(nn.Module):
    """A Hugging Face model called with positional inputs (``names`` in order), returning its output tensors."""

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.names = tuple(names)
        self.attn_implementation = str(getattr(model.config, "_attn_implementation", None))

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(**dict(zip(self.names, inputs, strict=True)))
        return tuple(v for v in out.to_tuple() if isinstance(v, torch.Tensor))


def _hf(model: nn.Module, names: Sequence[str]) -> Positional:
    return Positional(model, names).eval()


# -------------------------------------------------------------------------------------------------- Hugging Face
def bert(inputs: Sequence[str], **config: Any) -> Positional:
    """``BertModel(BertConfig(**config))`` (with its pooler)."""
    from transformers import BertConfig, BertModel

    return _hf(BertModel(BertConfig(**config)), inputs)


def distilbert(inputs: Sequence[str], **config: Any) -> Positional:
    """``DistilBertModel(DistilBertConfig(**config))``."""
    from transformers import DistilBertConfig, DistilBertModel

    return _hf(DistilBertModel(DistilBertConfig(**config)), inputs)


def gpt2(inputs: Sequence[str], **config: Any) -> Positional:
    """``GPT2Model(GPT2Config(**config))``: the base model (no LM head); ``use_cache=False`` in the config keeps the
    key/value cache out of the outputs (one forward pass over the whole sequence)."""
    from transformers import GPT2Config, GPT2Model

    return _hf(GPT2Model(GPT2Config(**config)), inputs)


def vit(inputs: Sequence[str], **config: Any) -> Positional:
    """``ViTModel(ViTConfig(**config))`` (with its pooler)."""
    from transformers import ViTConfig, ViTModel

    return _hf(ViTModel(ViTConfig(**config)), inputs)


def t5_encoder(inputs: Sequence[str], **config: Any) -> Positional:
    """``T5EncoderModel(T5Config(**config))``."""
    from transformers import T5Config, T5EncoderModel

    return _hf(T5EncoderModel(T5Config(**config)), inputs)


def whisper_encoder(inputs: Sequence[str], **config: Any) -> Positional:
    """``WhisperEncoder(WhisperConfig(**config))``: the audio encoder of ``WhisperModel`` (its ``.encoder``); the
    input has ``2 * max_source_positions`` frames."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    return _hf(WhisperEncoder(WhisperConfig(**config)), inputs)


# ------------------------------------------------------------------------------------------------------ torch.nn
def transformer_encoder(d_model: int, nhead: int, dim_feedforward: int, num_layers: int) -> nn.Module:
    """``nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, batch_first=True),
    num_layers)``: post-LayerNorm, ReLU, dropout 0.1 (identity in eval).

    ``nn.TransformerEncoder`` deep-copies one layer, so at initialisation every layer holds the same weights (and
    the TorchScript exporter stores them once); each copy is re-initialised here so that the layers differ, as in a
    trained model."""
    layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers)
    for copy in encoder.layers:
        for m in copy.modules():  # Linear (out_proj too) and LayerNorm first, then attention (as at construction)
            if isinstance(m, nn.Linear | nn.LayerNorm):
                m.reset_parameters()
        copy.self_attn._reset_parameters()
    return encoder.eval()


class MHABlock(nn.Module):
    """A pre-norm transformer block around ``nn.MultiheadAttention`` as users write it: ``attn(h, h, h)`` with the
    default ``need_weights=True`` (the averaged weights are dropped), a GELU MLP, two residuals."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, dim_feedforward), nn.GELU(), nn.Linear(dim_feedforward, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        attn_out, _ = self.attn(h, h, h)
        x = x + attn_out
        return x + self.mlp(self.ln2(x))


def mha_block(d_model: int, nhead: int, dim_feedforward: int) -> nn.Module:
    """:class:`MHABlock`."""
    return MHABlock(d_model, nhead, dim_feedforward).eval()


class _Recurrent(nn.Module):
    """``out, _ = rnn(x); return out`` (batch-first, zero initial state)."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return out


def lstm(input_size: int, hidden_size: int, num_layers: int) -> nn.Module:
    """``nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)``, its output sequence."""
    return _Recurrent(nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)).eval()


def gru(input_size: int, hidden_size: int, num_layers: int) -> nn.Module:
    """``nn.GRU(input_size, hidden_size, num_layers, batch_first=True)``, its output sequence."""
    return _Recurrent(nn.GRU(input_size, hidden_size, num_layers, batch_first=True)).eval()


__all__ = [
    "MHABlock", "Positional", "bert", "distilbert", "gpt2", "gru", "lstm", "mha_block", "t5_encoder",
    "transformer_encoder", "vit", "whisper_encoder",
]
