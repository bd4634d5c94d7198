"""Node labels, substitution dependence and the partial order of OCGGS (Fang et al., VLDB 2020, §3.1).

* **Node label** (Definition 6): a node of the initial graph is labelled ``(-1, id)`` (the dummy
  substitution ``N`` is step ``-1``); a node created by the ``i``-th substitution of a sequence
  (``i`` from 0) is labelled ``(i, j)`` with ``j`` its index among that substitution's new nodes
  (the target-graph node it came from, in creation order).  Labels compare lexicographically,
  like ``compNode`` in the authors' code (``SIStepOrder``, ``SIidx|guid``).  Node ids are stable
  across copy-on-write edits, so a label is stored only for created nodes (:class:`Labels`):
  O(K x target size) per state, copied from the parent and extended.
* **Dependence** (Definition 7): a substitution depends on step ``i`` if it replaces (matches) a
  node labelled ``(i, .)``.  We also count a match that uses a node the previous step rewired
  (its *footprint*: new nodes, rewired consumers, producers that gained or lost consumers) as
  depending on it -- more permissive than the authors' code, never less.
* **Order** (Definition 8): as in the authors' code (``compStep``), a substitution's key is the
  largest label among the nodes it matches (``biggestNode``); a substitution may follow the
  previous one iff its key is not smaller, or it depends on the previous step.  A step that
  consumes nodes made by the previous step always has a larger key; independent steps survive
  only in canonical (key) order, which is what Theorem 4 needs (sorting by the order keeps the
  optimized graph).  Ties (equal keys) happen only when two matches share their largest node, so
  they are not independent and are kept.

A sequence is **ordered** iff every consecutive pair respects the order (:func:`is_ordered`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graphsub.ir.graph import Graph
from graphsub.rules.apply import apply
from graphsub.rules.match import Match

Label = tuple[int, int]
DUMMY = -1  # the dummy substitution N of Definition 6


@dataclass(frozen=True)
class Labels:
    """Labels of the nodes created along one substitution sequence (Definition 6).

    ``created`` maps a created node id to ``(step, j)``; every other node is an initial-graph node
    labelled ``(-1, id)``.  ``footprint`` is the set of node ids the last step created or rewired,
    ``key`` the last step's key (``(-1, -1)`` for the empty sequence).
    """

    created: dict[int, Label]
    step: int = -1
    key: Label = (DUMMY, -1)
    footprint: frozenset[int] = frozenset()

    def label(self, nid: int) -> Label:
        """Γ_v of node ``nid``."""
        return self.created.get(nid, (DUMMY, nid))

    def key_of(self, match: Match) -> Label:
        """The largest label among the nodes ``match`` replaces (the authors' ``biggestNode``)."""
        return max(self.label(n) for n in match.node_ids)

    def depends_on(self, match: Match) -> frozenset[int]:
        """Steps ``match`` depends on (Definition 7); ``-1`` is the dummy substitution N."""
        return frozenset(self.label(n)[0] for n in match.node_ids)

    def depends_on_last(self, match: Match) -> bool:
        """Whether ``match`` depends on the last step: it replaces a node that step created, or
        uses a node it rewired (``footprint``)."""
        if self.step < 0:
            return False
        return any(n in self.footprint or self.created.get(n, (DUMMY, 0))[0] == self.step for n in match.node_ids)

    def follows(self, match: Match) -> bool:
        """Definition 8 between the last step ``τ*`` and ``match``: ``τ* ⪯ match``."""
        if self.step < 0:
            return True
        return self.key_of(match) >= self.key or self.depends_on_last(match)

    def extend(self, match: Match, child: Graph) -> Labels:
        """Labels after applying ``match`` as the next step; ``child`` is the graph it produced."""
        info = child.edit_info()
        step = self.step + 1
        created = dict(self.created)
        if info is None:
            return Labels(created, step, self.key_of(match))
        added, removed, touched = info
        for nid in removed:
            created.pop(nid, None)
        for j, nid in enumerate(sorted(added)):
            created[nid] = (step, j)
        return Labels(created, step, self.key_of(match), frozenset(added) | frozenset(touched))


ROOT = Labels({})


def labels_of(graph: Graph, matches: Sequence[Match]) -> tuple[Graph, Labels, bool]:
    """Apply ``matches`` in turn (each found in the previous graph) and return the final graph,
    its labels, and whether the sequence is ordered (Definition 8)."""
    lab, ordered = ROOT, True
    for m in matches:
        ordered = ordered and lab.follows(m)
        graph = apply(graph, m).graph
        lab = lab.extend(m, graph)
    return graph, lab, ordered


def is_ordered(graph: Graph, matches: Sequence[Match]) -> bool:
    """Whether the substitution sequence ``matches`` on ``graph`` is ordered: ``τ_1 ⪯ ... ⪯ τ_k``."""
    return labels_of(graph, matches)[2]


__all__ = ["DUMMY", "ROOT", "Label", "Labels", "is_ordered", "labels_of"]
