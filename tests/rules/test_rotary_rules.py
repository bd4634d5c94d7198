"""``ort_rotary_half`` and ``ort_rotary_interleaved`` (:mod:`graphsub.rules.library.rotary`, issue 55): a rotary
embedding as both PyTorch exporters write Hugging Face's ``rotate_half`` (heads (B, N, S, hd), Llama's layout), and as
the dynamo exporter writes GPT-J's ``rotate_every_two`` (heads (B, S, N, hd), rotated before the head transpose),
becomes onnxruntime's RotaryEmbedding kernel and computes the same, in graphsub's executor and in onnxruntime, for any
position ids; an embedding whose cos does not repeat its halves is left alone. (GroupQueryAttention taking the
kernel's rotation inside, ``ort_gqa_rotary_kernel``: ``tests/optimize/test_decoder_gqa.py``.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from graphsub.execute import run
from graphsub.frontends.onnx_io import load, to_onnx
from graphsub.frontends.ort import make_session, optimized_model, run_session
from graphsub.ir.graph import Graph
from graphsub.optimize.candidates import cleaned_start
from graphsub.rules.everywhere import rewrite_everywhere
from graphsub.rules.library.rotary import rules

B, S, N, HD = 2, 5, 3, 16


class _Rope(torch.nn.Module):
    """q rotated by each position's angles: ``rotate_half`` on (B, N, S, hd), or GPT-J's ``rotate_every_two`` on
    (B, S, N, hd) then the head transpose; ``broken`` makes cos's two halves differ (not a rotary embedding the kernel
    computes)."""

    def __init__(self, interleaved: bool, broken: bool = False) -> None:
        super().__init__()
        self.interleaved, self.broken = interleaved, broken
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD)), persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        freqs = position_ids[:, :, None].float() * self.inv_freq  # (B, S, hd/2)
        if self.interleaved:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)[:, :, None, :]  # (B, S, 1, hd)
            q = x.view(b, s, N, HD)
            x1, x2 = q[..., ::2], q[..., 1::2]
            rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
        else:
            emb = torch.cat((freqs, freqs * 1.5 if self.broken else freqs), dim=-1)[:, None]  # (B, 1, S, hd)
            q = x.view(b, s, N, HD).transpose(1, 2)
            rot = torch.cat((-q[..., HD // 2:], q[..., :HD // 2]), dim=-1)
        out = q * emb.cos() + rot * emb.sin()
        return out.transpose(1, 2) if self.interleaved else out


def _export(tmp: Path, interleaved: bool, exporter: str, broken: bool = False) -> Path:
    path = tmp / f"rope_{interleaved}_{exporter}_{broken}.onnx"
    args = (torch.randn(B, S, N * HD), torch.arange(S).repeat(B, 1))
    torch.onnx.export(_Rope(interleaved, broken), args, str(path), input_names=["x", "position_ids"],
                      output_names=["y"], dynamo=exporter == "dynamo", opset_version=18)
    return path


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"x": rng.standard_normal((B, S, N * HD)).astype(np.float32),
            "position_ids": rng.integers(0, 4096, (B, S)).astype(np.int64)}  # any positions, not 0..S-1


def _rewritten(path: Path) -> tuple[Graph, list[str]]:
    final, steps = rewrite_everywhere(cleaned_start(load(path))[0], rules())
    return final, [s.rule for s in steps]


#: GPT-J's rotation is not exported by TorchScript here: it writes ``stack(..., dim=-1)`` of these 4-D heads at axis 2
#: (torch 2.13), a different function (2.8 away from the module's output), which no rule should take
@pytest.mark.parametrize(("interleaved", "exporter"), [(False, "torchscript"), (False, "dynamo"), (True, "dynamo")])
def test_the_exporters_rotary_embedding_is_onnxruntimes_kernel(tmp_path: Path, interleaved: bool,
                                                              exporter: str) -> None:
    path = _export(tmp_path, interleaved, exporter)
    final, taken = _rewritten(path)
    assert taken == ["ort_rotary_interleaved" if interleaved else "ort_rotary_half"]
    ops = Counter(n.op for n in final.nodes.values())
    assert ops["ms_rotary"] == 1 and ops["neg"] == 0
    feeds = _feeds()
    want = run_session(make_session(str(path)), feeds)[0]
    np.testing.assert_allclose(next(iter(run(final, feeds).values())), want, rtol=1e-4, atol=1e-4)
    model = to_onnx(final)
    np.testing.assert_allclose(run_session(make_session(model), feeds)[0], want, rtol=1e-4, atol=1e-4)
    kernels = Counter(n.op_type for n in optimized_model(model.SerializeToString(), threads=1).graph.node)
    assert kernels["RotaryEmbedding"] == 1 and kernels["Neg"] == 0


def test_cos_that_does_not_repeat_its_halves_is_left_alone(tmp_path: Path) -> None:
    assert _rewritten(_export(tmp_path, False, "torchscript", broken=True))[1] == []
