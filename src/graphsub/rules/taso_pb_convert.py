"""TASO's ``graph_subst.pb`` as graphsub rules: :func:`load_taso_pb` converts every rule of the file.

:func:`convert_rule` turns one decoded rule (:class:`~graphsub.rules.taso_pb.PbRule`, normalized by
:func:`~graphsub.rules.taso_pb_spec.normalize`) into a :class:`~graphsub.rules.rule.Rule`;
:func:`load_taso_pb` reports the rules it cannot convert instead of failing.

TASO's rule file stores no shapes; its constraints are implicit in how TASO creates operators.
This module makes them explicit:

* a negative ``opId`` is a rule input variable (``p.var("v<n>")``: any tensor, shared by both
  sides); ops are ``conv2d`` (stride, SAME/VALID and activation constrained; the stored kernel
  size is ignored, dilations must be 1), ``matmul`` (activation), ``concat`` (axis), ``split``
  (target side only; its sizes come from TASO's *split tree*, see :func:`eval_side`),
  ``add``, ``mul`` and ``relu``;
* a ``where`` constraint re-derives the shapes of both sides with TASO's tensor semantics
  (:func:`eval_side`: elementwise operands of equal shape -- no broadcasting --, 2-D matmuls,
  4-D convs, concat rank = NUMDIM) from the matched variables' shapes, and requires every
  mapped output to keep its shape.  A grouped conv (groups = C / w.shape[1], as in TASO) over
  concatenated channels or kernels must have the concatenated pieces line up with its groups
  (otherwise merging/splitting convs along channels would mix groups);
* examples (for :func:`~graphsub.rules.soundness.numeric.verify_rule`) come from a small shape
  solver: ranks are inferred from the ops (matmul 2, conv 4, concat NUMDIM, elementwise equal),
  dimensions are unified symbolically, the free ones drawn (TASO's generator sizes first, then
  random ones, a grouped-conv variant where the rule allows it), and each candidate is checked
  with :func:`eval_side`.

Solving the examples is most of the conversion's time (about 2 s for the file, at the start of every command that
uses the default rule set), and its result depends only on the file and on this code: for the default file
(:func:`~graphsub.rules.taso_pb.default_pb_path`), :func:`load_taso_pb` keeps it in the user's cache directory
(``taso_pb_examples.json``, valid for one key: a hash of the file's bytes and of the source of this module and
:mod:`~graphsub.rules.taso_pb_spec`), so later processes convert the file in a fraction of that. A cache that cannot
be read or written, or holds another key, only costs the solving (and is replaced).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphsub.errors import RuleError
from graphsub.rules.rule import Example, Rule, make_rule
from graphsub.rules.taso_pb import PbRule, RuleCollection, collection_summary, default_pb_path, read_collection
from graphsub.rules.taso_pb_spec import (
    Mismatch,
    Spec,
    TOp,
    Val,
    check_shapes,
    components,
    describe,
    eval_side,
    normalize,
    var_name,
)

if TYPE_CHECKING:
    from graphsub.ir.node import Ref
    from graphsub.rules.apply import TargetBuilder
    from graphsub.rules.match import MatchView
    from graphsub.rules.pattern import PatternBuilder, PValue

N_EXAMPLES = 3
SOLVER_TRIES = 400


# ----------------------------------------------------------------------------- pattern, where, target


def _source_fn(spec: Spec) -> Callable[[PatternBuilder], dict[str, PValue]]:
    def source(p: PatternBuilder) -> dict[str, PValue]:
        vals: dict[Val, PValue] = {}
        for vid in spec.var_ids:
            vals[(vid, 0)] = p.var(var_name(vid))
        for i, op in enumerate(spec.src):
            ins = [vals[v] for v in op.inputs]
            kw: dict[str, Any] = {}
            if op.kind == "conv2d":
                kw = {"strides": op.attr("strides"), "pads": op.attr("pads"), "act": op.attr("act"),
                      "dilations": (1, 1)}
            elif op.kind == "matmul":
                kw = {"act": op.attr("act")}
            elif op.kind == "concat":
                kw = {"axis": op.attr("axis")}
            outs = p.op_multi(op.kind, *ins, name=f"s{i}", outputs=op.num_outputs, **kw)
            for k, v in enumerate(outs):
                vals[(i, k)] = v
        return {f"o{k}": vals[s] for k, (s, _) in enumerate(spec.outputs)}

    return source


def _env(spec: Spec, m: MatchView) -> dict[int, tuple[int, ...]]:
    return {vid: m.shape(var_name(vid)) for vid in spec.var_ids}


def _where_fn(spec: Spec) -> Callable[[MatchView], str | None]:
    def where(m: MatchView) -> str | None:
        try:
            src, _ = check_shapes(spec, _env(spec, m))
        except Mismatch as e:
            return str(e)
        for i, op in enumerate(spec.src):
            for k in range(op.num_outputs):
                have = m.shape(f"s{i}#{k}")
                if have != src[i][k].shape:
                    return f"s{i} has shape {have}, TASO semantics give {src[i][k].shape}"
        return None

    return where


def _target_fn(spec: Spec) -> Callable[[TargetBuilder, MatchView], dict[str, Ref]]:
    def target(t: TargetBuilder, m: MatchView) -> dict[str, Ref]:
        env = _env(spec, m)
        try:
            shapes = eval_side(spec.dst, env, live=spec.dst_live)
        except Mismatch as e:
            raise RuleError(f"taso_pb_{spec.index:03d}: target does not apply: {e}") from None
        vals: dict[Val, Ref] = {(vid, 0): m[var_name(vid)] for vid in spec.var_ids}
        for i, op in enumerate(spec.dst):
            if i not in spec.dst_live:
                continue
            ins = [vals[v] for v in op.inputs]
            if op.kind == "conv2d":
                outs = t.op_multi("conv2d", *ins, strides=op.attr("strides"), pads=op.attr("pads"), act=op.attr("act"))
            elif op.kind == "matmul":
                outs = t.op_multi("matmul", *ins, act=op.attr("act"))
            elif op.kind == "concat":
                outs = t.op_multi("concat", *ins, axis=op.attr("axis"))
            elif op.kind == "split":
                sizes = tuple(s.shape[op.attr("axis")] for s in shapes[i])
                outs = t.op_multi("split", *ins, axis=op.attr("axis"), sizes=sizes)
            else:
                outs = t.op_multi(op.kind, *ins)
            for k, r in enumerate(outs):
                vals[(i, k)] = r
        return {f"o{k}": vals[d] for k, (_, d) in enumerate(spec.outputs)}

    return target


# ----------------------------------------------------------------------------- rule


def convert_rule(index: int, rule: PbRule, solved: dict[int, list[dict[int, tuple[int, ...]]]] | None = None) -> Rule:
    """The graphsub Rule for rule ``index`` of the file; RuleError if it cannot be converted. ``solved``: the example
    shapes of rules solved before (:func:`solve_examples`, by index), used when they hold ``index`` and completed
    with it otherwise."""
    spec = normalize(index, rule)
    if solved is not None and index in solved:
        examples = solved[index]
    else:
        examples = solve_examples(spec)
        if solved is not None:
            solved[index] = examples
    if len(examples) < N_EXAMPLES:
        raise RuleError(f"found only {len(examples)} consistent example shapes (need {N_EXAMPLES})")
    text = describe(spec)
    tags = ["taso-pb", *sorted({op.kind for op in (*spec.src, *spec.dst)})]
    if len(spec.outputs) > 1:
        tags.append("multi-output")
    if components(spec.src) > 1:
        tags.append("disconnected")
    doc = f"TASO graph_subst.pb rule {index}: {text}"
    if spec.dropped:
        doc += f" (source ops {list(spec.dropped)} dropped: they feed no mapped output)"
    return make_rule(
        f"taso_pb_{index:03d}", _source_fn(spec), _target_fn(spec),
        where=[(_where_fn(spec), "shapes follow TASO's operator semantics on both sides")],
        origin="taso-pb", doc=doc, examples=[Example(types={var_name(v): s for v, s in ex.items()})
                                             for ex in examples],
        tags=tags, location=f"graph_subst.pb#{index}",
    )


# ----------------------------------------------------------------------------- example shapes


class _Unsat(Exception):
    pass


class _Dims:
    """Union-find over symbolic dimensions, with role tags and definitions of derived ones."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.tags: list[set[str]] = []
        self.defs: dict[int, tuple[Any, ...]] = {}

    def new(self, *tags: str, d: tuple[Any, ...] | None = None) -> int:
        self.parent.append(len(self.parent))
        self.tags.append(set(tags))
        if d is not None:
            self.defs[len(self.parent) - 1] = d
        return len(self.parent) - 1

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.tags[ra] |= self.tags[rb]

    def unify(self, xs: Sequence[int], ys: Sequence[int]) -> None:
        if len(xs) != len(ys):
            raise _Unsat(f"ranks {len(xs)} and {len(ys)} differ")
        for a, b in zip(xs, ys, strict=True):
            self.union(a, b)


