"""A decoder's attention with its key/value cache as onnxruntime's GroupQueryAttention and its RMSNorms as
(Skip)SimplifiedLayerNormalization (issue 55, :mod:`graphsub.rules.library.gqa`, :mod:`graphsub.rules.library.rms`):
on the tiny Llama exports the ``ort_gqa_*`` rules take every layer's attention, the cache concatenation and repeat-kv
included, the rotary embedding (onnxruntime's RotaryEmbedding first, ``ort_rotary_half``) moves into it, the
``ort_rms_*`` rules take every norm (the residual sums into the skip form), and the result written over the file
keeps its symbolic lengths and matches the export at the decoding sizes, presents included; a bias that does not mask
the later keys is left alone (the kernel's causal mask would change what the layer computes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from test_decoder_cache import _compare_at_decoding_sizes, _export

from graphsub.frontends.dims import interface
from graphsub.frontends.onnx_io import load
from graphsub.frontends.splice import splice_symbolic
from graphsub.ir.graph import Graph
from graphsub.optimize.candidates import CLEANUP_STEP, cleaned_start, rewrite_everywhere
from graphsub.optimize.twin import other_sizes, sized
from graphsub.rules.library import resolve_rules
from graphsub.search.base import Step
from graphsub.symbolic import imported_sizes, keep_symbolic


@pytest.fixture(scope="module")
def llama_ts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tmp_path_factory.mktemp("gqa"), "torchscript")


def _rewritten(src: Path) -> tuple[Graph, Graph, tuple[Step, ...], list[str]]:
    base = load(src, generic=True)
    cleaned, _ = cleaned_start(base)
    final, steps = rewrite_everywhere(cleaned, resolve_rules("decoder,attention"))
    return base, final, (CLEANUP_STEP, *steps), [s.rule for s in steps]


def _written(src: Path, base: Graph, final: Graph, steps: tuple[Step, ...]) -> onnx.ModelProto:
    """``final`` written over the file as ``optimize`` writes it: its steps replayed on a second import at other
    sizes give its reshape targets in symbols (:mod:`graphsub.optimize.twin`), then checked at other sizes."""
    iface = interface(str(src))
    assert iface.cache is not None
    first = {k: v for k, v in imported_sizes(iface, base).items() if k != iface.cache.total}
    second = other_sizes(first)
    got = sized(final, steps, base, load(src, sizes=second), iface, first, second)
    assert got is not None
    model = splice_symbolic(got[0], base, iface, got[1])
    assert model is not None
    return keep_symbolic(str(src), model, graph=base, iface=iface, imported=True)


def _check(src: Path, expected: list[str], tmp_path: Path, family: str = "llama") -> list[str]:
    """The rules taken on ``src`` are ``expected`` (in any order); the written model keeps the lengths symbolic and
    matches the export at the decoding sizes; its ops."""
    base, final, steps, rules = _rewritten(src)
    assert sorted(rules) == sorted(expected)
    model = _written(src, base, final, steps)
    ops = [n.op_type for n in model.graph.node]
    assert "Softmax" not in ops
    out = tmp_path / "gqa.onnx"
    onnx.save(model, out)
    _compare_at_decoding_sizes(src, out, family)
    return ops


def _compare_left_padded(original: Path, written: Path) -> None:
    """``written`` matches ``original`` on a left-padded prompt: batch row 1's first 3 positions masked, so their
    query rows keep no key (0 in the TorchScript export's guard, 0 in GroupQueryAttention's kernel)."""
    from graphsub.bench.decoders import build_decoder, feeds
    from graphsub.frontends.ort import make_session, run_session

    inputs = feeds(build_decoder("llama").layout, 2, 5, 0, seed=3, pad=3)
    want = run_session(make_session(str(original), optimization="disable"), inputs)
    have = run_session(make_session(str(written), optimization="all"), inputs)
    for w, h in zip(want, have, strict=True):
        assert w.shape == h.shape and np.allclose(h, w, rtol=1e-4, atol=1e-4)


def _llama(src: Path, rule: str, norm: str, tmp_path: Path) -> None:
    layers = sum(o.name.startswith("present.") for o in onnx.load(str(src)).graph.output) // 2
    # the decoder set's RotaryEmbedding first (q and k), then moved into GroupQueryAttention with it; the TorchScript
    # export's guard against fully masked rows (a row factor after the kernel) dropped: the kernel gives those rows 0
    kept = ["ort_gqa_kept_rows_packed_rotary"] if "_keep_" in rule else []
    # the bias's causal mask left to the kernel (ort_gqa_causal_bias_*): nothing computes it any more
    ops = _check(src, [rule, "ort_rotary_half", "ort_rotary_half", "ort_gqa_rotary_kernel",
                       "ort_gqa_packed_mm_rotary", *kept, "ort_gqa_causal_bias_packed_rotary"] * layers
                 + [f"ort_rms_skip_{norm}"] * 2 * layers + [f"ort_rms_{norm}"], tmp_path)
    assert ops.count("GroupQueryAttention") == layers
    assert not {"ReduceSum", "Clip"} & set(ops)  # no row factor left to compute
    assert not {"LessOrEqual", "And"} & set(ops)  # nor a causal mask
    written = onnx.load(str(tmp_path / "gqa.onnx"))
    made = {o: n.op_type for n in written.graph.node for o in n.output}
    # the kernel's cos and sin are those of the angles, not of the angles twice (cat(freqs, freqs)) then halved
    assert not any(made.get(n.input[0]) == "Concat" for n in written.graph.node if n.op_type in ("Cos", "Sin"))
    if kept:
        _compare_left_padded(src, tmp_path / "gqa.onnx")
    # one projection for q, k and v read whole by the kernel (no Split); the output, gate, up and down projections
    # and the head: 5 per layer + 1
    assert "Split" not in ops and ops.count("MatMul") == 5 * layers + 1
    assert ops.count("SkipSimplifiedLayerNormalization") == 2 * layers and "ReduceMean" not in ops
    assert "Neg" not in ops and "Transpose" not in ops  # rotary inside (do_rotary); v read as the projection's rows
    # each kernel reads the past cache where it comes in: no copy of it (the TorchScript export's torch.cat of one
    # past key, folded by cleanup_concat_noop, also where the lengths are computed from its shape)
    inputs = {i.name for i in written.graph.input}
    assert all(n.input[3] in inputs and n.input[4] in inputs
               for n in written.graph.node if n.op_type == "GroupQueryAttention")
    assert not any(n.op_type == "Concat" and len(n.input) == 1 for n in written.graph.node)


def test_the_torchscript_llama_attention_is_group_query_attention(llama_ts: Path, tmp_path: Path) -> None:
    _llama(llama_ts, "ort_gqa_batched_qk_keep_ab", "div1", tmp_path)


@pytest.mark.slow
def test_the_dynamo_llama_attention_is_group_query_attention(tmp_path: Path) -> None:
    _llama(_export(tmp_path, "dynamo"), "ort_gqa_dynamo_qk_ab", "rsqrt", tmp_path)


@pytest.mark.parametrize("exporter", ["torchscript", pytest.param("dynamo", marks=pytest.mark.slow)])
def test_gpt2s_attention_with_its_cache_is_group_query_attention(exporter: str, tmp_path: Path) -> None:
    """GPT-2: as many key/value heads as query heads (no repeat-kv): the ``_norep`` rules; its LayerNorms after the
    residual sums as SkipLayerNormalization, the sum output the next residual."""
    from graphsub.bench.decoders import export_decoder

    pytest.importorskip("transformers")
    exported = export_decoder("gpt2", tmp_path, exporter)
    assert exported.path is not None, exported.error
    layers = sum(o.name.startswith("present.") for o in onnx.load(str(exported.path)).graph.output) // 2
    rule = "ort_gqa_batched_norep_qk_keep_ab" if exporter == "torchscript" else "ort_gqa_dynamo_norep_qk_ab"
    # each layer's two LayerNorms after a residual sum that is the next residual too, and the last one's
    kept = ["ort_gqa_kept_rows_packed"] if exporter == "torchscript" else []
    expected = [rule, "ort_gqa_packed_split", *kept, "ort_gqa_causal_bias_packed", "ort_skip_layernorm_sum",
                "ort_skip_layernorm_sum"] * layers
    ops = _check(exported.path, [*expected, "ort_skip_layernorm"], tmp_path, "gpt2")
    assert ops.count("GroupQueryAttention") == layers and "Split" not in ops  # c_attn's output read whole
    assert ops.count("SkipLayerNormalization") == 2 * layers + 1 and "LayerNormalization" not in ops


def test_a_bias_that_sees_later_keys_is_left_alone(llama_ts: Path, tmp_path: Path) -> None:
    """The causal mask's constant made all true (every query sees every key): no ``ort_gqa_*`` rule fires."""
    model = onnx.load(str(llama_ts))
    graph = model.graph
    masks = [n for n in graph.node if n.op_type == "And"]
    assert masks
    for node in masks:  # And(c, x) -> And(x, x): the padding mask alone, not causal
        node.input[0] = node.input[1]
    src = tmp_path / "noncausal.onnx"
    onnx.save(model, src)
    rules = _rewritten(src)[3]
    assert not [r for r in rules if r.startswith("ort_gqa_")]


