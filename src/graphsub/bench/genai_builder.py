"""onnxruntime-genai's model builder as a peer of the decoder exports: a Hugging Face folder written from a config
(random weights from a fixed seed, a word-level tokenizer; nothing downloaded), the builder run on it as its users
run it (``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p fp32 -e cpu``), and its model checked in
plain onnxruntime against the PyTorch model at the same weights.

* :func:`hf_folder` writes the folder (``save_pretrained``) for a model type of :data:`ARCHITECTURES`, with
  :data:`TINY` as the defaults of its config and ``trained_like`` biases and norm scales
  (:func:`graphsub.bench.suite.export.trained_like`); :func:`save_folder` writes one for a model already built
  (the decoders' own, so that the builder and the plain export share their weights); its tokenizer maps token
  ``i`` to ``"t{i}"``, with ``t0`` the padding and unknown token, ``t1`` BOS and ``t2`` EOS (:data:`SPECIAL`),
  which the builder copies into ``genai_config.json``.
* :func:`build` runs the builder in a subprocess (any interpreter where ``onnxruntime_genai`` is installed;
  offline; its own cache folder) and returns a :class:`BuilderModel`: the model file, its ``genai_config.json`` and
  the graph's input and output names; a failure is :class:`BuilderFailed` with the builder's last lines.
* :func:`verify` runs one prefill and greedy decode steps of the built model in an ``onnxruntime.InferenceSession``
  (the onnxruntime-genai runtime is not needed) and the same greedy loop in PyTorch, and returns a
  :class:`Verification`: the two token sequences and the largest logit differences.

The builder supports decoder families by their ``architectures[0]`` (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma
and others); GPT-2 is not among them (``NotImplementedError: ... not currently supported``).  It finds the LM head
as the first ``Linear`` as wide as the vocabulary, so a config with a projection of that width (vocabulary 256 with
4 heads of 64) builds a wrong model: :func:`hf_folder` refuses those.

The builder's model (fp32, CPU; onnxruntime-genai 0.18), for ``L`` layers, ``H`` heads, ``K`` KV heads, head size
``D``, vocabulary ``V``:

* inputs ``input_ids`` int64 ``[batch, sequence_length]``; ``attention_mask`` int64 ``[batch,
  total_sequence_length]``, the mask of the *whole* sequence (past and new tokens), from which the graph derives
  GroupQueryAttention's ``seqlens_k`` (row sums minus one) and ``total_sequence_length`` (its width); then
  ``past_key_values.{i}.key`` and ``past_key_values.{i}.value`` float ``[batch, K, past_sequence_length, D]``
  (BNSH), ``past_sequence_length`` 0 at the prefill;
* outputs ``logits`` float ``[batch, sequence_length, V]`` and ``present.{i}.key`` / ``present.{i}.value``
  ``[batch, K, total_sequence_length, D]``: the past with the new tokens appended (the genai runtime instead shares
  one buffer of the context length between past and present: ``past_present_share_buffer`` in the config; run
  directly, a past of exactly the previous length is concatenated);
* no ``position_ids``: GroupQueryAttention applies the rotary embedding itself (``do_rotary``, its ``cos_cache`` /
  ``sin_cache`` of ``max_position_embeddings`` rows) at positions ``seqlens_k - sequence_length + 1`` onwards, so
  a row's tokens sit at positions 0.. of its unmasked length: right padding only, as the genai runtime feeds it;
* per layer: one fused QKV MatMul (with an Add for Qwen2's biases), GroupQueryAttention (com.microsoft, causal,
  the cache and rotary inside), the output MatMul, SkipSimplifiedLayerNormalization joining residual and norm, and
  the MLP as MatMuls with SiLU written as Sigmoid and Mul (Qwen3 adds its per-head q/k norms: Reshape,
  SimplifiedLayerNormalization); the tiny Llama of :data:`TINY` has 33 nodes, at 4 layers 55.

>>> sorted(ARCHITECTURES)
['llama', 'mistral', 'qwen2', 'qwen3']
>>> BuilderModel(Path("m.onnx"), {"model": {"decoder": {"num_hidden_layers": 2}}}, (), ()).layers
2
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.errors import GraphsubError

#: the model types :func:`hf_folder` writes: ``model_type -> architectures[0]``, all of which the builder supports
ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
#: the defaults of :func:`hf_folder`'s config: a tiny decoder (2 layers, hidden 64, 4 heads, 2 KV heads)
TINY: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}
#: the tokenizer's special tokens (``t0``, ``t1``, ``t2``), also the config's ids; ordinary tokens follow them
SPECIAL: dict[str, int] = {"pad": 0, "bos": 1, "eos": 2}
FIRST_ORDINARY = 3
BUILDER = "onnxruntime_genai.models.builder"
BUILD_TIMEOUT_S = 600.0
_TAIL_LINES = 15  # of the builder's output, in the message of a failure


class BuilderFailed(GraphsubError):
    """onnxruntime-genai's builder failed, timed out, or wrote no model (the message ends with its last lines)."""


