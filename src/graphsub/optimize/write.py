"""Writing ``optimize``'s choice (:func:`write_chosen`): the chosen candidate with the input's symbolic dimensions
and metadata kept, or the original when the candidate does not keep them; split from :mod:`graphsub.optimize.pipeline`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graphsub.errors import GraphsubError, VerificationError
from graphsub.optimize.result import OptimizeResult
from graphsub.spec import Shapes

if TYPE_CHECKING:
    from graphsub.frontends.dims import Interface
    from graphsub.ir.graph import Graph
    from graphsub.optimize.candidates import Candidate, Portfolio
    from graphsub.symbolic import SizeCheck


def write_chosen(res: OptimizeResult, output: str | os.PathLike[str], source: bytes | str, chosen: Any,
           input_shapes: Shapes | None = None, check_sizes: Sequence[Mapping[str, int]] = (),
           checker: SizeCheck | None = None) -> None:
    """Write the chosen model: serialized bytes (a portfolio candidate) or a proto (graphsub's export, checked and
    with large weights beside it); the original when it was kept.  Symbolic dims of an input file that
    ``input_shapes`` leave free stay symbolic (:func:`graphsub.symbolic.keep_symbolic`); a chosen model that does not
    keep them (graphsub computes at the imported sizes: a reshape's target baked in; checked at ``check_sizes`` too,
    and at a key/value cache's decoding sizes) gives way to the original, with a note.  ``checker``: the check the
    portfolio's candidates passed (:func:`dims_check`), whose original outputs it reuses."""
    from graphsub.frontends.dims import interface
    from graphsub.optimize.output import write_optimized, write_original, write_serialized
    from graphsub.symbolic import keep_symbolic

    if chosen is not None and not res.kept_original:
        iface = interface(source, input_shapes) if isinstance(source, str) else None
        try:
            chosen = keep_symbolic(source if isinstance(source, str) else None, chosen, input_shapes=input_shapes,
                                   graph=res.original, seed=res.seeds[0] if res.seeds else 0, iface=iface,
                                   sizes=check_sizes, checker=checker)
        except VerificationError as e:  # the original is the drop-in replacement then: nothing lost, the run goes on
            spliced = _written_over(res, source, input_shapes, check_sizes, checker)
            if spliced is not None:
                write_serialized(spliced, output)
                res.written = os.fspath(output)
                return
            res.portfolio_notes.append(f"{res.chosen or 'search'}: {e}")
            res.decision = (f"kept the original: {res.chosen or 'the optimized model'} does not keep the input's "
                            "symbolic dimensions (see the notes; --input-shape gives a model with static shapes)")
            res.kept_original, res.chosen, res.graph, res.verdict = True, "original", res.original, None
            write_original(source, output)
            res.written = os.fspath(output)
            return
        if isinstance(chosen, bytes):
            write_serialized(chosen, output)
        else:
            write_optimized(chosen, output)
        if iface is not None and iface.overridable:
            res.portfolio_notes.append(overridable_note(len(iface.overridable)))
    else:
        write_original(source, output)
    res.written = os.fspath(output)


def _written_over(res: OptimizeResult, source: bytes | str, input_shapes: Shapes | None,
                  check_sizes: Sequence[Mapping[str, int]], checker: SizeCheck | None) -> bytes | None:
    """The optimized graph written over the input file (:func:`graphsub.symbolic.keep_spliced`) when that keeps the
    input's symbolic dims, else None."""
    from graphsub.symbolic import keep_spliced

    if not isinstance(source, str) or res.optimized is res.original:
        return None
    kept = keep_spliced(source, res.optimized, res.original, input_shapes=input_shapes,
                        seed=res.seeds[0] if res.seeds else 0, sizes=check_sizes, checker=checker)
    return None if kept is None else kept.SerializeToString()


def dims_check(source: bytes | str, original: Graph, *, input_shapes: Shapes | None,
               check_sizes: Sequence[Mapping[str, int]], seed: int, rtol: float, atol: float,
               bases: Callable[[str], Graph | None] = lambda name: None,
               direct: Callable[[Candidate], tuple[str, Graph, bytes | str] | None] = lambda c: None,
               ) -> tuple[SizeCheck | None, Callable[[Candidate], str | None] | None]:
    """The check every portfolio candidate of an input file with free symbolic dimensions passes before it is timed
    (what :func:`write_chosen` checks before writing, :func:`graphsub.symbolic.keep_symbolic`), so that a candidate
    that does not keep them (graphsub's own, computed at the imported sizes) is never chosen over one that does (a
    peer's); a candidate that passes gets its symbolic dims back, so that what is timed is what would be written.
    A candidate graph of graphsub's that does not keep them is written again over the model it was made from
    (:func:`graphsub.frontends.splice.splice`; ``bases``: a candidate's base graph by name, an ONNX import) and
    checked again, at the imported sizes too; when that passes, it is the candidate.  The targets of the reshapes
    and expands it made are written in symbols when its steps start from an import (``direct``: the import's name,
    graph and file, :func:`root_import`) and replayed on the file imported at other sizes give them
    (:func:`graphsub.optimize.twin.sized`), else by :func:`graphsub.frontends.splice.resymbolize`.
    Returns the :class:`~graphsub.symbolic.SizeCheck` and the check (None, None: nothing to check)."""
    from graphsub.symbolic import keep_symbolic, size_check

    checker = size_check(source if isinstance(source, str) else None, original, input_shapes=input_shapes, seed=seed,
                         rtol=rtol, atol=atol, sizes=check_sizes)
    if checker is None:
        return None, None

    path = source if isinstance(source, str) else None
    again: dict[str, Graph | None] = {}  # a base imported at other sizes, by name

    def check(c: Candidate) -> str | None:
        try:
            kept = keep_symbolic(path, c.data, input_shapes=input_shapes, iface=checker.iface, checker=checker)
        except VerificationError as e:
            ways: tuple[Callable[[], bytes | None], ...] = (
                lambda: _twin(c, direct, checker, input_shapes, again), lambda: _spliced(c, bases, checker.iface))
            for way in ways:  # in turn: the second (a heuristic) only where the first cannot write it
                spliced = way()
                if spliced is None:
                    continue
                try:
                    kept = keep_symbolic(path, spliced, input_shapes=input_shapes, iface=checker.iface,
                                         checker=checker, imported=True)
                except VerificationError:
                    continue
                c.spliced = True
                break
            else:
                return str(e)
        c.data = kept if isinstance(kept, bytes) else kept.SerializeToString()
        return None

    return checker, check


def _twin(c: Candidate, direct: Callable[[Candidate], tuple[str, Graph, bytes | str] | None], checker: SizeCheck,
          input_shapes: Shapes | None, again: dict[str, Graph | None]) -> bytes | None:
    """Candidate ``c`` written over the file its steps start from with the targets of its reshapes and expands in
    symbols (:func:`graphsub.optimize.twin.sized`), or None."""
    from graphsub.frontends.onnx_import import from_onnx
    from graphsub.frontends.splice import splice_symbolic
    from graphsub.optimize.twin import other_sizes, sized
    from graphsub.symbolic import imported_sizes

    found = direct(c)
    if c.graph is None or found is None or not c.steps:
        return None
    name, base, src = found
    cache = checker.iface.cache
    first = {k: v for k, v in imported_sizes(checker.iface, base).items()
             if "[" not in k and not (cache is not None and k == cache.total)}  # the total is past + sequence
    second = other_sizes(first)
    try:
        if name not in again:
            from graphsub.frontends.dims import as_proto

            again[name] = from_onnx(as_proto(src), input_shapes=input_shapes, sizes=second)
        base_again = again[name]
        got = None if base_again is None else sized(c.graph, c.steps, base, base_again, checker.iface, first,
                                                     second)
        model = None if got is None else splice_symbolic(got[0], base, checker.iface, got[1])
    except GraphsubError:
        again.setdefault(name, None)
        return None
    return None if model is None else model.SerializeToString()


def _spliced(c: Candidate, bases: Callable[[str], Graph | None], iface: Interface) -> bytes | None:
    """Candidate ``c``'s graph written over the ONNX model its base was imported from, with the dims of ``iface``
    (:func:`graphsub.frontends.splice.splice_symbolic`); None when it cannot be."""
    from graphsub.frontends.splice import splice_symbolic

    base = bases(c.base)
    if c.graph is None or base is None:
        return None
    try:
        model = splice_symbolic(c.graph, base, iface)
    except GraphsubError:
        return None
    return None if model is None else model.SerializeToString()


def direct_import(name: str, portfolio: Portfolio, original: Graph,
                  source: bytes | str) -> tuple[Graph, bytes | str] | None:
    """``(graph, file)`` of the import candidate ``name`` is: the original's, or a peer's output's; None for any other
    candidate (one made from graphsub's own graph)."""
    from graphsub.frontends.splice import origin_of
    from graphsub.optimize.candidates import ORIGINAL

    if name == ORIGINAL:
        return original, source
    c = next((c for c in portfolio.candidates if c.name == name), None)
    if c is None or c.graph is None or origin_of(c.graph) is None:
        return None
    return c.graph, c.data


def root_import(c: Candidate, portfolio: Portfolio, original: Graph,
                source: bytes | str) -> tuple[str, Graph, bytes | str] | None:
    """``(name, graph, file)`` of the import candidate ``c``'s steps start from: its base when that is an import
    (:func:`direct_import`), else its base's, and so on, as long as each candidate's steps begin with its base's (a
    derived candidate such as ``search+spelling`` carries the search's steps and its own); None otherwise. The
    twin check (:func:`graphsub.optimize.twin.sized`) replays those steps on the import at other sizes, and the
    replay, checked at every size, becomes the candidate; it had refused every ``X+spelling`` of a decoder with a
    cache, whose base is no import (2026-11-30)."""
    by_name = {d.name: d for d in portfolio.candidates}
    seen: set[str] = set()
    while True:
        found = direct_import(c.base, portfolio, original, source)
        if found is not None:
            return c.base, found[0], found[1]
        parent = by_name.get(c.base)
        if parent is None or parent.name in seen or tuple(c.steps[:len(parent.steps)]) != tuple(parent.steps):
            return None
        seen.add(parent.name)
        c = parent


def import_of(name: str, portfolio: Portfolio, original: Graph) -> Graph | None:
    """The ONNX import candidate ``name`` was made from: ``original`` for the original, a peer's import for a peer's
    output, and for a candidate made from another candidate, that one's (graphsub's edits keep node ids, so a
    candidate two searches away from an import is still written over it by :func:`_spliced`)."""
    from graphsub.frontends.splice import origin_of
    from graphsub.optimize.candidates import ORIGINAL

    by_name = {c.name: c for c in portfolio.candidates}
    seen: set[str] = set()
    while name != ORIGINAL and name in by_name and name not in seen:
        seen.add(name)
        c = by_name[name]
        if c.graph is not None and origin_of(c.graph) is not None:
            return c.graph
        name = c.base
    return original if name == ORIGINAL else None


def both(*checks: Callable[[Candidate], str | None] | None) -> Callable[[Candidate], str | None] | None:
    """One candidate check running ``checks`` in turn (None ones left out): the first failure's reason, or None."""
    todo = [c for c in checks if c is not None]
    if not todo:
        return None

    def check(c: Candidate) -> str | None:
        return next((why for why in (f(c) for f in todo) if why is not None), None)

    return check


def overridable_note(n: int) -> str:
    """The note of a written model whose original listed ``n`` of its weights as graph inputs too.

    >>> overridable_note(2).split(" (")[0]
    'output: the input lists 2 weight(s) as graph inputs too'
    """
    return (f"output: the input lists {n} weight(s) as graph inputs too (overridable initializers, the style of IR "
            "version < 4); graphsub reads them as the weights they hold, and the output keeps them as weights only, "
            "not as inputs (onnxruntime folds constants it cannot fold in an overridable initializer)")


__all__ = ["both", "dims_check", "direct_import", "import_of", "overridable_note", "root_import", "write_chosen"]
