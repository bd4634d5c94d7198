"""The suite of real exported models: a catalog of architectures built the way users build them (Hugging Face
models from small configs, torch's own modules, CNNs in torchvision's structure; random weights from a fixed seed,
nothing downloaded), each exported with both PyTorch exporters at batch 1 and one larger batch, cached in a folder
the suite owns.

The folder (:func:`suite_dir`: ``$GRAPHSUB_SUITE_DIR`` or ``~/.cache/graphsub/suite``) holds one ``<id>.onnx`` per
model (ids like ``bert.ts.b1``, ``bert.dynamo.b8``) and ``manifest.json``::

    {"format": 1, "models": [entry, ...], "failures": [failure, ...]}

An entry records the id, the file (relative to the folder), the architecture's metadata (family, source, config,
seed, attention implementation, what ``onnxruntime.transformers.optimizer`` needs), exporter, batch, sequence
length, input specs, output names, opset, op count and histogram, file size, the export check's error and the
versions of torch / transformers / onnx / onnxruntime / onnxscript.  A failure records the id, exporter, batch, the
stage that failed and a one-line error.

Invariants:

* every model in the manifest loaded in onnxruntime (ORT_ENABLE_ALL) and matched its PyTorch module on the example
  inputs (:func:`example_inputs`, seed 0) when it was exported (:mod:`.export`); a failed export is a failure
  entry, never a file;
* building is deterministic (same seed, same weights) and incremental: an id whose entry (or failure) has the same
  build key (factory and a hash of its source file, config, seed, inputs, exporter, batch, versions) and whose file
  is present with the recorded size is skipped; the manifest is rewritten after every export, so an interrupted
  build resumes;
* input specs are dicts ``{"name", "dtype", "shape"}``; integer inputs add their valid range ``low`` <= v < ``high``
  (token ids below the vocabulary size); attention masks add ``"role": "attention_mask"`` (their examples are
  right-padded rows of ones).

The catalog is split into two halves (:mod:`.halves`): the 15 architectures of the suite before the split are the
*development* half (graphsub's passes were tuned on them); those added since (:data:`ADDED`, factories in
:mod:`.models_more` and :mod:`.tv_models_more`) are *held-out* unless :mod:`.halves` lists them with a reason.
:attr:`SuiteModel.half` gives a built model's half.

This module imports neither torch nor transformers: building imports :mod:`.export`, which does.

>>> ARCHITECTURES["bert"].input_specs(8)[0]
{'name': 'input_ids', 'dtype': 'int64', 'shape': [8, 128], 'low': 0, 'high': 30522}
>>> model_id("bert", "torchscript", 8)
'bert.ts.b8'
>>> ARCHITECTURES["opt"].family, half("opt"), half("bert")
('transformer', 'held-out', 'development')
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.bench.suite.halves import Half, half
from graphsub.bench.suite.measure import make_feeds

FORMAT = 2  # 2: trained-like biases and normalisation parameters (export.trained_like); cached models rebuild
MANIFEST = "manifest.json"
EXPORTER_TAGS = {"torchscript": "ts", "dynamo": "dynamo"}
BATCH = "batch"  # the placeholder for the batch dimension in an architecture's input shapes
TEXT_SEQ = 128
#: the DLRM model's embedding tables (rows of 64 floats: 98.8 MB in all) and indices per sample and table
DLRM_TABLES = (200_000, 100_000, 50_000, 20_000, 10_000, 5_000, 1_000, 100)
DLRM_BAG = 4
_SUITE = "graphsub.bench.suite"


@dataclass(frozen=True)
class Arch:
    """One architecture: how to build it (``factory`` ``module:function`` called with ``config`` after seeding) and
    what it takes (``inputs``: specs whose shapes hold :data:`BATCH` for the batch dimension)."""

    name: str
    family: str  # transformer | cnn | rnn
    source: str  # what a user calls to get it
    factory: str
    config: dict[str, Any] = field(hash=False)
    inputs: tuple[dict[str, Any], ...] = field(hash=False)
    batches: tuple[int, ...]
    seq: int | None = None
    transformer: dict[str, Any] | None = field(default=None, hash=False)  # model_type, num_heads, hidden_size
    attention: str | None = None  # for torch's own modules; Hugging Face models record theirs at export
    seed: int = 0

    def input_specs(self, batch: int) -> tuple[dict[str, Any], ...]:
        """The input specs at ``batch`` (the placeholder replaced)."""
        return tuple({**s, "shape": [batch if d == BATCH else d for d in s["shape"]]} for s in self.inputs)

    def module(self) -> Any:
        """The seeded PyTorch module in eval mode (imports torch and, for Hugging Face models, transformers)."""
        from graphsub.bench.suite.export import build_module

        return build_module(self.factory, self.config, self.seed)


@dataclass(frozen=True)
class SuiteModel:
    """One exported model of the suite (an entry of the manifest, ``path`` absolute)."""

    id: str
    path: Path
    arch: str
    family: str
    exporter: str  # torchscript | dynamo
    batch: int
    transformer: dict[str, Any] | None = field(hash=False)
    inputs: tuple[dict[str, Any], ...] = field(hash=False)
    seq: int | None = None
    source: str = ""
    attention: str | None = None
    opset: int = 0
    ops: int = 0
    size: int = 0

    @property
    def half(self) -> Half:
        """The suite half of its architecture (:func:`graphsub.bench.suite.halves.half`)."""
        return half(self.arch)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any], root: Path) -> SuiteModel:
        return cls(id=entry["id"], path=root / entry["path"], arch=entry["arch"], family=entry["family"],
                   exporter=entry["exporter"], batch=entry["batch"], transformer=entry["transformer"],
                   inputs=tuple(entry["inputs"]), seq=entry["seq"], source=entry["source"],
                   attention=entry["attention"], opset=entry["opset"], ops=entry["ops"], size=entry["size"])


# ----------------------------------------------------------------------------------------------- the catalog
def _ids(name: str, high: int, seq: int = TEXT_SEQ) -> dict[str, Any]:
    return {"name": name, "dtype": "int64", "shape": [BATCH, seq], "low": 0, "high": high}


def _mask(seq: int = TEXT_SEQ) -> dict[str, Any]:
    return {**_ids("attention_mask", 2, seq), "role": "attention_mask"}


def _floats(name: str, *dims: int) -> dict[str, Any]:
    return {"name": name, "dtype": "float32", "shape": [BATCH, *dims]}


def _hf(name: str, cls: str, config: dict[str, Any], inputs: Sequence[dict[str, Any]], seq: int | None,
        model_type: str | None, heads: int = 0, hidden: int = 0, *, module: str = "models",
        batches: tuple[int, ...] = (1, 8), family: str = "transformer") -> Arch:
    """A Hugging Face model (factory ``<module>:<name>``); ``model_type`` None: no transformer metadata (heads and
    hidden 0: the optimizer detects them from the graph, for models whose stages differ)."""
    transformer = None if model_type is None else {"model_type": model_type, "num_heads": heads,
                                                    "hidden_size": hidden}
    return Arch(name, family, f"transformers.{cls}", f"{_SUITE}.{module}:{name}",
                {"inputs": [s["name"] for s in inputs], **config}, tuple(inputs), batches, seq, transformer)


def _torch(name: str, family: str, source: str, config: dict[str, Any], inputs: Sequence[dict[str, Any]],
           transformer: dict[str, Any] | None = None, attention: str | None = None) -> Arch:
    return Arch(name, family, source, f"{_SUITE}.models:{name}", config, tuple(inputs), (1, 8), TEXT_SEQ,
                transformer, attention)


def _cnn(name: str, fn: str, config: dict[str, Any] | None = None, image: int = 224, calibrate: bool = True,
         module: str = "tv_models", tv_fn: str | None = None) -> Arch:
    """A torchvision-structure CNN (``tv_fn``: torchvision's function, default ``fn``); BatchNorm statistics
    calibrated on random images (:mod:`.tv_models`)."""
    config = {**(config or {}), **({"calibrate_image": image} if calibrate else {})}
    return Arch(name, "cnn", f"torchvision.models.{tv_fn or fn}() (structure, {_SUITE}.{module})",
                f"{_SUITE}.{module}:{fn}", config, (_floats("input", 3, image, image),), (1, 4))


_ENC = {"model_type": "bert", "num_heads": 4, "hidden_size": 256}  # torch's encoders: the optimizer's generic type
_LM = {"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256, "max_position_embeddings": 512,
       "use_cache": False}  # the decoder-only LMs' common size (their FFN: 1024)
_MORE = "models_more"

#: The architectures added after the split into halves (:mod:`.halves`: held-out unless listed there).  Decoder
#: LMs and encoders: hidden 256, 4 layers, 4 heads, FFN 1024, sequence 128; images at 224 (MobileViT at its 256);
#: the two vocabularies over 100k are cut to 32000 (Qwen2's 151936, DeBERTa-v3's 128100) to keep the files small.
ADDED: tuple[Arch, ...] = (
    _hf("llama", "LlamaModel", {**_LM, "intermediate_size": 1024, "num_key_value_heads": 2, "vocab_size": 32000},
        [_ids("input_ids", 32000), _mask()], TEXT_SEQ, "gpt2", 4, 256, module=_MORE),
    _hf("qwen2", "Qwen2Model", {**_LM, "intermediate_size": 1024, "num_key_value_heads": 2, "vocab_size": 32000},
        [_ids("input_ids", 32000), _mask()], TEXT_SEQ, "gpt2", 4, 256, module=_MORE),
    _hf("opt", "OPTModel", {**_LM, "ffn_dim": 1024, "word_embed_proj_dim": 256, "vocab_size": 50272},
        [_ids("input_ids", 50272), _mask()], TEXT_SEQ, "gpt2", 4, 256, module=_MORE),
    _hf("gpt_neox", "GPTNeoXModel", {**_LM, "intermediate_size": 1024, "rotary_pct": 0.25, "vocab_size": 50432},
        [_ids("input_ids", 50432), _mask()], TEXT_SEQ, "gpt_neox", 4, 256, module=_MORE),
    _hf("phi", "PhiModel", {**_LM, "intermediate_size": 1024, "partial_rotary_factor": 0.5,
                            "vocab_size": 51200},
        [_ids("input_ids", 51200), _mask()], TEXT_SEQ, "phi", 4, 256, module=_MORE),
    _hf("bart", "BartModel", {"d_model": 256, "encoder_layers": 4, "decoder_layers": 4, "encoder_attention_heads": 4,
                              "decoder_attention_heads": 4, "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024,
                              "vocab_size": 50265, "max_position_embeddings": 512, "use_cache": False},
        [_ids("input_ids", 50265), _mask(), _ids("decoder_input_ids", 50265)], TEXT_SEQ, "bart", 4, 256,
        module=_MORE),
    _hf("swin", "SwinModel", {"image_size": 224, "patch_size": 4, "embed_dim": 96, "depths": [2, 2, 6, 2],
                              "num_heads": [3, 6, 12, 24], "window_size": 7},  # Swin-T
        [_floats("pixel_values", 3, 224, 224)], 49, "swin", module=_MORE, batches=(1, 4)),
    _hf("mobilevit", "MobileViTModel", {"image_size": 256, "calibrate_image": 256},  # MobileViT-S (the defaults)
        [_floats("pixel_values", 3, 256, 256)], None, "vit", module=_MORE, batches=(1, 4)),
    # LeViT-128 (the defaults), BatchNorm statistics jittered around their init (models_more.jitter_batchnorms):
    # calibrated ones (as for MobileViT) grow its residual stream to ~1e3, where the batch-4 exports miss the check
    _hf("levit", "LevitModel", {"image_size": 224, "batchnorm_noise": 0.02},
        [_floats("pixel_values", 3, 224, 224)], None, "vit", module=_MORE, batches=(1, 4)),
    _hf("segformer", "SegformerModel", {"image_size": 224},  # MiT-b0 (the config's defaults), the encoder
        [_floats("pixel_values", 3, 224, 224)], None, "vit", module=_MORE, batches=(1, 4)),
    _hf("convnextv2", "ConvNextV2Model", {"depths": [2, 2, 6, 2], "hidden_sizes": [40, 80, 160, 320]},  # Atto
        [_floats("pixel_values", 3, 224, 224)], None, None, module=_MORE, batches=(1, 4), family="cnn"),
    _hf("wav2vec2", "Wav2Vec2Model", {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                                      "intermediate_size": 1024},  # the base model's feature encoder (7 convs, 512)
        [_floats("input_values", 16000)], 49, "bert", 4, 256, module=_MORE),
    _hf("deberta_v2", "DebertaV2Model", {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                                         "intermediate_size": 1024, "vocab_size": 32000, "type_vocab_size": 0,
                                         "max_position_embeddings": 512, "relative_attention": True,
                                         "position_buckets": 256, "norm_rel_ebd": "layer_norm",
                                         "share_att_key": True, "pos_att_type": ["p2c", "c2p"],
                                         "position_biased_input": False},  # DeBERTa-v3's attention settings
        [_ids("input_ids", 32000), _mask()], TEXT_SEQ, "bert", 4, 256, module=_MORE),
    _hf("convbert", "ConvBertModel", {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                                      "intermediate_size": 1024, "vocab_size": 30522, "embedding_size": 256,
                                      "head_ratio": 2, "conv_kernel_size": 9},
        [_ids("input_ids", 30522), _mask(), _ids("token_type_ids", 2)], TEXT_SEQ, "bert", 4, 256, module=_MORE),
    _cnn("densenet121", "densenet", module="tv_models_more", tv_fn="densenet121"),
    _cnn("shufflenet_v2_x1_0", "shufflenet_v2", module="tv_models_more", tv_fn="shufflenet_v2_x1_0"),
    Arch("dlrm", "recsys", "DLRM (facebookresearch/dlrm DLRM_Net structure, nn.EmbeddingBag)",
         f"{_SUITE}.{_MORE}:dlrm", {"dense_features": 13, "tables": list(DLRM_TABLES), "dim": 64,
                                    "bottom": [512, 256], "top": [512, 256]},
         (_floats("dense", 13), *(_ids(f"sparse_{i}", n, DLRM_BAG) for i, n in enumerate(DLRM_TABLES))), (1, 8)),
)

#: The suite's architectures by name (hidden 256, 4 heads, FFN 1024, sequence 128 for text): the 15 of the development
#: half, then :data:`ADDED`.
ARCHITECTURES: dict[str, Arch] = {a.name: a for a in (
    _hf("bert", "BertModel", {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                              "intermediate_size": 1024, "vocab_size": 30522, "max_position_embeddings": 512},
        [_ids("input_ids", 30522), _mask(), _ids("token_type_ids", 2)], TEXT_SEQ, "bert", 4, 256),
    _hf("distilbert", "DistilBertModel", {"dim": 256, "n_layers": 4, "n_heads": 4, "hidden_dim": 1024,
                                          "vocab_size": 30522, "max_position_embeddings": 512},
        [_ids("input_ids", 30522), _mask()], TEXT_SEQ, "bert", 4, 256),
    _hf("gpt2", "GPT2Model", {"n_embd": 256, "n_layer": 4, "n_head": 4, "n_inner": 1024, "vocab_size": 50257,
                              "n_positions": 1024, "use_cache": False},
        [_ids("input_ids", 50257), _mask()], TEXT_SEQ, "gpt2", 4, 256),
    _hf("vit", "ViTModel", {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                            "intermediate_size": 1024, "image_size": 224, "patch_size": 16},
        [_floats("pixel_values", 3, 224, 224)], 197, "vit", 4, 256),
    _hf("t5_encoder", "T5EncoderModel", {"d_model": 256, "d_kv": 64, "d_ff": 1024, "num_layers": 4, "num_heads": 4,
                                         "vocab_size": 32128},
        [_ids("input_ids", 32128), _mask()], TEXT_SEQ, "t5", 4, 256),
    _hf("whisper_encoder", "WhisperModel(...).encoder (WhisperEncoder)",
        {"d_model": 256, "encoder_layers": 4, "encoder_attention_heads": 4, "encoder_ffn_dim": 1024,
         "decoder_layers": 1, "num_mel_bins": 80, "max_source_positions": 150},
        [_floats("input_features", 80, 300)], 150, "bart", 4, 256),
    _torch("transformer_encoder", "transformer", "torch.nn.TransformerEncoder",
           {"d_model": 256, "nhead": 4, "dim_feedforward": 1024, "num_layers": 3}, [_floats("src", TEXT_SEQ, 256)],
           _ENC, "torch.nn.MultiheadAttention (TransformerEncoderLayer)"),
    _torch("mha_block", "transformer", "torch.nn.MultiheadAttention (pre-norm block)",
           {"d_model": 256, "nhead": 4, "dim_feedforward": 1024}, [_floats("x", TEXT_SEQ, 256)], _ENC,
           "torch.nn.MultiheadAttention (need_weights=True)"),
    _torch("lstm", "rnn", "torch.nn.LSTM", {"input_size": 128, "hidden_size": 256, "num_layers": 2},
           [_floats("x", TEXT_SEQ, 128)]),
    _torch("gru", "rnn", "torch.nn.GRU", {"input_size": 128, "hidden_size": 256, "num_layers": 2},
           [_floats("x", TEXT_SEQ, 128)]),
    _cnn("resnet50", "resnet"),
    _cnn("mobilenet_v3_large", "mobilenet_v3_large"),
    _cnn("efficientnet_b0", "efficientnet_b0"),
    _cnn("convnext_tiny", "convnext_tiny", calibrate=False),  # LayerNorm only
    _cnn("regnet_y_400mf", "regnet_y_400mf"),
    *ADDED,
)}


def small_architectures() -> dict[str, Arch]:
    """The tiny architectures of :func:`small_suite` by name (tiny BERT only where transformers is importable)."""
    archs = [
        Arch("tiny_encoder", "transformer", "torch.nn.TransformerEncoder", f"{_SUITE}.models:transformer_encoder",
             {"d_model": 32, "nhead": 2, "dim_feedforward": 64, "num_layers": 1}, (_floats("src", 16, 32),), (2,),
             16, {"model_type": "bert", "num_heads": 2, "hidden_size": 32}),
        Arch("tiny_lstm", "rnn", "torch.nn.LSTM", f"{_SUITE}.models:lstm",
             {"input_size": 16, "hidden_size": 32, "num_layers": 1}, (_floats("x", 16, 16),), (2,), 16),
        _cnn("tiny_resnet", "resnet", {"layers": [1, 1, 1, 1], "width": 8, "num_classes": 10}, image=64),
    ]
    if importlib.util.find_spec("transformers") is not None:
        archs.append(Arch("tiny_bert", "transformer", "transformers.BertModel", f"{_SUITE}.models:bert",
                          {"inputs": ["input_ids", "attention_mask"], "hidden_size": 32, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 1000,
                           "max_position_embeddings": 64},
                          (_ids("input_ids", 1000, 16), _mask(16)), (2,), 16,
                          {"model_type": "bert", "num_heads": 2, "hidden_size": 32}))
    return {a.name: a for a in archs}


# -------------------------------------------------------------------------------------------------- inputs
def example_inputs(specs: Sequence[Mapping[str, Any]], seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for ``specs`` (see :func:`graphsub.bench.suite.measure.make_feeds`: attention masks right-padded)."""
    return make_feeds(specs, seed)


# ------------------------------------------------------------------------------------------------ the folder
def suite_dir() -> Path:
    """The folder the suite owns: ``$GRAPHSUB_SUITE_DIR`` or ``~/.cache/graphsub/suite``."""
    env = os.environ.get("GRAPHSUB_SUITE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "graphsub" / "suite"


def model_id(arch: str, exporter: str, batch: int) -> str:
    """``<arch>.<ts|dynamo>.b<batch>``."""
    return f"{arch}.{EXPORTER_TAGS[exporter]}.b{batch}"


def versions() -> dict[str, str | None]:
    """The installed versions of the packages an export depends on (None where not installed)."""
    out: dict[str, str | None] = {}
    for pkg in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of ``root`` (an empty one where there is none)."""
    path = root / MANIFEST
    if not path.exists():
        return {"format": FORMAT, "models": [], "failures": []}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _write_manifest(root: Path, models: Mapping[str, dict[str, Any]], failures: Mapping[str, dict[str, Any]]) -> None:
    data = {"format": FORMAT, "models": [models[k] for k in sorted(models)],
            "failures": [failures[k] for k in sorted(failures)]}
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, root / MANIFEST)


def load_suite(out_dir: Path | None = None) -> list[SuiteModel]:
    """The exported models listed in the manifest of ``out_dir`` (default :func:`suite_dir`), sorted by id."""
    root = Path(out_dir) if out_dir is not None else suite_dir()
    return [SuiteModel.from_entry(e, root) for e in read_manifest(root)["models"]]


def load_failures(out_dir: Path | None = None) -> list[dict[str, Any]]:
    """The failed exports recorded in the manifest: ``{id, arch, exporter, batch, stage, error, ...}``."""
    root = Path(out_dir) if out_dir is not None else suite_dir()
    return list(read_manifest(root)["failures"])


# ------------------------------------------------------------------------------------------------- building
@dataclass(frozen=True)
class _Job:
    arch: Arch
    exporter: str
    batch: int

    @property
    def id(self) -> str:
        return model_id(self.arch.name, self.exporter, self.batch)

    def key(self, vers: Mapping[str, str | None]) -> str:
        a = self.arch
        text = json.dumps([FORMAT, a.factory, _source_hash(a.factory), a.config, a.seed, a.inputs, self.exporter,
                           self.batch, dict(vers)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _source_hash(factory: str) -> str:
    """A hash of the source file that defines ``factory`` (an edited module rebuilds its models), without importing
    it."""
    spec = importlib.util.find_spec(factory.partition(":")[0])
    origin = spec.origin if spec is not None else None
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:16] if origin else ""


def _cached(job: _Job, key: str, root: Path, models: Mapping[str, dict[str, Any]],
            failures: Mapping[str, dict[str, Any]]) -> bool:
    entry = models.get(job.id)
    if entry is not None and entry["key"] == key:
        path = root / entry["path"]
        return path.exists() and path.stat().st_size == entry["size"]
    fail = failures.get(job.id)
    return fail is not None and fail["key"] == key


def _export_job(job: _Job, key: str, root: Path, vers: Mapping[str, str | None]) -> tuple[bool, dict[str, Any]]:
    """Build, export and check one job: (True, manifest entry) or (False, failure entry)."""
    from graphsub.bench.suite.export import ExportFailure, export_checked, short_error

    a, specs = job.arch, job.arch.input_specs(job.batch)
    base = {"id": job.id, "arch": a.name, "exporter": job.exporter, "batch": job.batch, "key": key,
            "versions": dict(vers)}
    t0 = time.perf_counter()
    try:
        module = a.module()
    except Exception as e:  # a factory that does not build is recorded like an export failure
        return False, {**base, "stage": "build", "error": short_error(e)}
    rel = f"{job.id}.onnx"
    try:
        info = export_checked(module, example_inputs(specs), root / rel, job.exporter)
    except ExportFailure as e:
        return False, {**base, "stage": e.stage, "error": e.reason}
    attention = getattr(module, "attn_implementation", None) or a.attention
    return True, {
        **base, "path": rel, "family": a.family, "source": a.source, "factory": a.factory, "config": a.config,
        "seed": a.seed, "attention": attention, "transformer": a.transformer, "seq": a.seq, "inputs": list(specs),
        "outputs": list(info.outputs), "opset": info.opset, "ops": info.ops, "op_types": info.op_types,
        "size": info.size, "max_abs_err": info.max_abs_err, "ref_scale": info.ref_scale,
        "export_s": round(time.perf_counter() - t0, 2),
    }


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[str, bool], None]]:
    """A rich progress bar over ``total`` jobs; yields ``step(description, advance)``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not enabled, transient=False) as bar:
        task = bar.add_task("suite", total=total)

        def step(desc: str, advance: bool) -> None:
            bar.update(task, description=desc, advance=1 if advance else 0)

        yield step


def _build(jobs: Sequence[_Job], root: Path, progress: bool) -> list[SuiteModel]:
    """Run ``jobs`` not already cached in ``root``; returns the jobs' models that exported (in job order)."""
    root.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(root)
    models = {e["id"]: e for e in manifest["models"]}
    failures = {f["id"]: f for f in manifest["failures"]}
    vers = versions()
    with _progress(progress, len(jobs)) as step:
        for job in jobs:
            key = job.key(vers)
            if _cached(job, key, root, models, failures):
                step(f"{job.id} (cached)", True)
                continue
            step(job.id, False)
            ok, entry = _export_job(job, key, root, vers)
            if ok:
                models[job.id] = entry
                failures.pop(job.id, None)
            else:
                failures[job.id] = entry
                models.pop(job.id, None)
            _write_manifest(root, models, failures)
            step(job.id if ok else f"{job.id} failed", True)
    return [SuiteModel.from_entry(models[j.id], root) for j in jobs if j.id in models]


def build_suite(out_dir: Path | None = None, archs: Sequence[str] | None = None,
                exporters: Sequence[str] = ("torchscript", "dynamo"), batches: Sequence[int] | None = None,
                progress: bool = True) -> list[SuiteModel]:
    """Export ``archs`` (default: all of :data:`ARCHITECTURES`) with ``exporters`` at ``batches`` (default: each
    architecture's own, batch 1 and 8 for text and RNNs, 1 and 4 for CNNs) into ``out_dir`` (default
    :func:`suite_dir`), skipping what is cached; returns the exported models (failures go to the manifest)."""
    names = list(archs) if archs is not None else list(ARCHITECTURES)
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        raise KeyError(f"unknown architectures {unknown}; known: {', '.join(ARCHITECTURES)}")
    bad = [e for e in exporters if e not in EXPORTER_TAGS]
    if bad:
        raise ValueError(f"unknown exporters {bad}; known: {', '.join(EXPORTER_TAGS)}")
    jobs = [_Job(ARCHITECTURES[n], e, b) for n in names for e in exporters
            for b in (batches if batches is not None else ARCHITECTURES[n].batches)]
    return _build(jobs, Path(out_dir) if out_dir is not None else suite_dir(), progress)


def small_suite(out_dir: Path) -> list[SuiteModel]:
    """A handful of tiny models for the default tests, at batch 2: a 1-layer ``nn.TransformerEncoder`` (d 32), a
    tiny ``nn.LSTM``, a tiny ResNet in torchvision's structure and, where transformers is importable, a 1-layer
    BERT, all exported with TorchScript; the ResNet also with dynamo."""
    small = small_architectures()
    jobs = [_Job(a, "torchscript", 2) for a in small.values()]
    jobs.insert(3, _Job(small["tiny_resnet"], "dynamo", 2))
    return _build(jobs, Path(out_dir), progress=False)


__all__ = [
    "ADDED", "ARCHITECTURES", "BATCH", "Arch", "SuiteModel", "build_suite", "example_inputs", "load_failures",
    "load_suite", "model_id", "read_manifest", "small_architectures", "small_suite", "suite_dir", "versions",
]
