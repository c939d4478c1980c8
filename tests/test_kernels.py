"""The compiled routing kernels (nest.network.kernels, cpp/routing.cpp) give exactly the
numpy engine's floats: the same DAGs (links, shares, latencies) and the same link-load
ratios, bit for bit, on translated, relabeled and general routes, twins, directed links,
weighted costs, labelled sets and repeated labels."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from nest.network import generators, kernels, paths
from nest.network.compiled import compile_graph


def _weighted(graph, seed, directed=False):
    """A copy of ``graph`` (no generator structure: general routes) with random integer
    costs, latencies and bandwidths, so that DAGs have several levels per hop and many
    equal-cost paths; ``directed``: each direction its own capacity."""
    rng = np.random.default_rng(seed)
    g = nx.DiGraph(graph) if directed else graph.copy()
    for _, _, data in g.edges(data=True):
        data["cost"] = int(rng.integers(1, 4))
        data["latency"] = float(rng.choice([1e-6, 2.5e-6, 3e-7]))
        data["bandwidth"] = float(rng.choice([25e9, 50e9, 450e9]))
    return g


GRAPHS = {
    "torus": lambda: generators.torus((4, 6, 3)),
    "torus-2d": lambda: generators.torus((5, 4)),
    "dragonfly": lambda: generators.dragonfly(6, 4, 2, global_links=2),
    "fat-tree": lambda: generators.fat_tree(4),  # twins: core switches
    "leaf-spine": lambda: generators.spine_leaf(4, 4, 3),
    "rail": lambda: generators.rail_optimized(4, 4, 2),  # relabeled routes
    "weighted-dragonfly": lambda: _weighted(generators.dragonfly(5, 4, 2), 1),
    "weighted-torus": lambda: _weighted(generators.torus((4, 5)), 2),
    "directed": lambda: _weighted(generators.dragonfly(4, 3, 2), 3, directed=True),
}


def _flows(comp, seed, count, nlabels):
    rng = np.random.default_rng(seed)
    hosts = np.unique(comp.router_of)
    s, t = rng.choice(hosts, count), rng.choice(hosts, count)
    keep = s != t
    label = np.sort(rng.integers(0, nlabels, count))[keep]
    amount = rng.integers(1, 13, count)[keep] / rng.choice([1.0, 3.0, 7.0], count)[keep]
    return s[keep], t[keep], amount, label


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_compiled_dags_are_numpys(name):
    comp = compile_graph(GRAPHS[name]())
    hosts = np.unique(comp.router_of)  # what flows run between (merged twins carry none)
    s, t = (a.ravel() for a in np.meshgrid(hosts, hosts, indexing="ij"))
    keep = s != t
    s, t = s[keep], t[keep]
    stores = {}
    for engine in kernels.ENGINES:
        routes = paths.Routes(comp, engine)
        routes.batch = 37  # several batches, some pairs' sources in more than one
        stores[engine] = routes.store
        routes._ids(routes.store, s, t)
    cpp, ref = stores["cpp"], stores["numpy"]
    assert cpp.size == ref.size == len(s)
    for a, b in ((cpp.ptr, ref.ptr), (cpp.edge, ref.edge), (cpp.frac, ref.frac), (cpp.lat, ref.lat)):
        assert np.array_equal(a.view, b.view)


@pytest.mark.parametrize("make", [lambda: generators.torus((8, 8, 6)),
                                  lambda: _weighted(generators.torus((7, 6, 5)), 4),
                                  lambda: generators.torus((16, 12))])
def test_compiled_large_dags_are_numpys(make):
    """DAGs of many links (the kernel sorts 64 and more by radix, not std::sort) equal the
    numpy engine's: tori (boxes of many equal-cost paths), every pair from one router and random ones."""
    comp = compile_graph(make())
    hosts = np.unique(comp.router_of)
    rng = np.random.default_rng(len(hosts))
    s, t = rng.choice(hosts, 400), rng.choice(hosts, 400)
    s = np.r_[s, np.full(len(hosts), hosts[0])]
    t = np.r_[t, hosts]
    keep = s != t
    s, t = s[keep], t[keep]
    stores = {}
    for engine in kernels.ENGINES:
        routes = paths.Routes(comp, engine)
        stores[engine] = routes.store
        routes._ids(routes.store, s, t)
    cpp, ref = stores["cpp"], stores["numpy"]
    assert np.diff(cpp.ptr.view).max() >= 64  # the kernel radix-sorts DAGs of 64 links and more
    for a, b in ((cpp.ptr, ref.ptr), (cpp.edge, ref.edge), (cpp.frac, ref.frac), (cpp.lat, ref.lat)):
        assert np.array_equal(a.view, b.view)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("nlabels", [1, 3, 17])
