"""The registry of candidate sources (graphsub.optimize.sources): a source registered in one place is planned in the
budget, run at its turn within its share, and its candidates are verified, timed and may be chosen like any other;
the built-in sources declare what the planner plans today."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest

from graphsub import zoo
from graphsub.deadline import Deadline
from graphsub.errors import GraphsubError
from graphsub.optimize import decide, optimize
from graphsub.optimize.budget import inference_parts, plan_parts
from graphsub.optimize.candidates import Candidate, export_bytes, rewrite_everywhere
from graphsub.optimize.sources import Context, Source, Sources, parts, register, registered, run, unregister
from graphsub.optimize.target import Target
from graphsub.rules import get_set
from helpers import fake_timers

QUIET = {"rules": [], "cost": "roofline:cpu", "peers": "none", "eqsat_s": 0, "ort_search_s": 0,
         "spelling": False, "seeds": 2,
         "cleanup": False}


def _builtin(ctx: Context, seconds: float) -> None:
    """The toy source: the ``builtin`` rules applied everywhere on the original."""
    graph, steps = rewrite_everywhere(ctx.ref, get_set("builtin"), stop=ctx.spent)
    if steps:
        ctx.add("builtin", Candidate("builtin", export_bytes(graph), graph, steps=steps))


@pytest.fixture
def toy() -> Iterator[Source]:
    """The toy source, registered for one test (planned at 1 s, left out first when the budget is short)."""
    source = register(Source("builtin", _builtin, turns=(25,), estimate_s=lambda ctx: 1.0, drop=0))
    yield source
    unregister("builtin")
    assert "builtin" not in {s.name for s in registered()}


def test_a_registered_source_is_planned_verified_timed_and_chosen(toy: Source) -> None:
    made: list[bytes] = []

    def latency(model: bytes | str) -> float:  # the toy's candidate runs in half the original's time
        return 5.0 if model in made else 10.0

    graph = zoo.get("resnet", blocks=1)
    made.append(next(c.data for c in _made(graph)))
    res = optimize(graph, time_s=30, timers=fake_timers(latency), **QUIET)  # type: ignore[arg-type]
    (cand,) = res.candidates
    assert cand.name == "builtin" and cand.verified and cand.speedup == pytest.approx(2.0)
    assert res.chosen == "builtin" and cand.confirmation is not None and cand.confirmation.faster
    # the planner leaves it out first when the budget is short, and the notes say so in the usual words
    short = optimize(graph, time_s=2.5, timers=fake_timers(latency), **QUIET)  # type: ignore[arg-type]
    assert not any(c.name == "builtin" for c in short.candidates)
    assert "builtin: skipped: the 2.5 s budget leaves no time for it" in short.portfolio_notes


def _made(graph: object) -> list[Candidate]:
    from graphsub.data import materialize

    ctx = Context(Sources(), materialize(graph, 0))  # type: ignore[arg-type]
    _builtin(ctx, math.inf)
    return ctx.portfolio.candidates


def test_names_are_unique_in_the_registry() -> None:
    with pytest.raises(GraphsubError, match="already registered"):
        register(Source("eqsat", _builtin))
    with pytest.raises(GraphsubError, match="no candidate source named 'nope'"):
        unregister("nope")


def test_a_source_leaves_the_sources_planned_after_it_their_share() -> None:
    """7 s left before the tail: ``a`` (turn 1) asks for 2 s and gets 1 s, because ``b`` and ``c`` are planned after it
    at 5 s and 1 s; ``b`` gets its 5 s; ``c`` needs at least 1.5 s and finds 1 s (skipped, with a note); ``d``
    declares nothing (cheap, not planned) and runs with what is left (the 1 s ``c`` did not use)."""
    now = [0.0]
    got: dict[str, float] = {}

    def take(name: str) -> Callable[[Context, float], None]:
        def make(ctx: Context, seconds: float) -> None:
            got[name] = seconds
            now[0] += seconds

        return make

    a = Source("a", take("a"), turns=(1,), estimate_s=lambda ctx: 2.0, min_s=0.5)
    b = Source("b", take("b"), turns=(2,), estimate_s=lambda ctx: 5.0, drop=1)
    c = Source("c", take("c"), turns=(3,), estimate_s=lambda ctx: 1.0, min_s=1.5)
    d = Source("d", take("d"), turns=(4,))
    sources = Sources(deadline=Deadline(end=7.0, start=0.0, clock=lambda: now[0]))
    port = run(Context(sources, zoo.get("resnet", blocks=1)), [a, b, c, d])
    assert got == {"a": 1.0, "b": 5.0, "d": 1.0}
    assert port.notes == ["c: skipped: no time left in the budget"] and port.skipped == ["c"]


def test_the_planner_plans_what_the_built_in_sources_declare() -> None:
    """For a model without a training target the planned sources are eqsat, the peers and the searches on top of
    them, with today's estimates and drop ranks (:func:`inference_parts`, which ``budget.plan`` plans); at the default
    budget every one is kept with today's time."""
    graph = zoo.get("resnet", blocks=1)
    ctx = Context(Sources(peers=("onnxsim", "onnxslim"), eqsat_s=5.0, on_top_s=2.0, layout=True, rows=True,
                          spelling=get_set("ort-spelling")), graph)
    assert parts(ctx) == inference_parts(eqsat_s=5.0, on_top_s=2.0, n_peers=2)
    p = plan_parts(100.0, 99.8, search_cap=None, parts=parts(ctx))
    assert (p.search_s, p.shares, p.dropped) == (12.0, {"eqsat": 5.0, "peers": 8.0, "peer+search": 4.0}, ())
    assert (p.eqsat_s, p.peers, p.on_top_s) == (5.0, True, 2.0)


