"""Source patterns of substitution rules, written with a builder like graphs are.

A :class:`Pattern` is a small DAG of *pattern nodes* over *variables*:

* ``p.var("x")`` matches any value (an input tensor of the source graph, Definition 1);
  ``p.weight("w")`` matches only values computed from weights/constants alone;
* ``p.conv2d(x, w, act="none")`` matches a node with that op; every attribute given is a
  constraint -- a value (compared with the node's canonical attribute) or a predicate such as
  :func:`same_pads` -- and attributes not given are free (readable by ``where`` and the target);
* ``p.any(x, name="f")`` is a MetaFlow wildcard: any single non-leaf op with those inputs;
* multi-output ops take ``outputs=n`` and return a tuple (``a, b = p.split(t, outputs=2)``);
* values support ``+ - * / @`` (``add``, ``sub``, ``mul``, ``div``, ``matmul``);
* ``p.build({"out": value, ...})`` names the source outputs -- the domain of the output
  mapping *f*; every matched value read outside the match must be one of them.

Node names default to ``<op><k>``; give ``name=`` to refer to a node from ``where`` and targets.

>>> p = PatternBuilder()
>>> x, w = p.var("x"), p.weight("w")
>>> c = p.conv2d(x, w, act="none", name="conv")
>>> pat = p.build({"y": p.relu(c, name="relu")})
>>> [n.name for n in pat.nodes], pat.var_names
(['conv', 'relu'], ('x', 'w'))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from graphsub.errors import RuleError
from graphsub.ir.builder import Arithmetic
from graphsub.ir.node import OpSig
from graphsub.ops.common import resolve_pads
from graphsub.ops.registry import REGISTRY

WILDCARD = "*"
#: binary ops whose two operands may be swapped (see :meth:`Pattern.commuted`)
COMMUTATIVE = frozenset({"add", "mul"})


@dataclass(frozen=True)
class Pred:
    """An attribute predicate: ``test(value, sig) -> bool``; ``text`` describes it."""

    test: Callable[[Any, OpSig], bool]
    text: str

    def __repr__(self) -> str:
        return self.text


def same_pads() -> Pred:
    """``pads`` equal to TF/ONNX SAME padding for the node's input and kernel."""

    def test(value: Any, sig: OpSig) -> bool:
        kernel = sig.in_types[1].shape[2:4] if sig.op == "conv2d" else sig.attr["kernel"]
        want = resolve_pads("SAME", sig.in_types[0].shape[2:4], kernel, sig.attr["strides"],
                            sig.attr.get("dilations", (1, 1)))
        return tuple(value) == want

    return Pred(test, "SAME")


def valid_pads() -> Pred:
    return Pred(lambda v, sig: tuple(v) == (0, 0, 0, 0), "VALID")


def one_of(*values: Any) -> Pred:
    return Pred(lambda v, sig: v in values, f"one of {list(values)}")


def _pads_constraint(value: Any) -> Any:
    if value == "SAME":
        return same_pads()
    if value == "VALID":
        return valid_pads()
    return value


@dataclass(frozen=True)
class PRef:
    """A pattern value: output ``index`` of pattern node ``node`` or, if ``var`` is set, a variable."""

    node: str | None = None
    index: int = 0
    var: str | None = None

    def __repr__(self) -> str:
        if self.var is not None:
            return f"${self.var}"
        return str(self.node) if self.index == 0 else f"{self.node}#{self.index}"


@dataclass(frozen=True)
class PVar:
    name: str
    weight: bool = False


