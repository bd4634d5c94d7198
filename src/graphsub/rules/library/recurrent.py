"""Rules around the recurrent ops (:mod:`graphsub.ops.recurrent`): a projection that feeds an LSTM or GRU merges
into the recurrence's input weights (issue 20: "so that the projections around them can merge").

``lstm(x @ A (+ c), W, R, B, ...)`` => ``lstm(x, W @ A^T, R, B (+ [W c, 0]), ...)``. An ONNX LSTM/GRU reads its input
only through ``X_t W^T`` (plus the bias ``Wb``), and ``(x A) W^T = x (W A^T)^T``, ``(x A + c) W^T = x (W A^T)^T +
W c``: so the projection's product disappears, and the recurrence's input product reads ``x`` directly. ``W @ A^T``
and ``W c`` are computed from weights alone (free: folded before run time). Whether it is cheaper is the cost model's
call: the input product grows from ``I`` to ``K`` columns while the projection's ``K x I`` product goes. One rule per
op, number of initial states and with/without the projection's bias; each is checked numerically on its examples
(the recurrence is not algebraic, so there is no proof).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphsub.ops.recurrent import GATES
from graphsub.rules.apply import TargetBuilder, TargetView
from graphsub.rules.library.kit import ex, rule
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder
from graphsub.rules.rule import Rule

STATES = {"lstm": ("h0", "c0"), "gru": ("h0",)}


def _attrs(m: MatchView, op: str) -> dict[str, Any]:
    names = ("hidden_size", "direction", *(("linear_before_reset",) if op == "gru" else ()))
    return {k: m.attr("rnn", k) for k in names}


def _check(bias: bool) -> Any:
    def fn(m: MatchView) -> bool | str:
        if m.attr("mm", "act") != "none":
            return "the projection has a fused activation"
        a = m.shape("a")
        if len(a) != 2:
            return f"the projection's weight {a} is not a matrix"
        if bias and m.shape("c") != (a[1],):
            return f"the projection's bias {m.shape('c')} is not a vector of {a[1]}"
        return True

    return fn


def input_fold(op: str, states: int, bias: bool) -> list[Rule]:
    """The fold for ``op`` (lstm or gru) with ``states`` initial states, after a projection with or without bias
    (with it, also the twin that reads ``c + x @ A``, as torch's exporter writes ``nn.Linear``)."""
    names = STATES[op][:states]
    gates = GATES[op]

    def src(p: PatternBuilder) -> dict[str, Any]:
        x = p.matmul(p.var("x"), p.weight("a"), name="mm")
        if bias:
            x = p.add(x, p.weight("c"), name="add")
        return {"y": p.op(op, x, p.weight("w"), p.var("r"), p.var("b"), *(p.var(s) for s in names), name="rnn")}

    def target(t: TargetBuilder, m: TargetView) -> dict[str, Any]:
        w = t.matmul(m.w, t.transpose(m.a, perm=(1, 0)), act="none")
        b = m.b
        if bias:
            d, gh = m.shape("w")[:2]
            b = t.add(m.b, t.concat(t.matmul(m.w, m.c, act="none"), t.const(np.zeros((d, gh), np.float32)), axis=1))
        return {"y": t.op(op, m.x, w, m.r, b, *(m[s] for s in names), **_attrs(m, op))}

    def types(d: int, s: int, k: int, i: int, h: int) -> dict[str, tuple[int, ...]]:
        out = {"x": (3, s, k), "a": (k, i), "w": (d, gates * h, i), "r": (d, gates * h, h), "b": (d, 2 * gates * h)}
        out |= {n: (d, s, h) for n in names} | ({"c": (i,)} if bias else {})
        return out

    extra = {"linear_before_reset": 1} if op == "gru" else {}
    shown = "x @ A + c" if bias else "x @ A"
    init = "".join(f", {n}" for n in names)
    made = rule(
        f"cpu_{op}_input_fold{'_bias' if bias else ''}{states}",
        f"{op}({shown}, W, R, B{init}) => {op}(x, W @ A^T, R, B{' + [W c, 0]' if bias else ''}{init}): the "
        "projection merges into the recurrence's input weights (one product fewer per step).",
        src, target,
        [ex(types(1, 2, 5, 4, 3), rnn={"hidden_size": 3, **extra}),
         ex(types(2, 1, 3, 6, 2), rnn={"hidden_size": 2, "direction": "bidirectional"}),
         ex(types(1, 2, 4, 4, 5), rnn={"hidden_size": 5, "direction": "reverse"})],
        [(_check(bias), "a plain projection by a matrix (and a bias vector)")],
        tags=("recurrent", "fold", "matmul"), commute=("add",) if bias else False)
    return list(made) if isinstance(made, tuple) else [made]


def rules() -> list[Rule]:
    """Every fold: LSTM with 0-2 initial states, GRU with 0-1, each with and without the projection's bias."""
    return [r for op in ("lstm", "gru") for n in range(len(STATES[op]) + 1) for bias in (False, True)
            for r in input_fold(op, n, bias)]


__all__ = ["input_fold", "rules"]
