"""The decoders' generation-level measure (graphsub.bench.decode, ``graphsub bench decode``): on the tiny Llama
(TorchScript export, 8 tokens, one thread, three rounds of 2 ms), the plain export, onnxslim's output, the genai
builder's model of the same weights and a copy of the original standing for graphsub's output all generate the
plain export's greedy ids, have their prefill and decode@128 timed with a verdict against ``ort`` (decode@1024 does
not fit the tiny model's 512 positions), and the table shows every variant; the command's help, a --json run and
its usage errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("transformers")

from graphsub.bench import decode
from graphsub.bench.decoders import build_decoder, export_decoder
from graphsub.cli import app

runner = CliRunner()
TINY: dict[str, Any] = {"tokens": 8, "threads": [1], "rounds": 3, "budget_ms": 2.0}


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny Llama's plain export: graphsub's output in these tests (optimize is not run)."""
    out = tmp_path_factory.mktemp("original")
    exported = export_decoder("llama", out, "torchscript", "tiny")
    assert exported.path is not None, exported.error
    return Path(shutil.copy(exported.path, out / "graphsub.onnx"))


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory, original: Path) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("decode")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHSUB_SUITE_WORK", str(out / "work"))
        records = decode.run_decode(["llama"], "tiny", "torchscript", out / "results", peers=["onnxslim"],
                                    graphsub=False, extra={"graphsub": original}, **TINY)
    (rec,) = records
    rec["_out"] = out / "results"
    return rec


def test_every_variant_generates_the_originals_ids(record: dict[str, Any]) -> None:
    variants = record["variants"]
    assert list(variants) == ["ort", "onnxslim", "genai-builder", "graphsub"]
    assert record["torch_match"] and len(record["reference"]) == 8
    for name, o in variants.items():
        assert o["status"] == "ok" and o["verified"], (name, o)
        assert o["tokens"] == record["reference"] and o["prefill_err"] <= o["prefill_tol"]
    assert variants["graphsub"]["same_as"] == "ort"  # the copy is timed once
    assert variants["genai-builder"]["fused_kernels"]["GroupQueryAttention"] == 2


def test_timings_are_positive_with_verdicts(record: dict[str, Any]) -> None:
    assert record["graphs"] == ["prefill", "decode@128"] and record["skipped_graphs"] == ["decode@1024"]
    for name, o in record["variants"].items():
        for graph in record["graphs"]:
            entry = o["timing"][graph]["1"]
            assert entry["ms"] > 0, (name, graph)
            if graph.startswith("decode"):
                assert entry["tokens_per_s"] == pytest.approx(1000 / entry["ms"])
    base = record["variants"]["ort"]["timing"]["prefill"]["1"]
    assert len(base["aa_rounds_ms"]) == 3 and base["aa_ratio"] > 0
    entry = record["variants"]["genai-builder"]["timing"]["decode@128"]["1"]
    assert entry["verdict"]["sessions"] == 3 and len(entry["verdict"]["speedup_ci"]) == 2
    confirm = entry["confirm"]  # re-timed on its own: five fresh session groups, the A/A control in each
    assert confirm["sessions"] == 5 and confirm["rounds"] == 15 and confirm["aa_ratio"] > 0
    assert "confirm" not in record["variants"]["graphsub"]["timing"]["prefill"]["1"]  # the original's copy


def test_table_and_files(record: dict[str, Any]) -> None:
    out = record["_out"]
    assert json.loads((out / "decode.jsonl").read_text())["id"] == "llama.tiny.torchscript"
    text = (out / "decode.md").read_text()
    for name in ("| ort |", "| onnxslim |", "| genai-builder |", "| graphsub (= ort) |"):
        assert name in text
    assert "decode@1024 not timed" in text and "tok/s" in text and "A/A" in text


def test_table_of_a_failed_export() -> None:
    text = decode.decode_table([{"id": "x.tiny.dynamo", "error": "export failed (export): boom"}], [1])
    assert "| x.tiny.dynamo | - | export failed (export): boom |" in text


