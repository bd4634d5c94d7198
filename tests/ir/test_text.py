"""Text format: golden files print exactly and parse back to equal graphs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphsub.errors import GraphError
from graphsub.ir import Builder, Graph
from graphsub.ir.text import from_text, to_text
from graphsub.ir.validate import validate

GOLDEN = Path(__file__).parent / "golden"


def conv_block() -> Graph:
    b = Builder("conv_block")
    x = b.input("x", (1, 8, 16, 16))
    t = b.conv2d(x, b.weight("w1", (8, 8, 3, 3)), pads="SAME", act="relu")
    u = b.conv2d(x, b.weight("w2", (8, 2, 3, 3)), strides=(2, 2), pads=(1, 1, 0, 0))  # grouped
    p = b.maxpool2d(t, kernel=(2, 2), strides=(2, 2))
    c = b.concat(p, u, axis=1)
    lo, hi = b.split(c, axis=1, sizes=(4, 12))
    return b.build({"lo": b.relu(lo), "hi": hi})


def attention() -> Graph:
    b = Builder("attention")
    x = b.input("x", (64, 1024))
    q = b.matmul(x, b.weight("wq", (1024, 1024)))
    q = b.transpose(b.reshape(q, shape=(64, 16, 64)), perm=(1, 0, 2))
    s = b.softmax(b.matmul(q, q), axis=-1)
    o = b.reshape(b.transpose(b.matmul(s, q), perm=(1, 0, 2)), shape=(64, 1024))
    return b.build({"y": b.matmul(o, b.weight("wo", (1024, 1024)), act="relu")})


def opaque() -> Graph:
    b = Builder("with_opaque")
    x = b.input("x", (2, 3))
    t = b.op("opaque", x, op_type="TopK", out_types=(((2, 1), "float32"), ((2, 1), "int64")),
             input_slots=(0,), num_onnx_inputs=2, onnx_attrs=b"\x00\x01binary", reason="test")
    return b.build({"v": t[0], "i": b.cast(t[1], to="float32")})


CASES = {"conv_block": conv_block, "attention": attention, "with_opaque": opaque}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    g = CASES[name]()
    text = to_text(g)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("GRAPHSUB_UPDATE_GOLDEN"):
        path.write_text(text + "\n")
    assert text + "\n" == path.read_text(), f"{path} differs; rerun with GRAPHSUB_UPDATE_GOLDEN=1 if intended"
    parsed = from_text(path.read_text())
    validate(parsed)
    assert parsed == g
    assert to_text(parsed) == text


def test_parse_errors_name_the_line() -> None:
    good = to_text(conv_block()).splitlines()
    with pytest.raises(GraphError, match="line 3"):
        from_text("\n".join([*good[:2], "%2 = conv2d(%0, %9) : f32[1,8,16,16]", *good[3:]]))
    with pytest.raises(GraphError, match="infers"):
        from_text("\n".join([*good[:3], good[3].replace("f32[1,8,16,16]", "f32[1,8,15,16]"), *good[4:]]))
    with pytest.raises(GraphError, match="no 'output'"):
        from_text("\n".join(line for line in good if not line.startswith("output")))
    with pytest.raises(GraphError, match="cannot parse"):
        from_text("this is not a graph")
