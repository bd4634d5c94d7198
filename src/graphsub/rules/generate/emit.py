"""Generated substitutions as JSON, and as graphsub :class:`~graphsub.rules.rule.Rule` objects.

File format (``rules.json``, ``format = "graphsub-generated-rules"``, ``version = 1``)::

    {"format": ..., "version": 1, "config": {...}, "stats": {...},
     "variables": {"x1": {"shape": [2, 4], "weight": false}, ...},
     "substitutions": [
       {"id": 0, "text": "...",
        "a": [{"template": "matmul", "op": "matmul", "attrs": {"act": "none"}, "in": ["x1", "w1"],
               "groups": null}, ...],
        "b": [...],
        "outputs": [["$1", "$0"]]}]}

Operator inputs are variable names or ``$i`` / ``$i#k`` (output k of operator i of the same
side).  ``groups`` is the conv group count in the generator's instance.

Each substitution becomes up to two rules, ``gen_NNNN_ab`` (a -> b) and ``gen_NNNN_ba``,
a direction existing when the target reads only variables the source binds.  Semantics are
TASO's, made explicit by a ``where`` constraint (:func:`_check`): every variable may have any
shape, but add/mul operands must have equal shapes (no broadcasting), matmul/transpose are 2-D,
conv group structure is the generator's (dense, depthwise or the same count), the target
builds, and mapped outputs keep their types.  Constants (``const_*``) and split sizes are
computed from the match: constant shapes map the generator's dimensions to the matched ones
(a rule with constants applies only where that map is consistent), split sizes come from the
concat that produced the split input (TASO's split tree).

>>> doc = {"format": FORMAT, "version": 1, "variables": {"x1": {"shape": [2, 4], "weight": False}},
...        "substitutions": [{"id": 0, "a": [{"op": "relu", "in": ["x1"]}], "b": [], "outputs": [["$0", "$0"]]}]}
>>> load_substitutions(doc)
Traceback (most recent call last):
...
graphsub.errors.RuleError: substitution 0: side b is empty
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphsub.errors import GraphsubError, RuleError
from graphsub.ir.node import make_sig
from graphsub.ops.registry import REGISTRY
from graphsub.ops.types import TensorType
from graphsub.rules.rule import Example, Rule, make_rule

if TYPE_CHECKING:
    from graphsub.ir.node import Ref
    from graphsub.rules.apply import TargetBuilder
    from graphsub.rules.match import MatchView
    from graphsub.rules.pattern import PatternBuilder, PValue

FORMAT = "graphsub-generated-rules"
VERSION = 1
#: dimension maps (generator value -> example value) for the verification examples
EXAMPLE_SCALES: tuple[dict[int, int], ...] = ({}, {2: 3, 4: 6, 5: 7}, {2: 1, 4: 2, 5: 6})
CONST_OPS = frozenset({"const_pool", "const_iconv", "const_imm", "const_one"})
SHAPE_ATTRS = {"const_pool": "shape", "const_iconv": "shape", "const_one": "shape", "const_imm": "n"}


@dataclass(frozen=True)
class SOp:
    """One operator of a side: graphsub op, attributes, inputs (variable names / ``$i#k``)."""

    op: str
    attrs: tuple[tuple[str, Any], ...]
    inputs: tuple[str, ...]
    template: str = ""
    groups: int | None = None
    num_outputs: int = 1

    @property
    def attr(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True)
class Subst:
    """A substitution: two sides and the output mapping (pairs of ``$i#k`` refs)."""

    id: int
    a: tuple[SOp, ...]
    b: tuple[SOp, ...]
    outputs: tuple[tuple[str, str], ...]
    variables: Mapping[str, tuple[int, ...]]
    text: str = ""


def ref(i: int, k: int = 0) -> str:
    return f"${i}" if k == 0 else f"${i}#{k}"


def parse_ref(s: str) -> tuple[int, int] | None:
    """(op index, output index) of ``$i`` / ``$i#k``; None for a variable name."""
    if not s.startswith("$"):
        return None
    i, _, k = s[1:].partition("#")
    return int(i), int(k or 0)


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list | tuple) else v


