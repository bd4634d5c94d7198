"""Proving rules from TASO's operator axioms with Z3 (``graphsub rules prove``).

Tensors are an uninterpreted sort ``T``; every operator of :mod:`.axioms`' vocabulary is an
uninterpreted function and the axioms are ``ForAll`` equations over them.  A rule is proven
for its first example instance: the example's source graph and the rule's target are
translated into terms (:func:`graph_terms`; shapes enter as ``dim(axis, term) == n`` facts,
which the split axioms need), and Z3 checks that "some mapped output differs" is unsatisfiable
together with the axioms.

Results (:class:`ProofResult`):

* ``proven`` -- Z3 answered unsat within the time limit;
* ``refuted`` -- Z3 found a model of the axioms in which the two sides differ (the rule does
  not follow from the axioms) *and* the numeric verifier confirms a concrete counterexample on
  the rule's examples, so the rule is wrong;
* ``unknown`` -- with the reason: an op, attribute or broadcast the axioms do not cover, the
  time limit, a counter-model that numerics do not confirm (true but not derivable from the
  axioms), or an example that cannot be instantiated.

The axioms are sound on concrete tensors (checked by :func:`~.axioms.check_axioms`), so a proof
means the rule holds for every shape on which its source and target are valid.

>>> from graphsub.rules.library import get_set
>>> r = prove_rule(next(r for r in get_set("algebra") if r.name == "alg_matmul_assoc_l2r"), timeout_ms=5000)
>>> r.status
'proven'
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import z3

from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.ops.common import resolve_pads
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.axioms import AXIOMS, NONE, RELU, SAME, VALID, Axiom

STATUSES = ("proven", "refuted", "unknown")


class Unsupported(Exception):
    """The graph uses something the axioms do not describe."""


class Z3Algebra:
    """The operator vocabulary as Z3 uninterpreted functions over the tensor sort ``T``."""

    def __init__(self) -> None:
        T, Int = z3.DeclareSort("T"), z3.IntSort()
        self.T = T
        f = z3.Function
        self.f = {
            "ewadd": f("ewadd", T, T, T), "ewmul": f("ewmul", T, T, T), "smul": f("smul", T, T, T),
            "matmul": f("matmul", T, T, T), "transpose": f("transpose", T, T), "relu": f("relu", T, T),
            "conv": f("conv", Int, Int, Int, Int, T, T, T), "pool_avg": f("pool_avg", Int, Int, Int, T, T),
            "pool_max": f("pool_max", Int, Int, Int, T, T), "concat": f("concat", Int, T, T, T),
            "split0": f("split0", Int, Int, Int, T, T), "split1": f("split1", Int, Int, Int, T, T),
            "dim": f("dim", Int, T, Int), "enlarge": f("enlarge", Int, T, T), "cpool": f("cpool", Int, T),
            "iconv": f("iconv", Int, T),
        }
        self._opaque: dict[tuple[str, int], Any] = {}
        self._imatmul = z3.Const("imatmul", T)
        self._iewmul = z3.Const("iewmul", T)

    def opaque(self, name: str, arity: int) -> Any:
        """An uninterpreted function with no axioms (``T^arity -> T``): both sides of a rule that apply it to equal
        arguments agree (congruence), and nothing else follows."""
        key = (name, arity)
        if key not in self._opaque:
            self._opaque[key] = z3.Function(name, *([self.T] * arity), self.T)
        return self._opaque[key]

    def add(self, x: Any, y: Any, same_shape: bool) -> Any:
        """x + y: ``ewadd`` for equal shapes, else the axiom-free ``badd`` (a broadcasting add)."""
        return self.f["ewadd"](x, y) if same_shape else self.opaque("badd", 2)(x, y)

    def __getattr__(self, name: str) -> Any:
        if name in ("f", "T", "_imatmul", "_iewmul", "_opaque"):
            raise AttributeError(name)
        try:
            return self.f[name]
        except KeyError:
            raise AttributeError(name) from None

    def imatmul(self) -> Any:
        return self._imatmul

    def iewmul(self) -> Any:
        return self._iewmul

    def channels_of(self, x: Any) -> Any:
        return self.f["dim"](1, x)

    def axiom(self, ax: Axiom) -> Any:
        """``ax`` as a Z3 ``ForAll``."""
        ts = {n: z3.Const(f"{ax.name}_{n}", self.T) for n in ax.tensors}
        ps = {n: z3.Int(f"{ax.name}_{n}") for n in ax.params}
        env = {**ts, **ps}
        return z3.ForAll(list(env.values()), ax.lhs(self, **env) == ax.rhs(self, **env))


# ----------------------------------------------------------------------------- graphs -> terms


def _pad_code(attrs: Any, x_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int]) -> int:
    pads = tuple(attrs["pads"])
    if pads == (0, 0, 0, 0):
        return VALID
    if pads == resolve_pads("SAME", x_shape[2:4], kernel, strides, (1, 1)):
        return SAME
    raise Unsupported(f"explicit pads {pads} (the axioms know SAME and VALID)")


def _square(v: Sequence[int], what: str) -> int:
    if v[0] != v[1]:
        raise Unsupported(f"non-square {what} {tuple(v)}")
    return int(v[0])


def graph_terms(g: Graph, A: Z3Algebra, facts: list[Any], prefix: str = "") -> dict[tuple[int, int], Any]:
    """Z3 terms of every node output of ``g``; ``dim`` facts about them are appended to
    ``facts``.  Raises :class:`Unsupported`."""
    terms: dict[tuple[int, int], Any] = {}
    for nid in g.topo_order():
        node = g.nodes[nid]
        sig = node.sig
        op, a = sig.op, sig.attr
        ins = [terms[(r.node, r.index)] for r in node.inputs]
        shapes = [t.shape for t in sig.in_types]
        if op in ("input", "weight"):
            outs = [z3.Const(f"{prefix}{a['name']}", A.T)]
        elif op in ("add", "mul"):
            if shapes[0] != shapes[1]:
                raise Unsupported(f"{op} with broadcasting {shapes[0]} vs {shapes[1]}")
            outs = [A.f["ewadd" if op == "add" else "ewmul"](*ins)]
        elif op == "smul":
            outs = [A.f["smul"](*ins)]
        elif op == "sum":  # ONNX Sum: the same additions as add, left to right
            t, shape = ins[0], shapes[0]
            for x, sx in zip(ins[1:], shapes[1:], strict=True):
                t, shape = A.add(t, x, sx == shape), max(shape, sx, key=len)
            outs = [t]
        elif op == "layernorm":  # no axioms: equal arguments and attributes give equal results
            axis = a["axis"] % len(shapes[0])
            outs = [A.opaque(f"layernorm_{axis}_{a['epsilon']!r}", len(ins))(*ins)]
        elif op in ("ms_skip_layernorm", "ms_skip_layernorm_sum"):
            # by definition: layernorm over the last axis of h = x + skip (+ bias) (and h itself)
            h = A.add(ins[0], ins[1], shapes[0] == shapes[1])
            if len(ins) > 4:
                h = A.add(h, ins[4], shapes[4] == shapes[0])
            ln_ins = [h, *ins[2:4]]
            outs = [A.opaque(f"layernorm_{len(shapes[0]) - 1}_{a['epsilon']!r}", len(ln_ins))(*ln_ins)]
            if op == "ms_skip_layernorm_sum":
                outs.append(h)
        elif op == "relu":
            outs = [A.f["relu"](*ins)]
        elif op == "matmul":
            if any(len(s) != 2 for s in shapes):
                raise Unsupported(f"matmul of ranks {[len(s) for s in shapes]} (the axioms are 2-D)")
            if a["act"] not in ("none", "relu"):
                raise Unsupported(f"matmul with activation {a['act']}")
            t = A.f["matmul"](*ins)
            outs = [A.f["relu"](t) if a["act"] == "relu" else t]
        elif op == "transpose":
            if tuple(a["perm"]) != (1, 0):
                raise Unsupported(f"transpose perm {tuple(a['perm'])}")
            outs = [A.f["transpose"](*ins)]
        elif op == "conv2d":
            if len(ins) != 2 or tuple(a["dilations"]) != (1, 1) or a["act"] not in ("none", "relu"):
                raise Unsupported("conv2d with bias, dilation or an activation other than none/relu")
            s = _square(a["strides"], "strides")
            p = _pad_code(a, shapes[0], shapes[1][2:4], a["strides"])
            groups = shapes[0][1] // shapes[1][1]
            outs = [A.f["conv"](s, p, RELU if a["act"] == "relu" else NONE, groups, *ins)]
        elif op in ("avgpool2d", "maxpool2d"):
            if a["act"] != "none" or a["ceil_mode"]:
                raise Unsupported(f"{op} with activation or ceil_mode")
            k = _square(a["kernel"], "kernel")
            s = _square(a["strides"], "strides")
            p = _pad_code(a, shapes[0], a["kernel"], a["strides"])
            if op == "avgpool2d" and p == SAME and not a["count_include_pad"]:
                raise Unsupported("avgpool2d excluding padding (the axioms count padding)")
            outs = [A.f["pool_avg" if op == "avgpool2d" else "pool_max"](k, s, p, *ins)]
        elif op == "concat":
            if len(ins) != 2:
                raise Unsupported(f"concat of {len(ins)} inputs")
            outs = [A.f["concat"](a["axis"], *ins)]
        elif op == "split":
            if len(a["sizes"]) != 2:
                raise Unsupported(f"split into {len(a['sizes'])} pieces")
            n, m = a["sizes"]
            outs = [A.f["split0"](a["axis"], n, m, *ins), A.f["split1"](a["axis"], n, m, *ins)]
        elif op == "enlarge":
            outs = [A.f["enlarge"](_square(a["kernel"], "kernel"), *ins)]
        elif op == "const_pool":
            outs = [A.f["cpool"](_square(a["shape"][2:4], "kernel"))]
        elif op == "const_iconv":
            o, i, kh, kw = a["shape"]
            if i != o:
                raise Unsupported("depthwise identity kernel")
            outs = [A.f["iconv"](_square((kh, kw), "kernel"))]
        elif op == "const_imm":
            outs = [A.imatmul()]
        elif op == "const_one":
            outs = [A.iewmul()]
        else:
            raise Unsupported(f"no axioms for op {op!r}")
        for k, (t, ty) in enumerate(zip(outs, sig.out_types, strict=True)):
            terms[(nid, k)] = t
            facts.extend(A.f["dim"](ax, t) == d for ax, d in enumerate(ty.shape))
    return terms


# ----------------------------------------------------------------------------- proving


@dataclass(frozen=True)
class ProofResult:
    name: str
    status: str
    seconds: float
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def instance(rule: Rule) -> tuple[Graph, Graph]:
    """Source and target graphs of ``rule`` on its first instantiable example."""
    from graphsub.rules.apply import apply
    from graphsub.rules.match import find_matches
    from graphsub.rules.soundness.numeric import instantiate

    why = "the rule has no examples"
    for ex in rule.examples:
        try:
            src = instantiate(rule.source, ex, f"{rule.name}_source")
        except GraphsubError as e:
            why = f"cannot instantiate its example: {e}"
            continue
        full = {n for n in src.nodes if not src.nodes[n].sig.opdef.leaf}
        ms = [m for m in find_matches(src, rule.on_examples()) if set(m.node_ids) == full]
        if not ms:
            why = "the rule does not match its own example"
            continue
        try:
            return src, apply(src, ms[0]).graph
        except GraphsubError as e:
            why = f"apply failed: {e}"
    raise Unsupported(why)


def _numeric_counterexample(rule: Rule, seed: int) -> str | None:
    from graphsub.rules.soundness.numeric import verify_rule

    rep = verify_rule(rule, seed)
    return None if rep.passed else rep.reason


_AXIOM_CACHE: dict[int, tuple[Z3Algebra, list[Any]]] = {}


def _algebra() -> tuple[Z3Algebra, list[Any]]:
    key = id(z3.main_ctx())
    if key not in _AXIOM_CACHE:
        A = Z3Algebra()
        _AXIOM_CACHE[key] = (A, [A.axiom(ax) for ax in AXIOMS])
    return _AXIOM_CACHE[key]


def prove_graphs(src: Graph, tgt: Graph, timeout_ms: int = 10_000) -> tuple[z3.CheckSatResult, str]:
    """Z3's answer to "some output of ``src`` differs from ``tgt``" under the axioms."""
    A, axioms = _algebra()
    facts: list[Any] = []
    ts = graph_terms(src, A, facts)
    tt = graph_terms(tgt, A, facts)
    outs = [(ts[(r.node, r.index)], tt[(q.node, q.index)]) for r, q in zip(src.outputs, tgt.outputs, strict=True)]
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    s.add(*axioms, *facts)
    s.add(z3.Or([a != b for a, b in outs]))
    res = s.check()
    return res, s.reason_unknown() if res == z3.unknown else ""


