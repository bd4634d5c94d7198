"""Graph -> ``torch.nn.Module``: run (and train) a graph in PyTorch.

:func:`module_source` writes a graph as the Python source of a ``torch.nn.Module`` subclass, one line per
node in the style of ``torch.fx``'s generated code: ``forward`` takes the graph inputs positionally (in
``graph.input_names`` order) and returns its output (a tuple, in ``graph.output_names`` order, when there are
several).  Each node calls :data:`graphsub.frontends.torch_ops.TORCH_OPS` (or, for the simplest ops, the
torch function that entry calls), so the module computes what the numpy reference executor computes.  A value
is dropped (``x = None``) after its last use, as fx does.  The source imports only ``torch`` and
:mod:`graphsub.frontends.torch_ops`, so it can be written to a ``.py`` file; the same graph gives the same
source.  :func:`to_module` executes that source and loads the weight data.

Weights keep their graph names as ``state_dict`` keys: a dotted name such as ``layer1.0.conv1.weight`` is
registered on nested (plain ``nn.Module``) containers, so the original PyTorch model's state dict loads
into the module.  A name that is not such a path (``onnx::Conv_123``, ``/Constant_output_0``, a name
clashing with an ``nn.Module`` attribute or with another weight's container) gets a sanitized flat key
(characters other than letters, digits and ``_`` become ``_``, then a ``_1``, ``_2``... suffix if taken);
``module.graph_names`` maps every graph weight name to its key.  A weight is an ``nn.Parameter`` when it is
trainable (by default every floating-point weight), else a buffer (integer and bool weights always).
Constant generators (``const_*``) are non-persistent buffers, outside the state dict.

Everything runs in autograd: weight transforms (``enlarge``, ``merge_gconv``, a transpose of an imported
weight...) are computed in ``forward`` from the trainable weights, never folded.  ``batchnorm`` uses its
running statistics (buffers), as the graph does: the module trains like a model in ``eval()`` mode.

>>> import torch
>>> from graphsub.ir import Builder
>>> b = Builder("mlp")
>>> x = b.input("x", (2, 3))
>>> y = b.matmul(x, b.weight("fc.weight", (3, 4)), act="relu")
>>> g = b.build(y + b.weight("fc.bias", (4,)))
>>> print(module_source(g).split("def forward")[1].strip())
(self, x):
        fc_weight = self.fc.weight
        matmul = OPS['matmul']((x, fc_weight), {'act': 'relu'})[0];  x = None
        fc_bias = self.fc.bias
        add = torch.add(matmul, fc_bias);  matmul = None
        return add
>>> import numpy as np
>>> m = to_module(g, params={"fc.weight": np.ones((3, 4), np.float32), "fc.bias": np.zeros(4, np.float32)})
>>> list(m.state_dict()), type(m.fc.weight).__name__
(['fc.weight', 'fc.bias'], 'Parameter')
>>> m(torch.ones(2, 3)).sum().item()
24.0
"""

from __future__ import annotations

import hashlib
import keyword
import linecache
import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch

from graphsub.errors import ExportError
from graphsub.frontends.torch_ops import DTYPES, TORCH_OPS
from graphsub.ir.graph import Graph
from graphsub.ir.node import Node, Ref
from graphsub.ops.types import FLOAT_DTYPES, np_dtype

#: ops written as a direct torch call (exactly what their TORCH_OPS entry calls), for readability
_UNARY = {op: f"torch.{op}" for op in ("relu", "sigmoid", "tanh", "erf", "sqrt", "exp", "log", "neg", "abs",
                                        "reciprocal")}
_BINARY = {"add": "torch.add", "sub": "torch.sub", "mul": "torch.mul", "div": "torch.div", "pow": "torch.pow",
           "smul": "torch.mul"}
#: attributes of the generated class (besides nn.Module's) that a root weight must not shadow
_CLASS_ATTRS = frozenset({"graph_names", "input_names", "output_names"})
_PART = re.compile(r"[A-Za-z0-9_]+")


def _module_attrs() -> frozenset[str]:
    return frozenset(dir(torch.nn.Module()))


# ----------------------------------------------------------------------------- naming


def _identifier(text: str, fallback: str) -> str:
    """``text`` made a Python identifier (invalid characters -> ``_``; never a keyword)."""
    s = re.sub(r"\W", "_", text, flags=re.ASCII) or fallback
    if s[0].isdigit():
        s = f"{fallback}_{s}"
    return s + "_" if keyword.iskeyword(s) else s


