"""Rules for the backward ops of training graphs (:mod:`graphsub.training`).

Reverse-mode differentiation writes each convolution's gradients as the two kernels every framework has
(``conv2d_grad_x``: ConvBackpropInput, ``conv2d_grad_w``: ConvBackpropFilter), which is the natural
output of autodiff but not always the fastest spelling in a given runtime. ONNX has no ConvBackpropFilter,
so ``conv2d_grad_w`` exports as a Conv with the output gradient as a huge kernel; ONNX Runtime runs that
2-6x slower than one GEMM over the same numbers (``experiments/results/training_kernels.json``). These rules
give the search the GEMM spellings; the cost model (measured per op) and the end-to-end timing decide
where they pay:

* ``trn_grad_w_gemm``: ``conv2d_grad_w(x, dy)`` (one group) ``= reshape(gemm(dy as [O, N*Ho*Wo], im2col(x)
  as [C*kh*kw, N*Ho*Wo], trans_b))``: im2col is ``pad`` + one strided ``slice`` per kernel tap + ``concat``
  (a 1x1 stride-1 unpadded kernel needs none of them: ``x`` itself, re-laid-out);
* ``trn_grad_x_conv``: ``conv2d_grad_x(dy, w)`` at stride 1 (one group) ``= conv2d(dy, w~)`` with ``w~`` the
  kernel transposed (``[C, O, kh, kw]``) and flipped, and pads ``(k - 1) * d - p`` (the transposed
  convolution of stride 1 is a convolution); the weight transform is an op of every step, so nothing
  trained is folded.

Both are exact (the same products summed in another order); they are checked numerically on their examples,
not proven from axioms (the axioms have no convolution gradients).
"""

from __future__ import annotations

from typing import Any

from graphsub.ir.node import Ref
from graphsub.ops.common import resolve_pads
from graphsub.rules.apply import TargetBuilder
from graphsub.rules.library.kit import ex, rule
from graphsub.rules.match import MatchView
from graphsub.rules.pattern import PatternBuilder, PValue
from graphsub.rules.rule import Rule

Out = dict[str, PValue]
#: ONNX's INT64_MAX: "to the end" in a slice
_END = 2**63 - 1


def _gw_geometry(m: MatchView) -> tuple[tuple[int, ...], tuple[int, int, int, int]]:
    a = m.attrs("gw", "w_shape", "strides", "pads", "dilations")
    w = tuple(a["w_shape"])
    return w, resolve_pads(a["pads"], m.shape("x")[2:], w[2:], a["strides"], a["dilations"])


def _gw_ok(m: MatchView) -> bool | str:
    w, _ = _gw_geometry(m)
    if w[1] != m.shape("x")[1]:
        return "grouped convolution"
    return m.type("x").dtype == m.type("dy").dtype or "x and dy differ in dtype"


def _im2col(t: TargetBuilder, m: MatchView) -> Ref:
    """x as [C*kh*kw, N*Ho*Wo]: pad, one strided slice per kernel tap, stacked after the channel axis."""
    (_, c, kh, kw), pads = _gw_geometry(m)
    n, _, ho, wo = m.shape("dy")
    sh, sw = m.attr("gw", "strides")
    dh, dw = m.attr("gw", "dilations")
    x: Ref = m.x
    if any(pads):
        x = t.pad(x, pads=(0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]))
    taps: list[Ref] = []
    for i in range(kh):
        for j in range(kw):
            starts, ends = (i * dh, j * dw), (i * dh + (ho - 1) * sh + 1, j * dw + (wo - 1) * sw + 1)
            hp, wp = m.shape("x")[2] + pads[0] + pads[2], m.shape("x")[3] + pads[1] + pads[3]
            whole = starts == (0, 0) and ends == (hp, wp) and (sh, sw) == (1, 1)
            tap = x if whole else t.slice(x, starts=starts, ends=ends, axes=(2, 3), steps=(sh, sw))
            taps.append(t.reshape(tap, shape=(n, c, 1, ho * wo)) if kh * kw > 1 else tap)
    col = t.concat(*taps, axis=2) if len(taps) > 1 else t.reshape(taps[0], shape=(n, c, 1, ho * wo))
    return t.reshape(t.transpose(col, perm=(1, 2, 0, 3)), shape=(c * kh * kw, n * ho * wo))


def _gw_target(t: TargetBuilder, m: MatchView) -> dict[str, Any]:
    w, _ = _gw_geometry(m)
    n, o, ho, wo = m.shape("dy")
    dy = t.reshape(t.transpose(m.dy, perm=(1, 0, 2, 3)), shape=(o, n * ho * wo))
    return {"dw": t.reshape(t.gemm(dy, _im2col(t, m), trans_b=True), shape=w)}


