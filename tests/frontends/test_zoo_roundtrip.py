"""Every zoo model exports to ONNX, runs in onnxruntime, and survives the round trip
(ONNX -> IR -> ONNX) with bit-identical outputs; the re-imported graph is a fixed point."""

from __future__ import annotations

import pytest

from graphsub import zoo
from graphsub.bench.roundtrip import roundtrip

#: the heaviest round trips, in the `slow` set (-m slow, `make test-all`): each has a smaller model with the same ops
#: (and blocks) in the default run; seconds: a serial run alone on a 2-core machine
SLOW = {
    "vgg19": "vgg16 with three more convolutions (the same ops, 26 s more of export)",
    "vgg16": "20 s; alexnet has the same ops (conv2d, relu, maxpool2d, avgpool2d, flatten, gemm)",
    "resnet152": "3.4 s; resnet50 has the same bottleneck blocks",
    "resnet101": "2.3 s; resnet50 has the same bottleneck blocks",
    "nasnet_a": "3.1 s; inception_v3 has its ops (avgpool2d, maxpool2d, concat, conv2d) but add, which resnet50 has",
    "bert": "1.9 s; bert_corrected has the same ops, and mul and softmax",
    "efficientnet_b3": "0.7 s; efficientnet_b0 has the same blocks",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
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