def prove_rule(rule: Rule, timeout_ms: int = 10_000, seed: int = 0) -> ProofResult:
    """Prove one rule (see the module docstring)."""
    t0 = time.perf_counter()

    def done(status: str, reason: str = "") -> ProofResult:
        return ProofResult(rule.name, status, time.perf_counter() - t0, reason)

    try:
        src, tgt = instance(rule)
        res, why = prove_graphs(src, tgt, timeout_ms)
    except Unsupported as e:
        return done("unknown", str(e))
    if res == z3.unsat:
        return done("proven")
    cex = _numeric_counterexample(rule, seed)
    if res == z3.sat:
        if cex is not None:
            return done("refuted", f"z3: the axioms have a model where the sides differ; numeric counterexample: {cex}")
        return done("unknown", "z3 found a model of the axioms where the sides differ, but numerics agree "
                               "(true but not derivable from the axioms)")
    if cex is not None:
        return done("refuted", f"numeric counterexample ({why or 'z3 gave up'}): {cex}")
    return done("unknown", f"z3: {why or 'unknown'} within {timeout_ms} ms")


def prove_rules(rules: Iterable[Rule], timeout_ms: int = 10_000, seed: int = 0) -> list[ProofResult]:
    return [prove_rule(r, timeout_ms, seed) for r in rules]


def summarize(results: Sequence[ProofResult]) -> dict[str, Any]:
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    return {**counts, "total": len(results), "seconds": float(np.sum([r.seconds for r in results]))}


__all__ = ["STATUSES", "ProofResult", "Unsupported", "Z3Algebra", "graph_terms", "instance", "prove_graphs",
           "prove_rule", "prove_rules", "summarize"]
