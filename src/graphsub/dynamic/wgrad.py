"""Deferred weight gradients: one GEMM per ``nn.Linear`` per backward pass, however many steps of a plan call it.

A batched plan calls a cell once per level -- a Tree-LSTM's composer some 30 times per batch of 20 SST trees,
often on a handful of rows.  Autograd then computes the composer's weight gradient once per call (``g^T x``,
a full ``[750, 300]`` matrix, even for one row) and adds the 30 of them up: measured on that batch, 35 such GEMMs
and their sums were 6.6 ms of a 13 ms backward.  The weight gradient is a sum over calls,
``sum_l g_l^T x_l = G^T X`` with the calls' rows stacked, so it can wait until every call's output gradient is
known and be computed as *one* GEMM over all rows (what pipeline schedules call splitting the W pass from the
B pass).

How, inside :func:`deferring` (which :func:`graphsub.dynamic.plan.run_plan` opens around a plan's steps):

* ``nn.Linear.forward`` is routed through :func:`_linear_forward`.  The first call of a Linear in the run is an
  ordinary ``F.linear`` (a Linear called once -- a leaf cell, a readout -- has nothing to gain); the second makes a
  *proxy* of its weight and bias, ``_Gather.apply(weight, bias)`` (views of them, a node of its own);
* every later call is ``_Deferred.apply(x, weight_proxy, bias_proxy)``: its backward returns the input's gradient
  (``g W``) at once and *records* ``(x, g)`` in the proxy's stash instead of returning a weight gradient;
* the proxy node's backward runs after every call that uses it (autograd runs a node once all its consumers
  have), takes the stash and returns ``G^T X`` and ``G.sum(0)`` -- accumulated into ``weight.grad`` /
  ``bias.grad`` as any gradient is (hooks on the parameters see the one sum, as they see autograd's own sum).

What keeps it exact:

* a call records only when the current backward pass will run the proxy node
  (``torch._C._will_engine_execute_node``): ``torch.autograd.grad(loss, [x])`` leaves no stale record behind;
* with ``create_graph=True`` (grad mode on inside backward) each call returns its own weight gradient,
  differentiable, as autograd's linear would;
* the stash is emptied by the proxy's backward; each run of a plan makes its own proxies.

Outside :func:`deferring`, without grad mode, under a ``torch.func`` transform, or for a weight that does not
require grad, ``nn.Linear`` runs as always.  Only ``nn.Linear`` modules are deferred (a cell that calls ``F.linear``
itself is run as written).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_ORIG_FORWARD = nn.Linear.forward
MIN_ELEMENTS = 32768
"""Smaller weights are not deferred.  A deferred call costs about 35 us more (the custom Function, forward and
backward) and saves a weight-gradient GEMM plus its accumulation, about 1.6 ns per weight element on this VM: it pays
from about 22k elements (a readout such as ``Linear(150, 2)`` is left alone; on the three SST workloads the rule
measured within 1% of deferring every Linear)."""
_LOCK = threading.Lock()
_ACTIVE = [0]  # open deferring() contexts, all threads


class _State(threading.local):
    def __init__(self) -> None:
        # id(Linear) -> (the Linear, weight proxy, bias proxy, stash); proxies and stash None after its first call
        self.proxies: dict[int, tuple[nn.Linear, Any, Any, _Stash | None]] | None = None


_STATE = _State()


class _Stash:
    """The ``(x, g)`` pairs of one Linear's calls in one backward pass, until its proxy node takes them."""

    __slots__ = ("gs", "node", "xs")

    def __init__(self) -> None:
        self.xs: list[torch.Tensor] = []
        self.gs: list[torch.Tensor] = []
        self.node: Any = None  # the proxy's autograd node

    def take(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        xs, gs = self.xs, self.gs
        self.xs, self.gs = [], []
        return xs, gs


class _Gather(torch.autograd.Function):
    """``(weight, bias) -> views of them``; backward: the stashed calls' weight and bias gradients, summed in one
    GEMM (plus whatever reached the views directly)."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, bias: torch.Tensor | None, stash: _Stash) -> Any:
        ctx.stash = stash
        ctx.has_bias = bias is not None
        ctx.set_materialize_grads(False)
        if bias is None:
            return weight.view_as(weight)
        return weight.view_as(weight), bias.view_as(bias)

    @staticmethod
    def backward(ctx: Any, gw: torch.Tensor | None, gb: torch.Tensor | None = None) -> Any:
        xs, gs = ctx.stash.take()
        if xs:
            x = xs[0] if len(xs) == 1 else torch.cat(xs)
            g = gs[0] if len(gs) == 1 else torch.cat(gs)
            dw = g.t().mm(x)
            gw = dw if gw is None else gw + dw
            if ctx.has_bias:
                db = g.sum(0)
                gb = db if gb is None else gb + db
        return gw, gb if ctx.has_bias else None, None


class _Deferred(torch.autograd.Function):
    """``F.linear(x, w, b)`` whose backward leaves the weight and bias gradients to the proxy node of ``w``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stash: _Stash) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.stash = stash
        ctx.has_bias = b is not None
        ctx.set_materialize_grads(False)
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor | None) -> Any:
        if g is None:
            return None, None, None, None
        x, w = ctx.saved_tensors
        gx = g.matmul(w) if ctx.needs_input_grad[0] else None
        g2 = g if g.dim() == 2 else g.reshape(-1, g.shape[-1])
        x2 = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        if torch.is_grad_enabled():  # create_graph: this call's own gradients, differentiable
            return gx, g2.t().mm(x2), (g2.sum(0) if ctx.has_bias else None), None
        stash = ctx.stash
        if torch._C._will_engine_execute_node(stash.node):
            stash.xs.append(x2)
            stash.gs.append(g2)
        return gx, None, None, None


