"""``graphsub info``: a model's op histogram, FLOPs, parameters and input/output shapes."""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape
from rich.table import Table

from graphsub.cli.common import JsonOpt, ModelArg, ShapeOpt, load_graph, out, parse_shapes
from graphsub.ir.graph import Graph


def graph_info(graph: Graph) -> dict[str, Any]:
    """Summary used by ``graphsub info``: op histogram, FLOPs, parameters, shapes."""
    flops = 0
    nbytes = 0
    opaque: dict[str, int] = {}
    for node in graph.nodes.values():
        sig = node.sig
        if sig.opdef.leaf:
            continue
        flops += sig.opdef.flops(sig.in_types, sig.out_types, sig.attr)
        nbytes += sig.opdef.bytes_moved(sig.in_types, sig.out_types, sig.attr)
        if sig.op == "opaque":
            key = sig.attr["op_type"]
            opaque[key] = opaque.get(key, 0) + 1
    weights = [graph.nodes[n].sig.out_types[0] for n in graph.ops_of("weight")]
    return {
        "name": graph.name,
        "num_ops": graph.num_ops,
        "num_nodes": graph.num_nodes,
        "op_histogram": graph.op_histogram(),
        "opaque_ops": dict(sorted(opaque.items())),
        "flops": flops,
        "bytes_moved": nbytes,
        "params": sum(t.numel for t in weights),
        "param_bytes": sum(t.nbytes for t in weights),
        "weights_with_data": len(graph.params),
        "num_weights": len(weights),
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype}
                   for n, t in zip(graph.input_names, graph.input_types, strict=True)],
        "outputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype}
                    for n, t in zip(graph.output_names, graph.output_types, strict=True)],
        "structural_hash": f"{graph.structural_hash() & 0xFFFFFFFFFFFFFFFF:016x}",
    }


def human(n: float) -> str:
    """``1234567`` -> ``"1.23M"`` (SI prefixes, three significant digits)."""
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g}P"


def info(model: ModelArg, input_shape: ShapeOpt = None, as_json: JsonOpt = False) -> None:
    """Show a model's op histogram, FLOPs, parameter count and input/output shapes."""
    data = graph_info(load_graph(model, parse_shapes(input_shape), as_json))
    if as_json:
        print(json.dumps(data, indent=2))
        return
    out.print(f"[bold]{escape(data['name'])}[/]: {data['num_ops']} ops, {human(data['flops'])}FLOPs, "
              f"{human(data['params'])} params ({human(data['param_bytes'])}B)")
    for kind in ("inputs", "outputs"):
        for v in data[kind]:
            out.print(f"  {kind[:-1]:6} {escape(v['name'])}: {v['dtype']}{v['shape']}")
    table = Table("op", "count", title="op histogram")
    for op, n in data["op_histogram"].items():
        table.add_row(op, str(n))
    out.print(table)
    if data["opaque_ops"]:
        out.print(f"opaque (kept verbatim): {escape(str(data['opaque_ops']))}")


__all__ = ["graph_info", "human", "info"]
