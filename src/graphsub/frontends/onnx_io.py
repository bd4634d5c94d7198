"""ONNX frontend facade: load/save files, convert models (:func:`from_onnx` is
:mod:`graphsub.frontends.onnx_import`'s), run opaque nodes (:func:`run_opaque`, used by the
reference executor :mod:`graphsub.execute`; ``graphsub.ops`` never imports a frontend).

>>> from graphsub.ir import Builder
>>> b = Builder("tiny")
>>> g = b.build(b.relu(b.input("x", (2, 3))))
>>> g2 = from_onnx(to_onnx(g))
>>> g2 == g
True
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from graphsub.errors import ExecutionError, ExportError, ImportError_
from graphsub.frontends.onnx_export import (
    DEFAULT_OPSET,
    embedded_tensors,
    export_graph,
    make_model,
    opaque_node,
    value_info,
)
from graphsub.frontends.onnx_import import from_onnx
from graphsub.frontends.ort import make_session, run_session
from graphsub.frontends.shared import file_bytes, hold_external, holds, model_files, placeholders, write_data
from graphsub.ir.graph import Graph
from graphsub.ops.types import ONNX_DTYPE_CODES, TensorType

#: models whose serialized size would exceed this are saved with external data
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


def read_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read an ONNX file (with external data), raising ImportError_ with the cause."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ImportError_(f"{p}: no such file") from None
    except (OSError, ValueError) as e:  # a name too long, a loop of symbolic links, a NUL byte ...
        raise ImportError_(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ImportError_(f"{p}: is a directory, expected an .onnx file")
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block and /dev/zero never end
        raise ImportError_(f"{p}: not a regular file (a device, FIFO or socket), expected an .onnx file")
    size = st.st_size
    from graphsub.data import allocation_limit, human_bytes

    if size > allocation_limit():  # the file's bytes, and the model parsed from them
        raise ImportError_(f"{p}: {human_bytes(size)} is more than this machine can read into memory "
                           f"({human_bytes(allocation_limit())} allowed)")
    try:
        model = onnx.load(str(p), load_external_data=False)
        hold_external(model, p.parent)  # weights beside the file: memory maps, held (frontends.shared)
        return model
    except ExportError as e:
        raise ImportError_(f"{p}: {e}") from e
    except DecodeError as e:
        raise ImportError_(f"{p}: not an ONNX model (protobuf parse failed: {e})") from e
    except FileNotFoundError as e:
        raise ImportError_(f"{p}: external data file missing: {e}") from e
    except Exception as e:  # onnx raises ValueError/OSError variants for broken files
        raise ImportError_(f"{p}: cannot read ONNX model: {e}") from e


def load(
    path: str | os.PathLike[str],
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    default_dim: int | None = 1,
    sizes: Mapping[str, int] | None = None,
    generic: bool = False,
) -> Graph:
    """Load an ONNX file into a Graph (weights with data); ``sizes``: what free symbolic dims are imported at, by
    name; ``generic``: the ones it leaves out at distinct sizes that are never 1
    (:func:`graphsub.frontends.dims.import_sizes`; a name that is not a free dim raises ValueError)."""
    model = read_model(path)
    if generic:
        from graphsub.frontends.dims import import_sizes, interface

        sizes = import_sizes(interface(model, input_shapes), sizes)
    raw: str | bytes = model.graph.name  # bytes when it is not valid UTF-8 (a damaged file)
    name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return from_onnx(model, input_shapes=input_shapes, default_dim=default_dim, name=name or Path(path).stem,
                     sizes=sizes)


def to_onnx(
    graph: Graph,
    *,
    opset: int | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    allow_missing_weights: bool = False,
) -> onnx.ModelProto:
    """Export a Graph to an in-memory ONNX model (see :mod:`graphsub.frontends.onnx_export`)."""
    return export_graph(graph, opset=opset, params=params, allow_missing_weights=allow_missing_weights)


def write_held(data: bytes, path: str | os.PathLike[str]) -> bool:
    """Write serialized model ``data`` whose weights are held by reference (:mod:`graphsub.frontends.shared`) with
    its weights beside it (:func:`write_model`); False, writing nothing, when it holds none (its bytes are the
    model: the caller writes them as they are)."""
    if not holds(data):
        return False
    model = onnx.load_from_string(data)
    if not placeholders(model):
        return False
    write_model(model, path, check=False)
    return True


def _check(model: onnx.ModelProto | str) -> None:
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ExportError(f"refusing to write an invalid ONNX model: {e}") from e


def write_model(model: onnx.ModelProto, path: str | os.PathLike[str], *, check: bool = True) -> Path:
    """Write ``model`` atomically: files appear complete or not at all.

    Large models (> ~1.8 GB) get their weights in ``<name>.data`` beside the file.  With
    ``check``, the model is validated by ``onnx.checker`` first.
    """
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        raise ExportError(f"{out}: directory {parent} does not exist")
    if out.exists() and not out.is_file():  # os.replace would put a file where a device, FIFO or directory was
        raise ExportError(f"{out} exists and is not a regular file; refusing to replace it")
    held = bool(placeholders(model))
    if check and not held:
        _check(model)
    large = held or model.ByteSize() > EXTERNAL_DATA_THRESHOLD
    tmpdir = Path(tempfile.mkdtemp(prefix=".graphsub-", dir=parent))
    try:
        tmp_model = tmpdir / out.name
        if held:  # a large model's held weights (frontends.shared): written into <name>.data, checked as a file
            data_name = out.name + ".data"
            onnx.save_model(write_data(model, tmpdir, data_name), str(tmp_model))
            if check:
                _check(str(tmp_model))
            os.replace(tmpdir / data_name, parent / data_name)
        elif large:
            data_name = out.name + ".data"
            onnx.save_model(model, str(tmp_model), save_as_external_data=True,
                            all_tensors_to_one_file=True, location=data_name, size_threshold=1024)
            os.replace(tmpdir / data_name, parent / data_name)
        else:
            onnx.save_model(model, str(tmp_model))
        os.replace(tmp_model, out)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return out


def attach_initializers(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> Path:
    """Give the graph inputs of the model at ``path`` named in ``arrays`` those values as initializers of the same
    name (ONNX's default values of inputs: a runtime may leave them out of its feeds), and rewrite it atomically."""
    from onnx import numpy_helper

    model = read_model(path)
    inputs = {i.name for i in model.graph.input}
    have = {t.name for t in model.graph.initializer}
    for name, arr in arrays.items():
        if name in inputs and name not in have:
            model.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
    return write_model(model, path)


def has_external_data(path: str | os.PathLike[str]) -> bool:
    """Whether the model at ``path`` keeps some weights in files beside it (read without loading them)."""
    m = onnx.load(os.fspath(path), load_external_data=False)
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer)


