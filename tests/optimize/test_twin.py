"""The sizes a candidate's own reshapes and expands take, in symbols (:mod:`graphsub.optimize.twin`): its steps
replayed on the file imported at other sizes, each target fitted as a constant times symbolic dims, written as shape
arithmetic on the graph inputs (:func:`graphsub.frontends.splice.splice`), so that the candidate keeps the file's
symbolic dims."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphsub.frontends.dims import interface
from graphsub.frontends.onnx_import import from_onnx
from graphsub.frontends.onnx_io import load, to_onnx
from graphsub.frontends.splice import splice_symbolic
from graphsub.optimize.twin import fit, other_sizes, sized
from graphsub.rules.library import find_rule
from graphsub.rules.replay import first_step, replay
from graphsub.rules.rule import RuleStep
from graphsub.symbolic import imported_sizes, keep_symbolic
from helpers import float_vi, ort_run_x, save_onnx


def _two_reshapes(path: Path) -> Path:
    """``relu(reshape(reshape(x, [batch, 2, 4]), [2 * batch, 4]))``, both targets computed from ``Shape(x)``."""
    consts = [numpy_helper.from_array(np.array(v, dtype=np.int64), n)
              for n, v in (("tail", [2, 4]), ("two", [2]), ("four", [4]))]
    nodes = [helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
             helper.make_node("Concat", ["b", "tail"], ["s1"], axis=0),
             helper.make_node("Reshape", ["x", "s1"], ["r1"]),
             helper.make_node("Mul", ["b", "two"], ["b2"]),
             helper.make_node("Concat", ["b2", "four"], ["s2"], axis=0),
             helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Relu", ["r2"], ["y"])]
    return save_onnx(nodes, [float_vi("x", ["batch", 8])], [float_vi("y", ["n", 4])], consts, path)


def test_fit_finds_the_fewest_symbolic_dims() -> None:
    syms = {"b": (2, 9), "s": (3, 14), "t": (8, 32)}
    assert fit(12, 12, syms) == (12, ())
    assert fit(8, 36, {"b": (2, 9)}) == (4, ("b",))
    assert fit(6, 126, syms) == (1, ("b", "s"))
    assert fit(7, 8, syms) is None
    first = {"b": 2, "s": 3}
    second = other_sizes(first)
    assert all(second[k] != v for k, v in first.items()) and len(set(second.values())) == 2


def test_a_merged_reshape_is_written_with_its_target_in_symbols(tmp_path: Path) -> None:
    src = _two_reshapes(tmp_path / "m.onnx")
    g = load(src, generic=True)
    iface = interface(src)
    rule = find_rule("cpu_reshape_reshape")
    step = first_step(g, rule)
    final = replay(g, [rule], [step])
    first = imported_sizes(iface, g)
    second = other_sizes(first)
    g2 = from_onnx(onnx.load(str(src)), sizes=second)
    got = sized(final, [step], g, g2, iface, first, second)
    assert got is not None
    one, s = got
    assert list(s.shapes.values()) == [((2, ("batch",)), (4, ()))] and s.witnesses == {"batch": ("x", 0)}
    model = splice_symbolic(one, g, iface, s)
    assert model is not None
    assert any(n.op_type == "Shape" and n.input[0] == "x" for n in model.graph.node)
    kept = keep_symbolic(src, model, graph=g, imported=True)
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run_x(kept.SerializeToString(), x), ort_run_x(src, x), rtol=1e-6, atol=1e-6)
    plain = to_onnx(one)  # the same graph exported at the imported sizes: batch 2 only
    assert [d.dim_value for d in plain.graph.input[0].type.tensor_type.shape.dim] == [2, 8]
    assert sized(final, [RuleStep("no_such_rule", (1,))], g, g2, iface, first, second) is None


def test_a_step_that_names_no_rule_does_not_read_the_generated_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spelling source's rows layout is a step over the file, not a rule: looking it up fails without reading
    the 4,420 generated rules (9 s); a generated rule's own name still reads them."""
    from graphsub.errors import RuleError
    from graphsub.optimize import twin

    monkeypatch.setattr(twin, "_LOADED", [])
    monkeypatch.setattr(twin, "_RULES", {})
    with pytest.raises(RuleError, match="layout_rows_2d"):
        twin._rule("layout_rows_2d")
    assert "generated" not in twin._LOADED and "decoder" in twin._LOADED
    assert twin._rule("cleanup_concat_noop").name == "cleanup_concat_noop"


def test_a_derived_candidate_replays_from_the_import_its_steps_start_from(tmp_path: Path) -> None:
    """``search+spelling`` (base ``search``, no import) carries the search's steps and its own: its steps start from
    the original's import, which :func:`graphsub.optimize.write.root_import` finds; a candidate whose steps do not
    begin with its base's has none."""
    import math

    from graphsub.optimize.candidates import ORIGINAL, Candidate, Portfolio
    from graphsub.optimize.write import root_import
    from graphsub.search.base import Step

    src = _two_reshapes(tmp_path / "m.onnx")
    g = load(src)
    own = g.edit().commit()  # a graph of graphsub's: no import behind it
    a, b = Step("cpu_reshape_reshape", (), math.nan), Step("ortsp_ln_sum", (), math.nan)
    port = Portfolio()
    search = port.add(Candidate("search", b"s", own, ORIGINAL, (a,)))
    derived = port.add(Candidate("search+spelling", b"d", own, "search", (a, b)))
    other = port.add(Candidate("search+other", b"o", own, "search", (b,)))
    assert root_import(search, port, g, str(src)) == (ORIGINAL, g, str(src))
    assert root_import(derived, port, g, str(src)) == (ORIGINAL, g, str(src))
    assert root_import(other, port, g, str(src)) is None
