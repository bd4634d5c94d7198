"""The guides' code runs: every ``python`` block of a page under docs/guides/ is executed, in order, as one script
(one namespace per page), as a reader who copies them would run them.  Blocks meant to be read, not run, use another
fence language (``text``, ``bash``, ``diff``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import python_blocks

GUIDES = Path(__file__).resolve().parents[2] / "docs" / "guides"


def test_every_guide_has_code() -> None:
    pages = sorted(GUIDES.glob("*.md"))
    assert pages, f"no guides in {GUIDES}"
    assert all(python_blocks(p) for p in pages), "a guide without a runnable example"


@pytest.mark.parametrize("page", sorted(p.name for p in GUIDES.glob("*.md")))
def test_guide_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # whatever a guide writes lands in a fresh folder
    namespace: dict[str, object] = {"__name__": f"guide_{page.removesuffix('.md').replace('-', '_')}"}
    for i, code in enumerate(python_blocks(GUIDES / page)):
        exec(compile(code, f"{GUIDES / page}:block{i + 1}", "exec"), namespace)
