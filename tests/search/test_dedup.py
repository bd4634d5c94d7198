"""Two-level duplicate detection: the O(change) fingerprint is exact bookkeeping of the full one,
and searching with it finds exactly what searching with full structural hashes finds."""

from __future__ import annotations

import random

import pytest

import graphsub.search.base as base
from graphsub import zoo
from graphsub.cost import get_model
from graphsub.rules.apply import apply
from graphsub.rules.library import get_set
from graphsub.rules.match import find_matches
from graphsub.search import Budget, search
from graphsub.search.base import child_fingerprint, fingerprint


@pytest.mark.parametrize("model", ["nasrnn", "inception_v3", "sru", "bert"])
def test_incremental_fingerprint_equals_full(model: str) -> None:
    rules = get_set("ocggs157")
    rng = random.Random(7)
    g = zoo.get(model)
    fp = fingerprint(g)
    for _ in range(6):
        ms = [m for r in rules for m in find_matches(g, r)]
        if not ms:
            break
        child = apply(g, rng.choice(ms)).graph
        fp = child_fingerprint(g, fp, child)
        assert fp == fingerprint(child)
        g = child


def test_equal_graphs_have_equal_fingerprints_whatever_the_order() -> None:
    rules = get_set("ocggs157")
    g = zoo.get("nasrnn")
    ms = [m for r in rules for m in find_matches(g, r)]
    a, b = ms[0], next(m for m in ms if not set(m.node_ids) & set(ms[0].node_ids))
    ab = apply(apply(g, a).graph, next(m for r in rules for m in find_matches(apply(g, a).graph, r)
                                      if m.rule is b.rule and m.node_ids == b.node_ids)).graph
    ba = apply(apply(g, b).graph, next(m for r in rules for m in find_matches(apply(g, b).graph, r)
                                      if m.rule is a.rule and m.node_ids == a.node_ids)).graph
    assert ab.structural_hash() == ba.structural_hash()
    assert fingerprint(ab) == fingerprint(ba)


# taso on nasrnn takes 16 s (two full searches of 25 expansions on 230 ops): in the `slow` set; taso-bert and
# metaflow-nasrnn (1-2 s) check the same deduplication with the same algorithm and on the same model
@pytest.mark.parametrize(("algo", "model"), [pytest.param("taso", "nasrnn", marks=pytest.mark.slow), ("taso", "bert"),
                                             ("metaflow", "nasrnn")])
def test_search_same_as_with_full_hashes_only(algo: str, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g, rules, cost = zoo.get(model), get_set("ocggs157"), get_model("roofline:p100")
    budget = Budget(time_s=None, expansions=25, k=10)
    fast = search(g, rules, cost, budget, algo=algo)
    monkeypatch.setattr(base, "child_fingerprint", lambda parent, fp, child: 0)  # every child collides
    monkeypatch.setattr(base, "fingerprint", lambda graph: 0)
    full = search(g, rules, cost, budget, algo=algo)
    assert fast.best_cost == full.best_cost
    assert fast.sequence == full.sequence
    assert fast.stats.expanded == full.stats.expanded
    assert fast.stats.deduplicated > 0
