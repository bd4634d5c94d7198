"""A griffe extension that turns the reST-isms of graphsub's docstrings into Markdown for mkdocstrings.

graphsub's docstrings are free prose in the style of the standard library's: ``double backticks`` for code,
Sphinx roles (:func:`graphsub.search.search`, :class:`~graphsub.ir.graph.Graph`) for references, ``>>>``
doctests, ``::`` literal blocks and reST simple tables (``=====  =====``).  mkdocstrings renders docstrings as
Markdown, where double backticks are already code but the rest is not, so this extension rewrites each docstring
once the package is loaded:

* a role becomes a cross-reference (``<autoref ... optional>``: a link where the target is on a page of the API
  reference, plain code where it is not; never a warning), its name resolved from the docstring's module and class
  the way Sphinx resolves it (``.types`` relative to the package, ``OpDef`` in the module or its imports);
* a doctest (``>>>`` lines, ``...`` continuations and the expected output up to a blank line) becomes a
  ``pycon`` code block;
* a paragraph ending in ``::`` ends in ``:`` and the indented block after it becomes a code block;
* a simple table becomes a Markdown table (continuation lines -- first column blank -- join the row above);
* an attribute without a docstring gets the ``#:`` comment lines right above it, as Sphinx reads them.

mkdocs.yml loads it (``extensions: [docs/ext/rst_docstrings.py:RstDocstrings]``); nothing in ``src`` imports it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj|const|type):`(?P<body>[^`]+)`")
BORDER = re.compile(r"^(?P<indent>\s*)=+(?:\s+=+)+\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _dedent(lines: list[str]) -> list[str]:
    cut = min((_indent(ln) for ln in lines if ln.strip()), default=0)
    return [ln[cut:] for ln in lines]


# ----------------------------------------------------------------------------- block structure


def _literal_blocks(lines: list[str]) -> list[str]:
    """``para::`` + indented block -> ``para:`` + fenced code (reST literal blocks)."""
    out: list[str] = []
    i, in_fence = 0, False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.rstrip().endswith("::"):
            out.append(line)
            i += 1
            continue
        stripped = line.rstrip()
        head = stripped[:-2].rstrip()
        if head and not stripped[:-2].endswith(" "):
            head += ":"
        if head.strip():
            out.append(head)
        base = _indent(line)
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        block: list[str] = []
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        if block:
            pad = " " * base
            out += ["", pad + "```text", *(pad + ln if ln.strip() else "" for ln in _dedent(block)), pad + "```", ""]
        i = j if block else i + 1
    return out


def _quote_marks(lines: list[str]) -> list[str]:
    """A prose line that starts with ``>`` (``>= 2 inputs`` wrapped onto its own line) is text, not a Markdown quote."""
    out, in_fence = [], False
    for line in lines:
        if FENCE.match(line):
            in_fence = not in_fence
        stripped = line.lstrip()
        if not in_fence and stripped.startswith(">") and not stripped.startswith(">>>"):
            line = line[: len(line) - len(stripped)] + "\\" + stripped
        out.append(line)
    return out


def _doctests(lines: list[str]) -> list[str]:
    """``>>>`` examples (with continuations and expected output, up to a blank line) -> ``pycon`` code blocks."""
    out: list[str] = []
    i, in_fence = 0, False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip():
            j += 1
        if out and out[-1].strip():
            out.append("")
        out += ["```pycon", *_dedent(lines[i:j]), "```", ""]
        i = j
    return out


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    cells = []
    for k, (a, b) in enumerate(spans):
        end = len(line) if k == len(spans) - 1 else b
        cells.append(line[a:end].strip())
    return cells


def _tables(lines: list[str]) -> list[str]:
    """reST simple tables -> Markdown tables."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = BORDER.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        border = lines[i]
        spans = [(r.start(), r.end()) for r in re.finditer(r"=+", border)]
        borders = [i]
        j = i + 1
        while j < len(lines) and len(borders) < 3:
            if BORDER.match(lines[j]):
                borders.append(j)
                if len(borders) == 2 and not (j + 1 < len(lines) and _continues_table(lines, j + 1)):
                    break
            elif not lines[j].strip() and len(borders) == 1:
                break
            j += 1
        if len(borders) < 2:
            out.append(lines[i])
            i += 1
            continue
        rows: list[list[str]] = []
        header: list[str] | None = None
        for k in range(borders[0] + 1, borders[-1]):
            if k in borders:
                header, rows = (rows[0] if rows else None), []
                continue
            if not lines[k].strip():
                continue
            cells = _cells(lines[k], spans)
            if rows and not cells[0]:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            else:
                rows.append(cells)
        header = header or [""] * len(spans)
        if out and out[-1].strip():
            out.append("")
        esc = lambda c: c.replace("|", "\\|")  # noqa: E731
        out.append("| " + " | ".join(esc(c) for c in header) + " |")
        out.append("|" + "|".join("---" for _ in spans) + "|")
        out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
        out.append("")
        i = borders[-1] + 1
    return out


