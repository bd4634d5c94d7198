"""Dynamic workloads written as plain eager PyTorch: a binary Tree-LSTM, a per-step sequence LSTM and a Tree-GRU
supervised at every node.

All three are *define-by-run*: ``forward`` walks the input (a tree, a token list) in Python and issues one
small tensor op after another, so every sentence produces a different graph. They use only ordinary torch
calls -- ``torch.tensor``/``torch.zeros`` for inputs, ``nn.Embedding``, ``nn.Linear``, ``torch.cat``,
``Tensor.chunk``, ``torch.sigmoid``/``torch.tanh``, ``*``/``+``, ``F.dropout``, ``F.cross_entropy``,
``torch.stack``/``mean`` -- and never batch, cache or look at tensor values, so the same code runs eagerly
or under the lazy tracer of :mod:`graphsub.dynamic` (which is what finds and reuses repeated subgraphs).

:class:`BinaryTreeLSTM` is the N-ary (N = 2) Tree-LSTM of Tai et al. 2015 as in stanfordnlp's
``BinaryTreeLSTM.lua``, with the sizes of Liu's thesis (embedding 300, hidden 150, dropout 0.5, binary SST,
loss at the root only):

* leaf: ``x = emb(word)``, ``c = W_c x + b_c``, ``h = sigmoid(W_o x + b_o) * tanh(c)``;
* internal node: one ``Linear(2H, 5H)`` over ``cat([h_l, h_r])`` chunked into ``i, o, f_l, f_r, u``;
  ``c = sigmoid(i) * tanh(u) + sigmoid(f_l) * c_l + sigmoid(f_r) * c_r``, ``h = sigmoid(o) * tanh(c)``;
* output: ``Linear(H, classes)`` on the dropped-out root ``h``.

Every per-node tensor has shape ``[1, H]``. :class:`SeqLSTM` is the matching chain workload: a standard
LSTM over the sentence's words (gate order ``i, f, g, o`` as in ``nn.LSTMCell``), one ``Linear(E + H, 4H)``
per step. The L2 regularisation of the thesis (1e-4) is the optimizer's ``weight_decay``
(:func:`make_optimizer`: Adagrad, lr 0.05, as Tai et al.); the models add no penalty term themselves.
:class:`TreeGRU` has another shape of dynamism: a GRU-style composition with one state per node, and logits
emitted at every labelled node (all SST phrases), so a tree's loss has a variable number of terms.
All are :class:`SentenceClassifier` subclasses: embedding, recurrence, dropout + linear readout of ``h``,
cross-entropy of the labels.  The cells are ``nn.Module`` subclasses (``TreeLeaf``, ``TreeComposer``,
``LSTMStep``, ``GRULeaf``, ``TreeGRUCell``), as PyTorch users write them; module-level capture
(:mod:`graphsub.dynamic.capture`) records each cell call as one node.

Trees must be encoded first (:func:`~graphsub.dynamic.workloads.sst.encode_tree`, the preprocessing stage), so
leaves carry integer word ids.

>>> from graphsub.dynamic.workloads.sst import Vocab, encode_tree, parse_ptb
>>> tree = parse_ptb("(1 (0 It) (1 (0 's) (1 good)))")
>>> tree = encode_tree(tree, Vocab.build([tree]))
>>> model = BinaryTreeLSTM(vocab_size=4, emb_dim=8, hidden=6)
>>> model(tree).shape, model.loss(tree).shape
(torch.Size([1, 2]), torch.Size([]))
>>> SeqLSTM(vocab_size=4, emb_dim=8, hidden=6)(tree_tokens(tree)).shape
torch.Size([1, 2])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphsub.dynamic.workloads.sst import Tree

State = tuple[Tensor, Tensor]
"""``(c, h)`` of one node or time step, each ``[1, H]``."""


def _target(label: int, num_classes: int, device: torch.device) -> Tensor:
    if not 0 <= label < num_classes:
        raise ValueError(
            f"label {label} outside 0..{num_classes - 1} (neutral or 5-class label? "
            "load with binary=True or build the model with num_classes=5)"
        )
    return torch.tensor([label], device=device)


def tree_tokens(tree: Tree) -> list[int]:
    """The word ids of an encoded tree's leaves, left to right (the input of :class:`SeqLSTM`)."""
    ids = [leaf.wid for leaf in tree.leaves()]
    if any(i is None for i in ids):
        raise ValueError("tree_tokens: tree is not encoded; call encode_tree(tree, vocab) first")
    return [i for i in ids if i is not None]


