"""egglog vs graphsub's native e-graph on the same rewrite system (the measurement behind the choice).

Workload: ``y = x@W0 + x@W1 + ... + x@W(n-1)`` (a left-deep chain of adds) with three rules --
add commutativity, add associativity and matmul factoring ``x@a + x@b -> x@(a+b)`` -- run for a
fixed number of iterations in both engines:

* egglog (``egglog==13.2.0``, Rust; ``pip install -e '.[egglog]'``): an untyped term language
  (no shapes), ``rewrite(...).to(...)``, ``run(1)`` per iteration;
* native (:func:`graphsub.search.eqsat.saturate`): the same three rules written as graphsub
  :class:`~graphsub.rules.rule.Rule` s, i.e. with shape inference on every target (Tensat's
  ``CheckApply``), on 64x64 tensors.

Reported per (n, iteration): wall time and e-graph size (egglog: table rows; native: e-nodes), and
the time per e-node.  A second part times the native engine on the real rule set (``ocggs157``)
and models, split into matching / instantiation+where / target+union, to show where time goes for
our rule shapes.  Writes ``experiments/results/eqsat_egglog.json`` and ``eqsat_egglog.md``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from graphsub.ir import Builder
from graphsub.ir.graph import Graph
from graphsub.rules.rule import Rule, make_rule
from graphsub.search.eqsat import saturate

RESULTS = Path(__file__).resolve().parents[1] / "results"
SIZES = (4, 6, 8)
ITERS = 6


def chain(n: int) -> Graph:
    b = Builder(f"chain{n}")
    x = b.input("x", (64, 64))
    y = b.matmul(x, b.weight("w0", (64, 64)))
    for i in range(1, n):
        y = b.add(y, b.matmul(x, b.weight(f"w{i}", (64, 64))))
    return b.build(y)


def native_rules() -> list[Rule]:
    def comm(p):  # type: ignore[no-untyped-def]
        return {"y": p.add(p.var("a"), p.var("b"))}

    def assoc(p):  # type: ignore[no-untyped-def]
        return {"y": p.add(p.add(p.var("a"), p.var("b")), p.var("c"))}

    def factor(p):  # type: ignore[no-untyped-def]
        x = p.var("x")
        return {"y": p.add(p.matmul(x, p.var("a")), p.matmul(x, p.var("b")))}

    return [
        make_rule("add_comm", comm, lambda t, m: {"y": t.add(m.b, m.a)}),
        make_rule("add_assoc", assoc, lambda t, m: {"y": t.add(m.a, t.add(m.b, m.c))}),
        make_rule("matmul_factor", factor, lambda t, m: {"y": t.matmul(m.x, t.add(m.a, m.b))}),
    ]


def run_native(n: int) -> list[dict[str, Any]]:
    _, _, rep = saturate(chain(n), native_rules(), iter_limit=ITERS, node_limit=10**7, time_limit_s=600)
    out = []
    prev = 0.0
    for it in rep["per_iteration"]:
        out.append({"n": n, "iteration": it["iteration"] + 1, "time_s": it["time_s"] - prev, "size": it["nodes"]})
        prev = it["time_s"]
    return out


try:  # the language must live at module level: egglog resolves the (string) annotations there
    from egglog import EGraph, Expr, StringLike, rewrite, vars_

    class T(Expr):
        def __init__(self, name: StringLike) -> None: ...

        def __add__(self, other: T) -> T: ...

        def __matmul__(self, other: T) -> T: ...

    HAVE_EGGLOG = True
except ImportError:  # pip install -e '.[egglog]'
    HAVE_EGGLOG = False


def run_egglog(n: int) -> list[dict[str, Any]]:
    x = T("x")
    y = x @ T("w0")
    for i in range(1, n):
        y = y + x @ T(f"w{i}")
    eg = EGraph()
    eg.let("y", y)
    a, b, c, v = vars_("a b c v", T)
    eg.register(rewrite(a + b).to(b + a), rewrite((a + b) + c).to(a + (b + c)),
                rewrite(v @ a + v @ b).to(v @ (a + b)))
    out = []
    for it in range(1, ITERS + 1):
        t = time.perf_counter()
        eg.run(1)
        dt = time.perf_counter() - t
        out.append({"n": n, "iteration": it, "time_s": dt, "size": sum(s for _, s in eg.all_function_sizes())})
    return out


def real_models() -> list[dict[str, Any]]:
    """Native engine on the real rules: where the saturation time goes."""
    import cProfile
    import pstats

    from graphsub import zoo
    from graphsub.rules import get_set

    rules = get_set("ocggs157")
    out = []
    for name in ("nasnet_a", "bert", "nasrnn"):
        g = zoo.get(name)
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        _, _, rep = saturate(g, rules, time_limit_s=15)
        prof.disable()
        wall = time.perf_counter() - t
        st = pstats.Stats(prof)
        cum = {f[2]: v[3] for f, v in st.stats.items()  # type: ignore[attr-defined]
               if f[0].endswith(("ematch.py", "runner.py", "egraph.py", "cycles.py"))}
        out.append({"model": name, "wall_s_profiled": wall, "nodes": rep["nodes"], "classes": rep["classes"],
                    "iterations": rep["iterations"], "stop": rep["stop"], "matches": rep["matches"],
                    "match_s": cum.get("run", 0.0), "instantiate_where_s": cum.get("instantiate", 0.0),
                    "target_union_s": cum.get("apply_instance", 0.0), "rebuild_s": cum.get("rebuild", 0.0),
                    "cycle_filter_s": cum.get("filter_cycles", 0.0)})
    return out


def main() -> None:
    if not HAVE_EGGLOG:
        raise SystemExit("egglog is not installed: .venv/bin/pip install -e '.[egglog]'")
    rows = []
    for n in SIZES:
        for engine, fn in (("egglog", run_egglog), ("native", run_native)):
            for r in fn(n):
                rows.append({"engine": engine, **r})
    real = real_models()
    (RESULTS / "eqsat_egglog.json").write_text(json.dumps({"toy": rows, "real": real}, indent=1) + "\n")
    lines = ["# egglog vs the native e-graph", "",
             "Toy rewrite system (add commutativity, add associativity, matmul factoring) on "
             "`x@W0 + ... + x@W(n-1)`; per iteration: seconds and e-graph size (egglog: table rows; native: "
             "e-nodes).  Generated by `experiments/search/eqsat_egglog.py`.", "",
             "| n | iteration | egglog s | egglog size | native s | native size | native / egglog time per node |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["engine"], r["n"], r["iteration"]): r for r in rows}
    for n in SIZES:
        for it in range(1, ITERS + 1):
            e, nat = by.get(("egglog", n, it)), by.get(("native", n, it))
            if e is None or nat is None:
                continue
            ratio = (nat["time_s"] / max(nat["size"], 1)) / max(e["time_s"] / max(e["size"], 1), 1e-12)
            lines.append(f"| {n} | {it} | {e['time_s']:.4f} | {e['size']} | {nat['time_s']:.4f} | {nat['size']} | "
                         f"{ratio:.0f}x |")
    lines += ["", "Native engine on `ocggs157` (15 s saturation budget; profiled, so slower than unprofiled):", "",
              "| model | e-nodes | e-classes | iterations | stop | matches | matching s | instantiate + where s | "
              "target + union s | rebuild s | cycle filter s |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in real:
        lines.append(f"| {r['model']} | {r['nodes']} | {r['classes']} | {r['iterations']} | {r['stop']} | "
                     f"{r['matches']} | {r['match_s']:.2f} | {r['instantiate_where_s']:.2f} | "
                     f"{r['target_union_s']:.2f} | {r['rebuild_s']:.2f} | {r['cycle_filter_s']:.2f} |")
    (RESULTS / "eqsat_egglog.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
