"""A line-oriented text format for graphs that prints and parses back.

Values are numbered ``%0, %1, ...`` in canonical topological order (not by node id), so equal
graphs print identically.  Attributes are JSON and only those differing from the schema
default are written.  Weight data are not written (``weight`` lines carry name and type).

>>> from graphsub.ir.builder import Builder
>>> b = Builder("demo")
>>> x = b.input("x", (1, 4))
>>> a, c = b.split(x, axis=1, sizes=(1, 3))
>>> g = b.build({"y": b.relu(c)})
>>> print(to_text(g))
graph "demo"
%0 = input "x" : f32[1,4]
%1:2 = split(%0) {"axis": 1, "sizes": [1, 3]} : f32[1,1], f32[1,3]
%2 = relu(%1#1) : f32[1,3]
output "y" = %2
>>> from_text(to_text(g)) == g
True
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from graphsub.errors import GraphError, GraphsubError
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, Ref, make_sig
from graphsub.ops.registry import REQUIRED, get_op
from graphsub.ops.types import parse_type

_TYPE_RE = re.compile(r"[a-z0-9]+\[[0-9,]*\]")
_HEAD_RE = re.compile(r'^%(\d+)(?::(\d+))? = ([A-Za-z_][A-Za-z0-9_]*)')
_REF_RE = re.compile(r"^%(\d+)(?:#(\d+))?$")


def _json_value(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_json_value(x) for x in v]
    if isinstance(v, bytes):
        return {"$b64": base64.b64encode(v).decode()}
    return v


def _from_json(v: Any) -> Any:
    if isinstance(v, dict) and set(v) == {"$b64"}:
        return base64.b64decode(v["$b64"])
    if isinstance(v, list):
        return tuple(_from_json(x) for x in v)
    return v


def to_text(graph: Graph) -> str:
    """Print ``graph`` (see the module docstring for the format)."""
    order = graph.topo_order()
    num = {nid: k for k, nid in enumerate(order)}

    def ref(r: Ref) -> str:
        return f"%{num[r.node]}" if r.index == 0 else f"%{num[r.node]}#{r.index}"

    lines = [f"graph {json.dumps(graph.name)}"]
    for nid in order:
        node = graph.nodes[nid]
        sig = node.sig
        k = num[nid]
        if sig.op in ("input", "weight"):
            lines.append(f'%{k} = {sig.op} {json.dumps(sig.attr["name"])} : {sig.out_types[0]!r}')
            continue
        defaults = {a.name: a.default for a in sig.opdef.attrs if a.default is not REQUIRED}
        attrs = {key: _json_value(v) for key, v in sig.attrs if key not in defaults or defaults[key] != v}
        head = f"%{k}" if len(sig.out_types) == 1 else f"%{k}:{len(sig.out_types)}"
        args = ", ".join(ref(r) for r in node.inputs)
        attr_txt = f" {json.dumps(attrs)}" if attrs else ""
        types = ", ".join(repr(t) for t in sig.out_types)
        lines.append(f"{head} = {sig.op}({args}){attr_txt} : {types}")
    for r, name in zip(graph.outputs, graph.output_names, strict=True):
        lines.append(f"output {json.dumps(name)} = {ref(r)}")
    return "\n".join(lines)


def _parse_refs(text: str, lineno: int) -> list[Ref]:
    refs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _REF_RE.match(part)
        if not m:
            raise GraphError(f"line {lineno}: bad value reference {part!r}")
        refs.append(Ref(int(m.group(1)), int(m.group(2) or 0)))
    return refs


def from_text(text: str) -> Graph:
    """Parse the output of :func:`to_text` (``#`` starts a comment line)."""
    decoder = json.JSONDecoder()
    name = "graph"
    nodes: dict[int, Node] = {}
    inputs: list[int] = []
    outputs: list[Ref] = []
    out_names: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if line.startswith("graph "):
                name = json.loads(line[6:])
                continue
            if line.startswith("output "):
                oname, pos = decoder.raw_decode(line, 7)
                rest = line[pos:].strip()
                if not rest.startswith("="):
                    raise GraphError(f"line {lineno}: expected '=' after output name")
                (r,) = _parse_refs(rest[1:], lineno)
                outputs.append(r)
                out_names.append(oname)
                continue
            m = _HEAD_RE.match(line)
            if not m:
                raise GraphError(f"line {lineno}: cannot parse {raw!r}")
            k, op = int(m.group(1)), m.group(3)
            if k in nodes:
                raise GraphError(f"line {lineno}: value %{k} defined twice")
            rest = line[m.end():].strip()
            if op in ("input", "weight"):
                lname, pos = decoder.raw_decode(rest)
                t = parse_type(rest[pos:].strip().removeprefix(":").strip())
                nodes[k] = Node(make_sig(op, {"name": lname, "shape": t.shape, "dtype": t.dtype}, ()))
                if op == "input":
                    inputs.append(k)
                continue
            if not rest.startswith("("):
                raise GraphError(f"line {lineno}: expected '(' after op name")
            close = rest.index(")")
            refs = _parse_refs(rest[1:close], lineno)
            rest = rest[close + 1:].strip()
            attrs: dict[str, Any] = {}
            if rest.startswith("{"):
                obj, pos = decoder.raw_decode(rest)
                attrs = {key: _from_json(v) for key, v in obj.items()}
                rest = rest[pos:].strip()
            if not rest.startswith(":"):
                raise GraphError(f"line {lineno}: expected ': <types>'")
            declared = [parse_type(t) for t in _TYPE_RE.findall(rest[1:])]
            for r in refs:
                if r.node not in nodes:
                    raise GraphError(f"line {lineno}: %{r.node} used before definition")
            in_types = tuple(nodes[r.node].sig.out_types[r.index] for r in refs)
            get_op(op)
            sig = make_sig(op, attrs, in_types)
            if list(sig.out_types) != declared:
                raise GraphError(
                    f"line {lineno}: declared types {declared} but {op} infers {list(sig.out_types)}"
                )
            nodes[k] = Node(sig, tuple(refs))
        except GraphsubError as e:
            if str(e).startswith("line "):
                raise
            raise GraphError(f"line {lineno}: {e}") from e
        except (ValueError, IndexError) as e:
            raise GraphError(f"line {lineno}: cannot parse {raw!r} ({e})") from e
    if not outputs:
        raise GraphError("graph text has no 'output' line")
    return Graph.from_arena(nodes, inputs, outputs, out_names, name=name)


__all__ = ["from_text", "to_text"]
