"""Greedy's options for costly prices (graphsub.search.greedy): ``batch`` takes each step's rule wherever it pays,
``compounds`` are moves of many substitutions tried when no single one pays."""

from __future__ import annotations

from graphsub.cost.base import Cost, SumCostModel
from graphsub.equivalence import equivalent
from graphsub.ir import Builder, Graph
from graphsub.ir.node import OpSig
from graphsub.rules.apply import apply
from graphsub.rules.library import find_rule, get_set
from graphsub.rules.match import find_matches
from graphsub.search import Budget, search

REMOVE = [find_rule("cpu_identity_remove")]


def identities(n: int) -> Graph:
    b = Builder("ids")
    x = b.input("x", (2, 3))
    for _ in range(n):
        x = b.relu(b.identity(x))
    return b.build(x)


class Launches(SumCostModel):
    """One per op (counting)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def _node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None) -> Cost:
        return Cost(time_ms=1.0)

    def delta(self, parent: Graph, child: Graph) -> Cost:
        self.calls += 1
        return super().delta(parent, child)


class GemmWraps(SumCostModel):
    """onnxruntime's view of a projection, in small: a matmul of a rank-3 activation runs as Reshape -> Gemm ->
    Reshape (3), one of a rows tensor as one Gemm (1); every other op 1."""

    def _node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None) -> Cost:
        if sig.op == "matmul" and len(sig.in_types[0].shape) == 3:
            return Cost(time_ms=3.0)
        return Cost(time_ms=1.0)


def replayed(graph: Graph, steps: tuple) -> Graph:  # type: ignore[type-arg]
    g = graph
    for step in steps:
        (m,) = [m for m in find_matches(g, find_rule(step.rule)) if tuple(n for _, n in m.nodes) == step.nodes]
        g = apply(g, m).graph
    return g


def test_batch_takes_the_winning_rule_everywhere_in_one_step() -> None:
    g = identities(5)
    plain, batched = Launches(), Launches()
    r1 = search(g, REMOVE, plain, Budget(time_s=10), algo="greedy")
    r2 = search(g, REMOVE, batched, Budget(time_s=10), algo="greedy", batch=True)
    assert [s.rule for s in r1.sequence] == [s.rule for s in r2.sequence] == ["cpu_identity_remove"] * 5
    assert r1.best.num_ops == r2.best.num_ops == 5
    assert r2.stats.expanded < r1.stats.expanded  # 2 expansions (the first step, the final check) against 6
    assert replayed(g, r2.sequence).structural_hash() == r2.best.structural_hash()


def projections() -> Graph:
    b = Builder("proj")
    x = b.input("x", (2, 5, 8))
    h = b.add(b.matmul(x, b.weight("w1", (8, 16))), b.weight("b1", (16,)))
    y = b.add(b.matmul(b.relu(h), b.weight("w2", (16, 8))), b.weight("b2", (8,)))
    return b.build(y)


def test_a_compound_move_is_taken_where_no_single_step_pays() -> None:
    g = projections()
    rows = get_set("rows")
    follow = [r for r in get_set("cleanup") if r.name in ("cpu_reshape_reshape", "cpu_reshape_noop")]
    single = search(g, [*rows, *follow], GemmWraps(), Budget(time_s=10), algo="greedy")
    assert not single.sequence  # each rows step adds a reshape before any cancels
    both = search(g, [*rows, *follow], GemmWraps(), Budget(time_s=10), algo="greedy",
                  compounds=[(*rows, *follow)])
    assert both.sequence and {s.rule for s in both.sequence} & {r.name for r in rows}
    assert both.best_cost < single.best_cost
    assert all(len(t.shape) == 2 for n in both.best.ops_of("matmul") for t in both.best.nodes[n].sig.in_types[:1])
    assert replayed(g, both.sequence).structural_hash() == both.best.structural_hash()
    assert equivalent(g, both.best).equivalent


class SwapNoise(Launches):
    """One per op, but a mul whose first operand has the lower rank 'costs' a rounding less: what a measured model
    reads for two operand orders of one kernel (priced before the base class puts operands in canonical order)."""

    def node_cost(self, sig: OpSig, consts: tuple[bool, ...] | None = None) -> Cost:
        if sig.op == "mul" and len(sig.in_types[0].shape) < len(sig.in_types[1].shape):
            return Cost(time_ms=1.0 - 1e-5)
        return Cost(time_ms=1.0)


def test_a_gain_below_the_models_resolution_is_not_a_step() -> None:
    b = Builder("swap")
    g = b.build(b.relu(b.identity(b.mul(b.input("x", (2, 3)), b.input("y", (3,))))))
    rules = [*REMOVE, find_rule("alg_mul_comm")]
    noisy = search(g, rules, SwapNoise(), Budget(time_s=10), algo="greedy", batch=True)
    assert [s.rule for s in noisy.sequence] == ["cpu_identity_remove", "alg_mul_comm"]
    resolved = SwapNoise()
    resolved.resolution = 1e-3
    r = search(g, rules, resolved, Budget(time_s=10), algo="greedy", batch=True)
    assert [s.rule for s in r.sequence] == ["cpu_identity_remove"]  # the real gain is still taken


def test_the_onnxruntime_priced_model_resolves_a_microsecond() -> None:
    from graphsub.cost.ort_regions import RESOLUTION_MS, OrtKernelCostModel

    assert OrtKernelCostModel(threads=1).resolution == RESOLUTION_MS == 1e-3
    assert OrtKernelCostModel(threads=1, objective="bytes").resolution == 0.0
    assert Launches().resolution == 0.0
