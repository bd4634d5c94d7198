"""Writing step of :func:`graphsub.optimize.optimize`: the chosen model, atomically, never over the input.

The optimized model is exported from the IR; the original is written as the user gave it -- a file
byte for byte (re-saved with its weights beside it when they are external data), a zoo model or a
Graph exported once.  Every write goes to a temporary file in the target directory first and is then
renamed over the target (``os.replace``), so a reader sees the old file or the new one, never half of
one, and an interrupted run leaves nothing behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from graphsub.errors import ExportError


def write_serialized(data: bytes, path: str | os.PathLike[str]) -> Path:
    """Write a serialized model atomically: its bytes, or -- a large model's, whose weights are held by reference
    (:mod:`graphsub.frontends.shared`) -- the model with its weights in ``<name>.data`` beside it."""
    from graphsub.frontends.onnx_io import write_held

    return Path(path) if write_held(data, path) else write_bytes(data, path)


def write_bytes(data: bytes, path: str | os.PathLike[str], *, suffix: str = ".onnx") -> Path:
    """Write ``data`` atomically (temporary file, named ``.graphsub-*SUFFIX``, in the same directory,
    then ``os.replace``)."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ExportError(f"{out}: directory {parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".graphsub-", suffix=suffix, dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_original(source: bytes | str, output: str | os.PathLike[str]) -> None:
    """Write the original model: ``source`` is the input file's path or the serialized model."""
    from graphsub.frontends.onnx_io import has_external_data, read_model, write_model

    if isinstance(source, bytes):
        write_serialized(source, output)
    elif has_external_data(source):  # weights beside the file: re-save them with it
        write_model(read_model(source), output, check=False)
    else:  # the input, byte for byte
        write_bytes(Path(source).read_bytes(), output)


def write_optimized(model: Any, output: str | os.PathLike[str]) -> None:
    """Write the optimized model (checked by ``onnx.checker`` first; large weights beside it)."""
    from graphsub.frontends.onnx_io import write_model

    write_model(model, output)


__all__ = ["write_bytes", "write_optimized", "write_original", "write_serialized"]
