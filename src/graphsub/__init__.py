"""graphsub: verified graph substitutions for faster ONNX models.

``graphsub.optimize_module(module, example_inputs, ...)`` optimizes a PyTorch module through ONNX
(:mod:`graphsub.optimize.torch_module`); :func:`graphsub.optimize.optimize` does the same for ONNX files.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("graphsub")  # pyproject.toml's, as installed (`make` reinstalls when it changes)
except PackageNotFoundError:  # the source tree on sys.path without an installation
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "optimize_module":  # lazy: keeps `import graphsub` light
        from graphsub.optimize.torch_module import optimize_module

        return optimize_module
    raise AttributeError(f"module 'graphsub' has no attribute {name!r}")


__all__ = ["__version__", "optimize_module"]
