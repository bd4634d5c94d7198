"""The one verifier (:mod:`graphsub.equivalence`): one tolerance policy, one reference runner, one check for Graphs
and files, gradients given as arrays, and the float64 re-check of training graphs -- an exact rewrite that float32
evaluation order alone moves beyond the tolerance is verified in float64, a wrong one is still rejected, on every
path a training candidate is verified by (the search result's, the portfolio's, and a whole optimize call)."""

from __future__ import annotations

import numpy as np
import pytest

from graphsub.data import materialize, random_inputs
from graphsub.equivalence import (
    FLOAT64_FACTOR,
    GradientCheck,
    Reference,
    Tolerance,
    as_float64,
    check,
    check_gradients,
    equivalent,
    is_training,
)
from graphsub.errors import VerificationError
from graphsub.execute import run
from graphsub.frontends.onnx_export import export_graph
from graphsub.ir import Builder, Graph
from graphsub.training import build_training


def training_graph(n: int = 256, k: int = 8, offset: float = 1000.0) -> Graph:
    """A training graph whose weight gradient cancels: ``x + offset`` (a large mean) through a matmul into a batch
    norm at the batch's statistics, whose output gradient has zero mean over the batch, so ``grad.w = (x +
    offset)^T dy`` is a sum of ``n`` terms of size ``offset * |dy|`` adding up to far less. float32 rounding of that
    sum, relative to the result, is ~``offset * eps * sqrt(n)``: beyond rtol 1e-4, however the sum is ordered."""
    b = Builder("cancel")
    x = b.add(b.input("x", (n, k)), b.const("offset", np.float32(offset)))
    y = b.matmul(x, b.weight("w", (k, 4)))
    y = b.batchnorm(y, b.weight("s", (4,)), b.weight("bb", (4,)), b.weight("m", (4,)), b.weight("v", (4,)))
    fwd = materialize(b.build({"logits": y}), 0)
    return materialize(build_training(fwd, loss="cross_entropy", batchnorm="batch")[0], 0)


