"""Greedy generation with an ONNX decoder of the interface of :mod:`graphsub.bench.decoders` (:func:`greedy_generate`:
one prefill call, then one call per token, the presents fed back as the pasts, each call timed) and its PyTorch
reference (:func:`torch_greedy`)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphsub.bench.decoders.model import FlatCache, position_ids
from graphsub.frontends.ort import make_session, run_session


# ------------------------------------------------------------------------------------------------ generation
@dataclass(frozen=True)
class Generation:
    """What :func:`greedy_generate` produced: the new token ids and the seconds of each call (the prefill first)."""

    tokens: list[int]
    step_s: list[float]


def _empty_pasts(sess: Any, batch: int, head_dim: int | None = None) -> dict[str, np.ndarray]:
    """Past tensors of length 0 for every ``past_key_values.*`` input of ``sess`` (their fixed dims read from it;
    ``head_dim`` where the graph names that dimension, as the genai builder's ``kv_cache_dim``)."""
    out = {}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            dtype = np.float16 if i.type == "tensor(float16)" else np.float32
            last = i.shape[3] if isinstance(i.shape[3], int) else head_dim
            if last is None:
                raise ValueError(f"{i.name}: its last dimension is {i.shape[3]!r}; give head_dim")
            out[i.name] = np.zeros((batch, i.shape[1], 0, last), dtype=dtype)
    return out


def greedy_generate(path: Path | str, prompt: Sequence[int], new_tokens: int, *, threads: int | None = None,
                    optimization: str = "all", head_dim: int | None = None) -> Generation:
    """Greedy decoding of ``new_tokens`` tokens after ``prompt`` with the ONNX decoder at ``path`` (any graph with
    the interface of the module docstring, or without ``position_ids``, as the genai builder's; ``head_dim``: the
    cache's last dimension where the graph leaves it symbolic): one prefill call over the prompt (empty pasts), then
    one call per new token, the presents fed back as the pasts.  Each call is timed (``time.perf_counter``) around
    the session run."""
    sess = make_session(os.fspath(path), optimization=optimization, threads=threads)
    names = {i.name for i in sess.get_inputs()}
    outputs = [o.name for o in sess.get_outputs()]
    ids = np.asarray([list(prompt)], dtype=np.int64)
    state = _empty_pasts(sess, 1, head_dim)
    tokens: list[int] = []
    times: list[float] = []
    for _ in range(new_tokens):
        past = next(iter(state.values())).shape[2] if state else 0
        mask = np.ones((1, past + ids.shape[1]), dtype=np.int64)
        inputs = {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids(mask, ids.shape[1]),
                  **state}
        t0 = time.perf_counter()
        got = run_session(sess, {k: v for k, v in inputs.items() if k in names})
        times.append(time.perf_counter() - t0)
        res = dict(zip(outputs, got, strict=True))
        tokens.append(int(res["logits"][0, -1].argmax()))
        ids = np.asarray([[tokens[-1]]], dtype=np.int64)
        state = {n.replace("present.", "past_key_values.", 1): v for n, v in res.items() if n.startswith("present.")}
    return Generation(tokens, times)


def torch_greedy(module: FlatCache, prompt: Sequence[int], new_tokens: int) -> list[int]:
    """The reference of :func:`greedy_generate`: the same greedy loop on the PyTorch model with its own cache."""
    ids = torch.tensor([list(prompt)], dtype=torch.long)
    cache = None
    tokens: list[int] = []
    with torch.no_grad():
        for _ in range(new_tokens):
            out = module.model(input_ids=ids, cache=cache, use_cache=True)
            cache = out.cache
            tokens.append(int(out.logits[0, -1].argmax()))
            ids = torch.tensor([[tokens[-1]]], dtype=torch.long)
    return tokens


__all__ = ["Generation", "greedy_generate", "torch_greedy"]
