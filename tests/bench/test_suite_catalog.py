"""The real-model suite's catalog: the tiny suite builds, its manifest round-trips, every model loads in onnxruntime
and matches its module on fresh inputs, a cached rebuild does nothing, failures are recorded instead of files, and the
torchvision-structure CNNs have torchvision's parameter counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphsub.bench.suite import tv_models
from graphsub.bench.suite.catalog import (
    ARCHITECTURES,
    Arch,
    _build,
    _Job,
    build_suite,
    example_inputs,
    load_failures,
    load_suite,
    read_manifest,
    small_architectures,
    small_suite,
    suite_dir,
)
from graphsub.bench.suite.export import ExportFailure, export_checked, torch_outputs
from graphsub.frontends.ort import run_model


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("suite")
    return root, small_suite(root)


def test_small_suite_builds(built: tuple[Path, list]) -> None:
    root, models = built
    ids = {m.id for m in models}
    assert {"tiny_encoder.ts.b2", "tiny_lstm.ts.b2", "tiny_resnet.ts.b2", "tiny_resnet.dynamo.b2",
            "tiny_bert.ts.b2"} <= ids  # `make test` installs the suite extra (transformers)
    assert load_failures(root) == []
    for m in models:
        assert m.path.is_file() and m.path.stat().st_size == m.size > 0
        assert m.path.parent == root and m.ops > 0 and m.opset >= 17 and m.batch == 2
        assert m.exporter in ("torchscript", "dynamo") and m.family in ("transformer", "cnn", "rnn")
        assert all(s["shape"][0] == 2 for s in m.inputs)


def test_manifest_round_trips(built: tuple[Path, list]) -> None:
    root, models = built
    assert load_suite(root) == sorted(models, key=lambda m: m.id)
    manifest = read_manifest(root)
    entry = next(e for e in manifest["models"] if e["id"] == "tiny_resnet.dynamo.b2")
    assert entry["path"] == "tiny_resnet.dynamo.b2.onnx" and entry["exporter"] == "dynamo"
    assert entry["versions"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert sum(entry["op_types"].values()) == entry["ops"] and entry["max_abs_err"] <= 1e-3
    assert not Path(f"{root / entry['path']}.data").exists()  # dynamo's weights are inline


def test_every_model_loads_and_matches_its_module(built: tuple[Path, list]) -> None:
    _, models = built
    small = small_architectures()
    for m in models:
        feeds = example_inputs(m.inputs, seed=7)  # not the inputs of the export-time check
        ref = torch_outputs(small[m.arch].module(), feeds)
        got = run_model(str(m.path), feeds, optimization="all")
        assert len(got) == len(ref), m.id
        for g, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4, err_msg=m.id)


def test_cached_rebuild_is_a_no_op(built: tuple[Path, list]) -> None:
    root, models = built
    before = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    text = (root / "manifest.json").read_text()
    assert small_suite(root) == models
    assert {p.name: p.stat().st_mtime_ns for p in root.iterdir()} == before
    assert (root / "manifest.json").read_text() == text


def test_integer_inputs_record_their_range(built: tuple[Path, list]) -> None:
    _, models = built
    for m in models:
        for s in m.inputs:
            if s["dtype"].startswith("int"):
                assert 0 <= s["low"] < s["high"], (m.id, s)
            else:
                assert "low" not in s
    bert = next(m for m in models if m.arch == "tiny_bert")
    ids, mask = bert.inputs
    assert (ids["name"], ids["low"], ids["high"]) == ("input_ids", 0, 1000)
    assert (mask["low"], mask["high"], mask["role"]) == (0, 2, "attention_mask")
    assert bert.transformer == {"model_type": "bert", "num_heads": 2, "hidden_size": 32}
    assert bert.attention in ("sdpa", "eager")


def test_example_inputs_are_deterministic_and_in_range() -> None:
    specs = ARCHITECTURES["bert"].input_specs(8)
    a, b = example_inputs(specs), example_inputs(specs)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["input_ids"].dtype == np.int64 and a["input_ids"].shape == (8, 128)
    assert a["input_ids"].min() >= 0 and a["input_ids"].max() < 30522
    mask = a["attention_mask"]
    assert set(np.unique(mask)) <= {0, 1} and (mask.sum(1) >= 64).all()
    assert (np.diff(mask, axis=1) <= 0).all()  # right-padded: ones, then zeros


def test_weights_are_deterministic() -> None:
    arch = small_architectures()["tiny_resnet"]
    a, b = arch.module().state_dict(), arch.module().state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["tiny_bert", "tiny_resnet"])
def test_biases_and_norm_scales_are_trained_like(name: str) -> None:
    """No bias is exactly 0 and no normalisation scale exactly 1 (the libraries' init), as in a trained model."""
    module = small_architectures()[name].module()
    vectors = {k: p for k, p in module.named_parameters() if p.dim() == 1}
    assert any(k.endswith("bias") for k in vectors) and any("norm" in k.lower() or "bn" in k for k in vectors)
    for k, p in vectors.items():
        assert not bool((p == 0).any() or (p == 1).any()), k


def test_catalog_metadata() -> None:
    assert len(ARCHITECTURES) >= 15
    for a in ARCHITECTURES.values():
        assert a.family in ("transformer", "cnn", "rnn", "recsys")
        assert (a.transformer is not None) == (a.family == "transformer")
        assert 1 in a.batches and len(a.batches) == 2
        for s in a.input_specs(3):
            assert s["shape"][0] == 3
    assert ARCHITECTURES["gpt2"].transformer == {"model_type": "gpt2", "num_heads": 4, "hidden_size": 256}
    assert ARCHITECTURES["bert"].seq == 128


def test_failures_are_recorded_not_files(tmp_path: Path) -> None:
    bad = Arch("broken", "rnn", "torch.nn.LSTM", "graphsub.bench.suite.models:lstm", {"bogus": 1},
               ({"name": "x", "dtype": "float32", "shape": ["batch", 4, 4]},), (1,))
    assert _build([_Job(bad, "torchscript", 1)], tmp_path, progress=False) == []
    [fail] = load_failures(tmp_path)
    assert (fail["id"], fail["stage"]) == ("broken.ts.b1", "build") and "bogus" in fail["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
    text = (tmp_path / "manifest.json").read_text()
    _build([_Job(bad, "torchscript", 1)], tmp_path, progress=False)  # a recorded failure is not retried
    assert (tmp_path / "manifest.json").read_text() == text


class _Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvalsh(x)


class _Drifting(torch.nn.Module):
    """Each call multiplies by its call count: the traced graph bakes a later count than the reference saw."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * float(self.calls)


class _Vanishing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-6


@pytest.mark.parametrize(("module", "stage"), [(_Unsupported(), "export"), (_Drifting(), "check"),
                                               (_Vanishing(), "check")])
def test_export_failures_name_their_stage(tmp_path: Path, module: torch.nn.Module, stage: str) -> None:
    path = tmp_path / "m.onnx"
    with pytest.raises(ExportFailure) as info:
        export_checked(module, {"x": np.eye(3, dtype=np.float32)[None]}, path, "torchscript")
    assert info.value.stage == stage and not path.exists()
    if isinstance(module, _Vanishing):
        assert "degenerate" in info.value.reason


def test_cnn_batchnorm_statistics_are_calibrated() -> None:
    """Calibrated BatchNorms see unit-scale inputs: the outputs keep a sane scale (torchvision's initial statistics
    let MobileNetV3's vanish)."""
    for name in ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf"):
        assert ARCHITECTURES[name].config == {"calibrate_image": 224}
    model = tv_models.resnet(layers=(1, 1, 1, 1), width=8, num_classes=10, calibrate_image=32)
    bn = model.layer1[0].bn3
    assert not bn.training and bn.momentum == 0.1 and not torch.equal(bn.running_var, torch.ones_like(bn.running_var))


def test_suite_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GRAPHSUB_SUITE_DIR", str(tmp_path))
    assert suite_dir() == tmp_path
    monkeypatch.delenv("GRAPHSUB_SUITE_DIR")
    assert suite_dir() == Path.home() / ".cache" / "graphsub" / "suite"


def test_build_suite_rejects_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="nope"):
        build_suite(tmp_path, archs=["nope"], progress=False)
    with pytest.raises(ValueError, match="onnxscript"):
        build_suite(tmp_path, archs=["lstm"], exporters=["onnxscript"], progress=False)


@pytest.mark.parametrize(("fn", "params"), [
    ("resnet", 25_557_032), ("mobilenet_v3_large", 5_483_032), ("efficientnet_b0", 5_288_548),
    ("convnext_tiny", 28_589_128), ("regnet_y_400mf", 4_344_144),
])
def test_cnns_have_torchvisions_parameter_counts(fn: str, params: int) -> None:
    """torchvision's published parameter counts of resnet50, mobilenet_v3_large, efficientnet_b0, convnext_tiny and
    regnet_y_400mf (the structures match layer for layer)."""
    model = getattr(tv_models, fn)()
    assert sum(p.numel() for p in model.parameters()) == params
