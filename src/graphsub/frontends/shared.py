"""Weights held by reference: how graphsub handles a model above protobuf's 2 GB (a 1 B-parameter decoder's 4 GB).

A serialized ONNX model cannot exceed 2 GB, and graphsub passes models around as bytes (candidates, sessions,
verification).  For a large model the weights therefore stay out of the bytes: each large initializer is a
*placeholder* -- a tensor with external data whose location is :data:`MARK` and whose ``checksum`` field is a token
-- and the array itself is held here, once, by token (:func:`placeholder`, :func:`held`).  It is the pattern of
onnxruntime's own transformer tools (``extract_external_data_from_model``): the bytes stay small, and the weights
exist once in memory however many candidates there are.  A session opens such a model from a file whose external
data are in the weight pool (:mod:`graphsub.frontends.weight_pool`), memory-mapped: no copy either.

* **Reading** (:func:`hold_external`): the external data of a file read without it becomes placeholders over
  read-only memory maps of its data files: nothing is read until used, and the input file is never written.
* **Exporting** (:func:`graphsub.frontends.onnx_export.export_graph`): a graph whose weights pass
  :data:`SHARE_BYTES` exports each weight of at least :data:`MIN_TENSOR_BYTES` as a placeholder.
* **Reading back** (:func:`tensor_array`): a placeholder's array, or an ordinary tensor's.
* **Writing** (:func:`write_data`): the placeholders' arrays are written, one after another, into one data file
  beside the model, as external data of the written file.

An array in memory is held weakly (one no graph uses any more is freed); a memory map of a file, which costs no
memory, for the process's life.  A placeholder whose array is gone
raises :class:`~graphsub.errors.ExportError` where it is read.

>>> import numpy as np
>>> w = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> t = placeholder(w, "w")
>>> is_placeholder(t), tensor_array(t) is w, t.ByteSize() < 64
(True, True, True)
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, numpy_helper

from graphsub.errors import ExportError

#: the external-data location of a placeholder (never a file: it has a colon, and no file is looked up for it)
MARK = "graphsub:held"
#: a graph whose weights hold more bytes than this exports its large weights as placeholders (protobuf: 2 GiB)
SHARE_BYTES = 1 << 30
#: the smallest weight a placeholder is made for: shape constants and scalars stay inline, readable by every tool
MIN_TENSOR_BYTES = 1 << 16

_ARRAYS: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()
_PINNED: dict[str, np.ndarray] = {}
_TOKENS: dict[int, str] = {}
_COUNTER = itertools.count()
_CHUNK = 1 << 26


def _token(array: np.ndarray) -> str:
    """The token ``array`` is held under (a new one the first time).  A memory map (a file's weights: they cost
    no memory) is held for the process's life, so a proto read from a file keeps its weights; an array in memory is
    held as long as something else (a graph) holds it."""
    key = id(array)
    token = _TOKENS.get(key)
    if token is not None and _ARRAYS.get(token) is array:
        return token
    token = f"{os.getpid()}-{next(_COUNTER)}"
    _ARRAYS[token] = array
    if memmap_of(array) is not None:
        _PINNED[token] = array
    _TOKENS[key] = token
    weakref.finalize(array, _TOKENS.pop, key, None)
    return token


def memmap_of(array: np.ndarray) -> np.memmap | None:
    """The memory map of a file that ``array`` is or views (``np.asarray`` of a memory map is a view), or None."""
    a: object = array
    while isinstance(a, np.ndarray):
        if isinstance(a, np.memmap):
            return a
        a = a.base
    return None



def can_hold(array: np.ndarray) -> bool:
    """Whether ``array`` can be a placeholder's data: numeric or boolean, C-contiguous, at least
    :data:`MIN_TENSOR_BYTES`."""
    return array.dtype.kind in "biuf" and array.flags.c_contiguous and array.nbytes >= MIN_TENSOR_BYTES


def placeholder(array: np.ndarray, name: str) -> TensorProto:
    """A tensor ``name`` of ``array``'s type and shape whose data is ``array``, held here (module docstring);
    ``array`` must be C-contiguous."""
    if not array.flags.c_contiguous:
        raise ValueError(f"weight {name!r}: only a C-contiguous array can be held")
    t = TensorProto(name=name, data_type=onnx.helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape,
                    data_location=TensorProto.EXTERNAL)
    for key, value in (("location", MARK), ("checksum", _token(array))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def _entries(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def is_placeholder(t: TensorProto) -> bool:
    """Whether ``t``'s data is held here (:func:`placeholder`)."""
    return t.data_location == TensorProto.EXTERNAL and _entries(t).get("location") == MARK


def held(t: TensorProto) -> np.ndarray:
    """The array of placeholder ``t``; ExportError when it is no longer held."""
    token = _entries(t).get("checksum", "")
    array = _ARRAYS.get(token)
    if array is None:
        raise ExportError(f"weight {t.name!r}: its data is no longer held (token {token!r})")
    return array


