"""``graphsub rules`` commands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.rules.taso_pb import default_pb_path

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout


def test_rules_list_json_fields_and_set_sizes() -> None:
    code, out = invoke("rules", "list", "ocggs157", "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 157
    assert {"name", "origin", "exact"} <= set(rows[0])
    assert sum(r["origin"] == "taso-pb" for r in rows) == 133
    code, out = invoke("rules", "list", "taso151", "--json")
    assert code == 0 and len(json.loads(out)) == 151


def test_rules_list_taso_pb_from_a_path(tmp_path: Path) -> None:
    copy = tmp_path / "subst.pb"
    shutil.copy(default_pb_path(), copy)
    code, out = invoke("rules", "list", "taso-pb", "--path", str(copy), "--json")
    assert code == 0 and len(json.loads(out)) == 133
    code, out = invoke("rules", "list", "taso-pb", "--path", str(tmp_path / "missing.pb"), "--json")
    assert code == 3 and "error" in json.loads(out)


def test_rules_show_and_unknown() -> None:
    code, out = invoke("rules", "show", "taso_pb_000", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["origin"] == "taso-pb" and data["example_before"] and data["example_after"]
    code, _ = invoke("rules", "show", "no_such_rule")  # unknown names are usage errors in every command
    assert code == 2
    code, _ = invoke("rules", "list", "no_such_set")
    assert code == 2


def test_rules_verify_json() -> None:
    code, out = invoke("rules", "verify", "metaflow", "--json")
    rows = json.loads(out)
    assert code == 0, [r for r in rows if not r["passed"]]
    assert rows and all({"name", "passed"} <= set(r) for r in rows)
    assert all(r["passed"] for r in rows if r["exact"])


def test_rules_match_counts() -> None:
    code, out = invoke("rules", "match", "zoo:inception_v3", "ocggs157", "--json")
    assert code == 0
    counts = json.loads(out)
    assert sum(counts.values()) > 0 and all(isinstance(v, int) for v in counts.values())