@dataclass(frozen=True)
class PNode:
    """One pattern node: op (or ``*``), inputs, attribute constraints, number of outputs."""

    name: str
    op: str
    inputs: tuple[PRef, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    num_outputs: int = 1

    def constraint(self, key: str) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return None

    def check_attrs(self, sig: OpSig) -> str | None:
        """None if ``sig`` satisfies the constraints, else the reason (memoised: nodes and
        signatures are immutable)."""
        if not self.attrs:
            return None
        key = (id(self), sig)  # pattern nodes live as long as their rules; sigs hash by identity
        try:
            return _ATTR_MEMO[key]
        except KeyError:
            pass
        why = self._check_attrs(sig)
        if len(_ATTR_MEMO) > 200_000:
            _ATTR_MEMO.clear()
        _ATTR_MEMO[key] = why
        return why

    def _check_attrs(self, sig: OpSig) -> str | None:
        for key, want in self.attrs:
            have = sig.attr.get(key)
            if isinstance(want, Pred):
                if not want.test(have, sig):
                    return f"{self.name}.{key} = {have!r} is not {want.text}"
            elif have != want:
                return f"{self.name}.{key} = {have!r}, rule needs {want!r}"
        return None


_ATTR_MEMO: dict[tuple[int, OpSig], str | None] = {}


@dataclass(frozen=True)
class Pattern:
    """An immutable source pattern (see module docstring).  Nodes are in topological order."""

    vars: tuple[PVar, ...]
    nodes: tuple[PNode, ...]
    outputs: tuple[tuple[str, PRef], ...]
    _index: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {n.name: i for i, n in enumerate(self.nodes)})

    @property
    def var_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.vars)

    def node(self, name: str) -> PNode:
        try:
            return self.nodes[self._index[name]]
        except KeyError:
            raise RuleError(f"pattern has no node {name!r} (nodes: {[n.name for n in self.nodes]})") from None

    def var(self, name: str) -> PVar:
        for v in self.vars:
            if v.name == name:
                return v
        raise RuleError(f"pattern has no variable {name!r}")

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.outputs)

    def consumers(self) -> dict[str, list[tuple[str, int, PRef]]]:
        """Pattern-level consumer lists: producer name (node or ``$var``) -> (node, slot, ref)."""
        out: dict[str, list[tuple[str, int, PRef]]] = {}
        for n in self.nodes:
            for slot, r in enumerate(n.inputs):
                key = f"${r.var}" if r.var is not None else str(r.node)
                out.setdefault(key, []).append((n.name, slot, r))
        return out

    def diameter(self) -> int:
        """Longest shortest path (undirected, over nodes and variables) between pattern nodes."""
        adj: dict[str, set[str]] = {n.name: set() for n in self.nodes}
        for n in self.nodes:
            for r in n.inputs:
                key = f"${r.var}" if r.var is not None else str(r.node)
                adj.setdefault(key, set()).add(n.name)
                adj[n.name].add(key)
        best = 0
        for start in (n.name for n in self.nodes):
            dist = {start: 0}
            frontier = [start]
            while frontier:
                nxt = []
                for u in frontier:
                    for v in adj[u]:
                        if v not in dist:
                            dist[v] = dist[u] + 1
                            nxt.append(v)
                frontier = nxt
            best = max(best, *(d for k, d in dist.items() if not k.startswith("$")))
        return best

    def commuted(self, nodes: Iterable[str] | None = None) -> Pattern:
        """This pattern with the two operands of ``nodes`` swapped (default: every node of a
        :data:`COMMUTATIVE` op); names, variables and outputs are unchanged."""
        names = [n.name for n in self.nodes if n.op in COMMUTATIVE] if nodes is None else list(nodes)
        if not names:
            raise RuleError("pattern has no commutative node to swap")
        swap = set(names)
        for name in names:
            n = self.node(name)
            if n.op not in COMMUTATIVE or len(n.inputs) != 2:
                raise RuleError(f"pattern node {name!r} ({n.op}) is not a commutative binary op")
        new = tuple(dataclasses.replace(n, inputs=n.inputs[::-1]) if n.name in swap else n for n in self.nodes)
        return Pattern(self.vars, new, self.outputs)

    def __str__(self) -> str:
        lines = [f"vars: {', '.join(('weight ' if v.weight else '') + v.name for v in self.vars)}"]
        for n in self.nodes:
            attrs = ", ".join(f"{k}={v!r}" for k, v in n.attrs)
            head = n.name if n.num_outputs == 1 else f"{n.name}[{n.num_outputs}]"
            lines.append(f"{head} = {n.op}({', '.join(map(repr, n.inputs))}){' {' + attrs + '}' if attrs else ''}")
        lines.append("outputs: " + ", ".join(f"{k}={v!r}" for k, v in self.outputs))
        return "\n".join(lines)


class PValue(Arithmetic):
    """Handle on a pattern value while building."""

    __slots__ = ("builder", "ref")

    def __init__(self, builder: PatternBuilder, ref: PRef):
        self.builder = builder
        self.ref = ref

    def __repr__(self) -> str:
        return f"PValue({self.ref!r})"


