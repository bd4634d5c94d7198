"""Graph explainers of fusion-group invalidity: which edges make the GNN call a group invalid?

Each explainer maps ``(cost model, group)`` to a ranked list of op edges ``(src, dst)`` of the
group (``src < dst``), most responsible first, at most ``top_k`` of them.  They explain the
:class:`~graphsub.layer_fusion.gnn.ValidityClassifier`'s *invalid* logit; the recursive greedy split
(:mod:`graphsub.layer_fusion.split`) turns the edges into candidate cuts.

* :class:`GNNExplainerX` -- PyG's ``GNNExplainer`` (graph level, ``explanation_type='model'``,
  ``edge_mask_type='object'``), optimised from scratch for every group (reference §4).
* :class:`PGExplainerX` -- PyG's ``PGExplainer`` (``explanation_type='phenomenon'``, target =
  invalid): an MLP over the two endpoint embeddings of every edge, pre-trained once
  (:meth:`PGExplainerX.fit`) and then applied in one forward pass.
* :class:`RGExplainerX` -- RG-Explainer (Shan et al. 2021), implemented here on top of the GNN's
  node embeddings ``h`` (frozen): a *locator* MLP over ``[sum h || h_v]`` picks the seed node; a
  *generator* policy repeatedly adds one neighbour ``u`` of the current node set ``S``
  (score ``MLP([sum_S h || h_u])``) or stops (score ``MLP([sum_S h || sum h])``).  Trained with
  REINFORCE (moving-average baseline; no stop before ``min_nodes`` = 3 nodes, else the
  agent learns to stop at the seed and explains nothing) on the reward
  ``-BCE(f(G*), f(G)) - size_reg * |E*| - radius_reg * depth`` where ``G*`` is the subgraph
  induced by ``S``.  Deviation: the original also pre-trains the generator supervised and adds an
  embedding-similarity term; neither is done here.  Explanation = greedy rollout; edges ranked by
  the order their endpoint joined ``S``.

The edge masks of PyG are per directed edge of the undirected PyG graph; the mask of an op edge
is the max of its two directions.  Explanations are memoized per ``(cost model, group)``.

>>> import random
>>> from graphsub import zoo
>>> from graphsub.layer_fusion import LBDFCost, fusion_graph
>>> from graphsub.layer_fusion.gnn import build_dataset, train
>>> ds = build_dataset(["resnet18"], "lbdf", plans_per_buffer=4, buffers_kb=(256,), seed=0)
>>> clf, _ = train(ds, epochs=1, seed=0)
>>> cost = LBDFCost(ds.graphs["resnet18"], 256 * 1024)
>>> group = (0, 1, 2, 3)
>>> edges = GNNExplainerX(clf, epochs=5).explain(cost, group)
>>> set(edges) <= {(0, 1), (1, 2), (2, 3)}, len(edges) == 3
(True, True)
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from graphsub.errors import GraphsubError
from graphsub.layer_fusion.cost import FusionCostModel
from graphsub.layer_fusion.gnn import ValidityClassifier, group_edges, torch_threads
from graphsub.layer_fusion.plan import Group

Edge = tuple[int, int]
MODEL_CONFIG = {"mode": "binary_classification", "task_level": "graph", "return_type": "raw"}


class GroupExplainer(ABC):
    """Base: memoized ``explain(cost, group) -> ranked op edges`` (at most ``top_k``)."""

    name = "abstract"

    def __init__(self, clf: ValidityClassifier, top_k: int = 8, seed: int = 0):
        self.clf = clf
        self.top_k = top_k
        self.seed = seed
        self._memo: dict[tuple[int, Group], list[Edge]] = {}
        self.calls = 0

    def explain(self, cost: FusionCostModel, group: Group) -> list[Edge]:
        key = (id(cost), group)
        hit = self._memo.get(key)
        if hit is None:
            edges = group_edges(cost.fg, group)
            if not edges:
                hit = []
            else:
                torch.manual_seed(self.seed)
                with torch_threads(1):
                    scores = self._scores(cost, group, edges)
                order = sorted(range(len(edges)), key=lambda e: (-scores[e], e))
                hit = [edges[e] for e in order if scores[e] > float("-inf")][: self.top_k]
            self._memo[key] = hit
            self.calls += 1
        return list(hit)

    def fit(self, cost: FusionCostModel, groups: Sequence[Group]) -> None:  # noqa: B027 - optional hook
        """Pre-train on invalid ``groups`` of ``cost`` (no-op for explainers without parameters)."""

    @property
    def trained(self) -> bool:
        return True

    @abstractmethod
    def _scores(self, cost: FusionCostModel, group: Group, edges: list[Edge]) -> list[float]:
        """One importance score per op edge of ``edges`` (``-inf``: not in the explanation)."""


def _edge_scores(mask: Tensor, n_edges: int) -> list[float]:
    m = mask.detach().view(-1)
    return [max(float(m[2 * e]), float(m[2 * e + 1])) for e in range(n_edges)]


class GNNExplainerX(GroupExplainer):
    """PyG ``GNNExplainer`` (``epochs`` optimisation steps per group)."""

    name = "gnne"

    def __init__(self, clf: ValidityClassifier, top_k: int = 8, seed: int = 0, epochs: int = 100):
        super().__init__(clf, top_k, seed)
        self.epochs = epochs

    def _scores(self, cost: FusionCostModel, group: Group, edges: list[Edge]) -> list[float]:
        from torch_geometric.explain import Explainer, GNNExplainer

        d = self.clf.data(cost, group)
        ex = Explainer(self.clf.model, GNNExplainer(epochs=self.epochs, lr=0.01), explanation_type="model",
                       node_mask_type=None, edge_mask_type="object", model_config=MODEL_CONFIG)
        exp = ex(d.x, d.edge_index)
        return _edge_scores(exp.edge_mask, len(edges))


class _Trained(GroupExplainer):
    """An explainer with parameters of its own, trained on PyG graphs of groups (``_fit``)."""

    def fit(self, cost: FusionCostModel, groups: Sequence[Group]) -> None:
        self.fit_data([self.clf.data(cost, g) for g in groups if group_edges(cost.fg, g)])

    def fit_data(self, graphs: Sequence[Any]) -> None:
        """Train on PyG graphs of the groups to explain (one torch thread)."""
        with torch_threads(1):
            self._fit(graphs)

    @abstractmethod
    def _fit(self, graphs: Sequence[Any]) -> None: ...


class PGExplainerX(_Trained):
    """PyG ``PGExplainer``; :meth:`fit` trains its MLP (``epochs`` passes over the groups)."""

    name = "pg"

    def __init__(self, clf: ValidityClassifier, top_k: int = 8, seed: int = 0, epochs: int = 25, lr: float = 0.003):
        super().__init__(clf, top_k, seed)
        from torch_geometric.explain import Explainer, PGExplainer

        self.epochs = epochs
        self.algorithm = PGExplainer(epochs=epochs, lr=lr)
        self.explainer = Explainer(self.clf.model, self.algorithm, explanation_type="phenomenon",
                                   edge_mask_type="object", model_config=MODEL_CONFIG)
        state = clf.extra.get("pg")
        if state is not None:
            self._materialize()
            self.algorithm.mlp.load_state_dict(state)
            self.algorithm._curr_epoch = epochs - 1

    def _materialize(self) -> None:
        hidden = self.clf.model.head.in_features
        with torch.no_grad():
            self.algorithm.mlp(torch.zeros(1, 2 * hidden))

    @property
    def trained(self) -> bool:
        return bool(self.algorithm._curr_epoch >= self.epochs - 1)

    def _fit(self, graphs: Sequence[Any]) -> None:
        torch.manual_seed(self.seed)
        self.algorithm.reset_parameters()
        self._materialize()
        self.algorithm.optimizer = torch.optim.Adam(self.algorithm.mlp.parameters(), lr=self.algorithm.lr)
        target = torch.tensor([1.0])
        for ep in range(self.epochs):
            for d in graphs:
                if d.edge_index.size(1):
                    self.algorithm.train(ep, self.clf.model, d.x, d.edge_index, target=target)
        self.algorithm._curr_epoch = self.epochs - 1
        self.clf.extra["pg"] = {k: v.clone() for k, v in self.algorithm.mlp.state_dict().items()}
        self._memo.clear()

    def _scores(self, cost: FusionCostModel, group: Group, edges: list[Edge]) -> list[float]:
        if not self.trained:
            raise GraphsubError("PGExplainer is not trained: call fit() or load weights with a 'pg' entry")
        d = self.clf.data(cost, group)
        exp = self.explainer(d.x, d.edge_index, target=torch.tensor([1.0]))
        return _edge_scores(exp.edge_mask, len(edges))


def _mlp(d_in: int, hidden: int = 64) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, 1))


class RGAgent(nn.Module):
    """Locator and generator of RG-Explainer over frozen node embeddings of width ``h``."""

    def __init__(self, h: int):
        super().__init__()
        self.locator = _mlp(2 * h)
        self.policy = _mlp(2 * h)
        self.stop = _mlp(2 * h)

    def seed_logits(self, emb: Tensor) -> Tensor:
        g = emb.sum(0, keepdim=True).expand_as(emb)
        return self.locator(torch.cat([g, emb], 1)).view(-1)

    def step_logits(self, emb: Tensor, members: list[int], cands: list[int]) -> Tensor:
        s = emb[members].sum(0, keepdim=True)
        g = emb.sum(0, keepdim=True)
        add = self.policy(torch.cat([s.expand(len(cands), -1), emb[cands]], 1)).view(-1)
        stop = self.stop(torch.cat([s, g], 1)).view(-1)
        return torch.cat([add, stop])


class RGExplainerX(_Trained):
    """RG-Explainer (see the module docstring); :meth:`fit` runs REINFORCE for ``epochs``."""

    name = "rg"

    def __init__(self, clf: ValidityClassifier, top_k: int = 8, seed: int = 0, epochs: int = 10,
                 max_nodes: int = 8, min_nodes: int = 3, size_reg: float = 0.01, radius_reg: float = 0.01,
                 lr: float = 0.01):
        super().__init__(clf, top_k, seed)
        self.epochs = epochs
        self.max_nodes = max_nodes
        self.min_nodes = min_nodes
        self.size_reg = size_reg
        self.radius_reg = radius_reg
        self.lr = lr
        torch.manual_seed(seed)
        self.agent = RGAgent(clf.model.head.in_features)
        state = clf.extra.get("rg")
        self._trained = state is not None
        if state is not None:
            self.agent.load_state_dict(state)

    @property
    def trained(self) -> bool:
        return self._trained

    # -------------------------------------------------------------- rollouts
    @staticmethod
    def _adjacency(edge_index: Tensor, n: int) -> list[list[int]]:
        adj: list[list[int]] = [[] for _ in range(n)]
        for a, b in edge_index.t().tolist():
            if b not in adj[a]:
                adj[a].append(b)
        return adj

    def _rollout(self, emb: Tensor, adj: list[list[int]], greedy: bool,
                 rng: torch.Generator | None) -> tuple[list[int], list[int], Tensor]:
        """``(nodes in join order, depth of each, sum of log-probs)``."""

        def pick(logits: Tensor) -> tuple[int, Tensor]:
            logp = torch.log_softmax(logits, 0)
            i = int(logp.argmax()) if greedy else int(torch.multinomial(logp.exp(), 1, generator=rng))
            return i, logp[i]

        v, lp = pick(self.agent.seed_logits(emb))
        nodes, depth, total = [v], {v: 0}, lp
        while len(nodes) < self.max_nodes:
            cands = sorted({u for w in nodes for u in adj[w]} - set(nodes))
            if not cands:
                break
            logits = self.agent.step_logits(emb, nodes, cands)
            if len(nodes) < self.min_nodes:  # no stopping before min_nodes: an explanation has edges
                logits = torch.cat([logits[:-1], logits.new_full((1,), float("-inf"))])
            i, lp = pick(logits)
            total = total + lp
            if i == len(cands):
                break
            u = cands[i]
            depth[u] = 1 + min(depth[w] for w in nodes if u in adj[w])
            nodes.append(u)
        return nodes, [depth[u] for u in nodes], total

    def _sub_prob(self, x: Tensor, edge_index: Tensor, nodes: list[int]) -> Tensor:
        keep = torch.zeros(x.size(0), dtype=torch.bool)
        keep[nodes] = True
        remap = torch.full((x.size(0),), -1, dtype=torch.long)
        remap[keep] = torch.arange(int(keep.sum()))
        m = keep[edge_index[0]] & keep[edge_index[1]]
        return torch.sigmoid(self.clf.model(x[keep], remap[edge_index[:, m]])).view(-1)

    def _fit(self, graphs: Sequence[Any]) -> None:
        torch.manual_seed(self.seed)
        rng = torch.Generator().manual_seed(self.seed)
        self.agent = RGAgent(self.clf.model.head.in_features)
        opt = torch.optim.Adam(self.agent.parameters(), lr=self.lr)
        model = self.clf.model.eval()
        prepared = []
        with torch.no_grad():
            for d in graphs:
                if d.edge_index.size(1):
                    p = torch.sigmoid(model(d.x, d.edge_index)).view(-1)
                    prepared.append((d, model.embed(d.x, d.edge_index), p,
                                     self._adjacency(d.edge_index, d.x.size(0))))
        baseline = 0.0
        order = list(range(len(prepared)))
        shuffle = random.Random(self.seed)
        for ep in range(self.epochs):
            shuffle.shuffle(order)
            for i in order:
                d, emb, p, adj = prepared[i]
                nodes, depth, logp = self._rollout(emb, adj, greedy=False, rng=rng)
                with torch.no_grad():
                    q = self._sub_prob(d.x, d.edge_index, nodes)
                    ce = float(nn.functional.binary_cross_entropy(q.clamp(1e-6, 1 - 1e-6), p))
                n_edges = sum(1 for a in nodes for b in nodes if a < b and b in adj[a])
                reward = -ce - self.size_reg * n_edges - self.radius_reg * max(depth)
                baseline = reward if ep == 0 and i == order[0] else 0.9 * baseline + 0.1 * reward
                loss = -(reward - baseline) * logp
                opt.zero_grad()
                loss.backward()
                opt.step()
        self._trained = True
        self.clf.extra["rg"] = {k: v.clone() for k, v in self.agent.state_dict().items()}
        self._memo.clear()

    def _scores(self, cost: FusionCostModel, group: Group, edges: list[Edge]) -> list[float]:
        if not self._trained:
            raise GraphsubError("RG-Explainer is not trained: call fit() or load weights with an 'rg' entry")
        d = self.clf.data(cost, group)
        with torch.no_grad():
            emb = self.clf.model.embed(d.x, d.edge_index)
            nodes, _, _ = self._rollout(emb, self._adjacency(d.edge_index, d.x.size(0)), greedy=True, rng=None)
        rank = {u: i for i, u in enumerate(nodes)}
        pos = {v: i for i, v in enumerate(group)}
        scores = []
        for u, v in edges:
            a, b = pos[u], pos[v]
            scores.append(-float(max(rank[a], rank[b])) if a in rank and b in rank else float("-inf"))
        return scores


EXPLAINERS: dict[str, type[GroupExplainer]] = {"gnne": GNNExplainerX, "pg": PGExplainerX, "rg": RGExplainerX}


def make_explainer(name: str, clf: ValidityClassifier, **kwargs: Any) -> GroupExplainer:
    try:
        cls = EXPLAINERS[name]
    except KeyError:
        raise GraphsubError(f"unknown explainer {name!r}; choose from {sorted(EXPLAINERS)}") from None
    return cls(clf, **kwargs)


def invalid_groups_for_fit(cost: FusionCostModel, rng: random.Random, plans: int = 30,
                           limit: int = 64) -> list[Group]:
    """Invalid groups (>= 2 ops) of random plans of ``cost``: training data for PG / RG when no
    pre-trained parameters are available."""
    from graphsub.layer_fusion.moves import random_plan

    out: dict[Group, None] = {}
    for _ in range(plans):
        for g in random_plan(cost.fg, rng, 0.5 + 0.5 * rng.random(), cost.unfusable).groups:
            if len(g) > 1 and not cost.valid(g):
                out[g] = None
    groups = list(out)
    return groups if len(groups) <= limit else rng.sample(groups, limit)


__all__ = ["EXPLAINERS", "Edge", "GNNExplainerX", "GroupExplainer", "PGExplainerX", "RGAgent", "RGExplainerX",
           "invalid_groups_for_fit", "make_explainer"]