def _rank_classes(spec: Spec) -> tuple[dict[Any, int], dict[int, int]]:
    """Rank inference: value key -> class, class -> fixed rank (matmul 2, conv 4, concat NUMDIM)."""
    keys: dict[Any, int] = {}
    parent: list[int] = []
    fixed: dict[int, int] = {}

    def cls(key: Any) -> int:
        if key not in keys:
            keys[key] = len(parent)
            parent.append(len(parent))
        a = keys[key]
        while parent[a] != a:
            a = parent[a]
        return a

    def fix(key: Any, r: int) -> None:
        c = cls(key)
        if fixed.setdefault(c, r) != r:
            raise RuleError(f"inconsistent ranks: a value must have rank {fixed[c]} and {r}")

    def same(k1: Any, k2: Any) -> None:
        a, b = cls(k1), cls(k2)
        if a != b:
            parent[b] = a
            if b in fixed:
                fix(k1, fixed.pop(b))

    for tag, side, live in (("s", spec.src, None), ("d", spec.dst, spec.dst_live)):
        for i, op in enumerate(side):
            if live is not None and i not in live:
                continue
            ins = [("v", j) if j < 0 else (tag, j, k) for j, k in op.inputs]
            outs = [(tag, i, k) for k in range(op.num_outputs)]
            fixed_rank = {"matmul": 2, "conv2d": 4}.get(op.kind, op.attr("numdim"))
            for key in ins + outs:
                cls(key)
                if fixed_rank is not None:
                    fix(key, fixed_rank)
            if op.kind != "matmul" and op.kind != "conv2d":
                for key in ins[1:] + outs:
                    same(ins[0], key)
    for (s, sk), (d, dk) in spec.outputs:
        same(("s", s, sk), ("v", d) if d < 0 else ("d", d, dk))
    return {k: cls(k) for k in keys}, fixed


