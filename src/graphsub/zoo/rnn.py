"""The recurrent benchmarks of TASO/OCGGS: SRU and NASRNN, unrolled over a fixed length.

As in the peer scripts, every time step creates its own weights (the unrolled graph does not
share them), so each step's matmuls are independent weights ``s{step}_...``.
"""

from __future__ import annotations

from graphsub.ir.builder import Value
from graphsub.ir.graph import Graph
from graphsub.zoo._net import Net

SRU_EMBED = 1024
NASRNN_HIDDEN = 512


def sru(length: int = 1) -> Graph:
    """Simple Recurrent Unit, OCGGS ``examples/sru.py -l LENGTH`` (Table 2: length 1, 11 ops;
    the script's default length 20 gives 220).

    * Inputs ``x0`` .. ``x{length-1}`` and ``c``, each (1, 1024).
    * ``11 * length`` ops; per step 3 matmul (weights (1024, 1024)), 2 sigmoid, 4 mul, 2 add::

          x1 = x @ W1;  f = sigmoid(x @ W2);  r = sigmoid(x @ W3)
          c' = f * c + f * x1;  h = r * c' + r * x

    * Outputs: every step's ``h`` (``h0`` .. ``h{length-1}``), each (1, 1024) -- exactly
      the unconsumed tensors, which TASO treats as the graph outputs.  The cell state is
      not an output: each step's ``c'`` is consumed by that step's ``h`` (and the next
      step), so in TASO's graph it is internal.
    """
    if length < 1:
        raise ValueError(f"sru: length must be >= 1, got {length}")
    net = Net("sru")
    xs = [net.input(f"x{i}", (1, SRU_EMBED)) for i in range(length)]
    c = net.input("c", (1, SRU_EMBED))
    outputs: dict[str, Value] = {}
    for i, x in enumerate(xs):
        w1 = net.weight(f"s{i}_w1", (x.dim(1), SRU_EMBED))
        w2 = net.weight(f"s{i}_w2", (x.dim(1), SRU_EMBED))
        w3 = net.weight(f"s{i}_w3", (x.dim(1), SRU_EMBED))
        x1 = net.op("matmul", x, w1)
        f = net.op("sigmoid", net.op("matmul", x, w2))
        r = net.op("sigmoid", net.op("matmul", x, w3))
        c = net.op("add", net.op("mul", f, c), net.op("mul", f, x1))
        outputs[f"h{i}"] = net.op("add", net.op("mul", r, c), net.op("mul", r, x))
    return net.finish_many(outputs)


def _nas_node(net: Net, p: str, h: Value, x: Value) -> Value:
    """One NASRNN cell (46 ops): 8 ``x @ Wx + h @ Wh`` combinations, then a fixed tree of
    activations, adds and muls."""

    def act(op: str, v: Value) -> Value:
        return net.op(op, v)

    t: list[Value] = []
    for j in range(8):
        wx = net.weight(f"{p}_t{j}_wx", (x.dim(1), NASRNN_HIDDEN))
        wh = net.weight(f"{p}_t{j}_wh", (h.dim(1), NASRNN_HIDDEN))
        t.append(net.op("add", net.op("matmul", x, wx), net.op("matmul", h, wh)))
    m0 = net.op("add", act("relu", t[0]), act("sigmoid", t[3]))
    m1 = net.op("add", act("sigmoid", t[1]), act("tanh", t[2]))
    m2 = net.op("mul", act("sigmoid", t[4]), act("tanh", t[5]))
    m3 = net.op("mul", act("sigmoid", t[6]), act("relu", t[7]))
    m4 = net.op("add", act("sigmoid", m1), act("tanh", m2))
    m5 = net.op("mul", act("tanh", m0), act("tanh", m3))
    m6 = net.op("mul", act("tanh", m4), act("tanh", m5))
    return act("tanh", m6)


def nasrnn(length: int = 5) -> Graph:
    """NASRNN cell unrolled ``length`` steps, TASO/OCGGS ``examples/nasrnn.py`` (230 ops).

    * Inputs ``x0`` .. ``x{length-1}``, each (1, 512).  The initial state is a *weight*
      ``h_init`` (1, 512), as in the peers.  Output: the final state (1, 512).
    * ``46 * length`` ops; per step 16 matmul (weights (512, 512)), 11 add, 4 mul,
      2 relu, 5 sigmoid, 8 tanh -- i.e. 24 for the 8 combinations, 21 for the activation
      tree and 1 final tanh.
    """
    if length < 1:
        raise ValueError(f"nasrnn: length must be >= 1, got {length}")
    net = Net("nasrnn")
    xs = [net.input(f"x{i}", (1, NASRNN_HIDDEN)) for i in range(length)]
    state = net.weight("h_init", (1, NASRNN_HIDDEN))
    for i, x in enumerate(xs):
        state = _nas_node(net, f"s{i}", state, x)
    return net.finish(state)


__all__ = ["nasrnn", "sru"]
