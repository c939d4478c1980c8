"""What generators know (nest.network.structure) equals what the general algorithms
compute: locality orders and levels, and prices routed through a symmetry (one canonical
source) against the same graph without it (a copy of the generated graph carries no
structure, so it takes the general path: clustering, a Dijkstra search per source)."""

import itertools
import math

import numpy as np
import pytest

import nest
from nest.network import generators, routing
from nest.network import graph as graph_net
from nest.network.compiled import compile_graph
from nest.network.paths import routes_of
from nest.network.symmetry import router_symmetry
from nest.presets.clusters import CLUSTERS, GRAPH_CLUSTERS
from nest.specs import ClusterSpec, Tier
from nest.units import GB

H100 = nest.load_device("h100-sxm")


def _general(graph):
    """The same graph without what its generator attached."""
    copy = graph.copy()
    assert compile_graph(copy).structure is None
    return copy


ORDERED = [
    ("fat_tree", lambda: generators.fat_tree(2)),
    ("fat_tree", lambda: generators.fat_tree(4, pods=1)),
    ("fat_tree", lambda: generators.fat_tree(4, pods=3)),
    ("fat_tree", lambda: generators.fat_tree(6, oversubscription=(3, 1.5))),
    ("fat_tree", lambda: generators.fat_tree(8, pods=5, latency=0.0)),
    ("spine_leaf", lambda: generators.spine_leaf(1, 4, 2)),
    ("spine_leaf", lambda: generators.spine_leaf(4, 1, 2)),
    ("spine_leaf", lambda: generators.spine_leaf(7, 5, 3, uplink_bandwidth=1e9)),
    ("rail", lambda: generators.rail_optimized(1, 8, 4)),
    ("rail", lambda: generators.rail_optimized(2, 1, 1)),
    ("rail", lambda: generators.rail_optimized(7, 3, 2)),
    ("rail", lambda: generators.rail_optimized(16, 8, 4)),
    *[("hierarchy", (lambda n=n, t=t: generators.from_hierarchy(CLUSTERS[t].sized(n))))
      for t in CLUSTERS for n in (1, 8, 24, 144, 256, 512)
      if n == 1 or n % CLUSTERS[t].tiers[0].fanout == 0 or n < CLUSTERS[t].tiers[0].fanout],
]


@pytest.mark.parametrize("kind,make", ORDERED)
def test_known_order_and_levels_are_the_clusterings(kind, make):
    graph = make()
    known = compile_graph(graph).structure
    assert known is not None and known.knows_order, kind
    plain = _general(graph)
    assert graph_net.locality_order(graph) == graph_net.locality_order(plain)
    assert graph_net.level_sizes(graph) == graph_net.level_sizes(plain)
    order = routing.devices(graph)[::-1]  # an explicit order: the levels it keeps
    assert graph_net.level_sizes(graph, order) == graph_net.level_sizes(plain, order)


def _tiers(spec):
    return ClusterSpec("c", H100, tuple(Tier(f"t{i}", f, bw * GB, lat, o) for i, (f, bw, lat, o) in enumerate(spec)))


@pytest.mark.parametrize("spec", [
    [(4, 300, 1e-6, 1), (3, 50, 2e-6, 1), (2, 50, 3e-6, 2)],  # nested
    [(2, 100, 1e-6, 1), (1, 50, 1e-6, 1), (3, 25, 2e-6, 1)],  # a tier of one group
    [(4, 25, 5e-6, 1), (4, 300, 1e-6, 1)],  # the outer plane faster: node pairs use it, still nested
    [(8, 900, 1e-4, 1), (4, 12.5, 2e-4, 1), (3, 50, 3e-4, 1)],  # h100-spineleaf's shape
    [(2, 50, 1e-6, 1), (2, 50, 1e-6, 1), (2, 900, 1e-6, 1)],  # tiers 0 and 1 tie through plane 2
    [(4, 50, 1e-6, 1), (3, 25, 1e-6, 1), (2, 900, 1e-7, 1)],
])
def test_hierarchy_order_known_only_when_tiers_nest(spec):
    """from_hierarchy attaches the index order only when the one-MiB times grow strictly
    with the tier (they cannot shrink: a tier's pairs share every plane above it; they
    tie when an outer plane is the fastest way for two tiers); either way the order and
    levels are the general algorithm's."""
    graph = generators.from_hierarchy(_tiers(spec))
    assert compile_graph(graph).structure.knows_order == (spec[-1][1] < 900)
    plain = _general(graph)
    assert graph_net.locality_order(graph) == graph_net.locality_order(plain)
    assert graph_net.level_sizes(graph) == graph_net.level_sizes(plain)
    assert router_symmetry(compile_graph(graph)) is not None


