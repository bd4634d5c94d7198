"""GNN classifier of fusion-group validity (the paper's §III-B / §IV-A): does a group fit the buffer?

A fusion group ``phi`` of a :class:`~graphsub.layer_fusion.graph.FusionGraph` at buffer ``beta`` becomes a
small graph: one node per op, the op-to-op edges inside ``phi`` made undirected (PyG's
``GraphConv`` passes messages source -> target only), and per node the features

* **op type**: one-hot over the vocabulary seen in training (plus ``<other>``), and the row
  geometry kind (``conv``, ``dwconv``, ``pool``, ...), kernel height and stride;
* **input / output shape**: ``log2(1 + C, H, W)`` of the op's first activation input and output;
* **weight size**: ``log2(1 + bytes)`` and ``bytes / beta``;
* **buffer size**: ``log2(beta / 1 KB)``; and, relative to ``beta``, the bytes of one output
  row, one input row and the whole output map (so a sum readout can add them up against the
  buffer), plus two flags: the op reads from outside ``phi`` / its output leaves ``phi``.

The model (:class:`ValidityGNN`) is the paper's: 4 ``GraphConv`` (k-GNN, Morris et al.) layers of
width 128 with ReLU, a sum readout (``global_add_pool``) and ``Linear(128, 1)`` giving one
*invalid* logit (label 1 = ``F_beta(phi) >= beta``).

:func:`build_dataset` draws groups from random plans (:func:`~graphsub.layer_fusion.moves.random_plan`,
the Random Search proposal, with the ops unfusable at each buffer size kept alone) of the zoo CNNs
at ``beta`` in {128, 256, 512, 1024, 2048} KB and labels every group at every buffer size where
none of its ops is unfusable, from the cost model (LBDF or BRR; BRR leaves out the
Squeeze-Excite networks as the paper does).  :func:`train` splits 80/10/10 (seeded), trains with
Adam + BCE, keeps the epoch with the best validation accuracy and reports accuracy and F1 (invalid
= positive class) on the test split.  :meth:`ValidityClassifier.save` writes a ``.pt`` state dict
and a ``.json`` with the feature vocabulary; :meth:`ValidityClassifier.load` reads them back.

>>> ds = build_dataset(["resnet18"], "lbdf", plans_per_buffer=4, buffers_kb=(256,), seed=0)
>>> clf, rep = train(ds, epochs=2, seed=0)
>>> 0.0 <= rep["test_accuracy"] <= 1.0, rep["samples"] == len(ds.samples)
(True, True)
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from graphsub.errors import GraphsubError
from graphsub.layer_fusion.cost import KB, CostConfig, FusionCostModel
from graphsub.layer_fusion.graph import FusionGraph
from graphsub.layer_fusion.plan import Group

BUFFERS_KB = (128, 256, 512, 1024, 2048)
KINDS = ("conv", "dwconv", "dense", "pool", "global", "join", "resize", "pad", "eltwise")
HIDDEN = 128
LAYERS = 4
SE_FREE_FOR_BRR = ("squeezenet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "mobilenet_v2")
REL_CAP = 16.0


@contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Run with ``n`` intra-op threads (restored after).  The graphs here are tiny (tens of
    nodes): on a loaded 2-core machine the default 2 threads made one forward/backward ~80x
    slower (190 ms vs 2.3 ms) from OpenMP contention."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class ValidityGNN(nn.Module):
    """``LAYERS`` x ``GraphConv(., hidden, aggr='add')`` + ReLU, sum readout, ``Linear(hidden, 1)``.

    ``forward(x, edge_index, batch=None) -> [num_graphs, 1]`` invalid logits.
    """

    def __init__(self, in_dim: int, hidden: int = HIDDEN, layers: int = LAYERS):
        super().__init__()
        from torch_geometric.nn import GraphConv

        self.convs = nn.ModuleList(
            [GraphConv(in_dim if i == 0 else hidden, hidden, aggr="add") for i in range(layers)])
        self.head = nn.Linear(hidden, 1)

    def embed(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Node embeddings after the last layer (ReLU applied)."""
        h = x
        for conv in self.convs:
            h = torch.relu(conv(h, edge_index))
        return h

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        from torch_geometric.nn import global_add_pool

        h = self.embed(x, edge_index)
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        return self.head(global_add_pool(h, batch))