def _side_from_json(sid: int, name: str, raw: Any, variables: Mapping[str, Any]) -> tuple[SOp, ...]:
    if not isinstance(raw, list):
        raise RuleError(f"substitution {sid}: side {name} must be a list of operators")
    if not raw:
        raise RuleError(f"substitution {sid}: side {name} is empty")
    ops: list[SOp] = []
    for i, o in enumerate(raw):
        if not isinstance(o, dict) or "op" not in o or "in" not in o:
            raise RuleError(f"substitution {sid}: {name}[{i}] needs 'op' and 'in'")
        op = o["op"]
        if op not in REGISTRY or REGISTRY[op].leaf:
            raise RuleError(f"substitution {sid}: {name}[{i}]: unknown operator {op!r}")
        ins = o["in"]
        if not isinstance(ins, list) or not all(isinstance(x, str) for x in ins):
            raise RuleError(f"substitution {sid}: {name}[{i}]: 'in' must be a list of strings")
        for x in ins:
            r = parse_ref(x) if x.startswith("$") else None
            if x.startswith("$"):
                try:
                    r = parse_ref(x)
                except ValueError:
                    r = None
                if r is None or r[0] >= i or r[1] >= ops[r[0]].num_outputs:
                    raise RuleError(f"substitution {sid}: {name}[{i}]: input {x!r} is not an earlier op's output")
            elif x not in variables:
                raise RuleError(f"substitution {sid}: {name}[{i}]: unknown variable {x!r}")
        attrs = o.get("attrs", {})
        if not isinstance(attrs, dict):
            raise RuleError(f"substitution {sid}: {name}[{i}]: 'attrs' must be an object")
        nout = 2 if op == "split" else 1
        ops.append(SOp(op, tuple(sorted((k, _freeze(v)) for k, v in attrs.items())), tuple(ins),
                       str(o.get("template", "")), o.get("groups"), nout))
    return tuple(ops)


