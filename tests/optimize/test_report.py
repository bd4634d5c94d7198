"""The HTML report of ``optimize`` (``graphsub optimize --report``, tested in tests/cli/test_cli_optimize.py): a
self-contained page, also when the optimized model is not written."""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import pytest

from graphsub.optimize import OptimizeResult, optimize
from graphsub.optimize.candidates import CLEANUP_STEP
from graphsub.optimize.report import render_report, write_report
from graphsub.rules.rule import Rule
from graphsub.search import Budget
from helpers import ReportPage, _node_count, fake_timers, parse_report, small_model

FAST = {"cost": "roofline:cpu", "budget": Budget(time_s=5, k=4), "seeds": 1, "peers": "none", "eqsat_s": 0,
        "ort_search_s": 0}
SECTIONS = {"summary", "performance", "histogram", "substitutions", "trace", "regions"}
PNG = b"\x89PNG\r\n\x1a\n"


def assert_self_contained(text: str) -> ReportPage:
    page = parse_report(text)
    assert set(page.sections) == SECTIONS
    assert "http://" not in text and "https://" not in text
    assert not {"script", "link", "iframe", "object", "embed"} & page.tags
    assert "url(" not in text  # no CSS fetches either
    for src in page.urls:
        assert src.startswith("data:image/png;base64,"), src[:60]
    for src in page.images:
        assert base64.b64decode(src.split(",", 1)[1], validate=True).startswith(PNG)
    return page


def n_pictures(page: ReportPage) -> int:
    return len(page.images) - 2  # the histogram and the trace come first


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, OptimizeResult]]:
    """The small model of conftest, optimized once (fake timing: the optimized model is faster)."""
    path = tmp_path_factory.mktemp("report") / "small.onnx"
    onnx.save(small_model(), str(path))
    yield path, optimize(path, timers=fake_timers(_node_count), **FAST)  # type: ignore[arg-type]


def test_sections_images_and_rows(small: tuple[Path, OptimizeResult]) -> None:
    _, res = small
    text = render_report(res)
    page = assert_self_contained(text)
    n = len(res.search.sequence)
    assert n >= 2 and res.verified and not res.kept_original
    drawn = sum(s.rule != CLEANUP_STEP.rule for s in res.search.sequence)  # the clean-up as a whole: no picture
    assert len(page.rows) == n and n_pictures(page) == drawn >= 1
    for step in res.search.sequence:
        assert step.rule in text
    assert "ORT_ENABLE_ALL" in text and "Candidates" in text and "no output file was requested" in text
    assert "roofline:cpu" in text and res.search.algorithm in text
    assert render_report(res) == text  # deterministic, images included


def test_pictures_are_capped(small: tuple[Path, OptimizeResult]) -> None:
    _, res = small
    page = parse_report(text := render_report(res, max_pictures=1))
    n = len(res.search.sequence)
    assert n_pictures(page) == 1 and len(page.rows) == n
    assert f"{n - 1} more substitution(s) not drawn" in text


def test_user_strings_are_escaped(small: tuple[Path, OptimizeResult]) -> None:
    _, res = small
    evil = dataclasses.replace(res, model='<script>alert("x")</script>', decision="a < b & c",
                               cost_model="<b>cost</b>")
    text = render_report(evil)
    assert "<script>" not in text and "<b>cost</b>" not in text
    assert "&lt;script&gt;" in text and "a &lt; b &amp; c" in text
    assert_self_contained(text)


def test_zoo_model(tmp_path: Path) -> None:
    out = tmp_path / "sru.html"
    res = optimize("zoo:sru", measure_latency=False, cost="roofline:cpu", seeds=1, budget=Budget(time_s=2))
    write_report(res, out)
    assert res.report == str(out)
    page = assert_self_contained(text := out.read_text(encoding="utf-8"))
    assert len(page.rows) == len(res.search.sequence) > 0
    assert "Latency was not measured" in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".graphsub-")]


def test_report_when_the_original_is_kept(model_path: Path, tmp_path: Path,
                                          fake_timing: Callable[..., None]) -> None:
    fake_timing(lambda model: 1.0)  # never faster
    out, rep = tmp_path / "o.onnx", tmp_path / "r.html"
    res = optimize(model_path, output=out, **FAST)  # type: ignore[arg-type]
    write_report(res, rep)
    assert res.kept_original and out.read_bytes() == model_path.read_bytes()
    text = rep.read_text(encoding="utf-8")
    page = assert_self_contained(text)
    assert "NOT written" in text and "no candidate is faster" in text
    assert len(page.rows) == len(res.search.sequence) > 0 and n_pictures(page) > 0  # what the search found


def test_report_when_verification_fails(model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        bad_rule: Rule, fake_timing: Callable[..., None]) -> None:
    from graphsub.rules.library import find_rule

    monkeypatch.setattr("graphsub.optimize.pipeline.resolve_rules",
                        lambda spec: [find_rule("cpu_identity_remove"), bad_rule])
    out, rep = tmp_path / "o.onnx", tmp_path / "r.html"
    res = optimize(model_path, output=out, **FAST)  # type: ignore[arg-type]
    write_report(res, rep)
    assert not res.verified and not out.exists() and res.failure is not None
    text = rep.read_text(encoding="utf-8")
    page = assert_self_contained(text)
    assert "Verification FAILED" in text and "test_bad_add_drop" in text
    assert page.rows.count("fail") == 1 and page.rows.index("fail") == res.failure.step - 1


def test_report_without_substitutions(model_path: Path, fake_timing: Callable[..., None]) -> None:
    res = optimize(model_path, rules=[], cleanup=False, **FAST)  # type: ignore[arg-type]
    text = render_report(res)
    page = assert_self_contained(text)
    assert not res.search.sequence and page.rows == [] and n_pictures(page) == 0
    assert "No cheaper equivalent graph" in text and "Nothing changed" in text


def test_import_stays_light() -> None:
    code = ("import sys, graphsub, graphsub.optimize, graphsub.optimize.report, graphsub.cli; "
            "sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