class PatternBuilder:
    """Builds a :class:`Pattern`; every registered op is a method (see module docstring)."""

    def __init__(self) -> None:
        self._vars: dict[str, PVar] = {}
        self._nodes: list[PNode] = []
        self._names: set[str] = set()
        self._counts: dict[str, int] = {}

    def var(self, name: str, *, weight: bool = False) -> PValue:
        """The variable ``name`` (declaring it again returns the same variable)."""
        have = self._vars.get(name)
        if have is not None:
            if have.weight != weight:
                raise RuleError(f"pattern variable {name!r} declared both as weight and as tensor")
            return PValue(self, PRef(var=name))
        if name in self._names:
            raise RuleError(f"pattern name {name!r} used twice")
        self._vars[name] = PVar(name, weight)
        return PValue(self, PRef(var=name))

    def weight(self, name: str) -> PValue:
        """A variable that only matches values computed from weights/constants alone."""
        return self.var(name, weight=True)

    def op_multi(self, op: str, *inputs: PValue, name: str | None = None, outputs: int = 1,
                 **attrs: Any) -> tuple[PValue, ...]:
        if op != WILDCARD:
            opdef = REGISTRY.get(op)
            if opdef is None or opdef.leaf:
                raise RuleError(f"pattern op {op!r} is not a registered compute op")
            known = {a.name for a in opdef.attrs}
            unknown = set(attrs) - known
            if unknown:
                raise RuleError(f"pattern {op}: unknown attribute(s) {sorted(unknown)}")
        for v in inputs:
            if not isinstance(v, PValue) or v.builder is not self:
                raise RuleError(f"pattern {op}: inputs must be values of this pattern, got {v!r}")
        if name is None:
            base = "any" if op == WILDCARD else op
            k = self._counts.get(base, 0)
            self._counts[base] = k + 1
            name = f"{base}{k}"
        if name in self._names or name in self._vars:
            raise RuleError(f"pattern name {name!r} used twice")
        self._names.add(name)
        cattrs = tuple(sorted((k, _pads_constraint(v) if k == "pads" else v) for k, v in attrs.items()))
        self._nodes.append(PNode(name, op, tuple(v.ref for v in inputs), cattrs, outputs))
        return tuple(PValue(self, PRef(node=name, index=i)) for i in range(outputs))

    def op1(self, op: str, *inputs: PValue, name: str | None = None, **attrs: Any) -> PValue:
        return self.op_multi(op, *inputs, name=name, **attrs)[0]

    def op(self, op: str, *inputs: PValue, name: str | None = None, outputs: int = 1,
           **attrs: Any) -> PValue | tuple[PValue, ...]:
        outs = self.op_multi(op, *inputs, name=name, outputs=outputs, **attrs)
        return outs[0] if outputs == 1 else outs

    def any(self, *inputs: PValue, name: str | None = None) -> PValue:
        """A wildcard node (MetaFlow): matches any single non-leaf op with these inputs."""
        return self.op1(WILDCARD, *inputs, name=name)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in REGISTRY and not REGISTRY[name].leaf:
            def call(*inputs: PValue, **kw: Any) -> Any:
                return self.op(name, *inputs, **kw)

            return call
        raise AttributeError(f"PatternBuilder has no attribute or op {name!r}")

    def build(self, outputs: Mapping[str, PValue]) -> Pattern:
        if not outputs:
            raise RuleError("a pattern needs at least one output")
        if not self._nodes:
            raise RuleError("a pattern needs at least one op node")
        used = {r.var for n in self._nodes for r in n.inputs if r.var is not None}
        unused = set(self._vars) - used
        if unused:
            raise RuleError(f"pattern variables {sorted(unused)} are not used by any node")
        outs = tuple((k, v.ref) for k, v in outputs.items())
        for k, r in outs:
            if r.var is not None:
                raise RuleError(f"pattern output {k!r} is a variable; outputs must be node values")
        return Pattern(tuple(self._vars.values()), tuple(self._nodes), outs)


__all__ = [
    "COMMUTATIVE", "WILDCARD", "PNode", "PRef", "PValue", "PVar", "Pattern", "PatternBuilder", "Pred",
    "one_of", "same_pads", "valid_pads",
]
