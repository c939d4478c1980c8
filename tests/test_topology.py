"""Graph topologies: loading/validation, generators, ECMP pricing vs the tier formulas."""

import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from nest.errors import SpecError
from nest.inputs import graph_files
from nest.network import generators, routing
from nest.network import graph as graph_net
from nest.network import tiers as N
from nest.presets.clusters import CLUSTERS

DATA = Path(__file__).parent / "data" / "graphs"


def close(a, b):
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0) for x, y in zip(a, b))


def tier_groups(cluster):
    """Single-tier-aligned group tilings of every device: per tier t, groups of one device
    per tier-(t-1) group inside each tier-t group (all such groups at once)."""
    n = cluster.num_devices
    sizes = (1,) + cluster.group_sizes()
    d = np.arange(n)
    out = {}
    for t, tier in enumerate(cluster.tiers):
        if tier.fanout < 2:
            continue
        inner, outer = sizes[t], sizes[t + 1]
        g = d.reshape(n // outer, tier.fanout, inner).transpose(0, 2, 1).reshape(-1, tier.fanout)
        out[tier.name] = np.sort(g, axis=1)
    return out


@pytest.mark.parametrize("name", ["dgx-a100", "h100-spineleaf", "dgx-h100", "tpuv4-fattree"])
@pytest.mark.parametrize("devices", [64, 256])
def test_tree_graph_equals_tier_formulas(name, devices):
    cluster = CLUSTERS[name].sized(devices)
    graph = generators.from_hierarchy(cluster)
    groups = tier_groups(cluster)
    assert groups
    for tier, g in groups.items():
        shape = N.group_shape(cluster, g)
        assert sum(f > 1 for f in shape.factors) == 1  # single-tier groups only
        assert close(routing.ring_collective(graph, g), shape.reduce_scatter_terms()), tier
        assert close(routing.all_to_all(graph, g), shape.all_to_all_terms()), tier
        # p2p: every device sends to its ring successor inside its group, all at once
        pairs = np.stack([g.ravel(), np.roll(g, -1, axis=1).ravel()], axis=1)
        t = int(N.tier_of_pair(cluster, pairs[:, 0], pairs[:, 1]).max())
        alpha, beta = routing.point_to_point(graph, pairs)
        assert math.isclose(alpha + beta * 1e9, N.point_to_point(cluster, t, 1e9), rel_tol=1e-9)


def test_cache_returns_same_object():
    graph = generators.from_hierarchy(CLUSTERS["dgx-a100"].sized(64))
    g = np.arange(64).reshape(8, 8)
    assert routing.ring_collective(graph, g) is routing.ring_collective(graph, g.copy())


def test_contention_on_oversubscribed_uplink():
    # 2 leaves x 4 devices, one spine, uplink = 1 device link: 4 cross flows share it
    graph = generators.spine_leaf(2, 4, 1, bandwidth=100.0, uplink_bandwidth=100.0, latency=0.0)
    pairs = np.array([[i, 4 + i] for i in range(4)])
    assert routing.point_to_point(graph, pairs) == (0.0, 4 / 100.0)
    assert routing.point_to_point(graph, pairs[:1]) == (0.0, 1 / 100.0)


def test_ecmp_splits_over_spines():
    # non-blocking: 4 spines, each leaf uplink = bandwidth; 4 flows split over 4 spines
    graph = generators.spine_leaf(2, 4, 4, bandwidth=100.0, latency=1e-6)
    pairs = np.array([[i, 4 + i] for i in range(4)])
    alpha, beta = routing.point_to_point(graph, pairs)
    assert math.isclose(beta, 1 / 100.0) and math.isclose(alpha, 4e-6)


def test_fat_tree_full_bisection():
    graph = generators.fat_tree(4)
    n = len(routing.devices(graph))
    assert n == 16
    pairs = np.stack([np.arange(n), (np.arange(n) + n // 2) % n], axis=1)  # cross-pod permutation
    _, beta = routing.point_to_point(graph, pairs)
    assert math.isclose(beta, 1 / (50e9))
    over = generators.fat_tree(4, oversubscription=(1, 2))
    assert math.isclose(routing.point_to_point(over, pairs)[1], 2 / 50e9)


def test_generators_valid():
    for g, n in [(generators.fat_tree(4), 16), (generators.spine_leaf(3, 4, 2), 12), (generators.rail_optimized(4, 8), 32),
                 (generators.torus((4, 4)), 16), (generators.torus((2, 3, 4)), 24), (generators.dragonfly(5, 4, 2), 40)]:
        routing.validate(g)
        assert len(routing.devices(g)) == n


def test_rail_optimized_routes():
    g = generators.rail_optimized(4, 8, nvlink_bandwidth=400.0, nic_bandwidth=50.0, nvlink_latency=0, nic_latency=0)
    same_rail = np.array([[0, 8], [8, 16], [16, 24], [24, 0]])
    assert routing.point_to_point(g, same_rail)[1] == pytest.approx(1 / 50.0)
    in_node = np.array([[0, 1]])
    assert routing.point_to_point(g, in_node)[1] == pytest.approx(1 / 400.0)


def test_torus_ring():
    g = generators.torus((4, 4), bandwidth=10.0, latency=1.0)
    rows = np.arange(16).reshape(4, 4)  # each row is a ring along the wrap-around axis
    alpha, beta = routing.ring_collective(g, rows)
    assert alpha == pytest.approx(3.0) and beta == pytest.approx(3 / 4 / 10.0)


@pytest.mark.parametrize("fname", ["small.yaml", "small.json", "small.graphml"])
def test_load_formats(fname):
    g = graph_files.load_graph(DATA / fname)
    assert len(routing.devices(g)) == 4
    alpha, beta = routing.point_to_point(g, [[0, 2], [1, 3]])
    assert math.isclose(beta, 2 / 50e9) and math.isclose(alpha, 6e-6)


def _small():
    g = nx.Graph()
    g.add_node("a", kind="device")
    g.add_node("b", kind="device")
    g.add_node("s", kind="switch")
    g.add_edge("a", "s", bandwidth=1.0)
    g.add_edge("b", "s", bandwidth=1.0)
    return g


@pytest.mark.parametrize("mutate, message", [
    (lambda g: g.add_node("c", kind="device"), "not connected"),
    (lambda g: g.edges["a", "s"].update(bandwidth=0.0), "bandwidth = 0.0"),
    (lambda g: g.edges["a", "s"].update(bandwidth=-1.0), "bandwidth = -1.0"),
    (lambda g: g.edges["a", "s"].update(bandwidth=float("nan")), "bandwidth = nan"),
    (lambda g: g.edges["a", "s"].update(colour="red"), "colour = 'red': unknown key"),
    (lambda g: g.edges["a", "s"].update(latency=-1), "latency = -1"),
    (lambda g: g.edges["a", "s"].update(cost=0), "cost = 0"),
    (lambda g: [g.nodes[n].update(kind="switch") for n in "ab"], "no node has kind=device"),
])
def test_validation_errors(mutate, message):
    g = _small()
    mutate(g)
    with pytest.raises(SpecError, match=message.replace("(", r"\(")) as err:
        routing.validate(g)
    assert "\n" not in str(err.value)


def test_directed_unreachable():
    g = nx.DiGraph()
    g.add_node("a", kind="device")
    g.add_node("b", kind="device")
    g.add_node("s", kind="switch")
    g.add_edge("a", "s", bandwidth=1.0)
    g.add_edge("s", "b", bandwidth=1.0)
    g.add_edge("b", "s", bandwidth=1.0)
    with pytest.raises(SpecError, match="unreachable"):
        routing.validate(g)


def test_yaml_errors(tmp_path):
    bad = tmp_path / "dup.yaml"
    bad.write_text("nodes:\n  - {id: a, kind: device}\n  - {id: a, kind: device}\nlinks: []\n")
    with pytest.raises(SpecError, match="'a': duplicate id"):
        graph_files.load_graph(bad)
    bad.write_text("nodes:\n  - {id: a, kind: device}\n  - {id: s}\n"
                   "links:\n  - {a: a, b: s, bandwidth_GBps: 1, speed: 3}\n")
    with pytest.raises(SpecError, match="speed = 3: unknown key"):
        graph_files.load_graph(bad)
    bad.write_text("nodes:\n  - {id: a, kind: device}\n  - {id: s}\n"
                   "links:\n  - {a: a, b: s, bandwidth_GBps: 1, reverse_bandwidth_GBps: 0}\n")
    with pytest.raises(SpecError, match="bandwidth_GBps = 0"):
        graph_files.load_graph(bad)


def _contiguous(order, groups):
    pos = {d: i for i, d in enumerate(order)}
    for members in groups:
        p = sorted(pos[m] for m in members)
        if p[-1] - p[0] != len(p) - 1:
            return False
    return True


@pytest.mark.parametrize("make", [lambda: generators.spine_leaf(8, 4, 2), lambda: generators.fat_tree(4),
                                  lambda: generators.dragonfly(4, 3, 2)])
def test_locality_order_keeps_leaves_contiguous(make):
    g = make()
    order = graph_net.locality_order(g)
    assert sorted(order, key=str) == sorted(routing.devices(g), key=str)
    leaves = [[d for d in g.neighbors(s) if g.nodes[d].get("kind") == "device"]
              for s in g.nodes if g.nodes[s].get("kind") != "device"]
    assert _contiguous(order, [m for m in leaves if m])
    assert order == graph_net.locality_order(g)  # deterministic


def test_point_to_point_sets_price_each_label_alone():
    graph = generators.spine_leaf(2, 4, 1, bandwidth=100.0, uplink_bandwidth=100.0, latency=1.0)
    pairs = np.array([[0, 4], [1, 5], [2, 3], [4, 0]])
    labels = np.array([0, 0, 1, 2])
    alpha, beta = routing.point_to_point_sets(graph, pairs, labels, 4)
    for j in range(3):
        assert (alpha[j], beta[j]) == routing.point_to_point(graph, pairs[labels == j])
    assert beta[0] == 2 / 100.0  # the two cross-leaf flows of label 0 share the uplink
    assert alpha[3] == beta[3] == 0.0  # no pairs, no cost