def test_rail_order_not_claimed_when_nic_beats_nvlink():
    graph = generators.rail_optimized(4, 4, 2, nvlink_bandwidth=10e9, nic_bandwidth=50e9)
    assert not compile_graph(graph).structure.knows_order
    plain = _general(graph)
    assert graph_net.locality_order(graph) == graph_net.locality_order(plain)
    assert graph_net.level_sizes(graph) == graph_net.level_sizes(plain)


def test_changed_graph_drops_the_structure():
    graph = generators.rail_optimized(4, 4, 2)
    assert compile_graph(graph).structure is not None
    graph.remove_edge("d0", "rail0")
    comp = compile_graph(graph)
    assert comp.structure is None and router_symmetry(comp) is None
    assert graph_net.locality_order(graph) == graph_net.locality_order(graph.copy())


SYMMETRIC = [
    lambda: generators.torus((4, 4, 4)),
    lambda: generators.torus((2, 6)),
    lambda: generators.torus((3, 5, 4), bandwidth=7e9),
    lambda: generators.torus((1, 4, 2)),
    lambda: generators.rail_optimized(5, 3, 2),
    lambda: generators.rail_optimized(6, 8, 4),
    lambda: generators.rail_optimized(3, 2, 1, nvlink_bandwidth=10e9),
    lambda: generators.from_hierarchy(CLUSTERS["dgx-a100"].sized(512)),
    lambda: generators.from_hierarchy(CLUSTERS["tpuv4-fattree"].sized(128)),
    lambda: generators.from_hierarchy(CLUSTERS["gb200-nvl72"].sized(144)),
    lambda: generators.from_hierarchy(_tiers([(2, 100, 1e-6, 1), (1, 50, 1e-6, 1), (3, 25, 2e-6, 2)])),
]


def _close(a, b):
    return all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-300) for x, y in zip(np.ravel(a), np.ravel(b)))


@pytest.mark.parametrize("make", SYMMETRIC)
def test_symmetric_routing_prices_like_the_general_one(make):
    """Rings, all-to-alls and labelled point-to-point sets over random groups cost the
    same routed from canonical sources (translations or relabelings) as routed from
    every source; so do the one-MiB distances the clustering reads."""
    graph = make()
    comp = compile_graph(graph)
    assert router_symmetry(comp) is not None and type(routes_of(comp)).__name__ != "Routes"
    plain = _general(graph)
    n = len(routing.devices(graph))
    rng = np.random.default_rng(n)
    for k in (2, 3, 4, 8):
        if n % k == 0 and n > k:
            groups = rng.permutation(n).reshape(-1, k)
            assert _close(routing.ring_collective(graph, groups), routing.ring_collective(plain, groups))
            assert _close(routing.all_to_all(graph, groups[:3]), routing.all_to_all(plain, groups[:3]))
    pairs = rng.integers(0, n, size=(3 * n, 2))
    labels = rng.integers(0, 5, size=3 * n)
    assert _close(routing.point_to_point_sets(graph, pairs, labels, 5),
                  routing.point_to_point_sets(plain, pairs, labels, 5))
    hosts, dist = graph_net._host_distances(comp)
    plain_hosts, plain_dist = graph_net._host_distances(compile_graph(plain))
    assert np.array_equal(hosts, plain_hosts) and np.array_equal(dist, plain_dist)


@pytest.mark.parametrize("make", SYMMETRIC[:8])
def test_every_symmetry_element_is_an_automorphism(make):
    """Brute force: every single-axis translation or transposition a generator's symmetry
    allows maps every link to a link with the same capacity, latency, cost and twin
    multiplicities (the checks on construction try one generator per axis)."""
    comp = compile_graph(make())
    sym = router_symmetry(comp)
    links = np.arange(len(comp.eu))
    attrs = np.stack((comp.link_cap, comp.elat, comp.ecost, comp.mul_tail, comp.mul_head), axis=1)
    for axis, size in enumerate(sym.sizes.tolist()):
        for value in range(1, size):
            g = np.zeros((len(links), len(sym.sizes)), dtype=np.int64)
            g[:, axis] = value
            image = sym.map_links(g, links)
            assert (image >= 0).all() and len(np.unique(image)) == len(links)
            assert np.array_equal(attrs[image], attrs)


