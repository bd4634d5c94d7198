"""onnxruntime-genai's model builder as the decoders' peer: a tiny Llama and a tiny Qwen2 written as Hugging Face
folders, built offline, their interface as the module documents it, and their greedy decoding in plain onnxruntime
against PyTorch's at the same weights; a failing builder is a clear error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from graphsub.bench import genai_builder as gb

pytest.importorskip("transformers", reason="the suite extra is not installed (make test installs it)")
pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the suite extra) is not installed")

#: the tiny decoders of the issue: 2 layers, hidden 64, 4 heads, 2 KV heads, vocabulary 256 (:data:`gb.TINY`);
#: Qwen2 adds the QKV biases, Qwen3 the q/k norms (a build is mostly the builder's start: torch and transformers,
#: about 5 s; Mistral's graph is Llama's)
TYPES = ("llama", "qwen2", pytest.param("qwen3", marks=pytest.mark.slow))


@pytest.fixture(scope="module", params=TYPES)
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, gb.BuilderModel]:
    root = tmp_path_factory.mktemp(request.param)
    folder = gb.hf_folder(request.param, None, 0, root / "hf")
    return folder, gb.build(folder, root / "out")


def test_folder_has_config_weights_and_tokenizer(built: tuple[Path, gb.BuilderModel]) -> None:
    folder, _ = built
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [gb.ARCHITECTURES[config["model_type"]]]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (2, 64, 256)
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()


def test_interface(built: tuple[Path, gb.BuilderModel]) -> None:
    _, model = built
    pasts = tuple(f"past_key_values.{i}.{kv}" for kv in ("key", "value") for i in range(2))
    presents = tuple(f"present.{i}.{kv}" for kv in ("key", "value") for i in range(2))
    assert model.inputs == ("input_ids", "attention_mask", *pasts)
    assert model.outputs == ("logits", *presents)
    decoder = model.decoder
    assert (decoder["num_key_value_heads"], decoder["head_size"], model.layers) == (2, 16, 2)
    assert model.genai_config["model"]["eos_token_id"] == gb.SPECIAL["eos"]
    ops = gb.op_histogram(model.model)
    assert ops["GroupQueryAttention"] == 2 and ops["MatMul"] == 11  # 5 per layer and the LM head
    assert ops["SkipSimplifiedLayerNormalization"] == 4


def test_greedy_decoding_matches_pytorch(built: tuple[Path, gb.BuilderModel]) -> None:
    folder, model = built
    result = gb.verify(model, folder, prompt_len=8, steps=8, seed=0)
    assert result.ok, result
    assert len(result.builder) == 8 and len(result.step_diffs) == 8
    assert result.max_diff < 1e-5


def _interpreter(tmp_path: Path, body: str) -> Path:
    """A stand-in for the builder's interpreter: a shell script running ``body``."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_failing_builder_is_an_error_with_its_last_lines(tmp_path: Path) -> None:
    python = _interpreter(tmp_path, 'echo "NotImplementedError: not currently supported" >&2; exit 1')
    with pytest.raises(gb.BuilderFailed, match=r"exited 1:\nNotImplementedError: not currently supported"):
        gb.build(tmp_path / "hf", tmp_path / "out", python=python)


def test_a_hanging_builder_is_stopped(tmp_path: Path) -> None:
    python = _interpreter(tmp_path, "exec sleep 30")
    with pytest.raises(gb.BuilderFailed, match="no result after"):
        gb.build(tmp_path / "hf", tmp_path / "out", python=python, timeout_s=0.5)


def test_a_builder_writing_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(gb.BuilderFailed, match="genai_config"):
        gb.build(tmp_path / "hf", tmp_path / "out", python=_interpreter(tmp_path, "exit 0"))


def test_availability(tmp_path: Path) -> None:
    assert gb.available() and gb.available(sys.executable)
    assert not gb.available(_interpreter(tmp_path, "exit 1"))


def test_a_folder_without_a_model_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(gb.BuilderFailed, match="genai_config"):
        gb.read_output(tmp_path)


def test_a_projection_as_wide_as_the_vocabulary_is_refused(tmp_path: Path) -> None:
    """The builder would read q_proj (4 heads of 64 = 256 = the vocabulary) as the LM head."""
    with pytest.raises(ValueError, match=r"equals the width of model\.layers\.0\.self_attn\.q_proj"):
        gb.hf_folder("llama", {"hidden_size": 256}, 0, tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_unknown_model_type(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="gpt2"):
        gb.hf_folder("gpt2", None, 0, tmp_path)
