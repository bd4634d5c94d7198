"""Module-level capture (issue 24): module and ``@cell`` calls recorded as one node, batched whole; op-level
recording as the explained fallback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from graphsub.dynamic import capture
from graphsub.dynamic.capture import cell
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyTensor, build, lazy
from graphsub.dynamic.prefetch import prefetch
from graphsub.dynamic.workloads.models import BinaryTreeLSTM, SeqLSTM, TreeGRU, batch_loss, seq_batch_loss
from graphsub.dynamic.workloads.sst import Vocab, encode_tree, synthetic_treebank


def _engine() -> Reuse:
    return Reuse(depth=1, collect=0, batching=True, capture_modules=True)


@pytest.fixture(scope="module")
def batches() -> list:
    trees = synthetic_treebank(24, seed=5, vocab_size=40)
    vocab = Vocab.build(trees)
    enc = [encode_tree(t, vocab) for t in trees]
    return [enc[i:i + 6] for i in range(0, 24, 6)]


def _train(model_cls: type, batches: list, how: str) -> tuple[list[float], list[torch.Tensor]]:
    """Adagrad steps (dropout 0.5 at the root: the masks must be eager's) eagerly, captured in process, or captured
    and recorded ahead by a worker process."""
    torch.manual_seed(0)
    model = model_cls(50, emb_dim=10, hidden=6)
    fn = seq_batch_loss if model_cls is SeqLSTM else batch_loss
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    losses: list[float] = []
    if how == "prefetch":
        for _, loss in prefetch(model, batches, lambda b: fn(model, b), workers=1, capture_modules=True,
                                plan_cache=4):
            opt.zero_grad()
            torch.manual_seed(1)
            loss.backward()
            opt.step()
            losses.append(float(build(loss).detach()))
        return losses, [p.detach().clone() for p in model.parameters()]
    eng = _engine()
    for b in batches:
        opt.zero_grad()
        torch.manual_seed(1)
        if how == "eager":
            loss = fn(model, b)
        else:
            with lazy(eng):
                loss = fn(model, b)
            assert type(loss) is LazyTensor
        loss.backward()
        opt.step()
        losses.append(float(build(loss).detach()))
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("model_cls", [BinaryTreeLSTM, SeqLSTM, TreeGRU], ids=["treelstm", "seqlstm", "treegru"])
@pytest.mark.parametrize("how", ["captured", "prefetch"])
def test_captured_training_matches_eager(batches: list, model_cls: type, how: str) -> None:
    ref, w_ref = _train(model_cls, batches, "eager")
    got, w = _train(model_cls, batches, how)
    assert max(abs(a - b) for a, b in zip(ref, got, strict=True)) < 1e-5
    for a, b in zip(w_ref, w, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_cell_is_one_node_batched_whole(batches: list) -> None:
    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
    op_level, captured = Reuse(depth=1, collect=0, batching=True), _engine()
    counts = {}
    for name, eng in (("ops", op_level), ("modules", captured)):
        with lazy(eng) as tr:
            loss = batch_loss(model, batches[0])
        groups = list(tr.pending.values())
        counts[name] = sum(len(g.members) for g in groups)
        if name == "modules":  # every composer call of a level is one member of one group
            comp = [g for g in groups if g.members[0].func is model.composer]
            assert comp and sum(len(g.members) for g in comp) == sum(len(t.internal_nodes()) for t in batches[0])
        build(loss)
    assert counts["modules"] * 3 < counts["ops"]
    assert captured.last.calls < op_level.last.calls
    assert nn.Module.__call__ is not capture._ORIG_CALL  # the swap outlives the context ...
    model.leaf_cell.c(torch.ones(1, 10))
    assert nn.Module.__call__ is capture._ORIG_CALL  # ... until a module is called outside graphsub


class _Lin(nn.Module):
    """A linear layer, then what each test module does with its output (``then``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> object:
        return self.then(self.lin(x))

    def then(self, y: torch.Tensor) -> object:
        raise NotImplementedError


class _ValueDependent(_Lin):
    def then(self, y: torch.Tensor) -> object:
        return torch.relu(y) if y.sum() > 0 else -y  # control flow on a tensor's value


class _Noisy(_Lin):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def then(self, y: torch.Tensor) -> object:
        return self.drop(y)


class _Tagged(_Lin):
    def then(self, y: torch.Tensor) -> object:
        return {"y": y}


class _Centered(_Lin):
    """Mixes rows: batched, it would subtract the batch mean; the first-use check must catch it."""

    def then(self, y: torch.Tensor) -> object:
        return y - y.mean(dim=0, keepdim=True) + y.sum()


def _hooked() -> nn.Module:
    m = nn.Linear(3, 3)
    m.register_forward_hook(lambda mod, inp, out: None)
    return m


@pytest.mark.parametrize(("make", "reason"), [
    (_ValueDependent, "reads a tensor's value"),
    (_Noisy, "draws random numbers"),
    (lambda: nn.BatchNorm1d(3), "buffers in training mode"),
    (_hooked, "forward hooks"),
    (_Tagged, "returns dict"),
])
def test_refused_modules_fall_back_to_op_level_and_say_why(make: object, reason: str) -> None:
    torch.manual_seed(0)
    mod = make()  # type: ignore[operator]
    xs = [torch.randn(1 if not isinstance(mod, nn.BatchNorm1d) else 2, 3) for _ in range(4)]
    w = nn.Parameter(torch.randn(3, 3))

    def run(x: torch.Tensor) -> torch.Tensor:
        y = mod(x @ w)
        return y["y"] if isinstance(y, dict) else y

    torch.manual_seed(7)
    ref = torch.stack([run(x) for x in xs]).sum()
    capture.reset_report()
    torch.manual_seed(7)
    with lazy(_engine()):
        out = torch.stack([run(x) for x in xs]).sum()
    torch.testing.assert_close(build(out), ref)
    rows = {r["callable"]: r for r in capture.report()}
    row = rows[type(mod).__name__]
    assert not row["captured"] and reason in row["reason"], rows


def test_a_module_that_mixes_rows_is_run_member_by_member() -> None:
    torch.manual_seed(0)
    mod = _Centered()
    xs = [torch.randn(1, 3) for _ in range(5)]
    w = nn.Parameter(torch.randn(3, 3))
    ref = torch.cat([mod(x @ w) for x in xs]).sum()
    eng = _engine()
    with lazy(eng):
        out = torch.cat([mod(x @ w) for x in xs]).sum()
    torch.testing.assert_close(build(out), ref)
    assert eng.batch_state.unbatchable  # the first-use check refused the batched call
    capture.reset_report()


def test_marked_functions_and_methods_are_cells() -> None:
    lin = nn.Linear(4, 8)

    @cell
    def gate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a, b = lin(x).chunk(2, dim=1)
        return torch.sigmoid(a) * torch.tanh(b) + y

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        @cell
        def step(self, x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
            y = torch.tanh(self.lin(x)) * scale
            return y, y + 1

    net = Net()
    xs = [torch.randn(1, 4) for _ in range(6)]

    def prog() -> torch.Tensor:
        outs = [gate(*net.step(x, 0.5)) for x in xs]
        return torch.cat(outs).pow(2).sum()

    ref = prog()
    ref.backward()
    g_ref = [p.grad.clone() for p in (*lin.parameters(), *net.parameters())]
    for p in (*lin.parameters(), *net.parameters()):
        p.grad = None
    capture.reset_report()
    eng = _engine()
    with lazy(eng) as tr:
        out = prog()
    funcs = {g.members[0].func for g in tr.pending.values()}
    assert gate in funcs and Net.step in funcs  # each a node; nothing of their bodies was recorded
    assert not any(getattr(f, "__name__", "") in ("tanh", "sigmoid") for f in funcs)
    out.backward()
    torch.testing.assert_close(build(out), ref)
    for p, g in zip((*lin.parameters(), *net.parameters()), g_ref, strict=True):
        torch.testing.assert_close(p.grad, g)
    captured = {r["callable"] for r in capture.report() if r["captured"]}
    assert "test_marked_functions_and_methods_are_cells.<locals>.Net.step" in captured
    assert "test_marked_functions_and_methods_are_cells.<locals>.gate" in captured
    assert gate(xs[0], xs[0][:, :4]).shape == (1, 4)  # outside lazy(): an ordinary call


def test_constants_are_part_of_the_key_and_too_many_keys_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "MAX_KEYS", 3)

    class Scale(nn.Module):
        def forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
            return x * k

    mod = Scale()
    w = nn.Parameter(torch.ones(1, 2))
    capture.reset_report()
    with lazy(_engine()):
        out = torch.cat([mod(w * 1.0, k) for k in range(6)]).sum()
    assert float(build(out).detach()) == 2 * sum(range(6))
    row = {r["callable"]: r for r in capture.report()}["Scale"]
    assert row["captured_keys"] == 3 and row["refused_keys"] == 3 and "more than 3" in row["reason"]


def test_the_swap_is_undone_after_an_error_and_off_without_capture() -> None:
    ctor = capture.TENSOR_CTOR
    lin = nn.Linear(2, 2)

    def outside() -> None:  # a module called outside graphsub puts torch's own __call__ back
        assert nn.Module.__call__ is not capture._ORIG_CALL and torch.tensor is ctor
        assert type(lin(torch.ones(1, 2))) is torch.Tensor
        assert nn.Module.__call__ is capture._ORIG_CALL

    with pytest.raises(RuntimeError, match="boom"), lazy(_engine()):
        assert nn.Module.__call__ is not capture._ORIG_CALL
        assert torch.tensor is not ctor and torch.tensor.__wrapped__ is ctor  # type: ignore[attr-defined]
        raise RuntimeError("boom")
    outside()
    with lazy(Reuse(depth=1, collect=0, batching=True)):
        assert nn.Module.__call__ is capture._ORIG_CALL and torch.tensor is ctor
    eng = _engine()
    with lazy(eng), lazy(eng):  # nested capturing contexts share one swap
        pass
    outside()
    with lazy(eng):
        out = lin(torch.ones(1, 2))
    assert type(out) is LazyTensor
    with lazy(eng):  # the next trace finds the swap in place
        out2 = lin(torch.ones(1, 2))
    assert type(out2) is LazyTensor and torch.equal(build(out2), build(out))
    assert nn.Module.__call__ is not capture._ORIG_CALL  # building ran the plan: modules under exec, no restore
    outside()


def test_report_names_modules_by_their_path(batches: list) -> None:
    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
    other = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
    capture.reset_report()
    for m in (model, other):
        with lazy(_engine()):
            build(batch_loss(m, batches[0]))
    rows = {r["callable"]: r for r in capture.report(model)}
    assert {"composer (TreeComposer)", "leaf_cell (TreeLeaf)", "embedding (Embedding)", "output (Linear)",
            "BinaryTreeLSTM"} <= set(rows)
    assert "TreeComposer" not in rows  # other's composer is not listed under model's report
    assert rows["composer (TreeComposer)"]["captured"]


def _plan_run(model: nn.Module, batch: list, layout: bool, edit: Callable[[Any], None] | None = None) -> tuple:
    """``batch_loss`` recorded and planned (``layout``), the plan changed by ``edit``, run and differentiated: its
    loss, the model's gradients and the plan (fresh gradients and dropout masks from seed 3)."""
    from graphsub.dynamic.plan import BatchState, build_plan, run_plan

    model.zero_grad()
    torch.manual_seed(3)
    with lazy(_engine()) as tr:
        loss = batch_loss(model, batch)
    plan = build_plan(tr.take_pending(), loss, layout=layout)
    if edit is not None:
        edit(plan)
    value, _, _ = run_plan(plan, plan.ops, BatchState())
    value.backward()
    return value.detach(), [p.grad.clone() for p in model.parameters()], plan


def _assert_same_run(a: tuple, b: tuple) -> None:
    torch.testing.assert_close(a[0], b[0])
    for x, y in zip(a[1], b[1], strict=True):
        torch.testing.assert_close(x, y)


def test_the_chunk_layout_changes_no_value_or_gradient(batches: list) -> None:
    """Rows reordered so that each consumer reads a whole chunk (layout.layout_rows): the same loss and gradients as
    the plan without it, and the tree's gathers become chunks (no index_select of a whole step)."""
    from graphsub.dynamic.plan import L

    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
    got = {layout: _plan_run(model, batches[1], layout) for layout in (False, True)}
    for layout, run in got.items():
        pieces = [p for st in run[2].steps if st.batched for c in st.cols if c[0] == L for p in c[1]]
        chunked = sum(type(p[2]) is int for p in pieces)
        assert chunked > len(pieces) // 2 if layout else chunked == 0
    _assert_same_run(got[True], got[False])


def test_shared_gathers_change_no_value_or_gradient(batches: list) -> None:
    """A tree cell's four state columns gathered as one (plan._merge): the same loss and gradients as the plan
    gathering them one by one, and every composer step that permutes its inputs shares one gather."""
    from graphsub.dynamic.plan import L

    def unshare(plan: Any) -> None:
        for st in plan.steps:
            st.merged = None

    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
    shared = _plan_run(model, batches[1], True)
    steps = shared[2].steps
    permuted = [st for st in steps if st.batched and sum(c[0] == L and c[2] is not None for c in st.cols) == 4]
    assert permuted and all(st.merged is not None and [len(js) for js, _ in st.merged] == [4] for st in permuted)
    _assert_same_run(shared, _plan_run(model, batches[1], True, unshare))


def test_relevel_merges_the_readouts_and_keeps_values(batches: list) -> None:
    """Scheduled as late as possible, the readouts of trees of different heights share one step each
    (schedule.relevel): fewer steps, the same loss and gradients."""
    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
    got = {}
    for late in (False, True):
        model.zero_grad()
        torch.manual_seed(3)
        eng = Reuse(depth=1, collect=0, batching=True, capture_modules=True, relevel=late)
        with lazy(eng):
            loss = batch_loss(model, batches[2])
        loss.backward()
        got[late] = (float(build(loss).detach()), [p.grad.clone() for p in model.parameters()], eng.last.calls)
    heights = {t.depth for t in batches[2]}
    assert len(heights) > 1 and got[True][2] < got[False][2]
    assert got[True][0] == pytest.approx(got[False][0], abs=1e-6)
    for a, b in zip(got[True][1], got[False][1], strict=True):
        torch.testing.assert_close(a, b)


def test_plan_cache_hits_on_the_same_structure_with_other_data() -> None:
    """Two batches of equally shaped trees with different words share one plan (the data is refilled); a third
    shape misses; the LRU keeps at most ``size`` plans; every run computes what eager PyTorch computes."""
    from graphsub.dynamic.workloads.sst import parse_ptb

    vocab = Vocab(["a", "b", "c", "d", "e", "f"])
    shapes = ["(1 (0 {}) (1 (0 {}) (1 {})))", "(0 (1 (0 {}) (1 {})) (0 {}))"]

    def batch(words: str, shape: int) -> list:
        w = words.split()
        return [encode_tree(parse_ptb(shapes[k].format(*w)), vocab) for k in (shape, 1)]

    batches = [batch("a b c", 0), batch("d e f", 0), batch("c a e", 1), batch("f f a", 0)]
    torch.manual_seed(0)
    model = BinaryTreeLSTM(8, emb_dim=6, hidden=4)
    eng = Reuse(depth=1, collect=0, batching=True, capture_modules=True, plan_cache=1)
    for b in batches:
        torch.manual_seed(2)
        ref = batch_loss(model, b)
        torch.manual_seed(2)
        with lazy(eng):
            got = batch_loss(model, b)
        torch.testing.assert_close(build(got), ref)
    rep = eng.report()["plan_cache"]
    # batch 2 hits batch 1's plan; batch 3 misses and evicts it (size 1); batch 4 misses again
    assert (rep["hits"], rep["misses"], rep["entries"]) == (1, 3, 1) and rep["hit_rate"] == 0.25


def test_global_hooks_and_other_threads_are_left_alone() -> None:
    import threading

    from torch.nn.modules.module import register_module_forward_hook

    lin = nn.Linear(3, 3)
    w = nn.Parameter(torch.randn(3, 3))
    seen: list[str] = []
    handle = register_module_forward_hook(lambda mod, inp, out: seen.append(type(mod).__name__))
    try:
        capture.reset_report()
        with lazy(_engine()):
            out = torch.cat([lin(torch.ones(1, 3) @ w) for _ in range(3)]).sum()
        build(out)
        assert seen == ["Linear"] * 3  # run per call, as eagerly: the global hook ruled capture out
        row = {r["callable"]: r for r in capture.report()}["Linear"]
        assert not row["captured"] and "global" in row["reason"]
    finally:
        handle.remove()
    results: list[object] = []
    with lazy(_engine()):  # a module called by another thread meanwhile runs eagerly, outside the trace
        t = threading.Thread(target=lambda: results.extend([lin(torch.ones(1, 3)), torch.tensor([4])]))
        t.start()
        t.join()
        here = torch.tensor([4])  # (this thread: a data node)
    assert type(here) is LazyTensor
    for got in results:  # the other thread's torch.tensor too: a tensor of its own
        assert isinstance(got, torch.Tensor) and type(got) is not LazyTensor
    assert torch.equal(results[1], torch.tensor([4]))



@pytest.mark.parametrize("engine", [Reuse(depth=1, collect=0, capture_modules=True),
                                    Reuse(depth=4, freq=0.5, collect=2, capture_modules=True),
                                    Reuse(depth=4, freq=0.5, collect=2, batching=True, capture_modules=True)],
                         ids=["unbatched", "thesis-patterns", "patterns+batching"])
def test_captured_nodes_run_under_every_engine(batches: list, engine: Reuse) -> None:
    """Module nodes are ordinary nodes to the thesis' machinery (signatures, generated pattern code) too."""
    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=8, hidden=6)
    torch.manual_seed(1)
    ref = [float(batch_loss(model, b).detach()) for b in batches]
    torch.manual_seed(1)
    got = []
    for b in batches:
        with lazy(engine, examples=len(b)):
            loss = batch_loss(model, b)
        got.append(float(build(loss).detach()))
    assert got == pytest.approx(ref, abs=1e-5)


def test_a_dropped_model_is_freed_with_its_memo_entries(batches: list) -> None:
    """Capture keeps its memos by ``id(module)`` without a reference to the module: a model its user drops is freed
    (parameters and all), and its keys leave the memos as it dies, so a later module at the same address gets
    none of them."""
    import gc
    import weakref

    from graphsub.dynamic.calls import KEYS

    def train_once() -> tuple[weakref.ref[nn.Module], weakref.ref[nn.Module], int]:
        torch.manual_seed(0)
        model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
        eng = _engine()
        for b in batches[:2]:
            with lazy(eng):
                loss = batch_loss(model, b)
            loss.backward()
        assert capture.report(model)  # captured calls made
        return weakref.ref(model), weakref.ref(model.composer), id(model.composer)

    ref, composer, cid = train_once()
    gc.collect()
    assert ref() is None and composer() is None
    assert not any(k[0] == cid for k in capture._FAST) and not any(k[0] == cid for k in KEYS)  # keys by id
    assert all(r["callable"] != "TreeComposer" or r["captured"] for r in capture.report())


def _general_calls(run: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], Any, Any]:
    """``run()`` recorded twice by one capturing engine (every key seen in the first); the callables that went
    through the general recorder (``capture_call``) in the second, its result and its trace."""
    eng = _engine()
    with lazy(eng):
        run()
    general: list[Any] = []
    real = capture.capture_call
    monkeypatch.setattr(capture, "capture_call", lambda fn, a, k: general.append(fn) or real(fn, a, k))
    with lazy(eng) as tr:
        out = run()
    return general, out, tr


