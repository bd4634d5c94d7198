"""optimize_many (its command line, `graphsub optimize-many`, is tested in tests/cli/test_cli_optimize.py): one record
per model in order, a bad model reported without losing the others, folders expanded; on a two-node Ray cluster, each
node timing one model at a time and saying so."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from graphsub.errors import GraphsubError
from graphsub.optimize.many import expand_models, optimize_many

FAST = {"time_s": 30.0, "peers": "none", "eqsat_s": 0.0, "ort_search_s": 0, "seeds": 1, "threads": 1,
        "cost": "roofline:cpu"}


def _models(tmp_path: Path) -> list[str]:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf")
    return ["zoo:resnet:blocks=1", str(bad), "zoo:sru"]


def test_serial_records_every_model_in_order(tmp_path: Path, fake_timing: object) -> None:
    recs = optimize_many(_models(tmp_path), tmp_path / "out", **FAST)
    assert [r["index"] for r in recs] == [0, 1, 2]
    good, bad, other = recs
    assert good["ok"] and good["verified"] and Path(good["output"]).is_file() and other["ok"]
    assert not bad["ok"] and "broken.onnx" in bad["error"] and bad["error_type"] != "Exception"


def test_folders_expand_and_bad_options_are_refused(tmp_path: Path) -> None:
    (tmp_path / "b.onnx").write_bytes(b"")
    (tmp_path / "a.onnx").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("x")
    assert expand_models([str(tmp_path), "zoo:sru"]) == [str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"),
                                                         "zoo:sru"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GraphsubError, match=r"no \.onnx"):
        expand_models([str(empty)])
    with pytest.raises(GraphsubError, match="time models side by side"):
        optimize_many(["zoo:sru"], tmp_path, executor="process")
    with pytest.raises(GraphsubError, match="unknown option"):
        optimize_many(["zoo:sru"], tmp_path, output="x.onnx")


def test_on_ray_each_node_times_one_model_at_a_time(ray_cluster: str, tmp_path: Path) -> None:
    models = ["zoo:resnet:blocks=1", "zoo:sru", str(tmp_path / "missing.onnx"), "zoo:resnet:blocks=2"]
    recs = optimize_many(models, tmp_path / "out", executor="ray", ray_address=ray_cluster, **FAST)
    assert [r["model"] for r in recs] == models
    assert [r["ok"] for r in recs] == [True, True, False, True] and "missing.onnx" in recs[2]["error"]
    ran = [r for r in recs if r.get("node")]
    assert len({r["node"] for r in ran}) == 2  # both nodes worked
    for node in {r["node"] for r in ran}:  # never two models at once on one node
        spans = sorted((r["started"], r["finished"]) for r in ran if r["node"] == node)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
