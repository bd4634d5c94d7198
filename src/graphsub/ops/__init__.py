"""Operators: tensor types (:mod:`.types`), the registry of :class:`OpDef` records (:mod:`.registry`) and one module
per op family.  Importing this package registers every op family.

Layering: ``ops`` imports nothing of graphsub but :mod:`graphsub.errors`; the IR (:mod:`graphsub.ir`) builds nodes
and graphs on top of it.

>>> from graphsub.ops import REGISTRY
>>> REGISTRY["relu"].family
'elementwise'
"""

from __future__ import annotations

from graphsub.ops import (  # noqa: F401  (imported for their registrations)
    const,
    conv,
    elementwise,
    grad,
    grad_pool,
    layout,
    leaf,
    linalg,
    msft,
    msft_attention,
    msft_gqa,
    msft_rms,
    msft_rotary,
    norm,
    pool,
    recurrent,
    select,
    shape,
    train,
)
from graphsub.ops.registry import ONNX_IMPORTERS, REGISTRY, OpDef, get_op

__all__ = ["ONNX_IMPORTERS", "REGISTRY", "OpDef", "get_op"]