def load_substitutions(doc: Any) -> list[Subst]:
    """Parse a rules.json document (RuleError says what is malformed)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise RuleError(f"not a generated-rules file (expected \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise RuleError(f"unsupported generated-rules version {doc.get('version')!r} (expected {VERSION})")
    raw_vars = doc.get("variables")
    if not isinstance(raw_vars, dict):
        raise RuleError("'variables' must be an object name -> {shape, weight}")
    try:
        variables = {k: tuple(int(d) for d in v["shape"]) for k, v in raw_vars.items()}
    except (TypeError, KeyError, ValueError):
        raise RuleError("every variable needs a 'shape' list of ints") from None
    subs = doc.get("substitutions")
    if not isinstance(subs, list):
        raise RuleError("'substitutions' must be a list")
    out: list[Subst] = []
    for n, s in enumerate(subs):
        if not isinstance(s, dict):
            raise RuleError(f"substitution #{n} is not an object")
        sid = s.get("id", n)
        a = _side_from_json(sid, "a", s.get("a"), variables)
        b = _side_from_json(sid, "b", s.get("b"), variables)
        outs = s.get("outputs")
        if not isinstance(outs, list) or not outs:
            raise RuleError(f"substitution {sid}: 'outputs' must be a non-empty list of [a ref, b ref]")
        pairs: list[tuple[str, str]] = []
        for o in outs:
            if not (isinstance(o, list) and len(o) == 2 and all(isinstance(x, str) for x in o)):
                raise RuleError(f"substitution {sid}: bad output mapping {o!r}")
            for side, x in zip((a, b), o, strict=True):
                try:
                    r = parse_ref(x)
                except ValueError:
                    r = None
                if r is None or r[0] >= len(side) or r[1] >= side[r[0]].num_outputs:
                    raise RuleError(f"substitution {sid}: output {x!r} is not an operator output")
            pairs.append((o[0], o[1]))
        out.append(Subst(int(sid), a, b, tuple(pairs), variables, str(s.get("text", ""))))
    return out


def read_file(path: str | Path) -> tuple[dict[str, Any], list[Subst]]:
    """The document and its substitutions (RuleError if unreadable or malformed); a ``.gz`` file is
    read through gzip."""
    p = Path(path)
    try:
        doc = json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text())
    except (OSError, EOFError) as e:
        raise RuleError(f"cannot read {p}: {e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RuleError(f"{p}: not valid JSON: {e}") from None
    try:
        return doc, load_substitutions(doc)
    except RuleError as e:
        raise RuleError(f"{p}: {e}") from None


# ----------------------------------------------------------------------------- semantics


class NotApplicable(Exception):
    """The rule does not apply to the matched shapes (the message says why)."""


def _vars_of(side: Sequence[SOp]) -> list[str]:
    seen: dict[str, None] = {}
    for o in side:
        for x in o.inputs:
            if not x.startswith("$"):
                seen.setdefault(x, None)
    return list(seen)


def _dim_map(s: Subst, env: Mapping[str, TensorType]) -> dict[int, int]:
    m: dict[int, int] = {}
    for name, t in env.items():
        gen = s.variables[name]
        if len(gen) != len(t.shape):
            raise NotApplicable(f"${name} has rank {len(t.shape)}, the rule was generated at rank {len(gen)}")
        for g, d in zip(gen, t.shape, strict=True):
            if m.setdefault(g, d) != d:
                raise NotApplicable(f"generator dimension {g} maps to both {m[g]} and {d} (rule has constants)")
    return m


Split = tuple[int, ...] | None


def _split_of(o: SOp, ins: Sequence[tuple[TensorType, tuple[Split, ...]]], outs: Sequence[TensorType]
              ) -> list[tuple[Split, ...]]:
    sp = [s for _, s in ins]
    rank = len(outs[0].shape)
    if o.op == "concat":
        ax = o.attr["axis"]
        return [tuple(tuple(t.shape[ax] for t, _ in ins) if i == ax else
                      (sp[0][i] if all(x[i] == sp[0][i] for x in sp) else None) for i in range(rank))]
    if o.op == "split":
        ax = o.attr["axis"]
        return [tuple(None if i == ax else x for i, x in enumerate(sp[0]))] * len(outs)
    if o.op in ("add", "mul"):
        return [tuple(x if x is not None else y for x, y in zip(sp[0], sp[1], strict=True))]
    if o.op in ("relu", "smul"):
        return [sp[0]]
    if o.op == "matmul":
        return [(sp[0][0], sp[1][1])]
    if o.op == "transpose":
        return [sp[0][::-1]]
    if o.op == "conv2d":
        return [(sp[0][0], sp[1][0], None, None)]
    if o.op in ("avgpool2d", "maxpool2d", "enlarge"):
        return [(sp[0][0], sp[0][1], None, None)]
    return [(None,) * rank]


def eval_side(s: Subst, side: Sequence[SOp], env: Mapping[str, TensorType]
              ) -> list[tuple[dict[str, Any], list[tuple[TensorType, tuple[Split, ...]]]]]:
    """Per operator: its attributes for these variable types and its outputs (type, split
    tree); NotApplicable if TASO's semantics do not allow it."""
    dims: dict[int, int] | None = None
    vals: list[list[tuple[TensorType, tuple[Split, ...]]]] = []
    out: list[tuple[dict[str, Any], list[tuple[TensorType, tuple[Split, ...]]]]] = []
    for o in side:
        ins = []
        for x in o.inputs:
            r = parse_ref(x)
            ins.append((env[x], (None,) * len(env[x].shape)) if r is None else vals[r[0]][r[1]])
        types = [t for t, _ in ins]
        attrs = o.attr
        if o.op in CONST_OPS:
            if dims is None:
                dims = _dim_map(s, env)
            key = SHAPE_ATTRS[o.op]
            gen = attrs[key]
            attrs[key] = dims.get(gen, gen) if isinstance(gen, int) else tuple(dims.get(d, d) for d in gen)
        elif o.op in ("add", "mul") and types[0].shape != types[1].shape:
            raise NotApplicable(f"{o.op} of shapes {types[0].shape} and {types[1].shape} (no broadcasting)")
        elif o.op in ("matmul", "transpose") and any(len(t.shape) != 2 for t in types):
            raise NotApplicable(f"{o.op} of ranks {[len(t.shape) for t in types]} (the rule is for 2-D)")
        elif o.op == "conv2d":
            c, cg = types[0].shape[1] if len(types[0].shape) == 4 else 0, types[1].shape[1]
            if len(types[0].shape) != 4 or len(types[1].shape) != 4 or cg == 0 or c % cg:
                raise NotApplicable(f"conv2d of {types[0].shape} and {types[1].shape}")
            g = c // cg
            want = o.groups
            if want is not None and not (g == want or (want == -1 and cg == 1 and g > 1)):
                what = "depthwise" if want == -1 else f"{want} group(s)"
                raise NotApplicable(f"conv2d with {g} group(s); the rule was generated {what}")
        elif o.op == "split":
            src_split = ins[0][1][attrs["axis"]] if attrs["axis"] < len(types[0].shape) else None
            if src_split is None or len(src_split) != o.num_outputs:
                raise NotApplicable(f"split axis {attrs['axis']}: the input is not a concat on that axis")
            attrs["sizes"] = src_split
        try:
            sig = make_sig(o.op, attrs, types)
        except GraphsubError as e:
            raise NotApplicable(str(e)) from None
        outs = list(sig.out_types)
        res = list(zip(outs, _split_of(o, ins, outs), strict=True))
        vals.append(res)
        out.append((attrs, res))
    return out