@dataclass(frozen=True)
class Vocab:
    """Feature vocabulary (saved beside the weights): op names in one-hot order."""

    ops: tuple[str, ...]

    @property
    def dim(self) -> int:
        return len(self.ops) + 1 + len(KINDS) + 2 + 6 + 2 + 1 + 3 + 2

    def to_json(self) -> dict[str, Any]:
        return {"ops": list(self.ops), "kinds": list(KINDS), "hidden": HIDDEN, "layers": LAYERS, "dim": self.dim}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Vocab:
        if list(d.get("kinds", KINDS)) != list(KINDS):
            raise GraphsubError("fusion GNN vocabulary: geometry kinds differ from this version's")
        return cls(tuple(d["ops"]))


def _log(x: float) -> float:
    return math.log2(1.0 + max(x, 0.0))


def group_edges(fg: FusionGraph, group: Group) -> list[tuple[int, int]]:
    """Op-to-op edges ``(u, v)`` inside ``group``, ``u < v``, in a fixed order."""
    members = set(group)
    return [(u, v) for v in group for u in fg.preds[v] if u in members]


def node_features(fg: FusionGraph, group: Group, buffer_bytes: int, bytes_per_elem: int,
                  vocab: Vocab) -> list[list[float]]:
    """Feature rows of the ops of ``group`` (in ``group`` order; see the module docstring)."""
    members = set(group)
    index = {op: i for i, op in enumerate(vocab.ops)}
    nops = len(vocab.ops) + 1
    b = bytes_per_elem
    beta = float(buffer_bytes)
    rows: list[list[float]] = []
    for v in group:
        f = [0.0] * vocab.dim
        f[index.get(fg.ops[v], len(vocab.ops))] = 1.0
        g = fg.geom[v]
        f[nops + KINDS.index(g.kind)] = 1.0
        o = nops + len(KINDS)
        f[o] = _log(g.kernel)
        f[o + 1] = math.log2(float(g.stride)) if g.stride else 0.0
        t_in = fg.preds[v][0]
        ci, hi, wi = fg.shape[t_in]
        c, h, w = fg.shape[v]
        f[o + 2:o + 8] = [_log(ci), _log(hi), _log(wi), _log(c), _log(h), _log(w)]
        wb = b * fg.weight[v]
        f[o + 8] = _log(wb)
        f[o + 9] = min(wb / beta, REL_CAP)
        f[o + 10] = math.log2(beta / KB)
        f[o + 11] = min(b * c * w / beta, REL_CAP)
        f[o + 12] = min(b * ci * wi * max(g.rows, 1) / beta, REL_CAP)
        f[o + 13] = min(b * c * h * w / beta, REL_CAP)
        f[o + 14] = float(any(t not in members for t in fg.preds[v]))
        f[o + 15] = float(fg.is_output[v] or any(x not in members for x in fg.consumers[v]))
        rows.append(f)
    return rows


def to_data(fg: FusionGraph, group: Group, buffer_bytes: int, bytes_per_elem: int, vocab: Vocab,
            label: int | None = None) -> Any:
    """PyG ``Data`` of one group (``edge_index`` undirected: both directions of every edge)."""
    from torch_geometric.data import Data

    pos = {v: i for i, v in enumerate(group)}
    x = torch.tensor(node_features(fg, group, buffer_bytes, bytes_per_elem, vocab), dtype=torch.float32)
    src: list[int] = []
    dst: list[int] = []
    for u, v in group_edges(fg, group):
        src += [pos[u], pos[v]]
        dst += [pos[v], pos[u]]
    ei = torch.tensor([src, dst], dtype=torch.long) if src else torch.zeros((2, 0), dtype=torch.long)
    d = Data(x=x, edge_index=ei)
    if label is not None:
        d.y = torch.tensor([float(label)])
    return d


