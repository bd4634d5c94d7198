"""Stanford Sentiment Treebank trees: parsing, loading, vocabulary, and a calibrated synthetic treebank.

The dynamic workloads (:mod:`graphsub.dynamic.workloads.models`) recurse over these trees in plain Python, so
the *structure* of the data is what drives the traced graphs: each sentence yields a different DAG.

Trees
    :class:`Tree` is a binary constituency tree with an integer label on every node. A leaf holds a
    ``word`` (and, once encoded with :func:`encode_tree`, a word id ``wid``); an internal node holds a
    ``left`` and a ``right`` subtree. Nodes compare and hash by *identity*, so they can key per-node
    caches even when two subtrees are spelt the same; compare structure with :meth:`Tree.to_ptb`.

Parsing
    :func:`parse_ptb` reads one PTB-format line, ``(3 (2 It) (4 (2 's) (4 good)))``. A leaf token is
    read up to the next ``)``, so tokens with a space survive (SST train has ``8 1\\/2``, with a
    no-break space). Tokens are kept verbatim (``\\/``, ``-LRB-``), so ``parse_ptb(line).to_ptb() == line``
    on SST. Well-formed lines take a regex fast path; anything else goes through a strict character parser.

Loading
    :func:`load_sst` reads ``train.txt``/``dev.txt``/``test.txt`` from the shared data folder (see
    :func:`find_sst_root`). With ``binary=True`` sentences with a neutral root are dropped and every
    node label is mapped ``0, 1 -> 0`` (negative), ``3, 4 -> 1`` (positive), ``2 -> -1`` (neutral;
    ``-1`` can be passed as ``ignore_index`` to a per-node loss). Roots are then never ``-1``.

Synthetic data
    :func:`synthetic_treebank` draws SST-like trees (length histogram, left/right branching rates,
    Zipfian words) for tests and for machines without the data folder.

>>> t = parse_ptb("(3 (2 It) (4 (2 's) (4 good)))")
>>> t.length, t.size, t.depth, [leaf.word for leaf in t.leaves()]
(3, 5, 2, ['It', "'s", 'good'])
>>> to_binary(t).to_ptb()
"(1 (-1 It) (1 (-1 's) (1 good)))"
"""

from __future__ import annotations

import gc
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphsub.errors import GraphsubError

SPLITS = ("train", "dev", "test")
"""Split names; each is a file ``<split>.txt`` in the data folder."""

SST_ENV = "GRAPHSUB_SST"
"""Environment variable naming the SST folder; it takes precedence over the search from this file."""

NEUTRAL = -1
"""Binary label of a neutral (label 2) node after :func:`to_binary`."""

_BINARY = {0: 0, 1: 0, 2: NEUTRAL, 3: 1, 4: 1}


class SSTNotFound(GraphsubError):
    """The SST data folder (or one of its split files) is not on this machine."""