def save(graph: Graph, path: str | os.PathLike[str], *, opset: int | None = None) -> Path:
    """Export ``graph`` and write it atomically to ``path``."""
    return write_model(to_onnx(graph, opset=opset), path)


# ----------------------------------------------------------------------------- opaque nodes

#: the attributes of an opaque node that define the one-node model running it
_MODEL_ATTRS = ("op_type", "domain", "version", "onnx_attrs", "out_types", "input_slots", "num_onnx_inputs",
                "output_slots", "num_onnx_outputs", "captures", "embedded")


def run_opaque(inputs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Execute an ``opaque`` node (attributes ``attrs``) on ``inputs`` in onnxruntime: the reference
    executor's implementation of opaque ops (:func:`graphsub.execute.run`).  Sessions of one-node
    models are cached per node attributes and input types."""
    in_types = tuple(TensorType(tuple(x.shape), str(x.dtype)) for x in inputs)
    for t in in_types:
        if t.dtype not in ONNX_DTYPE_CODES:
            raise ExecutionError(f"opaque {attrs['op_type']}: unsupported input dtype {t.dtype}")
    sess = _opaque_session(tuple((k, attrs[k]) for k in _MODEL_ATTRS), in_types)
    return run_session(sess, {f"in{k}": x for k, x in enumerate(inputs)})


@functools.lru_cache(maxsize=256)
def _opaque_session(key: tuple[tuple[str, Any], ...], in_types: tuple[TensorType, ...]) -> Any:
    attrs = dict(key)
    domain, version = attrs["domain"], attrs["version"]
    out_types = [TensorType(tuple(s), d) for s, d in attrs["out_types"]]
    consts = embedded_tensors(attrs, "embedded")
    node = opaque_node(attrs, [f"in{k}" for k in range(len(in_types))], [f"out{k}" for k in range(len(out_types))],
                       embedded={slot: t.name for slot, t in consts.items()})
    g = onnx.helper.make_graph(
        [node], "opaque",
        [value_info(f"in{k}", t) for k, t in enumerate(in_types)],
        [value_info(f"out{k}", t) for k, t in enumerate(out_types)],
        initializer=list(consts.values()),
    )
    opsets = [onnx.helper.make_opsetid("", version if domain in ("", "ai.onnx") else DEFAULT_OPSET)]
    if domain not in ("", "ai.onnx"):
        opsets.append(onnx.helper.make_opsetid(domain, version or 1))
    return make_session(make_model(g, opsets))


__all__ = ["file_bytes", "from_onnx", "has_external_data", "load", "model_files", "read_model", "run_opaque", "save",
           "to_onnx", "write_held", "write_model"]
