"""A typed layer-building helper shared by the zoo modules.

:class:`Net` wraps a :class:`~graphsub.ir.builder.Builder` and adds layer helpers that create
the weights they need (shapes only, no data) under readable, unique names.  Every helper
returns a single :class:`~graphsub.ir.builder.Value`, so the model code type-checks.

>>> import graphsub.ops
>>> net = Net("tiny")
>>> x = net.input("input", (1, 4))
>>> net.finish(net.op("relu", x)).num_ops
1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graphsub.errors import GraphError, ShapeError
from graphsub.ir.builder import Builder, Value
from graphsub.ir.graph import Graph

Pads = str | tuple[int, int, int, int]


def sym_pads(p: int) -> tuple[int, int, int, int]:
    """Symmetric explicit padding ``(p, p, p, p)`` (PyTorch ``padding=p``)."""
    return (p, p, p, p)


class Net:
    """Builder plus weight-creating layer helpers (conv, pools, batchnorm, linear)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.b = Builder(name)

    # ------------------------------------------------------------------ leaves and raw ops
    def input(self, name: str, shape: Sequence[int]) -> Value:
        """A graph input of static shape (float32)."""
        return self.b.input(name, shape)

    def weight(self, name: str, shape: Sequence[int]) -> Value:
        """A weight with a shape and no data."""
        return self.b.weight(name, shape)

    def op(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        """A single-output op ``op(*inputs, **attrs)``."""
        outs = self.b.op_multi(op, *inputs, **attrs)
        if len(outs) != 1:
            raise GraphError(f"{self.name}: op {op!r} has {len(outs)} outputs, expected 1")
        return outs[0]

    # ------------------------------------------------------------------ layers
    def conv(
        self,
        x: Value,
        w_name: str,
        out_channels: int,
        kernel: tuple[int, int],
        *,
        strides: tuple[int, int] = (1, 1),
        pads: Pads = "SAME",
        act: str = "none",
        groups: int = 1,
        bias_name: str | None = None,
    ) -> Value:
        """``conv2d`` with a fresh weight ``(out, C_in / groups, kh, kw)`` named ``w_name``
        (and a bias ``(out,)`` named ``bias_name`` if given).  The IR derives the group count
        from the shapes (TASO style), so ``groups`` only shapes the weight."""
        c_in = x.dim(1)
        if c_in % groups or out_channels % groups:
            raise ShapeError(
                f"{self.name}: conv {w_name!r}: {c_in} input / {out_channels} output channels "
                f"are not divisible by {groups} groups"
            )
        w = self.weight(w_name, (out_channels, c_in // groups, kernel[0], kernel[1]))
        ins = [x, w]
        if bias_name is not None:
            ins.append(self.weight(bias_name, (out_channels,)))
        return self.op("conv2d", *ins, strides=strides, pads=pads, act=act)

    def maxpool(
        self,
        x: Value,
        kernel: tuple[int, int],
        strides: tuple[int, int],
        pads: Pads = "VALID",
        *,
        act: str = "none",
        ceil_mode: bool = False,
    ) -> Value:
        """``maxpool2d``."""
        return self.op(
            "maxpool2d", x, kernel=kernel, strides=strides, pads=pads, act=act, ceil_mode=ceil_mode
        )

    def avgpool(
        self,
        x: Value,
        kernel: tuple[int, int],
        strides: tuple[int, int],
        pads: Pads = "VALID",
        *,
        act: str = "none",
        count_include_pad: bool = False,
    ) -> Value:
        """``avgpool2d`` (``count_include_pad=True`` reproduces TASO/cuDNN averaging)."""
        return self.op(
            "avgpool2d",
            x,
            kernel=kernel,
            strides=strides,
            pads=pads,
            act=act,
            count_include_pad=count_include_pad,
        )

    def batchnorm(self, x: Value, prefix: str) -> Value:
        """Inference batchnorm with PyTorch-named parameters ``{prefix}.weight|bias|
        running_mean|running_var``, each of shape ``(C,)``."""
        c = (x.dim(1),)
        scale = self.weight(f"{prefix}.weight", c)
        bias = self.weight(f"{prefix}.bias", c)
        mean = self.weight(f"{prefix}.running_mean", c)
        var = self.weight(f"{prefix}.running_var", c)
        return self.op("batchnorm", x, scale, bias, mean, var)

    def linear(self, x: Value, prefix: str, out_features: int) -> Value:
        """PyTorch ``Linear`` as exported to ONNX: ``gemm(x, W, b, trans_b=True)`` with
        ``W`` ``(out, in)`` named ``{prefix}.weight`` and ``b`` ``(out,)`` ``{prefix}.bias``."""
        w = self.weight(f"{prefix}.weight", (out_features, x.dim(1)))
        bias = self.weight(f"{prefix}.bias", (out_features,))
        return self.op("gemm", x, w, bias, trans_b=True)

    # ------------------------------------------------------------------ freeze
    def finish(self, output: Value) -> Graph:
        """Freeze with ``output`` as the only graph output.

        Raises :class:`GraphError` if any other op output is left unconsumed: in TASO every
        unconsumed tensor is a graph output, so a model with extra dangling values must name
        them explicitly (see :meth:`finish_many`).
        """
        extra = [v for v in self.b.dangling() if v.ref != output.ref]
        if extra:
            raise GraphError(f"{self.name}: unconsumed values besides the output: {extra}")
        return self.b.build(output)

    def finish_many(self, outputs: Mapping[str, Value]) -> Graph:
        """Freeze with named outputs, which must be exactly the unconsumed values."""
        dangling = {v.ref for v in self.b.dangling()}
        given = {v.ref for v in outputs.values()}
        if dangling != given:
            raise GraphError(
                f"{self.name}: outputs {sorted(outputs)} differ from the unconsumed values"
            )
        return self.b.build(outputs)


class Seq:
    """Counter that mimics the indices of a PyTorch ``nn.Sequential`` (for weight names)."""

    def __init__(self, start: int = 0) -> None:
        self.i = start

    def take(self, n: int = 1) -> int:
        """Index of the next module, then skip ``n`` modules."""
        i = self.i
        self.i += n
        return i


__all__ = ["Net", "Pads", "Seq", "sym_pads"]
