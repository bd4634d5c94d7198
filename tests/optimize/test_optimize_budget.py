"""`optimize`'s time budget bounds the whole call, bad budgets are refused, and a stop request (the first Ctrl-C)
finishes the call early: verified candidates only, written only when confirmed faster, else nothing written."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphsub import interrupt
from graphsub.deadline import overshoot_bound_s
from graphsub.errors import GraphsubError
from graphsub.optimize import optimize
from graphsub.optimize.budget import plan
from graphsub.optimize.peers import PeerInput, run_peer
from graphsub.optimize.timing import Timers, time_candidates
from graphsub.search import Budget
from helpers import _node_count, fake_timers, no_stop_request  # noqa: F401 -- autouse: no Ctrl-C flag across tests

FAST = {"cost": "roofline:cpu", "budget": Budget(time_s=5, k=4), "peers": "none", "eqsat_s": 0, "ort_search_s": 0}


class _Clock:
    """A fake clock (:class:`~graphsub.optimize.timing.Timers`' ``clock``) that moves only when a fake onnxruntime
    session or run says so."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def relu_chain(path: Path, n: int) -> Path:
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], ["y" if i == n - 1 else f"t{i}"])
             for i in range(n)]
    g = helper.make_graph(nodes, f"chain{n}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize(("kw", "what"), [
    ({"time_s": math.nan}, "time_s"), ({"time_s": math.inf}, "time_s"), ({"time_s": -1.0}, "time_s"),
    ({"time_s": 0.0}, "time_s"), ({"eqsat_s": math.nan}, "eqsat_s"), ({"on_top_s": -2.0}, "on_top_s"),
    ({"timing_budget_ms": 0.0}, "timing_budget_ms"), ({"min_speedup": math.inf}, "min_speedup"),
    ({"seeds": 0}, "seeds"), ({"threads": 0}, "threads"),
])
def test_optimize_refuses_limits_that_do_not_limit(model_path: Path, kw: dict[str, float], what: str) -> None:
    t = time.perf_counter()
    with pytest.raises(GraphsubError, match=what):
        optimize(model_path, **{**FAST, **kw})  # type: ignore[arg-type]
    assert time.perf_counter() - t < 1.0  # refused before any work


def test_plan_keeps_todays_phases_at_the_default_and_shrinks_the_portfolio_to_fit() -> None:
    full = plan(100.0, 99.0, search_cap=None, eqsat_s=5.0, on_top_s=2.0, n_peers=4, portfolio=True)
    assert (full.search_s, full.eqsat_s, full.peers, full.on_top_s, full.dropped) == (12.0, 5.0, True, 2.0, ())
    mid = plan(40.0, 39.0, search_cap=None, eqsat_s=5.0, on_top_s=2.0, n_peers=4, portfolio=True)
    assert mid.dropped == ("searches on top of the peers",) and mid.peers and mid.eqsat_s == 5.0
    small = plan(5.0, 4.0, search_cap=None, eqsat_s=5.0, on_top_s=2.0, n_peers=4, portfolio=True)
    assert not small.peers and small.eqsat_s == small.on_top_s == 0.0 and len(small.notes()) == 3
    assert small.search_s is not None and 0.8 < small.search_s <= 4.0 - small.tail_s  # the search gets their time
    capped = plan(100.0, 99.0, search_cap=3.0, eqsat_s=5.0, on_top_s=2.0, n_peers=0, portfolio=True)
    assert capped.search_s == 3.0
    unbounded = plan(None, math.inf, search_cap=12.0, eqsat_s=5.0, on_top_s=2.0, n_peers=2, portfolio=True)
    assert (unbounded.search_s, unbounded.eqsat_s, unbounded.peers, unbounded.tail_s) == (12.0, 5.0, True, 0.0)


