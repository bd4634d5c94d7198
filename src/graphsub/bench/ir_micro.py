"""IR microbenchmarks: cost of a one-node substitution vs copying the graph, and structural
hash times.

A *one-node replacement* rewrites ``add(a, b)`` into ``add(b, a)`` with a
:class:`~graphsub.ir.graph.GraphEdit` (one new node, its consumers rewired, the old node
removed).  A *copy* rebuilds the whole arena and its indices from the node records
(:meth:`Graph.from_arena`), which is what an optimizer that copies graphs per candidate pays
(TASO's ``Graph(const Graph&)``).  Times are medians of repeats on this machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from graphsub import zoo
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref


def _median_time(fn: Callable[[], Any], repeat: int, inner: int = 1) -> float:
    """Median over ``repeat`` runs of the mean time of ``inner`` calls (seconds)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def commute_add(g: Graph, nid: int) -> Graph:
    """The one-node replacement: ``add(a, b)`` -> ``add(b, a)``."""
    node = g.nodes[nid]
    a, b = node.inputs
    e = g.edit()
    e.replace(Ref(nid, 0), e.op("add", b, a))
    return e.commit()


def copy_graph(g: Graph) -> Graph:
    return Graph.from_arena(dict(g.nodes), g.inputs, g.outputs, g.output_names, g.params, name=g.name)


def fresh_hash(g: Graph) -> int:
    """Structural hash computed from scratch: per-node hashes and topological order cleared."""
    g.drop_derived()
    return g.structural_hash()


def edit_vs_copy(g: Graph, repeat: int = 15) -> dict[str, Any]:
    """Time one-node replacements at the first, middle and last ``add`` (topological order)
    against a full copy; also the incremental hash after the edit vs a from-scratch hash."""
    order = [n for n in g.topo_order() if g.nodes[n].op == "add"]
    if not order:
        raise ValueError(f"{g.name} has no add node")
    g.structural_hash()  # parent hash known, as during a search
    positions = {"first": order[0], "middle": order[len(order) // 2], "last": order[-1]}
    out: dict[str, Any] = {"model": g.name, "num_nodes": g.num_nodes, "num_ops": g.num_ops}
    out["copy_s"] = _median_time(lambda: copy_graph(g), repeat, 5)
    scratch = copy_graph(g)
    out["hash_from_scratch_s"] = _median_time(lambda: fresh_hash(scratch), repeat, 5)
    for pos, nid in positions.items():
        def edit(nid: int = nid) -> Graph:
            return commute_add(g, nid)

        def edit_and_hash(nid: int = nid) -> int:
            return commute_add(g, nid).structural_hash()

        out[f"edit_{pos}_s"] = _median_time(edit, repeat, 50)
        out[f"edit_{pos}_plus_hash_s"] = _median_time(edit_and_hash, repeat, 20)
    out["copy_over_edit_middle"] = out["copy_s"] / out["edit_middle_s"]
    return out


def hash_times(repeat: int = 9) -> list[dict[str, Any]]:
    """From-scratch structural hash time of every zoo model (default parameters)."""
    rows = []
    for name in zoo.list_models():
        g = copy_graph(zoo.get(name))
        seconds = _median_time(lambda: fresh_hash(g), repeat, 3)  # noqa: B023 - called right here
        rows.append({"model": name, "num_nodes": g.num_nodes, "num_ops": g.num_ops, "hash_s": seconds,
                     "hash_per_node_us": seconds / g.num_nodes * 1e6})
    return rows


def scaling(blocks: tuple[int, ...] = (2, 8, 32, 128, 512), repeat: int = 9) -> list[dict[str, Any]]:
    """Edit (middle add) vs copy time as the OCGGS ResNet grows (5 ops per block)."""
    rows = []
    for n in blocks:
        g = zoo.get("resnet", blocks=n)
        r = edit_vs_copy(g, repeat)
        rows.append({k: r[k] for k in ("num_nodes", "num_ops", "copy_s", "edit_middle_s",
                                        "edit_middle_plus_hash_s", "hash_from_scratch_s")} | {"blocks": n})
    return rows


__all__ = ["commute_add", "copy_graph", "edit_vs_copy", "fresh_hash", "hash_times", "scaling"]