def test_group_query_attention_takes_the_rotary_kernels_rotation_inside(llama_ts: Path) -> None:
    """The rotary embedding rewritten first into onnxruntime's RotaryEmbedding (``ort_rotary_half``, as a search may
    order it): GroupQueryAttention still ends with the rotation inside (``ort_gqa_rotary_kernel``), no RotaryEmbedding
    left, the same graph as the other order's but for the names."""
    from collections import Counter

    from graphsub.rules.library.rotary import rules as rotary_rules

    base, _ = cleaned_start(load(llama_ts, generic=True))
    rotated, first = rewrite_everywhere(base, rotary_rules())
    layers = sum(o.name.startswith("present.") for o in onnx.load(str(llama_ts)).graph.output) // 2
    assert [s.rule for s in first] == ["ort_rotary_half"] * 2 * layers
    final, steps = rewrite_everywhere(rotated, resolve_rules("attention"))
    assert Counter(s.rule for s in steps)["ort_gqa_rotary_kernel"] == layers
    ops = Counter(n.op for n in final.nodes.values())
    assert ops["ms_rotary"] == 0 and ops["ms_gqa_packed"] == layers
    direct, steps = rewrite_everywhere(base, resolve_rules("attention"))  # the rotation moved in directly
    assert Counter(s.rule for s in steps)["ort_gqa_rotary"] == layers
    assert Counter(n.op for n in direct.nodes.values()) == ops