def _symbolic(spec: Spec, ranks: Mapping[int, int], group1: bool) -> tuple[_Dims, dict[int, tuple[int, ...]]]:
    dims = _Dims()
    var = {vid: tuple(dims.new() for _ in range(r)) for vid, r in ranks.items()}

    def walk(side: Sequence[TOp], live: frozenset[int] | None, source: bool) -> dict[Val, tuple[int, ...]]:
        vals: dict[Val, tuple[int, ...]] = {}
        for i, op in enumerate(side):
            if live is not None and i not in live:
                continue
            ins = [var[j] if j < 0 else vals[(j, k)] for j, k in op.inputs]
            if op.kind in ("add", "mul", "relu"):
                for t in ins[1:]:
                    dims.unify(ins[0], t)
                outs = [ins[0]]
            elif op.kind == "matmul":
                a, b = ins
                if source:
                    dims.tags[dims.find(a[0])].add("batch")
                dims.union(a[1], b[0])
                outs = [(a[0], b[1])]
            elif op.kind == "conv2d":
                x, w = ins
                for s, tag in ((x[0], "batch"), (x[1], "chan"), (x[2], "spatial"), (x[3], "spatial"),
                               (w[0], "cout"), (w[1], "cpg"), (w[2], "kernel"), (w[3], "kernel")):
                    dims.tags[dims.find(s)].add(tag)
                if source and group1:
                    dims.union(x[1], w[1])
                hw = []
                for ax, stride in zip((2, 3), op.attr("strides"), strict=True):
                    if op.attr("pads") == "SAME":
                        hw.append(x[ax] if stride == 1 else dims.new(d=("same", x[ax], stride)))
                    else:
                        hw.append(dims.new(d=("valid", x[ax], w[ax], stride)))
                outs = [(x[0], w[0], *hw)]
            elif op.kind == "concat":
                ax = op.attr("axis")
                for t in ins[1:]:
                    dims.unify([d for i2, d in enumerate(ins[0]) if i2 != ax],
                               [d for i2, d in enumerate(t) if i2 != ax])
                total = dims.new(d=("sum", *(t[ax] for t in ins)))
                outs = [tuple(total if i2 == ax else d for i2, d in enumerate(ins[0]))]
            else:  # split: piece sizes come from the split tree; leave them free here
                ax = op.attr("axis")
                outs = [tuple(dims.new() if i2 == ax else d for i2, d in enumerate(ins[0]))
                        for _ in range(op.num_outputs)]
            for k, o in enumerate(outs):
                vals[(i, k)] = o
        return vals

    src = walk(spec.src, None, True)
    dst = walk(spec.dst, spec.dst_live, False)
    for (s, sk), (d, dk) in spec.outputs:
        dims.unify(src[(s, sk)], var[d] if d < 0 else dst[(d, dk)])
    return dims, var


