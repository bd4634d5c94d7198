"""Measured model: SQLite cache hits, keys, persistence, concurrent writers, free and opaque nodes."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphsub.cost import get_model
from graphsub.cost.env import default_cache_path, machine_key
from graphsub.cost.measured import Context, MeasuredCostModel, OpTimeCache, Timing, one_node_graph
from graphsub.ir import Builder, Graph
from graphsub.ir.node import Ref

FAST: dict[str, Any] = {"budget_ms": 2.0, "warmup": 1, "min_repeats": 3, "progress": False}


def small() -> Graph:
    b = Builder("small")
    x = b.input("x", (1, 4, 8, 8))
    y = b.conv2d(x, b.weight("w", (8, 4, 3, 3)), pads=(1, 1, 1, 1), act="relu")
    return b.build(b.add(b.relu(y), b.sigmoid(y)))


def test_profile_measures_once_then_hits(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    m = MeasuredCostModel(cache=path, threads=1, **FAST)
    g = small()
    s1 = m.profile(g)
    assert (s1.signatures, s1.hits, s1.misses) == (4, 0, 4)
    s2 = m.profile(g)
    assert (s2.hits, s2.misses, s2.hit_rate) == (4, 0, 1.0)
    cost = m.graph_cost(g)
    assert cost.time_ms > 0 and cost.flops > 0
    assert m.stats.misses == 4 and m.stats.hit_rate > 0.5


def test_persistence_across_instances_and_thread_count_in_key(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    g = small()
    a = MeasuredCostModel(cache=path, threads=1, **FAST)
    a.profile(g)
    cost_a = a.graph_cost(g)
    b = MeasuredCostModel(cache=path, threads=1, **FAST)
    s = b.profile(g)
    assert s.misses == 0 and s.hits == 4  # read back from SQLite, nothing re-measured
    assert b.graph_cost(g).time_ms == pytest.approx(cost_a.time_ms)
    c = MeasuredCostModel(cache=path, threads=2, **FAST)
    assert c.profile(g).misses == 4  # another thread count is another measurement
    assert a.ctx != c.ctx and machine_key() in a.ctx.cpu
    assert OpTimeCache(path).count() == 4 + 4 + 2  # ops at 1 and 2 threads, plus two call overheads


def test_default_cache_path_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHSUB_CACHE", str(tmp_path / "env.sqlite"))
    assert default_cache_path() == tmp_path / "env.sqlite"
    m = get_model("measured", threads=1, progress=False, budget_ms=2.0, min_repeats=3)
    m.graph_cost(small())
    assert (tmp_path / "env.sqlite").exists()
    monkeypatch.setenv("GRAPHSUB_CACHE", str(tmp_path))
    assert default_cache_path() == tmp_path / "op_times.sqlite"
    monkeypatch.delenv("GRAPHSUB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "graphsub" / "op_times.sqlite"


def test_weight_only_and_leaves_never_measured(tmp_path: Path) -> None:
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    w = b.concat(b.weight("w1", (2, 4, 3, 3)), b.enlarge(b.weight("w2", (2, 4, 1, 1)), kernel=(3, 3)), axis=0)
    g = b.build(b.conv2d(x, w, pads=(1, 1, 1, 1)))
    m = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, **FAST)
    s = m.profile(g)
    assert s.signatures == 1 and s.measured[0].startswith("conv2d")
    assert list(m.node_costs(g)) == list(g.ops_of("conv2d"))


def test_one_node_graph_makes_constant_inputs_weights() -> None:
    g = small()
    conv = next(iter(g.ops_of("conv2d")))
    one = one_node_graph(g.nodes[conv].sig, (False, True))
    assert one.input_names == ("x0",) and "c1" in one.leaves
    assert one.num_ops == 1


def test_opaque_nodes_are_measured(tmp_path: Path) -> None:
    from graphsub.frontends.onnx_io import from_onnx

    node = helper.make_node("Softsign", ["x"], ["y"])
    gp = helper.make_graph([node], "opq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])])
    g = from_onnx(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 17)]))
    assert g.op_histogram() == {"opaque": 1}
    m = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, **FAST)
    s = m.profile(g)
    assert s.misses == 1 and s.measured[0].startswith("opaque[op_type=Softsign")
    opq = next(iter(g.ops_of("opaque")))
    stored = OpTimeCache(tmp_path / "c.sqlite").get(m.ctx, *m.key_of(g.nodes[opq].sig, (False,)))
    assert stored is not None and stored.median_ms > 0 and stored.repeats >= FAST["min_repeats"]
    # the cost is the stored timing less the session-call overhead (floored at 0), plus one call
    op_ms = max(stored.median_ms - m.overhead_ms(), 0.0)
    assert m.node_costs(g)[opq].time_ms == op_ms
    assert m.graph_cost(g).time_ms == pytest.approx(m.overhead_ms() + op_ms) and m.overhead_ms() > 0


def test_measured_delta_equals_difference(tmp_path: Path) -> None:
    m = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, **FAST)
    g = small()
    e = g.edit()
    nid = next(iter(g.ops_of("sigmoid")))
    e.replace(Ref(nid, 0), e.op("tanh", *g.nodes[nid].inputs))
    child = e.commit()
    d = m.delta(g, child)
    assert d.time_ms == pytest.approx((m.graph_cost(child) - m.graph_cost(g)).time_ms, abs=1e-9)


# ----------------------------------------------------------------------------- concurrency

CTX = Context("test-ort", 1, "test-cpu", "disable")


def _writer(path: str, worker: int, n: int) -> None:
    cache = OpTimeCache(path)
    for i in range(n):
        # every worker writes the same keys with its own value: first writer wins
        cache.put(CTX, f"{i:016x}", "x", f"op{i}", Timing(float(worker), 0.0, 1))
    cache.close()


def test_concurrent_writers_do_not_corrupt(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    OpTimeCache(path).count()  # create the schema first, as a real first user would
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, 300)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    cache = OpTimeCache(path)
    assert cache.integrity() == "ok"
    assert cache.count() == 300
    got = cache.get_many(CTX, [(f"{i:016x}", "x") for i in range(300)])
    assert len(got) == 300 and {t.median_ms for t in got.values()} <= {0.0, 1.0, 2.0}


_PROFILE = textwrap.dedent("""
    import sys
    from graphsub.cost.measured import MeasuredCostModel
    from graphsub.ir import Builder
    b = Builder("p")
    x = b.input("x", (1, 16))
    y = x
    for i in range(6):
        y = b.matmul(y, b.weight(f"w{i}", (16, 16)), act="relu") if i % 2 else b.sigmoid(b.relu(y))
    m = MeasuredCostModel(cache=sys.argv[1], threads=1, budget_ms=2, warmup=1, min_repeats=3, progress=False)
    s = m.profile(b.build(y))
    print(s.signatures, s.hits, s.misses)