class _Namer:
    """Unique identifiers: ``name``, then ``name_1``, ``name_2``..."""

    def __init__(self, taken: Collection[str] = ()) -> None:
        self.used = set(taken)

    def fresh(self, want: str) -> str:
        name, k = want, 0
        while name in self.used:
            k += 1
            name = f"{want}_{k}"
        self.used.add(name)
        return name


def state_dict_keys(names: Collection[str]) -> dict[str, str]:
    """Graph weight name -> ``state_dict`` key (see the module docstring); deterministic.

    >>> state_dict_keys(["layer1.0.conv1.weight", "onnx::Conv_123", "/Constant_output_0", "training"])
    {'/Constant_output_0': '_Constant_output_0', 'layer1.0.conv1.weight': 'layer1.0.conv1.weight', \
'onnx::Conv_123': 'onnx__Conv_123', 'training': 'training_1'}
    """
    inner = _module_attrs()
    root_reserved = inner | _CLASS_ATTRS
    tree: dict[str, Any] = {}  # component -> subtree (a container) or None (a weight)
    keys: dict[str, str] = {}
    flat: list[str] = []

    def place(parts: list[str]) -> bool:
        level: dict[str, Any] | None = tree
        for depth, part in enumerate(parts):  # check first, then insert
            if part in (root_reserved if depth == 0 else inner) or level is None:
                return False
            if part in level and (depth == len(parts) - 1 or level[part] is None):
                return False  # taken by a weight, or a weight where a container is
            level = level.get(part, {})
        level = tree
        for part in parts[:-1]:
            level = level.setdefault(part, {})
        level[parts[-1]] = None
        return True

    for name in sorted(names):
        parts = name.split(".")
        if all(_PART.fullmatch(p) for p in parts) and place(parts):
            keys[name] = name
        else:
            flat.append(name)
    namer = _Namer(set(tree) | root_reserved)
    for name in flat:
        keys[name] = key = namer.fresh(_identifier(name, "w"))
        tree[key] = None
    return dict(sorted(keys.items()))


def _attr_path(key: str) -> str:
    """``self.a.b`` for the key ``a.b`` (``getattr(x, "0")`` for parts that are not identifiers)."""
    expr = "self"
    for part in key.split("."):
        expr = f"{expr}.{part}" if part.isidentifier() and not keyword.iskeyword(part) else \
            f"getattr({expr}, {part!r})"
    return expr


# ----------------------------------------------------------------------------- literals


