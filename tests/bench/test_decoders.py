"""Decoder LMs with a key/value cache (graphsub.bench.decoders): the tiny Llama exports with both PyTorch exporters
into one graph whose batch, sequence and past lengths stay symbolic under the interface's names, matches the PyTorch
model at the four check sizes (presents included) and left-padded, and its greedy ONNX generation gives PyTorch's
tokens; Qwen2 and GPT-2 export too (their dynamo exports are slow-marked); a failing exporter is recorded, not
raised."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

pytest.importorskip("transformers")

from graphsub.bench import decoders
from graphsub.bench.decoders import (
    CHECK_SHAPES,
    DECODERS,
    DecoderExport,
    build_decoder,
    export_decoder,
    feeds,
    greedy_generate,
    torch_greedy,
)
from graphsub.bench.decoders import export as decoder_export

PROMPT = [5, 17, 99, 3, 200, 42]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DecoderExport]:
    out = tmp_path_factory.mktemp("decoders")
    return {e: export_decoder("llama", out, e) for e in decoders.EXPORTERS}


def _assert_verified(r: DecoderExport) -> None:
    assert r.ok and r.error is None and r.path is not None and r.path.exists(), (r.stage, r.error)
    sizes = [(c.batch, c.sequence, c.past) for c in r.cases if not c.padded]
    assert sizes == [*CHECK_SHAPES, (1, 1, 128)]  # the tiny models' 512 positions hold a 128-token past only
    assert [(c.batch, c.sequence, c.past) for c in r.cases if c.padded] == [(2, 7, 33)]
    assert all(c.ok and c.logits_err < 1e-5 and c.present_err < 1e-5 for c in r.cases), r.cases


def test_catalog_sizes() -> None:
    tiny = DECODERS["llama"].config("tiny")
    assert tiny["num_key_value_heads"] < tiny["num_attention_heads"]  # grouped-query attention
    for d in DECODERS.values():
        assert {"tiny", "small", "100m"} <= set(d.sizes) <= set(decoders.SIZES)
    assert "1b" in DECODERS["llama"].sizes  # the benchmark's 1 B model: Llama only
    with pytest.raises(KeyError):
        DECODERS["gpt2"].config("huge")


def test_empty_past_feeds() -> None:
    lay = build_decoder("llama").layout
    f = feeds(lay, 1, 1, 0)
    assert f["past_key_values.0.key"].shape == (1, 2, 0, 16)
    assert f["attention_mask"].shape == (1, 1) and f["position_ids"].tolist() == [[0]]
    padded = feeds(lay, 2, 3, 4, pad=2)
    assert padded["attention_mask"][1].tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert padded["position_ids"].tolist() == [[4, 5, 6], [2, 3, 4]]


@pytest.mark.parametrize("exporter", decoders.EXPORTERS)
def test_llama_exports_and_verifies(llama: dict[str, DecoderExport], exporter: str) -> None:
    r = llama[exporter]
    _assert_verified(r)
    assert r.exporter == exporter and r.source == "transformers.LlamaForCausalLM" and r.attention == "sdpa"
    assert r.to_dict()["ok"] and r.to_dict()["cases"][0]["past"] == 0


@pytest.mark.parametrize("exporter", decoders.EXPORTERS)
def test_llama_symbolic_dims(llama: dict[str, DecoderExport], exporter: str) -> None:
    path = llama[exporter].path
    assert path is not None
    graph = onnx.load(str(path)).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in (*graph.input, *graph.output)}
    assert dims["input_ids"] == dims["position_ids"] == ["batch_size", "sequence_length"]
    assert dims["attention_mask"] == ["batch_size", "total_sequence_length"]
    assert dims["logits"] == ["batch_size", "sequence_length", 256]
    for i in range(2):
        for kv in ("key", "value"):
            assert dims[f"past_key_values.{i}.{kv}"] == ["batch_size", 2, "past_sequence_length", 16]
            assert dims[f"present.{i}.{kv}"] == ["batch_size", 2, "total_sequence_length", 16]
    assert [v.name for v in graph.output] == ["logits", *(f"present.{i}.{kv}" for i in range(2)
                                                          for kv in ("key", "value"))]


@pytest.mark.parametrize("exporter", decoders.EXPORTERS)
def test_llama_greedy_generation_matches_torch(llama: dict[str, DecoderExport], exporter: str) -> None:
    path = llama[exporter].path
    assert path is not None
    gen = greedy_generate(path, PROMPT, 8)
    module = build_decoder("llama")
    assert gen.tokens == torch_greedy(module, PROMPT, 8)
    assert len(gen.step_s) == 8 and all(t > 0 for t in gen.step_s)
    model = module.model
    model.generation_config.eos_token_id = None  # a random model may emit the config's end token: run all 8
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=8, min_new_tokens=8,
                             pad_token_id=0)
    assert out[0, len(PROMPT):].tolist() == gen.tokens


@pytest.mark.parametrize("name", ["qwen2", "gpt2"])
def test_other_families_torchscript(tmp_path: Path, name: str) -> None:
    r = export_decoder(name, tmp_path, "torchscript")
    _assert_verified(r)
    assert r.path is not None
    assert greedy_generate(r.path, PROMPT, 4).tokens == torch_greedy(build_decoder(name), PROMPT, 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2", "gpt2"])
def test_other_families_dynamo(tmp_path: Path, name: str) -> None:
    _assert_verified(export_decoder(name, tmp_path, "dynamo"))


def test_failed_export_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(module: object, path: Path, exporter: str) -> None:
        path.write_bytes(b"partial")
        raise RuntimeError("unsupported operator aten::foo\nmore lines")

    monkeypatch.setattr(decoder_export, "_run_exporter", broken)
    r = export_decoder("gpt2", tmp_path, "dynamo")
    assert not r.ok and r.stage == "export" and r.error == "RuntimeError: unsupported operator aten::foo"
    assert not any(tmp_path.iterdir())
    assert r.to_dict()["path"] is None


def test_failed_check_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = decoder_export.torch_run

    def off(module: decoders.FlatCache, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [o + 1.0 for o in real(module, inputs)]

    monkeypatch.setattr(decoder_export, "torch_run", off)
    r = export_decoder("gpt2", tmp_path, "torchscript")
    assert not r.ok and r.stage == "check" and "(1, 1, 0)" in (r.error or "")
    assert not any(tmp_path.glob("*.onnx"))


def test_build_decoders_writes_the_manifest(tmp_path: Path) -> None:
    results = decoders.build_decoders(tmp_path, ["gpt2"], size="tiny", exporters=["torchscript"])
    assert [r.ok for r in results] == [True]
    data = json.loads((tmp_path / decoders.MANIFEST).read_text())
    (entry,) = data["decoders"]
    assert entry["ok"] and entry["path"] == str(tmp_path / "gpt2.tiny.ts.onnx") and entry["error"] is None
    assert entry["config"]["n_embd"] == 64 and len(entry["cases"]) == len(CHECK_SHAPES) + 2


def test_generation_runs_a_rewritten_variant(llama: dict[str, DecoderExport], tmp_path: Path) -> None:
    """Any graph with the interface runs: onnxruntime's own ORT_ENABLE_ALL rewrite of the export, saved offline."""
    from graphsub.frontends.ort import optimized_model

    path = llama["torchscript"].path
    assert path is not None
    variant = tmp_path / "ort_optimized.onnx"
    onnx.save(optimized_model(str(path), threads=1), str(variant))
    assert greedy_generate(variant, PROMPT, 8, optimization="disable").tokens == greedy_generate(path, PROMPT, 8).tokens