def grad_w_gemm() -> Rule:
    def src(p: PatternBuilder) -> Out:
        return {"dw": p.conv2d_grad_w(p.var("x"), p.var("dy"), name="gw")}

    return rule(
        "trn_grad_w_gemm",
        "conv2d_grad_w(x, dy) => reshape(gemm(dy as [O, N*Ho*Wo], im2col(x) as [C*kh*kw, N*Ho*Wo], trans_b)) for "
        "one group: a convolution's weight gradient as one GEMM (im2col = pad + one strided slice per kernel tap "
        "+ concat; none for a 1x1 stride-1 kernel without pads).",
        src, _gw_target,
        [ex({"x": (2, 3, 5, 5), "dy": (2, 4, 5, 5)}, gw={"w_shape": (4, 3, 1, 1)}),
         ex({"x": (2, 3, 6, 5), "dy": (2, 4, 6, 5)}, gw={"w_shape": (4, 3, 3, 3), "pads": (1, 1, 1, 1)}),
         ex({"x": (2, 3, 7, 8), "dy": (2, 2, 3, 4)},
            gw={"w_shape": (2, 3, 3, 2), "strides": (2, 2), "pads": (1, 0, 0, 1)}, note="strided, asymmetric"),
         ex({"x": (1, 2, 7, 7), "dy": (1, 3, 3, 3)},
            gw={"w_shape": (3, 2, 3, 3), "dilations": (2, 2), "strides": (2, 2), "pads": (1, 1, 1, 1)},
            note="dilated and strided"),
         ex({"x": (2, 4, 7, 7), "dy": (2, 5, 4, 4)}, gw={"w_shape": (5, 4, 1, 1), "strides": (2, 2)},
            note="1x1 stride 2 (a ResNet shortcut)")],
        [(_gw_ok, "one group, one dtype")],
        tags=("training", "conv", "gemm"))


def _gx_ok(m: MatchView) -> bool | str:
    a = m.attrs("gx", "x_shape", "strides", "pads", "dilations")
    _, cg, kh, kw = m.shape("w")
    if a["x_shape"][1] != cg:
        return "grouped convolution"
    if tuple(a["strides"]) != (1, 1):
        return "strided: the transposed convolution is not a convolution"
    pads = resolve_pads(a["pads"], a["x_shape"][2:], (kh, kw), a["strides"], a["dilations"])
    dh, dw = a["dilations"]
    full = ((kh - 1) * dh, (kw - 1) * dw)
    if any(p > full[i % 2] for i, p in enumerate(pads)):
        return "pads larger than the dilated kernel"
    return m.type("w").dtype == m.type("dy").dtype or "dy and w differ in dtype"


def _gx_target(t: TargetBuilder, m: MatchView) -> dict[str, Any]:
    a = m.attrs("gx", "x_shape", "strides", "pads", "dilations")
    _, _, kh, kw = m.shape("w")
    t_, l_, b_, r_ = resolve_pads(a["pads"], a["x_shape"][2:], (kh, kw), a["strides"], a["dilations"])
    dh, dw = a["dilations"]
    w = t.transpose(m.w, perm=(1, 0, 2, 3))
    if (kh, kw) != (1, 1):
        w = t.slice(w, starts=(-1, -1), ends=(-_END - 1, -_END - 1), axes=(2, 3), steps=(-1, -1))
    fh, fw = (kh - 1) * dh, (kw - 1) * dw
    return {"dx": t.conv2d(m.dy, w, strides=(1, 1), pads=(fh - t_, fw - l_, fh - b_, fw - r_),
                           dilations=(dh, dw), act="none")}


def grad_x_conv() -> Rule:
    def src(p: PatternBuilder) -> Out:
        return {"dx": p.conv2d_grad_x(p.var("dy"), p.var("w"), name="gx")}

    return rule(
        "trn_grad_x_conv",
        "conv2d_grad_x(dy, w) => conv2d(dy, flip(transpose(w))) with pads (k-1)*d - p, for stride 1 and one "
        "group: the input gradient as a forward convolution (the weight transform is an op of every step).",
        src, _gx_target,
        [ex({"dy": (2, 4, 5, 5), "w": (4, 3, 1, 1)}, gx={"x_shape": (2, 3, 5, 5)}),
         ex({"dy": (2, 4, 6, 5), "w": (4, 3, 3, 3)}, gx={"x_shape": (2, 3, 6, 5), "pads": (1, 1, 1, 1)}),
         ex({"dy": (1, 2, 5, 6), "w": (2, 3, 3, 2)}, gx={"x_shape": (1, 3, 6, 6), "pads": (0, 1, 1, 0)},
            note="asymmetric pads"),
         ex({"dy": (1, 3, 5, 5), "w": (3, 2, 3, 3)}, gx={"x_shape": (1, 2, 5, 5), "dilations": (2, 2),
                                                         "pads": (2, 2, 2, 2)}, note="dilated")],
        [(_gx_ok, "stride 1, one group")],
        tags=("training", "conv"))


def rules() -> list[Rule]:
    return [grad_w_gemm(), grad_x_conv()]