class SentenceClassifier(nn.Module):
    """What both workloads share: a word embedding, the subclass's recurrence, dropout and a linear
    readout of the final ``h``, and the cross-entropy of the sentence label.

    The layers are made in this order -- ``embedding``, the recurrence's (:meth:`build_cells`), ``output``
    -- so that a seeded model gets the same initial weights and ``parameters()`` order as a hand-written one.
    """

    def __init__(
        self, vocab_size: int, emb_dim: int = 300, hidden: int = 150, num_classes: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.num_classes = num_classes
        self.dropout = dropout
        self.embedding = nn.Embedding(vocab_size, emb_dim)
        self.build_cells(emb_dim, hidden)
        self.output = nn.Linear(hidden, num_classes)

    def build_cells(self, emb_dim: int, hidden: int) -> None:
        """Make the recurrence's layers (called by ``__init__`` between the embedding and the readout)."""
        raise NotImplementedError

    def embed(self, wid: int) -> Tensor:
        """The embedding ``[1, E]`` of word id ``wid``."""
        return self.embedding(torch.tensor([wid], device=self.embedding.weight.device))

    def classify(self, h: Tensor) -> Tensor:
        """Class logits ``[1, num_classes]`` from the final ``h`` (dropout, then the linear readout)."""
        return self.output(F.dropout(h, self.dropout, self.training))

    def label_loss(self, logits: Tensor, label: int) -> Tensor:
        """Cross-entropy of ``logits`` against the sentence label (a scalar)."""
        return F.cross_entropy(logits, _target(label, self.num_classes, self.embedding.weight.device))


class TreeLeaf(nn.Module):
    """The leaf cell: ``c = W_c x + b_c``, ``h = sigmoid(W_o x + b_o) * tanh(c)`` from the word's embedding ``x``."""

    def __init__(self, emb_dim: int, hidden: int) -> None:
        super().__init__()
        self.c = nn.Linear(emb_dim, hidden)
        self.o = nn.Linear(emb_dim, hidden)

    def forward(self, x: Tensor) -> State:
        c = self.c(x)
        return c, torch.sigmoid(self.o(x)) * torch.tanh(c)


class TreeComposer(nn.Module):
    """The internal-node cell: one ``Linear(2H, 5H)`` over ``cat([h_l, h_r])`` chunked into ``i, o, f_l, f_r, u``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(2 * hidden, 5 * hidden)

    def forward(self, left: State, right: State) -> State:
        (lc, lh), (rc, rh) = left, right
        i, o, fl, fr, u = self.linear(torch.cat([lh, rh], dim=1)).chunk(5, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * lc + torch.sigmoid(fr) * rc
        h = torch.sigmoid(o) * torch.tanh(c)
        return c, h


class BinaryTreeLSTM(SentenceClassifier):
    """Binary (N-ary, N = 2) Tree-LSTM sentiment classifier, evaluated recursively per tree."""

    leaf_cell: TreeLeaf
    composer: TreeComposer

    def build_cells(self, emb_dim: int, hidden: int) -> None:
        self.leaf_cell = TreeLeaf(emb_dim, hidden)
        self.composer = TreeComposer(hidden)

    def leaf(self, wid: int) -> State:
        """State of a leaf holding word id ``wid``."""
        return self.leaf_cell(self.embed(wid))

    def compose(self, left: State, right: State) -> State:
        """State of an internal node from its children's states."""
        return self.composer(left, right)

    def node_state(self, tree: Tree) -> State:
        """``(c, h)`` of ``tree``'s root, by recursion over the tree (define-by-run)."""
        if tree.left is None or tree.right is None:
            if tree.wid is None:
                raise ValueError(f"leaf {tree.word!r} has no word id; call encode_tree(tree, vocab) first")
            return self.leaf(tree.wid)
        return self.compose(self.node_state(tree.left), self.node_state(tree.right))

    def forward(self, tree: Tree) -> Tensor:
        """Class logits ``[1, num_classes]`` of the sentence ``tree``."""
        _, h = self.node_state(tree)
        return self.classify(h)

    def loss(self, tree: Tree) -> Tensor:
        """Cross-entropy of the root label (a scalar); internal-node labels are not used."""
        return self.label_loss(self(tree), tree.label)

    def parameter_groups(self) -> dict[str, int]:
        """Parameter counts of the parts: ``embedding``, ``leaf`` (W_c, W_o), ``composer``, ``output``."""

        def count(*mods: nn.Module) -> int:
            return sum(p.numel() for m in mods for p in m.parameters())

        return {
            "embedding": count(self.embedding),
            "leaf": count(self.leaf_cell),
            "composer": count(self.composer),
            "output": count(self.output),
        }


class LSTMStep(nn.Module):
    """One LSTM step: ``Linear(E + H, 4H)`` over ``cat([x, h])``, gates ``i, f, g, o`` as in ``nn.LSTMCell``."""

    def __init__(self, emb_dim: int, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(emb_dim + hidden, 4 * hidden)

    def forward(self, x: Tensor, state: State) -> State:
        c, h = state
        i, f, g, o = self.linear(torch.cat([x, h], dim=1)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return c, h


class SeqLSTM(SentenceClassifier):
    """LSTM over a sentence's word ids, one step at a time in Python, classifying the last ``h``."""

    cell: LSTMStep

    def build_cells(self, emb_dim: int, hidden: int) -> None:
        self.cell = LSTMStep(emb_dim, hidden)

    def step(self, wid: int, state: State) -> State:
        """One LSTM step on word id ``wid`` from ``state = (c, h)``."""
        return self.cell(self.embed(wid), state)

    def forward(self, tokens: Sequence[int]) -> Tensor:
        """Class logits ``[1, num_classes]`` of the word-id sequence ``tokens`` (non-empty)."""
        if len(tokens) == 0:
            raise ValueError("SeqLSTM: empty token sequence")
        device = self.embedding.weight.device
        state = (torch.zeros(1, self.hidden, device=device), torch.zeros(1, self.hidden, device=device))
        for wid in tokens:
            state = self.step(wid, state)
        return self.classify(state[1])

    def loss(self, tokens: Sequence[int], label: int) -> Tensor:
        """Cross-entropy of the sentence label (a scalar)."""
        return self.label_loss(self(tokens), label)


class GRULeaf(nn.Module):
    """The Tree-GRU's leaf cell: ``h = tanh(W x + b)`` from the word's embedding ``x``."""

    def __init__(self, emb_dim: int, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(emb_dim, hidden)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.linear(x))


class TreeGRUCell(nn.Module):
    """Binary Tree-GRU composition (after Kokkinos & Potamianos 2017): an update gate ``z`` and one reset gate per
    child from ``[h_l, h_r]``, a candidate from the reset children, ``h = z * (h_l + h_r) / 2 + (1 - z) * h~``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gates = nn.Linear(2 * hidden, 3 * hidden)
        self.candidate = nn.Linear(2 * hidden, hidden)

    def forward(self, left: Tensor, right: Tensor) -> Tensor:
        z, rl, rr = torch.sigmoid(self.gates(torch.cat([left, right], dim=1))).chunk(3, dim=1)
        cand = torch.tanh(self.candidate(torch.cat([rl * left, rr * right], dim=1)))
        return z * (left + right) * 0.5 + (1 - z) * cand


class TreeGRU(SentenceClassifier):
    """Tree-GRU sentiment classifier supervised at every labelled node (all SST phrases, as Tai et al.'s
    fine-grained setting; neutral phrases of the binary task carry no label and are skipped).

    Its dynamism differs from :class:`BinaryTreeLSTM`'s: every labelled node, at every height, emits logits
    (dropout + readout), a tree's loss is one cross-entropy over a variable number of them, and the state is
    a single ``h`` (one output per cell, not a ``(c, h)`` pair).
    """

    leaf_cell: GRULeaf
    composer: TreeGRUCell

    def build_cells(self, emb_dim: int, hidden: int) -> None:
        self.leaf_cell = GRULeaf(emb_dim, hidden)
        self.composer = TreeGRUCell(hidden)

    def states(self, tree: Tree, logits: list[Tensor], labels: list[int]) -> Tensor:
        """``h`` of ``tree``'s root; appends each labelled node's logits and label (post-order)."""
        if tree.left is None or tree.right is None:
            if tree.wid is None:
                raise ValueError(f"leaf {tree.word!r} has no word id; call encode_tree(tree, vocab) first")
            h = self.leaf_cell(self.embed(tree.wid))
        else:
            h = self.composer(self.states(tree.left, logits, labels), self.states(tree.right, logits, labels))
        if tree.label >= 0:
            logits.append(self.classify(h))
            labels.append(tree.label)
        return h

    def forward(self, tree: Tree) -> Tensor:
        """Logits ``[k, num_classes]`` of the ``k`` labelled nodes, in post-order (the root last)."""
        logits: list[Tensor] = []
        self.states(tree, logits, [])
        return torch.cat(logits)

    def loss(self, tree: Tree) -> Tensor:
        """Mean cross-entropy over the tree's labelled nodes (a scalar)."""
        logits: list[Tensor] = []
        labels: list[int] = []
        self.states(tree, logits, labels)
        if any(not 0 <= y < self.num_classes for y in labels):
            raise ValueError(f"TreeGRU: a label outside 0..{self.num_classes - 1} (load with binary=True?)")
        return F.cross_entropy(torch.cat(logits), torch.tensor(labels, device=self.embedding.weight.device))


def batch_loss(model: BinaryTreeLSTM | TreeGRU, trees: Sequence[Tree]) -> Tensor:
    """Mean root loss over a batch of encoded trees (one recursive forward per tree)."""
    if not trees:
        raise ValueError("batch_loss: empty batch")
    return torch.stack([model.loss(t) for t in trees]).mean()


def seq_batch_loss(model: SeqLSTM, trees: Sequence[Tree]) -> Tensor:
    """Mean loss of :class:`SeqLSTM` over encoded trees read as word sequences (root labels)."""
    if not trees:
        raise ValueError("seq_batch_loss: empty batch")
    return torch.stack([model.loss(tree_tokens(t), t.label) for t in trees]).mean()


def make_optimizer(model: nn.Module, lr: float = 0.05, weight_decay: float = 1e-4,
                   fused: bool = False) -> torch.optim.Adagrad:
    """Adagrad as in Tai et al. (lr 0.05); ``weight_decay`` is the thesis's L2 regularisation (1e-4); ``fused``:
    torch's fused CPU implementation (one kernel per parameter instead of four passes; the same update)."""
    return torch.optim.Adagrad(model.parameters(), lr=lr, weight_decay=weight_decay, fused=fused or None)


__all__ = [
    "BinaryTreeLSTM",
    "GRULeaf",
    "LSTMStep",
    "SentenceClassifier",
    "SeqLSTM",
    "State",
    "TreeComposer",
    "TreeGRU",
    "TreeGRUCell",
    "TreeLeaf",
    "batch_loss",
    "make_optimizer",
    "seq_batch_loss",
    "tree_tokens",
]