def test_the_training_sources_apply_only_to_a_training_target() -> None:
    from graphsub.data import materialize
    from graphsub.optimize.config import OptimizeConfig
    from graphsub.optimize.sources.training import TrainingTarget
    from graphsub.training import build_training

    fwd = materialize(zoo.get("resnet", blocks=1), 0)
    joint, spec = build_training(fwd, loss="mse")
    cfg = OptimizeConfig()
    assert not {p.name for p in parts(Context(Sources(config=cfg), joint))} & {"backward-rules", "forward-first"}
    planned = {p.name: p for p in parts(Context(Sources(config=cfg, target=TrainingTarget(spec, fwd)), joint))}
    assert planned["forward-first"].estimate_s == 12.0 and planned["forward-first"].drop is None  # 12% of 100 s
    assert 0 < planned["backward-rules"].estimate_s <= 15.0 and planned["backward-rules"].drop is None
    no_forward = Context(Sources(config=cfg.build(cfg, rules="cpu"), target=TrainingTarget(spec, fwd, forward_s=0)),
                         joint)
    assert not parts(no_forward)  # neither the training rules nor a forward search


class _Only(Target):
    """A target that accepts only the sources whose candidates are graphs of graphsub's rules (as a module does)."""

    def accepts(self, source: Source) -> bool:
        return source.graphs


class _Refusing(Target):
    """A target whose further check refuses every candidate."""

    def check(self, candidate: Candidate) -> str | None:
        return f"{candidate.name}: refused by the target"


class _OwnClock(Target):
    """A target that times candidates its own way: the candidate's units run in half the original's time."""

    own_timing = True

    def makers(self, candidate: Candidate) -> tuple[decide.Maker, decide.Maker]:
        import random

        rng = random.Random(0)

        def unit(ms: float) -> decide.Maker:
            return lambda: lambda budget_ms: ms * (1.0 + 0.01 * rng.gauss(0.0, 1.0))

        return unit(10.0), unit(5.0)

    def where(self, threads: int) -> str:
        return "in the toy rig"


def test_a_target_decides_which_sources_run_how_candidates_are_checked_and_timed(toy: Source) -> None:
    """One pipeline, several targets: a target that takes only graph sources leaves the toy source out; one that
    refuses every candidate keeps the original, the candidate's error saying why; one with its own timing decides by
    its units (session groups with an A/A control) and names its runtime in the decision."""
    graph = zoo.get("resnet", blocks=1)
    timers = fake_timers(lambda model: 10.0)  # ONNX Runtime would read the candidate as no faster
    only = optimize(graph, time_s=30, timers=timers, target=_Only(), **QUIET)  # type: ignore[arg-type]
    assert not only.candidates and only.kept_original
    refused = optimize(graph, time_s=30, timers=timers, target=_Refusing(), **QUIET)  # type: ignore[arg-type]
    (cand,) = refused.candidates
    assert cand.verified is False and cand.error == "builtin: refused by the target" and refused.kept_original
    own = optimize(graph, time_s=30, timers=timers, target=_OwnClock(), **QUIET)  # type: ignore[arg-type]
    (cand,) = own.candidates
    assert own.chosen == "builtin" and cand.confirmation is not None and cand.confirmation.faster
    assert cand.confirmation.speedup == pytest.approx(2.0, rel=0.03) and cand.confirmation.groups == decide.GROUPS
    assert "in the toy rig" in own.decision and "ORT_ENABLE_ALL" not in own.decision


def test_a_module_target_accepts_only_the_sources_of_graphsubs_rules() -> None:
    from graphsub.equivalence import Tolerance
    from graphsub.optimize.torch_training import ModuleTarget

    target = ModuleTarget(None, [], None, (), {}, Tolerance(1e-4, 1e-5))
    assert {s.name for s in registered() if target.accepts(s)} == {"eqsat", "backward-rules", "forward-first"}
    assert {s.name for s in registered() if s.graphs} == {"eqsat", "backward-rules", "forward-first"}