@dataclass(frozen=True)
class BuilderModel:
    """What :func:`build` wrote: the model file, its ``genai_config.json`` (parsed) and the graph's I/O names."""

    model: Path
    genai_config: dict[str, Any] = field(hash=False)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def decoder(self) -> dict[str, Any]:
        """The ``model.decoder`` section of the config (sizes and I/O name patterns)."""
        decoder: dict[str, Any] = self.genai_config["model"]["decoder"]
        return decoder

    @property
    def layers(self) -> int:
        return int(self.decoder["num_hidden_layers"])


@dataclass(frozen=True)
class Verification:
    """The built model's greedy run against PyTorch's: token ids of both (prompt excluded), the largest absolute
    logit difference over the prefill's positions and over each generated token's logits (while the two sequences
    agree), and the tolerance ``atol`` those are held to."""

    reference: tuple[int, ...]
    builder: tuple[int, ...]
    prefill_diff: float
    step_diffs: tuple[float, ...]
    atol: float

    @property
    def max_diff(self) -> float:
        return max((self.prefill_diff, *self.step_diffs))

    @property
    def ok(self) -> bool:
        """Same tokens, and every logit within ``atol``."""
        return self.reference == self.builder and self.max_diff <= self.atol


# ----------------------------------------------------------------------------------------------- the folder
def hf_folder(model_type: str, config_overrides: dict[str, Any] | None, seed: int, folder: Path) -> Path:
    """Write a Hugging Face folder for ``model_type`` (a key of :data:`ARCHITECTURES`): its config is :data:`TINY`
    updated with ``config_overrides``, its weights random from ``torch.manual_seed(seed)`` with ``trained_like``
    one-dimensional parameters, saved with ``save_pretrained`` beside a word-level tokenizer over the vocabulary.
    Returns ``folder``."""
    import torch
    import transformers

    from graphsub.bench.suite.export import trained_like

    if model_type not in ARCHITECTURES:
        raise ValueError(f"unknown model type {model_type!r}; known: {', '.join(sorted(ARCHITECTURES))}")
    settings = {**TINY, **(config_overrides or {}), **{f"{k}_token_id": v for k, v in SPECIAL.items()}}
    settings.setdefault("head_dim", settings["hidden_size"] // settings["num_attention_heads"])  # Qwen3's is 128
    config = transformers.AutoConfig.for_model(model_type, architectures=[ARCHITECTURES[model_type]], **settings)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(config)
    trained_like(model)
    return save_folder(model, folder)


def save_folder(model: Any, folder: Path) -> Path:
    """Write the transformers causal LM ``model`` (its weights as they are) into ``folder`` as the builder reads it:
    ``save_pretrained`` beside :func:`write_tokenizer`'s tokenizer over its vocabulary, after :func:`_check_lm_head`
    (ValueError for a config the builder would misread).  Returns ``folder``.  What :func:`hf_folder` ends with, and
    how the decoders' own models (:mod:`graphsub.bench.decoders`) reach the builder at the plain export's weights."""
    vocab = int(model.config.vocab_size)
    _check_lm_head(model, vocab)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_tokenizer(folder, vocab)
    return folder


def _check_lm_head(model: Any, vocab_size: int) -> None:
    """Refuse a model with a projection as wide as the vocabulary besides its LM head: the builder takes the first
    ``Linear`` with ``out_features == vocab_size`` it meets for the head (``has_lm_head``) and feeds the logits from
    the norm before it (a tiny config's artefact: ``vocab_size`` 256 and 4 heads of 64)."""
    import torch

    wide = [name for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m.out_features == vocab_size and name != "lm_head"]
    if wide:
        raise ValueError(f"vocab_size {vocab_size} equals the width of {wide[0]} (and {len(wide) - 1} more): "
                         "onnxruntime-genai's builder would take it for the LM head")


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """A word-level tokenizer (whitespace-split) mapping ``"t{i}"`` to ``i`` for ``i < vocab_size``, with the
    special tokens of :data:`SPECIAL`, saved into ``folder`` as a fast tokenizer (``tokenizer.json`` and its
    config: what the builder's ``AutoTokenizer.from_pretrained`` reads)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    special = {f"{k}_token": f"t{v}" for k, v in SPECIAL.items()}
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", **special).save_pretrained(folder)


# ----------------------------------------------------------------------------------------------- the builder
def available(python: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``onnxruntime_genai`` is importable by ``python`` (default: this interpreter)."""
    if python is None:
        return importlib.util.find_spec("onnxruntime_genai") is not None
    probe = [os.fspath(python), "-c", "import onnxruntime_genai"]
    return subprocess.run(probe, capture_output=True, timeout=120, check=False).returncode == 0


def builder_command(folder: Path, out: Path, precision: str, provider: str, cache: Path,
                    python: str | os.PathLike[str] | None = None) -> list[str]:
    """The builder's command line, as its README gives it, with its cache folder ``cache``.

    >>> builder_command(Path("hf"), Path("out"), "fp32", "cpu", Path("c"), "py")[1:]
    ['-m', 'onnxruntime_genai.models.builder', '-i', 'hf', '-o', 'out', '-p', 'fp32', '-e', 'cpu', '-c', 'c']
    """
    return [os.fspath(python or sys.executable), "-m", BUILDER, "-i", str(folder), "-o", str(out),
            "-p", precision, "-e", provider, "-c", str(cache)]


def build(folder: Path, out: Path, precision: str = "fp32", provider: str = "cpu",
          python: str | os.PathLike[str] | None = None, timeout_s: float = BUILD_TIMEOUT_S) -> BuilderModel:
    """Run the builder on the Hugging Face ``folder`` into ``out`` with ``python`` (default: this interpreter;
    another one, e.g. a virtual environment of its own, for an onnxruntime-genai that cannot live beside graphsub's
    pins), offline (``HF_HUB_OFFLINE``), in a subprocess limited to ``timeout_s``.  Raises :class:`BuilderFailed`
    when it exits non-zero, runs out of time or writes no ``model.onnx``."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="genai-cache-") as cache:
        command = builder_command(folder, out, precision, provider, Path(cache), python)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cache,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as e:
            raise BuilderFailed(f"{BUILDER} on {folder}: no result after {timeout_s:.0f} s") from e
    if done.returncode != 0:
        raise BuilderFailed(f"{BUILDER} on {folder} exited {done.returncode}:\n{_tail(done.stderr or done.stdout)}")
    return read_output(out)


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-_TAIL_LINES:])


def read_output(out: Path) -> BuilderModel:
    """The :class:`BuilderModel` in the builder's output folder ``out`` (:class:`BuilderFailed` when its model or
    config is missing)."""
    config_path = out / "genai_config.json"
    if not config_path.is_file():
        raise BuilderFailed(f"{out}: the builder wrote no genai_config.json")
    config = json.loads(config_path.read_text())
    model = out / config["model"]["decoder"].get("filename", "model.onnx")
    if not model.is_file():
        raise BuilderFailed(f"{out}: the builder wrote no {model.name}")
    inputs, outputs = io_names(model)
    return BuilderModel(model, config, inputs, outputs)


def io_names(model: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The graph's input and output names (the weights in external data are not read)."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return tuple(i.name for i in graph.input), tuple(o.name for o in graph.output)


#: a built model with more bytes than this keeps its weights beside it (:func:`inline`; protobuf's limit is 2 GB)
INLINE_MAX_BYTES = 1 << 30


def inline(model: Path, dst: Path) -> Path:
    """The built model saved again as one file ``dst``, its weights inline (the builder writes them beside it, in
    ``model.onnx.data``; a small model then travels and is inspected as one file).  Returns ``dst``, or ``model``
    itself when its files hold more than :data:`INLINE_MAX_BYTES`."""
    import onnx

    from graphsub.frontends.onnx_io import file_bytes

    if file_bytes(model) > INLINE_MAX_BYTES:
        return model
    onnx.save(onnx.load(str(model)), str(dst))
    return dst


def op_histogram(model: Path) -> dict[str, int]:
    """How many nodes of each op type the graph has, most frequent first."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return dict(Counter(n.op_type for n in graph.node).most_common())


