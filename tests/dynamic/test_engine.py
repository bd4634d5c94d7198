"""Lazy tracing, signatures, code generation and the reuse / batching engine (issue 10)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from graphsub.dynamic.codegen import compile_pattern, generate
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyError, LazyTensor, build, lazy
from graphsub.dynamic.signature import PatternTable, consumer_map, extract, tile
from graphsub.dynamic.workloads.models import BinaryTreeLSTM, batch_loss
from graphsub.dynamic.workloads.sst import Vocab, encode_tree, synthetic_treebank


def test_trace_records_instead_of_computing_and_build_matches_eager() -> None:
    torch.manual_seed(0)
    lin = nn.Linear(4, 10)
    x = torch.randn(1, 4)

    def f(x: torch.Tensor) -> torch.Tensor:
        i, o, g, u, z = lin(x).chunk(5, dim=1)  # multi-output op
        a, b = torch.split(torch.sigmoid(i) * torch.tanh(u) + 0.5, 1, dim=1)
        return torch.cat([a * 2, b - 1, 1 - o, g / 3, z.relu()], dim=1).sum(dim=1)

    with lazy() as tr:
        y = f(x)
        data = torch.zeros(2)  # data-only call: runs eagerly
    assert isinstance(y, LazyTensor) and isinstance(data, torch.Tensor)
    assert tuple(y.shape) == (1,) and len(tr.nodes) > 10
    assert all(n.value is None for n in tr.nodes)  # nothing computed yet
    assert torch.equal(build(y), f(x))


def test_dropout_masks_match_eager_rng_and_backward_matches() -> None:
    lin = nn.Linear(3, 5)
    x = torch.randn(4, 3)
    torch.manual_seed(7)
    ref = F.dropout(torch.tanh(lin(x)), 0.5, True).sum()
    ref.backward()
    g_ref = lin.weight.grad.clone()
    lin.weight.grad = None
    torch.manual_seed(7)
    with lazy():
        out = F.dropout(torch.tanh(lin(x)), 0.5, True).sum()
    out.backward()
    assert float(out) == pytest.approx(float(ref), abs=1e-6)
    assert torch.allclose(lin.weight.grad, g_ref)


def test_lazy_values_outside_trace_and_errors() -> None:
    with lazy():
        y = torch.ones(1, 2, requires_grad=True) * 3
    z = y + 1  # still lazy after the context closed
    assert isinstance(z, LazyTensor) and torch.equal(build(z), torch.full((1, 2), 4.0))
    with lazy(), pytest.raises(LazyError, match="cannot infer"):
        torch.ones(2, 3, requires_grad=True) @ torch.ones(4, 5)


def _fig51(shared: bool) -> LazyTensor:
    """The thesis' Fig. 5.1: add(mul(C, tanh(x)), mul(tanh(x) [shared or a copy], C))."""
    x = torch.ones(1, 2, requires_grad=True)
    c1, c2 = torch.full((1, 2), 2.0), torch.full((1, 2), 3.0)
    with lazy():
        t = torch.tanh(x)
        t2 = t if shared else torch.tanh(x)
        return c1 * t + t2 * c2


def test_shared_marker_separates_fig_5_1a_from_5_1b() -> None:
    a, b = _fig51(True), _fig51(False)
    sa = extract(a, 8, consumer_map(a))
    sb = extract(b, 8, consumer_map(b))
    assert sa.shared == 1 and sb.shared == 0
    assert sa.structure != sb.structure
    assert len(sa.nodes) == 4 and len(sb.nodes) == 5  # the shared tanh is one node (named once, §5.4)


def test_depth_limit_and_shape_vs_structure_equivalence() -> None:
    def chain(n: int) -> LazyTensor:
        with lazy():
            y = torch.ones(1, n, requires_grad=True)
            for _ in range(5):
                y = torch.tanh(y)
            return y

    a, b = chain(3), chain(4)
    s2 = extract(a, 2, consumer_map(a))
    assert len(s2.nodes) == 2 and isinstance(s2.inputs[0], LazyTensor)  # H'(n, 2): stops at depth 2
    with_shapes = [extract(x, 3, consumer_map(x), shapes=True).structure for x in (a, b)]
    without = [extract(x, 3, consumer_map(x), shapes=False).structure for x in (a, b)]
    assert with_shapes[0] != with_shapes[1] and without[0] == without[1]


def test_internal_nodes_with_outside_consumers_stay_outside() -> None:
    with lazy():
        x = torch.ones(1, 2, requires_grad=True)
        t = torch.tanh(x)
        u = torch.sigmoid(t)  # t is consumed here ...
        root = u * 2
        other = t + 1  # ... and outside the subgraph at root
        out = root + other
    sub = extract(root, 8, consumer_map(out))
    assert t not in sub.nodes and t in sub.inputs  # §5.5: t becomes a leaf of the pattern


def test_hash_collisions_are_confirmed_structurally() -> None:
    a, b = _fig51(True), _fig51(False)
    table = PatternTable(hash_fn=lambda s: 0)  # every signature collides
    ea = table.add(extract(a, 8, consumer_map(a)))
    eb = table.add(extract(b, 8, consumer_map(b)))
    assert ea is not eb and len(table) == 2 and table.collisions >= 1
    assert table.add(extract(a, 8, consumer_map(a))) is ea and ea.count == 2


