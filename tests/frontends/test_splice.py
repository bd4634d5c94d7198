"""A rewritten graph written back over the ONNX file it was imported from (:mod:`graphsub.frontends.splice`): what the
rewrites left alone keeps computing its sizes at run time, so that the output keeps the file's symbolic dims where
the plain export (:func:`~graphsub.frontends.onnx_io.to_onnx`, static shapes) cannot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from graphsub.errors import VerificationError
from graphsub.frontends.dims import interface, restored
from graphsub.frontends.onnx_io import load, to_onnx
from graphsub.frontends.splice import _topological, origin_of, resymbolize, splice, splice_symbolic
from graphsub.ir.graph import Graph
from graphsub.ir.node import Ref
from graphsub.symbolic import keep_symbolic
from helpers import ort_run_x, symbolic_reshaped


def _double_relu(g: Graph) -> Graph:
    """``g`` with its relu written as relu(relu(.)): an edit that leaves the Reshape before it as imported."""
    nid = next(iter(g.ops_of("relu")))
    e = g.edit()
    x = g.nodes[nid].inputs[0]
    e.replace(Ref(nid, 0), e.op("relu", e.op("relu", x)))
    return e.commit()


def test_the_import_remembers_where_its_nodes_came_from(tmp_path: Path) -> None:
    src = symbolic_reshaped(tmp_path / "m.onnx")
    g = load(src)
    origin = origin_of(g)
    assert origin is not None and origin.opset >= 13
    ops = {origin.nodes.node[k].op_type for k, _, _ in origin.imported.values()}
    assert {"MatMul", "Add", "Reshape", "Relu"} <= ops and "Shape" not in ops  # Shape and Concat were folded
    assert origin_of(_double_relu(g)) is None  # an edit's graph: its import is the one to splice over


def test_a_splice_keeps_the_runtime_reshape_target_where_the_plain_export_bakes_it(tmp_path: Path) -> None:
    src = symbolic_reshaped(tmp_path / "m.onnx")
    g = load(src)
    with pytest.raises(VerificationError, match="cannot keep the symbolic"):
        keep_symbolic(src, to_onnx(g), graph=g)
    g2 = _double_relu(g)
    model = splice(g2, g)
    assert model is not None
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Relu") == 2 and "Shape" in ops and "Concat" in ops  # the file's shape arithmetic, again
    kept = keep_symbolic(src, model, graph=g, imported=True)
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run_x(kept.SerializeToString(), x), ort_run_x(src, x), rtol=1e-5, atol=1e-6)
    assert splice(g2, g2) is None  # not an import: nothing to write over


def test_resymbolize_rewrites_a_baked_reshape_target(tmp_path: Path) -> None:
    src = symbolic_reshaped(tmp_path / "m.onnx")
    g = load(src)
    static = to_onnx(g)
    iface = interface(src)
    model = resymbolize(static, restored(static, iface))
    target = next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer if "_sym_" in t.name)
    assert target.tolist() == [0, 2, 4]
    keep_symbolic(src, model, graph=g)  # runs at other batch sizes now
    assert splice_symbolic(_double_relu(g), g, iface) is not None


def test_a_model_that_writes_a_value_twice_or_has_a_cycle_has_no_order() -> None:
    a = helper.make_node("Relu", ["x"], ["y"])
    b = helper.make_node("Relu", ["y"], ["z"])
    assert [n.output[0] for n in _topological([b, a], {"x"}) or []] == ["y", "z"]
    assert _topological([a, helper.make_node("Relu", ["x"], ["y"])], {"x"}) is None
    cycle = [helper.make_node("Relu", ["w"], ["v"]), helper.make_node("Relu", ["v"], ["w"])]
    assert _topological(cycle, {"x"}) is None


def test_dims_check_writes_a_candidate_over_its_import(tmp_path: Path) -> None:
    """A candidate graph that loses the dims in the plain export passes the portfolio's check written over the
    original (:func:`graphsub.optimize.write.dims_check`), at the imported sizes too; a candidate made from another
    one is written over that one's import (:func:`graphsub.optimize.write.import_of`)."""
    from graphsub.optimize.candidates import ORIGINAL, Candidate, Portfolio
    from graphsub.optimize.write import dims_check, import_of

    src = symbolic_reshaped(tmp_path / "m.onnx")
    g = load(src)
    g2 = _double_relu(g)
    port = Portfolio()
    first = port.add(Candidate("search", to_onnx(g2).SerializeToString(), g2, ORIGINAL))
    on_top = port.add(Candidate("search+more", to_onnx(_double_relu(g2)).SerializeToString(), _double_relu(g2),
                                "search"))
    assert import_of("search+more", port, g) is g and import_of("nope", port, g) is None
    _, check = dims_check(str(src), g, input_shapes=None, check_sizes=(), seed=0, rtol=1e-4, atol=1e-5,
                          bases=lambda name: import_of(name, port, g))
    assert check is not None
    for c in (first, on_top):
        assert check(c) is None and c.spliced
        assert onnx.load_from_string(c.data).graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    lone = Candidate("lone", to_onnx(g2).SerializeToString(), g2, "unknown")
    assert check(lone) is not None and not lone.spliced  # no import to write it over: dropped, as before


def test_the_origin_says_whether_dims_were_left_free_and_the_tail_grows_then(tmp_path: Path) -> None:
    """An import that leaves symbolic dims free says so (:attr:`graphsub.frontends.splice.Origin.free`): its
    candidates are run at other sizes before they are timed, which the plan's tail then counts
    (:func:`graphsub.optimize.budget.tail_estimate_s`, ``sizes``)."""
    from graphsub.optimize.budget import tail_estimate_s

    src = symbolic_reshaped(tmp_path / "m.onnx")
    free, fixed = load(src), load(src, input_shapes={"x": (2, 8)})
    assert origin_of(free) is not None and origin_of(free).free  # type: ignore[union-attr]
    assert origin_of(fixed) is not None and not origin_of(fixed).free  # type: ignore[union-attr]
    assert tail_estimate_s(free, budget_ms=200.0, sizes=True) > tail_estimate_s(free, budget_ms=200.0)
