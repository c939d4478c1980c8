"""A graph cluster's network cannot change under its cached prices: the ClusterSpec holds
a read-only copy of its graph, the caller's graph stays theirs (never modified or frozen),
and a cluster built from a changed graph is priced on the change, as one built from
scratch."""

import math
import pickle
from dataclasses import replace

import networkx as nx
import pytest

import nest
from nest.frozen_graph import is_read_only_graph, read_only_graph
from nest.network import generators, routing
from nest.network.graph import graph_cluster
from nest.specs import JobSpec

H100 = nest.load_device("h100-sxm")
JOB = JobSpec(16, 1024)
CONFIG = dict(tp=1, pp=1, dp=8, micro_batch=1, zero=1)


def _graph(bandwidth=50e9):
    return generators.spine_leaf(2, 4, spines=2, bandwidth=bandwidth, latency=1e-6)


def _step(cluster) -> float:
    return nest.evaluate("gpt-1.7b", cluster, JOB, **CONFIG).step_time_s


def _slow_links(graph, factor=10.0):
    for _, _, attrs in graph.edges(data=True):
        attrs["bandwidth"] /= factor


@pytest.mark.parametrize("directed", [False, True])
def test_cluster_graph_refuses_changes(directed):
    graph = _graph().to_directed() if directed else _graph()
    cluster = graph_cluster(graph, H100, name="sl")
    g = cluster.graph
    u, v = next(iter(g.edges()))
    node = next(iter(g.nodes()))
    structure = [
        lambda: g.add_edge(u, "new"), lambda: g.add_node("new"), lambda: g.remove_edge(u, v),
        lambda: g.remove_node(node), lambda: g.clear(), lambda: g.update(edges=[(u, "new")]),
        lambda: nx.relabel_nodes(g, {node: "renamed"}, copy=False),
    ]
    for change in structure:  # networkx's frozen-graph error, saying what to do instead
        with pytest.raises(nx.NetworkXError, match="Frozen graph can't be modified.*ClusterSpec.*copy"):
            change()
    attributes = [
        lambda: g.edges[u, v].__setitem__("bandwidth", 1.0), lambda: g[u][v].update(bandwidth=1.0),
        lambda: g[u][v].pop("bandwidth"), lambda: g.adj[u][v].clear(),
        lambda: g.nodes[node].__setitem__("kind", "switch"), lambda: g.graph.__setitem__("name", "other"),
        lambda: nx.set_edge_attributes(g, 1.0, "bandwidth"), lambda: nx.set_node_attributes(g, 0, "index"),
    ]
    for change in attributes:  # read-only mappings
        with pytest.raises(TypeError, match="Frozen graph can't be modified.*ClusterSpec"):
            change()
    assert nx.is_frozen(g) and nx.utils.graphs_equal(g, graph)
    assert g.is_directed() == directed
    # a copy is the caller's to edit
    editable = g.copy()
    editable.add_edge(u, "new", bandwidth=1e9)
    editable[u][v]["bandwidth"] = 1.0


def test_callers_graph_is_not_frozen_or_modified():
    graph = _graph()
    before = nx.node_link_data(graph, edges="links")
    cluster = graph_cluster(graph, H100, name="sl")
    _step(cluster)
    assert cluster.graph is not graph
    assert not nx.is_frozen(graph) and not is_read_only_graph(graph)
    assert nx.node_link_data(graph, edges="links") == before
    assert all(type(d) is dict for _, _, d in graph.edges(data=True))
    graph.add_edge("leaf0", "leaf1", bandwidth=1e9)  # still the caller's to change
    graph["leaf0"]["leaf1"]["bandwidth"] = 2e9
    assert not cluster.graph.has_edge("leaf0", "leaf1")