def split_sum(g: Graph, second: float = 1.0) -> Graph:
    """``grad.w = T @ D`` (T: [k, n], D: [n, 4]) as the sum of the products of the two halves of the batch: exact, the
    same products summed in another order. ``second`` != 1 scales the second half: a wrong rewrite."""
    r = g.outputs[g.output_names.index("grad.w")]
    t, d = g.nodes[r.node].inputs
    n = g.type_of(d).shape[0]
    e = g.edit()
    halves = [e.op("matmul", e.op("slice", t, starts=(lo,), ends=(hi,), axes=(1,)),
                   e.op("slice", d, starts=(lo,), ends=(hi,), axes=(0,))) for lo, hi in ((0, n // 2), (n // 2, n))]
    if second != 1.0:
        halves[1] = e.op("mul", halves[1], e.weight("wrong", data=np.float32(second)))
    e.replace(r, e.op("add", *halves))
    return materialize(e.commit(), 0)


@pytest.fixture(scope="module")
def graphs() -> tuple[Graph, Graph, Graph]:
    """The training graph, its exact rewrite, and a wrong rewrite off by 1e-6 of half the sum: in float32 the wrong
    one differs from the original about as much as the exact one does."""
    g = training_graph()
    return g, split_sum(g), split_sum(g, 1 + 1e-6)


def test_float32_rounding_alone_rejects_the_exact_rewrite_and_float64_accepts_it(graphs: tuple[Graph, ...]) -> None:
    g, exact, wrong = graphs
    assert is_training(g.output_names) and not is_training(("y",)) and not is_training(("loss",))
    f32 = check(Reference(g), exact, [0, 1], float64=False)
    assert not f32.verified and f32.failure == "tolerance" and f32.worst_output == "grad.w", f32
    assert f32.error.startswith("output 'grad.w', seed 0: outside tolerance") and f32.float64 == ""
    ok = check(Reference(g), exact, [0, 1])
    assert ok.verified and ok.failure == "" and ok.seeds == (0, 1), ok
    assert ok.float64.startswith("verified in float64: float32 evaluation order moves grad.w by "), ok.float64
    moved = {d.name: d for d in ok.outputs}["grad.w"]
    assert moved.ok and moved.reason.startswith("verified in float64") and moved.max_abs_diff > 1e-5
    assert all(d.ok and d.reason == "" for d in ok.outputs if d.name != "grad.w")
    bad = check(Reference(g), wrong, [0, 1])
    assert not bad.verified and bad.failure == "tolerance" and "differs in float64 too" in bad.error, bad
    assert bad.max_abs_diff < 10 * f32.max_abs_diff  # in float32 the two look alike: only float64 tells them apart
    rep = equivalent(g, exact, trials=2)  # the raising wrapper: the same machinery
    assert rep.equivalent and rep.float64 == ok.float64 and rep.worst_output == "grad.w"
    assert not equivalent(g, wrong).equivalent


def test_the_float64_recheck_is_exact_where_float32_is_not(graphs: tuple[Graph, ...]) -> None:
    """graphsub's reference executor in float64: the original and the exact rewrite agree to ~1e-14 of the gradient,
    far inside the float64 tolerance (1e-5 of the float32 one), while float32 moves the gradient by ~1e-4 of it."""
    g, exact, _ = graphs
    feeds = {k: v.astype(np.float64) for k, v in random_inputs(g, 0).items()}
    a, b = run(as_float64(g), feeds)["grad.w"], run(as_float64(exact), feeds)["grad.w"]
    assert a.dtype == np.float64 and float(np.max(np.abs(a - b))) < 1e-12 * float(np.max(np.abs(a)))
    assert Tolerance(1e-4, 1e-5).float64() == Tolerance(1e-4 * FLOAT64_FACTOR, 1e-5 * FLOAT64_FACTOR)


def test_files_get_the_float64_recheck_too(graphs: tuple[Graph, ...]) -> None:
    """The portfolio's path: the original and the candidates as ONNX bytes (``peers.check_feeds``, the older name of
    :func:`check`), imported into Graphs only for the re-check."""
    from graphsub.optimize.peers import OutputCheck, check_feeds

    g, exact, wrong = graphs
    original = export_graph(g).SerializeToString()
    reference = Reference(original)
    draws = [(s, random_inputs(g, s)) for s in (0, 1)]
    ok = check_feeds(original, export_graph(exact).SerializeToString(), draws, rtol=1e-4, atol=1e-5,
                     reference=reference)
    assert isinstance(ok, OutputCheck) and ok.loads and ok.verified and "verified in float64" in ok.float64, ok
    bad = check(reference, export_graph(wrong).SerializeToString(), draws, Tolerance())
    assert bad.loads and not bad.verified and "differs in float64 too" in bad.error, bad


def test_the_search_results_check_gets_the_float64_recheck(graphs: tuple[Graph, ...]) -> None:
    """The path of optimize's search result (and of bisect): ``verification.check_seeds`` / ``verify_graph``."""
    from graphsub.optimize.verification import check_seeds, verify_graph

    g, exact, wrong = graphs
    ok, diff, worst, done = check_seeds(g, exact, (0, 1000))
    assert ok and worst == "grad.w" and done == (0, 1000) and diff > 0
    assert "verified in float64" in verify_graph(g, exact, (0,)).float64
    assert not check_seeds(g, wrong, (0, 1000))[0]


def test_optimize_keeps_a_training_candidate_float32_rounding_alone_would_reject(graphs: tuple[Graph, ...]) -> None:
    """A whole optimize call on the training graph: the exact rewrite (an extra candidate of the portfolio) is
    verified -- in float64 -- and kept when faster; the wrong one is not verified. Timing faked: any rewrite 5 ms, the
    original 10 ms."""
    from graphsub.optimize import optimize
    from helpers import fake_timers

    g, exact, wrong = graphs
    original = export_graph(g).SerializeToString()
    res = optimize(g, rules=[], peers=(), eqsat_s=0, spelling=False, threads=1, time_s=60,
                   extra_candidates=[("exact", exact, ()), ("wrong", wrong, ())],
                   timers=fake_timers(lambda m: 10.0 if m == original else 5.0))
    by_name = {c.name: c for c in res.candidates}
    assert by_name["exact"].verified and by_name["exact"].max_abs_diff > 1e-5, by_name["exact"].error
    assert by_name["wrong"].verified is False and "differs in float64 too" in by_name["wrong"].error
    assert res.chosen == "exact", res.decision


def test_an_inference_graph_is_never_rechecked_in_float64() -> None:
    b = Builder("mlp")
    x = b.input("x", (8, 16))
    h = b.matmul(x, b.weight("w1", (16, 32)))
    g1 = b.build({"y": b.relu(h)})
    b = Builder("mlp")
    x = b.input("x", (8, 16))
    h = b.matmul(x, b.weight("w1", (16, 32)))
    g2 = b.build({"y": b.leakyrelu(h, alpha=1e-3)})
    c = check(Reference(g1), g2, [0])
    assert not c.verified and c.failure == "tolerance" and c.float64 == "" and c.loads


def test_the_reference_runs_once_per_draw_and_is_blamed_for_its_own_failures() -> None:
    b = Builder("r")
    g = b.build({"y": b.relu(b.input("x", (4,)))})
    ref = Reference(g)
    feeds = random_inputs(g, 0)
    assert ref.outputs(0, feeds) is ref.outputs(0, feeds)  # kept per draw: one run for many candidates
    broken = Reference(b"\x00not a model")
    c = check(broken, g, [(0, feeds)])
    assert c.failure == "reference" and c.loads and "original model cannot be loaded" in c.error
    c = check(ref, b"\x00not a model", [0])
    assert c.failure == "load" and not c.loads and not c.verified
    with pytest.raises(VerificationError, match="rtol"):
        Tolerance(-1.0, 0.0)


def test_check_gradients_one_policy_and_its_float64_option() -> None:
    want = {"loss": 2.0, "grad.w": np.array([1.0, -1.0, 1e-3], np.float32)}
    calls: list[int] = []

    def f64(got: dict, ref: dict):  # type: ignore[no-untyped-def]
        def again() -> tuple[dict, dict]:
            calls.append(1)
            return got, ref
        return again

    close = {"loss": 2.0, "grad.w": np.array([1.00001, -1.0, 1e-3], np.float32)}
    assert check_gradients(close, want, float64=f64(close, want)).verified and not calls  # float32 enough
    moved = {"loss": 2.0, "grad.w": np.array([1.001, -1.0, 1e-3], np.float32)}
    c = check_gradients(moved, want)
    assert not c.verified and c.worst == "grad.w" and c.error.startswith("grad.w: outside tolerance")
    assert c.loss_abs_diff == 0.0 and c.max_abs_grad == 1.0
    exact64 = {"loss": 2.0, "grad.w": np.array([1.0, -1.0, 1e-3])}
    ok = check_gradients(moved, want, float64=f64(exact64, exact64))
    assert ok.verified and calls and ok.float64.startswith("verified in float64: float32 evaluation order moves grad.w")
    off64 = {"loss": 2.0, "grad.w": np.array([1.0 + 1e-7, -1.0, 1e-3])}
    bad = check_gradients(moved, want, float64=f64(off64, exact64))
    assert not bad.verified and "differs in float64 too" in bad.error
    missing = check_gradients({"loss": 2.0}, want)
    assert not missing.verified and "missing: grad.w" in missing.error


def test_the_pytorch_routes_gradient_check_is_verified_in_float64_when_rounding_alone_fails() -> None:
    """The PyTorch route's inline check (``torch_training._check_grads``): a module whose weight gradient autograd
    sums over the two halves of the batch (exact) against the plain module fails in float32 -- the same cancelling
    sum as :func:`training_graph` -- and passes in float64 (both modules in double precision); a wrong one does not."""
    import torch

    from graphsub.optimize.torch_training import _check_grads, _grads

    class Net(torch.nn.Module):
        def __init__(self, halves: bool, second: float = 1.0) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.from_numpy(np.random.default_rng(0).standard_normal((8, 4)) / 3)
                                        .float())
            self.bn = torch.nn.BatchNorm1d(4)
            self.halves, self.second = halves, second

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + 3000.0  # cancellation well past rtol at any thread count (at 1000, 1 thread rounds within it)
            if not self.halves:
                return self.bn(x @ self.w)
            return self.bn(torch.cat([x[:128] @ self.w, self.second * (x[128:] @ self.w)]))

    x = torch.from_numpy(np.random.default_rng(1).standard_normal((256, 8)).astype(np.float32))
    labels = torch.from_numpy(np.eye(4, dtype=np.float32)[np.random.default_rng(2).integers(0, 4, 256)])
    names = ["w", "bn.weight", "bn.bias"]
    keys = {n: n for n in names}

    def verdict(other: torch.nn.Module, tol: Tolerance) -> GradientCheck:
        module = Net(False).train()
        return _check_grads(module, other.train(), keys, names, [x], labels, _grads(module, [x], labels),
                            _grads(other.train(), [x], labels), tol)

    def grads(m: torch.nn.Module) -> dict[str, object]:
        loss, g = _grads(m.train(), [x], labels)
        return {"loss": loss, **{"grad." + n: g[n] for n in names}}

    f32 = check_gradients(grads(Net(True)), grads(Net(False)))
    assert not f32.verified and f32.worst == "grad.w", f32  # float32 rounding alone moves grad w beyond rtol 1e-4
    ok = verdict(Net(True), Tolerance())
    assert ok.verified and ok.float64.startswith("verified in float64: float32 evaluation order moves grad.w"), ok
    bad = verdict(Net(True, 1 + 1e-6), Tolerance())
    assert not bad.verified and "differs in float64 too" in bad.error, bad
