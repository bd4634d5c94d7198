"""Shared test helpers (importable because pytest puts tests/ on sys.path, see pyproject)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphsub.execute import run
from graphsub.frontends.onnx_io import to_onnx
from graphsub.frontends.ort import run_model
from graphsub.ir import Builder, Graph
from graphsub.optimize.timing import Timers, using_timers
from graphsub.rules.rule import Rule, make_rule


def make_rand(seed: int) -> Callable[..., np.ndarray]:
    """A float32 standard-normal generator with its own seeded stream (one per test module)."""
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return rand


def ops_of(g: Graph) -> list[str]:
    """Sorted op names of the compute nodes."""
    return sorted(g.node(n).op for n in g.nodes if not g.node(n).is_leaf)


def build(op: str, shapes: list[tuple[int, ...]], **attrs: Any) -> Graph:
    """A graph applying ``op`` to fresh float32 inputs ``x0, x1, ...``."""
    b = Builder(op)
    xs = [b.input(f"x{i}", s) for i, s in enumerate(shapes)]
    return b.build(b.op(op, *xs, **attrs))


def check_ort(g: Graph, feeds: dict[str, np.ndarray], opset: int | None = None) -> np.ndarray:
    """Run ``g`` with the reference executor and in onnxruntime; assert they agree."""
    (ref,) = run(g, feeds).values()
    (got,) = run_model(to_onnx(g, opset=opset), feeds)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    return ref


@pytest.fixture(autouse=True)
def no_stop_request() -> Iterator[None]:
    """No pending stop request before or after a test (a Ctrl-C flag left behind would end the next searches at
    once). Autouse in the modules that import it: ``from helpers import no_stop_request  # noqa: F401``."""
    from graphsub import interrupt

    interrupt.clear()
    yield
    interrupt.clear()


# ----------------------------------------------------------------------------- optimize: a small model, fake timing


def small_model() -> onnx.ModelProto:
    """``y = hardmax(relu(x @ W1)) + (identity(x @ W2) + x @ W3)``: Hardmax is not modelled (kept
    opaque); around it the default rules remove the identity and merge ``x @ W2 + x @ W3`` into
    ``x @ (W2 + W3)`` (7 nodes -> 5, measurably faster in onnxruntime)."""
    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), f"W{i}") for i in (1, 2, 3)]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["a"]),
        helper.make_node("MatMul", ["x", "W2"], ["b"]),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Identity", ["b"], ["rb"]),
        helper.make_node("MatMul", ["x", "W3"], ["c"]),
        helper.make_node("Add", ["rb", "c"], ["s"]),
        helper.make_node("Hardmax", ["ra"], ["hm"], axis=1),
        helper.make_node("Add", ["hm", "s"], ["y"]),
    ]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])], ws)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _node_count(model: bytes | str) -> float:
    m = onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model)
    return float(len(m.graph.node))