def test_cluster_from_changed_graph_prices_the_change():
    """Plan, change the original graph (a link attribute, a removed link, a new node),
    build again: the prices are those of a cluster built from scratch, not cached ones."""
    graph = _graph()
    first = _step(graph_cluster(graph, H100, name="sl"))
    _slow_links(graph)
    slow = graph_cluster(graph, H100, name="sl")
    fresh = graph_cluster(_graph(bandwidth=5e9), H100, name="sl")
    assert slow.tiers == fresh.tiers
    assert math.isclose(_step(slow), _step(fresh), rel_tol=1e-12) and _step(slow) > first

    graph.remove_edge("leaf0", "spine1")  # leaf0's traffic now crosses spine0 only
    graph.add_node("spare", kind="switch")
    graph.add_edge("spare", "leaf1", bandwidth=5e9)
    cut = graph_cluster(graph, H100, name="sl")
    scratch = graph_cluster(nx.Graph(graph), H100, name="sl")
    assert math.isclose(_step(cut), _step(scratch), rel_tol=1e-12) and _step(cut) > _step(slow)


def test_raw_graph_prices_follow_changes():
    """The routing functions on a graph the caller may change price its current links."""
    graph = _graph()
    pairs = [[0, 4], [1, 5]]
    alpha, beta = routing.point_to_point(graph, pairs)
    assert routing.point_to_point(graph, pairs) == (alpha, beta)
    _slow_links(graph)
    assert routing.point_to_point(graph, pairs) == routing.point_to_point(_graph(bandwidth=5e9), pairs)
    assert math.isclose(routing.point_to_point(graph, pairs)[1], 10 * beta, rel_tol=1e-12)


def test_read_only_graph_is_shared_not_copied():
    graph = _graph()
    cluster = graph_cluster(graph, H100, name="sl")
    assert read_only_graph(cluster.graph) is cluster.graph
    assert replace(cluster, name="other").graph is cluster.graph
    assert graph_cluster(cluster.graph, H100).graph is cluster.graph
    again = nest.ClusterSpec("x", H100, cluster.tiers, graph=graph, device_order=cluster.device_order)
    assert again.graph is cluster.graph  # the unchanged caller's graph: its current copy
    assert routing.compile_graph(graph) is routing.compile_graph(cluster.graph)


def test_equality_and_hash_leave_the_graph_out():
    cluster = graph_cluster(_graph(), H100, name="sl")
    other = graph_cluster(_graph(bandwidth=5e9), H100, name="sl")
    bare = replace(cluster, graph=None, device_order=())
    assert cluster == bare and hash(cluster) == hash(bare)
    assert "graph" not in repr(cluster)
    assert cluster.tiers != other.tiers and cluster != other  # the tiers describe the links


def test_pickled_cluster_plans_identically():
    cluster = graph_cluster(_graph(), H100, name="sl")
    step = _step(cluster)
    copy = pickle.loads(pickle.dumps(cluster))
    assert copy == cluster and copy.device_order == cluster.device_order
    assert is_read_only_graph(copy.graph) and nx.is_frozen(copy.graph)
    assert nx.utils.graphs_equal(copy.graph, cluster.graph)
    u, v = next(iter(copy.graph.edges()))
    assert copy.graph.adj[u][v] is copy.graph.adj[v][u]  # one dict per link, as networkx has it
    with pytest.raises(TypeError, match="Frozen graph"):
        copy.graph[u][v]["bandwidth"] = 1.0
    with pytest.raises(nx.NetworkXError, match="Frozen graph"):
        copy.graph.add_edge(u, "new")
    assert _step(copy) == step
    a = nest.plan("gpt-1.7b", cluster, JOB, explain_idle=False)
    b = nest.plan("gpt-1.7b", copy, JOB, explain_idle=False)
    assert a.step_time_s == b.step_time_s and a.parallelism == b.parallelism


def test_not_a_graph():
    with pytest.raises(nest.SpecError, match="must be a networkx graph"):
        nest.ClusterSpec("x", H100, (nest.Tier("t", 2, 1e9, 0.0),), graph={"nodes": []},
                         device_order=(0, 1))
    multi = nx.MultiGraph(_graph())
    with pytest.raises(nest.SpecError, match="multigraph"):
        graph_cluster(multi, H100)
