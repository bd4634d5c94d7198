"""Exception hierarchy: every failure graphsub reports is a :class:`GraphsubError`.

Messages name the node, rule, file or input they are about, so that a user can act on them.

>>> try:
...     raise ShapeError("conv2d 'c1': kernel 3x3 larger than padded input 2x2")
... except GraphsubError as e:
...     print(type(e).__name__, e)
ShapeError conv2d 'c1': kernel 3x3 larger than padded input 2x2
"""

from __future__ import annotations


class GraphsubError(Exception):
    """Base class of all errors raised on purpose by graphsub."""


class ImportError_(GraphsubError):
    """A model file could not be read or converted into the IR (malformed, unsupported)."""


class NotModelled(ImportError_):
    """A model graphsub cannot represent although it may be valid (a part it cannot type, a string constant, local
    functions it cannot inline): ``graphsub optimize`` writes such a model back unchanged when onnxruntime runs it."""


class ExportError(GraphsubError):
    """A graph could not be written out (e.g. weights without data, unsupported dtype)."""


class ShapeError(GraphsubError):
    """Shapes, dtypes or attributes of an operator are inconsistent."""


class AttrError(ShapeError):
    """An operator attribute is missing, unknown, or has a wrong type/value."""


class GraphError(GraphsubError):
    """A graph is structurally invalid (dangling reference, cycle, bad edit)."""


class RuleError(GraphsubError):
    """A substitution rule is malformed or cannot be applied."""


class VerificationError(GraphsubError):
    """Two graphs that should be equivalent are not (or cannot be compared)."""


class ExecutionError(GraphsubError):
    """A graph could not be executed (missing inputs, missing weight data, op failure)."""


class ReferenceFailed(VerificationError):
    """The reference (original) graph itself cannot run on the generated inputs, so nothing can be verified
    against it: no rewrite is to blame."""


class BudgetExceeded(GraphsubError):
    """A time, memory or size budget was exhausted."""


__all__ = [
    "AttrError",
    "BudgetExceeded",
    "ExecutionError",
    "ExportError",
    "GraphError",
    "GraphsubError",
    "ImportError_",
    "NotModelled",
    "ReferenceFailed",
    "RuleError",
    "ShapeError",
    "VerificationError",
]
