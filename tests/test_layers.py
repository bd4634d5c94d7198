"""The package's import layers (docs/architecture.md, "Layers"): every import between graphsub packages goes down
the layer table that the architecture page shows (the test reads the table from the page, so the two cannot drift),
there are no import cycles between modules or packages, and the library never imports the command line.  Every
import statement that runs counts, including those inside functions; imports under ``if TYPE_CHECKING:`` are for
annotations only and do not."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import networkx as nx

import graphsub

SRC = Path(graphsub.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

#: package-level cycles that are explained (none today)
ALLOWED_PACKAGE_CYCLES: set[frozenset[str]] = set()
#: imports from a lower layer up to a higher one that the code really needs, each with its reason as a comment
#: (importer module, imported module); none today
ALLOWED_UPWARD_IMPORTS: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    mods = {}
    for p in SRC.rglob("*.py"):
        name = ".".join(("graphsub", *p.relative_to(SRC).with_suffix("").parts))
        mods[name.removesuffix(".__init__")] = p
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    nodes, stack = [], [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return nodes


@functools.lru_cache(maxsize=1)
def import_graph() -> nx.DiGraph:
    """Module -> module edges for every ``import graphsub...`` / ``from graphsub... import ...`` (computed once; do
    not modify the result)."""
    mods = _modules()
    g = nx.DiGraph()
    for mod, path in mods.items():
        g.add_node(mod)
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in mods]
                if len(targets) < len(subs):
                    targets.append(node.module)
            else:
                continue
            for t in targets:
                if t.startswith("graphsub") and (r := _resolve(t, mods)) and r != mod:
                    g.add_edge(mod, r)
    return g


def _package(mod: str) -> str:
    return ".".join(mod.split(".")[:2])


def layers() -> dict[str, int]:
    """Package -> layer, from the table between ``<!-- layers:begin`` and ``<!-- layers:end -->`` in
    docs/architecture.md: rows ``| LAYER | `graphsub.a`, `graphsub.b` | why |``."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = re.search(r"<!-- layers:begin.*?-->(.*?)<!-- layers:end -->", text, re.S)
    assert block, f"{ARCHITECTURE}: no layer table between <!-- layers:begin --> and <!-- layers:end -->"
    table: dict[str, int] = {}
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        for pkg in re.findall(r"`(graphsub(?:\.\w+)?)`", cells[1]):
            assert pkg not in table, f"{pkg} is in two rows of the layer table"
            table[pkg] = int(cells[0])
    assert table, "the layer table has no rows"
    return table


def test_no_module_import_cycles() -> None:
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == []


def test_no_package_import_cycles() -> None:
    g = import_graph()
    packages = nx.DiGraph()
    packages.add_edges_from((_package(a), _package(b)) for a, b in g.edges if _package(a) != _package(b))
    cycles = [frozenset(c) for c in nx.strongly_connected_components(packages) if len(c) > 1]
    assert [sorted(c) for c in cycles if c not in ALLOWED_PACKAGE_CYCLES] == []


def test_the_library_never_imports_the_cli() -> None:
    g = import_graph()
    users = {a for a, b in g.edges if _package(b) == "graphsub.cli" and _package(a) != "graphsub.cli"}
    assert users <= {"graphsub.__main__"}


def test_the_package_root_keeps_a_handful_of_modules() -> None:
    root = sorted(p.stem for p in SRC.glob("*.py"))
    assert root == ["__init__", "__main__", "data", "deadline", "errors", "execute", "interrupt", "spec",
                    "symbolic"]


def test_the_layer_table_names_every_package() -> None:
    packages = {_package(m) for m in import_graph().nodes}
    table = layers()
    assert sorted(packages - set(table)) == [], "packages missing from the layer table in docs/architecture.md"
    assert sorted(set(table) - packages) == [], "the layer table in docs/architecture.md names missing packages"


def test_imports_go_down_the_layers() -> None:
    table = layers()
    upward = sorted(
        f"{a} (layer {table[_package(a)]}) imports {b} (layer {table[_package(b)]})"
        for a, b in import_graph().edges
        if table.get(_package(a), -1) < table.get(_package(b), -1) and (a, b) not in ALLOWED_UPWARD_IMPORTS
    )
    assert upward == [], "imports against the layer table of docs/architecture.md"