def _out_type(side_eval: Sequence[tuple[dict[str, Any], list[tuple[TensorType, Any]]]], x: str) -> TensorType:
    r = parse_ref(x)
    assert r is not None
    return side_eval[r[0]][1][r[1]][0]


def _check(s: Subst, src: Sequence[SOp], dst: Sequence[SOp], outs: Sequence[tuple[str, str]],
           env: Mapping[str, TensorType]) -> list[tuple[dict[str, Any], list[tuple[TensorType, Any]]]]:
    """Evaluate both sides; NotApplicable unless both are valid and mapped outputs agree.
    Returns the target's evaluation."""
    se = eval_side(s, src, env)
    de = eval_side(s, dst, env)
    for x, y in outs:
        if _out_type(se, x) != _out_type(de, y):
            raise NotApplicable(f"mapped output {x}: target type {_out_type(de, y)} != source {_out_type(se, x)}")
    return de


# ----------------------------------------------------------------------------- rules


def _pattern_attrs(o: SOp) -> dict[str, Any]:
    if o.op in CONST_OPS:
        return {}
    return {k: v for k, v in o.attrs if not (o.op == "split" and k == "sizes")}


def _source_fn(src: Sequence[SOp], outs: Sequence[tuple[str, str]]) -> Any:
    def source(p: PatternBuilder) -> dict[str, PValue]:
        vals: dict[str, PValue] = {v: p.var(v) for v in _vars_of(src)}
        for i, o in enumerate(src):
            res = p.op_multi(o.op, *(vals[x] for x in o.inputs), name=f"op{i}", outputs=o.num_outputs,
                             **_pattern_attrs(o))
            for k, v in enumerate(res):
                vals[ref(i, k)] = v
        return {f"o{n}": vals[x] for n, (x, _) in enumerate(outs)}

    return source


def _env(m: MatchView, names: Sequence[str]) -> dict[str, TensorType]:
    return {v: m.type(v) for v in names}


def _where_fn(s: Subst, src: Sequence[SOp], dst: Sequence[SOp], outs: Sequence[tuple[str, str]]) -> Any:
    names = _vars_of(src)

    def where(m: MatchView) -> str | None:
        try:
            se = eval_side(s, src, _env(m, names))
            _check(s, src, dst, outs, _env(m, names))
        except NotApplicable as e:
            return str(e)
        for i, (attrs, res) in enumerate(se):
            for k, (t, _) in enumerate(res):
                have = m.type(f"op{i}#{k}")
                if have != t:
                    return f"op{i} has type {have}, the rule's semantics give {t}"
            if src[i].op in CONST_OPS or src[i].op == "split":
                key = SHAPE_ATTRS.get(src[i].op, "sizes")
                if m.attr(f"op{i}", key) != attrs[key]:
                    return f"op{i}.{key} = {m.attr(f'op{i}', key)!r}, the rule needs {attrs[key]!r}"
        return None

    return where