class ValidityClassifier:
    """A trained :class:`ValidityGNN` with its vocabulary; predicts whether a group is invalid."""

    def __init__(self, model: ValidityGNN, vocab: Vocab, meta: dict[str, Any] | None = None):
        self.model = model.eval()
        self.vocab = vocab
        self.meta = dict(meta or {})
        self.extra: dict[str, dict[str, Tensor]] = {}  # pre-trained explainer parameters

    @classmethod
    def fresh(cls, vocab: Vocab, seed: int = 0) -> ValidityClassifier:
        torch.manual_seed(seed)
        return cls(ValidityGNN(vocab.dim), vocab)

    def data(self, cost: FusionCostModel, group: Group) -> Any:
        return to_data(cost.fg, group, cost.buffer, cost.config.bytes_per_elem, self.vocab)

    @torch.no_grad()
    def prob_invalid(self, cost: FusionCostModel, groups: Sequence[Group]) -> list[float]:
        """Predicted probability that each group is invalid under ``cost``'s buffer."""
        from torch_geometric.data import Batch

        if not groups:
            return []
        batch = Batch.from_data_list([self.data(cost, g) for g in groups])
        with torch_threads(1):
            return torch.sigmoid(self.model(batch.x, batch.edge_index, batch.batch)).view(-1).tolist()

    def save(self, path: str | Path, half: bool = False) -> None:
        """Write ``path`` (``.pt``: state dicts) and ``path`` with suffix ``.json`` (vocabulary, meta).
        ``half``: store float16 (half the size; loading casts back to float32, so predictions
        change in the last bits -- used for the packaged weights)."""
        path = Path(path)
        state: dict[str, dict[str, Tensor]] = {"gnn": self.model.state_dict(), **self.extra}
        if half:
            state = {k: {n: t.half() if t.is_floating_point() else t for n, t in sd.items()} for k, sd in state.items()}
        torch.save(state, path)
        path.with_suffix(".json").write_text(json.dumps({**self.vocab.to_json(), "meta": self.meta}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> ValidityClassifier:
        path = Path(path)
        meta_path = path.with_suffix(".json")
        if not path.is_file() or not meta_path.is_file():
            raise GraphsubError(f"fusion GNN weights: need {path} and {meta_path}")
        try:  # weights_only: a pickle cannot run code; anything malformed is bad input, not a crash
            d = json.loads(meta_path.read_text())
            vocab = Vocab.from_json(d)
            state = torch.load(path, map_location="cpu", weights_only=True)
            state = {k: {n: t.float() if t.is_floating_point() else t for n, t in sd.items()}
                     for k, sd in state.items()}
            model = ValidityGNN(vocab.dim, int(d.get("hidden", HIDDEN)), int(d.get("layers", LAYERS)))
            model.load_state_dict(state.pop("gnn"))
        except Exception as e:
            raise GraphsubError(f"{path}: not fusion-GNN weights written by graphsub ({type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else e!r})") from None
        clf = cls(model, vocab, d.get("meta"))
        clf.extra = dict(state)
        return clf


def default_weights(scheme: str) -> Path:
    """The packaged weights of ``scheme`` (``graphsub/layer_fusion/weights/<scheme>.pt``)."""
    return Path(str(resources.files("graphsub.layer_fusion") / "weights" / f"{scheme}.pt"))


def load_classifier(scheme: str, path: str | Path | None = None) -> ValidityClassifier:
    """``path`` if given, else the packaged weights for ``scheme``."""
    p = Path(path) if path is not None else default_weights(scheme)
    clf = ValidityClassifier.load(p)
    trained = clf.meta.get("scheme")
    if path is None and trained not in (None, scheme):
        raise GraphsubError(f"{p}: trained for scheme {trained!r}, not {scheme!r}")
    return clf


# ---------------------------------------------------------------------------------------- dataset
@dataclass
class Sample:
    model: str
    group: Group
    buffer_kb: int
    label: int  # 1 = invalid


@dataclass
class Dataset:
    """Labelled ``(model, group, buffer)`` samples with the fusion graphs they refer to."""

    scheme: str
    samples: list[Sample]
    graphs: dict[str, FusionGraph]
    vocab: Vocab
    config: CostConfig = field(default_factory=CostConfig)
    groups_per_model: dict[str, int] = field(default_factory=dict)

    def data(self, s: Sample) -> Any:
        return to_data(self.graphs[s.model], s.group, s.buffer_kb * KB, self.config.bytes_per_elem,
                       self.vocab, s.label)

    def summary(self) -> dict[str, Any]:
        pos = sum(s.label for s in self.samples)
        return {"samples": len(self.samples), "invalid": pos, "valid": len(self.samples) - pos,
                "groups_per_model": dict(self.groups_per_model),
                "mean_group_size": sum(len(s.group) for s in self.samples) / max(len(self.samples), 1)}


def default_models(scheme: str) -> list[str]:
    """Zoo CNNs tagged ``fusion`` (BRR: without Squeeze-Excite, as in the paper)."""
    from graphsub import zoo

    names = zoo.list_models(tag="fusion")
    return [m for m in names if scheme != "brr" or m in SE_FREE_FOR_BRR]


def build_dataset(models: Iterable[str], scheme: str, plans_per_buffer: int = 20,
                  buffers_kb: Sequence[int] = BUFFERS_KB, seed: int = 0, max_groups_per_model: int | None = None,
                  config: CostConfig | None = None) -> Dataset:
    """Groups (>= 2 ops) of ``plans_per_buffer`` random plans per model and buffer size, labelled
    at every buffer size of ``buffers_kb`` where none of their ops is unfusable."""
    from graphsub import zoo
    from graphsub.layer_fusion import cost_model, fusion_graph
    from graphsub.layer_fusion.moves import random_plan

    config = config or CostConfig()
    rng = random.Random(seed)
    samples: list[Sample] = []
    graphs: dict[str, FusionGraph] = {}
    ops: set[str] = set()
    per_model: dict[str, int] = {}
    for name in models:
        fg = fusion_graph(zoo.get(name))
        graphs[name] = fg
        ops.update(fg.ops)
        costs = {kb: cost_model(fg, scheme, kb * KB, config) for kb in buffers_kb}
        pool: dict[Group, None] = {}
        for kb in buffers_kb:
            for _ in range(plans_per_buffer):
                for g in random_plan(fg, rng, None, costs[kb].unfusable).groups:
                    if len(g) > 1:
                        pool[g] = None
        groups = list(pool)
        if max_groups_per_model is not None and len(groups) > max_groups_per_model:
            groups = rng.sample(groups, max_groups_per_model)
        per_model[name] = len(groups)
        for g in groups:
            for kb in buffers_kb:
                c = costs[kb]
                if c.unfusable.intersection(g):
                    continue
                samples.append(Sample(name, g, kb, int(not c.valid(g))))
    return Dataset(scheme, samples, graphs, Vocab(tuple(sorted(ops))), config, per_model)


# ---------------------------------------------------------------------------------------- training
def _split(n: int, seed: int) -> tuple[list[int], list[int], list[int]]:
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    a, b = int(0.8 * n), int(0.9 * n)
    return idx[:a], idx[a:b], idx[b:]


def _metrics(pred: Sequence[int], gold: Sequence[int]) -> dict[str, float]:
    tp = sum(1 for p, g in zip(pred, gold, strict=True) if p and g)
    fp = sum(1 for p, g in zip(pred, gold, strict=True) if p and not g)
    fn = sum(1 for p, g in zip(pred, gold, strict=True) if not p and g)
    correct = sum(1 for p, g in zip(pred, gold, strict=True) if p == g)
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"accuracy": correct / max(len(gold), 1), "f1": f1, "precision": prec, "recall": rec}


@torch.no_grad()
def _predict(model: ValidityGNN, loader: Any) -> tuple[list[int], list[int]]:
    model.eval()
    pred: list[int] = []
    gold: list[int] = []
    for batch in loader:
        logit = model(batch.x, batch.edge_index, batch.batch).view(-1)
        pred += (logit > 0).long().tolist()
        gold += batch.y.view(-1).long().tolist()
    return pred, gold


def train(ds: Dataset, epochs: int = 50, seed: int = 0, lr: float = 1e-3, batch_size: int = 64,
          log: Any = None, threads: int = 1) -> tuple[ValidityClassifier, dict[str, Any]]:
    """Train on an 80/10/10 split of ``ds``; returns the classifier (best validation epoch) and a
    report with test accuracy / F1, the majority-class baseline and timings."""
    with torch_threads(threads):
        return _train(ds, epochs, seed, lr, batch_size, log)


def _train(ds: Dataset, epochs: int, seed: int, lr: float, batch_size: int,
           log: Any) -> tuple[ValidityClassifier, dict[str, Any]]:
    from torch_geometric.loader import DataLoader

    if len(ds.samples) < 10:
        raise GraphsubError(f"fusion GNN: need at least 10 samples, got {len(ds.samples)}")
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    data = [ds.data(s) for s in ds.samples]
    tr, va, te = _split(len(data), seed)
    gen = torch.Generator().manual_seed(seed)
    train_loader = DataLoader([data[i] for i in tr], batch_size=batch_size, shuffle=True, generator=gen)
    val_loader = DataLoader([data[i] for i in va], batch_size=256)
    test_loader = DataLoader([data[i] for i in te], batch_size=256)
    model = ValidityGNN(ds.vocab.dim)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    lossf = nn.BCEWithLogitsLoss()
    best_acc, best_state, history = -1.0, None, []
    t_feat = time.perf_counter() - t0
    for ep in range(epochs):
        model.train()
        total = 0.0
        for batch in train_loader:
            opt.zero_grad()
            loss = lossf(model(batch.x, batch.edge_index, batch.batch).view(-1), batch.y.view(-1))
            loss.backward()
            opt.step()
            total += loss.item() * batch.num_graphs
        vm = _metrics(*_predict(model, val_loader))
        history.append({"epoch": ep, "loss": total / len(tr), "val_accuracy": vm["accuracy"], "val_f1": vm["f1"]})
        if log is not None:
            log(f"epoch {ep:3d} loss {total / len(tr):.4f} val acc {vm['accuracy']:.4f} f1 {vm['f1']:.4f}")
        if vm["accuracy"] > best_acc:
            best_acc = vm["accuracy"]
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    tm = _metrics(*_predict(model, test_loader))
    test_gold = [ds.samples[i].label for i in te]
    majority = max(sum(test_gold), len(test_gold) - sum(test_gold)) / max(len(test_gold), 1)
    report: dict[str, Any] = {
        "scheme": ds.scheme, "seed": seed, "epochs": epochs, "samples": len(data),
        "train": len(tr), "val": len(va), "test": len(te),
        "test_accuracy": tm["accuracy"], "test_f1": tm["f1"], "test_precision": tm["precision"],
        "test_recall": tm["recall"], "test_majority_accuracy": majority, "best_val_accuracy": best_acc,
        "featurize_s": t_feat, "train_s": time.perf_counter() - t0 - t_feat, "history": history,
        **{f"dataset_{k}": v for k, v in ds.summary().items()},
    }
    meta = {"scheme": ds.scheme, "seed": seed, "epochs": epochs, "samples": len(data),
            "test_accuracy": tm["accuracy"], "test_f1": tm["f1"], "models": sorted(ds.graphs),
            "bytes_per_elem": ds.config.bytes_per_elem}
    return ValidityClassifier(model, ds.vocab, meta), report


__all__ = ["BUFFERS_KB", "Dataset", "Sample", "ValidityClassifier", "ValidityGNN", "Vocab", "build_dataset",
           "default_models", "default_weights", "group_edges", "load_classifier", "node_features", "to_data",
           "torch_threads", "train"]
