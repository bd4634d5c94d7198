"""Deterministic random data for graphs: inputs, and weights that lack data.

Data respects each value's *role* (declared per input slot by its consumers' OpDefs):
variances are positive, divisors non-zero, gather indices in range; conv/matmul weights are
scaled by ``sqrt(2 / fan_in)`` so activations of deep random networks stay O(1) (otherwise a
numeric equivalence check on vanishing outputs would be vacuous).

Weights are seeded by ``(seed, name)``; their scale and role come from their consumers, so
when two graphs are compared, the second must reuse the first's arrays for shared names
(``known=``), as :func:`graphsub.equivalence.equivalent` does.

>>> from graphsub.ir import Builder
>>> b = Builder()
>>> x = b.input("x", (2, 8))
>>> g = b.build(b.matmul(x, b.weight("w", (8, 4))))
>>> w = random_weights(g, seed=0)["w"]
>>> w.shape, bool(np.all(random_weights(g, seed=0)["w"] == w))
((8, 4), True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig
from graphsub.ops.types import FLOAT_DTYPES, TensorType, np_dtype, stable_digest


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, stable_digest(name) & 0xFFFFFFFF])


#: Integer inputs of operators graphsub keeps opaque that index a table: (domain, op_type) -> {ONNX input
#: position of the indices: (ONNX input position of the table, axis)}.  Random indices must stay in range, or
#: the reference model itself fails (onnxruntime checks them) and no rewrite of it can be verified.
OPAQUE_INDEX_INPUTS: dict[tuple[str, str], dict[int, tuple[int, int]]] = {
    ("com.microsoft", "EmbedLayerNormalization"): {0: (2, 0), 1: (4, 0), 8: (3, 0)},
}


def _opaque_role(sig: OpSig, slot: int) -> str:
    table = OPAQUE_INDEX_INPUTS.get((str(sig.attr.get("domain", "")), str(sig.attr.get("op_type", ""))))
    slots = list(sig.attr.get("input_slots", ()))
    if not table or slot >= len(slots) or slots[slot] not in table:
        return "any"
    data_pos, axis = table[slots[slot]]
    if data_pos not in slots:  # an optional table left out: the indices are ignored
        return "index:1"
    data = sig.in_types[slots.index(data_pos)]
    return f"index:{data.shape[axis % data.rank] if data.rank else 1}"


def slot_role(sig: OpSig, slot: int) -> str:
    """Role of input ``slot`` of a node with signature ``sig`` (``index`` resolved to a range)."""
    if sig.op == "opaque":
        return _opaque_role(sig, slot)
    role = sig.opdef.role(slot)
    if role == "index":
        axis = int(sig.attr.get("axis", 0))
        data = sig.in_types[0]
        return f"index:{data.shape[axis % max(data.rank, 1)] if data.rank else 1}"
    return role


def fan_in(sig: OpSig, slot: int) -> int | None:
    """Fan-in of a weight at ``slot`` of a conv/matmul/gemm (for scaled initialisation)."""
    t = sig.in_types[slot]
    if sig.op == "conv2d" and slot == 1 and t.rank == 4:
        return t.numel // max(t.shape[0], 1)
    if sig.op == "matmul" and slot == 1 and t.rank >= 2:
        return t.shape[-2]
    if sig.op == "gemm" and slot == 1 and t.rank == 2:
        return t.shape[1] if sig.attr.get("trans_b") else t.shape[0]
    return None


def random_array(
    t: TensorType, rng: np.random.Generator, role: str = "any", scale: float = 1.0
) -> np.ndarray:
    """A random array of type ``t`` honouring ``role`` (see :data:`graphsub.ops.registry.ROLES`)."""
    dt = np_dtype(t.dtype)
    shape = t.shape
    if role.startswith("index"):
        high = int(role.split(":", 1)[1]) if ":" in role else 2
        return rng.integers(0, max(high, 1), size=shape).astype(dt)
    if t.dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if t.dtype not in FLOAT_DTYPES:
        return rng.integers(-4, 5, size=shape).astype(dt)
    if role == "positive":
        arr = rng.uniform(0.5, 1.5, size=shape)
    elif role == "nonzero":
        arr = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    elif role == "unit":
        arr = rng.uniform(0.1, 1.0, size=shape)
    elif dt == np.float32:  # the common large case: no float64 temporary
        f32 = rng.standard_normal(size=shape, dtype=np.float32)
        f32 *= np.float32(scale)
        return f32
    else:
        arr = rng.standard_normal(size=shape) * scale
    return np.asarray(arr, dtype=dt)


#: Operators that pass integer values through unchanged (only their type or layout changes): indices fed through
#: them are still indices (exporters cast ``input_ids`` to int32 before an embedding).
_PASS_VALUES = frozenset({"cast", "identity", "reshape", "squeeze", "unsqueeze", "flatten", "expand", "transpose"})


def _index_role(graph: Graph, nid: int, depth: int = 4) -> str | None:
    """The index role of the first consumer that uses ``nid``'s values as indices, directly or through
    :data:`_PASS_VALUES` operators; ``None`` when none does."""
    for cid, slot in graph.users(nid):
        sig = graph.nodes[cid].sig
        role = slot_role(sig, slot)
        if role.startswith("index"):
            return role
        if depth and slot == 0 and sig.op in _PASS_VALUES:
            inner = _index_role(graph, cid, depth - 1)
            if inner is not None:
                return inner
    return None


def _leaf_context(graph: Graph, nid: int) -> tuple[str, float]:
    """Role and scale for leaf ``nid`` from its first consumer, or the index range of the first one that uses it
    as indices (indices must stay in range for every consumer)."""
    if graph.nodes[nid].sig.out_types[0].dtype not in FLOAT_DTYPES:
        index = _index_role(graph, nid)
        if index is not None:
            return index, 1.0
    for cid, slot in graph.users(nid):
        sig = graph.nodes[cid].sig
        role = slot_role(sig, slot)
        fi = fan_in(sig, slot)
        if fi:
            return role, math.sqrt(2.0 / fi)
        t = graph.nodes[nid].sig.out_types[0]
        if role == "any" and graph.nodes[nid].sig.op == "weight" and t.rank <= 1:
            return role, 0.1  # biases, norm shifts
        return role, 1.0
    return "any", 1.0


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random data for every graph input, keyed by input name."""
    out = {}
    for nid in graph.inputs:
        sig = graph.nodes[nid].sig
        role, _ = _leaf_context(graph, nid)
        out[sig.attr["name"]] = random_array(sig.out_types[0], _rng(seed, "input:" + sig.attr["name"]), role)
    return out