def test_budget_bounds_optimize_on_a_long_relu_chain(tmp_path: Path) -> None:
    src = relu_chain(tmp_path / "chain.onnx", 1000)
    out = tmp_path / "out.onnx"
    t = time.perf_counter()
    res = optimize(src, output=out, cost="roofline:cpu", time_s=2.0, timing_budget_ms=20)
    wall = time.perf_counter() - t
    assert wall < 2.0 + overshoot_bound_s(), res.timings_s  # the bound the README states (no weights)
    assert res.verified and res.written == str(out) and out.is_file()
    assert res.time_budget_s == 2.0 and not res.interrupted
    assert any("skipped" in n for n in res.portfolio_notes)  # eqsat and the peers do not fit in 2 s
    assert res.to_dict()["time_budget_s"] == 2.0


def test_the_budget_grows_with_the_weights(model_path: Path) -> None:
    """``time_per_gb_s`` adds that much per GB of the model's weights (and inputs) to ``time_s`` (the command line's
    default budget: 100 s + 400 s per GB); without it the budget is ``time_s``."""
    from graphsub.frontends.onnx_io import load
    from graphsub.optimize.budget import model_bytes

    gb = model_bytes(load(model_path)) / 1e9  # its weights and inputs
    assert gb > 0
    fixed = optimize(model_path, measure_latency=False, time_s=30.0, **FAST)  # type: ignore[arg-type]
    grown = optimize(model_path, measure_latency=False, time_s=30.0, time_per_gb_s=1e6, **FAST)  # type: ignore[arg-type]
    assert fixed.time_budget_s == 30.0 and grown.time_budget_s == pytest.approx(30.0 + 1e6 * gb)


def test_budget_bounds_optimize_with_every_step_on_a_model_with_weights(tmp_path: Path) -> None:
    """A zoo CNN (5 MB of weights) with the default portfolio, verification and timing: the whole call ends within
    the bound the README states past its 5 s budget."""
    from graphsub import zoo
    from graphsub.ir.analysis import weight_bytes

    t = time.perf_counter()
    res = optimize("zoo:squeezenet", output=tmp_path / "o.onnx", time_s=5.0)
    wall = time.perf_counter() - t
    assert res.verified and res.written and res.time_budget_s == 5.0
    assert wall < 5.0 + overshoot_bound_s(weight_bytes(zoo.get("squeezenet"))), res.timings_s


def test_a_deadline_reads_its_injected_clock() -> None:
    """``Deadline(clock=...)``: the seam through which optimize's budget reads time; the clock is not part of the
    deadline's value."""
    from graphsub.deadline import Deadline

    clock = _Clock()
    d = Deadline.after(2.0, clock=clock)
    assert (d.start, d.end, d.remaining(), d.expired()) == (0.0, 2.0, 2.0, False)
    clock.t = 1.5
    assert d.remaining() == 0.5 and d.elapsed() == 1.5 and d.share(1.0, reserve=0.25) == 0.25 and not d.expired()
    clock.t = 2.0
    assert d.expired() and d.reason() == "time" and d.remaining() == 0.0
    assert d == Deadline(2.0, 0.0) and Deadline.after(None, clock=clock).remaining() == math.inf


def test_optimize_reads_its_budget_and_step_times_on_the_injected_clock(model_path: Path) -> None:
    """optimize()'s deadline and recorded step times are read on ``timers.clock``: on a clock frozen at 0 the 75 s
    budget never runs out (the faster search result is confirmed and kept, every step took 0 s); on one whose every
    reading is an hour after the last it runs out at once (the candidates' verification and the portfolio are
    skipped, nothing is timed, the original is kept)."""
    frozen = optimize(model_path, timers=fake_timers(_node_count, clock=lambda: 0.0), **FAST)  # type: ignore[arg-type]
    assert frozen.chosen == "search" and not frozen.budget_stop and set(frozen.timings_s.values()) == {0.0}
    t = [0.0]

    def hours() -> float:
        t[0] += 3600.0
        return t[0]

    late = optimize(model_path, timers=fake_timers(_node_count, clock=hours), **FAST)  # type: ignore[arg-type]
    assert late.budget_stop == "time" and late.kept_original and "time_s" not in late.timings_s
    assert all(v > 0 and v % 3600.0 == 0 for v in late.timings_s.values())
    assert any("no time left in the budget" in n for n in late.portfolio_notes)