def _target_fn(s: Subst, name: str, src: Sequence[SOp], dst: Sequence[SOp], outs: Sequence[tuple[str, str]]) -> Any:
    names = _vars_of(src)

    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        try:
            de = _check(s, src, dst, outs, _env(m, names))
        except NotApplicable as e:
            raise RuleError(f"{name}: target does not apply: {e}") from None
        vals: dict[str, Ref] = {v: m[v] for v in names}
        for i, (o, (attrs, _)) in enumerate(zip(dst, de, strict=True)):
            res = t.op_multi(o.op, *(vals[x] for x in o.inputs), **attrs)
            for k, r in enumerate(res):
                vals[ref(i, k)] = r
        return {f"o{n}": vals[y] for n, (_, y) in enumerate(outs)}

    return target


Evaluated = list[tuple[dict[str, Any], list[tuple[TensorType, Any]]]]


def _scaled(s: Subst) -> list[tuple[dict[str, tuple[int, ...]], Evaluated, Evaluated, str]]:
    """For each of :data:`EXAMPLE_SCALES` where both sides are valid and agree on output types:
    (variable shapes, evaluation of side a, of side b, note).  Shared by both directions."""
    names = sorted(set(_vars_of(s.a)) | set(_vars_of(s.b)))
    out = []
    for scale in EXAMPLE_SCALES:
        types = {v: tuple(scale.get(d, d) for d in s.variables[v]) for v in names}
        env = {v: TensorType(sh) for v, sh in types.items()}
        try:
            ea, eb = eval_side(s, s.a, env), eval_side(s, s.b, env)
        except NotApplicable:
            continue
        if any(_out_type(ea, x) != _out_type(eb, y) for x, y in s.outputs):
            continue
        out.append((types, ea, eb, f"generator shapes scaled by {scale}" if scale else "generator shapes"))
    return out


def _examples(src: Sequence[SOp], scaled: Sequence[tuple[dict[str, tuple[int, ...]], Evaluated, Evaluated, str]],
              side: int) -> list[Example]:
    names = _vars_of(src)
    exs: list[Example] = []
    for types, ea, eb, note in scaled:
        se = (ea, eb)[side]
        attrs = {f"op{i}": ({SHAPE_ATTRS[o.op]: a[SHAPE_ATTRS[o.op]]} if o.op in CONST_OPS else
                            {"sizes": a["sizes"]} if o.op == "split" else {})
                 for i, (o, (a, _)) in enumerate(zip(src, se, strict=True))}
        exs.append(Example(types={v: types[v] for v in names}, attrs={k: v for k, v in attrs.items() if v}, note=note))
    return exs


def to_rules(s: Subst) -> list[Rule]:
    """The rules of a substitution (one per direction whose target variables the source binds)."""
    rules: list[Rule] = []
    scaled = _scaled(s)
    for side, (tag, src, dst, outs) in enumerate((("ab", s.a, s.b, s.outputs),
                                                  ("ba", s.b, s.a, tuple((y, x) for x, y in s.outputs)))):
        if not set(_vars_of(dst)) <= set(_vars_of(src)):
            continue
        name = f"gen_{s.id:04d}_{tag}"
        ops = sorted({o.op for o in (*src, *dst)})
        rules.append(make_rule(
            name, _source_fn(src, outs), _target_fn(s, name, src, dst, outs),
            where=[(_where_fn(s, src, dst, outs), "shapes follow TASO's operator semantics on both sides")],
            origin="generated", doc=f"generated substitution {s.id}: {s.text}",
            examples=_examples(src, scaled, side), tags=("generated", *ops), location=f"generated.json#{s.id}",
        ))
    return rules


def load_generated_json(path: str | Path) -> list[Rule]:
    """All rules of a generated rules.json file (``.json`` or ``.json.gz``)."""
    _, subs = read_file(path)
    return [r for s in subs for r in to_rules(s)]


__all__ = ["EXAMPLE_SCALES", "FORMAT", "VERSION", "NotApplicable", "SOp", "Subst", "eval_side", "load_generated_json",
           "load_substitutions", "parse_ref", "read_file", "ref", "to_rules"]
