"""The order in which ``optimize`` makes its candidates' timing sessions (:func:`graphsub.optimize.race.load_order`):
what a short budget times first is what removed the most work."""

from __future__ import annotations

from types import SimpleNamespace

from graphsub.optimize.race import load_order


def _cand(name: str, ops: int | None) -> SimpleNamespace:
    return SimpleNamespace(name=name, graph=None if ops is None else SimpleNamespace(num_ops=ops))


def test_fewest_ops_first_a_peer_counted_at_the_most_and_ties_kept_in_order() -> None:
    timed = [_cand("search", 789), _cand("onnxslim", None), _cand("search-ort", 173), _cand("spelling", 814),
             _cand("layout", 173)]
    assert [c.name for c in load_order(timed)] == ["search-ort", "layout", "search", "onnxslim", "spelling"]
    assert [c.name for c in load_order([_cand("a", None), _cand("b", None)])] == ["a", "b"]
    assert load_order([]) == []