@pytest.mark.parametrize("backend", ["python", "fx"])
def test_generated_code_matches_and_differentiates(backend: str) -> None:
    a = _fig51(True)
    sub = extract(a, 8, consumer_map(a))
    src, fn = generate(sub, "p")
    assert src.count(" = ") == 4 and src.count("f0(a") == 1  # one variable per node, the shared tanh once
    f = compile_pattern(fn, backend)
    args = [x.value if isinstance(x, LazyTensor) else x for x in sub.inputs]
    assert torch.allclose(f(*args), build(a))
    x = next(i for i in sub.inputs if isinstance(i, torch.Tensor) and i.requires_grad)
    f(*args).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def _treelstm_run(engine: Reuse | None, batches: list, eager: bool = False) -> tuple[list[float], torch.Tensor]:
    torch.manual_seed(0)
    model = BinaryTreeLSTM(60, emb_dim=12, hidden=8)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    torch.manual_seed(1)
    losses = []
    for b in batches:
        opt.zero_grad()
        if eager:
            loss = batch_loss(model, b)
        else:
            with lazy(engine, examples=len(b)):
                loss = batch_loss(model, b)
        loss.backward()
        opt.step()
        losses.append(float(build(loss)))
    return losses, model.composer.linear.weight.detach().clone()


@pytest.fixture(scope="module")
def tree_batches() -> list:
    trees = synthetic_treebank(36, seed=3, vocab_size=50)
    vocab = Vocab.build(trees)
    enc = [encode_tree(t, vocab) for t in trees]
    return [enc[i:i + 6] for i in range(0, 36, 6)]


@pytest.mark.parametrize("engine", [None, Reuse(depth=6, freq=0.5, collect=2),
                                    Reuse(depth=6, freq=0.5, collect=2, batching=True),
                                    Reuse(depth=1, collect=0, batching=True)],
                         ids=["traced", "reuse", "reuse+batch", "op-batch"])
def test_training_matches_eager(tree_batches: list, engine: Reuse | None) -> None:
    ref, w_ref = _treelstm_run(None, tree_batches, eager=True)
    got, w = _treelstm_run(engine, tree_batches)
    assert max(abs(a - b) for a, b in zip(ref, got, strict=True)) < 1e-5
    assert torch.allclose(w, w_ref, atol=1e-5)
    if engine is not None and engine.depth > 1:
        rep = engine.report()
        assert rep["frequent"] > 0 and rep["hash_collisions"] == 0
        assert engine.last.pattern_units > 0  # patterns were replaced in the last batch
    if engine is not None and engine.batching:
        assert engine.last.calls < engine.last.units  # batching merged calls


def test_row_mixing_ops_are_not_batched() -> None:
    w = nn.Parameter(torch.ones(3, 3))
    xs = [torch.randn(1, 3) for _ in range(4)]
    ref = sum((x @ w).cumsum(0).sum() for x in xs)  # cumsum over dim 0 mixes rows when batched
    eng = Reuse(depth=1, collect=0, batching=True)
    with lazy(eng):
        out = sum((x @ w).cumsum(0).sum() for x in xs)
    assert torch.allclose(build(out), ref)


def test_tile_covers_every_node_once(tree_batches: list) -> None:
    model = BinaryTreeLSTM(60, emb_dim=12, hidden=8)
    with lazy():
        loss = batch_loss(model, tree_batches[0])
    cons = consumer_map(loss)
    subs = tile(loss, 5, cons)
    covered = [n.gid for s in subs for n in s.nodes]
    assert len(covered) == len(set(covered)) == len(cons)


def test_op_batching_groups_while_recording_and_reads_any_value_later() -> None:
    lin = nn.Linear(4, 6)
    xs = [torch.randn(1, 4) for _ in range(5)]
    eng = Reuse(depth=1, collect=0, batching=True)
    with lazy(eng) as tr:
        parts = [lin(x).chunk(2, dim=1) for x in xs]  # multi-output: the parts live in their source's batch
        hs = [torch.tanh(a) * torch.sigmoid(b) for a, b in parts]
        out = torch.stack(hs).sum()
    # five linears recorded into one group (same level, same key), nothing run yet
    lin_groups = [g for g in tr.pending.values() if "linear" in g.members[0].name]
    assert len(lin_groups) == 1 and [m.row for m in lin_groups[0].members] == [0, 1, 2, 3, 4]
    ref = torch.stack([torch.tanh(a) * torch.sigmoid(b) for a, b in (lin(x).chunk(2, dim=1) for x in xs)]).sum()
    assert torch.allclose(build(out), ref)
    assert eng.last.calls < eng.last.units and not tr.pending  # batched, and the groups were consumed
    # values inside a batch are read on demand, also for the outputs of a multi-output node
    assert torch.allclose(build(hs[3]), torch.tanh(lin(xs[3])[:, :3]) * torch.sigmoid(lin(xs[3])[:, 3:]))
    assert torch.allclose(build(parts[2][1]), lin(xs[2])[:, 3:])
    # nodes recorded after the run form new groups, run on the next build
    more = hs[0] * 2
    assert torch.allclose(build(more), 2 * build(hs[0]))


def test_lazy_context_leaves_no_young_objects_for_the_collector() -> None:
    import gc

    model = BinaryTreeLSTM(60, emb_dim=12, hidden=8)
    trees = synthetic_treebank(8, seed=5, vocab_size=50)
    vocab = Vocab.build(trees)
    batch = [encode_tree(t, vocab) for t in trees]
    gc.collect()
    with lazy(Reuse(depth=1, collect=0, batching=True)):
        loss = batch_loss(model, batch)  # thousands of nodes, made with the collector paused
    assert gc.isenabled()
    # they went straight to the oldest generation: no young collection is due at once
    assert gc.get_count()[0] < gc.get_threshold()[0]
    assert build(loss).dim() == 0
