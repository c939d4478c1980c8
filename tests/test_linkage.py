"""Complete linkage on byte codes (nest.network.linkage) is SciPy's, bit for bit, and the
tori that cluster on it get the order, levels and linkage SciPy's condensed matrix gives;
link loads summed a chunk of flows at a time (nest.network.paths._ratios) are the sums of
one bincount over every entry, bit for bit."""

import itertools

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import squareform

from nest.network import generators, paths, routing
from nest.network import graph as graph_net
from nest.network.compiled import compile_graph
from nest.network.linkage import MAX_CODES, nn_chain_complete


def _codes(rng, n, levels):
    codes = np.triu(rng.integers(0, levels, (n, n)), 1).astype(np.uint8)
    return codes + codes.T


@pytest.mark.parametrize("engine", ["cpp", "numpy"])
@pytest.mark.parametrize("seed", range(6))
def test_nn_chain_on_codes_is_scipys_linkage(seed, engine):
    """Random symmetric distances with few values (ties everywhere: which pair merges
    first, which cluster a chain prefers, are SciPy's tie rules), irregular values; the
    compiled chain and the numpy one alike."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(2, 70))
        levels = int(rng.integers(1, 7)) if seed % 2 else int(rng.integers(1, MAX_CODES))
        values = np.unique(rng.random(levels) * 10.0 ** rng.integers(-9, 3))
        codes = _codes(rng, n, len(values))
        dist = values[codes]
        np.fill_diagonal(dist, 0.0)
        expected = linkage(squareform(dist, checks=False), method="complete")
        assert np.array_equal(nn_chain_complete(codes.copy(), values, engine), expected)


def _scipy_dendrogram(make, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(graph_net, "_CODED_HOSTS", 1 << 60)  # never coded: SciPy's condensed path
        g = make()
        return graph_net.locality_order(g), graph_net.level_sizes(g), compile_graph(g).cache["dendrogram"]


@pytest.mark.parametrize("dims", [(4, 4, 4), (2, 6), (3, 5, 4), (4, 4, 8), (8, 8, 8), (1, 4, 2), (8, 8, 16)])
def test_torus_clusters_on_codes_like_scipy(dims, monkeypatch):
    """Tori of every size below the switch-over cluster on codes when told to: the same
    device order, levels and linkage matrix as SciPy's linkage of the condensed distances."""
    def make():
        return generators.torus(dims, bandwidth=7e9 if len(dims) == 2 else 50e9)
    assert graph_net._torus_codes(compile_graph(make())) is None  # below _CODED_HOSTS
    expected = _scipy_dendrogram(make, monkeypatch)
    monkeypatch.setattr(graph_net, "_CODED_HOSTS", 2)
    coded = make()
    assert graph_net._torus_codes(compile_graph(coded)) is not None
    order, levels = graph_net.locality_order(coded), graph_net.level_sizes(coded)
    hosts, z, leaves = compile_graph(coded).cache["dendrogram"]
    assert order == expected[0] and levels == expected[1]
    assert np.array_equal(hosts, expected[2][0]) and np.array_equal(leaves, expected[2][2])
    assert np.array_equal(z, expected[2][1])


def test_only_tori_cluster_on_codes(monkeypatch):
    """Graphs without translations (or with more than byte codes hold) take SciPy's path."""
    monkeypatch.setattr(graph_net, "_CODED_HOSTS", 2)
    assert graph_net._torus_codes(compile_graph(generators.dragonfly(4, 3, 2))) is None
    assert graph_net._torus_codes(compile_graph(generators.rail_optimized(3, 2, 1))) is None
    assert graph_net._torus_codes(compile_graph(generators.torus((4, 4)).copy())) is None


