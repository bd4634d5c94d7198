"""Operator templates and input tensors of the rule generator (TASO's, Jia et al. SOSP'19 §3).

A :class:`Template` is one operator with all its attributes fixed (``conv3x3r`` = 3x3 conv,
stride 1, SAME, fused ReLU).  Templates know three things:

* which inputs are valid and the static result (:meth:`Template.infer` on :class:`Meta`:
  shape plus TASO's *split tree* -- the top-level piece sizes a ``concat`` left on each axis,
  which a later ``split`` undoes);
* how to compute on the fingerprint domain, integers modulo the prime :data:`P`
  (:meth:`Template.compute`); ReLU is replaced by the polynomial ``x*(x+1)+1`` as TASO does,
  so that evaluation is exact arithmetic, and average pooling multiplies by the inverse of 9;
* the graphsub op and attributes it stands for (:attr:`Template.op`, :attr:`Template.attrs`),
  used when generated substitutions are emitted as rules.

Invariants: every template's ``compute`` is a function of its inputs alone (no hidden state);
results are reduced modulo ``P`` and fit in int64 (products < 2**40, sums of at most a few
hundred products); ``infer`` returns ``None`` exactly when the template does not apply.

The default set, :data:`TASO_TEMPLATES`, follows TASO's generator: matmul, add, mul, conv
{3x3, 1x3, 3x1} x {none, relu} (stride 1, SAME), 3x3 average/max pooling (stride 1, SAME), the
constants (pooling kernel, identity kernel, identity matrix, ones), enlarge to 3x3, scalar
multiplication, relu, concat on axis 0/1 (2-D and 4-D inputs), two-way split on axis 0/1 and
the 2-D transpose.  TASO's ``TransposeShuffle`` differs from ``Transpose`` only in memory layout,
which graphsub does not model, so it is left out.

>>> t = TEMPLATES["matmul"]
>>> t.infer((Meta((2, 4)), Meta((4, 4))), (False, True))
(Meta(shape=(2, 4), split=(None, None)),)
>>> t.infer((Meta((4, 4)), Meta((2, 4))), (True, False)) is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the prime modulus of the fingerprint domain (products of two residues fit in 40 bits)
P = 1_000_003
INV9 = pow(9, P - 2, P)

Split = tuple[int, ...] | None


@dataclass(frozen=True)
class Meta:
    """Static facts about a tensor: shape and, per axis, the piece sizes of the concat that
    produced it (None where there is none)."""

    shape: tuple[int, ...]
    split: tuple[Split, ...] = ()

    def __post_init__(self) -> None:
        if not self.split:
            object.__setattr__(self, "split", (None,) * len(self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Var:
    """An input tensor of the enumeration: name, shape, and whether it is a weight (TASO's
    ``w*`` and ``s*``: never the data input of a conv or pool)."""

    name: str
    shape: tuple[int, ...]
    weight: bool


#: TASO's input tensors (generator.cc ``main``): batch 2, 4 channels/features, 5x5 images
TASO_VARS: tuple[Var, ...] = (
    *(Var(f"x{k}", (2, 4), False) for k in (1, 2, 3)),
    *(Var(f"w{k}", (4, 4), True) for k in (1, 2, 3)),
    *(Var(f"i{k}", (2, 4, 5, 5), False) for k in (1, 2, 3)),
    *(Var(f"w{k}", (4, 4, 3, 3), True) for k in (4, 5, 6)),
    *(Var(f"w{k}", (4, 4, 1, 3), True) for k in (7, 8, 9)),
    *(Var(f"w{k}", (4, 4, 3, 1), True) for k in (10, 11, 12)),
    Var("w13", (4, 1, 3, 3), True),
    Var("s0", (), True),
)

# ----------------------------------------------------------------------------- modular kernels


def relu_poly(x: np.ndarray) -> np.ndarray:
    """TASO's stand-in for ReLU on the fingerprint domain: ``x*(x+1)+1 (mod P)``."""
    return (x * (x + 1) + 1) % P


def _pad(x: np.ndarray, top: int, bottom: int, left: int, right: int, fill: int = 0) -> np.ndarray:
    """Pad the last two axes (a faster np.pad for this one case)."""
    n, c, h, w = x.shape
    out = np.full((n, c, h + top + bottom, w + left + right), fill, dtype=x.dtype)
    out[:, :, top:top + h, left:left + w] = x
    return out


