"""Operator registry.  Importing this package registers every op family.

>>> from graphsub.ops import REGISTRY
>>> REGISTRY["relu"].family
'elementwise'
"""

from __future__ import annotations

from graphsub.ops import (  # noqa: F401  (imported for their registrations)
    const,
    conv,
    elementwise,
    layout,
    leaf,
    linalg,
    msft,
    norm,
    pool,
    shape,
)
from graphsub.ops.registry import ONNX_IMPORTERS, REGISTRY, OpDef, get_op

__all__ = ["ONNX_IMPORTERS", "REGISTRY", "OpDef", "get_op"]
