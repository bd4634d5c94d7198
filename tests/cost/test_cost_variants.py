"""Calibration helpers: rewritten variants stay equivalent; rank statistics; a tiny calibration."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from graphsub.cost import get_model
from graphsub.cost.calibrate import (
    GraphCase,
    calibrate,
    pairwise_agreement,
    pearson,
    ranks,
    spearman,
    summarize,
)
from graphsub.cost.variants import merge_siblings, roundtrip
from graphsub.data import materialize, random_inputs
from graphsub.execute import run
from graphsub.ir import Builder, Graph


def siblings() -> Graph:
    b = Builder("sib")
    x = b.input("x", (1, 6, 7, 7))
    a = b.conv2d(x, b.weight("a", (4, 6, 3, 3)), b.weight("ab", (4,)), pads=(1, 1, 1, 1), act="relu")
    c = b.conv2d(x, b.weight("c", (5, 6, 1, 1)), b.weight("cb", (5,)), act="relu")
    d = b.conv2d(x, b.weight("d", (3, 6, 3, 3)), b.weight("db", (3,)), pads=(1, 1, 1, 1), act="relu")
    t = b.input("t", (3, 10))
    m1, m2 = b.matmul(t, b.weight("m1", (10, 4))), b.matmul(t, b.weight("m2", (10, 6)))
    return b.build({"conv": b.concat(a, c, d, axis=1), "mm": b.concat(m1, m2, axis=1)})


def same_function(g1: Graph, g2: Graph) -> None:
    g1 = materialize(g1, 0)
    g2 = materialize(g2, 0, known=g1.params)
    feeds = random_inputs(g1, 0)
    o1, o2 = run(g1, feeds), run(g2, feeds)
    for k in o1:
        np.testing.assert_allclose(o1[k], o2[k], rtol=1e-4, atol=1e-4 * float(np.abs(o1[k]).max()))


@pytest.mark.parametrize("enlarge", [False, True])
def test_merge_siblings_is_equivalent(enlarge: bool) -> None:
    g = siblings()
    m = merge_siblings(g, enlarge=enlarge)
    assert m is not None
    hist = m.op_histogram()
    assert hist["conv2d"] == (1 if enlarge else 2) and hist["matmul"] == 1
    same_function(g, m)


def test_roundtrip_unfuses_activations() -> None:
    g = siblings()
    r = roundtrip(g)
    assert r is not None and r.op_histogram()["relu"] == 3
    same_function(g, r)


def test_rank_statistics() -> None:
    assert ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [2, 4, 6, 8, 100]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    # measured 10 vs 10.2 is a tie at 5 %; the other two pairs count
    assert pairwise_agreement([1, 2, 3], [10, 10.2, 30]) == (2, 2)
    assert pairwise_agreement([3, 2, 1], [10, 20, 30]) == (0, 3)


def test_tiny_calibration_end_to_end(tmp_path: Path) -> None:
    g = siblings()
    cases = [GraphCase("sib", "base", g), GraphCase("sib", "merged", merge_siblings(g, enlarge=True) or g)]
    models = {"flops": get_model("flops"),
              "measured": get_model("measured", threads=1, cache=tmp_path / "c.sqlite", progress=False,
                                    budget_ms=2.0, min_repeats=3)}
    rows = calibrate(cases, models, threads=1, rounds=2, budget_ms=10.0, min_repeats=2)
    assert [r.variant for r in rows] == ["base", "merged"]
    for r in rows:
        assert set(r.measured_ms) == {"disable", "all"} and all(v > 0 for v in r.measured_ms.values())
        assert r.samples["disable"] >= 4 and set(r.predicted) == {"flops", "measured"}
    summary = summarize(rows, [("measured", "disable"), ("flops", "all")])
    assert {s["prediction"] for s in summary} == {"measured", "flops"}
    assert all(-1.0 <= s["spearman"] <= 1.0 or math.isnan(s["spearman"]) for s in summary)


def test_mbnet_variants_compute_the_same_function() -> None:
    from graphsub.cost.variants import mbnet
    from graphsub.rules.apply import fold_weights

    folded, relu, bn = (mbnet(v, size=8, width=8) for v in ("folded", "relu", "bn"))
    assert folded.op_histogram()["conv2d"] == relu.op_histogram()["relu"] == bn.op_histogram()["batchnorm"] == 13
    # folded and relu share weight names and values: same function by construction
    same_function(folded, relu)
    # bn differs in parametrization; it runs
    out = run(fold_weights(materialize(bn, 0)), random_inputs(bn, 0))
    assert next(iter(out.values())).shape == (1, 512, 1, 1)
    with pytest.raises(ValueError, match="variant"):
        mbnet("fast")
