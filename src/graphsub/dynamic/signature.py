"""Depth-limited subgraph signatures (the thesis' §4.2-4.5, §5.3, §5.5) over a lazy DAG.

:func:`extract` takes a node ``n`` and a depth ``d`` and returns the subgraph rooted at ``n``:

* every lazy node at distance ``< d`` from ``n`` along input edges is a candidate (the thesis'
  ``H'(n, d)``: at distance ``d`` the walk stops, and the input there becomes a leaf ``C``);
* **§5.5**: a non-root node whose value is also consumed outside the subgraph is not taken
  inside (it becomes a leaf), repeated until no such node remains, so replacing the subgraph
  by one call never computes a value twice;
* the signature is built by one depth-first walk from ``n``: a node is
  ``(op, constants, shape, child signatures)``; a node met a second time in the same walk is
  ``("shared", k)`` (the thesis' ``H(shared(H(n)))``: §5.3), a leaf is ``("C", k, shape)`` with
  ``k`` its input position (so ``x * x`` and ``x * y`` differ), a parameter is ``("P", id)``
  (parameters are identities: two cells with different weights are different patterns).
  ``shapes=False`` drops the shapes: *structure* instead of *shape* equivalence (§4.2).

The signature is hashed (``hash_fn``, default Python's tuple hash, i.e. ``H(f, H(c_0), ...)``)
for the table; :class:`PatternTable` confirms every hash hit by comparing the structures and
counts collisions, so a collision can never make two different subgraphs share code.

>>> import torch
>>> from graphsub.dynamic.lazy import lazy
>>> w = torch.nn.Parameter(torch.ones(2, 2))
>>> with lazy():
...     x = torch.ones(1, 2)
...     y = torch.tanh(x @ w)
...     z = y * y + 1
>>> p = extract(z, depth=8, consumers=consumer_map(z))
>>> [n.name for n in p.nodes], len(p.inputs)
(['Tensor.matmul', 'torch.tanh', 'Tensor.__mul__', 'Tensor.__add__'], 2)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from graphsub.dynamic.dag import is_param
from graphsub.dynamic.lazy import LazyTensor


def reachable(out: LazyTensor) -> list[LazyTensor]:
    """Lazy nodes ``out`` depends on, in topological order (inputs first)."""
    order: list[LazyTensor] = []
    seen: set[int] = set()
    stack: list[tuple[LazyTensor, bool]] = [(out, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node.gid in seen:
            continue
        seen.add(node.gid)
        stack.append((node, True))
        for i in reversed(node.inputs):
            if type(i) is LazyTensor and i.gid not in seen:
                stack.append((i, False))
    return order


def consumer_map(out: LazyTensor) -> dict[int, list[LazyTensor]]:
    """``gid -> consumers`` among the nodes ``out`` depends on (one entry per use)."""
    cons: dict[int, list[LazyTensor]] = {}
    for node in reachable(out):
        cons.setdefault(node.gid, [])
        for i in node.inputs:
            if type(i) is LazyTensor:
                cons.setdefault(i.gid, []).append(node)
    return cons


@dataclass
class Subgraph:
    """A subgraph rooted at ``root``: ``nodes`` in topological order (root last), ``inputs`` its
    leaves in signature order (lazy nodes outside it, parameters, data tensors)."""

    root: LazyTensor
    nodes: list[LazyTensor]
    inputs: list[Any]
    structure: tuple[Any, ...]
    shared: int = 0

    @property
    def op_count(self) -> int:
        return len(self.nodes)


def _leaf_token(x: Any, k: int, shapes: bool) -> tuple[Any, ...]:
    if type(x) is not LazyTensor and is_param(x):
        return ("P", id(x))
    shape = tuple(x.shape) if shapes and x.shape is not None else None
    dtype = x.dtype if shapes else None
    return ("C", k, shape, dtype)


def extract(root: LazyTensor, depth: int, consumers: dict[int, list[LazyTensor]], shapes: bool = True) -> Subgraph:
    """The depth-limited, §5.5-respecting subgraph at ``root`` and its signature (module docstring)."""
    # candidates: lazy nodes at distance < depth (breadth first: the shortest distance counts)
    dist = {root.gid: 0}
    frontier = [root]
    members: dict[int, LazyTensor] = {root.gid: root}
    while frontier:
        nxt = []
        for n in frontier:
            d = dist[n.gid] + 1
            if d >= depth:
                continue
            for i in n.inputs:
                if type(i) is LazyTensor and i.gid not in dist and (i.shape is not None or _multi_inside(i, n)):
                    dist[i.gid] = d
                    members[i.gid] = i
                    nxt.append(i)
        frontier = nxt
    # §5.5: no internal node may be consumed outside the subgraph
    while True:
        bad = [g for g, n in members.items() if n is not root and any(c.gid not in members for c in consumers[g])]
        if not bad:
            break
        for g in bad:
            del members[g]
        keep = _reach_within(root, members)
        members = {g: n for g, n in members.items() if g in keep}
    # signature walk
    visit: dict[int, int] = {}
    leaf_pos: dict[int, int] = {}
    inputs: list[Any] = []
    nodes: list[LazyTensor] = []
    shared = 0

    def walk(n: LazyTensor) -> tuple[Any, ...]:
        nonlocal shared
        if n.gid in visit:
            shared += 1
            return ("shared", visit[n.gid])
        visit[n.gid] = len(visit)
        kids = []
        for i in n.inputs:
            if type(i) is LazyTensor and i.gid in members:
                kids.append(walk(i))
            else:
                key = i.gid if type(i) is LazyTensor else -id(i)
                if key not in leaf_pos:
                    leaf_pos[key] = len(inputs)
                    inputs.append(i)
                kids.append(_leaf_token(i, leaf_pos[key], shapes))
        nodes.append(n)
        shape = (tuple(n.shape) if n.shape is not None else None, n.dtype) if shapes else None
        return (n.name, n.ckey, shape, tuple(kids))

    structure = walk(root)
    return Subgraph(root, nodes, inputs, structure, shared)


def _multi_inside(i: LazyTensor, consumer: LazyTensor) -> bool:
    """A multi-output node may only be inside a subgraph with its ``getitem`` consumers."""
    return i.shape is None and consumer.name == "getitem"


def _reach_within(root: LazyTensor, members: dict[int, LazyTensor]) -> set[int]:
    seen = {root.gid}
    stack = [root]
    while stack:
        n = stack.pop()
        for i in n.inputs:
            if type(i) is LazyTensor and i.gid in members and i.gid not in seen:
                seen.add(i.gid)
                stack.append(i)
    return seen


@dataclass
class PatternEntry:
    """One distinct subgraph pattern: its structure, occurrence count and cached code."""

    pid: int
    structure: tuple[Any, ...]
    op_count: int
    num_inputs: int
    count: int = 0
    fn: Callable[..., Any] | None = None
    source: str = ""
    batchable: bool | None = None  # None: not checked yet
    calls: int = 0
    batched_calls: int = 0


@dataclass
class PatternTable:
    """Signatures seen so far, by hash; every hit is confirmed on the structure."""

    hash_fn: Callable[[tuple[Any, ...]], int] = hash
    by_hash: dict[int, list[PatternEntry]] = field(default_factory=dict)
    collisions: int = 0

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_hash.values())

    def entries(self) -> list[PatternEntry]:
        return [e for v in self.by_hash.values() for e in v]

    def lookup(self, sub: Subgraph) -> PatternEntry | None:
        for e in self.by_hash.get(self.hash_fn(sub.structure), ()):
            if e.structure == sub.structure:
                return e
            self.collisions += 1
        return None

    def add(self, sub: Subgraph) -> PatternEntry:
        hit = self.lookup(sub)
        if hit is None:
            hit = PatternEntry(len(self), sub.structure, sub.op_count, len(sub.inputs))
            self.by_hash.setdefault(self.hash_fn(sub.structure), []).append(hit)
        hit.count += 1
        return hit


def tile(out: LazyTensor, depth: int, consumers: dict[int, list[LazyTensor]], shapes: bool = True) -> list[Subgraph]:
    """The thesis' queue search (§4.5): subgraphs rooted at ``out``, then at each subgraph's
    lazy inputs, each node rooting at most one subgraph."""
    seen: set[int] = set()
    queue = [out]
    subs: list[Subgraph] = []
    while queue:
        n = queue.pop(0)
        if n.gid in seen:
            continue
        seen.add(n.gid)
        sub = extract(n, depth, consumers, shapes)
        subs.append(sub)
        queue.extend(i for i in sub.inputs if type(i) is LazyTensor and i.gid not in seen)
    return subs


def leaf_kind(x: Any) -> str:
    """``lazy``, ``param`` or ``data`` (for display)."""
    if type(x) is LazyTensor:
        return "lazy"
    return "param" if isinstance(x, torch.Tensor) and x.requires_grad else "data"


__all__ = ["PatternEntry", "PatternTable", "Subgraph", "consumer_map", "extract", "leaf_kind", "reachable", "tile"]
