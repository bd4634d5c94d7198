"""The ``ort`` rule set: rewrites into onnxruntime's com.microsoft fused kernels.

Every rule passes ``verify_rule``; every rule matches a graph built from its first example and
the rewritten graph is equivalent in onnxruntime; end-to-end on graphsub's ``bert_corrected``
and on TorchScript exports (nn.GELU, a transformer block); and near misses do not match."""

from __future__ import annotations

import io
import math
from collections import Counter

import numpy as np
import onnx
import pytest
import torch

from graphsub.data import materialize
from graphsub.equivalence import equivalent
from graphsub.frontends.onnx_io import from_onnx, to_onnx
from graphsub.ir import Builder, Graph
from graphsub.rules import apply, find_matches, get_set
from graphsub.rules.library import ort
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.numeric import instantiate, verify_rule
from graphsub.zoo.bert import bert

RULES = {r.name: r for r in ort.rules()}


def ops(g: Graph) -> Counter[str]:
    return Counter(n.sig.op for n in g.nodes.values() if not n.sig.opdef.leaf)


def rewrite(g: Graph, names: list[str] | None = None) -> tuple[Graph, Counter[str]]:
    """Apply the named rules (all, in that order of priority) until none matches."""
    used: Counter[str] = Counter()
    rules = [RULES[n] for n in names] if names else list(RULES.values())
    while True:
        for r in rules:
            ms = find_matches(g, r)
            if ms:
                g = apply(g, ms[0]).graph
                used[r.name] += 1
                break
        else:
            return g, used


def test_set_registered() -> None:
    rules = get_set("ort")
    assert [r.name for r in rules] == list(RULES)
    assert len(rules) >= 40
    for r in rules:
        assert r.name.startswith("ort_") and "ort" in r.tags and r.exact and r.doc
    # opt-in: rules producing com.microsoft ops are not part of the portable default set
    assert not {r.name for r in rules} & {r.name for r in get_set("default")}


@pytest.mark.parametrize("name", list(RULES))
def test_verify_rule(name: str) -> None:
    report = verify_rule(RULES[name])
    assert report.passed, report.reason
    assert report.examples >= 3


def _example_graph(rule: Rule) -> Graph:
    ex = rule.examples[0]
    return materialize(instantiate(rule.source, ex, rule.name))


@pytest.mark.parametrize("name", list(RULES))
def test_rule_rewrites_equivalently_in_onnxruntime(name: str) -> None:
    rule = RULES[name]
    g = _example_graph(rule)
    (match,) = find_matches(g, rule)
    g2 = apply(g, match).graph
    assert any(op.startswith("ms_") for op in ops(g2))
    report = equivalent(g, g2)
    assert report.equivalent, report


def test_bert_corrected_attention() -> None:
    g = materialize(bert("corrected", layers=2))
    g2, used = rewrite(g, ["ort_mha_heads3d_mul"])
    assert used == {"ort_mha_heads3d_mul": 2}
    assert ops(g2) == Counter({"ms_mha": 2, "matmul": 8, "reshape": 8, "relu": 1})
    assert equivalent(g, g2).equivalent
    full = materialize(bert("corrected"))  # all 8 layers: scaled logits keep it well conditioned
    assert equivalent(full, rewrite(full, ["ort_mha_heads3d_mul"])[0]).equivalent


