"""Graph analyses: weight-only status (one definition, O(change) from a parent), weight bytes,
peak-memory liveness, neighbourhoods."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from graphsub import zoo
from graphsub.errors import GraphError
from graphsub.ir import Builder, Graph
from graphsub.ir import analysis as an
from graphsub.ir.analysis import (
    expand,
    is_free,
    is_weight_only,
    neighbourhood,
    peak_memory,
    weight_bytes,
    weight_only_map,
    weight_only_update,
)
from graphsub.ir.node import Ref


@pytest.fixture
def status_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts evaluations of the weight-only definition (one per node status computed)."""
    calls: list[int] = []
    real = an._status

    def counting(graph: Graph, nid: int, wo: object) -> bool:
        calls.append(nid)
        return real(graph, nid, wo)  # type: ignore[arg-type]

    monkeypatch.setattr(an, "_status", counting)
    yield calls


def _sources_rule(g: Graph, nid: int) -> bool:
    """Independent definition: a value is weight-only iff every zero-input node it depends on
    is a weight or a constant generator (so no graph input)."""
    seen, stack = set(), [nid]
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        node = g.nodes[cur]
        if not node.inputs and not (node.op == "weight" or node.sig.opdef.weight_op):
            return False
        stack.extend(r.node for r in node.inputs)
    return True


def _fold_relu_to_weight(g: Graph) -> Graph:
    """Rewire the first relu's value to a new weight: its consumers may become weight-only."""
    e = g.edit()
    nid = sorted(g.ops_of("relu"))[0]
    t = g.nodes[nid].sig.out_types[0]
    e.replace(Ref(nid, 0), e.weight("folded", shape=t.shape, dtype=t.dtype))
    return e.commit()


def _relu_to_sigmoid(g: Graph) -> Graph:
    e = g.edit()
    nid = sorted(g.ops_of("relu"))[0]
    e.replace(Ref(nid, 0), e.op("sigmoid", *g.nodes[nid].inputs))
    return e.commit()


def _rebuilt(g: Graph) -> Graph:
    """The same structure as a freshly built graph (no edit provenance, nothing cached)."""
    return Graph.from_arena(dict(g.nodes), g.inputs, g.outputs, g.output_names)


# ----------------------------------------------------------------------------- weight-only status


@pytest.mark.parametrize("name", ["resnet", "squeezenet", "bert", "nasrnn"])
def test_weight_only_query_and_map_agree_with_an_independent_definition(name: str) -> None:
    g = zoo.get(name)
    queried = {n: is_weight_only(g, n) for n in g.nodes}  # the matcher's access pattern first
    wo = weight_only_map(zoo.get(name))  # the whole-graph map of a fresh copy
    assert queried == dict(wo) == {n: _sources_rule(g, n) for n in g.nodes}
    # not only trivial answers: the weights are weight-only in every model, and in nasrnn computed values too (its
    # weight-by-weight matmuls), so the agreement above is checked on both kinds
    assert any(queried[n] for n in g.nodes if g.nodes[n].is_leaf)
    assert any(queried[n] for n in g.nodes if not g.nodes[n].is_leaf) == (name == "nasrnn")


def test_leaf_queries_are_answered_from_the_node(status_calls: list[int]) -> None:
    g = zoo.get("resnet", blocks=4)
    w, x = g.weights()[0], g.inputs[0]
    assert is_weight_only(g, w) and not is_weight_only(g, Ref(x, 0))
    assert status_calls == [w, x]  # no whole-graph map was built for them


def test_child_map_is_derived_from_the_kept_parent_map_in_o_change(status_calls: list[int]) -> None:
    g = zoo.get("resnet", blocks=8)
    weight_only_map(g)
    child = _relu_to_sigmoid(g)  # the edit keeps g's map (not g)
    status_calls.clear()
    conv = sorted(child.ops_of("conv2d"))[-1]
    assert not is_weight_only(child, conv)  # no parent passed: the matcher's query
    assert 0 < len(status_calls) <= 6 < child.num_nodes  # sigmoid and its rewired consumers, not the graph
    assert weight_only_map(child) == weight_only_map(_rebuilt(child))


def test_child_map_from_an_explicit_parent_whose_map_was_unknown_at_commit() -> None:
    g = zoo.get("squeezenet")
    child = _fold_relu_to_weight(g)  # g has no map yet
    wo = weight_only_map(child, g)
    assert wo == weight_only_map(_rebuilt(child))
    assert weight_only_map(child) is wo  # cached on the child