def fake_timers(fn: Callable[[bytes | str], float], paired: Callable[[bytes | str], float] | None = None,
                **fields: Any) -> Timers:
    """:class:`~graphsub.optimize.timing.Timers` without onnxruntime: a model's latency is ``fn(model)`` in the
    side-by-side rounds and ``paired(model)`` (default ``fn``) in the paired confirmation rounds, computed once per
    session (timers are called thousands of times); ``fields`` replace other fields (``clock``, ``step_timer``)."""

    def side(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        v = fn(model)
        return lambda budget_ms: v

    def pair(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        v = (paired or fn)(model)
        return lambda budget_ms: v

    return Timers(session=side, confirm=pair, **fields)


def convnext_block(c: int = 8, hw: int = 6, hidden: int = 24, *, gelu: str = "erf", gamma: str | None = "c11",
           bias_left: bool = False, leak: str = "", const_w: bool = True, mlp: bool = True,
           seed: int = 0) -> onnx.ModelProto:
    """A ConvNeXt block as the exporters write it: depthwise conv -> Transpose(0, 2, 3, 1) -> LayerNormalization ->
    MatMul -> Add -> GELU (``erf``: TorchScript's decomposition with Constant nodes; ``op``: ONNX Gelu) -> MatMul ->
    Add -> Transpose(0, 3, 1, 2) -> Mul by a layer scale (``gamma``: its shape, or None) -> + the block's input.
    ``leak``: a region tensor also read outside (``output``: the first MatMul's result is a graph output too)."""
    rng = np.random.default_rng(seed)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    inits = [w("dw", c, 1, 3, 3), w("dwb", c), w("g", c), w("b", c), w("w1", c, hidden), w("b1", hidden),
             w("w2", hidden, c), w("b2", c)]
    nodes = [helper.make_node("Conv", ["x", "dw", "dwb"], ["d"], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["ln"], axis=-1, epsilon=1e-6)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])]
    if not mlp:
        nodes.append(helper.make_node("Transpose", ["ln"], ["back"], perm=[0, 3, 1, 2]))
    else:
        if not const_w:
            inits = [i for i in inits if i.name != "w1"]
            inputs.append(helper.make_tensor_value_info("w1", TensorProto.FLOAT, [c, hidden]))
        nodes += [helper.make_node("MatMul", ["ln", "w1"], ["m1"]),
                  helper.make_node("Add", ["b1", "m1"] if bias_left else ["m1", "b1"], ["a1"])]
        if gelu == "op":
            nodes.append(helper.make_node("Gelu", ["a1"], ["h"]))
        else:
            for name, v in (("k_sqrt2", 1.4142135), ("k_one", 1.0), ("k_half", 0.5)):
                nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
                    np.array(v, np.float32), name + "_v")))
            nodes += [helper.make_node("Div", ["a1", "k_sqrt2"], ["e0"]), helper.make_node("Erf", ["e0"], ["e1"]),
                      helper.make_node("Add", ["e1", "k_one"], ["e2"]), helper.make_node("Mul", ["a1", "e2"], ["e3"]),
                      helper.make_node("Mul", ["e3", "k_half"], ["h"])]
        nodes += [helper.make_node("MatMul", ["h", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["a2"]),
                  helper.make_node("Transpose", ["a2"], ["back"], perm=[0, 3, 1, 2])]
    last = "back"
    if gamma is not None and mlp:
        shape = {"c11": (c, 1, 1), "1c11": (1, c, 1, 1), "c": (c,)}[gamma]
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), "gamma"))
        nodes.append(helper.make_node("Mul", ["gamma", "back"], ["scaled"]))
        last = "scaled"
    nodes.append(helper.make_node("Add", [last, "x"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])]
    if leak == "output":
        outputs.append(helper.make_tensor_value_info("m1", TensorProto.FLOAT, [1, hw, hw, hidden]))
    graph = helper.make_graph(nodes, "block", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


# ----------------------------------------------------------------------------- optimize: fixtures
# Imported by tests/optimize/conftest.py and tests/cli/test_cli_optimize.py (tests/cli has no conftest.py: with
# --doctest-modules a second conftest.py collected before tests/conftest.py breaks its collection). Named with
# ``name=`` so that a test module importing ``*_fixture`` can take ``model_path`` etc. as parameters.


@pytest.fixture(name="model_path")
def model_path_fixture(tmp_path: Path) -> Path:
    """:func:`small_model` saved as ``small.onnx``."""
    p = tmp_path / "small.onnx"
    onnx.save(small_model(), str(p))
    return p


@pytest.fixture(name="fake_timing")
def fake_timing_fixture() -> Iterator[Callable[..., None]]:
    """Replace onnxruntime timing by a function of the model (default: its node count) for every call of the test
    not given ``timers=`` (a command line's too): :func:`fake_timers` in a
    :func:`~graphsub.optimize.timing.using_timers` block; ``install(fn, paired=None)`` replaces them."""
    with ExitStack() as stack:

        def install(fn: Callable[[bytes | str], float] = _node_count,
                    paired: Callable[[bytes | str], float] | None = None) -> None:
            stack.enter_context(using_timers(fake_timers(fn, paired)))

        install()
        yield install


@pytest.fixture(name="bad_rule")
def bad_rule_fixture() -> Rule:
    """A deliberately wrong rule: ``a + b -> a`` (drops an operand)."""
    return make_rule("test_bad_add_drop", lambda p: {"y": p.add(p.var("a"), p.var("b"))},
                     lambda t, m: {"y": m.a}, exact=False, reason="test: deliberately drops an operand")


# ----------------------------------------------------------------------------- cost: a private cache, an encoder


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a test away from the user's real cache directory (op times, solved rule examples). Autouse in the
    modules that import it (tests/cost/conftest.py, tests/cli/test_cli_cost.py)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GRAPHSUB_CACHE", str(tmp_path / "ops.sqlite"))


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def encoder_like_model(with_if: bool = False) -> bytes:
    """x -> LayerNorm spelt out in primitive ops -> MatMul + bias -> GELU spelt out with Erf (what exporters
    write; onnxruntime fuses both), serialized; ``with_if``: its output then goes through an ``If``."""
    d = 16
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [
        n("ReduceMean", ["x"], ["mu"], axes=[-1]), n("Sub", ["x", "mu"], ["xc"]),
        n("Pow", ["xc", "two"], ["sq"]), n("ReduceMean", ["sq"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Div", ["xc", "sd"], ["xn"]),
        n("Mul", ["xn", "gamma"], ["xg"]), n("Add", ["xg", "beta"], ["ln"]),
        n("MatMul", ["ln", "w"], ["mm"]), n("Add", ["mm", "b"], ["h"]),
        n("Div", ["h", "sqrt2"], ["hd"]), n("Erf", ["hd"], ["he"]), n("Add", ["he", "one"], ["h1"]),
        n("Mul", ["h", "h1"], ["hm"]), n("Mul", ["hm", "half"], ["y"]),
    ]
    inits = [_init("two", 2.0), _init("eps", 1e-5), _init("gamma", rng.random(d)), _init("beta", rng.random(d)),
             _init("w", rng.random((d, d))), _init("b", rng.random(d)), _init("sqrt2", np.sqrt(2.0)),
             _init("one", 1.0), _init("half", 0.5)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, d])]
    if with_if:
        then = helper.make_graph([n("Identity", ["y"], ["t"])], "then", [],
                                 [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4, d])])
        other = helper.make_graph([n("Neg", ["y"], ["e"])], "else", [],
                                  [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4, d])])
        nodes.append(n("If", ["c"], ["z"], then_branch=then, else_branch=other))
        outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, d])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, d])]
    if with_if:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    g = helper.make_graph(nodes, "enc", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture(name="encoder_like")
def encoder_like_fixture() -> Callable[..., bytes]:
    """A small encoder block as exporters write it (LayerNorm and GELU spelt out), serialized:
    :func:`encoder_like_model`."""
    return encoder_like_model


# ----------------------------------------------------------------------------- optimize --report: the HTML page


class ReportPage(HTMLParser):
    """What the report tests look at: section ids, image sources, every URL-ish attribute, tags, and the
    rows of the substitutions table."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.rows: list[str] = []  # class of each body row of the substitutions table
        self._section = ""
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        if tag == "section":
            self._section = a.get("id") or ""
            self.sections.append(self._section)
        if tag == "img":
            self.images.append(a.get("src") or "")
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "srcset", "action", "data", "poster")]
        if tag == "tbody":
            self._in_body = True
        if tag == "tr" and self._in_body and self._section == "substitutions":
            self.rows.append(a.get("class") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False


def parse_report(text: str) -> ReportPage:
    page = ReportPage()
    page.feed(text)
    page.close()
    return page


# ----------------------------------------------------------------------------- symbolic input dims (ONNX dim_param)


def save_onnx(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              inits: list[onnx.TensorProto], path: Path) -> Path:
    """An opset-17 model of these nodes saved at ``path``."""
    g = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def float_vi(name: str, dims: list[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _dense_weights() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]


def symbolic_dense(path: Path, batch: str | int | None = "batch") -> Path:
    """``y = relu(x @ w + b)`` over ``x: [batch, 8]``: nothing in it depends on the batch size."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    return save_onnx(nodes, [float_vi("x", [batch, 8])], [float_vi("y", [batch, 8])], _dense_weights(), path)


def symbolic_reshaped(path: Path) -> Path:
    """``y = relu(reshape(x @ w + b, concat(shape(x)[:1], [2, 4])))``: the import folds ``Shape(x)`` at batch 1, so
    the graph's Reshape target is the constant ``[1, 2, 4]``."""
    tail = numpy_helper.from_array(np.array([2, 4], dtype=np.int64), "tail")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Concat", ["s", "tail"], ["shp"], axis=0),
             helper.make_node("Reshape", ["u", "shp"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    return save_onnx(nodes, [float_vi("x", ["batch", 8])], [float_vi("y", ["batch", 2, 4])],
                     [*_dense_weights(), tail], path)


def declared_dims(path: Path) -> dict[str, list[int | str]]:
    """The dims the file declares for each graph input and output (a name for a symbolic one)."""
    m = onnx.load(str(path))
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*m.graph.input, *m.graph.output]}


def ort_run_x(path: Path | bytes, x: np.ndarray) -> np.ndarray:
    """The first output of the model (a file or its bytes) in onnxruntime, fed ``x`` as its input ``x``."""
    import onnxruntime as ort

    src = path if isinstance(path, bytes) else str(path)
    return np.asarray(ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])


