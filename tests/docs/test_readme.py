"""The README is a reference a user copies from: each of its ``python`` blocks runs on its own, as written; its
lines stay within 160 characters and the page under 15 KB; every repository path it links exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import python_blocks

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = python_blocks(README)


def test_readme_is_a_short_reference() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) < 15 * 1024
    assert max(len(line) for line in text.splitlines()) <= 160
    assert "make demo" in text and "make test" in text
    assert len(BLOCKS) >= 4  # optimize(), search(), training, dynamic


def test_readme_links_exist() -> None:
    links = re.findall(r"\]\(([^)#:]+)\)", README.read_text(encoding="utf-8"))
    assert links and all((README.parent / link).exists() for link in links), links


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # what a block writes lands in a fresh folder
    exec(compile(BLOCKS[index], f"{README}:python-block-{index + 1}", "exec"), {"__name__": "readme"})


def test_no_paragraph_of_the_docs_is_there_twice() -> None:
    """No prose paragraph (200 characters or more; tables and code excluded, where equal results may repeat) of the
    repository's markdown appears twice in one file: a scripted edit of experiments/README.md once copied 1,015 lines
    of it in again after the paragraph it replaced (commit 26c5561), and nothing else noticed."""
    import collections

    root = README.parent
    pages = [README, root / "CHANGELOG.md", root / "experiments" / "README.md", *sorted((root / "docs").rglob("*.md"))]
    twice = {}
    for page in pages:
        paragraphs = [p.strip() for p in page.read_text(encoding="utf-8").split("\n\n")]
        counts = collections.Counter(p for p in paragraphs if len(p) >= 200 and not p.startswith(("|", "```")))
        twice.update({f"{page.name}: {p[:60]}": n for p, n in counts.items() if n > 1})
    assert not twice, twice
