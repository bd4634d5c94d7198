"""Numeric verification of a rule on its examples.

For each :class:`~graphsub.rules.rule.Example` the source pattern is instantiated as a concrete
graph (variables become inputs / weights of the given shapes), the rule is *matched* on it (so
the matcher and the ``where`` constraints are exercised too), applied, and the source and target
graphs are run with the reference executor on the same random data:

* ``exact`` mode -- when every op involved is exact on small integers (add, mul, matmul, conv,
  concat, split, transpose, relu, ...): inputs are random integers in [-3, 3] stored as float32
  and outputs must be *identical*;
* ``float`` mode otherwise: normal floats, ``|a - b| <= atol + rtol * |b|`` (1e-4 / 1e-5).

A rule passes when all examples (at least :data:`MIN_EXAMPLES`) pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from graphsub.data import random_array, random_inputs, random_weights
from graphsub.errors import GraphsubError
from graphsub.execute import run
from graphsub.ir.builder import Builder, Value
from graphsub.ir.graph import Graph
from graphsub.ops.types import TensorType
from graphsub.rules.apply import apply
from graphsub.rules.match import explain, find_matches
from graphsub.rules.pattern import WILDCARD, Pattern, Pred
from graphsub.rules.rule import Example, Rule

MIN_EXAMPLES = 3
RTOL, ATOL = 1e-4, 1e-5
#: ops that compute exactly on small integers stored as float32
EXACT_OPS = frozenset({
    "add", "sub", "mul", "smul", "matmul", "conv2d", "concat", "split", "transpose", "reshape",
    "relu", "enlarge", "merge_gconv", "const_iconv", "const_imm", "const_one", "identity",
    "flatten", "squeeze", "unsqueeze", "slice", "gather", "gather_nd", "pad", "maxpool2d", "neg", "abs",
    "expand", "reduce_sum", "gemm",
})


@dataclass(frozen=True)
class RuleReport:
    name: str
    passed: bool
    examples: int
    mode: str
    max_abs_diff: float
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _type(spec: Any) -> TensorType:
    if isinstance(spec, TensorType):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], str):
        return TensorType(tuple(spec[0]), spec[1])
    return TensorType(tuple(spec), "float32")


def instantiate(pattern: Pattern, example: Example, name: str = "source") -> Graph:
    """The concrete source graph of ``pattern`` for ``example``."""
    b = Builder(name)
    vals: dict[str, Value] = {}
    for v in pattern.vars:
        if v.name not in example.types:
            raise GraphsubError(f"example has no type for variable {v.name!r}")
        t = _type(example.types[v.name])
        if v.weight or v.name in example.data:  # a variable given fixed data is a constant (a weight leaf)
            data = example.data.get(v.name)
            vals[v.name] = b.weight(v.name, t.shape, dtype=t.dtype,
                                    data=None if data is None else np.asarray(data, dtype=t.dtype))
        else:
            vals[v.name] = b.input(v.name, t.shape, t.dtype)
    outs: dict[str, tuple[Value, ...]] = {}
    for n in pattern.nodes:
        attrs: dict[str, Any] = {}
        for k, want in n.attrs:
            if isinstance(want, Pred):
                if want.text in ("SAME", "VALID"):
                    attrs[k] = want.text
            else:
                attrs[k] = want
        attrs.update(example.attrs.get(n.name, {}))
        op = example.ops.get(n.name, n.op)
        if op == WILDCARD:
            raise GraphsubError(f"example gives no concrete op for wildcard {n.name!r}")
        ins = [vals[r.var] if r.var is not None else outs[str(r.node)][r.index] for r in n.inputs]
        outs[n.name] = b.op_multi(op, *ins, **attrs)
    return b.build({k: outs[str(r.node)][r.index] for k, r in pattern.outputs}, name=name)


def _exact_mode(rule: Rule, src: Graph, tgt: Graph) -> bool:
    ops = {n.sig.op for g in (src, tgt) for n in g.nodes.values() if not n.sig.opdef.leaf}
    acts = {n.sig.attr.get("act", "none") for g in (src, tgt) for n in g.nodes.values()}
    return ops <= EXACT_OPS and acts <= {"none", "relu"}


def _int_data(g: Graph, seed: int, fixed: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    inputs = {}
    for n in g.inputs:
        t = g.nodes[n].sig.out_types[0]
        inputs[g.nodes[n].sig.attr["name"]] = (rng.integers(-3, 4, t.shape).astype(np.float32)
                                               if t.dtype == "float32" else random_array(t, rng))
    weights = {}
    for n in g.ops_of("weight"):
        sig = g.nodes[n].sig
        nm = sig.attr["name"]
        if nm in g.params:
            continue
        t = sig.out_types[0]
        weights[nm] = (rng.integers(-3, 4, t.shape).astype(np.float32) if t.dtype == "float32"
                       else random_array(t, rng))
    weights.update(fixed)
    return inputs, weights


def check_example(rule: Rule, example: Example, seed: int = 0) -> tuple[bool, str, float, str]:
    """(passed, mode, max abs diff, reason) for one example."""
    try:
        src = instantiate(rule.source, example, f"{rule.name}_source")
    except GraphsubError as e:
        return False, "-", float("inf"), f"cannot instantiate the source: {e}"
    full = {n for n in src.nodes if not src.nodes[n].sig.opdef.leaf}
    matches = [m for m in find_matches(src, rule.on_examples()) if set(m.node_ids) == full]
    if not matches:
        anchor = next(iter(sorted(full)))
        return False, "-", float("inf"), f"rule does not match its own example: {explain(src, rule, anchor)}"
    try:
        tgt = apply(src, matches[0]).graph
    except GraphsubError as e:
        return False, "-", float("inf"), f"apply failed: {e}"
    exact = _exact_mode(rule, src, tgt)
    if exact:
        inputs, weights = _int_data(src, seed, dict(src.params))
    else:
        inputs = random_inputs(src, seed)
        weights = {**random_weights(src, seed, only_missing=False), **dict(src.params)}
    tweights = {**random_weights(tgt, seed, known=weights), **weights}
    try:
        a = run(src, inputs, weights)
        b = run(tgt, inputs, {k: v for k, v in tweights.items() if k in tgt.leaves})
    except GraphsubError as e:
        return False, "exact" if exact else "float", float("inf"), f"execution failed: {e}"
    worst = 0.0
    for k in a:
        x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
        if x.shape != y.shape:
            return False, "-", float("inf"), f"output {k}: shape {y.shape} != {x.shape}"
        fin = np.isfinite(x)
        if not np.array_equal(fin, np.isfinite(y)) or not np.array_equal(x[~fin], y[~fin], equal_nan=True):
            return False, "-", float("inf"), f"output {k}: non-finite values differ"
        if x.size and not fin.any():
            return False, "-", float("inf"), f"output {k}: no finite value (the check would be vacuous)"
        x, y = x[fin], y[fin]
        d = float(np.max(np.abs(x - y))) if x.size else 0.0
        worst = max(worst, d)
        ok = d == 0.0 if exact else bool(np.all(np.abs(x - y) <= ATOL + RTOL * np.abs(x)))
        if not ok:
            return False, "exact" if exact else "float", worst, f"output {k} differs (max abs diff {d:.3g})"
    return True, "exact" if exact else "float", worst, ""


def verify_rule(rule: Rule, seed: int = 0) -> RuleReport:
    """Check ``rule`` on all its examples (see the module docstring)."""
    if len(rule.examples) < MIN_EXAMPLES:
        return RuleReport(rule.name, False, len(rule.examples), "-", float("inf"),
                          f"needs at least {MIN_EXAMPLES} examples, has {len(rule.examples)}")
    worst, modes = 0.0, set()
    for i, ex in enumerate(rule.examples):
        ok, mode, diff, reason = check_example(rule, ex, seed + i)
        modes.add(mode)
        worst = max(worst, diff)
        if not ok:
            return RuleReport(rule.name, False, i + 1, mode, worst, f"example {i}: {reason}")
    return RuleReport(rule.name, True, len(rule.examples), "/".join(sorted(modes)), worst)


__all__ = ["EXACT_OPS", "MIN_EXAMPLES", "RuleReport", "check_example", "instantiate", "verify_rule"]