def conv_mod(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Stride-1 SAME conv2d of int64 residues (groups = C / w.shape[1]), modulo P."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = c // cg
    xp = _pad(x, (kh - 1) // 2, kh - 1 - (kh - 1) // 2, (kw - 1) // 2, kw - 1 - (kw - 1) // 2)
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))  # n c h w kh kw
    win = win.reshape(n, g, cg, h, wd, kh, kw)
    wg = w.reshape(g, o // g, cg, kh, kw)
    y = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=False)
    return y.reshape(n, o, h, wd) % P


def pool_mod(x: np.ndarray, avg: bool) -> np.ndarray:
    """3x3 stride-1 SAME pooling of residues: the window sum times 1/9 (padding counts, like a
    depthwise conv with :data:`INV9` kernels) or the largest residue in the window (padding
    excluded)."""
    if avg:
        xp = _pad(x, 1, 1, 1, 1)
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        return (win.sum(axis=(4, 5)) % P) * INV9 % P
    xp = _pad(x, 1, 1, 1, 1, fill=-1)
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    return win.max(axis=(4, 5))


# ----------------------------------------------------------------------------- templates

InferFn = Callable[["Template", Sequence[Meta], Sequence[bool]], "tuple[Meta, ...] | None"]
ComputeFn = Callable[["Template", Sequence[np.ndarray], Sequence[Meta]], "tuple[np.ndarray, ...]"]


@dataclass(frozen=True)
class Template:
    """One operator with fixed attributes (see the module docstring).

    ``symmetric``: the two inputs commute, so only unordered pairs are enumerated (TASO's
    ``j < k`` loops for add and mul); ``distinct``: both inputs must be different tensors;
    ``param``: a kind-specific constant (kernel, axis, constant shape).
    """

    name: str
    kind: str
    op: str
    attrs: tuple[tuple[str, Any], ...] = ()
    arity: int = 1
    num_outputs: int = 1
    symmetric: bool = False
    distinct: bool = False
    param: Any = None
    _infer: InferFn = field(default=lambda t, m, w: None, repr=False, compare=False)
    _compute: ComputeFn = field(default=lambda t, xs, o: (), repr=False, compare=False)

    def infer(self, metas: Sequence[Meta], weights: Sequence[bool]) -> tuple[Meta, ...] | None:
        """Output metas, or None if the inputs are not valid (``weights[k]``: input k is a
        weight variable)."""
        return self._infer(self, metas, weights)

    def compute(self, xs: Sequence[np.ndarray], out: Sequence[Meta]) -> tuple[np.ndarray, ...]:
        """Evaluate on residues ``xs`` (int64 arrays); ``out`` are the metas :meth:`infer` gave."""
        return self._compute(self, xs, out)

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


def _ew_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    a, b = m
    if a.shape != b.shape:
        return None
    return (Meta(a.shape, tuple(x if x is not None else y for x, y in zip(a.split, b.split, strict=True))),)


def _matmul_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    a, b = m
    if a.rank != 2 or b.rank != 2 or a.shape[1] != b.shape[0]:
        return None
    return (Meta((a.shape[0], b.shape[1]), (a.split[0], b.split[1])),)