def _reference_ratios(links, weight, label, lens, nlabels, capacity):
    """What the loads were before chunks: one bincount over every entry, per label."""
    key = np.repeat(label, lens) * len(capacity) + links
    load = np.bincount(key, weights=weight, minlength=nlabels * len(capacity)).reshape(nlabels, -1)
    return (load / capacity).max(axis=1)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_chunked_label_loads_are_one_bincount(chunk, monkeypatch):
    """Fractions like a DAG's (thirds, sevenths: sums that depend on their order), many
    flows over few links and few over many, labels of many and of few entries, labels
    without flows."""
    monkeypatch.setattr(paths, "_CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    for nlabels, n_links in itertools.product((1, 2, 5, 40), (int(rng.integers(3, 60)), 70000)):
        flows = int(rng.integers(1, 400))
        lens = rng.integers(1, 9, flows)
        label = np.sort(rng.integers(0, nlabels, flows))
        links = np.concatenate([rng.choice(n_links, size=k, replace=False) for k in np.minimum(lens, n_links)])
        lens = np.minimum(lens, n_links)
        weight = rng.integers(1, 12, len(links)) / rng.choice([3.0, 7.0, 9.0, 11.0], len(links))
        capacity = rng.choice([1e9, 2.5e10, 4.5e11], n_links)
        ends = np.r_[0, np.cumsum(lens)]
        got = paths._ratios(label, lens, nlabels, capacity,
                            lambda a, z: (links[ends[a]:ends[z]], weight[ends[a]:ends[z]]))
        assert np.array_equal(got, _reference_ratios(links, weight, label, lens, nlabels, capacity))


@pytest.mark.parametrize("make", [lambda: generators.torus((4, 6, 3)), lambda: generators.rail_optimized(6, 4, 2),
                                  lambda: generators.dragonfly(5, 4, 2)])
def test_prices_do_not_depend_on_the_chunks(make, monkeypatch):
    """Rings, all-to-alls and labelled point-to-point sets priced a flow at a time equal
    the prices of one chunk, bit for bit (translated, relabeled and general routes)."""
    graph = make()
    n = len(routing.devices(graph))
    rng = np.random.default_rng(n)
    groups = rng.permutation(n).reshape(-1, 4)
    pairs = rng.integers(0, n, size=(3 * n, 2))
    labels = rng.integers(0, 6, size=3 * n)

    def prices(g):
        return (routing.ring_collective(g, groups), routing.all_to_all(g, groups[:5]),
                routing.point_to_point_sets(g, pairs, labels, 6))
    whole = prices(graph)
    monkeypatch.setattr(paths, "_CHUNK", 1)
    monkeypatch.setattr(paths, "_LABEL_ENTRIES", 0)
    flow_by_flow = prices(make())
    for a, b in zip(whole, flow_by_flow):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_label_seen_before_costs_what_it_cost(monkeypatch):
    """Labelled sets sharing labels (the same flows and amounts, under other label numbers
    and beside other labels) price like a fresh graph pricing them alone: a label's ratio
    kept by the digest of its flows is the one its loads give."""
    monkeypatch.setattr(paths, "_LABEL_ENTRIES", 0)  # every label its own pass (and kept)
    monkeypatch.setattr(paths, "_CHUNK", 64)
    n = 96
    rng = np.random.default_rng(5)
    pairs = rng.integers(0, n, size=(4 * n, 2))
    labels = np.repeat(np.arange(4), n)
    for make in (lambda: generators.torus((4, 6, 4)), lambda: generators.dragonfly(6, 4, 4)):
        graph = make()
        with_known = [routing.point_to_point_sets(graph, pairs, labels, 4),
                      routing.point_to_point_sets(graph, pairs[n:], labels[n:] - 1, 3),
                      routing.point_to_point_sets(graph, pairs[::-1], 3 - labels[::-1], 4)]
        fresh = [routing.point_to_point_sets(make(), pairs, labels, 4),
                 routing.point_to_point_sets(make(), pairs[n:], labels[n:] - 1, 3),
                 routing.point_to_point_sets(make(), pairs[::-1], 3 - labels[::-1], 4)]
        for a, b in zip(with_known, fresh):
            assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert len(routing.compile_graph(graph).routes.known) > 0


@pytest.mark.parametrize("seed", range(3))
def test_cut_sizes_are_fclusters(seed):
    """The level sizes' cuts (nest.network.graph._cut_sizes) weigh the flat clusters of
    SciPy's fcluster at every merge height: ties between heights, uneven leaf weights."""
    from scipy.cluster.hierarchy import fcluster

    rng = np.random.default_rng(seed)
    for trial in range(60):
        n = int(rng.integers(2, 60))
        dist = (_codes(rng, n, int(rng.integers(1, 5))) + 1).astype(np.float64)
        np.fill_diagonal(dist, 0.0)
        z = linkage(squareform(dist, checks=False), method="complete")
        weights = rng.integers(1, 3, n) if trial % 2 else np.full(n, 4)
        expected = []
        for height in np.unique(z[:, 2]):
            size = np.bincount(fcluster(z, t=height, criterion="distance"), weights=weights)[1:]
            size = size[size > 0]
            expected.append(size[0] if (size == size[0]).all() else None)
        assert graph_net._cut_sizes(z, weights) == expected
