"""Every model onnxruntime runs, ``graphsub optimize`` runs: each model of the corpus of valid-but-unusual exports
(tests/corpus_models.py: run-time reshapes, If/Loop/Scan reading outer values, int8 QDQ, float16, opsets 9 and 21,
local functions, contrib ops, odd interfaces) goes through the command line and comes back as a drop-in
replacement: exit 0, the file written, loaded by onnxruntime, the same fed inputs and outputs (names, order, element
types, symbolic dimension names), the same metadata_props / doc_string / model_version / domain, and the same outputs
on random inputs at two sizes of its symbolic dimensions.

``--keep-slower`` with fake timing (a model's latency is its node count) makes the run write the candidate with the
fewest nodes whenever a verified candidate differs from the original, so the export path is what is checked, not
only the byte-for-byte copy of a kept original; the search's cost model is the default (measured), as users run it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from corpus_models import CASES, check, dropin_problems
from graphsub.cli import app
from helpers import fake_timing_fixture  # noqa: F401  (fixture)

runner = CliRunner()
RUN = ("--budget", "10", "--peers", "none", "--keep-slower", "--json")

#: the models graphsub does not yet turn into a drop-in replacement, each with why (strict: a fix must remove it)
KNOWN: dict[str, str] = {}
#: ``graphsub convert`` (import and export, no search) cannot write what it cannot import: its known refusals
_UNTYPED = ("exit 3: Reshape's target shape is a graph input; the import keeps the Reshape opaque but cannot type its "
            "output (ONNX shape inference cannot, and no run can: random integers are not a valid shape); optimize "
            "writes such a model back unchanged (graphsub.errors.NotModelled), convert has nothing to convert")


CONVERT_KNOWN = {"shape_input_reshape": _UNTYPED}


def _params(known: dict[str, str]) -> list[object]:
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=known[name])) if name in known else name
            for name in CASES]


def _check_written(name: str, src: Path, out: Path, kept: bool, what: str) -> None:
    """``out`` loads, passes onnx's checker and replaces ``src`` (:func:`corpus_models.dropin_problems`); a kept
    original is ``src`` byte for byte."""
    case = CASES[name]
    if kept:
        assert out.read_bytes() == src.read_bytes()
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=case.full_check)
    assert dropin_problems(case, onnx.load(str(src)), written) == [], what


def test_the_corpus_is_valid() -> None:
    """Each model passes onnx's full check (where onnx knows its ops) and runs in onnxruntime at its sizes."""
    assert [why for c in CASES.values() if (why := check(c)) is not None] == []


@pytest.mark.parametrize("name", _params(KNOWN))
def test_optimize_writes_a_dropin_replacement(name: str, tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    src, out = tmp_path / f"{name}.onnx", tmp_path / "out.onnx"
    onnx.save(CASES[name].build(), str(src))
    r = runner.invoke(app, ["optimize", str(src), "-o", str(out), *RUN])
    assert r.exit_code == 0, r.stdout[-3000:]
    d = json.loads(r.stdout)
    assert d["written"] == str(out) and out.is_file(), d["decision"]
    _check_written(name, src, out, d["kept_original"], f"{d['chosen']}: {d['decision']}")


@pytest.mark.parametrize("name", _params(CONVERT_KNOWN))
def test_convert_round_trip_is_a_dropin_replacement(name: str, tmp_path: Path) -> None:
    """The import and the export alone (``graphsub convert``): the export path also for the models whose optimize
    run keeps the original (If, Loop, Scan, contrib ops, the odd interface)."""
    src, out = tmp_path / f"{name}.onnx", tmp_path / "out.onnx"
    onnx.save(CASES[name].build(), str(src))
    r = runner.invoke(app, ["convert", str(src), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.stdout[-3000:]
    _check_written(name, src, out, False, "convert")


def test_weights_listed_as_inputs_are_kept_as_weights_and_the_run_says_so(tmp_path: Path,
                                                                          fake_timing: Callable[..., None]) -> None:
    """Opset 9's style (every weight also a graph input): the written model is rewritten (BatchNormalization folded
    into the Conv), keeps the fed input, lists the weights as weights only, and the notes say so."""
    src, out = tmp_path / "opset9.onnx", tmp_path / "out.onnx"
    original = CASES["opset9"].build()
    onnx.save(original, str(src))
    r = runner.invoke(app, ["optimize", str(src), "-o", str(out), *RUN])
    assert r.exit_code == 0, r.stdout[-3000:]
    d = json.loads(r.stdout)
    assert not d["kept_original"], d["decision"]
    listed = [vi.name for vi in onnx.load(str(out)).graph.input]
    assert listed == ["x"] and len(original.graph.input) == 10
    assert any(n.startswith("output: the input lists 9 weight(s) as graph inputs too") for n in d["portfolio_notes"])
