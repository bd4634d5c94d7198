"""SST trees and the define-by-run workloads: PTB parsing, loading (counts of the canonical split), vocabulary,
the calibrated synthetic treebank, and the Tree-LSTM / sequence LSTM (equations, sizes, gradients, training)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from graphsub.dynamic.workloads.models import (
    BinaryTreeLSTM,
    SeqLSTM,
    batch_loss,
    make_optimizer,
    seq_batch_loss,
    tree_tokens,
)
from graphsub.dynamic.workloads.sst import (
    NEUTRAL,
    SST_ENV,
    SSTNotFound,
    Tree,
    Vocab,
    batches,
    encode_tree,
    find_sst_root,
    load_sst,
    parse_ptb,
    synthetic_treebank,
    to_binary,
)
from graphsub.errors import GraphsubError

EXAMPLE = "(3 (2 It) (4 (2 's) (4 good)))"


def shape_mix(trees: list[Tree]) -> dict[str, float]:
    """Share of internal nodes by (left, right) child kind: L = leaf, N = internal node."""
    counts = Counter("".join("L" if c.is_leaf else "N" for c in n.children) for t in trees for n in t.internal_nodes())
    total = sum(counts.values())
    return {k: counts[k] / total for k in ("LN", "LL", "NN", "NL")}


# ------------------------------------------------------------------------------------------------ parsing


def test_parse_structure_and_helpers() -> None:
    t = parse_ptb(EXAMPLE)
    assert t.label == 3 and not t.is_leaf and t.word is None
    assert t.left is not None and t.left.is_leaf and t.left.word == "It" and t.left.label == 2
    assert [leaf.word for leaf in t.leaves()] == ["It", "'s", "good"] == t.words()
    assert (t.length, t.size, t.depth) == (3, 5, 2)
    assert [n.label for n in t.internal_nodes()] == [4, 3]  # post-order: children first
    assert [n.label for n in t.nodes()] == [2, 2, 4, 4, 3]
    assert t.children == (t.left, t.right) and t.left.children == ()
    assert t.to_ptb() == str(t) == EXAMPLE
    assert parse_ptb("(1 word)").depth == 0


def test_parse_leaf_with_space_and_loose_whitespace() -> None:
    t = parse_ptb("(2 (2 8 1\\/2) (2 hours))")
    assert t.words() == ["8 1\\/2", "hours"]
    loose = parse_ptb("  ( 3 (2 It)\t(4 (2 's )  (4 good) ) )\n")
    assert loose.to_ptb() == EXAMPLE


def test_strict_parser_agrees_with_fast_path() -> None:
    # A space after "(" is outside the regex fast path, so these go through the character parser.
    for t in synthetic_treebank(30, seed=2):
        text = t.to_ptb()
        assert parse_ptb(text.replace("(", "( ")).to_ptb() == parse_ptb(text).to_ptb() == text


def test_nodes_hash_by_identity() -> None:
    t = parse_ptb("(2 (2 the) (2 the))")
    assert t.left is not None and t.right is not None
    assert t.left.to_ptb() == t.right.to_ptb() and t.left != t.right
    assert len({t.left: 0, t.right: 1}) == 2  # per-node caches keep twin subtrees apart


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("", "empty input", 0),
        ("   ", "empty input", 3),
        ("(2 (2 a) (2 b)", "not closed", 14),
        ("(2 (2 a", "not closed", 7),
        ("(2 a))", "')' without '('", 5),
        ("(x a)", "missing integer label", 1),
        ("( (2 a) (2 b))", "missing integer label", 2),
        ("(2x a)", "missing integer label", 1),
        ("(2 (2 a))", "1 subtree", 0),
        ("(2 (2 a) (2 b) (2 c))", "3 subtree", 0),
        ("(2)", "0 subtree", 0),
        ("2 a", "unexpected '2'", 0),
        ("(2 a) (2 b)", "text after the tree", 6),
    ],
)
def test_parse_errors_name_the_position(text: str, message: str, position: int) -> None:
    with pytest.raises(ValueError, match=rf"{re.escape(message)}.* at position {position} "):
        parse_ptb(text)


def test_tree_validates_its_shape() -> None:
    leaf = Tree(2, word="a")
    with pytest.raises(ValueError, match="both left and right"):
        Tree(2, left=leaf)
    with pytest.raises(ValueError, match="cannot have children"):
        Tree(2, word="a", left=leaf, right=leaf)


def test_to_binary_maps_every_node() -> None:
    t = to_binary(parse_ptb("(0 (1 a) (2 (3 b) (4 c)))"))
    assert [n.label for n in t.nodes()] == [0, 1, 1, NEUTRAL, 0]  # post-order: a b c (b c) root
    with pytest.raises(ValueError, match="label 7"):
        to_binary(parse_ptb("(7 a)"))


# ------------------------------------------------------------------------------------------------ loading

SST = find_sst_root()
needs_sst = pytest.mark.skipif(
    SST is None or not (SST / "train.txt").is_file(),
    reason=f"SST data not found (set ${SST_ENV}); synthetic tests still run",
)


@pytest.fixture(scope="module")
def sst_binary_train() -> list[Tree]:
    return load_sst(split="train")


@needs_sst
def test_sst_binary_counts_and_labels(sst_binary_train: list[Tree]) -> None:
    assert len(sst_binary_train) == 6920
    assert {t.label for t in sst_binary_train} == {0, 1}
    assert {n.label for t in sst_binary_train[:200] for n in t.nodes()} == {0, 1, NEUTRAL}
    assert sst_binary_train[0].label == 1 and sst_binary_train[0].words()[:2] == ["The", "Rock"]  # root 3 -> 1
    assert len(Vocab.build(sst_binary_train)) == 16284 + 1  # reference: vocabulary of the binary train split
    assert statistics.mean(t.length for t in sst_binary_train) == pytest.approx(19.2, abs=0.5)
    assert max(t.length for t in sst_binary_train) <= 52


@needs_sst
def test_sst_dev_test_counts_and_roundtrip() -> None:
    assert (len(load_sst(split="dev")), len(load_sst(split="test"))) == (872, 1821)
    dev_all = load_sst(split="dev", binary=False)
    test_all = load_sst(split="test", binary=False)
    assert (len(dev_all), len(test_all)) == (1101, 2210)
    assert {t.label for t in dev_all} == {0, 1, 2, 3, 4}
    assert SST is not None
    lines = (SST / "dev.txt").read_text(encoding="utf-8").splitlines()
    assert [t.to_ptb() for t in dev_all] == lines  # the parser keeps every token verbatim


@needs_sst
def test_sst_train_all_count() -> None:
    train = load_sst(split="train", binary=False)
    assert len(train) == 8544
    assert "8\xa01\\/2" in {w for t in train for w in t.words()}  # the leaf with a (no-break) space
    assert statistics.mean(t.depth for t in train) == pytest.approx(9.83, abs=0.01)  # reference §4


def test_env_var_takes_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dev.txt").write_text(f"{EXAMPLE}\n(2 (2 so) (2 so))\n\n(0 (1 bad) (2 .))\n", encoding="utf-8")
    monkeypatch.setenv(SST_ENV, str(tmp_path))
    assert find_sst_root() == tmp_path
    assert [t.to_ptb() for t in load_sst(split="dev")] == ["(1 (-1 It) (1 (-1 's) (1 good)))", "(0 (0 bad) (-1 .))"]
    assert len(load_sst(split="dev", binary=False)) == 3
    with pytest.raises(SSTNotFound, match=r"train\.txt"):
        load_sst(split="train")


def test_missing_data_raises_sst_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SSTNotFound, match="does not exist") as info:
        load_sst(tmp_path / "nowhere")
    assert isinstance(info.value, GraphsubError)
    monkeypatch.setenv(SST_ENV, str(tmp_path / "nowhere"))
    assert find_sst_root() is None
    monkeypatch.delenv(SST_ENV)
    monkeypatch.chdir(tmp_path)
    assert find_sst_root() is None  # only the variable (or root=) names the data: nothing else is searched
    with pytest.raises(SSTNotFound, match=rf"\${SST_ENV} is not set"):
        load_sst()
    monkeypatch.setenv(SST_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(SSTNotFound, match=rf"\${SST_ENV}=.*synthetic_treebank"):
        load_sst()
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        load_sst(tmp_path, split="validation")


def test_malformed_file_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "test.txt").write_text(f"{EXAMPLE}\n(2 (2 a)\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"test\.txt:2: parse_ptb: unbalanced"):
        load_sst(tmp_path, split="test")


# ------------------------------------------------------------------------------------------------ vocabulary


def test_vocab_ids_and_unknown() -> None:
    trees = [parse_ptb(EXAMPLE), parse_ptb("(1 (2 good) (1 bad))")]
    v = Vocab.build(trees)
    assert len(v) == 5 and v.encode("It") == 1 and v.encode("bad") == 4
    assert v.encode("unseen") == Vocab.UNK == 0 and v.decode(0) == "<unk>" and v.decode(3) == "good"
    assert v.encode_all(["good", "nope"]) == [3, 0]
    assert "good" in v and "nope" not in v
    frequent = Vocab.build(trees, min_count=2)
    assert len(frequent) == 2 and frequent.encode("good") == 1 and frequent.encode("It") == 0
    assert v.add("new") == 5 and v.add("new") == 5


def test_encode_tree_keeps_structure() -> None:
    t = parse_ptb(EXAMPLE)
    v = Vocab(["good", "It"])
    e = encode_tree(t, v)
    assert e.to_ptb() == t.to_ptb() and e is not t
    assert [leaf.wid for leaf in e.leaves()] == [2, 0, 1]
    assert all(leaf.wid is None for leaf in t.leaves())
    assert tree_tokens(e) == [2, 0, 1]
    with pytest.raises(ValueError, match="encode_tree"):
        tree_tokens(t)


# ------------------------------------------------------------------------------------------------ synthetic


@pytest.fixture(scope="module")
def synthetic() -> list[Tree]:
    return synthetic_treebank(2000, seed=1)


def test_synthetic_lengths_match_sst(synthetic: list[Tree]) -> None:
    lengths = [t.length for t in synthetic]
    assert statistics.mean(lengths) == pytest.approx(19.1, abs=2.0)
    assert statistics.pstdev(lengths) == pytest.approx(9.3, abs=1.5)
    assert min(lengths) >= 2 and max(lengths) <= 52
    assert statistics.mean(t.depth for t in synthetic) == pytest.approx(9.8, abs=1.0)


def test_synthetic_shape_mix_matches_sst(synthetic: list[Tree]) -> None:
    target = {"LN": 0.42, "LL": 0.25, "NN": 0.19, "NL": 0.14}
    mix = shape_mix(synthetic)
    assert all(abs(mix[k] - target[k]) < 0.03 for k in target), mix


def test_synthetic_words_and_labels(synthetic: list[Tree]) -> None:
    counts = Counter(w for t in synthetic for w in t.words())
    assert [w for w, _ in counts.most_common(3)] == ["w1", "w2", "w3"]  # Zipfian ranks
    assert {n.label for t in synthetic for n in t.nodes()} == {0, 1}
    assert 0.4 < statistics.mean(t.label for t in synthetic) < 0.6
    small = synthetic_treebank(50, seed=3, vocab_size=10)
    assert {w for t in small for w in t.words()} <= {f"w{r}" for r in range(1, 11)}


def test_synthetic_is_deterministic() -> None:
    a = [t.to_ptb() for t in synthetic_treebank(30, seed=7)]
    assert a == [t.to_ptb() for t in synthetic_treebank(30, seed=7)]
    assert a != [t.to_ptb() for t in synthetic_treebank(30, seed=8)]
    assert synthetic_treebank(0, seed=0) == []
    with pytest.raises(ValueError, match="n >= 0"):
        synthetic_treebank(-1, seed=0)


def test_batches() -> None:
    trees = synthetic_treebank(45, seed=0)
    got = list(batches(trees, batch_size=20, seed=5))
    assert [len(b) for b in got] == [20, 20, 5]
    assert sorted(id(t) for b in got for t in b) == sorted(id(t) for t in trees)
    assert [[id(t) for t in b] for b in batches(trees, 20, seed=5)] == [[id(t) for t in b] for b in got]
    assert [t for b in batches(trees, 20, seed=5) for t in b] != trees
    assert [t for b in batches(trees, 20, shuffle=False) for t in b] == trees
    assert [len(b) for b in batches(trees, 20, drop_last=True)] == [20, 20]
    with pytest.raises(ValueError, match="batch_size"):
        next(batches(trees, batch_size=0))


# ------------------------------------------------------------------------------------------------ models


@pytest.fixture(scope="module")
def small_data() -> tuple[list[Tree], int]:
    trees = synthetic_treebank(40, seed=11, vocab_size=200)
    vocab = Vocab.build(trees)
    return [encode_tree(t, vocab) for t in trees], len(vocab)


def test_parameter_counts_match_reference() -> None:
    groups = BinaryTreeLSTM(vocab_size=10).parameter_groups()  # emb 300, hidden 150, 2 classes
    assert groups == {"embedding": 3000, "leaf": 90_300, "composer": 225_750, "output": 302}
    fine = BinaryTreeLSTM(vocab_size=10, num_classes=5).parameter_groups()
    assert fine["output"] == 755  # reference §3 (5 classes, as Tai et al.)
    assert fine["leaf"] + fine["composer"] + fine["output"] == 316_805  # "total ≈ 316.8k"
    seq = SeqLSTM(vocab_size=10)
    assert seq.cell.linear.weight.shape == (600, 450)
    assert sum(p.numel() for p in seq.parameters()) == 3000 + 270_600 + 302


def test_tree_lstm_follows_the_equations() -> None:
    torch.manual_seed(0)
    model = BinaryTreeLSTM(vocab_size=5, emb_dim=4, hidden=3).eval()
    tree = Tree(1, left=Tree(0, word="a", wid=1), right=Tree(1, word="b", wid=4))
    emb, wc, wo, comp = model.embedding.weight, model.leaf_cell.c, model.leaf_cell.o, model.composer.linear

    def leaf(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = emb[i]
        c = wc.weight @ x + wc.bias
        return c, torch.sigmoid(wo.weight @ x + wo.bias) * torch.tanh(c)

    (lc, lh), (rc, rh) = leaf(1), leaf(4)
    z = comp.weight @ torch.cat([lh, rh]) + comp.bias
    i, o, fl, fr, u = z[0:3], z[3:6], z[6:9], z[9:12], z[12:15]
    c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * lc + torch.sigmoid(fr) * rc
    h = torch.sigmoid(o) * torch.tanh(c)
    with torch.no_grad():
        got_c, got_h = model.node_state(tree)
        assert got_c.shape == got_h.shape == (1, 3)
        torch.testing.assert_close(got_c[0], c)
        torch.testing.assert_close(got_h[0], h)
        torch.testing.assert_close(model(tree)[0], model.output.weight @ h + model.output.bias)
        torch.testing.assert_close(model.loss(tree), torch.nn.functional.cross_entropy(model(tree), torch.tensor([1])))


def test_dropout_on_root_only_in_training() -> None:
    tree = encode_tree(parse_ptb("(1 (0 a) (1 b))"), Vocab(["a", "b"]))
    model = BinaryTreeLSTM(vocab_size=3, emb_dim=4, hidden=3, dropout=1.0)
    with torch.no_grad():
        torch.testing.assert_close(model(tree)[0], model.output.bias)  # every root unit dropped
        assert not torch.equal(model.eval()(tree)[0], model.output.bias)


def test_seq_lstm_matches_lstm_cell() -> None:
    torch.manual_seed(0)
    model = SeqLSTM(vocab_size=6, emb_dim=4, hidden=3).eval()
    cell = nn.LSTMCell(4, 3)
    with torch.no_grad():
        cell.weight_ih.copy_(model.cell.linear.weight[:, :4])
        cell.weight_hh.copy_(model.cell.linear.weight[:, 4:])
        cell.bias_ih.copy_(model.cell.linear.bias)
        cell.bias_hh.zero_()
        h = c = torch.zeros(1, 3)
        for wid in [3, 1, 5, 5]:
            h, c = cell(model.embedding.weight[wid : wid + 1], (h, c))
        torch.testing.assert_close(model([3, 1, 5, 5]), model.output(h))
    with pytest.raises(ValueError, match="empty"):
        model([])


def test_forward_shapes_and_batch_loss(small_data: tuple[list[Tree], int]) -> None:
    trees, vocab_size = small_data
    torch.manual_seed(0)
    tree_model = BinaryTreeLSTM(vocab_size, emb_dim=16, hidden=8).eval()
    seq_model = SeqLSTM(vocab_size, emb_dim=16, hidden=8).eval()
    with torch.no_grad():
        assert tree_model(trees[0]).shape == (1, 2) and seq_model(tree_tokens(trees[0])).shape == (1, 2)
        batch = trees[:5]
        loss = batch_loss(tree_model, batch)
        assert loss.shape == () and loss.item() > 0
        torch.testing.assert_close(loss, sum(tree_model.loss(t) for t in batch) / 5)
        torch.testing.assert_close(
            seq_batch_loss(seq_model, batch), sum(seq_model.loss(tree_tokens(t), t.label) for t in batch) / 5
        )
    with pytest.raises(ValueError, match="empty batch"):
        batch_loss(tree_model, [])
    with pytest.raises(ValueError, match="encode_tree"):
        tree_model(parse_ptb(EXAMPLE))
    with pytest.raises(ValueError, match="num_classes=5"):
        tree_model.loss(Tree(3, left=trees[0].left, right=trees[0].right))


def workload(kind: str, vocab_size: int) -> tuple[BinaryTreeLSTM | SeqLSTM, Callable[[Sequence[Tree]], Tensor]]:
    """A small model of ``kind`` and its batch loss over encoded trees."""
    if kind == "tree":
        tree_model = BinaryTreeLSTM(vocab_size, emb_dim=16, hidden=8)
        return tree_model, lambda ts: batch_loss(tree_model, ts)
    seq_model = SeqLSTM(vocab_size, emb_dim=16, hidden=8)
    return seq_model, lambda ts: seq_batch_loss(seq_model, ts)


@pytest.mark.parametrize("kind", ["tree", "seq"])
def test_gradient_reaches_every_parameter(kind: str, small_data: tuple[list[Tree], int]) -> None:
    trees, vocab_size = small_data
    torch.manual_seed(0)
    model, loss_fn = workload(kind, vocab_size)
    loss_fn(trees[:4]).backward()  # training mode: dropout on
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    used = {w for t in trees[:4] for w in tree_tokens(t)}
    grad = model.embedding.weight.grad
    assert grad is not None
    rows = grad.abs().sum(dim=1) > 0
    assert {i for i in range(vocab_size) if rows[i]} == used  # only the words of the batch


@pytest.mark.parametrize("kind", ["tree", "seq"])
def test_adagrad_training_lowers_the_loss(kind: str, small_data: tuple[list[Tree], int]) -> None:
    trees, vocab_size = small_data
    torch.manual_seed(0)
    model, loss_fn = workload(kind, vocab_size)
    opt = make_optimizer(model)
    assert opt.defaults["lr"] == 0.05 and opt.defaults["weight_decay"] == 1e-4

    def eval_loss() -> float:
        model.eval()
        with torch.no_grad():
            value = loss_fn(trees).item()
        model.train()
        return value

    before = eval_loss()
    for epoch in range(5):  # 20 steps of 10 trees
        for batch in batches(trees, batch_size=10, seed=epoch):
            opt.zero_grad()
            loss_fn(batch).backward()
            opt.step()
    after = eval_loss()
    assert after < 0.8 * before, (before, after)


def test_tree_gru_follows_the_equations_and_labels_every_phrase() -> None:
    from graphsub.dynamic.workloads.models import TreeGRU

    torch.manual_seed(0)
    model = TreeGRU(vocab_size=5, emb_dim=4, hidden=3).eval()
    tree = Tree(1, left=Tree(0, word="a", wid=1), right=Tree(-1, word="b", wid=4))  # "b" is a neutral phrase
    emb, leaf, gates, cand = model.embedding.weight, model.leaf_cell.linear, model.composer.gates, \
        model.composer.candidate
    hl = torch.tanh(leaf.weight @ emb[1] + leaf.bias)
    hr = torch.tanh(leaf.weight @ emb[4] + leaf.bias)
    g = torch.sigmoid(gates.weight @ torch.cat([hl, hr]) + gates.bias)
    z, rl, rr = g[0:3], g[3:6], g[6:9]
    h = z * (hl + hr) / 2 + (1 - z) * torch.tanh(cand.weight @ torch.cat([rl * hl, rr * hr]) + cand.bias)
    with torch.no_grad():
        logits = model(tree)
        assert logits.shape == (2, 2)  # "a" and the root; the neutral "b" emits nothing
        torch.testing.assert_close(logits[0], model.output.weight @ hl + model.output.bias)
        torch.testing.assert_close(logits[1], model.output.weight @ h + model.output.bias)
        torch.testing.assert_close(model.loss(tree), nn.functional.cross_entropy(logits, torch.tensor([0, 1])))


def test_fused_adagrad_makes_the_same_update(small_data: tuple[list[Tree], int]) -> None:
    """``make_optimizer(fused=True)`` (the bench's ``--fused-optimizer``) is torch's fused Adagrad: after three steps on
    the same batches, the same parameters as the for-loop one (to float rounding)."""
    trees, vocab_size = small_data
    models = []
    for fused in (False, True):
        torch.manual_seed(0)
        model = BinaryTreeLSTM(vocab_size=vocab_size, emb_dim=8, hidden=6)
        opt = make_optimizer(model, fused=fused)
        assert bool(opt.defaults["fused"]) is fused
        for batch in list(batches(trees, batch_size=10, seed=0))[:3]:
            opt.zero_grad()
            batch_loss(model, batch).backward()
            opt.step()
        models.append(model)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bench_reads_sst_from_the_given_folder_or_says_it_uses_synthetic(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from graphsub.bench.dynamic import BenchConfig, load_workload

    (tmp_path / "train.txt").write_text("\n".join([EXAMPLE, "(3 (2 so) (4 good))", "(0 (1 bad) (2 .))"]) + "\n",
                                        encoding="utf-8")
    monkeypatch.delenv(SST_ENV, raising=False)
    given = load_workload(BenchConfig(batches=1, batch_size=2, data="sst", sst_dir=str(tmp_path)))
    assert given.data == "sst" and given.note == ""
    assert [t.to_ptb() for t in given.trees] == [t.to_ptb() for t in load_sst(tmp_path, split="train")[:2]]
    fallback = load_workload(BenchConfig(batches=1, batch_size=2, data="sst"))
    assert fallback.data == "synthetic" and "synthetic treebank" in fallback.note and SST_ENV in fallback.note