def _draw(tags: set[str], rng: random.Random | None, grouped: bool) -> int:
    if rng is None:  # TASO's generator sizes: batch 2, channels/features 4, 5x5 images, 3x3 kernels
        return 3 if "kernel" in tags else 5 if "spatial" in tags else 2 if "batch" in tags else 4
    if "kernel" in tags:
        return rng.choice((1, 2, 3, 3))
    if "spatial" in tags:
        return rng.randint(3, 6)
    if "batch" in tags:
        return rng.randint(1, 3)
    if grouped and "cpg" in tags:
        return rng.choice((1, 2))
    if grouped and ("chan" in tags or "cout" in tags):
        return rng.choice((2, 4, 6))
    return rng.randint(1, 6)


def _assign(dims: _Dims, var: Mapping[int, tuple[int, ...]], rng: random.Random | None,
            grouped: bool) -> dict[int, tuple[int, ...]]:
    defs: dict[int, tuple[Any, ...]] = {}
    for s, d in dims.defs.items():
        defs.setdefault(dims.find(s), d)
    memo: dict[int, int] = {}
    active: set[int] = set()

    def val(s: int) -> int:
        r = dims.find(s)
        if r in memo:
            return memo[r]
        if r in active:
            raise _Unsat("cyclic dimension definition")
        active.add(r)
        d = defs.get(r)
        if d is None:
            v = _draw(dims.tags[r], rng, grouped)
        elif d[0] == "sum":
            v = sum(val(a) for a in d[1:])
        elif d[0] == "same":
            v = -(-val(d[1]) // d[2])
        else:
            v = (val(d[1]) - val(d[2])) // d[3] + 1
        active.discard(r)
        if v < 1:
            raise _Unsat(f"dimension {v}")
        memo[r] = v
        return v

    return {vid: tuple(val(s) for s in syms) for vid, syms in var.items()}


def _max_groups(spec: Spec, env: Mapping[int, Sequence[int]]) -> int:
    src = eval_side(spec.src, env)
    best = 1
    for op in spec.src:
        if op.kind == "conv2d":
            (j, k), (wj, wk) = op.inputs
            c = env[j][1] if j < 0 else src[j][k].shape[1]
            cg = env[wj][1] if wj < 0 else src[wj][wk].shape[1]
            best = max(best, c // cg)
    return best


def solve_examples(spec: Spec, count: int = N_EXAMPLES) -> list[dict[int, tuple[int, ...]]]:
    """Distinct variable shapes under which both sides are valid: TASO's generator sizes first,
    then random ones; plus a grouped-conv variant and a variant with other free ranks when the
    rule allows them."""
    keys, fixed = _rank_classes(spec)
    free = sorted({c for k, c in keys.items() if c not in fixed})
    rng = random.Random(0x7A50 + spec.index)
    has_conv = any(op.kind == "conv2d" for op in spec.src)
    plans: list[tuple[bool, bool, bool]] = [(True, True, False), (False, True, False), (False, True, False)]
    if has_conv:
        plans.insert(1, (False, False, False))  # grouped convs
    if free:
        plans.insert(1, (False, True, True))  # other ranks for rank-free values
    found: list[dict[int, tuple[int, ...]]] = []
    for preferred, group1, rerank in plans:
        for attempt in range(SOLVER_TRIES):
            rank_of = {c: 2 for c in free}
            if rerank:
                rank_of = {c: rng.choice((1, 3, 4)) for c in free}
            ranks = {vid: fixed.get(keys[("v", vid)], rank_of.get(keys[("v", vid)], 2)) for vid in spec.var_ids}
            try:
                dims, var = _symbolic(spec, ranks, group1)
                env = _assign(dims, var, None if preferred and attempt == 0 else rng, not group1)
                check_shapes(spec, env)
                if not group1 and _max_groups(spec, env) == 1:
                    continue
            except (_Unsat, Mismatch):
                continue
            if env not in found:
                found.append(env)
                break
    return found if len(found) >= count else []


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


def load_taso_pb(path: str | Path | None = None) -> LoadResult:
    """Convert every rule of TASO's ``graph_subst.pb`` (default: :func:`default_pb_path`).

    Rules are named ``taso_pb_NNN`` by their index in the file; rules that cannot be
    converted are listed in ``rejected`` with the reason.  Cached per resolved path.
    """
    p = default_pb_path() if path is None else Path(path)
    return _load_cached(str(p.resolve()))


Solved = dict[int, list[dict[int, tuple[int, ...]]]]


def _examples_key(path: str) -> tuple[Path, str] | None:
    """Where the solved examples of the rule file ``path`` are kept and the key they are valid for (see the module
    docstring); None for a file other than the default one, or when it or this code cannot be read."""
    from graphsub.rules import taso_pb_spec

    h = hashlib.sha256()
    try:
        if Path(path).resolve() != default_pb_path().resolve():
            return None
        h.update(Path(path).read_bytes())
        for module_file in (__file__, taso_pb_spec.__file__):
            h.update(Path(str(module_file)).read_bytes())
    except OSError:
        return None
    h.update(f"{N_EXAMPLES} {SOLVER_TRIES}".encode())
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphsub" / "taso_pb_examples.json", h.hexdigest()


def _read_solved(where: tuple[Path, str] | None) -> Solved:
    """The examples kept under ``where`` (file, key); empty when there are none for that key."""
    if where is None:
        return {}
    try:
        data = json.loads(where[0].read_text())
        if data.get("key") != where[1]:
            return {}
        return {int(i): [{int(v): tuple(int(d) for d in shape) for v, shape in ex.items()} for ex in exs]
                for i, exs in data["solved"].items()}
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return {}


def _write_solved(where: tuple[Path, str] | None, solved: Solved) -> None:
    """Keep ``solved`` under ``where`` (atomically; a failure to write is ignored)."""
    if where is None:
        return
    file, key = where
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        data = {str(i): [{str(v): list(s) for v, s in ex.items()} for ex in exs] for i, exs in sorted(solved.items())}
        tmp.write_text(json.dumps({"key": key, "solved": data}))
        os.replace(tmp, file)
    except OSError:
        tmp.unlink(missing_ok=True)


@functools.lru_cache(maxsize=8)
def _load_cached(path: str) -> LoadResult:
    coll = read_collection(path, lenient=True)
    rules: list[Rule] = []
    rejected: list[tuple[int, str]] = list(coll.errors)
    file = _examples_key(path)
    solved = _read_solved(file)
    known = len(solved)
    for r in coll.rules:
        try:
            rules.append(convert_rule(r.index, r, solved))
        except RuleError as e:
            rejected.append((r.index, str(e)))
        except Exception as e:  # never crash on one bad rule
            rejected.append((r.index, f"conversion failed: {type(e).__name__}: {e}"))
    rejected.sort()
    if len(solved) != known:
        _write_solved(file, solved)
    return LoadResult(Path(path), coll, rules, rejected)



__all__ = ["N_EXAMPLES", "LoadResult", "convert_rule", "load_taso_pb", "solve_examples"]
