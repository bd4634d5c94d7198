"""Tensor types (static shape + dtype) and canonical, hashable attribute values: the bottom layer, on which
operators (:mod:`graphsub.ops`) and graphs (:mod:`graphsub.ir`) are built.

Every value flowing along an edge of a :class:`~graphsub.ir.graph.Graph` has a static
:class:`TensorType`.  Attributes of operators are frozen into :data:`Attrs`, a tuple of
``(name, value)`` pairs sorted by name whose values are built only from ``int``, ``float``,
``str``, ``bool``, ``bytes``, ``None`` and tuples of those; this makes them hashable and gives
them a stable, process-independent :func:`stable_digest`.

>>> t = TensorType((1, 3, 224, 224))
>>> t, t.numel, t.nbytes
(f32[1,3,224,224], 150528, 602112)
>>> freeze_attrs({"strides": [2, 2], "act": "relu"})
(('act', 'relu'), ('strides', (2, 2)))
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from graphsub.errors import AttrError

#: dtypes the IR understands, with their short names used in the text format.
DTYPES: dict[str, str] = {
    "float32": "f32",
    "float16": "f16",
    "float64": "f64",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}
SHORT_TO_DTYPE: dict[str, str] = {v: k for k, v in DTYPES.items()}
FLOAT_DTYPES = frozenset({"float32", "float16", "float64", "bfloat16"})
_ITEMSIZE = {"float32": 4, "float16": 2, "float64": 8, "bfloat16": 2, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


#: ONNX TensorProto.DataType codes of the dtypes above (kept here so ops need not import onnx).
ONNX_DTYPE_CODES: dict[str, int] = {
    "float32": 1, "uint8": 2, "int8": 3, "int16": 5, "int32": 6, "int64": 7, "bool": 9,
    "float16": 10, "float64": 11, "bfloat16": 16,
}
DTYPE_OF_ONNX_CODE: dict[int, str] = {v: k for k, v in ONNX_DTYPE_CODES.items()}


def np_dtype(dtype: str) -> np.dtype[Any]:
    """numpy dtype for an IR dtype name (bfloat16 is computed as float32)."""
    if dtype == "bfloat16":
        return np.dtype(np.float32)
    return np.dtype(dtype)


def dtype_of(array: np.ndarray) -> str:
    """IR dtype name of a numpy array."""
    name = str(array.dtype)
    if name not in DTYPES:
        raise AttrError(f"unsupported array dtype {name!r}; supported: {sorted(DTYPES)}")
    return name


class TensorType(NamedTuple):
    """Static type of a tensor: shape (tuple of non-negative ints) and dtype name."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * _ITEMSIZE[self.dtype]

    def with_shape(self, shape: Iterable[int]) -> TensorType:
        return TensorType(tuple(int(d) for d in shape), self.dtype)

    def __repr__(self) -> str:
        return f"{DTYPES.get(self.dtype, self.dtype)}[{','.join(map(str, self.shape))}]"

    def __str__(self) -> str:
        return self.__repr__()


def make_type(shape: Iterable[int], dtype: str = "float32") -> TensorType:
    """Validated constructor: ints >= 0 and a known dtype."""
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise AttrError(f"negative dimension in shape {dims}")
    if dtype not in DTYPES:
        raise AttrError(f"unknown dtype {dtype!r}; supported: {sorted(DTYPES)}")
    return TensorType(dims, dtype)


def parse_type(text: str) -> TensorType:
    """Inverse of ``repr(TensorType)``: ``"f32[1,3,8,8]"`` -> TensorType."""
    text = text.strip()
    head, _, rest = text.partition("[")
    if not rest.endswith("]") or head not in SHORT_TO_DTYPE:
        raise AttrError(f"malformed tensor type {text!r}; expected e.g. f32[1,3,8,8]")
    body = rest[:-1].strip()
    dims = tuple(int(d) for d in body.split(",")) if body else ()
    return make_type(dims, SHORT_TO_DTYPE[head])


# ----------------------------------------------------------------------------- attributes

AttrValue = Any  # int | float | str | bool | bytes | None | tuple[AttrValue, ...]
Attrs = tuple[tuple[str, AttrValue], ...]


def freeze_value(value: Any) -> AttrValue:
    """Canonical hashable form of an attribute value (lists -> tuples, numpy -> python)."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray):
        return freeze_value(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(freeze_value(v) for v in value)
    raise AttrError(f"attribute value of type {type(value).__name__} is not supported: {value!r}")


def freeze_attrs(attrs: Mapping[str, Any]) -> Attrs:
    """Sorted tuple of ``(name, frozen value)`` pairs."""
    return tuple(sorted((str(k), freeze_value(v)) for k, v in attrs.items()))


def stable_digest(*parts: Any) -> int:
    """64-bit digest of ``repr(parts)`` that is identical across processes and platforms.

    Only used on frozen data (tuples of primitives), whose ``repr`` is canonical.
    """
    data = repr(parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def array_digest(array: np.ndarray) -> int:
    """64-bit content digest of an array (dtype, shape and bytes)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{array.dtype}|{array.shape}|".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return int.from_bytes(h.digest(), "little")


__all__ = [
    "DTYPES",
    "DTYPE_OF_ONNX_CODE",
    "FLOAT_DTYPES",
    "ONNX_DTYPE_CODES",
    "AttrValue",
    "Attrs",
    "TensorType",
    "array_digest",
    "dtype_of",
    "freeze_attrs",
    "freeze_value",
    "make_type",
    "np_dtype",
    "parse_type",
    "stable_digest",
]