def test_known_cell_calls_take_the_fast_path(batches: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a cell's key is captured, its calls are built by ``_known`` (the inlined hot path, whose key must be
    ``_short_key``'s), not by the general recorder."""
    torch.manual_seed(0)
    model = BinaryTreeLSTM(50, emb_dim=10, hidden=6)
    general, loss, tr = _general_calls(lambda: batch_loss(model, batches[0]), monkeypatch)
    cells = (model.embedding, model.leaf_cell, model.composer)
    assert not [fn for fn in general if fn in cells]
    assert sum(len(g.members) for g in tr.pending.values()) > 3 * len(batches[0])
    assert torch.isfinite(build(loss))


@pytest.mark.parametrize("workload", ["seqlstm", "treegru"])
def test_known_cells_of_the_other_argument_forms_take_the_fast_path(batches: list, workload: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``_known``'s other loop-free forms build ``_short_key``'s key too: an input and a ``(c, h)`` state (the sequence
    LSTM's step after the first), two lazy values (the Tree-GRU's cell); and ``_short_key`` takes a state of data
    tensors (a sentence's first step reads the zero state, real tensors)."""
    torch.manual_seed(0)
    if workload == "seqlstm":
        model: nn.Module = SeqLSTM(50, emb_dim=10, hidden=6)
        loss_fn, cells = seq_batch_loss, (model.embedding, model.cell)
    else:
        model = TreeGRU(50, emb_dim=10, hidden=6)
        loss_fn, cells = batch_loss, (model.embedding, model.leaf_cell, model.composer)
    general, loss, _ = _general_calls(lambda: loss_fn(model, batches[0]), monkeypatch)
    assert not [fn for fn in general if fn in cells]
    assert torch.isfinite(build(loss))


def test_the_capturing_trace_is_known_exactly_where_module_calls_are_captured() -> None:
    """``STATE.capturing`` (what the module-call hot path reads) is the innermost trace of a capturing context, and
    ``None`` outside, inside a plain ``lazy()`` nested in it, while real code executes, and after an error."""
    from graphsub.dynamic.dag import STATE, executing

    assert STATE.capturing is None
    with lazy(_engine()) as outer:
        assert STATE.capturing is outer
        with executing():
            assert STATE.capturing is None
        assert STATE.capturing is outer
        with lazy(Reuse(depth=1, collect=0, batching=True)):  # op-level only: modules run their code
            assert STATE.capturing is None
        assert STATE.capturing is outer
        with pytest.raises(RuntimeError), lazy(_engine()) as inner:
            assert STATE.capturing is inner
            raise RuntimeError("boom")
        assert STATE.capturing is outer
    assert STATE.capturing is None
