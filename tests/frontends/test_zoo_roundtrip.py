"""Every zoo model exports to ONNX, runs in onnxruntime, and survives the round trip
(ONNX -> IR -> ONNX) with bit-identical outputs; the re-imported graph is a fixed point."""

from __future__ import annotations

import pytest

from graphsub import zoo
from graphsub.bench.roundtrip import roundtrip


# vgg19 is vgg16 with three more convolutions (the same ops, 26 s more of export): in the `slow` set (-m slow)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "vgg19" else n
                                  for n in zoo.list_models()])
def test_zoo_model_round_trip(name: str) -> None:
    r = roundtrip(zoo.get(name))
    assert r.finite, "random-weight outputs must be finite for the comparison to mean something"
    assert r.max_abs_diff == 0.0
    assert r.fixed_point
    # fused activations come back as separate ops; nothing else changes
    g = zoo.get(name)
    fused = sum(1 for n in g.nodes.values() if n.sig.attr.get("act", "none") != "none")
    assert r.reimported_ops == r.num_ops + fused
    assert r.structurally_equal == (fused == 0)
