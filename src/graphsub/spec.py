"""Model specs: what a user names a model by, parsed once and used by every command and the library.

A model spec is one of

* ``zoo:NAME[:k=v,...]`` -- a built-in benchmark model with parameter overrides (values parsed as JSON
  when they can be): ``zoo:resnet:blocks=4``;
* ``FILE.py:ClassName`` -- a PyTorch module, constructed without arguments (exported to ONNX by
  :mod:`graphsub.optimize.torch_module`);
* a path to an ONNX file;
* a bare ``NAME[:k=v,...]`` -- the zoo model of that name when no such file exists and the name is a
  zoo model (``resnet:blocks=4``, as benchmark grids write them), else a path (which then fails to load
  with "no such file").

The same text means the same model everywhere: ``graphsub info``, ``optimize``, ``search``, ``bench``
and :func:`graphsub.optimize.optimize`.  :func:`check_output` is the one place that refuses to write
over the input.

>>> ModelSpec.parse("zoo:resnet:blocks=4")
ModelSpec(kind='zoo', text='zoo:resnet:blocks=4', name='resnet', kwargs=(('blocks', 4),))
>>> ModelSpec.parse("resnet:blocks=4") == ModelSpec.parse("zoo:resnet:blocks=4").with_text("resnet:blocks=4")
True
>>> ModelSpec.parse("net.py:Net").kind, ModelSpec.parse("model.onnx").kind
('module', 'onnx')
>>> ModelSpec.parse("zoo:resnet:blocks=2").load().num_ops
10
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from graphsub.errors import ExportError, GraphsubError, ImportError_
from graphsub.ir.graph import Graph

Kind = Literal["onnx", "zoo", "module"]
Shapes = dict[str, tuple[int, ...]]


class OverwriteError(GraphsubError):
    """An output path names the input file (or the same file under another name)."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec (see the module docstring).  ``name``: the zoo name, the ONNX path or
    ``FILE.py``'s path; ``kwargs``: zoo parameters (sorted ``(key, value)`` pairs) or, for a module,
    ``(("class", ClassName),)``."""

    kind: Kind
    text: str
    name: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str | os.PathLike[str]) -> ModelSpec:
        """Parse ``text``; raises :class:`~graphsub.errors.ImportError_` for malformed zoo arguments."""
        s = os.fspath(text)
        if s.startswith("zoo:"):
            name, kwargs = _zoo_parts(s[4:], s)
            return cls("zoo", s, name, kwargs)
        path, sep, cls_name = s.rpartition(":")
        if sep and path.endswith(".py") and cls_name.isidentifier() and not Path(s).exists():
            return cls("module", s, path, (("class", cls_name),))
        if not looks_like_path(s):
            name, _, _ = s.partition(":")
            if _is_zoo_name(name):
                zname, kwargs = _zoo_parts(s, s)
                return cls("zoo", s, zname, kwargs)
        return cls("onnx", s, s)

    def with_text(self, text: str) -> ModelSpec:
        return dataclasses.replace(self, text=text)

    @property
    def path(self) -> Path | None:
        """The file the spec reads (ONNX or Python), None for a zoo model."""
        return None if self.kind == "zoo" else Path(self.name)

    @property
    def zoo_kwargs(self) -> dict[str, Any]:
        return dict(self.kwargs) if self.kind == "zoo" else {}

    def load(self, input_shapes: Shapes | None = None, sizes: Mapping[str, int] | None = None,
             generic: bool = False) -> Graph:
        """The graph of a zoo model or an ONNX file (``input_shapes`` fix symbolic input dims of a file; ``sizes``:
        what the free ones are imported at, by name, where not at 1; ``generic``: the others at distinct sizes that
        are never 1, :func:`graphsub.frontends.dims.import_sizes`).

        Raises :class:`~graphsub.errors.GraphsubError` subclasses for bad input (unknown zoo name or
        parameter, unreadable file); a module spec raises ImportError_ (it needs example inputs: use
        :func:`graphsub.optimize.optimize_module`)."""
        if self.kind == "zoo":
            from graphsub import zoo

            try:
                return zoo.get(self.name, **self.zoo_kwargs)
            except TypeError as e:  # a parameter the builder does not take
                raise zoo.ZooError(f"{self.text}: {e}") from e
        if self.kind == "module":
            raise ImportError_(f"{self.text} is a PyTorch module: it needs input shapes and an export "
                               "(graphsub optimize FILE.py:Class --input-shape ...)")
        if not looks_like_path(self.text):  # a bare name: neither a file nor a zoo model
            from graphsub import zoo

            raise zoo.ZooError(f"unknown model {self.text.partition(':')[0]!r} (no such file either); known models: "
                               f"{', '.join(zoo.MODELS)}")
        from graphsub.frontends.onnx_io import load

        return load(self.name, input_shapes=input_shapes, sizes=sizes, generic=generic)

    def load_module(self) -> Any:
        """An instance of the module class of a ``FILE.py:ClassName`` spec (constructed without
        arguments, in eval mode).  User code runs here: any error it raises becomes ImportError_."""
        import importlib.util

        cls_name = dict(self.kwargs).get("class", "")
        if self.kind != "module" or not cls_name:
            raise ImportError_(f"expected FILE.py:ClassName, got {self.text!r}")
        path = Path(self.name)
        if not path.is_file():
            raise ImportError_(f"{path}: no such file")
        mod_spec = importlib.util.spec_from_file_location(f"graphsub_user_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError_(f"{path}: cannot import")
        mod = importlib.util.module_from_spec(mod_spec)
        try:
            mod_spec.loader.exec_module(mod)
            return getattr(mod, cls_name)().eval()
        except Exception as e:  # user code: any error is a bad input
            raise ImportError_(f"{self.text}: cannot construct the module: {type(e).__name__}: {e}") from e


def check_output(source: ModelSpec | None, output: str | os.PathLike[str]) -> None:
    """Refuse to write ``output`` over the input file of ``source`` (:class:`OverwriteError`, also for
    a hard link to it); refuse (ExportError) an output that exists and is not a regular file (a directory, a device
    such as /dev/full, a FIFO, a socket: writing atomically would replace it with a file), a directory that does not
    exist, and a directory graphsub cannot create files in (tried, so it holds for root and read-only file systems).
    Cheap: checked before any long work."""
    dst = Path(output)
    try:
        _check_output(source, dst)
    except (OSError, RuntimeError) as e:  # a name too long, a symlink loop, ...
        raise ExportError(f"{dst}: cannot write there ({getattr(e, 'strerror', None) or e})") from None


def _check_output(source: ModelSpec | None, dst: Path) -> None:
    src = source.path if source is not None else None
    if src is not None and _same_file(src, dst):
        raise OverwriteError(f"refusing to overwrite the input file {src}")
    if dst.is_dir():
        raise ExportError(f"{dst} is a directory; give a file name for the output (e.g. {dst / 'model.onnx'})")
    if dst.exists() and not dst.is_file():
        raise ExportError(f"{dst} exists and is not a regular file (a device, FIFO or socket); refusing to replace it")
    parent = dst.resolve().parent
    if not parent.is_dir():
        raise ExportError(f"{dst}: directory {dst.parent} does not exist")
    _check_writable(parent, dst)


def _check_writable(directory: Path, dst: Path) -> None:
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".graphsub-probe-"):
            pass
    except OSError as e:
        raise ExportError(f"{dst}: cannot create files in {directory} ({e.strerror or e})") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        ra = a.resolve()
    except (OSError, RuntimeError):  # an input that cannot be resolved cannot be read either: the load says so
        return False
    return ra == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))


def looks_like_path(text: str) -> bool:
    """Whether ``text`` names a file rather than a zoo model: an ``.onnx`` name, a path with a separator, or an
    existing file."""
    return text.endswith(".onnx") or os.sep in text or (os.altsep is not None and os.altsep in text) \
        or Path(text).exists()


def _is_zoo_name(name: str) -> bool:
    from graphsub import zoo

    return name in zoo.MODELS


def _zoo_parts(body: str, text: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """``"resnet:blocks=4,x=a"`` -> ``("resnet", (("blocks", 4), ("x", "a")))``."""
    name, _, rest = body.partition(":")
    kwargs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ImportError_(f"bad zoo argument {part!r} in {text!r}; expected key=value (e.g. zoo:resnet:blocks=4)")
        try:
            kwargs[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key.strip()] = value
    return name, tuple(sorted(kwargs.items()))


def split_specs(text: str) -> list[str]:
    """Comma-separated model specs, where a piece ``key=value`` without ``:`` continues the previous
    spec: ``"resnet:blocks=4,sru"`` -> ``["resnet:blocks=4", "sru"]``, ``"a:x=1,y=2,b"`` ->
    ``["a:x=1,y=2", "b"]``.

    >>> split_specs("resnet:blocks=4,sru,zoo:a:x=1,y=2")
    ['resnet:blocks=4', 'sru', 'zoo:a:x=1,y=2']
    """
    specs: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if specs and "=" in piece and ":" not in piece and ":" in specs[-1]:
            specs[-1] += "," + piece
        else:
            specs.append(piece)
    return specs


__all__ = ["Kind", "ModelSpec", "OverwriteError", "Shapes", "check_output", "looks_like_path", "split_specs"]
