"""``graphsub rules`` commands: list, show, verify, match, prove, generate (also on a two-node Ray cluster)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphsub.cli import app
from graphsub.rules.generate.emit import load_generated_json
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


def test_rules_prove_json() -> None:
    code, out = invoke("rules", "prove", "metaflow", "--timeout-ms", "2000", "--json")
    data = json.loads(out)
    assert code == (1 if data["summary"]["refuted"] else 0)
    assert data["summary"]["total"] == len(data["rules"]) > 0
    assert {x["status"] for x in data["rules"]} <= {"proven", "refuted", "unknown"}
    assert all(x["reason"] for x in data["rules"] if x["status"] != "proven")
    code, _ = invoke("rules", "prove", "no_such_set", "--json")
    assert code == 2  # an unknown rule set is a usage error in every command


def test_rules_generate_and_errors(tmp_path: Path) -> None:
    out = tmp_path / "rules.json"
    code, text = invoke("rules", "generate", "--ops", "matmul,transpose", "--max-ops", "2", "--shards", "2",
                        "--executor", "serial", "-o", str(out), "--json")
    assert code == 0, text
    summary = json.loads(text)
    assert summary["counts"]["emitted"] == len(json.loads(out.read_text())["substitutions"]) > 0
    assert load_generated_json(out)
    code, text = invoke("rules", "generate", "--ops", "matmul,frobnicate", "-o", str(out), "--json")
    assert code == 2 and "frobnicate" in json.loads(text)["error"]
    code, _ = invoke("rules", "generate", "--max-ops", "9", "-o", str(out), "--json")
    assert code == 2
    code, text = invoke("rules", "generate", "--executor", "mpi", "--ops", "add", "--max-ops", "1", "-o", str(out),
                        "--json")
    assert code == 2 and "executor" in json.loads(text)["error"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "graphsub-generated-rules", "version": 7}))
    code, text = invoke("rules", "prove", "--file", str(bad), "--json")
    assert code == 3 and "version" in json.loads(text)["error"]


def test_rules_generate_on_ray_writes_the_same_file_as_serially(ray_cluster: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The library side (graphsub.rules.generate on Ray) is tests/test_executors.py."""
    from graphsub.rules.generate import pipeline, prune

    monkeypatch.setattr(prune, "CONFIRM_CHUNK", 50)  # several tasks per stage
    monkeypatch.setattr(pipeline, "VERIFY_CHUNK", 8)
    outs = {}
    for ex in ("serial", "ray"):
        outs[ex] = tmp_path / f"{ex}.json"
        code, text = invoke("rules", "generate", "--ops", "matmul,transpose,add", "--max-ops", "2", "--executor", ex,
                            "--ray-address", ray_cluster, "--shards", "3", "-o", str(outs[ex]), "--json")
        assert code == 0, text
    assert outs["serial"].read_bytes() == outs["ray"].read_bytes()
