"""graphsub: verified graph substitutions for faster ONNX models.

``graphsub.optimize_module(module, example_inputs, ...)`` optimizes a PyTorch module through ONNX
(:mod:`graphsub.optimize.torch_module`); :func:`graphsub.optimize.optimize` does the same for ONNX files.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    if name == "optimize_module":  # lazy: keeps `import graphsub` light
        from graphsub.optimize.torch_module import optimize_module

        return optimize_module
    raise AttributeError(f"module 'graphsub' has no attribute {name!r}")


__all__ = ["__version__", "optimize_module"]
