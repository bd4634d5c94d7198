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


def export_module(module: Any, example_inputs: Sequence[Any], path: str | os.PathLike[str], *,
                  training: bool = False) -> tuple[str, ...]:
    """Export ``module`` to ONNX at ``path`` (static shapes of ``example_inputs``); returns the input
    names (``input_0``, ``input_1``, ...).

    ``training``: export the forward pass as ``train()`` runs it, for a training graph: batch norms normalise with
    the batch's statistics (``BatchNormalization(training_mode=1)``, not folded into the convolutions as the
    inference export does), weights keep their ``state_dict`` names (no constant folding), and dropout is left out
    (a training graph does not model it: its modules are put in ``eval()`` mode for the export). The module's modes
    are restored afterwards."""
    import torch

    names = tuple(f"input_{i}" for i in range(len(example_inputs)))
    modes = {m: m.training for m in module.modules()}
    if training:
        module.train()
        for m in module.modules():
            if isinstance(m, torch.nn.modules.dropout._DropoutNd):
                m.eval()
    mode = torch.onnx.TrainingMode.PRESERVE if training else torch.onnx.TrainingMode.EVAL
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(example_inputs), os.fspath(path), dynamo=False, opset_version=17,
                              input_names=list(names), do_constant_folding=not training, training=mode)
    except Exception as e:  # the exporter raises many types
        raise ImportError_(f"torch.onnx.export failed: {e}") from e
    finally:
        for m, was in modes.items():
            m.training = was
    return names


def random_tensors(shapes: Sequence[Sequence[int]], seed: int) -> list[Any]:
    """Standard-normal float32 tensors of ``shapes`` (example inputs for a module given by shapes)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.standard_normal(tuple(s)).astype(np.float32)) for s in shapes]


__all__ = ["export_module", "random_tensors"]
