"""TASO's ``graph_subst.pb``: a dependency-free reader and the loader of its 133 rules.

The file (``../shared/data/taso/graph_subst.pb``, Apache-2.0, from jiazhihao/TASO) is a protobuf
``RuleCollection`` (proto2, package ``GraphSubst``)::

    Parameter{key=1, value=2}  Tensor{opId=1, tsId=2}  Operator{type=1, input=2*, para=3*}
    MapOutput{srcOpId=1, dstOpId=2, srcTsId=3, dstTsId=4}  Rule{srcOp=1*, dstOp=2*, mappedOutput=3*}
    RuleCollection{rule=1*}

:func:`read_collection` decodes it with a small wire-format reader (varints, including the
10-byte encoding of negative ``int32``, and length-delimited submessages; unknown fields are
skipped) into plain dataclasses.  :func:`load_rules` converts every rule into a graphsub
:class:`~graphsub.rules.rule.Rule` (see :mod:`graphsub.rules.taso_pb_convert` for the semantics)
and reports the ones it cannot convert instead of failing.

>>> tensor = "08" + "ff" * 9 + "01" + "1000"          # Tensor{opId=-1 (10-byte varint), tsId=0}
>>> op = "0810" + "120d" + tensor                      # Operator{type=16 (EW_ADD), input=[tensor]}
>>> coll = decode_collection(bytes.fromhex("0a13" + "0a11" + op))  # RuleCollection{rule=[Rule{srcOp=[op]}]}
>>> coll.rules[0].src[0].type_name, coll.rules[0].src[0].inputs
('EW_ADD', (TensorRef(op_id=-1, ts_id=0),))
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphsub.errors import RuleError
from graphsub.rules.rule import Rule

#: TASO's OpType values that occur in the file (others are reported by name if present)
OP_TYPES = {3: "CONV2D", 8: "RELU", 12: "CONCAT", 13: "SPLIT", 16: "EW_ADD", 17: "EW_MUL", 18: "MATMUL"}
#: TASO's PMParameter keys
PM = {0: "OP_TYPE", 1: "NUM_INPUTS", 2: "NUM_OUTPUTS", 3: "GROUP", 4: "KERNEL_H", 5: "KERNEL_W",
      6: "STRIDE_H", 7: "STRIDE_W", 8: "PAD", 9: "ACTI", 10: "NUMDIM", 11: "AXIS", 12: "PERM",
      13: "OUTSHUFFLE", 14: "MERGE_GCONV_COUNT"}
ENV_VAR = "GRAPHSUB_TASO_PB"
PB_RELPATH = Path("..") / "shared" / "data" / "taso" / "graph_subst.pb"

# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class TensorRef:
    """``Tensor{opId, tsId}``: output ``ts_id`` of op ``op_id`` of the same side, or a rule
    input variable when ``op_id < 0`` (shared by both sides)."""

    op_id: int
    ts_id: int


@dataclass(frozen=True)
class Parameter:
    key: int
    value: int


@dataclass(frozen=True)
class Operator:
    type: int
    inputs: tuple[TensorRef, ...] = ()
    params: tuple[Parameter, ...] = ()

    @property
    def type_name(self) -> str:
        return OP_TYPES.get(self.type, f"OP{self.type}")

    def param(self, key: int, default: int | None = None) -> int | None:
        """The value of PMParameter ``key`` (last occurrence), or ``default``."""
        found = default
        for p in self.params:
            if p.key == key:
                found = p.value
        return found


@dataclass(frozen=True)
class MapOutput:
    src_op: int
    dst_op: int
    src_ts: int
    dst_ts: int


@dataclass(frozen=True)
class PbRule:
    """One ``Rule``: source ops, target ops (each in topological order), mapped outputs; ``index``
    is its position in the file."""

    src: tuple[Operator, ...] = ()
    dst: tuple[Operator, ...] = ()
    outputs: tuple[MapOutput, ...] = ()
    index: int = -1

    def describe(self) -> str:
        """``src ops -> dst ops`` in TASO's terms, e.g. ``EW_ADD(MATMUL, MATMUL) -> MATMUL``."""
        return f"{_side_text(self.src)} -> {_side_text(self.dst)}"


@dataclass(frozen=True)
class RuleCollection:
    """The decoded file: its rules and (lenient decoding only) the malformed ones (index, reason)."""

    rules: tuple[PbRule, ...] = ()
    errors: tuple[tuple[int, str], ...] = ()