# ----------------------------------------------------------------------------------------------- verification
def verify(built: BuilderModel, folder: Path, prompt_len: int = 8, steps: int = 8, seed: int = 0,
           atol: float = 1e-4) -> Verification:
    """Greedy decoding of ``steps`` tokens after a random prompt of ``prompt_len`` ordinary tokens (batch 1, from
    ``seed``) by the built model in onnxruntime (a prefill, then one token per step through the cache) and by the
    PyTorch model loaded from ``folder`` (the whole sequence each step, no cache), compared token by token and
    logit by logit."""
    vocab = int(built.genai_config["model"]["vocab_size"])
    prompt = np.random.default_rng(seed).integers(FIRST_ORDINARY, vocab, size=prompt_len).tolist()
    ids_b, prefill_b, steps_b = greedy_onnx(built, prompt, steps)
    ids_r, prefill_r, steps_r = greedy_torch(folder, prompt, steps)
    agree = next((k for k, (a, b) in enumerate(zip(ids_b, ids_r, strict=True)) if a != b), steps)
    diffs = tuple(float(np.abs(steps_b[k] - steps_r[k]).max()) for k in range(min(agree + 1, steps)))
    return Verification(tuple(ids_r), tuple(ids_b), float(np.abs(prefill_b - prefill_r).max()), diffs, atol)