def test_timing_rounds_stop_when_told() -> None:
    timers = Timers(session=lambda m, feeds, **kw: lambda ms: float(len(m)))
    calls = [0]

    def stop(need_s: float) -> bool:
        calls[0] += 1
        return calls[0] > 4  # two session checks, two rounds

    rounds = time_candidates({"original": b"ab", "c": b"a"}, {}, threads=1, budget_ms=1, rounds=5, stop=stop,
                             timers=timers)
    assert rounds == {"original": [2.0, 2.0], "c": [1.0, 1.0]}


def test_models_whose_session_does_not_fit_are_left_out() -> None:
    """Loading a model's session is not free (a big model takes a second or more): once the time left would not
    cover one more, the models still without a session are left out of the rounds instead of overrunning."""
    clock = _Clock()

    def slow_timer(m: bytes, feeds: object, **kw: object) -> Callable[[float], float]:
        clock.t += 0.002  # loading takes time
        return lambda ms: float(len(m))

    timers = Timers(session=slow_timer, clock=clock)
    asked: list[float] = []

    def stop(need_s: float) -> bool:
        asked.append(need_s)
        return len(asked) == 3  # before the third session: no time for it

    models = {"original": b"abc", "c1": b"ab", "c2": b"a", "c3": b"aa"}
    rounds = time_candidates(models, {}, threads=1, budget_ms=1, rounds=2, stop=stop, timers=timers)
    assert rounds == {"original": [3.0, 3.0], "c1": [2.0, 2.0]}
    assert asked[0] == 0.0 and asked[1] == pytest.approx(0.004)  # twice what the first session took to load
    # before any session: nothing is timed (the original cannot be left out)
    assert time_candidates(models, {}, threads=1, budget_ms=1, rounds=2, stop=lambda s: True, timers=timers) == {
        n: [] for n in models}


def test_stop_request_before_optimize_writes_nothing(model_path: Path, tmp_path: Path,
                                                     fake_timing: Callable[..., None]) -> None:
    out = tmp_path / "out.onnx"
    interrupt.request_stop()
    res = optimize(model_path, output=out, **FAST)  # type: ignore[arg-type]
    d = res.to_dict()
    assert res.interrupted and d["stopped_by"] == "interrupt" and d["interrupted"]
    assert res.written is None and not out.exists() and "nothing written" in res.decision
    assert res.verified  # what there is (the input) is still checked, never an unverified model


def test_stop_during_timing_writes_nothing_unconfirmed(model_path: Path, tmp_path: Path,
                                                       fake_timing: Callable[..., None]) -> None:
    """The search's result is verified, then Ctrl-C arrives while the sessions are made: no round is timed, so no
    candidate is confirmed faster, and nothing is written."""

    def latency(model: bytes | str) -> float:
        interrupt.request_stop()
        return 1.0 if isinstance(model, str) else 0.5

    fake_timing(latency)
    out = tmp_path / "out.onnx"
    res = optimize(model_path, output=out, **FAST)  # type: ignore[arg-type]
    assert res.search.sequence and res.verified and res.interrupted
    assert res.kept_original and not out.exists() and res.to_dict()["stopped_by"] == "interrupt"