def _linear_forward(self: nn.Linear, input: torch.Tensor) -> torch.Tensor:
    proxies = _STATE.proxies
    weight, bias = self.weight, self.bias
    if proxies is None or _raw_apply is None or not weight.requires_grad or weight.numel() < MIN_ELEMENTS \
            or not torch.is_grad_enabled() or torch._C._are_functorch_transforms_active():
        return F.linear(input, weight, bias)  # (torch.func needs setup_context: run as written)
    ent = proxies.get(id(self))
    if ent is None or ent[0] is not self:  # the run's first call: as always (a Linear called once gains nothing)
        proxies[id(self)] = (self, None, None, None)
        return F.linear(input, weight, bias)
    if ent[3] is None:  # the second call: from here on, deferred
        stash = _Stash()
        views = _Gather.apply(weight, bias, stash)
        wp, bp = (views, None) if bias is None else views
        stash.node = wp.grad_fn
        ent = proxies[id(self)] = (self, wp, bp, stash)
    out: torch.Tensor = _raw_apply(input, ent[1], ent[2], ent[3])
    return out


# ``Function.apply`` without its Python prelude (default-argument binding, functorch's dead-wrapper unwrapping: about
# 7 us a call, a fifth of a small Linear's); the prelude itself goes straight there when no functorch transform is
# active, and under one (torch.func) nothing is deferred
_base_apply = getattr(torch._C, "_FunctionBase", object).__dict__.get("apply")
_raw_apply = _base_apply.__get__(None, _Deferred) if _base_apply is not None else None


@contextmanager
def deferring() -> Iterator[None]:
    """Defer the weight gradients of the ``nn.Linear`` calls made in this thread while open (module docstring);
    each context has its own proxies (one plan run)."""
    with _LOCK:
        _ACTIVE[0] += 1
        if _ACTIVE[0] == 1:
            nn.Linear.forward = _linear_forward  # type: ignore[method-assign]
    saved = _STATE.proxies
    _STATE.proxies = {}
    try:
        yield
    finally:
        _STATE.proxies = saved
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                nn.Linear.forward = _ORIG_FORWARD  # type: ignore[method-assign]


__all__ = ["deferring"]