def greedy_onnx(built: BuilderModel, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray,
                                                                              list[np.ndarray]]:
    """The built model's greedy run in an ``onnxruntime.InferenceSession`` (CPU): the generated ids, the prefill's
    logits ``[prompt_len, V]`` and each generated token's logits ``[V]``."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(built.model), providers=["CPUExecutionProvider"])
    feeds = _empty_cache(session, built)
    tokens, new = list(prompt), list(prompt)
    runs: list[np.ndarray] = []  # each step's logits [new tokens, V]
    for _ in range(steps):
        feeds["input_ids"] = np.asarray([new], dtype=np.int64)
        feeds["attention_mask"] = np.ones((1, len(tokens)), dtype=_np_type(session, "attention_mask"))
        results = dict(zip(built.outputs, session.run(list(built.outputs), feeds), strict=True))
        runs.append(results["logits"][0].astype(np.float32))
        new = [int(runs[-1][-1].argmax())]
        tokens += new
        feeds.update(_next_cache(built, results))
    return tokens[len(prompt):], runs[0], [r[-1] for r in runs]


def _np_type(session: Any, name: str) -> np.dtype[Any]:
    """The numpy dtype of the session's input ``name`` (``tensor(float)`` -> float32)."""
    kinds = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32}
    spec = next(i for i in session.get_inputs() if i.name == name)
    return np.dtype(kinds[spec.type])


def _cache_names(built: BuilderModel, i: int) -> tuple[tuple[str, str], tuple[str, str]]:
    """Layer ``i``'s (past key, past value) and (present key, present value) names from the config's patterns."""
    ins, outs = built.decoder["inputs"], built.decoder["outputs"]
    past = (ins["past_key_names"] % i, ins["past_value_names"] % i)
    present = (outs["present_key_names"] % i, outs["present_value_names"] % i)
    return past, present


def _empty_cache(session: Any, built: BuilderModel) -> dict[str, np.ndarray]:
    """The prefill's past: ``[1, K, 0, D]`` per layer, key and value."""
    shape = (1, int(built.decoder["num_key_value_heads"]), 0, int(built.decoder["head_size"]))
    return {name: np.zeros(shape, dtype=_np_type(session, name))
            for i in range(built.layers) for name in _cache_names(built, i)[0]}


def _next_cache(built: BuilderModel, results: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The next step's past: this step's present."""
    return {past: results[present] for i in range(built.layers)
            for past, present in zip(*_cache_names(built, i), strict=True)}


def greedy_torch(folder: Path, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray, list[np.ndarray]]:
    """The PyTorch model of ``folder`` (``AutoModelForCausalLM.from_pretrained``, fp32, eval) decoding greedily
    without a cache: the generated ids, the prompt's logits and each generated token's logits, as
    :func:`greedy_onnx` returns them."""
    import torch
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokens = list(prompt)
    runs: list[np.ndarray] = []  # each step's logits [all tokens, V]
    with torch.no_grad():
        for _ in range(steps):
            runs.append(model(torch.tensor([tokens]), use_cache=False).logits[0].numpy())
            tokens.append(int(runs[-1][-1].argmax()))
    return tokens[len(prompt):], runs[0], [r[-1] for r in runs]


__all__ = [
    "ARCHITECTURES",
    "INLINE_MAX_BYTES",
    "SPECIAL",
    "TINY",
    "BuilderFailed",
    "BuilderModel",
    "Verification",
    "available",
    "build",
    "builder_command",
    "greedy_onnx",
    "greedy_torch",
    "hf_folder",
    "inline",
    "io_names",
    "op_histogram",
    "read_output",
    "save_folder",
    "verify",
    "write_tokenizer",
]
