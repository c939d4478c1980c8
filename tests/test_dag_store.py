"""nest.network.paths.DagStore finds stored pairs alike through its table of keys and
through its sorted runs, and routes priced with either store are the same."""

import numpy as np
import pytest

from nest.network import generators, paths
from nest.network.compiled import compile_graph


def test_table_and_runs_find_the_same_ids():
    rng = np.random.default_rng(3)
    span = 5000
    table, runs = paths.DagStore(span), paths.DagStore()
    assert table.table is not None and runs.table is None
    stored = np.zeros(0, dtype=np.int64)
    for _ in range(30):
        fresh = np.setdiff1d(rng.integers(0, span, int(rng.integers(1, 300))), stored)
        fresh = rng.permutation(fresh)
        counts = rng.integers(1, 4, len(fresh))
        for store in (table, runs):
            store.append(fresh, counts, np.zeros(int(counts.sum()), dtype=np.int64),
                         np.ones(int(counts.sum())), np.zeros(len(fresh)))
        stored = np.r_[stored, fresh]
        query = rng.integers(0, span, 400)
        (a, found_a), (b, found_b) = table.find(query), runs.find(query)
        assert np.array_equal(found_a, found_b) and np.array_equal(found_a, np.isin(query, stored))
        assert np.array_equal(a[found_a], b[found_b])


@pytest.mark.parametrize("make", [lambda: generators.dragonfly(5, 4, 2), lambda: generators.torus((4, 6, 3)),
                                  lambda: generators.rail_optimized(4, 4, 2)])
def test_routes_with_either_store_price_alike(make, monkeypatch):
    """General, translated and relabeled routes; with a symmetry the table holds the rows
    of the canonical sources only (a torus: one)."""
    comp = compile_graph(make())
    hosts = np.unique(comp.router_of)
    rng = np.random.default_rng(1)
    s, t = rng.choice(hosts, 500), rng.choice(hosts, 500)
    keep = s != t
    s, t = s[keep], t[keep]
    amount, label = np.ones(len(s)), np.zeros(len(s), dtype=np.int64)
    with_table = paths.make_routes(comp)
    monkeypatch.setattr(paths, "_TABLE_CODES", 0)
    with_runs = paths.make_routes(comp)
    assert with_table.store.table is not None and with_runs.store.table is None
    assert len(with_table.store.table) == len(with_table.sources) * len(comp.routers)
    if isinstance(with_table, paths.TranslatedRoutes):
        assert len(with_table.sources) == 1
    a, b = with_table.flows(s, t, amount, label, 1), with_runs.flows(s, t, amount, label, 1)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
