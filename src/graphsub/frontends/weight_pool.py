"""Held weights on disk, shared by every onnxruntime session of the process: how a large model's sessions cost
no copy of its weights.

onnxruntime copies the arrays it is given through ``SessionOptions.add_external_initializers`` (measured on
onnxruntime 1.32: a session of a 0.5 GB decoder given its weights that way holds 0.5 GB more, prepacking off), so
with one session per candidate, per verification and per timing round a 4 GB model would need its weights many
times over.  A session opened from a *file* whose weights are external data memory-maps them instead: the pages
are the file's, shared by every session and by the page cache, and cost no anonymous memory.  (``add_initializer``
shares a buffer too, but onnxruntime's constant folding then reads the file's data, not the buffer's.)

So a model with placeholders (:mod:`graphsub.frontends.shared`) is opened from a file written here
(:func:`session_file`) whose external data point into the pool, a temporary folder of data files:

* an array that is a memory map of a file (a model read from disk) is used where it is: that file is hard-linked
  into the pool (no copy; onnxruntime reads external data only inside the model's folder);
* any other array (a weight graphsub made: a folded or packed one) is written to a file of its own once, and every
  later session reuses it; the file is removed when the array is freed (a session that maps it keeps its pages).

Arrays are immutable once held, so what the pool wrote stays valid; the pool is removed when the process exits.
When a hard link cannot be made (another file system), the array is written like the others.
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

from graphsub.frontends.shared import held, placeholders

_CHUNK = 1 << 26
_PREFIX = "graphsub-weights-"


class _Pool:
    """The pool's folder and what it holds: per placeholder token, the data file and offset of its array."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self.where: dict[int, tuple[str, int]] = {}  # id(array) -> (file in the pool, offset), while it lives
        self.links: dict[tuple[int, int], str] = {}  # (st_dev, st_ino) of a source file -> its link's name
        self.names = itertools.count()
        self.lock = threading.Lock()

    def folder(self) -> Path:
        if self.dir is None:
            _remove_stale()
            self.dir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
            atexit.register(shutil.rmtree, self.dir, True)
        return self.dir

    def place(self, array: np.ndarray) -> tuple[str, int]:
        """Where ``array``'s bytes are in the pool (placed now if they are not yet)."""
        key = id(array)
        got = self.where.get(key)
        if got is None:
            got = self._linked(array)
            if got is None:
                got = self._written(array)
                weakref.finalize(array, (self.folder() / got[0]).unlink, True)  # its sessions keep their maps
            self.where[key] = got
            weakref.finalize(array, self.where.pop, key, None)  # its id may be another array's once it is freed
        return got

    def _linked(self, array: np.ndarray) -> tuple[str, int] | None:
        """``array``'s place in a hard link of the file it maps, or None (not a map of a file, or no link)."""
        found = _mapped_file(array)
        if found is None:
            return None
        path, offset = found
        try:
            st = os.stat(path)
        except OSError:
            return None
        name = self.links.get((st.st_dev, st.st_ino))
        if name is None:
            name = f"linked-{next(self.names)}.data"
            try:
                os.link(path, self.folder() / name)
            except OSError:
                return None
            self.links[(st.st_dev, st.st_ino)] = name
        return name, offset

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


def _mapped_file(array: np.ndarray) -> tuple[str, int] | None:
    """``(path, byte offset)`` of the file region ``array`` maps, when it is a C-contiguous memory map of a file or
    a view of one; else None."""
    if not array.flags.c_contiguous:
        return None
    a: object = array
    while isinstance(a, np.ndarray):
        if isinstance(a, np.memmap):
            delta = array.ctypes.data - a.ctypes.data
            if a.filename is not None and a.flags.c_contiguous and delta >= 0 and delta + array.nbytes <= a.nbytes:
                return os.fspath(a.filename), a.offset + delta
            return None
        a = a.base
    return None


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
    """The bytes of the arrays the pool wrote and still holds (hard-linked files are not counted: they cost
    nothing)."""
    if _POOL.dir is None:
        return 0
    return sum(f.stat().st_size for f in _POOL.dir.glob("array-*.data"))


__all__ = ["pool_bytes", "release", "session_file"]
