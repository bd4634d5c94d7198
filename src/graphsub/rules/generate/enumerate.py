"""Step 1 of TASO's Algorithm 1: enumerate every graph of up to ``max_ops`` operators.

A graph is a sequence of operators over the input tensors (:data:`~.templates.TASO_VARS`) and
the outputs of earlier operators.  The depth-first enumeration (``BUILD`` in the paper)
extends a graph by one operator at a time and skips graphs with *duplicated computation*:

* two operators with the same template and the same inputs;
* a tensor equal (by value on the fingerprint inputs) to another tensor of the graph, inputs
  included -- e.g. ``transpose(transpose(w1))`` is ``w1`` and is not explored further;
* an operator order other than the canonical one (:meth:`_State.canonical`): TASO enumerates
  every order of independent operators and prunes the resulting trivial pairs later; here each
  graph is enumerated once, which cuts the work several-fold without losing a graph.

Every graph kept is recorded as ``(fingerprint, code)`` where ``code`` is the compact byte
encoding of :class:`GraphCode` and the fingerprint digests its unused outputs
(:mod:`.fingerprint`).

Sharding: the enumeration tree's first level (the valid first operators) is dealt round-robin
to ``n`` shards; a shard enumerates the subtrees under its first operators and returns the
records grouped by first operator, so that merging shards in first-operator order reproduces the
single-process order exactly (the result does not depend on the number of shards).

Invariants: tensor ids are ``0..V-1`` for the variables and then op outputs in creation order;
operators only read earlier tensors; the same configuration and seed give byte-identical records.

>>> cfg = EnumConfig(templates=("add", "relu"), max_ops=2)
>>> recs = enumerate_shard(cfg, 0, 1)
>>> n_graphs = sum(len(v) for v in recs.values())
>>> decode(recs[0][0][1]).text(cfg)
'add(x1, x2)'
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from graphsub.rules.generate.fingerprint import graph_digest, random_inputs, tensor_digest
from graphsub.rules.generate.templates import TASO_TEMPLATES, TASO_VARS, TEMPLATES, Meta, Template, Var

Op = tuple[int, tuple[int, ...]]  # (template index in the config, input tensor ids)
Record = tuple[int, bytes]  # (fingerprint, graph code)


@functools.lru_cache(maxsize=16)
def _template_objs(names: tuple[str, ...]) -> tuple[Template, ...]:
    return tuple(TEMPLATES[t] for t in names)


@dataclass(frozen=True)
class EnumConfig:
    """What to enumerate: templates (by name), input variables, size threshold, seed."""

    templates: tuple[str, ...] = TASO_TEMPLATES
    variables: tuple[Var, ...] = TASO_VARS
    max_ops: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [t for t in self.templates if t not in TEMPLATES]
        if bad:
            raise KeyError(f"unknown templates {bad}")
        if not 1 <= self.max_ops <= 4:
            raise ValueError(f"max_ops must be 1..4, got {self.max_ops}")
        if len(self.variables) + 2 * self.max_ops > 250:
            raise ValueError("too many variables for the one-byte graph code")

    @property
    def template_objs(self) -> tuple[Template, ...]:
        return _template_objs(self.templates)

    @functools.cached_property
    def classes(self) -> list[int]:
        """Variable index -> class id (variables with equal shape and weight flag: the renaming classes)."""
        ids: dict[tuple[tuple[int, ...], bool], int] = {}
        return [ids.setdefault((v.shape, v.weight), len(ids)) for v in self.variables]

    def key(self) -> str:
        """A stable description (checkpoints are valid only for the same key)."""
        vs = ",".join(f"{v.name}:{'x'.join(map(str, v.shape))}{'w' if v.weight else ''}" for v in self.variables)
        return f"t={','.join(self.templates)};v={vs};n={self.max_ops};seed={self.seed}"


@dataclass(frozen=True)
class GraphCode:
    """A graph as operators ``(template index, input ids)``; ``num_vars`` ids precede op outputs."""

    ops: tuple[Op, ...]
    num_vars: int
    outputs_per_op: tuple[int, ...] = field(default=())

    def encode(self) -> bytes:
        out = bytearray([self.num_vars])
        for (t, ins), nout in zip(self.ops, self.outputs_per_op, strict=True):
            out += bytes([t, nout, len(ins), *ins])
        return bytes(out)

    def output_ids(self) -> list[tuple[int, int]]:
        """(op index, output index) of every op output."""
        return [(i, k) for i, n in enumerate(self.outputs_per_op) for k in range(n)]

    def tensor_id(self, op: int, k: int) -> int:
        return self.num_vars + sum(self.outputs_per_op[:op]) + k

    def producer(self) -> dict[int, tuple[int, int]]:
        """tensor id -> (op index, output index) for op outputs."""
        return {self.tensor_id(i, k): (i, k) for i, k in self.output_ids()}

    def unused(self) -> list[int]:
        """Tensor ids of op outputs that no op reads (the graph's outputs), in creation order."""
        used = {j for _, ins in self.ops for j in ins}
        return [self.tensor_id(i, k) for i, k in self.output_ids() if self.tensor_id(i, k) not in used]

    def variables_used(self) -> list[int]:
        """Variable ids in order of first use."""
        seen: dict[int, None] = {}
        for _, ins in self.ops:
            for j in ins:
                if j < self.num_vars:
                    seen.setdefault(j, None)
        return list(seen)

    def text(self, cfg: EnumConfig) -> str:
        """The graph as expressions of its outputs, e.g. ``matmul(x1, add(w1, w2))``."""
        prod = self.producer()
        names = [t for t in cfg.templates]

        def expr(j: int) -> str:
            if j < self.num_vars:
                return cfg.variables[j].name
            i, k = prod[j]
            t, ins = self.ops[i]
            s = f"{names[t]}({', '.join(expr(a) for a in ins)})"
            return f"{s}[{k}]" if self.outputs_per_op[i] > 1 else s

        return "; ".join(expr(j) for j in self.unused())


def decode(code: bytes) -> GraphCode:
    """Inverse of :meth:`GraphCode.encode`."""
    num_vars = code[0]
    ops: list[Op] = []
    nouts: list[int] = []
    pos = 1
    while pos < len(code):
        t, nout, n = code[pos], code[pos + 1], code[pos + 2]
        ops.append((t, tuple(code[pos + 3:pos + 3 + n])))
        nouts.append(nout)
        pos += 3 + n
    return GraphCode(tuple(ops), num_vars, tuple(nouts))


# ----------------------------------------------------------------------------- evaluation


def evaluate(cfg: EnumConfig, g: GraphCode, inputs: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
    """Values of every tensor of ``g`` (variables and op outputs) on residues ``inputs``."""
    temps = cfg.template_objs
    vals: list[np.ndarray] = list(inputs)
    metas: list[Meta] = [Meta(v.shape) for v in cfg.variables]
    weights = [v.weight for v in cfg.variables]
    for t, ins in g.ops:
        tmpl = temps[t]
        out = tmpl.infer([metas[j] for j in ins], [weights[j] if j < len(weights) else False for j in ins])
        if out is None:
            raise ValueError(f"invalid graph: {tmpl.name} on {[metas[j].shape for j in ins]}")
        vals.extend(tmpl.compute([vals[j] for j in ins], out))
        metas.extend(out)
    return dict(enumerate(vals))


def output_digests(cfg: EnumConfig, g: GraphCode, inputs: Sequence[np.ndarray]) -> dict[int, int]:
    """Digest of each unused output of ``g`` on ``inputs`` (tensor id -> digest)."""
    vals = evaluate(cfg, g, inputs)
    return {j: tensor_digest(vals[j]) for j in g.unused()}


#: memoised operator results kept (enumeration shards, confirm chunks); cleared when full (bounds memory)
MEMO_MAX = 200_000


class PrefixEvaluator:
    """Output digests of encoded graphs on fixed inputs, each operator's outputs memoised by (input set, the code
    of the graph up to that operator): graphs in enumeration order share their prefixes, so confirming a run of
    them evaluates about one operator each instead of all (the same digests as :func:`output_digests`)."""

    def __init__(self, cfg: EnumConfig, inputs: dict[int, list[np.ndarray]], max_entries: int = MEMO_MAX):
        self.cfg, self.inputs, self.max_entries = cfg, inputs, max_entries
        self.temps = cfg.template_objs
        self.metas0: list[Meta] = [Meta(v.shape) for v in cfg.variables]
        self.weights = [v.weight for v in cfg.variables]
        self._memo: dict[tuple[int, bytes], tuple[tuple[np.ndarray, ...], tuple[Meta, ...], tuple[int, ...]]] = {}

    def digests(self, code: bytes, key: int) -> dict[int, int]:
        """Digest of each unused output of the graph ``code`` on ``inputs[key]`` (tensor id -> digest)."""
        vals: list[np.ndarray] = list(self.inputs[key])
        metas = list(self.metas0)
        ds: list[int] = [0] * len(vals)
        used: set[int] = set()
        nv, pos, memo = len(vals), 1, self._memo
        while pos < len(code):
            t, n = code[pos], code[pos + 2]
            ins = code[pos + 3:pos + 3 + n]
            pos += 3 + n
            used.update(ins)
            hit = memo.get((key, code[:pos]))
            if hit is None:
                tmpl = self.temps[t]
                out = tmpl.infer([metas[j] for j in ins], [j < nv and self.weights[j] for j in ins])
                if out is None:
                    raise ValueError(f"invalid graph: {tmpl.name} on {[metas[j].shape for j in ins]}")
                xs = tuple(tmpl.compute([vals[j] for j in ins], out))
                if len(memo) >= self.max_entries:
                    memo.clear()
                hit = memo[(key, code[:pos])] = (xs, out, tuple(tensor_digest(x) for x in xs))
            vals.extend(hit[0])
            metas.extend(hit[1])
            ds.extend(hit[2])
        return {j: ds[j] for j in range(nv, len(vals)) if j not in used}


# ----------------------------------------------------------------------------- enumeration


class _State:
    """The mutable DFS state: tensors (meta, value, digest), ops, consumers.

    Speed (the same records, byte for byte): each tensor's (meta, is-weight) *kind* is interned to a small int so
    that validity is cached per (template, input kinds); an operator's outputs are memoised by (template, the
    value digests of its inputs), since the same operator on the same values recurs under many prefixes."""

    def __init__(self, cfg: EnumConfig):
        self.cfg = cfg
        self.temps = cfg.template_objs
        data = random_inputs(cfg.variables, cfg.seed)
        self.metas: list[Meta] = [Meta(v.shape) for v in cfg.variables]
        self.vals: list[np.ndarray] = data
        self.digests: list[int] = [tensor_digest(a) for a in data]
        self.weight: list[bool] = [v.weight for v in cfg.variables]
        self._kind_ids: dict[tuple[Meta, bool], int] = {}
        self._kinds: list[tuple[Meta, bool]] = []
        self.kids: list[int] = [self._kind(m, w) for m, w in zip(self.metas, self.weight, strict=True)]
        self.digest_set: set[int] = set(self.digests)
        self.ops: list[Op] = []
        self.nouts: list[int] = []
        self.codes: list[bytes] = [bytes([len(cfg.variables)])]  # the code of each prefix of ``ops``
        self.op_set: set[Op] = set()
        self.uses: list[int] = [0] * len(data)
        self._infer: dict[tuple[int, tuple[int, ...]], tuple[Meta, ...] | None] = {}
        self._memo: dict[tuple[int, tuple[int, ...]], tuple[tuple[np.ndarray, ...], tuple[int, ...]]] = {}

    def _kind(self, m: Meta, w: bool) -> int:
        k = self._kind_ids.get((m, w))
        if k is None:
            k = self._kind_ids[(m, w)] = len(self._kinds)
            self._kinds.append((m, w))
        return k

    def choices(self) -> list[tuple[int, tuple[int, ...], tuple[Meta, ...]]]:
        """Every (template, inputs) that can extend the current graph, in a fixed order.

        Validity depends only on the inputs' (meta, is-weight) *kinds*, so it is decided once per
        kind combination and then expanded to tensor ids."""
        kinds: dict[int, list[int]] = {}
        for j, k in enumerate(self.kids):
            kinds.setdefault(k, []).append(j)
        groups = list(kinds.items())
        out: list[tuple[int, tuple[int, ...], tuple[Meta, ...]]] = []
        op_set = self.op_set
        for ti, t in enumerate(self.temps):
            cands: list[tuple[tuple[int, ...], tuple[Meta, ...]]] = []
            if t.arity == 0:
                r = self.meta_out(ti, ())
                if r is not None:
                    cands = [((), r)]
            elif t.arity == 1:
                for ka, ids in groups:
                    r = self.meta_out(ti, (ka,))
                    if r is not None:
                        cands.extend(((j,), r) for j in ids)
            else:
                sym, distinct = t.symmetric, t.distinct
                for ka, ia in groups:
                    for kb, ib in groups:
                        r = self.meta_out(ti, (ka, kb))
                        if r is None:
                            continue
                        for j in ia:
                            for k in ib:
                                if (sym and j >= k) or (distinct and j == k):
                                    continue
                                cands.append(((j, k), r))
                cands.sort(key=lambda c: c[0])
            out.extend((ti, ins, r) for ins, r in cands if (ti, ins) not in op_set)
        return out

    def meta_out(self, ti: int, kids: tuple[int, ...]) -> tuple[Meta, ...] | None:
        key = (ti, kids)
        try:
            return self._infer[key]
        except KeyError:
            kinds = [self._kinds[k] for k in kids]
            r = self.temps[ti].infer(tuple(m for m, _ in kinds), tuple(w for _, w in kinds))
            self._infer[key] = r
            return r

    def compute(self, ti: int, ins: tuple[int, ...], out: tuple[Meta, ...]
                ) -> tuple[tuple[np.ndarray, ...], tuple[int, ...]]:
        """The op's output values and their digests (memoised by template and input values)."""
        key = (ti, tuple(self.digests[j] for j in ins))
        hit = self._memo.get(key)
        if hit is None:
            vals = tuple(self.temps[ti].compute([self.vals[j] for j in ins], out))
            if len(self._memo) >= MEMO_MAX:
                self._memo.clear()
            hit = self._memo[key] = (vals, tuple(tensor_digest(v) for v in vals))
        return hit

    def push(self, ti: int, ins: tuple[int, ...], out: tuple[Meta, ...]) -> bool:
        """Add the op (``out``: its output metas); False (and nothing added) if it duplicates
        a tensor."""
        vals, ds = self.compute(ti, ins, out)
        if any(d in self.digest_set for d in ds) or len(set(ds)) != len(ds):
            return False
        self.ops.append((ti, ins))
        self.nouts.append(len(vals))
        self.codes.append(self.codes[-1] + bytes([ti, len(vals), len(ins), *ins]))
        self.op_set.add((ti, ins))
        for j in ins:
            self.uses[j] += 1
        self.metas.extend(out)
        self.vals.extend(vals)
        self.digests.extend(ds)
        self.weight.extend([False] * len(vals))
        self.kids.extend(self._kind(m, False) for m in out)
        self.digest_set.update(ds)
        self.uses.extend([0] * len(vals))
        return True

    def pop(self) -> None:
        ti, ins = self.ops.pop()
        n = self.nouts.pop()
        self.codes.pop()
        self.op_set.discard((ti, ins))
        for j in ins:
            self.uses[j] -= 1
        for d in self.digests[-n:]:
            self.digest_set.discard(d)
        for lst in (self.metas, self.vals, self.digests, self.weight, self.uses, self.kids):
            del lst[-n:]

    def op_key(self, ti: int, ins: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """An order-independent key of an op: template and the *value digests* of its inputs
        (unique within a graph, since duplicated tensors are pruned)."""
        return ti, tuple(self.digests[j] for j in ins)

    def canonical(self, ti: int, ins: tuple[int, ...]) -> bool:
        """Canonical operator order: a new op must read an output of the previous op or have a
        larger :meth:`op_key`.  The smallest-first topological order of any graph satisfies
        this, so every graph is still enumerated; reorderings of independent ops are not."""
        if not self.ops:
            return True
        first_new = len(self.digests) - self.nouts[-1]
        if any(j >= first_new for j in ins):
            return True
        return self.op_key(ti, ins) > self.op_key(*self.ops[-1])

    def unused_digests(self) -> list[int]:
        nv = len(self.cfg.variables)
        uses = self.uses
        return [d for j, d in enumerate(self.digests[nv:], nv) if uses[j] == 0]

    def record(self) -> Record:
        return graph_digest(self.unused_digests()), self.codes[-1]

    def leaves(self, recs: list[Record]) -> None:
        """Record every valid one-op extension of the current graph without pushing it (the last level of the
        DFS, where most graphs are: the same records as :meth:`push` + :meth:`record` + :meth:`pop`)."""
        nv = len(self.cfg.variables)
        uses, digests, digest_set, prefix = self.uses, self.digests, self.digest_set, self.codes[-1]
        unused = {j: digests[j] for j in range(nv, len(digests)) if uses[j] == 0}
        first_new = len(digests) - self.nouts[-1] if self.ops else len(digests)
        last_key = self.op_key(*self.ops[-1]) if self.ops else None
        for ti, ins, out in self.choices():
            # :meth:`canonical`, inlined
            if last_key is not None and not any(j >= first_new for j in ins) and \
                    (ti, tuple(digests[j] for j in ins)) <= last_key:
                continue
            vals, ds = self.compute(ti, ins, out)
            if any(d in digest_set for d in ds) or len(set(ds)) != len(ds):
                continue
            fp = graph_digest([*(d for j, d in unused.items() if j not in ins), *ds])
            recs.append((fp, prefix + bytes([ti, len(vals), len(ins), *ins])))


def first_choices(cfg: EnumConfig) -> list[tuple[int, tuple[int, ...], tuple[Meta, ...]]]:
    """The valid first operators (the shardable first level of the enumeration tree)."""
    return _State(cfg).choices()


def enumerate_shard(cfg: EnumConfig, shard: int, num_shards: int,
                    progress: Callable[[int], None] | None = None) -> dict[int, list[Record]]:
    """Records of all graphs under the first operators ``shard, shard + num_shards, ...``,
    grouped by first-operator index, each list in DFS order.  ``progress(n)`` is called after
    each first operator with the number of graphs recorded under it."""
    st = _State(cfg)
    firsts = st.choices()
    out: dict[int, list[Record]] = {}

    def dfs(recs: list[Record]) -> None:
        recs.append(st.record())
        if len(st.ops) >= cfg.max_ops:
            return
        if len(st.ops) == cfg.max_ops - 1:
            st.leaves(recs)
            return
        for ti, ins, out in st.choices():
            if st.canonical(ti, ins) and st.push(ti, ins, out):
                dfs(recs)
                st.pop()

    for idx in range(shard, len(firsts), num_shards):
        recs: list[Record] = []
        if st.push(*firsts[idx]):
            dfs(recs)
            st.pop()
        out[idx] = recs
        if progress is not None:
            progress(len(recs))
    return out


__all__ = [
    "EnumConfig",
    "GraphCode",
    "Op",
    "PrefixEvaluator",
    "Record",
    "decode",
    "enumerate_shard",
    "evaluate",
    "first_choices",
    "output_digests",
]
