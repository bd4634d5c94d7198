"""Equality saturation (Tensat-style) over graphsub's rules, with greedy and exact (ILP) DAG extraction.

Modules: :mod:`~graphsub.search.eqsat.egraph` (the e-graph), :mod:`~graphsub.search.eqsat.ematch`
(matching rule sources over e-classes, applying targets), :mod:`~graphsub.search.eqsat.cycles`
(cycle filtering), :mod:`~graphsub.search.eqsat.extract` (greedy / ILP extraction, back to a Graph),
:mod:`~graphsub.search.eqsat.runner` (the ``eqsat`` search algorithm).
"""

from graphsub.search.eqsat.egraph import EClass, EGraph, EGraphError, ENode
from graphsub.search.eqsat.extract import NodeCosts, dag_cost, greedy_tree, ilp, to_graph
from graphsub.search.eqsat.runner import eqsat, saturate

__all__ = ["EClass", "EGraph", "EGraphError", "ENode", "NodeCosts", "dag_cost", "eqsat", "greedy_tree", "ilp",
           "saturate", "to_graph"]
