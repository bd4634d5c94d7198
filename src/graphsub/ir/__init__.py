"""Graph IR: interned nodes, immutable graphs with O(change) edits, builder, text format, and the
analyses shared by cost models, rules and reports (:mod:`graphsub.ir.analysis`).

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> g = b.build(b.relu(b.input("x", (2, 2))))
>>> g.num_ops
1
"""

from __future__ import annotations

import graphsub.ops  # noqa: F401  (registers the operators the IR needs)
from graphsub.ir.builder import Builder, Value
from graphsub.ir.edit import GraphEdit
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, OpSig, Ref, make_sig
from graphsub.ops.types import TensorType, make_type

__all__ = ["Builder", "Graph", "GraphEdit", "Node", "OpSig", "Ref", "TensorType", "Value", "make_sig", "make_type"]