def test_weight_only_update_reports_status_changes() -> None:
    g = zoo.get("squeezenet")
    child = _fold_relu_to_weight(g)
    wo, changed = weight_only_update(g, child)
    assert changed  # the consumer of the folded value became weight-only
    assert all(wo[n] and not weight_only_map(g)[n] for n in changed)
    assert wo == weight_only_map(_rebuilt(child))
    _, unchanged = weight_only_update(g, _relu_to_sigmoid(g))
    assert unchanged == set()
    with pytest.raises(GraphError, match="needs a graph made by"):
        weight_only_update(g, _rebuilt(child))


def test_leaves_and_weight_only_nodes_are_free() -> None:
    b = Builder()
    x = b.input("x", (1, 8, 6, 6))
    w = b.concat(b.weight("w1", (4, 8, 3, 3)), b.enlarge(b.weight("w2", (4, 8, 1, 1)), kernel=(3, 3)), axis=0)
    g = b.build(b.conv2d(x, w, pads=(1, 1, 1, 1)))
    assert [g.nodes[n].op for n in g.topo_order() if not is_free(g, n)] == ["conv2d"]


# ----------------------------------------------------------------------------- weight bytes


def test_weight_bytes_from_a_parent_equals_a_full_count() -> None:
    g = zoo.get("squeezenet")
    child = _fold_relu_to_weight(g)  # adds one weight; the dead conv before the relu loses its weights
    folded = child.nodes[child.leaf("folded")].sig.out_types[0].nbytes
    info = child.edit_info()
    assert info is not None
    lost = sum(g.nodes[n].sig.out_types[0].nbytes for n in info[1] if g.nodes[n].op == "weight")
    assert folded > 0 and lost > 0
    assert weight_bytes(child, g) == weight_bytes(g) + folded - lost == weight_bytes(_rebuilt(child))
    assert weight_bytes(g) == sum(g.nodes[n].sig.out_types[0].nbytes for n in g.weights())


# ----------------------------------------------------------------------------- peak memory


def test_peak_memory_liveness_by_hand() -> None:
    b = Builder("chain")
    x = b.input("x", (256,))
    chain = b.build(b.relu(b.relu(b.relu(x))))
    # x (1 KiB) -> relu -> relu -> relu: at most input + one output alive = 2 KiB
    assert peak_memory(chain).activation_peak_bytes == 2048
    b = Builder()
    x = b.input("x", (256,))
    w = b.weight("w", (256,))
    y = b.add(b.relu(x), b.sigmoid(x))  # x, relu(x), sigmoid(x) alive at once, then y
    prof = peak_memory(b.build(b.mul(y, b.relu(w))))  # relu(w) is weight-only: a folded constant
    assert prof.activation_peak_bytes == 3 * 1024
    assert prof.const_bytes == 1024
    assert prof.peak_bytes == 4 * 1024


# ----------------------------------------------------------------------------- neighbourhoods


def _distances(graphs: tuple[Graph, ...], seeds: set[int]) -> dict[int, int]:
    """Undirected BFS distances over the union of the graphs' edges (reference implementation)."""
    adj: dict[int, set[int]] = {}
    for g in graphs:
        for nid, node in g.nodes.items():
            for r in node.inputs:
                adj.setdefault(nid, set()).add(r.node)
                adj.setdefault(r.node, set()).add(nid)
    dist = dict.fromkeys(seeds, 0)
    frontier = list(seeds)
    while frontier:
        nxt = []
        for n in frontier:
            for m in sorted(adj.get(n, ())):
                if m not in dist:
                    dist[m] = dist[n] + 1
                    nxt.append(m)
        frontier = nxt
    return dist


@pytest.mark.parametrize("radius", [0, 1, 2, 3])
def test_neighbourhood_is_the_ball_of_radius_r(radius: int) -> None:
    g = zoo.get("inception_e", blocks=1)
    seeds = sorted(g.ops_of("concat"))[:1] + sorted(g.ops_of("conv2d"))[-1:]
    dist = _distances((g,), set(seeds))
    assert neighbourhood(g, [*seeds, 10**9], radius) == {n for n, d in dist.items() if d <= radius}


def test_expand_uses_the_edges_of_both_graphs() -> None:
    b = Builder()
    x = b.input("x", (4,))
    a = b.exp(x)
    g = b.build(b.relu(b.neg(a)))  # x -> exp -> neg -> relu
    neg = next(iter(g.ops_of("neg")))
    e = g.edit()
    e.replace(Ref(neg, 0), e.op("tanh", a.ref))  # x -> exp -> tanh -> relu
    child = e.commit()
    tanh = next(iter(child.ops_of("tanh")))
    assert neighbourhood(g, [tanh], 2) == set()  # the seed is not in the parent
    region = expand(g, child, [tanh], 2)
    dist = _distances((g, child), {tanh})
    assert region == {n for n, d in dist.items() if d <= 2}
    assert neg in region  # two hops: tanh -> exp (child) -> neg (parent)
    assert expand(g, child, [neg], 0) == {neg}