def input_specs(graph: Graph) -> list[dict[str, object]]:
    """How to feed the graph from outside: per input its ``name``, ``dtype``, ``shape`` and, for integer and
    boolean inputs, the range ``[low, high)`` :func:`random_inputs` draws from (gather indices stay in range).

    >>> from graphsub.ir import Builder
    >>> b = Builder()
    >>> ids = b.input("ids", (2, 3), "int64")
    >>> g = b.build(b.gather(b.weight("emb", (10, 4)), ids, axis=0))
    >>> input_specs(g)
    [{'name': 'ids', 'dtype': 'int64', 'shape': [2, 3], 'low': 0, 'high': 10}]
    """
    specs: list[dict[str, object]] = []
    for nid in graph.inputs:
        sig = graph.nodes[nid].sig
        t = sig.out_types[0]
        spec: dict[str, object] = {"name": sig.attr["name"], "dtype": t.dtype, "shape": list(t.shape)}
        role, _ = _leaf_context(graph, nid)
        if role.startswith("index"):
            spec.update(low=0, high=max(int(role.split(":", 1)[1]) if ":" in role else 2, 1))
        elif t.dtype == "bool":
            spec.update(low=0, high=2)
        elif t.dtype not in FLOAT_DTYPES:
            spec.update(low=-4, high=5)
        specs.append(spec)
    return specs


def random_weights(
    graph: Graph, seed: int = 0, *, only_missing: bool = True, known: Mapping[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Data for weights: existing ``graph.params`` (and ``known``) kept unless ``only_missing``
    is False; the others random, seeded by ``(seed, name)``."""
    out: dict[str, np.ndarray] = {}
    for nid in graph.ops_of("weight"):
        sig = graph.nodes[nid].sig
        name = sig.attr["name"]
        if only_missing and name in graph.params:
            continue
        if only_missing and known is not None and name in known:
            out[name] = np.asarray(known[name])
            continue
        role, scale = _leaf_context(graph, nid)
        out[name] = random_array(sig.out_types[0], _rng(seed, "weight:" + name), role, scale)
    return out


def materialize(graph: Graph, seed: int = 0, known: Mapping[str, np.ndarray] | None = None) -> Graph:
    """``graph`` with data attached to every weight (random where missing)."""
    missing = random_weights(graph, seed, known=known)
    return graph.with_params(missing) if missing else graph


__all__ = ["fan_in", "input_specs", "materialize", "random_array", "random_inputs", "random_weights", "slot_role"]
