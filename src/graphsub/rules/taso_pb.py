"""TASO's ``graph_subst.pb``: a dependency-free reader of the file (no rules here).

The file (Apache-2.0, from jiazhihao/TASO; shipped in the package as ``graphsub/rules/data/taso/graph_subst.pb``
with its license and notice) is a protobuf
``RuleCollection`` (proto2, package ``GraphSubst``)::

    Parameter{key=1, value=2}  Tensor{opId=1, tsId=2}  Operator{type=1, input=2*, para=3*}
    MapOutput{srcOpId=1, dstOpId=2, srcTsId=3, dstTsId=4}  Rule{srcOp=1*, dstOp=2*, mappedOutput=3*}
    RuleCollection{rule=1*}

:func:`read_collection` decodes it with a small wire-format reader (varints, including the
10-byte encoding of negative ``int32``, and length-delimited submessages; unknown fields are
skipped) into plain dataclasses; :func:`default_pb_path` names the file to read.  What a decoded rule
means is :mod:`graphsub.rules.taso_pb_spec`; turning the file into graphsub rules is
:func:`graphsub.rules.taso_pb_convert.load_taso_pb`.  Imports go one way: reader <- spec <- convert.

>>> tensor = "08" + "ff" * 9 + "01" + "1000"          # Tensor{opId=-1 (10-byte varint), tsId=0}
>>> op = "0810" + "120d" + tensor                      # Operator{type=16 (EW_ADD), input=[tensor]}
>>> coll = decode_collection(bytes.fromhex("0a13" + "0a11" + op))  # RuleCollection{rule=[Rule{srcOp=[op]}]}
>>> coll.rules[0].src[0].type_name, coll.rules[0].src[0].inputs
('EW_ADD', (TensorRef(op_id=-1, ts_id=0),))
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from graphsub.errors import RuleError

#: TASO's OpType values that occur in the file (others are reported by name if present)
OP_TYPES = {3: "CONV2D", 8: "RELU", 12: "CONCAT", 13: "SPLIT", 16: "EW_ADD", 17: "EW_MUL", 18: "MATMUL"}
#: TASO's PMParameter keys
PM = {0: "OP_TYPE", 1: "NUM_INPUTS", 2: "NUM_OUTPUTS", 3: "GROUP", 4: "KERNEL_H", 5: "KERNEL_W",
      6: "STRIDE_H", 7: "STRIDE_W", 8: "PAD", 9: "ACTI", 10: "NUMDIM", 11: "AXIS", 12: "PERM",
      13: "OUTSHUFFLE", 14: "MERGE_GCONV_COUNT"}
ENV_VAR = "GRAPHSUB_TASO_PB"
#: the copy shipped inside the package (Apache-2.0; LICENSE and NOTICE beside it)
PACKAGED_PB = Path(__file__).resolve().parent / "data" / "taso" / "graph_subst.pb"

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


# ----------------------------------------------------------------------------- locating the file


def default_pb_path() -> Path:
    """``$GRAPHSUB_TASO_PB`` if set, else the copy shipped inside the package (:data:`PACKAGED_PB`)."""
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise RuleError(f"${ENV_VAR} is set to {env!r}, which is not a file")
        return p
    if not PACKAGED_PB.is_file():  # only a broken installation lacks it
        raise RuleError(f"TASO's graph_subst.pb is missing from the installed package ({PACKAGED_PB}); "
                        f"reinstall graphsub or set ${ENV_VAR} to a copy of the file")
    return PACKAGED_PB



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



__all__ = [
    "ENV_VAR", "OP_TYPES", "PACKAGED_PB", "PM", "MapOutput", "Operator", "Parameter", "PbRule", "RuleCollection",
    "TensorRef",
    "collection_summary", "decode_collection", "default_pb_path", "read_collection",
]