def tensor_array(t: TensorProto) -> np.ndarray:
    """``t`` as an array: a placeholder's held array (no copy), else ``numpy_helper.to_array``."""
    return held(t) if is_placeholder(t) else numpy_helper.to_array(t)


def graphs_in(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph in it (``If`` branches, ``Loop`` bodies), depth first."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from graphs_in(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from graphs_in(g)


def placeholders(model: onnx.ModelProto) -> list[TensorProto]:
    """The placeholders among ``model``'s initializers (subgraphs' included)."""
    return [t for g in graphs_in(model.graph) for t in g.initializer if is_placeholder(t)]


def holds(data: bytes | str) -> bool:
    """Whether serialized model bytes (or a small file) may carry placeholders (a test of the bytes, made only when
    this process holds arrays at all)."""
    if not _ARRAYS:
        return False
    if isinstance(data, str):
        try:
            if os.path.getsize(data) > 1 << 28:  # a placeholder model is small: a large file has real data
                return False
            data = Path(data).read_bytes()
        except OSError:
            return False
    return MARK.encode() in data


def with_placeholders(model: onnx.ModelProto | bytes | str) -> onnx.ModelProto | None:
    """``model`` as a proto when it has placeholders (to open a session of it, see
    :mod:`graphsub.frontends.weight_pool`), else None."""
    if not isinstance(model, onnx.ModelProto):
        if not holds(model):
            return None
        model = onnx.load_from_string(Path(model).read_bytes() if isinstance(model, str) else model)
    return model if placeholders(model) else None


def hold_external(model: onnx.ModelProto, base_dir: str | os.PathLike[str]) -> int:
    """Turn every initializer of ``model`` (read without its external data) whose data is in a file beside it into a
    placeholder over a read-only memory map of that file, in place; returns the bytes now held.  ExportError when a
    data file is missing or too short."""
    total = 0
    for g in graphs_in(model.graph):
        for t in g.initializer:
            if t.data_location != TensorProto.EXTERNAL or is_placeholder(t):
                continue
            info = _entries(t)
            path = Path(base_dir) / info.get("location", "")
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
            shape = tuple(int(d) for d in t.dims)
            count = int(np.prod(shape, dtype=np.int64))
            offset = int(info.get("offset", 0))
            if not path.is_file() or path.stat().st_size < offset + count * dtype.itemsize:
                raise ExportError(f"weight {t.name!r}: external data {path.name!r} is missing or too short")
            array = (np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape) if count
                     else np.zeros(shape, dtype))
            t.CopyFrom(placeholder(array, t.name))
            total += array.nbytes
    return total


def model_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files of the model at ``path``: itself, then each distinct external data file it names that exists
    beside it (only itself when it cannot be parsed)."""
    p = Path(path)
    try:
        m = onnx.load(os.fspath(p), load_external_data=False)
    except (OSError, DecodeError, ValueError):
        return [p]
    locations = dict.fromkeys(e.value for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
                              for e in t.external_data if e.key == "location")
    return [p, *(p.parent / loc for loc in locations if (p.parent / loc).is_file())]


def file_bytes(path: str | os.PathLike[str]) -> int:
    """The bytes of the model at ``path`` on disk, its external data included (0 when it is not a file)."""
    return sum(f.stat().st_size for f in model_files(path) if f.is_file())


def model_bytes(model: bytes | str) -> int:
    """What a model holds: a file's bytes with its external data, or serialized bytes with their held weights."""
    if isinstance(model, str):
        return file_bytes(model)
    if not holds(model):
        return len(model)
    return len(model) + sum(held(t).nbytes for t in placeholders(onnx.load_from_string(model)))


def write_data(model: onnx.ModelProto, folder: str | os.PathLike[str], data_name: str) -> onnx.ModelProto:
    """A copy of ``model`` whose placeholders are external data in ``folder / data_name``, written now, each array
    at an offset aligned to 4 KiB; the model itself is not written."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    found = placeholders(out)
    with open(Path(folder) / data_name, "wb") as f:
        for t in found:
            array = held(t)
            f.write(b"\0" * (-f.tell() % 4096))
            offset = f.tell()
            flat = array.reshape(-1).view(np.uint8)
            for i in range(0, flat.size, _CHUNK):  # in slices: no second copy of a large array in memory
                f.write(flat[i:i + _CHUNK].tobytes())
            del t.external_data[:]
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(array.nbytes))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
    return out


__all__ = ["MARK", "MIN_TENSOR_BYTES", "SHARE_BYTES", "can_hold", "file_bytes", "graphs_in", "held", "hold_external",
           "holds", "is_placeholder", "memmap_of", "model_bytes", "model_files", "placeholder", "placeholders",
           "tensor_array", "with_placeholders", "write_data"]