def test_cli_help_and_usage_errors() -> None:
    r = runner.invoke(app, ["bench", "--help"])
    assert r.exit_code == 0 and "decode" in r.stdout and "--tokens" in r.stdout
    r = runner.invoke(app, ["bench", "decode", "--models", "bert", "--json"])
    assert r.exit_code == 2 and "unknown decoder" in json.loads(r.stdout)["error"]
    r = runner.invoke(app, ["bench", "decode", "--size", "huge", "--json"])
    assert r.exit_code == 2
    r = runner.invoke(app, ["bench", "decode", "--models", "gpt2,llama", "--size", "1b", "--json"])
    assert r.exit_code == 2 and "not defined for gpt2" in json.loads(r.stdout)["error"]


def test_cli_json_run(tmp_path: Path, original: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHSUB_SUITE_WORK", str(tmp_path / "work"))
    r = runner.invoke(app, ["bench", "decode", "--models", "llama", "--size", "tiny", "--tokens", "4",
                            "--threads", "1", "--peers", "none", "--variant", f"graphsub={original}", "--rounds", "3",
                            "--round-ms", "1", "--out", str(tmp_path), "--json", "--seed", "1"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    rows = {row["variant"]: row for row in data["rows"]}
    assert set(rows) == {"ort", "genai-builder", "graphsub"}
    assert all(row["verified"] and row["tokens_match"] for row in rows.values())
    assert rows["genai-builder"]["timing"]["decode@128"]["1"]["tokens_per_s"] > 0
    assert Path(data["markdown"]).is_file()


def test_transformer_optimizer_only_where_it_knows_the_family(tmp_path: Path, original: Path) -> None:
    out = decode.produce("llama", build_decoder("llama", "tiny"), original, tmp_path, peers=["ort-transformers-99"],
                         graphsub=False, genai=False, budget_s=None, seed=0)
    assert out["ort"]["status"] == "ok" and Path(out["ort"]["path"]).is_file()
    assert out["ort-transformers-99"]["status"] == "not-applicable"
    assert decode.transformer_meta("gpt2", build_decoder("gpt2", "tiny")) == {"model_type": "gpt2", "num_heads": 4,
                                                                              "hidden_size": 64}


def test_graphsub_is_retimed_head_to_head_against_the_builder(record: dict[str, Any], original: Path) -> None:
    """Where graphsub's output and the builder's both ran (and differ), graphsub's is re-timed against the builder's
    directly, with the builder in the original's place and its own A/A control, and the Markdown shows it."""
    from graphsub.bench.decoders import feeds
    from graphsub.optimize.timing import Timers

    v = record["variants"]
    paths = {"ort": Path(v["ort"]["path"]), "genai-builder": Path(v["genai-builder"]["path"]), "graphsub": original}
    outcomes: dict[str, Any] = {name: {"timing": {"decode@128": {"1": {"ms": 1.0, "tokens_per_s": 1e3}}}}
                                for name in paths}
    f = feeds(build_decoder("llama", "tiny").layout, 1, 1, 128, seed=0)
    decode.confirm(outcomes, paths, f, "decode@128", 1, budget_ms=2.0, timers=Timers(session=decode.fitted_session))
    head = outcomes["graphsub"]["timing"]["decode@128"]["1"][decode.VS_GENAI]
    assert head["sessions"] == 5 and head["speedup"] > 0 and head["aa_ratio"] > 0
    assert head["speedup_ci"][0] <= head["speedup"] <= head["speedup_ci"][1]
    assert decode.VS_GENAI not in outcomes["genai-builder"]["timing"]["decode@128"]["1"]
    rec = {"id": "llama.tiny.torchscript", "variants": outcomes, "graphs": ["decode@128"]}
    table = decode.vs_genai_table([rec], [1])
    cells = table.splitlines()[2].strip("| ").split(" | ")  # decoder, then prefill, decode@128, decode@1024 @1t
    assert cells[0] == "llama.tiny.torchscript" and cells[1] == cells[3] == "-"
    assert "x [" in cells[2] and "(A/A " in cells[2]
    assert "head to head" in decode.markdown([rec], [1])
    assert decode.vs_genai_table([record], [1]) == ""  # graphsub's output was the original's copy: nothing to add
