"""LSTM and GRU as modelled ops (graphsub.ops.recurrent) and the projection fold into their input weights
(graphsub.rules.library.recurrent), on models exported by torch the way users export them."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from graphsub.frontends.onnx_io import load
from graphsub.frontends.ort import optimized_model, run_model
from graphsub.optimize.portfolio import export_bytes, rewrite_everywhere
from graphsub.rules.library.recurrent import rules


class Projected(nn.Module):
    """``rnn(Linear(x))``: a projection feeding a recurrence, as in encoder stacks over embeddings."""

    def __init__(self, cell: str, k: int, i: int, h: int, bias: bool, bidirectional: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(k, i, bias=bias)
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(i, h, bidirectional=bidirectional)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(self.proj(x))[0]


def _export(module: nn.Module, shape: tuple[int, ...], path: Path) -> Path:
    torch.manual_seed(0)
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module.eval(), (torch.randn(*shape),), buf, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize(("cell", "bias", "bidirectional"), [("lstm", True, False), ("lstm", False, True),
                                                              ("gru", True, True), ("gru", False, False)])
def test_a_projection_merges_into_the_recurrence(tmp_path: Path, cell: str, bias: bool, bidirectional: bool) -> None:
    torch.manual_seed(1)
    src = _export(Projected(cell, 16, 12, 8, bias, bidirectional), (7, 2, 16), tmp_path / "m.onnx")
    g = load(src)
    hist = g.op_histogram()
    assert hist.get(cell) == 1 and hist.get("matmul") == 1, hist  # modelled, no longer opaque
    folded, steps = rewrite_everywhere(g, rules())
    assert [s.rule for s in steps] == [f"cpu_{cell}_input_fold{'_bias' if bias else ''}"
                                       f"{2 if cell == 'lstm' else 1}{'_r' if bias else ''}"]  # torch: Add(c, x@A)
    data = export_bytes(folded)
    ran = [n.op_type for n in optimized_model(data, threads=1).graph.node]
    assert cell.upper() in ran and not {"MatMul", "Gemm", "FusedMatMul"} & set(ran), ran  # W @ A^T folded by ORT
    x = np.random.default_rng(2).standard_normal((7, 2, 16)).astype(np.float32)
    want = run_model(str(src), {"x": x})
    got = run_model(data, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_the_suite_exports_import_as_modelled_ops(tmp_path: Path) -> None:
    """nn.LSTM / nn.GRU exported plainly (two layers, zero initial states built by Expand): modelled and round-tripped
    unchanged; a recurrence whose final state is read, or with a feature graphsub does not model, stays opaque."""
    class Output(nn.Module):  # as the suite's models: the output sequence
        def __init__(self, cell: type[nn.Module]) -> None:
            super().__init__()
            self.rnn = cell(8, 6, num_layers=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]

    for cell in (nn.LSTM, nn.GRU):
        torch.manual_seed(0)
        path = _export(Output(cell), (5, 1, 8), tmp_path / "r.onnx")
        g = load(path)
        assert g.op_histogram().get(cell.__name__.lower()) == 2
        x = np.random.default_rng(0).standard_normal((5, 1, 8)).astype(np.float32)
        np.testing.assert_allclose(run_model(export_bytes(g), {"x": x})[0], run_model(str(path), {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)

    class Final(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(8, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[1]  # the final state: ONNX's Y_h

    g = load(_export(Final(), (5, 1, 8), tmp_path / "f.onnx"))
    assert "gru" not in g.op_histogram()


def test_the_fold_is_left_when_the_projection_has_an_activation(tmp_path: Path) -> None:
    class Relu(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj, self.rnn = nn.Linear(8, 8), nn.LSTM(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(torch.relu(self.proj(x)))[0]

    g = load(_export(Relu(), (3, 1, 8), tmp_path / "relu.onnx"))
    assert rewrite_everywhere(g, rules())[1] == ()


@pytest.mark.parametrize(("hidden", "extra", "want"), [(4, {}, "lstm"), (5, {}, "opaque"),
                                                       (4, {"activations": ["Relu", "Tanh", "Tanh"]}, "opaque"),
                                                       (4, {"clip": 3.0}, "opaque"), (4, {"layout": 1}, "opaque"),
                                                       (4, {"direction": "sideways"}, "error")])
def test_hand_written_lstm_nodes(tmp_path: Path, hidden: int, extra: dict[str, object], want: str) -> None:
    """Modelled when graphsub models every feature it uses; an inconsistent or unmodelled one stays opaque, and an
    invalid attribute is a GraphsubError naming the node (never a crash)."""
    from onnx import TensorProto, helper, numpy_helper

    from graphsub.errors import GraphsubError

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (1, 16, 3)), ("R", (1, 16, 4)), ("B", (1, 32)))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden, **extra)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    import onnx

    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "h.onnx"))
    if want == "error":
        with pytest.raises(GraphsubError, match="LSTM"):
            load(tmp_path / "h.onnx")
    else:
        assert want in load(tmp_path / "h.onnx").op_histogram()
