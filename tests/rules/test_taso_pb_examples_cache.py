"""The example shapes of TASO's rules are solved once and kept between processes (start-up time of every command
that uses the default rule set): a rule converted from the kept shapes is the rule converted from scratch."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphsub.rules.taso_pb import default_pb_path, read_collection
from graphsub.rules.taso_pb_convert import _examples_key, _read_solved, _write_solved, convert_rule


def test_kept_examples_give_the_same_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = str(default_pb_path().resolve())
    file = _examples_key(path)
    assert file is not None and file[0] == tmp_path / "graphsub" / "taso_pb_examples.json"
    assert _examples_key(str(tmp_path / "other.pb")) is None  # only the default file's examples are kept
    pb_rules = read_collection(path, lenient=True).rules[:6]
    solved: dict[int, list[dict[int, tuple[int, ...]]]] = {}
    fresh = [convert_rule(r.index, r, solved) for r in pb_rules]
    assert sorted(solved) == [r.index for r in pb_rules]
    _write_solved(file, solved)
    kept = _read_solved(file)
    assert kept == solved
    again = [convert_rule(r.index, r, kept) for r in pb_rules]
    assert [(r.name, r.examples, r.tags) for r in again] == [(r.name, r.examples, r.tags) for r in fresh]


def test_an_unreadable_or_stale_cache_only_costs_the_solving(tmp_path: Path) -> None:
    bad = tmp_path / "taso_pb_examples.json"
    bad.write_text("{not json")
    assert _read_solved((bad, "k")) == {} and _read_solved(None) == {}
    where = (tmp_path / "missing" / "deeper" / "f.json", "k1")
    _write_solved(where, {1: [], 2: [{-1: (2, 3)}]})  # directories are made
    assert _read_solved(where) == {1: [], 2: [{-1: (2, 3)}]}
    assert _read_solved((where[0], "k2")) == {}  # another file or code: solved again
