"""Three models written the way a user writes PyTorch, for ``optimize_module`` and
``graphsub optimize FILE.py:ClassName`` (issue 7's table of PyTorch modules).

=======================  ==================================================================  ===============
class                    what it is                                                          example input
=======================  ==================================================================  ===============
``InceptionCNN``         stem + 3 inception-style blocks (parallel 1x1 / 3x3 / 5x5 / pool      ``x: 1x3x64x64``
                         branches, each branch its own ``nn.Conv2d``) + classifier
``EncoderBlock``         a pre-norm transformer encoder block with separate Q/K/V linears,   ``x: 1x64x256``
                         4 heads, GELU MLP (what people write before reaching for SDPA)
``UnrolledLSTM``         an LSTM cell with one ``nn.Linear`` per gate, unrolled over 8 steps   ``x: 8x4x128``
=======================  ==================================================================  ===============

Each class constructs without arguments (so ``FILE.py:ClassName`` works) with weights from a fixed
seed, and :data:`EXAMPLES` gives each its example input shape.  PyTorch is required (imported at
module import: this module is only imported by code that already needs torch).

>>> import torch
>>> m = EncoderBlock().eval()
>>> tuple(m(torch.zeros(EXAMPLES["EncoderBlock"])).shape)
(1, 64, 256)
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: Example input shape per class.
EXAMPLES: dict[str, tuple[int, ...]] = {
    "InceptionCNN": (1, 3, 64, 64),
    "EncoderBlock": (1, 64, 256),
    "UnrolledLSTM": (8, 4, 128),
}


def _seeded(seed: int) -> None:
    torch.manual_seed(seed)


class _ConvReLU(nn.Module):
    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class _InceptionBlock(nn.Module):
    """GoogLeNet-style block: four branches off one input, concatenated on channels."""

    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int) -> None:
        super().__init__()
        self.b1 = _ConvReLU(cin, c1, 1)
        self.b3_reduce = _ConvReLU(cin, c3r, 1)
        self.b3 = _ConvReLU(c3r, c3, 3)
        self.b5_reduce = _ConvReLU(cin, c5r, 1)
        self.b5 = _ConvReLU(c5r, c5, 5)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)
        self.bp = _ConvReLU(cin, cp, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(self.b3_reduce(x)), self.b5(self.b5_reduce(x)),
                          self.bp(self.pool(x))], dim=1)


class InceptionCNN(nn.Module):
    """A small CNN with inception-style branches (3 blocks), global pooling and a linear head."""

    def __init__(self, num_classes: int = 10, seed: int = 0) -> None:
        super().__init__()
        _seeded(seed)
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.blocks = nn.Sequential(
            _InceptionBlock(64, 32, 48, 64, 8, 16, 16),
            _InceptionBlock(128, 64, 64, 96, 16, 48, 32),
            nn.MaxPool2d(2),
            _InceptionBlock(240, 96, 48, 104, 8, 24, 32),
        )
        self.head = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: x + MHA(LN(x)), then + MLP(LN(.)), written out by hand."""

    def __init__(self, d_model: int = 256, heads: int = 4, d_ff: int = 1024, seed: int = 0) -> None:
        super().__init__()
        _seeded(seed)
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, s, d = t.shape
        return t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        q, k, v = self._split(self.q(h)), self._split(self.k(h)), self._split(self.v(h))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        b, _, s, _ = q.shape
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, s, -1))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class UnrolledLSTM(nn.Module):
    """An LSTM over a fixed number of steps with one ``nn.Linear`` per gate for the input and for the
    hidden state (eight matmuls a step); returns the last hidden state."""

    def __init__(self, input_size: int = 128, hidden: int = 128, steps: int = 8, seed: int = 0) -> None:
        super().__init__()
        _seeded(seed)
        self.steps, self.hidden = steps, hidden
        self.wx = nn.ModuleList(nn.Linear(input_size, hidden) for _ in range(4))
        self.wh = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[1], self.hidden)
        c = torch.zeros(x.shape[1], self.hidden)
        for t in range(self.steps):
            xt = x[t]
            i = torch.sigmoid(self.wx[0](xt) + self.wh[0](h))
            f = torch.sigmoid(self.wx[1](xt) + self.wh[1](h))
            g = torch.tanh(self.wx[2](xt) + self.wh[2](h))
            o = torch.sigmoid(self.wx[3](xt) + self.wh[3](h))
            c = f * c + i * g
            h = o * torch.tanh(c)
        return h


MODULES: dict[str, type[nn.Module]] = {"InceptionCNN": InceptionCNN, "EncoderBlock": EncoderBlock,
                                       "UnrolledLSTM": UnrolledLSTM}

__all__ = ["EXAMPLES", "MODULES", "EncoderBlock", "InceptionCNN", "UnrolledLSTM"]
