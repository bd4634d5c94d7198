"""Replaying a substitution sequence by rule name and matched node ids.

Node ids are stable across copy-on-write edits, so a sequence found by a search (each step: the rule's
name and the ids of the nodes it matched, in pattern order) is applied again to the input graph by
finding each step's match anew.  Used to bisect a sequence that fails verification and to draw the
region each step changed.

>>> from graphsub.ir.builder import Builder
>>> from graphsub.rules.library import find_rule
>>> b = Builder()
>>> x = b.input("x", (2, 4))
>>> g = b.build(b.relu(b.identity(x)))
>>> rule = find_rule("cpu_identity_remove")
>>> step = first_step(g, rule)
>>> [(i, sorted(s.graph.op_histogram())) for i, s in replay_steps(g, [rule], [step])]
[(1, ['relu'])]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from graphsub.errors import RuleError
from graphsub.ir.graph import Graph
from graphsub.rules.apply import Substitution, apply
from graphsub.rules.cleanup import replay_cleanup
from graphsub.rules.match import Match, find_matches
from graphsub.rules.rule import Rule, RuleStep, StepLike


def find_step(graph: Graph, rule: Rule, nodes: Sequence[int]) -> Match | None:
    """The match of ``rule`` in ``graph`` at exactly ``nodes`` (pattern order), or None."""
    want = tuple(nodes)
    return next((m for m in find_matches(graph, rule) if _ids(m) == want), None)


def _ids(m: Match) -> tuple[int, ...]:
    return tuple(n for _, n in m.nodes)


def first_step(graph: Graph, rule: Rule) -> RuleStep:
    """The first match of ``rule`` in ``graph`` as a step (for examples and tests)."""
    m = next(iter(find_matches(graph, rule)), None)
    if m is None:
        raise RuleError(f"{rule.name} does not match {graph.name}")
    return RuleStep(rule.name, _ids(m))


def replay_steps(graph: Graph, rules: Sequence[Rule], steps: Sequence[StepLike]) -> Iterator[tuple[int, Substitution]]:
    """Apply ``steps`` to ``graph`` one by one, yielding ``(1-based step number, substitution)``.

    Raises RuleError naming the step when its rule is not in ``rules`` or no longer matches at its
    nodes (the substitutions before it have been yielded)."""
    by_name = {r.name: r for r in rules}
    g = graph
    for i, step in enumerate(steps, 1):
        rule = by_name.get(step.rule)
        if rule is None:
            raise RuleError(f"step {i}: rule {step.rule!r} is not in the rule list")
        match = find_step(g, rule, step.nodes)
        if match is None:
            raise RuleError(f"step {i}: no match of {step.rule} at nodes {list(step.nodes)} to replay")
        sub = apply(g, match)
        yield i, sub
        g = sub.graph


def replay(graph: Graph, rules: Sequence[Rule], steps: Sequence[StepLike]) -> Graph:
    """``graph`` after all ``steps`` (see :func:`replay_steps`); a sequence that starts with the clean-up step
    (:data:`graphsub.rules.cleanup.CLEANUP_STEP`, what ``optimize``'s searches start with) replays the whole
    clean-up first."""
    graph, steps = replay_cleanup(graph, steps)
    g = graph
    for _, sub in replay_steps(graph, rules, steps):
        g = sub.graph
    return g


__all__ = ["RuleStep", "StepLike", "find_step", "first_step", "replay", "replay_steps"]
