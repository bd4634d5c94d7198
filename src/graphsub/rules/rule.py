"""Substitution rules as immutable data.

A :class:`Rule` is ``(source pattern, where-constraints, target builder, output mapping)`` plus
provenance: ``name``, ``origin`` (``hand-written`` / ``taso-pb`` / ``generated``), ``location``
(file:line of its definition), ``exact`` (False for cost-only rules, with ``reason``) and
``examples`` -- concrete instantiations used to verify it numerically.

The target is a function ``target(t, m) -> {output name: value}`` where ``t`` is a
:class:`~graphsub.rules.apply.TargetBuilder` (same op methods as the graph builder) and ``m`` a
:class:`~graphsub.rules.match.MatchView` (bound values, attributes, shapes, weight data).  The
returned mapping is the output mapping *f*: each source output is replaced by the target value
of the same name.  There is no state between match and apply.  Targets of :func:`make_rule`
receive a :class:`~graphsub.rules.apply.TargetView`, so they read like sources: ``m.x * m.z +
m.y`` builds ``add(mul(x, z), y)``.

:func:`mirrored` is a rule's twin with the operands of commutative source nodes swapped
(``a + b`` / ``b + a``): a separate, separately checked rule.

Rules are usually written with :func:`make_rule`::

    def source(p):
        c = p.conv2d(p.var("x"), p.weight("w"), act="none", name="conv")
        return {"y": p.relu(c)}

    def target(t, m):
        return {"y": t.conv2d(m.x, m.w, **{**m.attrs("conv"), "act": "relu"})}

    conv_relu = make_rule("conv_relu_fuse", source, target, examples=[...])

or constructed directly with ``Rule(...)``.

Pitfall: target and ``where`` functions run at match/apply time, so a lambda created in a loop
must bind the loop variable explicitly (``lambda t, m, k=k: ...``) or it sees the last value.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from graphsub.errors import GraphsubError, RuleError
from graphsub.rules.pattern import Pattern, PatternBuilder

if TYPE_CHECKING:
    from graphsub.ir.node import Ref
    from graphsub.rules.apply import TargetBuilder, TargetView
    from graphsub.rules.match import MatchView

ORIGINS = ("hand-written", "taso-pb", "generated")

TargetFn = Callable[["TargetBuilder", "MatchView"], Mapping[str, "Ref"]]
#: a target as written for :func:`make_rule`: it receives a :class:`~graphsub.rules.apply.TargetView`
ViewTargetFn = Callable[["TargetBuilder", "TargetView"], Mapping[str, "Ref"]]
WhereFn = Callable[["MatchView"], "bool | str | None"]


@dataclass(frozen=True)
class Where:
    """A constraint on a match: ``fn(m)`` returns True/None (ok), False or a reason string."""

    fn: WhereFn
    text: str

    def check(self, m: MatchView) -> str | None:
        try:
            r = self.fn(m)
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, GraphsubError) as e:
            return f"{self.text}: {type(e).__name__}: {e}"
        if r is None or r is True:
            return None
        return r if isinstance(r, str) else self.text


@dataclass(frozen=True)
class Example:
    """A concrete instantiation of a source pattern, for verification.

    ``types``: variable name -> shape (or ``(shape, dtype)``); ``attrs``: pattern node name ->
    attributes for the free ones (and the concrete value where the pattern has a predicate);
    ``ops``: wildcard node name -> concrete op (with ``attrs`` as usual); ``data``: variable
    name -> fixed data (e.g. all-ones constants a rule requires).
    """

    types: Mapping[str, Any]
    attrs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ops: Mapping[str, str] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Rule:
    """An immutable substitution rule (see module docstring)."""

    name: str
    source: Pattern
    target: TargetFn
    where: tuple[Where, ...] = ()
    origin: str = "hand-written"
    location: str = ""
    exact: bool = True
    reason: str = ""
    doc: str = ""
    examples: tuple[Example, ...] = ()
    tags: tuple[str, ...] = ()
    #: source outputs the rule never rewrites where they are graph outputs: onnxruntime writes a graph output into a
    #: buffer of its own, so a view (Reshape) that the target leaves there copies the whole tensor where the source
    #: op wrote it in place; the examples (whose outputs are graph outputs) are checked without this
    inner: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise RuleError(f"rule {self.name}: origin must be one of {ORIGINS}")
        if not self.exact and not self.reason:
            raise RuleError(f"rule {self.name}: a non-exact rule must say why (reason=...)")

    def on_examples(self) -> Rule:
        """The rule as its examples are matched: their outputs are graph outputs, so :attr:`inner` is dropped."""
        return dataclasses.replace(self, inner=()) if self.inner else self

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, origin={self.origin!r}, exact={self.exact})"

    def __hash__(self) -> int:
        return hash((self.name, self.origin))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rule) and (self.name, self.origin) == (other.name, other.origin)


def caller_location(depth: int = 1) -> str:
    """``file:line`` (path from the package root) of the caller ``depth`` frames above the function
    calling this one: ``caller_location()`` in ``f`` is where ``f`` was called from."""
    frame = sys._getframe(depth + 1)
    return f"{frame.f_code.co_filename.rsplit('/src/', 1)[-1]}:{frame.f_lineno}"


def _viewing(target: ViewTargetFn) -> TargetFn:
    """``target`` called with the match as a :class:`~graphsub.rules.apply.TargetView`."""
    def run(t: TargetBuilder, m: MatchView) -> Mapping[str, Ref]:
        return target(t, t.view(m))

    return run


def make_rule(
    name: str,
    source: Callable[[PatternBuilder], Mapping[str, Any]],
    target: ViewTargetFn | None = None,
    *,
    where: Sequence[tuple[WhereFn, str] | Where] = (),
    origin: str = "hand-written",
    exact: bool = True,
    reason: str = "",
    doc: str = "",
    examples: Sequence[Example] = (),
    tags: Sequence[str] = (),
    location: str | None = None,
) -> Rule:
    """Build a Rule from a pattern-building function ``source(p) -> {outputs}`` and a target
    ``target(t, m) -> {outputs}`` (``m`` a :class:`~graphsub.rules.apply.TargetView`); ``location``
    defaults to the caller's line."""
    p = PatternBuilder()
    outputs = source(p)
    pattern = p.build(outputs)
    if target is None:
        raise RuleError(f"rule {name}: no target")
    wh = tuple(w if isinstance(w, Where) else Where(w[0], w[1]) for w in where)
    return Rule(
        name=name, source=pattern, target=_viewing(target), where=wh, origin=origin,
        location=location or caller_location(), exact=exact, reason=reason,
        doc=doc or (source.__doc__ or "").strip(), examples=tuple(examples), tags=tuple(tags),
    )