def _conv_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    x, k = m
    if w[0] or x.rank != 4 or k.rank != 4 or k.shape[2:] != t.param:
        return None
    (n, c, h, wd), (o, cg, _, _) = x.shape, k.shape
    if c % cg or o % (c // cg):
        return None
    return (Meta((n, o, h, wd), (x.split[0], k.split[0], None, None)),)


def _pool_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    (x,) = m
    if w[0] or x.rank != 4:
        return None
    return (Meta(x.shape, (x.split[0], x.split[1], None, None)),)


def _same_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    return (m[0],)


def _smul_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    x, s = m
    if s.rank != 0 or x.rank == 0:
        return None
    return (x,)


def _transpose_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    (x,) = m
    if x.rank != 2:
        return None
    return (Meta(x.shape[::-1], x.split[::-1]),)


def _concat_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    a, b = m
    axis, rank = t.param
    if a.rank != rank or b.rank != rank:
        return None
    if any(a.shape[i] != b.shape[i] for i in range(rank) if i != axis):
        return None
    shape = tuple(a.shape[i] + b.shape[i] if i == axis else a.shape[i] for i in range(rank))
    split = tuple((a.shape[axis], b.shape[axis]) if i == axis else (a.split[i] if a.split[i] == b.split[i] else None)
                  for i in range(rank))
    return (Meta(shape, split),)


def _split_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    (x,) = m
    axis = t.param
    if axis >= x.rank or x.split[axis] is None:
        return None
    sp = tuple(None if i == axis else s for i, s in enumerate(x.split))
    return tuple(Meta(tuple(p if i == axis else d for i, d in enumerate(x.shape)), sp) for p in x.split[axis] or ())


def _enlarge_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    (x,) = m
    if x.rank != 4:
        return None
    (kh, kw), (nh, nw) = x.shape[2:], t.param
    if (kh, kw) == (nh, nw) or nh < kh or nw < kw or (nh - kh) % 2 or (nw - kw) % 2:
        return None
    return (Meta((*x.shape[:2], nh, nw), (x.split[0], x.split[1], None, None)),)


def _const_infer(t: Template, m: Sequence[Meta], w: Sequence[bool]) -> tuple[Meta, ...] | None:
    return (Meta(tuple(t.param)),)


def _c(fn: Callable[[Template, Sequence[np.ndarray]], np.ndarray]) -> ComputeFn:
    return lambda t, xs, o: (fn(t, xs),)


def _act(t: Template, y: np.ndarray) -> np.ndarray:
    return relu_poly(y) if t.attr_dict.get("act") == "relu" else y


def _split_compute(t: Template, xs: Sequence[np.ndarray], out: Sequence[Meta]) -> tuple[np.ndarray, ...]:
    axis, x = t.param, xs[0]
    cut = out[0].shape[axis]
    return (np.ascontiguousarray(np.take(x, range(cut), axis=axis)),
            np.ascontiguousarray(np.take(x, range(cut, x.shape[axis]), axis=axis)))


def _const_value(t: Template) -> np.ndarray:
    shape = tuple(t.param)
    if t.kind == "const_one":
        return np.ones(shape, np.int64)
    if t.kind == "const_pool":
        return np.full(shape, INV9, np.int64)
    if t.kind == "const_imm":
        return np.eye(shape[0], dtype=np.int64)
    o, i, kh, kw = shape
    v = np.zeros(shape, np.int64)
    v[np.arange(o), np.arange(o) % i, kh // 2, kw // 2] = 1
    return v


def _mk(name: str, kind: str, op: str, attrs: Mapping[str, Any], arity: int, infer: InferFn, compute: ComputeFn,
        **kw: Any) -> Template:
    return Template(name, kind, op, tuple(sorted(attrs.items())), arity, _infer=infer, _compute=compute, **kw)


def _templates() -> dict[str, Template]:
    ts: list[Template] = [
        _mk("matmul", "matmul", "matmul", {"act": "none"}, 2, _matmul_infer, _c(lambda t, xs: xs[0] @ xs[1] % P)),
        _mk("add", "add", "add", {}, 2, _ew_infer, _c(lambda t, xs: (xs[0] + xs[1]) % P), symmetric=True,
            distinct=True),
        _mk("mul", "mul", "mul", {}, 2, _ew_infer, _c(lambda t, xs: xs[0] * xs[1] % P), symmetric=True,
            distinct=True),
    ]
    for kh, kw in ((3, 3), (1, 3), (3, 1)):
        for act in ("none", "relu"):
            ts.append(_mk(f"conv{kh}x{kw}{'r' if act == 'relu' else ''}", "conv", "conv2d",
                          {"strides": (1, 1), "pads": "SAME", "dilations": (1, 1), "act": act}, 2, _conv_infer,
                          _c(lambda t, xs: _act(t, conv_mod(xs[0], xs[1]))), param=(kh, kw)))
    pool = {"kernel": (3, 3), "strides": (1, 1), "pads": "SAME", "act": "none"}
    ts += [
        _mk("avgpool3x3", "avgpool", "avgpool2d", {**pool, "count_include_pad": True}, 1, _pool_infer,
            _c(lambda t, xs: pool_mod(xs[0], True))),
        _mk("maxpool3x3", "maxpool", "maxpool2d", pool, 1, _pool_infer, _c(lambda t, xs: pool_mod(xs[0], False))),
        _mk("const_pool", "const_pool", "const_pool", {"shape": (4, 1, 3, 3)}, 0, _const_infer,
            _c(lambda t, xs: _const_value(t)), param=(4, 1, 3, 3)),
        _mk("const_iconv", "const_iconv", "const_iconv", {"shape": (4, 4, 3, 3)}, 0, _const_infer,
            _c(lambda t, xs: _const_value(t)), param=(4, 4, 3, 3)),
        _mk("const_imm", "const_imm", "const_imm", {"n": 4}, 0, _const_infer,
            _c(lambda t, xs: _const_value(t)), param=(4, 4)),
        _mk("const_one", "const_one", "const_one", {"shape": (2, 4, 5, 5), "dtype": "float32"}, 0, _const_infer,
            _c(lambda t, xs: _const_value(t)), param=(2, 4, 5, 5)),
        _mk("enlarge3x3", "enlarge", "enlarge", {"kernel": (3, 3)}, 1, _enlarge_infer,
            _c(lambda t, xs: _pad(xs[0], *((3 - xs[0].shape[2]) // 2,) * 2, *((3 - xs[0].shape[3]) // 2,) * 2)),
            param=(3, 3)),
        _mk("smul", "smul", "smul", {}, 2, _smul_infer, _c(lambda t, xs: xs[0] * xs[1] % P), distinct=True),
        _mk("relu", "relu", "relu", {}, 1, _same_infer, _c(lambda t, xs: relu_poly(xs[0]))),
    ]
    for rank in (2, 4):
        for axis in (0, 1):
            ts.append(_mk(f"concat{axis}_{rank}d", "concat", "concat", {"axis": axis}, 2, _concat_infer,
                          _c(lambda t, xs: np.concatenate(xs, axis=t.param[0])), distinct=True, param=(axis, rank)))
    for axis in (0, 1):
        ts.append(_mk(f"split{axis}", "split", "split", {"axis": axis}, 1, _split_infer, _split_compute,
                      num_outputs=2, param=axis))
    ts.append(_mk("transpose", "transpose", "transpose", {"perm": (1, 0)}, 1, _transpose_infer,
                  _c(lambda t, xs: np.ascontiguousarray(xs[0].T))))
    return {t.name: t for t in ts}


#: every template by name
TEMPLATES: dict[str, Template] = _templates()
#: TASO's operator set (the default of ``graphsub rules generate``)
TASO_TEMPLATES: tuple[str, ...] = tuple(TEMPLATES)
#: short aliases accepted by ``--ops`` (each expands to several templates)
ALIASES: dict[str, tuple[str, ...]] = {
    "conv": tuple(n for n in TEMPLATES if n.startswith("conv")),
    "pool": ("avgpool3x3", "maxpool3x3"),
    "const": ("const_pool", "const_iconv", "const_imm", "const_one"),
    "concat": tuple(n for n in TEMPLATES if n.startswith("concat")),
    "split": ("split0", "split1"),
    "ewadd": ("add",), "ewmul": ("mul",), "scalarmul": ("smul",), "enlarge": ("enlarge3x3",),
    "taso": TASO_TEMPLATES,
}


def resolve_ops(names: Sequence[str]) -> tuple[str, ...]:
    """Template names for a list of names/aliases (order kept, duplicates dropped); KeyError
    names the unknown ones."""
    out: dict[str, None] = {}
    bad = []
    for n in names:
        n = n.strip()
        if not n:
            continue
        if n in TEMPLATES:
            out[n] = None
        elif n in ALIASES:
            out.update(dict.fromkeys(ALIASES[n]))
        else:
            bad.append(n)
    if bad:
        raise KeyError(f"unknown operator template(s) {bad}; known: {', '.join([*TEMPLATES, *ALIASES])}")
    return tuple(out)


__all__ = [
    "ALIASES",
    "INV9",
    "TASO_TEMPLATES",
    "TASO_VARS",
    "TEMPLATES",
    "Meta",
    "P",
    "Template",
    "Var",
    "conv_mod",
    "pool_mod",
    "relu_poly",
    "resolve_ops",
]