# ----------------------------------------------------------------------------- documentation pages

_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```\s*$", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    """The ``python`` code blocks of a Markdown page, in order (what tests/docs runs)."""
    return _PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- training-step timing


def step_timers(step_timer: Callable[..., Any], **fields: Any) -> Timers:
    """:class:`~graphsub.optimize.timing.Timers` whose ``step_timer`` (the training-step seam) is ``step_timer``;
    ``fields`` replace other fields."""
    return Timers(step_timer=step_timer, **fields)


def fake_step_timer(ms: dict[str, float], *, noise: float = 0.01, seed: int = 0, run: bool = True
                    ) -> Callable[..., Any]:
    """A fake ``step_timer``: a unit of variant ``name`` (``module``, ``optimized``, ``emitted_original``) reports
    ``ms[name]`` (default ``ms["module"]``) times ``1 + noise * N(0, 1)`` (a seeded stream, the same for every run)
    per round; with ``run``, a unit's first round also runs one real step of its trainer (the fresh copies train)."""
    import random

    rng = random.Random(seed)

    def make(trainer: Any, *, name: str = "", **kw: object) -> Callable[[float], float]:
        base = ms.get(name, ms["module"])
        calls = [0]

        def timer(budget_ms: float) -> float:
            if run and not calls[0]:
                trainer.step()
            calls[0] += 1
            return base * (1.0 + noise * rng.gauss(0.0, 1.0))

        return timer

    return make


def favour_optimized(optimized: bool) -> Timers:
    """Timers whose training steps (a real one per fresh unit) are timed as the optimized module's twice as fast as
    the module's (``optimized``) or twice as slow, 1% noise."""
    return step_timers(fake_step_timer({"module": 10.0, "optimized": 5.0 if optimized else 20.0}))
