"""The compiled form's bulk validation reports what checking link by link (in the graph's
edge order) reports first: the same one-line error for the same link, on graphs spoiled
at random; and it reads the same links as networkx does."""

import networkx as nx
import numpy as np
import pytest

from nest.errors import SpecError
from nest.network import compiled, generators

SPOILERS = [
    ("bandwidth", 0), ("bandwidth", -3.0), ("bandwidth", float("nan")), ("bandwidth", True), ("bandwidth", "9"),
    ("bandwidth", np.int64(5)), ("latency", -1e-6), ("latency", float("inf")), ("latency", None), ("cost", 0),
    ("cost", 1.5), ("cost", True), ("cost", np.int64(2)), ("colour", "red"), ("bandwidth_GBps", 0),
]


def _reference(graph) -> str | None:
    """The first error checking every link in turn (nest.network.compiled._check_link)."""
    for u, v, attrs in graph.edges(data=True):
        try:
            compiled._check_link(u, v, attrs)
        except SpecError as error:
            return str(error)
    return None


@pytest.mark.parametrize("seed", range(12))
def test_bulk_validation_reports_the_first_bad_link(seed):
    rng = np.random.default_rng(seed)
    graph = [generators.fat_tree(4), generators.rail_optimized(3, 4, 2), generators.torus((3, 4))][seed % 3]
    graph = graph.to_directed() if seed % 4 == 3 else graph
    edges = list(graph.edges)
    for at in rng.choice(len(edges), size=int(rng.integers(1, 4)), replace=False):
        key, value = SPOILERS[int(rng.integers(len(SPOILERS)))]
        u, v = edges[int(at)]
        if key == "bandwidth_GBps":
            del graph[u][v]["bandwidth"]
        graph[u][v][key] = value
    expected = _reference(graph)
    if expected is None:
        compiled.compile_graph(graph)
    else:
        with pytest.raises(SpecError) as error:
            compiled.compile_graph(graph)
        assert str(error.value) == expected


@pytest.mark.parametrize("make", [lambda: generators.dragonfly(4, 3, 2, 2), lambda: generators.torus((2, 3)),
                                  lambda: nx.path_graph(4).to_directed()])
def test_links_read_like_networkx(make):
    graph = make()
    assert compiled._edges(graph) == list(graph.edges(data=True))
