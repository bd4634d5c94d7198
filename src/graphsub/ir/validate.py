"""Full consistency check of a Graph (used by tests and after unusual edits).

>>> from graphsub.ir.builder import Builder
>>> b = Builder(); g = b.build(b.relu(b.input("x", (3,))))
>>> validate(g)
"""

from __future__ import annotations

from graphsub.errors import GraphError
from graphsub.ir.graph import LEAF_OPS, Graph
from graphsub.ir.node import make_sig


def validate(graph: Graph) -> None:
    """Raise GraphError listing every broken invariant (types, indices, cycles, leaves)."""
    problems: list[str] = []
    nodes = graph.nodes
    cons: dict[int, set[tuple[int, int]]] = {}
    by_op: dict[str, set[int]] = {}
    leaves: dict[str, int] = {}
    for nid, node in nodes.items():
        sig = node.sig
        by_op.setdefault(sig.op, set()).add(nid)
        if sig.op in LEAF_OPS:
            leaves[sig.attr["name"]] = nid
        for slot, r in enumerate(node.inputs):
            src = nodes.get(r.node)
            if src is None:
                problems.append(f"%{nid} ({sig.op}) input {slot} reads missing node %{r.node}")
                continue
            if r.index >= len(src.sig.out_types):
                problems.append(f"%{nid} input {slot} reads output {r.index} of %{r.node}")
                continue
            if src.sig.out_types[r.index] != sig.in_types[slot]:
                problems.append(
                    f"%{nid} ({sig.op}) input {slot}: signature expects {sig.in_types[slot]}, "
                    f"producer gives {src.sig.out_types[r.index]}"
                )
            cons.setdefault(r.node, set()).add((nid, slot))
        if sig is not make_sig(sig.op, dict(sig.attrs), sig.in_types):
            problems.append(f"%{nid}: signature is not canonical")
    got_cons = {k: set(v) for k, v in graph.consumers.items()}
    if got_cons != cons:
        problems.append("consumer index is inconsistent with the nodes")
    if {k: set(v.keys()) for k, v in graph.by_op.items()} != by_op:
        problems.append("op index is inconsistent with the nodes")
    if dict(graph.leaves) != leaves:
        problems.append("leaf-name index is inconsistent with the nodes")
    for r in graph.outputs:
        if r.node not in nodes or r.index >= len(nodes[r.node].sig.out_types):
            problems.append(f"output {r!r} is not a node output")
    for nid in graph.inputs:
        if nid not in nodes or nodes[nid].sig.op != "input":
            problems.append(f"graph input %{nid} is not an input node")
    for name, arr in graph.params.items():
        wid = graph.leaves.get(name)
        if wid is None or nodes[wid].sig.op != "weight":
            problems.append(f"params has data for {name!r}, which is not a weight")
        elif tuple(arr.shape) != nodes[wid].sig.out_types[0].shape:
            problems.append(f"weight {name!r}: data shape {arr.shape} != {nodes[wid].sig.out_types[0]}")
    if not problems:
        try:
            fresh = Graph.from_arena(dict(nodes), graph.inputs, graph.outputs, graph.output_names)
            fresh.topo_order()
            if len(fresh.nodes) != len(nodes):
                problems.append(f"{len(nodes) - len(fresh.nodes)} dead node(s) are not reachable from outputs")
        except GraphError as e:
            problems.append(str(e))
    if problems:
        raise GraphError(f"graph {graph.name!r} is invalid: " + "; ".join(problems))


__all__ = ["validate"]
