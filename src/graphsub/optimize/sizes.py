"""The sizes ``optimize`` checks and times an input file's free symbolic dims at, split from
:mod:`graphsub.optimize.pipeline`: the names ``--check-sizes`` gives checked before any work
(:func:`check_sizes_named`), a decoder's decode step to time at (:func:`decode_step`) and the longer search priced by
onnxruntime's kernels a decoder gets (:func:`decoder_settings`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphsub.optimize.config import OptimizeConfig
    from graphsub.optimize.result import OptimizeResult
    from graphsub.spec import ModelSpec


def decode_step(spec: ModelSpec | None, cfg: OptimizeConfig, res: OptimizeResult,
                notes: list[str]) -> tuple[dict[str, Any], tuple[dict[str, Any], str]] | None:
    """A decoder's decode-step inputs to time its candidates on, and the inputs of a step on a long cache that the
    one kept must not be slower at (:func:`graphsub.symbolic.decode_feeds`, :data:`~graphsub.symbolic.LONG_PAST`),
    when the input is an ONNX file with a key/value cache and ``--sizes`` does not say where to time; else None."""
    if spec is None or spec.kind != "onnx" or cfg.sizes:
        return None
    from graphsub.symbolic import LONG_PAST, decode_feeds

    seed = res.seeds[0] if res.seeds else 0
    step = decode_feeds(spec.name, res.original, cfg.input_shapes, seed=seed)
    long = decode_feeds(spec.name, res.original, cfg.input_shapes, seed=seed, past=LONG_PAST)
    if step is None or long is None:
        return None
    notes.append(step[1] + f"; the one kept is not slower on a {LONG_PAST}-long cache")
    return step[0], (long[0], f"on a {LONG_PAST}-long cache")


#: seconds of the search priced by onnxruntime's kernels for a decoder with a key/value cache when the call leaves
#: ``ort_search_s`` at its default, per past input (a layer has two: its keys and values), at least
#: :data:`DECODER_ORT_SEARCH_S`: the decoder rules (GroupQueryAttention, its rotary embedding, the RMSNorms) are
#: priced there only, and it took 20 s to take them all on the small Llama (4 layers, 8 pasts), 108 s on the 100 M
#: one (12 layers, 24 pasts), where the default 10 s left the norms and the rotary embedding (2026-11-29)
DECODER_ORT_SEARCH_S_PER_PAST = 5.0
DECODER_ORT_SEARCH_S = 30.0
#: ...plus this much per GB of weights above :data:`~graphsub.frontends.shared.SHARE_BYTES` (a large model's):
#: pricing a region costs time that grows with its weights (onnxruntime optimizes and runs it), so that a 1 B
#: decoder's search prices as many regions as a small one's. At 1 B with 5 s per past alone (220 s at 44 pasts), it
#: took one rule (a two-way matmul merge) in 162 s and no decoder rule (2026-11-29, ``experiments/results/
#: big_decoder_llama_1b_memory.md``); that run used 1,191 s of its 2,094 s budget
DECODER_ORT_SEARCH_S_PER_GB = 150.0


def decoder_settings(spec: ModelSpec | None, cfg: OptimizeConfig) -> OptimizeConfig:
    """``cfg`` with :data:`DECODER_ORT_SEARCH_S_PER_PAST` per past input (at least :data:`DECODER_ORT_SEARCH_S`),
    plus :data:`DECODER_ORT_SEARCH_S_PER_GB` per GB of weights above a large model's threshold, for an ONNX decoder
    with a key/value cache whose lengths are free (:func:`graphsub.frontends.cache.cache_dims`), when
    ``ort_search_s`` is the default; else ``cfg``."""
    import dataclasses

    from graphsub.optimize.config import DEFAULT_ORT_SEARCH_S

    if spec is None or spec.kind != "onnx" or cfg.ort_search_s != DEFAULT_ORT_SEARCH_S:
        return cfg
    from graphsub.frontends.cache import PAST_NAME
    from graphsub.frontends.dims import interface

    iface = interface(spec.name, cfg.input_shapes)
    if iface.cache is None or not {iface.cache.sequence, iface.cache.past} <= set(iface.free):
        return cfg
    from graphsub.frontends.shared import SHARE_BYTES, file_bytes

    pasts = sum(1 for name, _ in iface.inputs if PAST_NAME.match(name))
    large_gb = max(0.0, file_bytes(spec.name) - SHARE_BYTES) / 1e9
    seconds = max(DECODER_ORT_SEARCH_S, DECODER_ORT_SEARCH_S_PER_PAST * pasts) + DECODER_ORT_SEARCH_S_PER_GB * large_gb
    return dataclasses.replace(cfg, ort_search_s=seconds)


def check_sizes_named(spec: ModelSpec | None, cfg: OptimizeConfig) -> None:
    """Raise ValueError, before any work, when ``cfg.check_sizes`` names a dim that is not a free symbolic dim of the
    input file (or the input is not a file)."""
    if not cfg.check_sizes:
        return
    from graphsub.frontends.dims import interface
    from graphsub.symbolic import unknown_dims

    if spec is None or spec.kind != "onnx":
        raise ValueError("check_sizes applies to an ONNX file's symbolic dims only")
    unknown = unknown_dims(interface(spec.name, cfg.input_shapes), cfg.check_sizes)
    if unknown:
        raise ValueError(f"check_sizes names {unknown}: not a free symbolic dimension of the model's inputs")


__all__ = ["DECODER_ORT_SEARCH_S", "DECODER_ORT_SEARCH_S_PER_GB", "DECODER_ORT_SEARCH_S_PER_PAST", "check_sizes_named",
           "decode_step", "decoder_settings"]
