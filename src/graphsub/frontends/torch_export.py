"""PyTorch -> ONNX: export a module with torch's TorchScript-based exporter (opset 17, static shapes).

torch is imported lazily (only when a module is exported); the exporter's warnings are silenced and any
failure becomes :class:`~graphsub.errors.ImportError_` (bad input), whatever the exporter raised.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from graphsub.errors import ImportError_


def export_module(module: Any, example_inputs: Sequence[Any], path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Export ``module`` to ONNX at ``path`` (static shapes of ``example_inputs``); returns the input
    names (``input_0``, ``input_1``, ...)."""
    import torch

    names = tuple(f"input_{i}" for i in range(len(example_inputs)))
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(example_inputs), os.fspath(path), dynamo=False, opset_version=17,
                              input_names=list(names), do_constant_folding=True)
    except Exception as e:  # the exporter raises many types
        raise ImportError_(f"torch.onnx.export failed: {e}") from e
    return names


def random_tensors(shapes: Sequence[Sequence[int]], seed: int) -> list[Any]:
    """Standard-normal float32 tensors of ``shapes`` (example inputs for a module given by shapes)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.standard_normal(tuple(s)).astype(np.float32)) for s in shapes]


__all__ = ["export_module", "random_tensors"]