""")


def test_concurrent_profiling_processes_share_the_cache(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", _PROFILE, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    for out, _ in outs:
        sigs, hits, misses = map(int, out.split())
        assert sigs == 3 and hits + misses == 3
    cache = OpTimeCache(path)
    assert cache.integrity() == "ok"
    assert cache.count() == 3 + 1  # each op once (first writer wins), plus the call overhead
    assert np.isfinite(MeasuredCostModel(cache=path, threads=1, progress=False).overhead_ms())


def test_clock_choice_is_part_of_the_key(tmp_path: Path) -> None:
    from graphsub.cost.base import CostModelError
    from graphsub.cost.measured import resolve_clock

    assert resolve_clock("auto", 1) == "cpu" and resolve_clock("auto", 2) == "wall"
    with pytest.raises(CostModelError, match="threads=1"):
        resolve_clock("cpu", 2)
    a = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, **FAST)
    b = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, clock="wall", **FAST)
    assert a.ctx.method.endswith("-cpu") and b.ctx.method.endswith("-wall") and a.ctx != b.ctx


def test_cold_weight_floor_applies_when_weights_exceed_the_cache(tmp_path: Path) -> None:
    b = Builder()
    x = b.input("x", (1, 256))
    y = b.matmul(b.relu(x), b.weight("w", (256, 1024)))  # 1 MiB of weights
    g = b.build(y)
    warm = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, cold_weights=False, **FAST)
    cold = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, llc_bytes=512 * 1024, **FAST)
    cold._bandwidth = 1.0  # GB/s: streaming 1 MiB takes ~1.05 ms, far above the warm time
    big = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, llc_bytes=64 << 20, **FAST)
    big._bandwidth = 1.0
    mm = next(iter(g.ops_of("matmul")))
    assert cold.is_cold(g) and not big.is_cold(g)
    assert cold.node_costs(g)[mm].time_ms == pytest.approx(256 * 1024 * 4 / 1e9 * 1e3)
    assert big.node_costs(g)[mm].time_ms == warm.node_costs(g)[mm].time_ms < 1.0
    # an edit that crosses the cache size changes every weight-streaming node: delta stays exact
    e = g.edit()
    w2 = e.weight("w2", shape=(256, 256))
    e.replace(Ref(mm, 0), e.op("matmul", e.op("matmul", g.nodes[mm].inputs[0], w2), g.nodes[mm].inputs[1]))
    child = e.commit()
    edge = MeasuredCostModel(cache=tmp_path / "c.sqlite", threads=1, llc_bytes=1 << 20, **FAST)
    edge._bandwidth = 1.0
    assert not edge.is_cold(g) and edge.is_cold(child)
    d = edge.delta(g, child)
    assert d.time_ms == pytest.approx((edge.graph_cost(child) - edge.graph_cost(g)).time_ms)


def _open_cache(path: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        OpTimeCache(path).get_many(Context("ort", 1, "cpu", "all", "median"), [])
        results.put("ok")
    except Exception as e:  # reported to the parent
        results.put(repr(e))


def test_processes_opening_a_new_cache_at_once_all_succeed(tmp_path: Path) -> None:
    """Switching a new database to WAL from several processes at once: SQLite answers 'database is locked'
    without waiting on the busy timeout; the cache retries (measured before the fix: 18 of 180 opens failed)."""
    ctx = mp.get_context("fork")
    outcomes = []
    for i in range(10):
        barrier, results = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_open_cache, args=(str(tmp_path / f"c{i}.sqlite"), barrier, results))
                 for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        outcomes += [results.get(timeout=10) for _ in procs]
    assert outcomes == ["ok"] * 30