def test_the_search_priced_by_onnxruntime_drops_the_causal_mask_it_cannot_price(llama_ts: Path) -> None:
    """The import folds the causal mask into a constant, so no price sees its kernels: the search's result gets the
    ``ort_gqa_causal_bias*`` rules after it (``unpriced``), at every layer, and only those; a result they do not
    match is left as it is."""
    from collections import Counter

    from graphsub.optimize.sources.ort_search import unpriced
    from graphsub.rules.library.gqa_bias import rules as bias_rules

    bias = {r.name for r in bias_rules()}
    base, _ = cleaned_start(load(llama_ts, generic=True))
    searched, steps = rewrite_everywhere(base, [r for r in resolve_rules("decoder,attention") if r.name not in bias])
    final, more = unpriced(searched, tuple(steps))
    layers = sum(o.name.startswith("present.") for o in onnx.load(str(llama_ts)).graph.output) // 2
    assert more[:len(steps)] == tuple(steps)
    assert Counter(s.rule for s in more[len(steps):]) == {"ort_gqa_causal_bias_packed_rotary": layers}
    assert not any(n.sig.attr.get("op_type") == "And" for n in final.nodes.values())
    assert any(n.sig.attr.get("op_type") == "And" for n in searched.nodes.values())
    assert unpriced(base, ()) == (base, ())  # no GroupQueryAttention: nothing to drop