@dataclass(eq=False, slots=True)
class Tree:
    """A binary constituency tree: a leaf (``word``) or an internal node (``left`` and ``right``).

    ``wid`` is the word id of a leaf once encoded by :func:`encode_tree` (``None`` before). Treat
    trees as immutable values: functions here build new trees instead of editing nodes.
    """

    label: int
    word: str | None = None
    left: Tree | None = None
    right: Tree | None = None
    wid: int | None = None

    def __post_init__(self) -> None:
        if self.word is None:
            if self.left is None or self.right is None:
                raise ValueError("Tree: an internal node needs both left and right children (or give a word)")
        elif self.left is not None or self.right is not None:
            raise ValueError(f"Tree: leaf {self.word!r} cannot have children")

    @property
    def is_leaf(self) -> bool:
        """True for a word node."""
        return self.word is not None

    @property
    def children(self) -> tuple[Tree, ...]:
        """``()`` for a leaf, ``(left, right)`` otherwise."""
        if self.left is None or self.right is None:
            return ()
        return (self.left, self.right)

    def nodes(self) -> list[Tree]:
        """All nodes in post-order (children before parents: an evaluation order)."""
        out: list[Tree] = []
        stack: list[tuple[Tree, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded or node.is_leaf:
                out.append(node)
            else:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(node.children))
        return out

    def leaves(self) -> list[Tree]:
        """Leaf nodes, left to right (the sentence)."""
        return [n for n in self.nodes() if n.is_leaf]

    def internal_nodes(self) -> list[Tree]:
        """Internal nodes in post-order (children before parents)."""
        return [n for n in self.nodes() if not n.is_leaf]

    def words(self) -> list[str]:
        """The sentence: leaf words, left to right."""
        return [n.word for n in self.nodes() if n.word is not None]

    @property
    def length(self) -> int:
        """Number of words (leaves)."""
        return (self.size + 1) // 2

    @property
    def size(self) -> int:
        """Number of nodes (``2 * length - 1`` for a binary tree)."""
        return len(self.nodes())

    @property
    def depth(self) -> int:
        """Height: 0 for a leaf, ``1 + max(child depths)`` otherwise."""
        heights: dict[int, int] = {}
        for n in self.nodes():
            heights[id(n)] = 1 + max(heights[id(c)] for c in n.children) if n.children else 0
        return heights[id(self)]

    def map_labels(self, fn: dict[int, int]) -> Tree:
        """A copy of this tree with every label ``l`` replaced by ``fn[l]`` (``KeyError`` if missing)."""
        new: dict[int, Tree] = {}
        for n in self.nodes():
            if n.left is None or n.right is None:
                new[id(n)] = Tree(fn[n.label], word=n.word, wid=n.wid)
            else:
                new[id(n)] = Tree(fn[n.label], left=new[id(n.left)], right=new[id(n.right)])
        return new[id(self)]

    def to_ptb(self) -> str:
        """The PTB-format string, e.g. ``(3 (2 It) (4 (2 's) (4 good)))``."""
        parts: dict[int, str] = {}
        for n in self.nodes():
            if n.left is None or n.right is None:
                parts[id(n)] = f"({n.label} {n.word})"
            else:
                parts[id(n)] = f"({n.label} {parts[id(n.left)]} {parts[id(n.right)]})"
        return parts[id(self)]

    def __str__(self) -> str:
        return self.to_ptb()

    def __repr__(self) -> str:
        text = self.to_ptb()
        return f"Tree({text if len(text) <= 80 else text[:77] + '...'!r})"


# ----------------------------------------------------------------------------------------------- parsing

_LABEL = re.compile(r"-?\d+")


def _error(line: str, pos: int, msg: str) -> ValueError:
    snippet = line[max(0, pos - 15) : pos + 15]
    return ValueError(f"parse_ptb: {msg} at position {pos} (near {snippet!r})")


# One token of well-formed input: a whole leaf "(label word)", an opening "(label" before "(", or ")".
_FAST_TOKEN = re.compile(r"\s*(?:\((-?\d+)\s+([^()\s][^()]*?)\s*\)|\((-?\d+)\s*(?=\()|(\)))")


def _parse_fast(line: str) -> Tree | None:
    """Regex-token parse of the common, well-formed case; ``None`` on anything unusual (then the strict
    character parser decides, and explains errors)."""
    match = _FAST_TOKEN.match
    stack: list[list[int | Tree]] = []  # [label, children...]
    root: Tree | None = None
    pos = 0
    while (m := match(line, pos)) is not None:
        pos = m.end()
        leaf_label, word, open_label, _ = m.groups()
        if leaf_label is not None:
            node = Tree(int(leaf_label), word=word)
        elif open_label is not None:
            stack.append([int(open_label)])
            continue
        else:
            if not stack:
                return None
            frame = stack.pop()
            if len(frame) != 3:
                return None
            label, left, right = frame
            assert isinstance(label, int) and isinstance(left, Tree) and isinstance(right, Tree)
            node = Tree(label, left=left, right=right)
        if stack:
            stack[-1].append(node)
        elif root is None:
            root = node
        else:
            return None
    if stack or root is None or line[pos:].strip():
        return None
    return root


def parse_ptb(line: str) -> Tree:
    """Parse one PTB-format tree, e.g. ``(3 (2 It) (4 (2 's) (4 good)))``.

    Every node is ``(label word)`` or ``(label left right)``; a word is read up to the next ``)``.
    Raises ``ValueError`` naming the character position on empty input, unbalanced parentheses, a
    missing label, a node without exactly one word or two subtrees, or text after the tree.

    >>> parse_ptb("(2 (2 8 1\\\\/2) (2 hours))").words()
    ['8 1\\\\/2', 'hours']
    >>> parse_ptb("(2 (2 a) (2 b)")
    Traceback (most recent call last):
    ...
    ValueError: parse_ptb: unbalanced parentheses: 1 '(' not closed at position 14 (near '(2 (2 a) (2 b)')
    """
    fast = _parse_fast(line)
    if fast is not None:
        return fast
    n = len(line)
    stack: list[tuple[int, int, list[Tree]]] = []  # (label, position of '(', children so far)
    root: Tree | None = None
    i = 0
    while True:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            break
        ch = line[i]
        if root is not None:
            raise _error(line, i, "unbalanced parentheses: ')' without '('" if ch == ")" else "text after the tree")
        if ch == "(":
            start = i
            i += 1
            while i < n and line[i].isspace():
                i += 1
            m = _LABEL.match(line, i)
            if m is None or (m.end() < n and not (line[m.end()].isspace() or line[m.end()] in "()")):
                raise _error(line, i, "missing integer label after '('")
            label = int(m.group())
            i = m.end()
            while i < n and line[i].isspace():
                i += 1
            if i < n and line[i] not in "()":
                end = line.find(")", i)
                if end < 0:
                    raise _error(line, n, f"unbalanced parentheses: {len(stack) + 1} '(' not closed")
                node = Tree(label, word=line[i:end].rstrip())
                i = end + 1
            else:
                stack.append((label, start, []))
                continue
        elif ch == ")":
            if not stack:
                raise _error(line, i, "unbalanced parentheses: ')' without '('")
            label, start, kids = stack.pop()
            if len(kids) != 2:
                raise _error(line, start, f"node has {len(kids)} subtree(s); expected a word or exactly 2 subtrees")
            node = Tree(label, left=kids[0], right=kids[1])
            i += 1
        else:
            raise _error(line, i, f"unexpected {ch!r}; expected '(' or ')'")
        if stack:
            stack[-1][2].append(node)
        else:
            root = node
    if stack:
        raise _error(line, n, f"unbalanced parentheses: {len(stack)} '(' not closed")
    if root is None:
        raise _error(line, n, "empty input")
    return root


def to_binary(tree: Tree) -> Tree:
    """Map 5-class labels to binary on every node: 0, 1 -> 0; 3, 4 -> 1; 2 -> :data:`NEUTRAL` (-1)."""
    try:
        return tree.map_labels(_BINARY)
    except KeyError as e:
        raise ValueError(f"to_binary: label {e.args[0]} is not a 5-class SST label (0-4)") from None


# ----------------------------------------------------------------------------------------------- loading


def find_sst_root() -> Path | None:
    """The SST folder named by ``$GRAPHSUB_SST`` (``train.txt``/``dev.txt``/``test.txt`` in PTB format), or
    ``None`` when the variable is unset or not a folder.  The data is not shipped with graphsub: pass its folder
    (``root=``, ``graphsub dynamic bench --sst PATH``) or set the variable; without it the benchmarks say that
    they use :func:`synthetic_treebank` instead."""
    env = os.environ.get(SST_ENV)
    if env:
        path = Path(env).expanduser()
        return path if path.is_dir() else None
    return None


def _resolve_root(root: Path | str | None) -> Path:
    if root is not None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise SSTNotFound(f"SST folder {path} does not exist")
        return path
    found = find_sst_root()
    if found is None:
        env = os.environ.get(SST_ENV)
        where = f"${SST_ENV}={env!r} is not a folder" if env else f"${SST_ENV} is not set"
        raise SSTNotFound(
            f"SST data not found ({where}). Put train.txt/dev.txt/test.txt in a folder and set ${SST_ENV}, "
            "or use graphsub.dynamic.workloads.sst.synthetic_treebank() instead."
        )
    return found


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: trees are acyclic, and its passes over ~300k fresh nodes cost
    about a third of loading the train split."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_sst(root: Path | str | None = None, split: str = "train", binary: bool = True) -> list[Tree]:
    """Trees of one SST split (``train``, ``dev`` or ``test``), in file order.

    ``root`` defaults to :func:`find_sst_root`. With ``binary=True`` neutral-root sentences are dropped
    and labels mapped by :func:`to_binary` (6920 / 872 / 1821 trees); otherwise all sentences with their
    5-class labels are returned (8544 / 1101 / 2210). Raises :class:`SSTNotFound` if the data is missing.
    """
    if split not in SPLITS:
        raise ValueError(f"load_sst: unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    path = _resolve_root(root) / f"{split}.txt"
    if not path.is_file():
        raise SSTNotFound(f"SST split file {path} does not exist")
    trees: list[Tree] = []
    with path.open(encoding="utf-8") as f, _no_cyclic_gc():
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                tree = parse_ptb(line)
                if binary:
                    if tree.label == 2:
                        continue
                    tree = to_binary(tree)
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}") from None
            trees.append(tree)
    return trees


# ----------------------------------------------------------------------------------------------- vocabulary


class Vocab:
    """Word -> id map; id 0 (:attr:`UNK`) stands for every unknown word.

    >>> v = Vocab.build([parse_ptb("(3 (2 It) (4 (2 's) (4 good)))")])
    >>> len(v), v.encode("good"), v.encode("bad"), v.decode(1)
    (4, 3, 0, 'It')
    """

    UNK = 0
    UNK_WORD = "<unk>"

    def __init__(self, words: Iterable[str] = ()) -> None:
        self._ids: dict[str, int] = {}
        self._words: list[str] = [self.UNK_WORD]
        for w in words:
            self.add(w)

    @classmethod
    def build(cls, trees: Iterable[Tree], min_count: int = 1) -> Vocab:
        """Words occurring at least ``min_count`` times in ``trees``, numbered by first occurrence."""
        counts: Counter[str] = Counter(w for t in trees for w in t.words())
        return cls(w for w, c in counts.items() if c >= min_count)

    def add(self, word: str) -> int:
        """The id of ``word``, adding it if new."""
        wid = self._ids.get(word)
        if wid is None:
            wid = self._ids[word] = len(self._words)
            self._words.append(word)
        return wid

    def encode(self, word: str) -> int:
        """The id of ``word``, or :attr:`UNK` (0)."""
        return self._ids.get(word, self.UNK)

    def encode_all(self, words: Iterable[str]) -> list[int]:
        """Ids of ``words`` (unknown words -> 0)."""
        return [self._ids.get(w, self.UNK) for w in words]

    def decode(self, wid: int) -> str:
        """The word with id ``wid`` (``<unk>`` for 0)."""
        return self._words[wid]

    def __len__(self) -> int:
        """Number of ids, including the unknown id 0 (the embedding table size)."""
        return len(self._words)

    def __contains__(self, word: object) -> bool:
        return word in self._ids


def encode_tree(tree: Tree, vocab: Vocab) -> Tree:
    """A copy of ``tree`` whose leaves carry ``wid = vocab.encode(word)`` (the preprocessing stage)."""
    new: dict[int, Tree] = {}
    for n in tree.nodes():
        if n.left is None or n.right is None:
            assert n.word is not None
            new[id(n)] = Tree(n.label, word=n.word, wid=vocab.encode(n.word))
        else:
            new[id(n)] = Tree(n.label, left=new[id(n.left)], right=new[id(n.right)])
    return new[id(tree)]


# ----------------------------------------------------------------------------------------------- batching


def batches(
    trees: Sequence[Tree], batch_size: int = 20, seed: int = 0, shuffle: bool = True, drop_last: bool = False
) -> Iterator[list[Tree]]:
    """Consecutive batches of ``batch_size`` trees (an order shuffled by ``seed`` if ``shuffle``).

    The last batch may be smaller unless ``drop_last``.

    >>> [len(b) for b in batches([parse_ptb("(1 x)")] * 45, batch_size=20)]
    [20, 20, 5]
    """
    if batch_size < 1:
        raise ValueError(f"batches: batch_size must be >= 1, got {batch_size}")
    order = np.random.default_rng(seed).permutation(len(trees)) if shuffle else np.arange(len(trees))
    for start in range(0, len(trees), batch_size):
        idx = order[start : start + batch_size]
        if drop_last and len(idx) < batch_size:
            return
        yield [trees[int(i)] for i in idx]


# ----------------------------------------------------------------------------------------------- synthetic

SST_LENGTHS = (
    40, 96, 152, 154, 231, 218, 228, 265, 298, 305, 308, 319, 334, 353, 334, 327, 342, 351, 325, 312, 317,
    296, 290, 259, 238, 223, 226, 171, 157, 158, 151, 124, 123, 99, 69, 54, 61, 38, 31, 40, 24, 24, 20, 18,
    11, 3, 8, 8, 4, 4, 3,
)  # fmt: skip
"""Sentence-length histogram of SST train (all 8544 trees): counts of lengths 2, 3, ..., 52 (mean 19.1, sd 9.3)."""

P_LEFT_WORD = (
    0.77, 0.70, 0.58, 0.53, 0.52, 0.51, 0.50, 0.48, 0.47, 0.45, 0.43, 0.42, 0.42, 0.41, 0.41, 0.38, 0.39, 0.37,
    0.36, 0.33, 0.34, 0.34, 0.33, 0.29, 0.28, 0.27, 0.27, 0.29,
)  # fmt: skip
"""P_L(n): probability that a span of n = 3, 4, ..., 30 words splits off a single left word (SST train);
it falls linearly to 0.19 at n = 40 and stays there."""

P_RIGHT_WORD = 0.33
"""Probability of a single right word given that the left child is not one (SST train, flat in n). It makes
about 17% of all splits, the reference's P_R."""

SPLIT_BINOMIAL_P = 0.25
"""Otherwise both children have >= 2 words; the left gets ``2 + Binomial(n - 4, p)``. SST's two-phrase splits
lean left-small; p = 0.25 brings the mean depth to ~9.4 (SST 9.8; p = 0.5 gives 8.5)."""

ZIPF_S = 1.0
"""Zipf exponent of the synthetic word distribution."""


def _p_left(n: int) -> float:
    if n - 3 < len(P_LEFT_WORD):
        return P_LEFT_WORD[n - 3]
    last = len(P_LEFT_WORD) + 2  # 30
    return max(0.19, P_LEFT_WORD[-1] + (0.19 - P_LEFT_WORD[-1]) * (n - last) / (40 - last))


NEUTRAL_RANKS = 50
"""The most frequent synthetic words (ranks ``1..NEUTRAL_RANKS``, like function words) carry no sentiment."""


def _polarity(rank: int) -> int:
    """The fixed sentiment of synthetic word ``w<rank>``: -1, 0 or +1 (a hash, so it needs no table)."""
    if rank <= NEUTRAL_RANKS:
        return 0
    h = (rank * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 29
    h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return (h >> 32) % 3 - 1


def synthetic_treebank(n: int, seed: int, vocab_size: int = 16000) -> list[Tree]:
    """``n`` SST-like binary trees, deterministic in ``seed`` (calibrated on SST train).

    * Length: drawn from :data:`SST_LENGTHS`.
    * Shape: a span of ``m >= 3`` words splits off a single left word with probability ``P_L(m)``
      (:data:`P_LEFT_WORD`), else a single right word with :data:`P_RIGHT_WORD` (always when ``m == 3``),
      else a binomial split (:data:`SPLIT_BINOMIAL_P`). This reproduces SST's depth-1 shape mix at internal
      nodes (left/right child a leaf L or a node N): LN 42%, LL 25%, NN 19%, NL 14%.
    * Words: ``w<r>`` with Zipfian rank ``r`` in ``1..vocab_size``.
    * Labels (binary, every node): Bernoulli(sigmoid(sum of the span's word polarities)), where each word
      has a fixed polarity -1/0/+1 (0 for the :data:`NEUTRAL_RANKS` most frequent); so labels are
      learnable from the words, like sentiment, and about 52% of roots are positive (SST binary: 52%).

    >>> t = synthetic_treebank(1, seed=0)[0]
    >>> t.to_ptb() == synthetic_treebank(1, seed=0)[0].to_ptb(), t.label in (0, 1)
    (True, True)
    """
    if n < 0 or vocab_size < 1:
        raise ValueError(f"synthetic_treebank: need n >= 0 and vocab_size >= 1, got n={n}, vocab_size={vocab_size}")
    rng = np.random.default_rng(seed)
    length_cdf = np.cumsum(SST_LENGTHS) / sum(SST_LENGTHS)
    zipf_cdf = np.cumsum(1.0 / np.arange(1, vocab_size + 1) ** ZIPF_S)
    zipf_cdf /= zipf_cdf[-1]
    lengths = 2 + np.searchsorted(length_cdf, rng.random(n), side="right")

    def label(score: int) -> int:
        return int(rng.random() < 1.0 / (1.0 + np.exp(-score)))

    def build(ranks: list[int]) -> tuple[Tree, int]:
        m = len(ranks)
        if m == 1:
            score = _polarity(ranks[0])
            return Tree(label(score), word=f"w{ranks[0]}"), score
        if m == 2 or rng.random() < _p_left(m):
            k = 1
        elif m == 3 or rng.random() < P_RIGHT_WORD:
            k = m - 1
        else:
            k = 2 + int(rng.binomial(m - 4, SPLIT_BINOMIAL_P))
        left, ls = build(ranks[:k])
        right, rs = build(ranks[k:])
        return Tree(label(ls + rs), left=left, right=right), ls + rs

    trees: list[Tree] = []
    for m in lengths:
        ranks = (1 + np.searchsorted(zipf_cdf, rng.random(int(m)), side="right")).tolist()
        trees.append(build([min(r, vocab_size) for r in ranks])[0])
    return trees


__all__ = [
    "NEUTRAL",
    "P_LEFT_WORD",
    "P_RIGHT_WORD",
    "SPLITS",
    "SST_ENV",
    "SST_LENGTHS",
    "SSTNotFound",
    "Tree",
    "Vocab",
    "batches",
    "encode_tree",
    "find_sst_root",
    "load_sst",
    "parse_ptb",
    "synthetic_treebank",
    "to_binary",
]