def _lit(v: Any) -> str:
    """Python source of an attribute value (ints, floats incl. inf/nan, str, bool, bytes, None, tuples)."""
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({str(v)!r})"
    if isinstance(v, tuple):
        inner = ", ".join(_lit(e) for e in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if v is None or isinstance(v, bool | int | float | str | bytes):
        return repr(v)
    raise ExportError(f"cannot write the attribute value {v!r} as Python source")


def _attrs(node: Node) -> str:
    return "{" + ", ".join(f"{k!r}: {_lit(v)}" for k, v in node.sig.attrs) + "}"


def _dtype(name: str) -> str:
    return f"torch.{str(DTYPES[name]).removeprefix('torch.')}"


# ----------------------------------------------------------------------------- checks


def _describe(graph: Graph, nid: int) -> str:
    sig = graph.nodes[nid].sig
    if sig.op == "opaque":
        domain = sig.attr["domain"]
        return f"node %{nid} (opaque {domain + '::' if domain else ''}{sig.attr['op_type']})"
    return f"node %{nid} ({sig.op})"


def check_supported(graph: Graph) -> None:
    """ExportError naming every node (up to 8) without a torch implementation."""
    bad = [nid for nid in graph.topo_order()
           if not graph.nodes[nid].sig.opdef.leaf and graph.nodes[nid].sig.op not in TORCH_OPS]
    if bad:
        shown = ", ".join(_describe(graph, nid) for nid in bad[:8])
        more = f" and {len(bad) - 8} more" if len(bad) > 8 else ""
        raise ExportError(f"cannot emit graph {graph.name!r} as a torch module: no torch implementation for "
                          f"{shown}{more}")


# ----------------------------------------------------------------------------- source

_HELPER = '''

def _add_weight(module, key, data, trainable):
    """Register ``data`` under the dotted ``key`` (plain nn.Module containers on the way)."""
    *path, leaf = key.split(".")
    for part in path:
        if part not in module._modules:
            module.add_module(part, torch.nn.Module())
        module = module._modules[part]
    if trainable:
        module.register_parameter(leaf, torch.nn.Parameter(data))
    else:
        module.register_buffer(leaf, data)
'''


def module_source(graph: Graph, class_name: str = "GraphModule") -> str:
    """Python source of a ``torch.nn.Module`` subclass ``class_name`` computing ``graph`` (module docstring).

    The class constructs as ``class_name(trainable=None)`` (weights zero-filled: load a state dict;
    ``trainable``: graph weight names to make Parameters, None for every floating-point weight) and has
    ``graph_names`` (graph weight name -> state_dict key), ``input_names`` and ``output_names``.  ExportError
    for a node without a torch implementation.
    """
    if not class_name.isidentifier() or keyword.iskeyword(class_name):
        raise ExportError(f"class name {class_name!r} is not a Python identifier")
    check_supported(graph)
    order = graph.topo_order()
    weight_ids = [nid for nid in order if graph.nodes[nid].sig.op == "weight"]
    keys = state_dict_keys([graph.nodes[nid].sig.attr["name"] for nid in weight_ids])
    # locals: never shadow the module's globals or the forward's own names
    names = _Namer({"self", "torch", "OPS", "float", "getattr", "_add_weight", class_name})
    var: dict[Ref, str] = {}
    args: list[str] = []
    for nid in graph.inputs:
        args.append(names.fresh(_identifier(graph.nodes[nid].sig.attr["name"], "x")))
        var[Ref(nid, 0)] = args[-1]
    const_names = _Namer({key.split(".")[0] for key in keys.values()} | _module_attrs() | _CLASS_ATTRS)

    last_use: dict[Ref, int] = {}
    for step, nid in enumerate(order):
        for r in graph.nodes[nid].inputs:
            last_use[r] = step
    keep = set(graph.outputs)

    init: list[str] = []
    body: list[str] = []
    for step, nid in enumerate(order):
        node = graph.nodes[nid]
        sig = node.sig
        if sig.op == "input":
            continue
        if sig.op == "weight":
            key = keys[sig.attr["name"]]
            var[Ref(nid, 0)] = v = names.fresh(_identifier(key, "w"))
            body.append(f"{v} = {_attr_path(key)}")
            continue
        if sig.opdef.weight_op and not node.inputs:  # constant generator: a buffer made once
            buf = const_names.fresh(f"_const_{sig.op.removeprefix('const_')}")
            init.append(f"self.register_buffer({buf!r}, OPS[{sig.op!r}]((), {_attrs(node)})[0], persistent=False)")
            var[Ref(nid, 0)] = v = names.fresh(sig.op)
            body.append(f"{v} = self.{buf}")
            continue
        ins = [var[r] for r in node.inputs]
        outs = [names.fresh(sig.op)] if len(sig.out_types) == 1 else \
            [names.fresh(f"{sig.op}_out{i}") for i in range(len(sig.out_types))]
        for i, v in enumerate(outs):
            var[Ref(nid, i)] = v
        line = f"{', '.join(outs)} = {_call(sig.op, ins, node)}"
        dead = sorted({var[r] for r in node.inputs if last_use[r] == step and r not in keep
                       and graph.nodes[r.node].sig.op != "weight"})
        if dead:
            line += ";  " + " = ".join(dead) + " = None"
        body.append(line)
    rets = [var[r] for r in graph.outputs]
    body.append(f"return {rets[0]}" if len(rets) == 1 else f"return ({', '.join(rets)})")

    weights = []
    for nid in weight_ids:
        a = graph.nodes[nid].sig.attr
        weights.append(f"    ({a['name']!r}, {keys[a['name']]!r}, {_lit(tuple(a['shape']))}, {_dtype(a['dtype'])}),")
    out = [
        f"# {class_name}: the graph {graph.name!r} as a torch.nn.Module (generated by graphsub.frontends.torch_emit)",
        "",
        "import torch",
        "",
        "from graphsub.frontends import torch_ops",
        "",
        "OPS = torch_ops.TORCH_OPS",
        "",
        "#: (graph name, state_dict key, shape, dtype) of every weight",
        "WEIGHTS = (",
        *weights,
        ")",
        _HELPER,
        "",
        f"class {class_name}(torch.nn.Module):",
        f"    input_names = {_lit(tuple(graph.input_names))}",
        f"    output_names = {_lit(tuple(graph.output_names))}",
        "",
        "    def __init__(self, trainable=None):",
        '        """``trainable``: graph weight names to make Parameters (None: every floating-point weight)."""',
        "        super().__init__()",
        "        self.graph_names = {name: key for name, key, _, _ in WEIGHTS}",
        "        for name, key, shape, dtype in WEIGHTS:",
        "            grad = dtype.is_floating_point if trainable is None else name in trainable",
        "            _add_weight(self, key, torch.zeros(shape, dtype=dtype), grad)",
        *("        " + line for line in init),
        "",
        f"    def forward(self, {', '.join(args)}):" if args else "    def forward(self):",
        *("        " + line for line in body),
        "",
    ]
    return "\n".join(out)


def _call(op: str, ins: Sequence[str], node: Node) -> str:
    if op in _UNARY:
        return f"{_UNARY[op]}({ins[0]})"
    if op in _BINARY:
        return f"{_BINARY[op]}({ins[0]}, {ins[1]})"
    if op == "matmul" and node.sig.attr["act"] == "none":
        return f"torch.matmul({ins[0]}, {ins[1]})"
    tup = f"({ins[0]},)" if len(ins) == 1 else f"({', '.join(ins)})"
    rest = "" if len(node.sig.out_types) > 1 else "[0]"
    return f"OPS[{op!r}]({tup}, {_attrs(node)}){rest}"


# ----------------------------------------------------------------------------- module


def module_class(graph: Graph, class_name: str = "GraphModule") -> type[torch.nn.Module]:
    """The class :func:`module_source` writes, executed (its source registered with ``linecache`` so
    tracebacks and ``inspect`` show it)."""
    src = module_source(graph, class_name)
    filename = f"<graphsub.torch_emit {class_name} {hashlib.sha1(src.encode()).hexdigest()[:12]}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"__name__": f"graphsub_emitted_{class_name}"}
    exec(compile(src, filename, "exec"), namespace)
    cls: type[torch.nn.Module] = namespace[class_name]
    return cls


def to_module(graph: Graph, *, trainable: Collection[str] | None = None,
              params: Mapping[str, np.ndarray] | None = None) -> torch.nn.Module:
    """``graph`` as a ``torch.nn.Module`` with its weight data loaded (module docstring).

    ``trainable``: the weights to make ``nn.Parameter`` (the others are buffers); None: every
    floating-point weight.  Data come from ``params`` then ``graph.params``.  ExportError for a node
    without a torch implementation, a weight without data (or of the wrong shape), or a ``trainable`` name
    that is not a floating-point weight of the graph -- before anything runs.
    """
    weights = {graph.nodes[nid].sig.attr["name"]: graph.nodes[nid].sig.out_types[0] for nid in graph.ops_of("weight")}
    if trainable is not None:
        unknown = sorted(set(trainable) - set(weights))
        if unknown:
            raise ExportError(f"trainable name(s) {unknown[:8]} are not weights of graph {graph.name!r}")
        ints = sorted(n for n in trainable if weights[n].dtype not in FLOAT_DTYPES)
        if ints:
            raise ExportError(f"weight(s) {ints[:8]} are not floating-point: they cannot be trainable")
    data: dict[str, np.ndarray] = {}
    for name, t in sorted(weights.items()):
        value = params[name] if params is not None and name in params else graph.params.get(name)
        if value is None:
            raise ExportError(f"weight {name!r} of graph {graph.name!r} has no data: pass it in params or "
                              "attach it (graphsub.data.materialize for random data)")
        arr = np.asarray(value)
        if tuple(arr.shape) != t.shape:
            raise ExportError(f"weight {name!r}: data of shape {arr.shape}, the graph says {t.shape}")
        data[name] = arr
    module = module_class(graph)(trainable=trainable)
    keys = cast(dict[str, str], module.graph_names)
    state = {keys[name]: _tensor(arr, weights[name].dtype) for name, arr in data.items()}
    module.load_state_dict(state, strict=True)
    return module


def _tensor(arr: np.ndarray, dtype: str) -> torch.Tensor:
    return torch.from_numpy(np.array(arr, dtype=np_dtype(dtype))).to(DTYPES[dtype])  # a copy: params are read-only


__all__ = ["check_supported", "module_class", "module_source", "state_dict_keys", "to_module"]
