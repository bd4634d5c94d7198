"""Constant generators: zero-input ops whose output is a fixed tensor (TASO's constants).

TASO's axioms use a few constant tensors -- the identity convolution kernel, the identity
matrix, the average-pooling kernel and a tensor of ones -- to state identities such as
``conv2d(x, const_iconv) == x``.  Here they are ops without inputs, flagged ``weight_op``: the
frontend treats them like weights and folds them, so they cost nothing at run time (FLOPs 0,
bytes 0).  They are exported as ONNX ``Constant`` nodes holding their value and are never
imported (an imported ONNX constant is a plain weight).

>>> from graphsub.ops.registry import get_op
>>> get_op("const_imm").reference([], {"n": 2})[0]
array([[1., 0.],
       [0., 1.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphsub.errors import AttrError
from graphsub.ops.registry import (
    AttrSpec,
    ExportNode,
    InferFn,
    OnnxExportCtx,
    OpDef,
    RefFn,
    Sample,
    register,
    zero_cost,
)
from graphsub.ops.types import TensorType, make_type, np_dtype

A = Mapping[str, Any]
_NOTE = "constant generators are created by rules; ONNX constants import as weights"


def _check_kernel(op: str, shape: Sequence[int]) -> tuple[int, int, int, int]:
    if len(shape) != 4 or min(shape) < 1:
        raise AttrError(f"{op}: shape {tuple(shape)} must be four positive ints (O, I, kh, kw)")
    o, i, kh, kw = shape
    return o, i, kh, kw


def _iconv_infer(ins: Sequence[TensorType], a: A) -> tuple[TensorType, ...]:
    o, i, kh, kw = _check_kernel("const_iconv", a["shape"])
    if kh % 2 == 0 or kw % 2 == 0 or i not in (o, 1):
        raise AttrError(f"const_iconv: shape {a['shape']} needs odd kh, kw and I == O or I == 1")
    return (make_type(a["shape"]),)


def _iconv_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    o, i, kh, kw = a["shape"]
    w = np.zeros((o, i, kh, kw), dtype=np.float32)
    w[np.arange(o), np.arange(o) % i, kh // 2, kw // 2] = 1.0
    return (w,)


def _imm_infer(ins: Sequence[TensorType], a: A) -> tuple[TensorType, ...]:
    if a["n"] < 1:
        raise AttrError(f"const_imm: n must be >= 1, got {a['n']}")
    return (make_type((a["n"], a["n"])),)


def _pool_infer(ins: Sequence[TensorType], a: A) -> tuple[TensorType, ...]:
    _, i, _, _ = _check_kernel("const_pool", a["shape"])
    if i != 1:
        raise AttrError(f"const_pool: shape {a['shape']} must be (C, 1, kh, kw) (depthwise)")
    return (make_type(a["shape"]),)


def _pool_ref(xs: Sequence[np.ndarray], a: A) -> tuple[np.ndarray]:
    kh, kw = a["shape"][2:]
    return (np.full(a["shape"], 1.0 / (kh * kw), dtype=np.float32),)


def _one_infer(ins: Sequence[TensorType], a: A) -> tuple[TensorType, ...]:
    if min(a["shape"], default=0) < 0:
        raise AttrError(f"const_one: shape {a['shape']} has negative dims")
    return (make_type(a["shape"], a["dtype"]),)


def _register(name: str, doc: str, attrs: tuple[AttrSpec, ...], infer: InferFn, ref: RefFn,
              samples: tuple[Sample, ...]) -> None:
    def export(ctx: OnnxExportCtx, node: ExportNode) -> None:
        (value,) = ref([], node.attrs)
        ctx.emit("Constant", [], {"value": value}, outputs=node.outputs)

    register(OpDef(
        name=name, family="const", doc=doc, inputs=(), attrs=attrs, infer=infer, reference=ref,
        flops=zero_cost, bytes_moved=zero_cost, onnx_export=export,
        onnx_import_note=_NOTE, weight_op=True, samples=samples,
    ))


_register(
    "const_iconv",
    "Identity conv kernel (O, I, kh, kw), kh and kw odd, I == O (dense) or I == 1 "
    "(depthwise): w[o, o % I, kh//2, kw//2] = 1, else 0; conv2d with it (SAME pads) is x.",
    (AttrSpec("shape", "ints", doc="(O, I, kh, kw)"),),
    _iconv_infer, _iconv_ref,
    (Sample((), {"shape": (3, 3, 3, 3)}), Sample((), {"shape": (4, 1, 1, 5)}, note="depthwise")),
)
_register(
    "const_imm", "Identity matrix of size (n, n).",
    (AttrSpec("n", "int"),),
    _imm_infer, lambda xs, a: (np.eye(a["n"], dtype=np.float32),),
    (Sample((), {"n": 1}), Sample((), {"n": 5})),
)
_register(
    "const_pool",
    "Depthwise averaging kernel (C, 1, kh, kw) filled with 1 / (kh * kw); a depthwise conv2d "
    "with it equals avgpool with count_include_pad.",
    (AttrSpec("shape", "ints", doc="(C, 1, kh, kw)"),),
    _pool_infer, _pool_ref,
    (Sample((), {"shape": (2, 1, 3, 3)}), Sample((), {"shape": (3, 1, 2, 5)})),
)
_register(
    "const_one", "A tensor of ones of the given shape and dtype.",
    (AttrSpec("shape", "ints"), AttrSpec("dtype", "dtype", "float32")),
    _one_infer, lambda xs, a: (np.ones(a["shape"], dtype=np_dtype(a["dtype"])),),
    (Sample((), {"shape": (2, 3)}), Sample((), {"shape": ()}, note="scalar"),
     Sample((), {"shape": (4,), "dtype": "int64"})),
)

__all__: list[str] = []
