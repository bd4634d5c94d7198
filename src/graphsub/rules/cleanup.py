"""graphsub's own general clean-up, linear in the graph: what every exported model carries and no hand-written
pass of a particular architecture is needed for.

Import already folds the shape arithmetic whose inputs are static (``Shape -> Gather -> Concat -> Reshape`` chains
become attributes, :mod:`graphsub.frontends.onnx_import`). :func:`clean` then repeats, until nothing changes (at
most :data:`ROUNDS` times):

1. **folding** of weight-only values (constants computed from constants: a transposed or reshaped weight, a
   position-bias gather, a mask built from constants) into constants, all in one run of the reference executor
   (:func:`graphsub.rules.apply.fold_weights`);
2. **common-subexpression elimination** (:func:`cse`): equal weights (same type and bytes) become one, and two
   nodes with the same operator signature reading the same values become one -- in topological order, so whole
   duplicated subgraphs merge in one pass (TorchScript exports repeat the mask and shape computations per layer);
3. the ``cleanup`` rules (:mod:`graphsub.rules.library.cleanup`: identities, no-op pads/slices/expands/casts/
   reshapes, reshape/view/transpose/cast chains, neutral elements) applied everywhere by the linear-time driver
   :func:`graphsub.rules.everywhere.rewrite_everywhere`; dead values go with each edit.

Every step is a sound rewrite (the rules are verified like all others; folding runs the reference implementations;
CSE merges only deterministic ops), and the whole is verified against the original like any candidate. The
substitutions are returned as steps (:class:`graphsub.rules.replay.RuleStep`): ``fold`` and ``cse`` for the first
two, the rule names for the rest.

>>> import numpy as np
>>> from graphsub.ir.builder import Builder
>>> b = Builder()
>>> x = b.input("x", (2, 3))
>>> w = b.weight("w", (3,), data=np.ones(3, np.float32))
>>> a, c = b.add(b.identity(x), w), b.add(x, w)  # the same sum, spelled twice
>>> g, steps = clean(b.build({"y": b.mul(a, c)}))
>>> sorted(n.op for n in g.nodes.values()), [s.rule for s in steps]
(['add', 'input', 'mul', 'weight'], ['cpu_identity_remove', 'cse'])
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.ops.types import array_digest
from graphsub.rules.rule import RuleStep

if TYPE_CHECKING:
    from graphsub.rules.rule import StepLike

#: at most this many rounds of fold, CSE and rules (each round after the first only runs when the last changed)
ROUNDS = 4
#: ONNX ops that draw random numbers: never merged, however equal their inputs
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                        "Bernoulli", "Dropout"})


def _deterministic(node: Any) -> bool:
    sig = node.sig
    if sig.op == "opaque":
        return sig.attr.get("op_type") not in RANDOM_OPS
    return not sig.opdef.leaf


#: a weight larger than this many elements is digested on a sample of this many (:func:`sample_digest`)
SAMPLE = 1 << 14


def sample_digest(data: np.ndarray) -> int:
    """A digest of ``data`` that reads at most :data:`SAMPLE` of its elements, evenly spaced: weights whose digests
    differ differ, and equal digests are confirmed on the whole arrays. Digesting every byte took 3.5 s of each
    GPT-2 candidate's replays (936 weights, 2026-11-30), where two different weights of a trained or random model
    almost never agree on a sample.

    >>> a = np.arange(100_000, dtype=np.float32)
    >>> sample_digest(a) == sample_digest(a.copy()), sample_digest(a) == sample_digest(a + 1)
    (True, False)
    """
    flat = np.ravel(data)
    step = max(1, flat.size // SAMPLE)
    return array_digest(flat[::step]) if step > 1 else array_digest(data)


def cse(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with equal weights merged and equal computations merged (same signature, same inputs after the
    merges before them, in topological order); how many nodes went."""
    canon: dict[int, int] = {}
    seen: dict[Any, int] = {}
    for nid in graph.topo_order():
        node = graph.nodes[nid]
        key: Any
        if node.sig.op == "weight":
            data = graph.params.get(node.sig.attr["name"])
            if data is None:
                continue
            t = node.sig.out_types[0]
            key = ("weight", t.dtype, t.shape, sample_digest(data))
            first = seen.get(key)
            if first is not None and not np.array_equal(graph.params[graph.nodes[first].sig.attr["name"]], data):
                continue  # a digest collision: different data
        elif _deterministic(node):
            key = (node.sig, tuple(Ref(canon.get(r.node, r.node), r.index) for r in node.inputs))
        else:
            continue
        first = seen.setdefault(key, nid)
        if first != nid:
            canon[nid] = first
    if not canon:
        return graph, 0
    edit = graph.edit()
    for dup, keep in canon.items():
        for i in range(len(graph.nodes[dup].sig.out_types)):
            edit.replace(Ref(dup, i), Ref(keep, i))
    return edit.commit(), len(canon)


def fold(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with its weight-only values folded into constants (:func:`graphsub.rules.apply.fold_weights`);
    how many constants that made (0: nothing to fold, or a weight without data)."""
    from graphsub.rules.apply import fold_weights

    folded = fold_weights(graph)
    if folded is graph:
        return graph, 0
    return folded, max(sum(1 for _ in folded.ops_of("weight")) - sum(1 for _ in graph.ops_of("weight")), 1)


def clean(graph: Graph, *, stop: Callable[[], bool] | None = None) -> tuple[Graph, tuple[RuleStep, ...]]:
    """``graph`` cleaned (see the module docstring) and the substitutions made; the same graph and no steps when
    nothing applies. ``stop()`` ends it early (every prefix is sound)."""
    from graphsub.rules.everywhere import rewrite_everywhere
    from graphsub.rules.library import get_set

    rules = get_set("cleanup")
    steps: list[RuleStep] = []
    for _ in range(ROUNDS):
        before = len(steps)
        if any(graph.params.get(graph.nodes[n].sig.attr["name"]) is not None for n in graph.ops_of("weight")):
            graph, n = fold(graph)
            steps.extend(RuleStep("fold", ()) for _ in range(n))
        graph, n = cse(graph)
        steps.extend(RuleStep("cse", ()) for _ in range(n))
        graph, done = rewrite_everywhere(graph, rules, stop=stop)
        steps.extend(done)
        if len(steps) == before or (stop is not None and stop()):
            break
    return graph, tuple(steps)


#: the name of the step by which a search's sequence records that it started from the cleaned graph (:func:`clean`
#: as a whole, which :func:`graphsub.rules.replay.replay` replays as such)
CLEANUP = "cleanup"


def cleanup_note(steps: Sequence[StepLike], seconds: float) -> str:
    """One line for the result's notes: what the clean-up did, by rule."""
    counts = collections.Counter(s.rule for s in steps)
    what = ", ".join(f"{n} {rule}" for rule, n in counts.most_common())
    return f"cleanup: {len(steps)} substitution(s) in {seconds:.1f} s ({what})"


def replay_cleanup(graph: Graph, steps: Sequence[StepLike]) -> tuple[Graph, Sequence[StepLike]]:
    """For replaying a sequence: ``graph`` cleaned and the steps after the :data:`CLEANUP` step when the sequence
    starts with one, else both unchanged."""
    if steps and steps[0].rule == CLEANUP:
        return clean(graph)[0], steps[1:]
    return graph, steps


__all__ = ["CLEANUP", "RANDOM_OPS", "ROUNDS", "SAMPLE", "clean", "cleanup_note", "cse", "fold", "replay_cleanup",
           "sample_digest"]
