"""The suite's second set of transformer and torch modules (the architectures of the held-out half, see
:mod:`.halves`): decoder-only LMs (Llama with grouped-query attention, Qwen2, OPT, GPT-NeoX, Phi), an
encoder-decoder (BART), windowed and conv-attention vision models (Swin, MobileViT, LeViT, SegFormer's encoder,
ConvNeXt V2), speech (Wav2Vec2), text encoders with other attentions (DeBERTa-v2, ConvBERT) and a DLRM-style
recommendation model.  The CNNs written in torchvision's structure are in :mod:`.tv_models_more`.

The contract is :mod:`.models`' (whose :class:`~graphsub.bench.suite.models.Positional` wraps the Hugging Face
models here): JSON-able keyword arguments, a module in eval mode called with the catalog's inputs positionally,
weights from torch's global generator.  They live in their own module so that adding them changes neither
:mod:`.models`' source nor the build keys of the models built from it (a key hashes the factory's source file).

>>> import torch
>>> _ = torch.manual_seed(0)
>>> m = dlrm(dense_features=4, tables=[10, 20], dim=8, bottom=[16], top=[16])
>>> tuple(m(torch.zeros(3, 4), torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1, dtype=torch.long)).shape)
(3, 1)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from graphsub.bench.suite.models import Positional

M = TypeVar("M", bound=nn.Module)


def _hf(config_cls: str, model_cls: str, inputs: Sequence[str], config: dict[str, Any]) -> Positional:
    """``transformers.<model_cls>(transformers.<config_cls>(**config))`` wrapped in :class:`Positional`.  Two keys of
    ``config`` are no model settings: ``calibrate_image`` (the image size of :func:`calibrate_batchnorms`) and
    ``batchnorm_noise`` (the scale of :func:`jitter_batchnorms`)."""
    import transformers

    config = dict(config)
    image, noise = config.pop("calibrate_image", None), config.pop("batchnorm_noise", None)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))
    wrapped = calibrate_batchnorms(Positional(model, inputs), image)
    return jitter_batchnorms(wrapped, noise) if noise else wrapped


def jitter_batchnorms(model: M, scale: float) -> M:
    """Every BatchNorm's running mean plus normal(0, ``scale``) noise and running variance times exp(normal(0,
    ``scale``)) (torch's global generator): statistics near the initial mean 0 / variance 1 but, as in a trained
    model, neither exactly 0 and 1 nor equal across layers (equal ones the TorchScript exporter stores once, behind
    Identity nodes).  For models whose calibrated statistics (:func:`calibrate_batchnorms`) blow the activations up.
    Returns ``model``."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None \
                    and m.running_var is not None:
                m.running_mean.add_(scale * torch.randn_like(m.running_mean))
                m.running_var.mul_(torch.exp(scale * torch.randn_like(m.running_var)))
    return model


def calibrate_batchnorms(model: M, image: int | None, seed: int = 0, batch: int = 8) -> M:
    """Every BatchNorm's (1d and 2d) running statistics from one pass over ``batch`` seeded random images of
    ``image`` x ``image``, as :func:`graphsub.bench.suite.tv_models.calibrate_batchnorm` sets a CNN's (the Hugging
    Face models initialise them to mean 0 / variance 1, under which a random network's activations drift); ``image``
    None keeps them.  Returns ``model`` in eval mode."""
    model.eval()
    if image is None:
        return model
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    x = torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model(x)
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
        m.eval()
    return model


# ------------------------------------------------------------------------------------------ decoder-only LMs
def llama(inputs: Sequence[str], **config: Any) -> Positional:
    """``LlamaModel(LlamaConfig(**config))``: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention
    (``num_key_value_heads`` < ``num_attention_heads``); ``use_cache=False``."""
    return _hf("LlamaConfig", "LlamaModel", inputs, config)


def qwen2(inputs: Sequence[str], **config: Any) -> Positional:
    """``Qwen2Model(Qwen2Config(**config))``: Llama's structure with biases on the query/key/value projections."""
    return _hf("Qwen2Config", "Qwen2Model", inputs, config)


def opt(inputs: Sequence[str], **config: Any) -> Positional:
    """``OPTModel(OPTConfig(**config))``: learned positions (offset 2), pre-LayerNorm, ReLU MLP."""
    return _hf("OPTConfig", "OPTModel", inputs, config)


def gpt_neox(inputs: Sequence[str], **config: Any) -> Positional:
    """``GPTNeoXModel(GPTNeoXConfig(**config))``: parallel attention and MLP residuals, partial rotary, fused QKV."""
    return _hf("GPTNeoXConfig", "GPTNeoXModel", inputs, config)


def phi(inputs: Sequence[str], **config: Any) -> Positional:
    """``PhiModel(PhiConfig(**config))``: one LayerNorm feeding parallel attention and MLP, partial rotary."""
    return _hf("PhiConfig", "PhiModel", inputs, config)


# ------------------------------------------------------------------------------------------ encoder-decoder
def bart(inputs: Sequence[str], **config: Any) -> Positional:
    """``BartModel(BartConfig(**config))``: encoder and decoder (cross-attention) in one pass over
    ``decoder_input_ids`` (teacher forcing, no cache)."""
    return _hf("BartConfig", "BartModel", inputs, config)


# ------------------------------------------------------------------------------------ vision (attention, hybrid)
def swin(inputs: Sequence[str], **config: Any) -> Positional:
    """``SwinModel(SwinConfig(**config))``: shifted-window attention with relative position bias, patch merging."""
    return _hf("SwinConfig", "SwinModel", inputs, config)


def mobilevit(inputs: Sequence[str], **config: Any) -> Positional:
    """``MobileViTModel(MobileViTConfig(**config))``: MobileNetV2 blocks and transformers over unfolded patches."""
    return _hf("MobileViTConfig", "MobileViTModel", inputs, config)


def levit(inputs: Sequence[str], **config: Any) -> Positional:
    """``LevitModel(LevitConfig(**config))``: a convolutional stem, attention with learned biases, shrinking
    attention between stages, BatchNorm after every linear layer."""
    return _hf("LevitConfig", "LevitModel", inputs, config)


def segformer(inputs: Sequence[str], **config: Any) -> Positional:
    """``SegformerModel(SegformerConfig(**config))``: the Mix Transformer encoder (overlapping patch embeddings,
    spatial-reduction attention, a depthwise convolution in the MLP)."""
    return _hf("SegformerConfig", "SegformerModel", inputs, config)


def convnextv2(inputs: Sequence[str], **config: Any) -> Positional:
    """``ConvNextV2Model(ConvNextV2Config(**config))``: ConvNeXt blocks with global response normalisation."""
    return _hf("ConvNextV2Config", "ConvNextV2Model", inputs, config)


# ------------------------------------------------------------------------------------------------ speech
def wav2vec2(inputs: Sequence[str], **config: Any) -> Positional:
    """``Wav2Vec2Model(Wav2Vec2Config(**config))`` on raw audio: the convolutional feature encoder (GroupNorm),
    the convolutional position embedding (weight norm), a post-LayerNorm transformer."""
    return _hf("Wav2Vec2Config", "Wav2Vec2Model", inputs, config)


# ------------------------------------------------------------------------------------ text encoders, other attentions
def deberta_v2(inputs: Sequence[str], **config: Any) -> Positional:
    """``DebertaV2Model(DebertaV2Config(**config))``: disentangled attention over relative positions (log buckets)."""
    return _hf("DebertaV2Config", "DebertaV2Model", inputs, config)


def convbert(inputs: Sequence[str], **config: Any) -> Positional:
    """``ConvBertModel(ConvBertConfig(**config))``: half the heads are span-based dynamic convolutions."""
    return _hf("ConvBertConfig", "ConvBertModel", inputs, config)


# ------------------------------------------------------------------------------------------ recommendation
def _mlp(sizes: Sequence[int], last_act: nn.Module | None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
        elif last_act is not None:
            layers.append(last_act)
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """A DLRM-style click-through model as in facebookresearch/dlrm's ``DLRM_Net``: a bottom MLP over the dense
    features, one ``nn.EmbeddingBag(mode="sum")`` per sparse feature (a fixed number of indices per sample: the
    input ``(N, L)`` form), pairwise dot products of the ``1 + tables`` vectors (the strictly lower triangle,
    gathered by fixed indices), concatenated with the bottom MLP's output, and a top MLP with a sigmoid.

    Called with the dense features ``(N, dense_features)`` float32, then one ``(N, L)`` int64 index tensor per
    table (indices below that table's size)."""

    li: torch.Tensor  # the interaction's pairs (i, j), i > j: buffers
    lj: torch.Tensor

    def __init__(self, dense_features: int, tables: Sequence[int], dim: int, bottom: Sequence[int],
                 top: Sequence[int]) -> None:
        super().__init__()
        self.bottom = _mlp([dense_features, *bottom, dim], nn.ReLU())
        bags = [nn.EmbeddingBag(n, dim, mode="sum") for n in tables]
        for e, n in zip(bags, tables, strict=True):  # DLRM's init: uniform(+-sqrt(1/n))
            nn.init.uniform_(e.weight, -(1 / n) ** 0.5, (1 / n) ** 0.5)
        self.embeddings = nn.ModuleList(bags)
        k = 1 + len(tables)
        rows, cols = torch.tril_indices(k, k, offset=-1)
        self.register_buffer("li", rows, persistent=False)
        self.register_buffer("lj", cols, persistent=False)
        self.top = _mlp([dim + k * (k - 1) // 2, *top, 1], nn.Sigmoid())

    def forward(self, dense: torch.Tensor, *sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        t = torch.stack([x, *(e(s) for e, s in zip(self.embeddings, sparse, strict=True))], dim=1)  # (N, k, dim)
        z = torch.bmm(t, t.transpose(1, 2))
        return self.top(torch.cat([x, z[:, self.li, self.lj]], dim=1))


def dlrm(dense_features: int, tables: Sequence[int], dim: int, bottom: Sequence[int],
         top: Sequence[int]) -> nn.Module:
    """:class:`DLRM`."""
    return DLRM(dense_features, tables, dim, bottom, top).eval()


__all__ = [
    "DLRM", "bart", "calibrate_batchnorms", "convbert", "convnextv2", "deberta_v2", "dlrm", "gpt_neox",
    "jitter_batchnorms", "levit", "llama", "mobilevit", "opt", "phi", "qwen2", "segformer", "swin", "wav2vec2",
]
