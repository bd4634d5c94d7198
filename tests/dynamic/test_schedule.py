"""``schedule.relevel`` (as late as possible per op key where that merges steps) gives exactly the groups of the plain
algorithm it replaced: every node's level recomputed, every node regrouped (kept here as the reference)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from graphsub.dynamic.dag import Group
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyTensor, lazy
from graphsub.dynamic.schedule import relevel
from graphsub.dynamic.workloads.models import BinaryTreeLSTM, SeqLSTM, TreeGRU, batch_loss, seq_batch_loss
from graphsub.dynamic.workloads.sst import Vocab, encode_tree, synthetic_treebank


def _reference(groups: Sequence[Group]) -> list[Group]:
    """The first implementation: heights in a sweep over the nodes sorted by id, then every node releveled."""
    nodes = sorted((m for g in groups for m in g.members), key=lambda n: n.gid)
    inplan = {id(n) for n in nodes}
    height: dict[int, int] = {}
    for n in reversed(nodes):
        h = height.get(id(n), 0) + 1
        for y in n.inputs:
            if type(y) is LazyTensor:
                c = y if y.part < 0 else y.inputs[0]
                if id(c) in inplan and height.get(id(c), 0) < h:
                    height[id(c)] = h
    top = max(n.level for n in nodes)
    asap: dict[int, set[int]] = {}
    alap: dict[int, set[int]] = {}
    for n in nodes:
        asap.setdefault(n.kid, set()).add(n.level)
        alap.setdefault(n.kid, set()).add(top - height.get(id(n), 0))
    late = {k for k in asap if len(alap[k]) < len(asap[k])}
    if not late:
        return list(groups)
    level: dict[int, int] = {}
    out: dict[int, Group] = {}
    for n in nodes:
        lv = top - height.get(id(n), 0) if n.kid in late else 1
        for y in n.inputs:
            if type(y) is LazyTensor:
                c = y if y.part < 0 else y.inputs[0]
                got = level.get(id(c))
                if got is not None and got >= lv:
                    lv = got + 1
        level[id(n)] = lv
        n.level = lv
        gk = lv * 4294967296 + n.kid
        g = out.get(gk)
        if g is None:
            g = out[gk] = Group(lv, n.kid)
        n.grp = g
        n.row = len(g.members)
        g.members.append(n)
    return [out[k] for k in sorted(out)]


def _model(model_cls: type) -> Any:
    torch.manual_seed(0)
    return model_cls(60, emb_dim=8, hidden=5)


def _record(model: Any, batch: list) -> tuple[list[Group], LazyTensor]:
    fn: Callable[[Any, list], Any] = seq_batch_loss if type(model) is SeqLSTM else batch_loss
    eng = Reuse(depth=1, collect=0, batching=True, capture_modules=True)
    torch.manual_seed(1)
    with lazy(eng) as tr:
        out = fn(model, batch)
    return tr.take_pending(), out


def _shape(groups: list[Group]) -> list[tuple[int, int, list[int]]]:
    """The groups as (level, key id, members' ranks in recording order)."""
    rank = {gid: r for r, gid in enumerate(sorted(m.gid for g in groups for m in g.members))}
    return [(g.level, g.kid, [rank[m.gid] for m in g.members]) for g in groups]


@pytest.mark.parametrize("model_cls", [BinaryTreeLSTM, SeqLSTM, TreeGRU], ids=["treelstm", "seqlstm", "treegru"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relevel_gives_the_reference_groups(model_cls: type, seed: int) -> None:
    trees = synthetic_treebank(12, seed=seed, vocab_size=50)
    vocab = Vocab.build(trees)
    batch = [encode_tree(t, vocab) for t in trees]
    model = _model(model_cls)
    ref_groups, _ = _record(model, batch)
    got_groups, _ = _record(model, batch)
    assert _shape(ref_groups) == _shape(got_groups)  # two recordings of one batch: the same groups
    ref = _reference(ref_groups)
    got = relevel(got_groups)
    assert _shape(got) == _shape(ref)
    assert len(got) < len(got_groups)  # the readouts of trees of several heights merge
    for g in got:  # every member knows its group and row; every node comes after its inputs
        for r, m in enumerate(g.members):
            assert m.grp is g and m.row == r and m.level == g.level
            for y in m.inputs:
                if type(y) is LazyTensor:
                    c = y if y.part < 0 else y.inputs[0]
                    assert type(c) is not LazyTensor or c.level < m.level


def test_nothing_to_merge_leaves_the_groups_as_they_are() -> None:
    bank = synthetic_treebank(60, seed=3, vocab_size=50)
    depth = Counter(t.depth for t in bank).most_common(1)[0][0]
    trees = [t for t in bank if t.depth == depth][:3]  # one height: every readout at one level already
    assert len(trees) == 3
    vocab = Vocab.build(trees)
    groups, _ = _record(_model(BinaryTreeLSTM), [encode_tree(t, vocab) for t in trees])
    before = _shape(groups)
    got = relevel(groups)
    assert [id(g) for g in got] == [id(g) for g in groups] and _shape(got) == before


@pytest.mark.parametrize("model_cls", [BinaryTreeLSTM, TreeGRU], ids=["treelstm", "treegru"])
def test_a_plan_cache_hit_reuses_the_regrouping(model_cls: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan cache is keyed by the recorded groups: a batch of the same trees with other words hits, is not
    regrouped again, runs in the regrouped steps of the miss, and computes eager's loss and gradients."""
    import graphsub.dynamic.engine as engine_mod
    from graphsub.dynamic.lazy import build

    trees = synthetic_treebank(12, seed=4, vocab_size=50)
    words = sorted({w for t in trees for w in t.words()})
    vocabs = [Vocab(words), Vocab(reversed(words))]  # the same structure, other word ids
    model = _model(model_cls)
    calls = []

    def counted(groups: list[Group]) -> list[Group]:
        calls.append(len(groups))
        return relevel(groups)

    monkeypatch.setattr(engine_mod, "relevel_groups", counted)
    eng = Reuse(depth=1, collect=0, batching=True, capture_modules=True, plan_cache=4)
    shapes, steps = [], []
    for vocab in vocabs:
        batch = [encode_tree(t, vocab) for t in trees]
        torch.manual_seed(1)
        model.zero_grad()
        ref = batch_loss(model, batch)
        ref.backward()
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        torch.manual_seed(1)
        with lazy(eng) as tr:
            out = batch_loss(model, batch)
            shapes.append(len(tr.pending))
        got = build(out)
        steps.append(eng.last.calls)
        got.backward()
        torch.testing.assert_close(got, ref)
        for p, w in zip(model.parameters(), want, strict=True):
            torch.testing.assert_close(p.grad, w)
    rep = eng.report()["plan_cache"]
    assert (rep["hits"], rep["misses"]) == (1, 1)
    assert len(calls) == 1 and calls[0] == shapes[0] == shapes[1]  # regrouped once, on the miss
    assert steps[0] == steps[1] < shapes[0]  # the hit ran the regrouped steps: fewer than the recorded groups
