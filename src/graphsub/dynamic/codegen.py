"""Code generation for a subgraph pattern (the thesis' §5.4) and its compile backends.

:func:`generate` writes one Python function per pattern: one argument per subgraph input (in
signature order), one variable per node (a node reached along two paths is computed and named
once: the thesis' fix for Fig. 5.2), the root returned.  Constants are bound by reference in the
function's namespace, so they keep their exact value and type.

Backends (:func:`compile_pattern`):

* ``python`` -- the generated function itself, run by CPython; autograd works through it, and
  its backward is the ops' own;
* ``fx`` -- the function traced into a :class:`torch.fx.GraphModule` (what torch tooling works
  on; same speed by design);
* ``inductor`` -- ``torch.compile`` of the function (dynamic shapes, since batch sizes vary):
  compiled on first call, forward and backward then reused from its cache.  Costs seconds per
  pattern; measured in ``graphsub dynamic bench --backends``.

>>> import torch
>>> from graphsub.dynamic.lazy import lazy
>>> from graphsub.dynamic.signature import consumer_map, extract
>>> with lazy():
...     x = torch.ones(1, 3, requires_grad=True)
...     t = torch.tanh(x)
...     z = t * t + 1.5
>>> src, fn = generate(extract(z, 4, consumer_map(z)), "pattern_0")
>>> print(src)
def pattern_0(a0):
    v0 = f0(a0)
    v1 = v0.__mul__(v0)
    v2 = v1.__add__(1.5)
    return v2
>>> torch.allclose(fn(x), torch.tanh(x) ** 2 + 1.5)
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from graphsub.dynamic.calls import Slot
from graphsub.dynamic.lazy import LazyTensor
from graphsub.dynamic.signature import Subgraph

BACKENDS = ("python", "fx", "inductor")


def generate(sub: Subgraph, name: str) -> tuple[str, Callable[..., Any]]:
    """Source and function of ``sub`` (module docstring)."""
    ns: dict[str, Any] = {}
    var: dict[int, str] = {}
    arg: dict[int, str] = {}
    for k, x in enumerate(sub.inputs):
        arg[x.gid if type(x) is LazyTensor else -id(x)] = f"a{k}"
    consts: dict[int, str] = {}

    def const(obj: Any) -> str:
        key = id(obj)
        if key not in consts:
            consts[key] = f"c{len(consts)}"
            ns[consts[key]] = obj
        return consts[key]

    lines = [f"def {name}({', '.join(f'a{k}' for k in range(len(sub.inputs)))}):"]
    funcs: dict[int, str] = {}
    for j, n in enumerate(sub.nodes):
        fkey = id(n.func)
        if fkey not in funcs:
            funcs[fkey] = f"f{len(funcs)}"
            ns[funcs[fkey]] = n.func

        def ref(i: Any) -> str:
            if type(i) is LazyTensor and i.gid in var:
                return var[i.gid]
            return arg[i.gid if type(i) is LazyTensor else -id(i)]

        def render(t: Any, n: LazyTensor = n) -> str:
            if type(t) is Slot:
                return ref(n.inputs[t.index])
            if type(t) is list:
                return "[" + ", ".join(render(x) for x in t) + "]"
            if type(t) is tuple:
                return "(" + "".join(render(x) + ", " for x in t) + ")"
            if type(t) in (int, float, bool) or t is None:
                return repr(t) if repr(t) not in ("inf", "-inf", "nan") else const(t)
            return const(t)

        args, kwargs = n.template
        var[n.gid] = f"v{j}"
        if n.name.startswith("Tensor.") and args and type(args[0]) is Slot:  # a method: call it as one
            parts = [render(a) for a in args[1:]] + [f"{k}={render(v)}" for k, v in kwargs.items()]
            lines.append(f"    v{j} = {render(args[0])}.{n.name[7:]}({', '.join(parts)})")
            continue
        if n.name == "getitem":
            lines.append(f"    v{j} = {render(args[0])}[{render(args[1])}]")
            continue
        parts = [render(a) for a in args] + [f"{k}={render(v)}" for k, v in kwargs.items()]
        lines.append(f"    v{j} = {funcs[fkey]}({', '.join(parts)})")
    lines.append(f"    return {var[sub.root.gid]}")
    src = "\n".join(lines)
    exec(compile(src, f"<graphsub pattern {name}>", "exec"), ns)  # our own generated code
    return src, ns[name]


def compile_pattern(fn: Callable[..., Any], backend: str) -> Callable[..., Any]:
    """``fn`` under ``backend`` (``python``, ``fx`` or ``inductor``; module docstring)."""
    if backend == "python":
        return fn
    if backend == "fx":
        return torch.fx.symbolic_trace(fn)
    if backend == "inductor":
        return torch.compile(fn, dynamic=True, fullgraph=True)
    raise ValueError(f"unknown backend {backend!r}; choose from {BACKENDS}")


__all__ = ["BACKENDS", "compile_pattern", "generate"]