def _torch_graph(module: torch.nn.Module, *shape: int) -> Graph:
    buf = io.BytesIO()
    torch.onnx.export(module.eval(), (torch.randn(*shape),), buf, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    return from_onnx(onnx.load_from_string(buf.getvalue()))


class _Block(torch.nn.Module):
    """A post-LN transformer encoder block written as in BERT implementations."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.ff1, self.ff2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.gelu = torch.nn.GELU()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        hd = d // self.h

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.h, hd).permute(0, 2, 1, 3)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd), dim=-1)
        att = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous().view(b, s, d)
        h = self.ln1(att + x)
        return self.ln2(self.ff2(self.gelu(self.ff1(h))) + h)


def test_torch_transformer_block() -> None:
    torch.manual_seed(0)
    g = _torch_graph(_Block(), 2, 5, 32)
    g2, used = rewrite(g, ["ort_mha_batched_div", "ort_gelu_erf", "ort_bias_ms_gelu", "ort_skip_layernorm"])
    assert used == {"ort_mha_batched_div": 1, "ort_gelu_erf": 1, "ort_bias_ms_gelu": 1, "ort_skip_layernorm": 2}
    assert {"ms_mha", "ms_bias_gelu", "ms_skip_layernorm"} <= set(ops(g2))
    assert not {"softmax", "erf", "layernorm", "transpose"} & set(ops(g2))
    assert equivalent(g, g2).equivalent
    # scaling folded into the matmul first: the _fmm attention rule still applies
    g3, used = rewrite(g, ["ort_mm_scale_div", "ort_mha_batched_fmm"])
    assert used == {"ort_mm_scale_div": 1, "ort_mha_batched_fmm": 1}
    assert equivalent(g, g3).equivalent


class _ManualGelu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


@pytest.mark.parametrize(("module", "rule"), [(torch.nn.GELU(), "ort_gelu_erf"), (_ManualGelu(), "ort_gelu_erf_halfx")])
def test_torch_gelu_exports(module: torch.nn.Module, rule: str) -> None:
    g = _torch_graph(module, 3, 16)
    g2, used = rewrite(g)
    assert used == {rule: 1}
    assert ops(g2) == Counter({"ms_gelu": 1})
    assert equivalent(g, g2).equivalent


def test_gelu_decomposition_of_our_exporter() -> None:
    b = Builder("g")
    g = b.build(b.gelu(b.input("x", (4, 8))))
    g2 = from_onnx(to_onnx(g))
    assert ops(g2)["erf"] == 1  # opset 17: the decomposition
    assert rewrite(g2)[1] == {"ort_gelu_erf": 1}


def test_resnet_block_conv_add_relu() -> None:
    b = Builder("res")
    x = b.input("x", (1, 8, 10, 10))
    c1 = b.conv2d(x, b.weight("w1", (8, 8, 3, 3)), b.weight("b1", (8,)), pads="SAME", act="relu")
    c2 = b.conv2d(c1, b.weight("w2", (8, 8, 3, 3)), pads="SAME")
    g = materialize(b.build(b.relu(b.add(x, c2))))
    g2, used = rewrite(g)
    assert used == {"ort_conv_bias_act": 1, "ort_conv_add_act_r": 1}
    assert ops(g2) == Counter({"ms_fused_conv": 2})
    assert equivalent(g, g2).equivalent


def _no_match(g: Graph, name: str) -> None:
    assert find_matches(g, RULES[name]) == []


def test_near_misses_do_not_match() -> None:
    b = Builder("n")
    x = b.input("x", (4, 8))
    wrong = b.mul(b.mul(x, b.add(b.erf(b.div(x, b.const("s", np.float32(math.sqrt(2))))),
                                 b.const("one", np.float32(1.0)))), b.const("half", np.float32(0.6)))
    _no_match(b.build(wrong), "ort_gelu_erf")
    b = Builder("n")
    a = b.input("a", (2, 4, 6))
    _no_match(b.build(b.mul(b.matmul(a, b.input("w", (6, 3))), b.weight("s", (3,), data=np.ones(3, np.float32)))),
              "ort_mm_scale_mul")  # not a scalar
    b = Builder("n")
    _no_match(b.build(b.div(b.matmul(b.input("a", (4, 6)), b.input("w", (6, 3))), b.const("z", np.float32(0.0)))),
              "ort_mm_scale_div")  # division by zero is not an alpha
    b = Builder("n")
    a = b.input("a", (2, 4, 6))
    _no_match(b.build(b.matmul(b.transpose(a, perm=(1, 0, 2)), b.input("w", (4, 6, 3)))), "ort_mm_trans_a")
    b = Builder("n")
    h = b.add(b.input("u", (2, 4, 8)), b.input("v", (2, 4, 8)))
    _no_match(b.build(b.layernorm(h, b.weight("g", (4, 8)), axis=1)), "ort_skip_layernorm_nobeta")
    b = Builder("n")
    c = b.conv2d(b.input("x", (1, 3, 6, 6)), b.weight("w", (4, 3, 3, 3)), pads="SAME")
    _no_match(b.build(b.relu(b.add(c, b.input("z", (1, 4, 1, 1))))), "ort_conv_add_act")  # broadcast z
    b = Builder("n")
    c = b.conv2d(b.input("x", (1, 3, 6, 6)), b.weight("w", (4, 3, 3, 3)))
    _no_match(b.build(b.hardswish(c)), "ort_conv_then_act")  # not a FusedConv activation
