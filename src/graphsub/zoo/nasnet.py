"""NASNet-A as benchmarked by TASO and OCGGS (``examples/nasnet_a.py`` / ``nasneta.py``).

The peers' NASNet-A is a simplified re-drawing of the paper's cells: separable convolutions
are a grouped k x k convolution (one group per output channel) followed by a 1x1
convolution, without the ReLU/BN of the original; pooling branches have no activation.
"""

from __future__ import annotations

from graphsub.ir.builder import Value
from graphsub.ir.graph import Graph
from graphsub.zoo._net import Net


class _Cells:
    """Cell builders sharing one :class:`Net` and a per-cell weight-name prefix."""

    def __init__(self, net: Net) -> None:
        self.net = net
        self.prefix = ""
        self._n = 0

    def _name(self, what: str) -> str:
        self._n += 1
        return f"{self.prefix}_{what}{self._n}_w"

    def squeeze(self, x: Value, c: int) -> Value:
        """1x1 conv to ``c`` channels + ReLU."""
        return self.net.conv(x, self._name("squeeze"), c, (1, 1), act="relu")

    def fit(self, cur: Value, x: Value) -> Value:
        """Bring ``x`` to ``cur``'s channels (1x1) or, if its grid differs, halve it (3x3 s2)."""
        if x.dim(2) == cur.dim(2):
            return self.squeeze(x, cur.dim(1))
        return self.net.conv(x, self._name("fit"), cur.dim(1), (3, 3), strides=(2, 2), act="relu")

    def sep(self, x: Value, c: int, k: int, s: int) -> Value:
        """Separable conv: grouped k x k conv (weight ``(c, C/c, k, k)``, stride ``s``) then
        a 1x1 conv; SAME padding, no activation."""
        net = self.net
        t = net.conv(x, self._name(f"sep{k}x{k}_"), c, (k, k), strides=(s, s), groups=c)
        return net.conv(t, self._name("sep1x1_"), c, (1, 1))

    def avgpool(self, x: Value, s: int) -> Value:
        return self.net.avgpool(x, (3, 3), (s, s), "SAME", count_include_pad=True)

    def maxpool(self, x: Value, s: int) -> Value:
        return self.net.maxpool(x, (3, 3), (s, s), "SAME")

    def add(self, a: Value, b: Value) -> Value:
        return self.net.op("add", a, b)

    def normal(self, prev: Value, cur: Value, c: int) -> Value:
        """Normal cell (21 ops: 12 conv, 3 avgpool, 5 add, one 5-input concat)."""
        cur = self.squeeze(cur, c)
        prev = self.fit(cur, prev)
        ts = [
            self.sep(cur, c, 3, 1),
            cur,
            self.sep(prev, c, 3, 1),
            self.sep(cur, c, 3, 1),
            self.avgpool(cur, 1),
            prev,
            self.avgpool(prev, 1),
            self.avgpool(prev, 1),
            self.sep(prev, c, 3, 1),
            self.sep(prev, c, 3, 1),
        ]
        outs = [self.add(ts[2 * i], ts[2 * i + 1]) for i in range(5)]
        return self.net.op("concat", *outs, axis=1)

    def reduction(self, prev: Value, cur: Value, c: int) -> Value:
        """Reduction cell, halves the grid (22 ops: 12 conv, 2 maxpool, 2 avgpool, 5 add,
        one 5-input concat)."""
        cur = self.squeeze(cur, c)
        prev = self.fit(cur, prev)
        o0 = self.add(self.sep(prev, c, 7, 2), self.sep(cur, c, 5, 2))
        o1 = self.add(self.maxpool(cur, 2), self.sep(prev, c, 7, 2))
        o2 = self.add(self.avgpool(cur, 2), self.sep(prev, c, 5, 2))
        o3 = self.add(self.maxpool(cur, 2), self.sep(o0, c, 3, 1))
        o4 = self.add(self.avgpool(o0, 1), o1)
        return self.net.op("concat", o0, o1, o2, o3, o4, axis=1)

    def start(self, prefix: str) -> None:
        self.prefix = prefix
        self._n = 0


def nasnet_a() -> Graph:
    """NASNet-A from TASO ``examples/nasnet_a.py`` / OCGGS ``examples/nasneta.py``.

    * Input ``input`` (1, 3, 224, 224); output (1, 5120, 7, 7) (5 x 1024 channels).
    * **383 ops** as the scripts build it: 217 conv2d, 58 pools (7 maxpool2d, 51 avgpool2d),
      90 add, 18 concat.  The OCGGS paper (Table 2) reports **293** ops = 383 - 90; 90 is
      both the number of adds and of separable convolutions, and no code in either repo
      yields 293.  This model is the script's graph (383).
    * Stem: conv 64 7x7 s2 + ReLU, maxpool 3x3 s2.  Then 3 stages of 5 normal cells and one
      reduction cell; cell width 128 in stage 1, doubled before each reduction cell
      (256, 512, 1024).  ``prev`` and ``cur`` both start as the stage input.
    * Average pools count padding (TASO/cuDNN semantics).
    * Weight names: ``s{stage}n{cell}_...`` (normal) and ``s{stage}r_...`` (reduction).
    """
    net = Net("nasnet_a")
    x = net.input("input", (1, 3, 224, 224))
    x = net.conv(x, "stem_conv_w", 64, (7, 7), strides=(2, 2), act="relu")
    x = net.maxpool(x, (3, 3), (2, 2), "SAME")
    cells = _Cells(net)
    c = 128
    for stage in range(1, 4):
        prev = cur = x
        for i in range(1, 6):
            cells.start(f"s{stage}n{i}")
            t = cells.normal(prev, cur, c)
            prev, cur = cur, t
        c *= 2
        cells.start(f"s{stage}r")
        x = cells.reduction(prev, cur, c)
    return net.finish(x)


__all__ = ["nasnet_a"]