@pytest.mark.parametrize("make", SYMMETRIC[:4])
def test_translation_tables_are_the_symmetrys_moves(make):
    """TranslationGrid.translations (what the compiled engine's translated routes read):
    for every pair of routers, ``wrap[pos[t] - pos[s] + base]`` is
    ``RouterSymmetry.invert(g_s, t)`` and ``pos[s] * ports`` is ``shift(g_s)``."""
    from nest.network.symmetry import TranslationGrid

    comp = compile_graph(make())
    sym = router_symmetry(comp)
    assert TranslationGrid.fits(sym)
    grid = TranslationGrid(sym)
    pos, wrap, base = grid.translations(sym)
    routers = np.flatnonzero(comp.mult > 0)
    s, t = (a.ravel() for a in np.meshgrid(routers, routers, indexing="ij"))
    element = sym.element(s)
    assert np.array_equal(wrap[pos[t] - pos[s] + base], sym.invert(element, t))
    assert np.array_equal(pos[s] * grid.ports, grid.shift(element))


@pytest.mark.parametrize("name,devices", [("tpuv4-torus", 64), ("dgx-h100-rail", 64), ("dgx-a100-graph", 256),
                                          ("gb200-nvl72-graph", 144), ("h100-fattree", 64),
                                          ("h100-leafspine", 96), ("tpuv4-fattree-graph", 128)])
def test_graph_presets_plan_like_their_plain_graphs(name, devices):
    """Whole network: the preset (with its generator's structure) and a plain copy of its
    graph give the same device order, levels and group prices of every layout family."""
    cluster = GRAPH_CLUSTERS[name].sized(devices)
    plain = graph_net.graph_cluster(_general(cluster.graph), cluster.device, name=name)
    assert plain.device_order == cluster.device_order and plain.tiers == cluster.tiers
    a, b = graph_net.network(cluster.graph), graph_net.network(plain.graph)
    ranks = np.arange(devices)
    for k in (2, 4, 8, 16):
        for groups in (ranks.reshape(-1, k), ranks.reshape(k, -1).T.copy()):
            assert _close(a.ring(groups).flat, b.ring(groups).flat)
            assert (a.ring(groups).hierarchical is None) == (b.ring(groups).hierarchical is None)
            if a.ring(groups).hierarchical is not None:
                assert _close(a.ring(groups).hierarchical, b.ring(groups).hierarchical)
            assert _close(a.all_to_all(groups), b.all_to_all(groups))
            assert _close(a.neighbours(groups), b.neighbours(groups))
    src, dst = ranks, np.roll(ranks, devices // 4)
    label = ranks * 4 // devices
    assert _close(a.boundaries(src, dst, label, 4), b.boundaries(src, dst, label, 4))


@pytest.mark.slow
@pytest.mark.parametrize("name,devices", [("dgx-h100-rail", 512), ("dgx-h100-graph", 1024), ("tpuv4-torus", 512),
                                          ("h100-spineleaf-graph", 1024), ("gb200-nvl72-graph", 576)])
def test_moderate_presets_plan_like_their_plain_graphs(name, devices):
    test_graph_presets_plan_like_their_plain_graphs(name, devices)


def test_twin_representatives_are_what_symmetries_map_to():
    """Merged twins (the spines of a rail-optimized cluster) are named by their
    representative: every router a symmetry reaches routes."""
    comp = compile_graph(generators.rail_optimized(3, 2, 3))
    sym = router_symmetry(comp)
    assert (comp.mult == 0).sum() == 2
    routers = np.flatnonzero(comp.mult > 0)
    for value in range(3):
        g = np.zeros((len(routers), 2), dtype=np.int64)
        g[:, 0] = value
        assert (comp.mult[sym.apply(g, routers)] > 0).all()


def test_levels_helper_matches_level_sizes_rules():
    assert generators._levels(1, 1, 2) == (2,)
    assert generators._levels(2, 4, 4) == (2, 4)
    assert generators._levels(1) == (1,)
    assert generators._levels(8, 8, 16) == (8, 16)


def test_all_pairs_of_a_small_torus_route_like_the_general_path():
    """Every device pair of a 3 x 4 torus, one flow at a time and all at once."""
    graph = generators.torus((3, 4))
    plain = _general(graph)
    pairs = np.array(list(itertools.permutations(range(12), 2)))
    for p in pairs[::7]:
        assert routing.point_to_point(graph, p[None]) == routing.point_to_point(plain, p[None])
    assert _close(routing.point_to_point(graph, pairs), routing.point_to_point(plain, pairs))
