"""Deterministic random data for graphs: inputs, and weights that lack data.

Data respects each value's *role* (declared per input slot by its consumers' OpDefs):
variances are positive, divisors non-zero, gather indices in range; conv/matmul weights are
scaled by ``sqrt(2 / fan_in)`` so activations of deep random networks stay O(1) (otherwise a
numeric equivalence check on vanishing outputs would be vacuous).

Weights are seeded by ``(seed, name)``; their scale and role come from their consumers, so
when two graphs are compared, the second must reuse the first's arrays for shared names
(``known=``), as :func:`graphsub.equivalence.equivalent` does.

Memory limits (hostile or mistyped shapes must be a clear error, not a numpy MemoryError or a
machine that swaps): one tensor may take at most :func:`tensor_limit` bytes -- the machine's
physical memory -- which the ONNX import enforces for every input, weight and intermediate value;
the random data of one call takes at most :func:`allocation_limit` -- half the memory available
now -- checked by :func:`check_sizes` before anything is allocated (ShapeError naming the tensor).
``$GRAPHSUB_MAX_TENSOR_BYTES`` sets both limits (bytes, e.g. ``4e9``).

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
import os
from collections.abc import Iterable, Mapping

import numpy as np

from graphsub.errors import ShapeError
from graphsub.ir.graph import Graph
from graphsub.ir.node import OpSig
from graphsub.ops.types import FLOAT_DTYPES, TensorType, np_dtype, stable_digest

#: environment variable that sets the memory limits below (bytes; e.g. ``GRAPHSUB_MAX_TENSOR_BYTES=4e9``)
MEMORY_LIMIT_ENV = "GRAPHSUB_MAX_TENSOR_BYTES"


def _meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _env_limit() -> int | None:
    text = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(float(text))
    except ValueError:
        raise ShapeError(f"${MEMORY_LIMIT_ENV}={text!r} is not a number of bytes") from None
    if value <= 0:
        raise ShapeError(f"${MEMORY_LIMIT_ENV}={text!r} must be positive")
    return value


def tensor_limit() -> int:
    """The most bytes one tensor of a model may take: ``$GRAPHSUB_MAX_TENSOR_BYTES`` when set, else this machine's
    physical memory (a tensor larger than that can be neither run nor verified here).  The ONNX import refuses
    models with a larger input, weight or intermediate value (ImportError_), before anything is allocated."""
    env = _env_limit()
    if env is not None:
        return env
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return _meminfo("MemTotal") or 1 << 40


def available_memory() -> int:
    """The bytes of memory available now (``MemAvailable``; the physical memory where that is unknown)."""
    return _meminfo("MemAvailable") or tensor_limit()


def allocation_limit() -> int:
    """The most bytes of random data one call of :func:`random_inputs` / :func:`random_weights` allocates:
    ``$GRAPHSUB_MAX_TENSOR_BYTES`` when set, else half the memory available now (``MemAvailable``, or the physical
    memory where that is unknown): the other half is for what runs on the data (onnxruntime's values)."""
    env = _env_limit()
    if env is not None:
        return env
    return available_memory() // 2


def human_bytes(n: float) -> str:
    """``1.2e12`` -> ``"1.2 TB"`` (decimal units, three significant digits)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"  # pragma: no cover


#: below this many bytes in all, :func:`check_sizes` does not look at the machine's memory
_SMALL = 1 << 26


def check_sizes(tensors: Iterable[tuple[str, TensorType]], *, total: bool = False,
                purpose: str = "random data for") -> None:
    """Raise ShapeError when one of ``tensors`` (``(description, type)`` pairs) is larger than
    :func:`tensor_limit`, or, with ``total``, when together they exceed :func:`allocation_limit` (the message
    says ``purpose`` the tensors): called before allocating, so that an impossible size is a clear error, never a
    numpy MemoryError or a machine swapping.

    >>> check_sizes([("input 'x'", TensorType((100000, 3, 1000, 1000), "float32"))])
    Traceback (most recent call last):
    ...
    graphsub.errors.ShapeError: input 'x' f32[100000,3,1000,1000] needs 1.2 TB, more than ...
    """
    items = list(tensors)
    need = sum(t.nbytes for _, t in items)
    env = _env_limit()
    if need <= _SMALL and env is None:
        return  # the common case: no system calls
    limit = tensor_limit()
    for what, t in items:
        if t.nbytes > limit:
            why = f"${MEMORY_LIMIT_ENV}" if env is not None else f"this machine's memory; ${MEMORY_LIMIT_ENV} sets it"
            raise ShapeError(f"{what} {t} needs {human_bytes(t.nbytes)}, more than the {human_bytes(limit)} "
                             f"allowed for one tensor ({why})")
    if total and items:
        avail = allocation_limit()
        if need > avail:
            big = max(items, key=lambda it: it[1].nbytes)
            why = (f"${MEMORY_LIMIT_ENV}" if env is not None
                   else f"half the memory available now; ${MEMORY_LIMIT_ENV} sets it")
            raise ShapeError(f"{purpose} {len(items)} tensor(s) needs {human_bytes(need)} (the largest: "
                             f"{big[0]} {big[1]}), more than the {human_bytes(avail)} allowed ({why})")


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
    if role == "index" and sig.op == "gather_grad":  # indices into the gathered tensor, whose shape is an attribute
        shape = tuple(sig.attr["x_shape"])
        return f"index:{shape[int(sig.attr.get('axis', 0)) % len(shape)]}"
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


def random_inputs(
    graph: Graph, seed: int = 0, shapes: Mapping[str, tuple[int, ...]] | None = None
) -> dict[str, np.ndarray]:
    """Random data for every graph input, keyed by input name (an input read as a convolution or matmul weight -- a
    trained weight of a training graph -- is scaled by its fan-in, as :func:`random_weights` does); ``shapes``
    replace the shapes of the inputs they name (the roles stay the graph's: a model with symbolic dimensions fed at
    another size)."""
    plan: list[tuple[str, TensorType, str, float]] = []
    for nid in graph.inputs:
        sig = graph.nodes[nid].sig
        name = sig.attr["name"]
        role, scale = _leaf_context(graph, nid)
        t = sig.out_types[0]
        if shapes is not None and name in shapes:
            t = TensorType(tuple(shapes[name]), t.dtype)
        plan.append((name, t, role, scale))
    check_sizes([(f"input {name!r}", t) for name, t, _, _ in plan], total=True)
    return {name: random_array(t, _rng(seed, "input:" + name), role, scale) for name, t, role, scale in plan}


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
    plan: list[tuple[str, TensorType, str, float]] = []
    for nid in graph.ops_of("weight"):
        sig = graph.nodes[nid].sig
        name = sig.attr["name"]
        if only_missing and name in graph.params:
            continue
        if only_missing and known is not None and name in known:
            out[name] = np.asarray(known[name])
            continue
        role, scale = _leaf_context(graph, nid)
        plan.append((name, sig.out_types[0], role, scale))
    check_sizes([(f"weight {name!r}", t) for name, t, _, _ in plan], total=True)
    for name, t, role, scale in plan:
        out[name] = random_array(t, _rng(seed, "weight:" + name), role, scale)
    return out


def materialize(graph: Graph, seed: int = 0, known: Mapping[str, np.ndarray] | None = None) -> Graph:
    """``graph`` with data attached to every weight (random where missing)."""
    missing = random_weights(graph, seed, known=known)
    return graph.with_params(missing) if missing else graph


__all__ = ["MEMORY_LIMIT_ENV", "allocation_limit", "available_memory", "check_sizes", "fan_in", "human_bytes",
           "input_specs", "materialize", "random_array", "random_inputs", "random_weights", "slot_role", "tensor_limit"]
