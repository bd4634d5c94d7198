"""Held weights on disk, shared by every onnxruntime session of the process: how a large model's sessions cost
no copy of its weights.

onnxruntime copies the arrays it is given through ``SessionOptions.add_external_initializers`` (measured on
onnxruntime 1.32: a session of a 0.5 GB decoder given its weights that way holds 0.5 GB more, prepacking off), so
with one session per candidate, per verification and per timing round a 4 GB model would need its weights many
times over.  A session opened from a *file* whose weights are external data memory-maps them instead: the pages
are the file's, shared by every session and by the page cache, and cost no anonymous memory.  (``add_initializer``
shares a buffer too, but onnxruntime's constant folding then reads the file's data, not the buffer's.)

So a model with placeholders (:mod:`graphsub.frontends.shared`) is opened from a file written here
(:func:`session_file`) whose external data point into the pool, a temporary folder of data files: each held array is
written there once, and every later session reuses it (onnxruntime reads external data only inside the model's
folder, and refuses a symbolic link out of it; a hard link would change the input file itself -- onnx refuses a data
file with several links). The file of an array graphsub made (a folded or packed weight) is removed when the array
is freed (a session that maps it keeps its pages); a file's weights stay for the process's life, as their memory
maps do. Arrays are immutable once held, so what the pool wrote stays valid; the pool is removed when the process
exits, and a killed process's pool by the next one.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from graphsub.frontends.shared import held, memmap_of, placeholders

_CHUNK = 1 << 26
_PREFIX = "graphsub-weights-"


class _Pool:
    """The pool's folder and what it holds: per array (or, for a file's weights, per file region), the data file
    and offset of its bytes."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self.where: dict[object, tuple[str, int]] = {}  # id(array), or a file region -> (file, offset)
        self.names = itertools.count()
        self.lock = threading.Lock()

    def folder(self) -> Path:
        if self.dir is None:
            _remove_stale()
            self.dir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
            atexit.register(shutil.rmtree, self.dir, True)
        return self.dir

    def place(self, array: np.ndarray) -> tuple[str, int]:
        """Where ``array``'s bytes are in the pool (written now if they are not yet)."""
        region = _mapped_file(array)  # a file's weights: every view of that region is one array here
        key: object = id(array) if region is None else region
        got = self.where.get(key)
        if got is None:
            got = self.where[key] = self._written(array)
            if region is None:
                weakref.finalize(array, self.where.pop, key, None)  # its id may be another's once it is freed
                weakref.finalize(array, (self.folder() / got[0]).unlink, True)  # its sessions keep their maps
        return got

    def _written(self, array: np.ndarray) -> tuple[str, int]:
        name = f"array-{next(self.names)}.data"
        with open(self.folder() / name, "wb") as f:
            flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            for i in range(0, flat.size, _CHUNK):  # in slices: no second copy of a large array in memory
                f.write(flat[i:i + _CHUNK].tobytes())
        return name, 0


def _remove_stale() -> None:
    """Remove the pools of processes that ended without removing theirs (killed)."""
    for d in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        try:
            os.kill(int(d.name[len(_PREFIX):].split("-")[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (ValueError, OSError):  # not a pool's name, or another user's process
            continue


def _mapped_file(array: np.ndarray) -> tuple[str, int, int] | None:
    """``(path, byte offset, bytes)`` of the file region ``array`` maps, when it is a C-contiguous memory map of a
    file or a view of one; else None."""
    m = memmap_of(array)
    if m is None or m.filename is None or not (array.flags.c_contiguous and m.flags.c_contiguous):
        return None
    delta = array.ctypes.data - m.ctypes.data
    return (os.fspath(m.filename), m.offset + delta, array.nbytes) if 0 <= delta <= m.nbytes - array.nbytes else None


_POOL = _Pool()


def session_file(model: onnx.ModelProto) -> str:
    """A file of ``model`` (which has placeholders) whose placeholders are external data in the pool: open a session
    from it, then remove it (:func:`release`); the data stays in the pool."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    with _POOL.lock:
        for t in placeholders(out):
            array = held(t)
            name, offset = _POOL.place(array)
            del t.external_data[:]
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", name), ("offset", str(offset)), ("length", str(array.nbytes))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
        path = _POOL.folder() / f"model-{next(_POOL.names)}.onnx"
    path.write_bytes(out.SerializeToString())
    return os.fspath(path)


def release(path: str) -> None:
    """Remove a model file :func:`session_file` wrote (a session keeps what it needs of it)."""
    Path(path).unlink(missing_ok=True)


def pool_bytes() -> int:
    """The bytes of the arrays the pool holds."""
    if _POOL.dir is None:
        return 0
    return sum(f.stat().st_size for f in _POOL.dir.glob("array-*.data"))


__all__ = ["pool_bytes", "release", "session_file"]