def _side_text(ops: tuple[Operator, ...]) -> str:
    used = {t.op_id for o in ops for t in o.inputs if t.op_id >= 0}
    names: dict[int, str] = {}
    for i, o in enumerate(ops):
        args = ", ".join(names.get(t.op_id, "?") if t.op_id >= 0 else f"v{-t.op_id}"
                         + (f"#{t.ts_id}" if t.ts_id else "") for t in o.inputs)
        names[i] = f"{o.type_name}({args})"
    return "; ".join(names[i] for i in range(len(ops)) if i not in used) or "-"


# ----------------------------------------------------------------------------- wire format


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise RuleError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise RuleError(f"varint longer than 10 bytes at byte {pos}")


def _int32(v: int) -> int:
    """A decoded varint as int32 (negative values are sign-extended to 64 bits on the wire)."""
    v &= 0xFFFFFFFFFFFFFFFF
    if v >= 1 << 63:
        v -= 1 << 64
    if not -(1 << 31) <= v < 1 << 31:
        raise RuleError(f"int32 field out of range: {v}")
    return v


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs of one message; varint values as int, length-delimited as bytes.
    Fixed-width fields are skipped; groups are an error (proto2 groups are not in this schema)."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise RuleError(f"invalid field number 0 at byte {pos}")
        if wire == 0:
            v, pos = _varint(buf, pos)
            yield num, v
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise RuleError(f"length-delimited field {num} runs past the end ({pos}+{n} > {len(buf)})")
            yield num, buf[pos:pos + n]
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise RuleError(f"unsupported wire type {wire} (field {num}) at byte {pos}")
        if pos > len(buf):
            raise RuleError("fixed-width field runs past the end")