def _continues_table(lines: list[str], k: int) -> bool:
    """After a second border at ``k - 1``: is there a table body and a third border (a table with a header)?"""
    while k < len(lines) and lines[k].strip():
        if BORDER.match(lines[k]):
            return True
        k += 1
    return False


# ----------------------------------------------------------------------------- roles


def _context(obj: griffe.Object) -> tuple[str, list[str]]:
    """The package relative names start from, and the scopes an unqualified name is looked up in (innermost first)."""
    module = obj.module
    package = module.path if module.is_init_module or module.is_package else module.path.rpartition(".")[0]
    scopes = []
    o: griffe.Object | None = obj
    while o is not None:
        if o.is_class or o.is_module:
            scopes.append(o.path)
        o = o.parent
    return package, scopes


class RstDocstrings(griffe.Extension):
    """Rewrite every docstring of the package once it is loaded (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self.collection = loader.modules_collection
        for obj in _walk(pkg):
            if obj.docstring is None and obj.is_attribute:
                _comment_docstring(obj)
            if obj.docstring is not None:
                obj.docstring.value = self.convert(obj.docstring.value, obj)

    def _exists(self, path: str) -> bool:
        try:
            self.collection[path]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return False
        return True

    def resolve(self, target: str, obj: griffe.Object) -> str:
        package, scopes = _context(obj)
        if target.startswith("."):
            base = package
            rest = target[1:]
            while rest.startswith("."):
                base, rest = base.rpartition(".")[0], rest[1:]
            return f"{base}.{rest}"
        if self._exists(target) and "." in target:
            return target
        for scope in scopes:
            if self._exists(f"{scope}.{target}"):
                found = self.collection[f"{scope}.{target}"]
                if found.is_alias and not found.target_path.startswith("graphsub"):
                    return found.target_path  # an imported library (``immutables``): its own name
                return f"{scope}.{target}"
        return target

    def role(self, match: re.Match[str], obj: griffe.Object) -> str:
        body = match["body"].strip()
        title = None
        if body.endswith(">") and "<" in body:
            title, body = body[: body.rindex("<")].strip(), body[body.rindex("<") + 1 : -1]
        short = body.startswith("~")
        target = body.lstrip("~")
        if title is None:
            title = target.rpartition(".")[2] if short else target.lstrip(".")
        identifier = self.resolve(target, obj)
        return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'

    def convert(self, text: str, obj: griffe.Object) -> str:
        lines = _quote_marks(_tables(_doctests(_literal_blocks(text.splitlines()))))
        out, in_fence = [], False
        for line in lines:
            if FENCE.match(line):
                in_fence = not in_fence
            out.append(line if in_fence else ROLE.sub(lambda m: self.role(m, obj), line))
        return "\n".join(out)


def _comment_docstring(obj: griffe.Object) -> None:
    """Give an attribute documented the Sphinx way -- ``#:`` comment lines right above it -- that text as its
    docstring (the code base documents constants so)."""
    try:
        lines = obj.lines_collection[obj.filepath]  # type: ignore[index]
    except (KeyError, TypeError):
        return
    if not lines or not obj.lineno:
        return
    found: list[str] = []
    k = obj.lineno - 2  # the line above the attribute (lineno is 1-based)
    while k >= 0 and lines[k].lstrip().startswith("#:"):
        found.insert(0, lines[k].lstrip()[2:].strip())
        k -= 1
    if found:
        obj.docstring = griffe.Docstring(" ".join(found), lineno=k + 2, parent=obj)


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)  # type: ignore[arg-type]
