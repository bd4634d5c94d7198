"""What a decoded TASO rule means: its normalized form and TASO's tensor semantics.

:func:`normalize` validates a :class:`~graphsub.rules.taso_pb.PbRule` and rewrites it over
graphsub op kinds (:class:`TOp`, :class:`Spec`; RuleError says why a rule cannot be converted).
TASO's file stores no shapes; :func:`eval_side` re-derives them with TASO's semantics
(elementwise operands of equal shape -- no broadcasting --, 2-D matmuls, 4-D convs, concat rank =
NUMDIM, split sizes from the *split tree* recorded by the concat that produced the input) and
raises :class:`Mismatch` where TASO could not have created the ops; :func:`check_shapes` also
requires every mapped output to keep its shape.

>>> from graphsub.rules.taso_pb import Operator, PbRule, TensorRef, MapOutput
>>> relu = Operator(8, (TensorRef(-1, 0),))
>>> spec = normalize(0, PbRule((relu,), (relu,), (MapOutput(0, 0, 0, 0),)))
>>> describe(spec), check_shapes(spec, {-1: (2, 3)})[0][0][0].shape
('relu(v1) -> relu(v1)', (2, 3))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphsub.errors import RuleError
from graphsub.rules.taso_pb import Operator, PbRule

#: TASO op type -> graphsub op
KINDS = {3: "conv2d", 8: "relu", 12: "concat", 13: "split", 16: "add", 17: "mul", 18: "matmul"}
ARITY = {"conv2d": 2, "relu": 1, "split": 1, "add": 2, "mul": 2, "matmul": 2}
ACTS = {0: "none", 1: "sigmoid", 2: "relu", 3: "tanh"}
PADS = {0: "SAME", 1: "VALID"}

Val = tuple[int, int]  # (op index, output index) of the same side; op index < 0: variable


@dataclass(frozen=True)
class TOp:
    """A normalized TASO operator: graphsub op kind, inputs, attributes, number of outputs."""

    kind: str
    inputs: tuple[Val, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    num_outputs: int = 1

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


@dataclass(frozen=True)
class Spec:
    """A rule in normalized form: both sides, the output mapping and derived facts."""

    index: int
    src: tuple[TOp, ...]
    dst: tuple[TOp, ...]
    outputs: tuple[tuple[Val, Val], ...]  # (source value, target value) per mapped output
    dst_live: frozenset[int]
    dropped: tuple[int, ...] = ()

    @property
    def var_ids(self) -> list[int]:
        """Variable ids in order of first use on the source side."""
        seen: dict[int, None] = {}
        for op in self.src:
            for i, _ in op.inputs:
                if i < 0:
                    seen.setdefault(i, None)
        return list(seen)


def var_name(vid: int) -> str:
    return f"v{-vid}"


# ----------------------------------------------------------------------------- normalizing


def _normalize_op(op: Operator, pos: int, side: list[TOp], what: str) -> TOp:
    kind = KINDS.get(op.type)
    if kind is None:
        raise RuleError(f"{what} op {pos}: TASO op type {op.type_name} is not supported")
    ins: list[Val] = []
    for t in op.inputs:
        if t.op_id < 0:
            if t.ts_id != 0:
                raise RuleError(f"{what} op {pos}: variable {t.op_id} with output index {t.ts_id}")
        elif t.op_id >= pos or t.ts_id >= side[t.op_id].num_outputs or t.ts_id < 0:
            raise RuleError(f"{what} op {pos}: input ({t.op_id}, {t.ts_id}) is not an earlier op's output")
        ins.append((t.op_id, t.ts_id))
    want = ARITY.get(kind)
    if (want is not None and len(ins) != want) or not ins:
        raise RuleError(f"{what} op {pos}: {op.type_name} with {len(ins)} inputs")
    attrs: dict[str, Any] = {}
    nout = 1
    if kind in ("conv2d", "matmul"):
        act = op.param(9, 0)
        if act not in ACTS:
            raise RuleError(f"{what} op {pos}: unknown activation mode {act}")
        attrs["act"] = ACTS[act]
    if kind == "conv2d":
        pad = op.param(8, 0)
        if pad not in PADS:
            raise RuleError(f"{what} op {pos}: unknown padding mode {pad}")
        strides = (op.param(6, 1), op.param(7, 1))
        if min(s or 0 for s in strides) < 1:
            raise RuleError(f"{what} op {pos}: invalid strides {strides}")
        attrs.update(pads=PADS[pad], strides=strides)
    if kind in ("concat", "split"):
        axis = op.param(11)
        if axis is None or axis < 0:
            raise RuleError(f"{what} op {pos}: {op.type_name} without a valid AXIS")
        attrs["axis"] = axis
        numdim = op.param(10)
        if numdim is not None:
            if numdim <= axis:
                raise RuleError(f"{what} op {pos}: AXIS {axis} out of range for NUMDIM {numdim}")
            attrs["numdim"] = numdim
        n_in = op.param(1)
        if kind == "concat" and n_in is not None and n_in != len(ins):
            raise RuleError(f"{what} op {pos}: NUM_INPUTS {n_in} but {len(ins)} inputs")
    if kind == "split":
        nout = op.param(2, 2) or 0
        if nout < 1:
            raise RuleError(f"{what} op {pos}: SPLIT with NUM_OUTPUTS {nout}")
    return TOp(kind, tuple(ins), tuple(sorted(attrs.items())), nout)


def _normalize_side(ops: Sequence[Operator], what: str) -> list[TOp]:
    side: list[TOp] = []
    for pos, op in enumerate(ops):
        side.append(_normalize_op(op, pos, side, what))
    return side


def _live(side: Sequence[TOp], roots: Sequence[int]) -> set[int]:
    live = {r for r in roots if r >= 0}
    for i in reversed(range(len(side))):
        if i in live:
            live.update(j for j, _ in side[i].inputs if j >= 0)
    return live


def _vars_of(side: Sequence[TOp], ops: set[int] | None = None) -> set[int]:
    return {j for i, op in enumerate(side) if ops is None or i in ops for j, _ in op.inputs if j < 0}


def normalize(index: int, rule: PbRule) -> Spec:
    """Validate and normalize a decoded rule; RuleError says why it cannot be converted."""
    src = _normalize_side(rule.src, "source")
    dst = _normalize_side(rule.dst, "target")
    if not src or not dst:
        raise RuleError("empty source or target graph")
    if not rule.outputs:
        raise RuleError("no mapped outputs")
    outs: list[tuple[Val, Val]] = []
    for mo in rule.outputs:
        if not 0 <= mo.src_op < len(src) or not 0 <= mo.src_ts < src[mo.src_op].num_outputs:
            raise RuleError(f"mapped output refers to source op {mo.src_op}#{mo.src_ts}, which does not exist")
        if mo.dst_op >= len(dst) or (mo.dst_op >= 0 and not 0 <= mo.dst_ts < dst[mo.dst_op].num_outputs):
            raise RuleError(f"mapped output refers to target op {mo.dst_op}#{mo.dst_ts}, which does not exist")
        outs.append(((mo.src_op, mo.src_ts), (mo.dst_op, mo.dst_ts if mo.dst_op >= 0 else 0)))
    if len({s for s, _ in outs}) != len(outs):
        raise RuleError("a source output is mapped twice")
    if any(s.kind == "split" for s in src):
        raise RuleError("SPLIT in the source graph is not supported (its sizes would have to match the split tree)")
    dst_live = _live(dst, [d for _, (d, _) in outs])
    need = _vars_of(dst, dst_live) | {d for _, (d, _) in outs if d < 0}
    src_live = _live(src, [s for (s, _), _ in outs])
    dropped = tuple(i for i in range(len(src)) if i not in src_live)
    if dropped:
        if not need <= _vars_of(src, src_live):
            raise RuleError(f"source ops {list(dropped)} contribute to no mapped output, and the target needs "
                            "variables only they read")
        keep = sorted(src_live)
        remap = {old: new for new, old in enumerate(keep)}
        src = [TOp(op.kind, tuple((remap[j], k) if j >= 0 else (j, k) for j, k in op.inputs), op.attrs,
                   op.num_outputs) for i, op in enumerate(src) if i in src_live]
        outs = [((remap[s], sk), d) for (s, sk), d in outs]
    missing = need - _vars_of(src)
    if missing:
        raise RuleError(f"target reads variables {sorted(missing)} that the source does not bind")
    return Spec(index, tuple(src), tuple(dst), tuple(outs), frozenset(dst_live), dropped)


# ----------------------------------------------------------------------------- text


def _expr(side: Sequence[TOp], v: Val) -> str:
    j, k = v
    if j < 0:
        return var_name(j)
    op = side[j]
    extra = [f"{key}={val}" for key, val in op.attrs if key not in ("numdim",)
             and not (key == "act" and val == "none") and not (key == "strides" and val == (1, 1))]
    s = f"{op.kind}({', '.join([*(_expr(side, i) for i in op.inputs), *extra])})"
    return f"{s}[{k}]" if op.num_outputs > 1 else s


def describe(spec: Spec) -> str:
    """The rule as expressions, e.g. ``add(matmul(v1, v4), matmul(v1, v5)) -> matmul(v1, add(v4, v5))``."""
    parts = [f"{_expr(spec.src, s)} -> {_expr(spec.dst, d)}" for s, d in spec.outputs]
    return "; ".join(parts)


def components(side: Sequence[TOp]) -> int:
    """Number of connected components of a side (ops linked by edges or shared variables)."""
    parent = list(range(len(side)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    first_user: dict[int, int] = {}
    for i, op in enumerate(side):
        for j, _ in op.inputs:
            other = j if j >= 0 else first_user.setdefault(j, i)
            parent[find(i)] = find(other)
    return len({find(i) for i in range(len(side))})


class Mismatch(Exception):
    """Shapes violate TASO's operator semantics (the rule does not apply)."""