def test_compiled_loads_are_numpys(name, nlabels, monkeypatch):
    """Every symmetry's routes (and the chunked numpy sums with their kept labels)."""
    monkeypatch.setattr(paths, "_CHUNK", 50)  # labels kept by digest, chunks in numpy
    comp = compile_graph(GRAPHS[name]())
    s, t, amount, label = _flows(comp, nlabels, 600, nlabels)
    got = {}
    for engine in kernels.ENGINES:
        routes = paths.make_routes(comp, engine)
        first = routes.flows(s, t, amount, label, nlabels)
        # the labels in reverse order, each with its flows in order: read back by digest
        order = np.lexsort((np.arange(len(label)), -label))
        again = routes.flows(s[order], t[order], amount[order], nlabels - 1 - label[order], nlabels)
        got[engine] = (first, again)
    for (a, b) in zip(got["cpp"], got["numpy"]):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert np.array_equal(got["cpp"][0][0], got["cpp"][1][0][::-1])


def test_unit_amounts_and_one_label():
    """A ring's flows (every amount 1.0: numpy skips the multiplication, the kernel's x *
    1.0 is x) over many entries."""
    comp = compile_graph(generators.torus((6, 6, 4)))
    n = len(comp.routers)
    s = np.arange(n)
    t = (s * 7 + 5) % n
    keep = s != t
    s, t = s[keep], t[keep]
    ones, label = np.ones(len(s)), np.zeros(len(s), dtype=np.int64)
    out = [paths.make_routes(comp, e).flows(s, t, ones, label, 1) for e in kernels.ENGINES]
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


def test_kernels_reject_bad_input():
    comp = compile_graph(generators.dragonfly(3, 2, 1))
    routes = paths.Routes(comp, "cpp")
    s, t = np.array([0, 1]), np.array([1, 2])
    ids = routes._ids(routes.store, s, t)
    store = routes.store
    ok = dict(ptr=store.ptr.view, edge=store.edge.view, frac=store.frac.view, ids=ids, amount=np.ones(2),
              label=np.zeros(2, dtype=np.int64), nlabels=1, capacity=comp.ecap)
    assert kernels.label_ratios(**ok).shape == (1,)
    with pytest.raises(ValueError, match="pair id"):
        kernels.label_ratios(**{**ok, "ids": ids + 100})
    with pytest.raises(ValueError, match="label after label"):
        kernels.label_ratios(**{**ok, "label": np.array([1, 0]), "nlabels": 2})
    with pytest.raises(ValueError, match="label"):
        kernels.label_ratios(**{**ok, "label": np.array([0, 5])})
    with pytest.raises(ValueError, match="dtype int32"):
        kernels._core().label_ratios(ok["ptr"], ok["edge"].astype(np.int64), ok["frac"], ids, np.ones(2),
                                     ok["label"], 1, comp.ecap)
    with pytest.raises(ValueError, match="unknown routing engine"):
        paths.Routes(comp, "fortran")


def _some_leaves():
    """A dragonfly whose first devices also link to a second router: some devices hang
    off one switch (leaves), the others route."""
    g = generators.dragonfly(4, 3, 2).copy()
    devices = sorted((n for n, a in g.nodes(data=True) if a.get("kind") == "device"),
                     key=lambda n: g.nodes[n]["index"])
    for d in devices[:5]:
        g.add_edge(d, "r1.2" if g.has_edge(d, "r0.0") else "r0.0", bandwidth=25e9, latency=2e-6)
    return g


@pytest.mark.parametrize("make", [GRAPHS["dragonfly"], GRAPHS["torus"], GRAPHS["fat-tree"], GRAPHS["rail"],
                                  GRAPHS["directed"], _some_leaves])
@pytest.mark.parametrize("nlabels", [1, 4, "table"])
def test_compiled_routes_are_numpys(make, nlabels):
    """routing.route whole (access links, latencies, pairs on one router, flows to self,
    labels in any order; the compiled kernels.route_pairs and route_latency) against the
    numpy engine's route. ``"table"``: so many labels that the kernel sums the access
    links' loads over sorted keys instead of a table."""
    from nest.network import routing

    out = []
    for engine in kernels.ENGINES:
        comp = compile_graph(make())
        comp.routes = paths.make_routes(comp, engine)
        n = len(comp.devices)
        count = (1 << 24) // n + 1 if nlabels == "table" else nlabels
        rng = np.random.default_rng(count)
        src, dst = rng.integers(0, n, 700), rng.integers(0, n, 700)
        amount = rng.integers(1, 9, 700) / rng.choice([1.0, 3.0], 700)
        label = rng.integers(0, count, 700) if count < 100 else rng.choice(count - 1 - np.arange(3), 700)
        out.append(routing.route(comp, src, dst, amount, label, count))
        out.append(routing.route(comp, src[:1], src[:1], amount[:1], label[:1], count))  # nothing moves
        out.append(routing.route(comp, src, dst, amount))  # no labels
        out.append(routing.route(comp, src[:40], np.where(src[:40] % 3 == 0, src[:40], dst[:40]), amount[:40]))
    half = len(out) // 2
    for a, b in zip(out[:half], out[half:]):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_route_pairs_rejects_bad_input():
    comp = compile_graph(generators.dragonfly(3, 2, 1))
    n = len(comp.devices)
    ok = dict(src=np.array([0, 1]), dst=np.array([1, 2]), amount=np.ones(2), label=None, nlabels=1, leaves="all")
    assert len(kernels.route_pairs(comp, **ok)) == 7
    with pytest.raises(ValueError, match="device"):
        kernels.route_pairs(comp, **{**ok, "dst": np.array([1, n])})
    with pytest.raises(ValueError, match="label"):
        kernels.route_pairs(comp, **{**ok, "label": np.array([0, 2]), "nlabels": 2})
    with pytest.raises(ValueError, match="inverse"):
        kernels.route_latency(None, np.zeros(2), np.array([0, 3]), np.zeros(1), 1)


