"""Symbolic input dimensions (ONNX ``dim_param``) stay symbolic in what graphsub writes, or nothing is written.

graphsub imports a dynamic batch at size 1 (or at ``--input-shape``); a model written from the IR must still accept
the sizes the original accepts (checked at other sizes in onnxruntime), else the write is refused -- then the output
is static, as asked.  The library side (:func:`graphsub.symbolic.keep_symbolic`, ``optimize``); the command line
(``convert`` / ``search``: exit code 1 and nothing written) is tests/cli/test_cli_convert_symbolic.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from graphsub.errors import VerificationError
from graphsub.frontends.dims import interface
from graphsub.frontends.onnx_io import load, to_onnx
from graphsub.symbolic import keep_symbolic
from helpers import declared_dims, float_vi, ort_run_x, save_onnx, symbolic_dense, symbolic_reshaped


def test_a_name_fixed_on_one_input_fixes_it_on_the_others(tmp_path: Path) -> None:
    src = save_onnx([helper.make_node("Add", ["x", "m"], ["y"])],
                    [float_vi("x", ["batch", "seq"]), float_vi("m", ["batch", "seq"])],
                    [float_vi("y", ["batch", "seq"])], [], tmp_path / "two.onnx")
    g = load(src, input_shapes={"x": (2, 5)})
    assert [t.shape for t in g.input_types] == [(2, 5), (2, 5)]
    assert interface(src, {"x": (2, 5)}).free == ()


def test_keep_symbolic_on_protos_and_bytes(tmp_path: Path) -> None:
    src = symbolic_dense(tmp_path / "m.onnx", batch=None)  # an anonymous dim: kept anonymous
    g = load(src)
    model = to_onnx(g)
    assert keep_symbolic(None, model) is model  # no file behind it (a zoo model)
    assert keep_symbolic(src, model, input_shapes={"x": (1, 8)}) is model  # fixed by the user
    kept = keep_symbolic(src, model, graph=g)
    assert isinstance(kept, onnx.ModelProto) and kept is not model
    d = kept.graph.input[0].type.tensor_type.shape.dim[0]
    assert not d.HasField("dim_value") and not d.dim_param
    again = keep_symbolic(src, kept.SerializeToString(), graph=g)  # already symbolic (a peer's output): checked
    assert isinstance(again, bytes)
    x = np.ones((4, 8), dtype=np.float32)
    np.testing.assert_allclose(ort_run_x(again, x), ort_run_x(src, x), rtol=1e-5, atol=1e-6)
    bad = symbolic_reshaped(tmp_path / "r.onnx")
    with pytest.raises(VerificationError, match="--input-shape x=1x8"):
        keep_symbolic(bad, to_onnx(load(bad)))


def test_optimize_writes_a_rewrite_over_the_input_when_its_export_lost_the_batch(tmp_path: Path) -> None:
    """A rewrite computed at the imported sizes (a Reshape's target baked in by the plain export) is written again
    over the input's own nodes (:mod:`graphsub.frontends.splice`), so that the Reshape reads its target from the
    input's shape arithmetic: a drop-in replacement at every batch size; with the batch fixed, the output is
    static."""
    from graphsub.optimize import optimize
    from graphsub.search import Budget

    src, dst = symbolic_reshaped(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    res = optimize(str(src), output=dst, measure_latency=False, cost="roofline:cpu", budget=Budget(time_s=2),
                   keep_slower=True, seeds=1)
    assert res.written == str(dst) and declared_dims(dst)["x"] == ["batch", 8]
    assert res.search.sequence and not res.kept_original  # graphsub's rewrite, not the original
    assert [t.shape for t in res.original.input_types] == [(2, 8)]  # imported at a size that is not 1
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run_x(dst, x), ort_run_x(src, x), rtol=1e-5, atol=1e-6)
    dst.unlink()
    res = optimize(str(src), output=dst, measure_latency=False, cost="roofline:cpu", budget=Budget(time_s=2),
                   keep_slower=True, seeds=1, input_shapes={"x": (2, 8)})
    assert res.written == str(dst) and declared_dims(dst)["x"] == [2, 8]
    sized = optimize(str(src), measure_latency=False, cost="roofline:cpu", budget=Budget(time_s=2), seeds=1,
                     sizes={"batch": 4})
    assert [t.shape for t in sized.original.input_types] == [(4, 8)]
    with pytest.raises(ValueError, match="not a free symbolic dimension"):
        optimize(str(src), measure_latency=False, budget=Budget(time_s=2), sizes={"seq": 4})


def test_an_output_declared_without_a_shape_gets_its_rank_only(tmp_path: Path) -> None:
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    src = save_onnx(relu, [float_vi("x", ["n", 8])], [float_vi("y", None)], [], tmp_path / "m.onnx")
    kept = keep_symbolic(src, to_onnx(load(src)))
    dims = kept.graph.output[0].type.tensor_type.shape.dim
    assert len(dims) == 2 and not any(d.HasField("dim_value") or d.HasField("dim_param") for d in dims)
    onnx.checker.check_model(kept, full_check=True)  # a graph output needs a shape; sizes are not declared
    assert [d.dim_param or d.dim_value for d in kept.graph.input[0].type.tensor_type.shape.dim] == ["n", 8]


def test_portfolio_candidates_are_checked_at_other_sizes_before_timing(tmp_path: Path) -> None:
    """Every candidate of an input with free symbolic dims is checked at other sizes before it is timed
    (:func:`graphsub.optimize.write.dims_check`): one computed at the imported sizes is dropped with the reason, one
    that keeps them (a peer's output, here the original itself) passes and is timed as it would be written."""
    from graphsub.optimize.candidates import Candidate
    from graphsub.optimize.write import both, dims_check

    src = symbolic_reshaped(tmp_path / "m.onnx")
    g = load(src)
    checker, check = dims_check(str(src), g, input_shapes=None, check_sizes=(), seed=0, rtol=1e-4, atol=1e-5)
    assert checker is not None and check is not None
    baked = Candidate("search", to_onnx(g).SerializeToString(), g)
    why = check(baked)
    assert why is not None and "cannot keep the symbolic dimension" in why and "--input-shape x=1x8" in why
    peer = Candidate("peer", src.read_bytes())
    assert check(peer) is None and onnx.load_from_string(peer.data).graph.input[0].type.tensor_type.shape.dim[
        0].dim_param == "batch"
    assert checker.want("plain", 0) is checker.want("plain", 0)  # the original's outputs are made once
    assert dims_check(str(src), g, input_shapes={"x": (1, 8)}, check_sizes=(), seed=0, rtol=1e-4,
                      atol=1e-5) == (None, None)  # fixed by the user: nothing to check
    assert both(None, None) is None
    assert both(lambda c: None, check)(baked) == why and both(lambda c: "no", check)(peer) == "no"


def test_only_the_users_import_says_at_which_sizes_it_took_free_dims(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """The imports an optimize call makes after the user's (the input at other sizes, a peer's output) run under
    :func:`~graphsub.frontends.onnx_types.quiet_sizes` and do not repeat the user's warning."""
    from graphsub.frontends.onnx_types import quiet_sizes

    src = symbolic_dense(tmp_path / "m.onnx", batch="batch")
    with caplog.at_level("WARNING", logger="graphsub"):
        load(src)
        with quiet_sizes():
            load(src)
    said = [r for r in caplog.records if "symbolic dimension(s) imported" in r.getMessage()]
    assert len(said) == 1 and "batch=" in said[0].getMessage()