def mirrored(rule: Rule, name: str, nodes: Sequence[str] | None = None, doc: str | None = None) -> Rule:
    """``rule`` with the two operands of its commutative source nodes swapped (``nodes``: their
    names, default every ``add``/``mul``; all swapped at once), named ``name``.

    The twin matches ``b + a`` where ``rule`` matches ``a + b``; where-constraints, target and
    examples are the same (they refer to pattern names, which do not change).

    >>> r = make_rule("r", lambda p: {"y": p.add(p.relu(p.var("x")), p.var("z"))},
    ...               lambda t, m: {"y": m.x + m.z})
    >>> str(mirrored(r, "r_rev").source).splitlines()[2]
    'add0 = add($z, relu0)'
    """
    return dataclasses.replace(rule, name=name, source=rule.source.commuted(nodes),
                               doc=rule.doc if doc is None else doc)


class StepLike(Protocol):
    """What replay needs of a step (``graphsub.search.Step`` is one)."""

    @property
    def rule(self) -> str: ...

    @property
    def nodes(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class RuleStep:
    """A step named by rule and matched node ids (the plain form of :class:`StepLike`)."""

    rule: str
    nodes: tuple[int, ...]



__all__ = [
    "ORIGINS", "Example", "Rule", "RuleStep", "StepLike", "TargetFn", "ViewTargetFn", "Where", "WhereFn",
    "caller_location", "make_rule", "mirrored",
]