def _ints(buf: bytes, names: dict[int, str], required: tuple[str, ...], what: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for num, v in _fields(buf):
        if num in names:
            if not isinstance(v, int):
                raise RuleError(f"{what}.{names[num]} has the wrong wire type")
            out[names[num]] = _int32(v)
    missing = [r for r in required if r not in out]
    if missing:
        raise RuleError(f"{what}: missing required field(s) {missing}")
    return out


def _subs(buf: bytes, num: int, what: str) -> list[bytes]:
    out = []
    for n, v in _fields(buf):
        if n == num:
            if not isinstance(v, bytes):
                raise RuleError(f"{what}: field {num} must be a submessage")
            out.append(v)
    return out


def _operator(buf: bytes) -> Operator:
    head = _ints(buf, {1: "type"}, ("type",), "Operator")
    inputs = tuple(TensorRef(**(_ints(b, {1: "op_id", 2: "ts_id"}, ("op_id", "ts_id"), "Tensor")))
                   for b in _subs(buf, 2, "Operator"))
    params = tuple(Parameter(**_ints(b, {1: "key", 2: "value"}, ("key", "value"), "Parameter"))
                   for b in _subs(buf, 3, "Operator"))
    return Operator(head["type"], inputs, params)


def _rule(buf: bytes, index: int) -> PbRule:
    names = {1: "src_op", 2: "dst_op", 3: "src_ts", 4: "dst_ts"}
    return PbRule(
        tuple(_operator(b) for b in _subs(buf, 1, "Rule")),
        tuple(_operator(b) for b in _subs(buf, 2, "Rule")),
        tuple(MapOutput(**_ints(b, names, tuple(names.values()), "MapOutput")) for b in _subs(buf, 3, "Rule")),
        index,
    )


def decode_collection(data: bytes, *, lenient: bool = False) -> RuleCollection:
    """Decode a serialized ``RuleCollection``; :class:`RuleError` if it is malformed.

    With ``lenient``, a malformed ``Rule`` submessage (the outer framing still intact) is
    recorded in ``errors`` and skipped instead of failing the whole file."""
    rules: list[PbRule] = []
    errors: list[tuple[int, str]] = []
    for i, b in enumerate(_subs(bytes(data), 1, "RuleCollection")):
        try:
            rules.append(_rule(b, i))
        except RuleError as e:
            if not lenient:
                raise RuleError(f"rule {i}: {e}") from None
            errors.append((i, f"malformed rule: {e}"))
    return RuleCollection(tuple(rules), tuple(errors))


def read_collection(path: str | Path, *, lenient: bool = False) -> RuleCollection:
    """Read and decode a ``graph_subst.pb`` file (RuleError if unreadable, malformed or empty)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise RuleError(f"cannot read TASO rule file {p}: {e}") from None
    try:
        coll = decode_collection(data, lenient=lenient)
    except RuleError as e:
        raise RuleError(f"{p}: not a valid TASO RuleCollection: {e}") from None
    if not coll.rules and not coll.errors:
        raise RuleError(f"{p}: not a TASO RuleCollection (no rules in {len(data)} bytes)")
    return coll


# ----------------------------------------------------------------------------- normalized form

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


# ----------------------------------------------------------------------------- locating the file


def _repo_root() -> Path | None:
    d = Path(__file__).resolve().parent
    for cand in (d, *d.parents):
        if (cand / "pyproject.toml").is_file():
            return cand
    return None


def default_pb_path() -> Path:
    """``$GRAPHSUB_TASO_PB`` if set, else ``../shared/data/taso/graph_subst.pb`` relative to the
    current directory or to the repository root."""
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise RuleError(f"${ENV_VAR} is set to {env!r}, which is not a file")
        return p
    tried = []
    for base in (Path.cwd(), _repo_root()):
        if base is None:
            continue
        cand = (base / PB_RELPATH).resolve()
        tried.append(str(cand))
        if cand.is_file():
            return cand
    raise RuleError(f"TASO's graph_subst.pb not found (tried {', '.join(tried)}); set ${ENV_VAR} to its path "
                    "or pass path= explicitly")


# ----------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class LoadResult:
    """Converted rules and the rules that could not be converted (file index, reason)."""

    path: Path
    collection: RuleCollection
    rules: list[Rule] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """Counts: rules in the file, converted, rejected, tags of the converted rules (op kinds,
        ``multi-output``, ``disconnected``), and :func:`collection_summary` of the file."""
        tags: Counter[str] = Counter(t for r in self.rules for t in r.tags if t != "taso-pb")
        return {"rules": len(self.collection.rules) + len(self.collection.errors), "converted": len(self.rules),
                "rejected": len(self.rejected), "tags": dict(sorted(tags.items())),
                **collection_summary(self.collection)}


def collection_summary(coll: RuleCollection) -> dict[str, object]:
    """Op-type counts over both sides, (src, dst) side sizes and mapped-output counts."""
    ops: Counter[str] = Counter()
    sizes: Counter[tuple[int, int]] = Counter()
    outs: Counter[int] = Counter()
    for r in coll.rules:
        ops.update(o.type_name for o in (*r.src, *r.dst))
        sizes[(len(r.src), len(r.dst))] += 1
        outs[len(r.outputs)] += 1
    return {"op_types": dict(ops.most_common()), "side_sizes": dict(sizes.most_common()),
            "mapped_outputs": dict(sorted(outs.items()))}


def load_rules(path: str | Path | None = None) -> LoadResult:
    """Convert every rule of TASO's ``graph_subst.pb`` (default: :func:`default_pb_path`).

    Rules are named ``taso_pb_NNN`` by their index in the file; rules that cannot be
    converted are listed in ``rejected`` with the reason.  Cached per resolved path.
    """
    p = default_pb_path() if path is None else Path(path)
    return _load_cached(str(p.resolve()))


@functools.lru_cache(maxsize=8)
def _load_cached(path: str) -> LoadResult:
    from graphsub.rules.taso_pb_convert import convert_rule

    coll = read_collection(path, lenient=True)
    rules: list[Rule] = []
    rejected: list[tuple[int, str]] = list(coll.errors)
    for r in coll.rules:
        try:
            rules.append(convert_rule(r.index, r))
        except RuleError as e:
            rejected.append((r.index, str(e)))
        except Exception as e:  # never crash on one bad rule
            rejected.append((r.index, f"conversion failed: {type(e).__name__}: {e}"))
    rejected.sort()
    return LoadResult(Path(path), coll, rules, rejected)


__all__ = [
    "ENV_VAR", "KINDS", "OP_TYPES", "PM", "LoadResult", "MapOutput", "Operator", "Parameter", "PbRule",
    "RuleCollection", "Spec", "TOp", "TensorRef", "Val", "collection_summary", "components", "decode_collection",
    "default_pb_path", "describe", "load_rules", "normalize", "read_collection", "var_name",
]