def _random_csr(rng, n, m):
    """A random weighted digraph as SciPy's CSR (duplicate links summed, as scipy does),
    weights whose path sums depend on their order (thirds, sevenths, tiny offsets)."""
    u, v = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.choice([1 / 3, 0.1, 0.7, 1e-6 + 1 / 7, 2.0, 3.3], m) * rng.choice([1.0, 1e-3, 1 + 2 ** -40], m)
    return sp.csr_matrix((w, (u, v)), shape=(n, n))


@pytest.mark.parametrize("seed", range(4))
def test_compiled_dijkstra_is_scipys(seed):
    """Distance rows equal scipy.sparse.csgraph.dijkstra's bit for bit (unreachable: inf),
    on random graphs and on the host-distance weights of a dragonfly and a torus."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(1, 50))
        matrix = _random_csr(rng, n, int(rng.integers(0, 5 * n)))
        sources = rng.integers(0, n, int(rng.integers(1, 6)))
        expected = np.atleast_2d(dijkstra(matrix, indices=sources))
        assert kernels.dijkstra(matrix, sources).tobytes() == expected.tobytes()
    for graph in (generators.dragonfly(6, 4, 2, global_links=2), generators.torus((3, 4, 5), bandwidth=7e9)):
        comp = compile_graph(graph)
        weight = comp.elat + 2.0 ** 20 / comp.link_cap
        matrix = sp.csr_matrix((weight, (comp.eu, comp.ev)), shape=(len(comp.routers),) * 2)
        every = np.arange(len(comp.routers))
        assert kernels.dijkstra(matrix, every).tobytes() == dijkstra(matrix, indices=every).tobytes()


def test_compiled_dijkstra_guards():
    """Weights the kernel's proof does not cover (zero) go to scipy; bad sources raise."""
    matrix = sp.csr_matrix((np.array([0.0, 1.0]), (np.array([0, 1]), np.array([1, 2]))), shape=(3, 3))
    matrix.data[0] = 0.0  # an explicit zero scipy keeps
    assert np.array_equal(kernels.dijkstra(matrix, [0]), np.atleast_2d(dijkstra(matrix, indices=[0])))
    good = sp.csr_matrix((np.ones(2), (np.array([0, 1]), np.array([1, 2]))), shape=(3, 3))
    with pytest.raises(ValueError, match="source"):
        kernels.dijkstra(good, [3])
    with pytest.raises(ValueError, match="uint8"):
        kernels.nn_chain_codes(np.zeros((3, 3), dtype=np.int64))


@pytest.mark.parametrize("seed", range(3))
def test_sparse_matrix_is_scipys(seed):
    """compiled.sparse_matrix (the link matrices without importing scipy.sparse) holds the
    arrays of scipy.sparse.csr_matrix((data, (row, col))): the same data, indices and row
    pointers when no (row, col) repeats, scipy's own matrix (repeats summed) when some do;
    Dijkstra rows over it and its scipy form (the kernel's fallback) are scipy's."""
    from nest.network.compiled import CsrMatrix, sparse_matrix

    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(1, 40))
        codes = rng.permutation(n * n)[:int(rng.integers(0, 3 * n))]
        row, col = codes // n, codes % n
        data = rng.choice([1 / 3, 0.0, 2.0, 1e-6 + 1 / 7], len(codes))
        mine, ref = sparse_matrix(data, row, col, (n, n)), sp.csr_matrix((data, (row, col)), shape=(n, n))
        assert isinstance(mine, CsrMatrix) and mine.shape == ref.shape
        for name in ("data", "indices", "indptr"):
            assert np.array_equal(getattr(mine, name), getattr(ref, name))
            assert getattr(mine, name).dtype == getattr(ref, name).dtype
        back = mine.to_scipy()
        assert (back != ref).nnz == 0
        sources = rng.integers(0, n, 3)
        assert kernels.dijkstra(mine, sources).tobytes() == np.atleast_2d(dijkstra(ref, indices=sources)).tobytes()
    row, col = np.array([0, 1, 0]), np.array([1, 2, 1])  # (0, 1) twice: scipy sums it
    twice = sparse_matrix(np.array([1.0, 2.0, 0.5]), row, col, (3, 3))
    assert not isinstance(twice, CsrMatrix) and twice[0, 1] == 1.5
    comp = compile_graph(generators.torus((3, 4)))
    assert isinstance(comp.cost_matrix, CsrMatrix)