# ----------------------------------------------------------------------------- TASO tensor semantics


@dataclass(frozen=True)
class TT:
    """A TASO tensor: shape and split tree (top-level piece sizes per axis, or None)."""

    shape: tuple[int, ...]
    split: tuple[tuple[int, ...] | None, ...]


def _tt(shape: Sequence[int]) -> TT:
    return TT(tuple(shape), (None,) * len(shape))


def _eval_op(op: TOp, ins: list[TT]) -> tuple[TT, ...]:
    k = op.kind
    if k in ("add", "mul"):
        a, b = ins
        if a.shape != b.shape:
            raise Mismatch(f"{k} of shapes {a.shape} and {b.shape} (TASO needs equal shapes)")
        return (TT(a.shape, tuple(x if x is not None else y for x, y in zip(a.split, b.split, strict=True))),)
    if k == "relu":
        return (ins[0],)
    if k == "matmul":
        a, b = ins
        if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
            raise Mismatch(f"matmul of {a.shape} and {b.shape} (TASO rules need 2-D operands that multiply)")
        return (TT((a.shape[0], b.shape[1]), (a.split[0], b.split[1])),)
    if k == "conv2d":
        x, w = ins
        if len(x.shape) != 4 or len(w.shape) != 4:
            raise Mismatch(f"conv2d of {x.shape} and {w.shape}")
        (n, c, h, wd), (o, cg, kh, kw) = x.shape, w.shape
        if cg == 0 or c == 0 or c % cg or o % (c // cg):
            raise Mismatch(f"conv2d: {c} input channels do not fit weight {w.shape}")
        g = c // cg
        xs, ws = x.split[1], w.split[0]
        if g > 1 and (xs is not None or ws is not None) and (
                xs is None or ws is None or len(xs) != len(ws)
                or any(a * g % c or b * g % o or a * g // c != b * g // o for a, b in zip(xs, ws, strict=True))):
            raise Mismatch(f"conv2d with {g} groups over concatenated channels {xs} / weights {ws} that do not "
                           "line up with the groups")
        sh, sw = op.attr("strides")
        if op.attr("pads") == "SAME":
            ho, wo = -(-h // sh), -(-wd // sw)
        else:
            ho, wo = (h - kh) // sh + 1, (wd - kw) // sw + 1
            if h < kh or wd < kw:
                raise Mismatch(f"conv2d VALID: kernel {kh}x{kw} larger than input {h}x{wd}")
        return (TT((n, o, ho, wo), (x.split[0], w.split[0], None, None)),)
    if k == "concat":
        axis, rank = op.attr("axis"), len(ins[0].shape)
        nd = op.attr("numdim", rank)
        for t in ins:
            if len(t.shape) != nd or axis >= nd:
                raise Mismatch(f"concat axis {axis} (NUMDIM {nd}) of shape {t.shape}")
            if any(t.shape[i] != ins[0].shape[i] for i in range(nd) if i != axis):
                raise Mismatch(f"concat axis {axis} of {[t.shape for t in ins]}")
        shape = tuple(sum(t.shape[i] for t in ins) if i == axis else ins[0].shape[i] for i in range(nd))
        split = tuple(tuple(t.shape[axis] for t in ins) if i == axis
                      else (ins[0].split[i] if all(t.split[i] == ins[0].split[i] for t in ins) else None)
                      for i in range(nd))
        return (TT(shape, split),)
    if k == "split":
        x, axis = ins[0], op.attr("axis")
        if axis >= len(x.shape) or op.attr("numdim", len(x.shape)) != len(x.shape):
            raise Mismatch(f"split axis {axis} of shape {x.shape}")
        sizes = x.split[axis]
        if sizes is None or len(sizes) != op.num_outputs:
            raise Mismatch(f"split axis {axis}: no {op.num_outputs}-way split tree recorded on the input")
        sp = tuple(None if i == axis else s for i, s in enumerate(x.split))
        return tuple(TT(tuple(s if i == axis else d for i, d in enumerate(x.shape)), sp) for s in sizes)
    raise Mismatch(f"unsupported op {k}")  # pragma: no cover - normalize() rejects these


def eval_side(side: Sequence[TOp], env: Mapping[int, Sequence[int]], *,
              live: frozenset[int] | None = None) -> dict[int, tuple[TT, ...]]:
    """Shapes and split trees of a side's ops (those in ``live``) for variable shapes ``env``;
    :class:`Mismatch` if TASO could not create them."""
    out: dict[int, tuple[TT, ...]] = {}
    for i, op in enumerate(side):
        if live is not None and i not in live:
            continue
        ins = [_tt(env[j]) if j < 0 else out[j][k] for j, k in op.inputs]
        out[i] = _eval_op(op, ins)
    return out


def check_shapes(spec: Spec, env: Mapping[int, Sequence[int]]) -> tuple[dict[int, tuple[TT, ...]],
                                                                         dict[int, tuple[TT, ...]]]:
    """Evaluate both sides and compare the mapped outputs; Mismatch if the rule does not apply."""
    src = eval_side(spec.src, env)
    dst = eval_side(spec.dst, env, live=spec.dst_live)
    for (s, sk), (d, dk) in spec.outputs:
        want = src[s][sk].shape
        have = tuple(env[d]) if d < 0 else dst[d][dk].shape
        if have != want:
            raise Mismatch(f"mapped output {s}#{sk}: target shape {have} != source shape {want}")
    return src, dst



__all__ = [
    "ACTS", "ARITY", "KINDS", "PADS", "TT", "Mismatch", "Spec", "TOp", "Val", "check_shapes", "components",
    "describe", "eval_side", "normalize", "var_name",
]
