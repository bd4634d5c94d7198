"""The suite's halves (the 15 architectures of before the split are development, every one added since is held-out,
the tiny test architectures are development), the selection by half (``select``, ``graphsub bench suite --half``),
and a tiny-config smoke test of every added factory (built and run in PyTorch; the real exports are in the cache,
not here)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphsub.bench.suite import tv_models_more
from graphsub.bench.suite.catalog import (
    ADDED,
    ARCHITECTURES,
    BATCH,
    SuiteModel,
    example_inputs,
    load_suite,
    small_architectures,
)
from graphsub.bench.suite.export import torch_outputs
from graphsub.bench.suite.halves import DEVELOPMENT, DEVELOPMENT_ADDED, HALVES, ORIGINAL, TINY, half
from graphsub.bench.suite.select import select
from graphsub.cli import app
from graphsub.errors import GraphsubError

BEFORE_THE_SPLIT = {"bert", "distilbert", "gpt2", "vit", "t5_encoder", "whisper_encoder", "transformer_encoder",
                    "mha_block", "lstm", "gru", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny",
                    "regnet_y_400mf"}


def test_the_original_fifteen_are_development_and_every_added_one_held_out() -> None:
    assert ORIGINAL == BEFORE_THE_SPLIT
    assert set(ARCHITECTURES) == BEFORE_THE_SPLIT | {a.name for a in ADDED}
    assert len(ADDED) >= 12 and not BEFORE_THE_SPLIT & {a.name for a in ADDED}
    for name in BEFORE_THE_SPLIT:
        assert half(name) == "development", name
    listed = {name for name, _ in DEVELOPMENT_ADDED}
    for a in ADDED:
        assert half(a.name) == ("development" if a.name in listed else "held-out"), a.name
    assert all(half(n) in HALVES for n in ARCHITECTURES)
    assert half("an_architecture_added_tomorrow") == "held-out"


def test_the_tiny_test_architectures_are_development() -> None:
    assert set(small_architectures()) <= TINY <= DEVELOPMENT
    assert all(half(n) == "development" for n in small_architectures())


def test_development_additions_name_a_catalog_architecture_and_a_reason() -> None:
    for name, reason in DEVELOPMENT_ADDED:
        assert name in ARCHITECTURES and name not in ORIGINAL and reason.strip(), name


def test_added_factories_leave_the_original_build_keys_alone() -> None:
    """A build key hashes the factory's source file: the added architectures' factories live in their own modules,
    so adding them did not rebuild the 15 (and editing them never will)."""
    for name in BEFORE_THE_SPLIT:
        assert ARCHITECTURES[name].factory.split(":")[0].rsplit(".", 1)[1] in ("models", "tv_models"), name
    for a in ADDED:
        assert a.factory.split(":")[0].rsplit(".", 1)[1] in ("models_more", "tv_models_more"), a.name


def _model(arch: str, exporter: str = "torchscript", batch: int = 1) -> SuiteModel:
    a = ARCHITECTURES[arch]
    return SuiteModel(id=f"{arch}.ts.b{batch}", path=Path(f"/nowhere/{arch}.onnx"), arch=arch, family=a.family,
                      exporter=exporter, batch=batch, transformer=a.transformer, inputs=a.input_specs(batch),
                      seq=a.seq)


def test_select_by_half() -> None:
    suite = [_model("bert"), _model("resnet50"), _model("opt"), _model("densenet121")]
    assert [m.half for m in suite] == ["development", "development", "held-out", "held-out"]
    assert [m.id for m in select(None, suite, "held-out")] == ["opt.ts.b1", "densenet121.ts.b1"]
    assert [m.id for m in select(None, suite, "development")] == ["bert.ts.b1", "resnet50.ts.b1"]
    assert [m.id for m in select(["*.b1"], suite, "held-out")] == ["opt.ts.b1", "densenet121.ts.b1"]
    assert select(["opt"], suite, "held-out")[0].meta["half"] == "held-out"
    with pytest.raises(GraphsubError, match="held-out half"):
        select(["bert"], suite, "held-out")
    with pytest.raises(GraphsubError, match="unknown half"):
        select(None, suite, "test")


def _entry(m: SuiteModel) -> dict[str, Any]:
    return {"id": m.id, "path": m.path.name, "arch": m.arch, "family": m.family, "exporter": m.exporter,
            "batch": m.batch, "transformer": m.transformer, "inputs": list(m.inputs), "seq": m.seq, "source": "",
            "attention": None, "opset": 17, "ops": 1, "size": 1}


def test_cli_half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = [_model("bert"), _model("opt")]
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 2, "models": [_entry(m) for m in models],
                                                        "failures": []}))
    monkeypatch.setenv("GRAPHSUB_SUITE_DIR", str(tmp_path))
    assert [m.half for m in load_suite()] == ["development", "held-out"]
    r = CliRunner().invoke(app, ["bench", "suite", "--half", "held-out", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    assert [row["model"] for row in json.loads(r.stdout)] == ["opt.ts.b1"]
    r = CliRunner().invoke(app, ["bench", "suite", "--half", "dev", "--dry-run", "--json"])
    assert r.exit_code == 2 and "unknown half" in r.output


# --------------------------------------------------------------------------------------- the added factories
def _ids(name: str, high: int, seq: int = 16) -> dict[str, Any]:
    return {"name": name, "dtype": "int64", "shape": [BATCH, seq], "low": 0, "high": high}


_MASK = {**_ids("attention_mask", 2), "role": "attention_mask"}
_TEXT = [_ids("input_ids", 100), _MASK]
_LM = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
       "vocab_size": 100, "max_position_embeddings": 64, "use_cache": False}


def _image(size: int) -> list[dict[str, Any]]:
    return [{"name": "pixel_values", "dtype": "float32", "shape": [BATCH, 3, size, size]}]


#: a tiny configuration and inputs per added architecture (the catalog's factories, small enough for a test)
TINY_CONFIGS: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "llama": ({**_LM, "num_key_value_heads": 1}, _TEXT),
    "qwen2": ({**_LM, "num_key_value_heads": 1}, _TEXT),
    "opt": ({**_LM, "ffn_dim": 64, "word_embed_proj_dim": 32}, _TEXT),
    "gpt_neox": ({**_LM, "rotary_pct": 0.25}, _TEXT),
    "phi": ({**_LM, "partial_rotary_factor": 0.5}, _TEXT),
    "bart": ({"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
              "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": 100,
              "max_position_embeddings": 64, "use_cache": False}, [*_TEXT, _ids("decoder_input_ids", 100)]),
    "swin": ({"image_size": 32, "patch_size": 4, "embed_dim": 8, "depths": [1, 1], "num_heads": [1, 2],
              "window_size": 4}, _image(32)),
    "mobilevit": ({"image_size": 64, "calibrate_image": 64, "hidden_sizes": [16, 16, 16],
                   "neck_hidden_sizes": [8, 8, 16, 16, 16, 16, 32]}, _image(64)),
    "levit": ({"image_size": 64, "batchnorm_noise": 0.02, "hidden_sizes": [16, 32, 48],
               "num_attention_heads": [1, 2, 3], "depths": [1, 1, 1], "key_dim": [8, 8, 8]}, _image(64)),
    "segformer": ({"image_size": 64, "hidden_sizes": [8, 16, 16, 32], "num_attention_heads": [1, 1, 1, 2]},
                  _image(64)),
    "convnextv2": ({"depths": [1, 1, 1, 1], "hidden_sizes": [8, 16, 16, 32]}, _image(64)),
    "wav2vec2": ({"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
                  "conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3], "num_conv_pos_embeddings": 16,
                  "num_conv_pos_embedding_groups": 2}, [{"name": "input_values", "dtype": "float32",
                                                        "shape": [BATCH, 400]}]),
    "deberta_v2": ({**{k: v for k, v in _LM.items() if k != "use_cache"}, "type_vocab_size": 0,
                    "relative_attention": True, "position_buckets": 16, "norm_rel_ebd": "layer_norm",
                    "share_att_key": True, "pos_att_type": ["p2c", "c2p"], "position_biased_input": False}, _TEXT),
    "convbert": ({**{k: v for k, v in _LM.items() if k != "use_cache"}, "embedding_size": 32, "head_ratio": 2,
                  "conv_kernel_size": 3}, [*_TEXT, _ids("token_type_ids", 2)]),
    "densenet121": ({"growth_rate": 4, "block_config": [1, 2], "num_init_features": 8, "num_classes": 10,
                     "calibrate_image": 32}, [{"name": "input", "dtype": "float32", "shape": [BATCH, 3, 32, 32]}]),
    "shufflenet_v2_x1_0": ({"stages_repeats": [1, 2, 1], "stages_out_channels": [8, 16, 32, 64, 128],
                            "num_classes": 10, "calibrate_image": 64},
                           [{"name": "input", "dtype": "float32", "shape": [BATCH, 3, 64, 64]}]),
    "dlrm": ({"dense_features": 4, "tables": [50, 20, 10], "dim": 8, "bottom": [16], "top": [16]},
             [{"name": "dense", "dtype": "float32", "shape": [BATCH, 4]},
              *(_ids(f"sparse_{i}", n, 3) for i, n in enumerate([50, 20, 10]))]),
}


def test_every_added_architecture_has_a_tiny_config() -> None:
    assert set(TINY_CONFIGS) == {a.name for a in ADDED}


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_added_factory_builds_and_runs(name: str) -> None:
    """The catalog's factory with a tiny configuration: deterministic weights, finite outputs of a sane scale with
    the batch first, no bias, norm scale or BatchNorm statistic exactly 0 or 1 (trained-like)."""
    config, specs = TINY_CONFIGS[name]
    a = ARCHITECTURES[name]
    if "inputs" in a.config:  # Hugging Face: the factory takes the input names
        config = {"inputs": [s["name"] for s in specs], **config}
    tiny = dataclasses.replace(a, config=config, inputs=tuple(specs))
    module = tiny.module()
    feeds = example_inputs(tiny.input_specs(2))
    out = torch_outputs(module, feeds)
    assert out and all(o.shape[0] == 2 and np.isfinite(o).all() for o in out), name
    assert max(float(np.abs(o).max()) for o in out) > 1e-3, name
    again = torch_outputs(tiny.module(), feeds)
    assert all(np.array_equal(x, y) for x, y in zip(out, again, strict=True)), name
    vectors = [p for p in module.parameters() if p.dim() == 1]
    vectors += [b for k, b in module.named_buffers() if k.endswith(("running_mean", "running_var"))]
    assert vectors and not any(bool(((p == 0) | (p == 1)).any()) for p in vectors), name


def test_added_catalog_entries() -> None:
    for a in ADDED:
        assert a.family in ("transformer", "cnn", "recsys") and 1 in a.batches and len(a.batches) == 2
        assert (a.transformer is not None) == (a.family == "transformer"), a.name
    llama = ARCHITECTURES["llama"].config
    assert llama["num_key_value_heads"] < llama["num_attention_heads"] and not llama["use_cache"]  # GQA, no cache
    swin = ARCHITECTURES["swin"].config
    assert (swin["embed_dim"], swin["depths"], swin["window_size"]) == (96, [2, 2, 6, 2], 7)  # Swin-T
    dlrm = ARCHITECTURES["dlrm"]
    assert [s["high"] for s in dlrm.inputs[1:]] == dlrm.config["tables"]
    assert sum(dlrm.config["tables"]) * dlrm.config["dim"] * 4 <= 120e6  # the tables' bytes


@pytest.mark.parametrize(("fn", "params"), [("densenet", 7_978_856), ("shufflenet_v2", 2_278_604)])
def test_added_cnns_have_torchvisions_parameter_counts(fn: str, params: int) -> None:
    """torchvision's published parameter counts of densenet121 and shufflenet_v2_x1_0."""
    model = getattr(tv_models_more, fn)()
    assert sum(p.numel() for p in model.parameters()) == params


def test_dlrm_interaction_is_the_pairwise_dot_products() -> None:
    from graphsub.bench.suite.models_more import dlrm

    torch.manual_seed(0)
    m = dlrm(dense_features=3, tables=[5, 7], dim=4, bottom=[8], top=[8])
    dense, s0, s1 = torch.randn(2, 3), torch.tensor([[1, 2], [0, 4]]), torch.tensor([[6, 6], [3, 0]])
    x = m.bottom(dense)
    vecs = [x, m.embeddings[0](s0), m.embeddings[1](s1)]
    pairs = torch.stack([(vecs[i] * vecs[j]).sum(1) for i in range(3) for j in range(i)], dim=1)
    torch.testing.assert_close(m(dense, s0, s1), m.top(torch.cat([x, pairs], dim=1)))