def test_stop_after_a_confirmed_gain_writes_it(model_path: Path, tmp_path: Path) -> None:
    """Ctrl-C after the candidate was confirmed faster in its session groups: the confirmed candidate is written."""
    from graphsub.optimize import decide

    calls = [0]
    blocks = decide.GROUPS * decide.ROUNDS_PER_GROUP * 3  # the whole confirmation: three blocks a round

    def confirm_timer(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        v = 1.0 if isinstance(model, str) else 0.5

        def once(budget_ms: float) -> float:
            calls[0] += 1
            if calls[0] == blocks:  # the last block of the last session group
                interrupt.request_stop()
            return v

        return once

    timers = dataclasses.replace(fake_timers(lambda m: 1.0 if isinstance(m, str) else 0.5), confirm=confirm_timer)
    out = tmp_path / "out.onnx"
    res = optimize(model_path, output=out, timers=timers, **FAST)  # type: ignore[arg-type]
    assert res.interrupted and res.chosen == "search" and res.written == str(out) and out.is_file()
    v = res.chosen_candidate.confirmation
    assert v.faster and v.groups == decide.GROUPS and v.rounds == decide.GROUPS * decide.ROUNDS_PER_GROUP


def peer_sleeps(src: Path, dst: Path, meta: PeerInput) -> None:
    time.sleep(60)


def test_a_stop_request_stops_a_running_peer(tmp_path: Path) -> None:
    src = relu_chain(tmp_path / "m.onnx", 3)
    t0 = time.perf_counter()
    res = run_peer("sleeps", src, tmp_path / "o.onnx", PeerInput(), timeout_s=60, registry={"sleeps": peer_sleeps},
                   stop=lambda: time.perf_counter() - t0 > 0.5)
    assert res.status == "failed" and "stopped" in res.error and time.perf_counter() - t0 < 0.5 + overshoot_bound_s()
    assert not (tmp_path / "o.onnx").exists()


def _identity_then_relu(relus: int) -> bytes:
    nodes = [helper.make_node("Identity", ["x"], ["i"])]
    nodes += [helper.make_node("Relu", ["i" if k == 0 else f"r{k - 1}"], ["y" if k == relus - 1 else f"r{k}"])
              for k in range(relus)]
    g = helper.make_graph(nodes, "idrelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_candidates_onnx_runtime_runs_as_an_earlier_one_are_not_timed() -> None:
    """With ``twins``, a candidate whose graph ONNX Runtime runs exactly as an earlier model's (here: the original
    with its Identity, which ORT removes, written without it) gets no session and no rounds, and is named as that
    model's twin; a candidate ORT runs differently (one Relu more) is timed."""
    import numpy as np

    orig = _identity_then_relu(2)
    m = onnx.load_from_string(orig)
    del m.graph.node[0]
    m.graph.node[0].input[0] = "x"
    twins: dict[str, str] = {}
    models = {"original": orig, "same": m.SerializeToString(), "other": _identity_then_relu(3)}
    rounds = time_candidates(models, {"x": np.ones((1, 64), np.float32)}, threads=1, budget_ms=1, rounds=2,
                             twins=twins)
    assert twins == {"same": "original"} and set(rounds) == {"original", "other"}
    assert all(len(r) == 2 for r in rounds.values())


def test_optimize_keeps_the_original_when_every_candidate_runs_as_it(tmp_path: Path) -> None:
    """graphsub's search removes the Identity, which ONNX Runtime removes too: the candidate is a tie by construction,
    not timed (a note says why), and the original is kept whatever a noisy machine would have measured."""
    src = tmp_path / "m.onnx"
    src.write_bytes(_identity_then_relu(1))
    res = optimize(src, **{**FAST, "spelling": False})  # type: ignore[arg-type]
    twins = [c for c in res.candidates if c.runs_as]
    assert twins and all(c.runs_as == "original" and c.speedup is None for c in twins)
    assert res.kept_original and "runs as the original" in res.decision
    assert any("onnxruntime runs it exactly as original" in n for n in res.portfolio_notes)


def test_a_session_that_cannot_save_its_graph_is_timed_without_a_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """When onnxruntime refuses to save the optimized graph, the candidate is still timed (no fingerprint: never
    called a twin) instead of failing."""
    import numpy as np

    from graphsub.errors import ExecutionError
    from graphsub.frontends import ort as ort_frontend
    from graphsub.optimize.timing import session_timer

    real = ort_frontend.make_session

    def refuse_saving(model: object, **kw: object) -> object:
        if kw.get("save_optimized") is not None:
            raise ExecutionError("onnxruntime rejected the model: cannot save")
        return real(model, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ort_frontend, "make_session", refuse_saving)
    timer = session_timer(_identity_then_relu(1), {"x": np.ones((1, 64), np.float32)}, threads=1, fingerprint=True)
    assert timer.signature == "" and timer(1.0) > 0.0


def test_the_leanest_candidate_the_screening_drops_still_runs_side_by_side() -> None:
    """A candidate whose onnxruntime graph has clearly fewer kernels than the original's gets a finalist's place
    even when one noisy screening round ranked it low (the LEAN_PICKS leanest ones, and only below LEAN_SHARE)."""
    from types import SimpleNamespace as NS

    from graphsub.optimize.race import LEAN_PICKS, LEAN_SHARE, _lean

    assert LEAN_PICKS == 2
    out = [NS(name="a"), NS(name="b"), NS(name="c"), NS(name="d")]
    sessions = {"original": NS(kernels=100), "a": NS(kernels=95), "b": NS(kernels=60), "c": NS(kernels=80),
                "d": NS(kernels=85)}
    assert [c.name for c in _lean(out, sessions)] == ["b", "c"]
    sessions["c"].kernels = sessions["d"].kernels = int(LEAN_SHARE * 100) + 1
    assert [c.name for c in _lean(out, sessions)] == ["b"]
    sessions["b"].kernels = int(LEAN_SHARE * 100) + 1
    assert _lean(out, sessions) == []
    sessions = {"original": NS(kernels=0), "a": NS(kernels=5), "b": NS(kernels=5), "c": NS(kernels=5),
                "d": NS(kernels=5)}
    assert _lean(out, sessions) == []  # no fingerprint of the original: nothing to compare with
    assert _lean(out, {"original": NS(kernels=100)}) == []  # sessions already dropped: no count, no place


def test_a_session_timer_counts_the_kernels_onnxruntime_runs() -> None:
    import numpy as np

    from graphsub.optimize.timing import session_timer
    from helpers import convnext_block

    model = convnext_block()
    feeds = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
             for i in model.graph.input}
    timer = session_timer(model.SerializeToString(), feeds, threads=1, fingerprint=True)
    assert timer.signature and 0 < timer.kernels <= len(model.graph.node)
    assert session_timer(model.SerializeToString(), feeds, threads=1).kernels == 0  # not asked: unknown


@pytest.mark.parametrize("reserve", [True, False])
def test_the_side_by_side_rounds_leave_the_leader_its_confirmation(monkeypatch: pytest.MonkeyPatch,
                                                                   reserve: bool) -> None:
    """A slow model (a run of 100 ms) and a tight deadline: the side-by-side rounds stop early enough for the
    leader's confirmation, so the 1.25x faster candidate is confirmed in enough session groups. Without that reserve
    (the control), the side-by-side rounds take the time and the confirmation gets fewer than MIN_GROUPS groups, too
    few to decide anything. A fake clock, moved by the fake runs, makes it exact."""
    import graphsub.optimize.budget as budget
    from graphsub.deadline import Deadline
    from graphsub.optimize import decide
    from graphsub.optimize import portfolio as pf
    from graphsub.optimize.pipeline import _Settings
    from graphsub.optimize.race import time_portfolio

    clock = _Clock()
    if not reserve:  # the budget's rule, not a timer: no parameter of its own
        monkeypatch.setattr("graphsub.optimize.race.confirm_reserve_s", lambda *a: 0.0)
    assert budget.confirm_reserve_s(b"o", b"c", 0.1, decide.MIN_GROUPS) > 1.8  # 3 groups x 2 rounds x 3 runs

    def timer(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        ms = 100.0 if model == b"original" else 80.0

        def run(budget_ms: float) -> float:
            clock.t += 0.1
            return ms

        return run

    timers = Timers(session=timer, confirm=timer, clock=clock)
    port = pf.Portfolio()
    cands = [port.add(pf.Candidate(f"c{i}", bytes([i]) * 8, verified=True)) for i in range(3)]
    st = _Settings(seed=0, seeds=(0,), threads=1, rtol=1e-4, atol=1e-5, min_speedup=1.03, keep_slower=False,
                   budget_ms=100.0, peers=(), eqsat_s=0.0, on_top_s=0.0, spelling=False)
    time_portfolio(port, cands, b"original", {}, st, Deadline.after(3.3, start=0.0, clock=clock), timers)
    confirmed = [c for c in cands if c.confirmation is not None]
    assert len(confirmed) == 1  # a slow model: one leader
    v = confirmed[0].confirmation
    if reserve:
        assert v.groups >= decide.MIN_GROUPS and v.faster and v.speedup == pytest.approx(1.25)
        assert len(port.original_rounds) == 1  # one side-by-side round: the rest was kept for the confirmation
    else:
        assert v.groups < decide.MIN_GROUPS and not v.faster
        assert pf.choose(port) is None


def _two_leaders(left_s: float) -> tuple[Any, list[Any]]:
    """Two verified candidates timed against a 100 ms original by fake timers on a fake clock (each run moves it
    0.1 s) within ``left_s`` seconds: side by side they read 70 and 80 ms, in the fresh session groups of their
    confirmations 100 and 80 (the first leader's lead was the rounds' luck). The portfolio and the candidates."""
    from graphsub.deadline import Deadline
    from graphsub.optimize import portfolio as pf
    from graphsub.optimize.pipeline import _Settings
    from graphsub.optimize.race import time_portfolio

    clock = _Clock()

    def timer(ms: dict[bytes, float]) -> Callable[..., Callable[[float], float]]:
        def make(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
            def run(budget_ms: float) -> float:
                clock.t += 0.1
                return ms.get(bytes(model), 100.0)  # type: ignore[arg-type]

            return run

        return make

    first, second = cands = [pf.Candidate(f"c{i}", bytes([i]) * 8, verified=True) for i in range(2)]
    timers = Timers(session=timer({first.data: 70.0, second.data: 80.0}),
                    confirm=timer({first.data: 100.0, second.data: 80.0}), clock=clock)
    port = pf.Portfolio()
    for c in cands:
        port.add(c)
    st = _Settings(seed=0, seeds=(0,), threads=1, rtol=1e-4, atol=1e-5, min_speedup=1.03, keep_slower=False,
                   budget_ms=100.0, peers=(), eqsat_s=0.0, on_top_s=0.0, spelling=False)
    time_portfolio(port, cands, b"original", {}, st, Deadline.after(left_s, start=0.0, clock=clock), timers)
    assert clock.t <= left_s
    return port, cands


def test_a_slow_models_second_leader_is_confirmed_when_the_first_is_not() -> None:
    """A slow model (a run of 100 ms) whose side-by-side rounds put a candidate first that its confirmation finds no
    faster (noisy rounds of a large model): the second leader is confirmed too, found 1.25x faster and kept, as on
    a fast model."""
    from graphsub.optimize import portfolio as pf
    from graphsub.optimize.race import SLOW_MS

    port, (first, second) = _two_leaders(1e4)
    assert statistics.median(port.original_rounds) > SLOW_MS
    assert first.confirmation is not None and not first.confirmation.faster
    assert second.confirmation is not None and second.confirmation.faster
    assert pf.choose(port) is second


def test_the_second_leader_keeps_the_time_to_decide() -> None:
    """A tight deadline (8 s) and the same two leaders: the first's extra session groups leave the second its
    MIN_GROUPS, so the second is confirmed and kept, after the five side-by-side rounds. Before, the first took five
    groups, the second got two and the original was kept (BERT's default, ``lean_within``, 2026-11-30)."""
    from graphsub.optimize import decide
    from graphsub.optimize import portfolio as pf

    port, (first, second) = _two_leaders(8.0)
    assert len(port.original_rounds) == 5  # the rounds that pick the leaders are not cut for the second's time
    assert first.confirmation is not None and not first.confirmation.faster
    assert first.confirmation.groups >= decide.MIN_GROUPS
    assert second.confirmation is not None and second.confirmation.groups >= decide.MIN_GROUPS
    assert second.confirmation.faster and pf.choose(port) is second


def _slow_sessions(clock: _Clock, session_s: float) -> Timers:
    """Fake timers: each session takes ``session_s`` to make (a large model's), each run 20 ms (the original) or
    16 ms; a block of the rounds moves the clock by its timing budget."""
    def make(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        clock.t += session_s

        def run(budget_ms: float) -> float:
            clock.t += budget_ms / 1000.0
            return 20.0 if model == b"original" else 16.0

        return run

    return Timers(session=make, confirm=make, clock=clock)


@pytest.mark.parametrize("left_s", [60.0, 8.0])
def test_a_long_session_is_not_taken_for_a_round(monkeypatch: pytest.MonkeyPatch, left_s: float) -> None:
    """Before a candidate's session, the side-by-side timing keeps the leader's confirmation at the rate its sessions
    were measured and at blocks of the timing budget: twice the last session (3 s here) is what one more session
    needs, not a round's length. Taken as one (the 100 M decoder, 2026-11-30), the reserve came to 135 s of the 93 s
    left and no candidate was loaded. With 60 s left the 1.25x faster candidate is timed and confirmed; with 8 s,
    too few to load it and confirm it, the note says so (not that no time was left at all)."""
    from graphsub.deadline import Deadline
    from graphsub.optimize import decide
    from graphsub.optimize import portfolio as pf
    from graphsub.optimize.pipeline import _Settings
    from graphsub.optimize.race import time_portfolio

    clock = _Clock()
    monkeypatch.setattr("graphsub.optimize.race.session_s_per_mb", lambda: 0.003)
    port = pf.Portfolio()
    cand = port.add(pf.Candidate("c", b"candidate", verified=True))
    st = _Settings(seed=0, seeds=(0,), threads=1, rtol=1e-4, atol=1e-5, min_speedup=1.03, keep_slower=False,
                   budget_ms=100.0, peers=(), eqsat_s=0.0, on_top_s=0.0, spelling=False)
    time_portfolio(port, [cand], b"original", {}, st, Deadline.after(left_s, start=0.0, clock=clock),
                   _slow_sessions(clock, 3.0))
    if left_s > 10:
        assert len(port.original_rounds) >= 5 and cand.confirmation is not None
        assert cand.confirmation.groups >= decide.MIN_GROUPS and cand.confirmation.faster
        assert pf.choose(port) is cand
    else:
        assert cand.confirmation is None and pf.choose(port) is None
        assert any("too few to load a candidate and confirm it" in n for n in port.notes), port.notes


def test_the_sessions_this_process_made_set_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every onnxruntime session of a model of at least SESSION_RATE_MIN_MB is measured; the rate is their median, in
    seconds per MB, and the confirmation's reserve uses it where given (the constant otherwise)."""
    from graphsub.frontends import ort as ort_frontend
    from graphsub.optimize import budget

    monkeypatch.setattr(ort_frontend, "_session_rates", ort_frontend.deque(maxlen=ort_frontend.SESSION_RATE_KEPT))
    assert ort_frontend.session_s_per_mb() is None
    ort_frontend.make_session(_identity_then_relu(1))  # far below the size that is measured
    assert ort_frontend.session_s_per_mb() is None
    monkeypatch.setattr(ort_frontend, "SESSION_RATE_MIN_MB", 0.0)
    ort_frontend.make_session(_identity_then_relu(1))
    rate = ort_frontend.session_s_per_mb()
    assert rate is not None and rate > 0
    mb = b"x" * 50_000_000
    assert budget.confirm_reserve_s(mb, mb, 0.1, 3, per_mb=0.002) < budget.confirm_reserve_s(mb, mb, 0.1, 3)
    assert budget.timing_reserve_s(mb, 0.1, 0.002) < budget.timing_reserve_s(mb, 0.1)


def test_a_large_model_keeps_its_tail_and_the_main_search_gives_way_first() -> None:
    """The tail keeps what verifying and timing the candidates takes on the model (at most TAIL_MAX_SHARE of the
    budget); when the parts do not fit in the rest, the searches on top of the peers go first, then the main search
    shrinks to SEARCH_MIN_S, and only then are equality saturation and the peers left out."""
    from graphsub.optimize.budget import (
        DROP_EQSAT,
        DROP_ON_TOP,
        DROP_PEERS,
        SEARCH_MIN_S,
        SEARCH_SHARE,
        TAIL_MAX_SHARE,
        Part,
        plan_parts,
    )

    parts = [Part("eqsat", 5.0, DROP_EQSAT), Part("peers", 8.0, DROP_PEERS),
             Part("peer+search", 8.0, DROP_ON_TOP, "searches on top of the peers", 2.0), Part("backward-rules", 6.0)]
    p = plan_parts(120.0, 120.0, search_cap=None, parts=parts, tail_s=60.0)
    assert p.tail_s == 60.0 and p.dropped == () and p.search_s == pytest.approx(120 * SEARCH_SHARE)
    p = plan_parts(60.0, 60.0, search_cap=None, parts=parts, tail_s=500.0)  # capped: 24 s of front for 27 s of parts
    assert p.tail_s == pytest.approx(TAIL_MAX_SHARE * 60.0) and p.dropped == ("searches on top of the peers",)
    assert SEARCH_MIN_S < p.search_s < 60 * SEARCH_SHARE and p.search_s + 19.0 == pytest.approx(24.0)
    assert p.eqsat_s == 5.0 and p.peers and "backward-rules" in p.shares
    q = plan_parts(60.0, 56.0, search_cap=None, parts=parts, tail_s=36.0)  # 20 s: the search at its least, then eqsat
    assert q.dropped == ("searches on top of the peers", "eqsat") and q.peers and q.search_s == pytest.approx(6.0)


def test_a_measured_run_longer_than_the_roofline_widens_the_tail(tmp_path: Path) -> None:
    """The tail is planned from one measured run where it is longer than the roofline's estimate (a CPU training step
    of ResNet-50 ran 1.1 s where the roofline said 0.1 s, and its 2.6x candidate went unconfirmed); a model that does
    not run gives no measurement, never an error."""
    from graphsub.frontends.onnx_import import from_onnx
    from graphsub.optimize.budget import measured_run_s, tail_estimate_s

    path = relu_chain(tmp_path / "chain.onnx", 8)
    graph = from_onnx(onnx.load(str(path)))
    feeds = {"x": np.ones(graph.input_types[0].shape, np.float32)}
    run_s = measured_run_s(str(path), feeds, threads=1)
    assert run_s is not None and 0.0 < run_s < 1.0
    assert measured_run_s(b"not a model", feeds, threads=1) is None
    base = tail_estimate_s(graph, budget_ms=200.0)
    assert tail_estimate_s(graph, budget_ms=200.0, run_s=0.0) == base  # the roofline's estimate stands
    assert tail_estimate_s(graph, budget_ms=200.0, run_s=1.0) > base + 20 * 1.0  # rounds and runs of 1 s each


@pytest.mark.parametrize("reserve_s", [0.0, 8.0])
def test_verifying_the_candidates_keeps_the_time_to_time_one(reserve_s: float) -> None:
    """Once a candidate is verified, a further one is checked only while its check and the timing reserve fit before
    the deadline: checking the last candidates cannot leave none timed. A fake clock moves 3 s per check (10 s left,
    1 s estimated per check): with an 8 s reserve only the first is checked, without one all three."""
    from graphsub.deadline import Deadline
    from graphsub.optimize import portfolio as pf

    clock = _Clock()

    def model(op: str, doc: str = "") -> bytes:
        node = helper.make_node(op, ["x"], ["y"], doc_string=doc)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
        return helper.make_model(helper.make_graph([node], "g", [x], [y]),
                                 opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    def tick(c: pf.Candidate) -> str | None:
        clock.t += 3.0
        return None

    source = model("Relu")
    port = pf.Portfolio()
    cands = [port.add(pf.Candidate(f"c{i}", model("Relu", f"c{i}"))) for i in range(3)]
    feeds = [(0, {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)})]
    pf.verify(port, source, feeds, rtol=1e-5, atol=1e-6, deadline=Deadline.after(10.0, start=0.0, clock=clock),
              estimate_s=1.0, reserve_s=reserve_s, also=tick)
    if reserve_s:
        assert [c.verified for c in cands] == [True, None, None]
        assert cands[1].error == "not verified: no time left in the budget"
    else:
        assert [c.verified for c in cands] == [True, True, True]
