"""Complete-linkage clustering of many points whose distances take few values, without the
condensed distance matrix: the linkage :func:`scipy.cluster.hierarchy.linkage` returns
(``method="complete"``), bit for bit, in memory of one byte per pair.

SciPy runs the nearest-neighbour chain (``nn_chain`` of ``scipy/cluster/_hierarchy.pyx``)
on a float64 copy of the condensed distances: 16384 torus chips take 1 GiB, copied once
more inside. Complete linkage reads distances only through comparisons and ``max`` (the
distance of two clusters is the largest over their members), so the chain run on the
ranks of the distinct values (codes) makes the same choices; the same chain here keeps,
per cluster, the largest code from any of its members to every point (one ``uint8`` row
per cluster, updated by ``max`` on a merge), and reads a cluster's distances to the other
clusters as the largest code over each cluster's points (points kept grouped by cluster:
one ``maximum.reduceat``). Ties go as in SciPy: the first cluster index holding the
smallest distance, and the chain's previous cluster when it holds it.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .kernels import DEFAULT_ENGINE

MAX_CODES = 255
"""Distinct distance values the byte codes can hold (255 is the inactive mark)."""

_INACTIVE = np.uint8(255)


def nn_chain_complete(rows: np.ndarray, values: np.ndarray, engine: str = DEFAULT_ENGINE) -> np.ndarray:
    """The linkage matrix of :func:`scipy.cluster.hierarchy.linkage` with ``method="complete"``
    for ``n`` points whose distance ``d(i, j)`` is ``values[rows[i, j]]`` (``rows``: ``n x n``
    symmetric ``uint8`` codes, ascending with the distance; ``values`` strictly ascending;
    the diagonal is not read). ``rows`` is overwritten. ``engine``: the chain's loop
    compiled (``"cpp"``, :func:`nest.network.kernels.nn_chain_codes`) or the numpy
    reference below, the same merges."""
    n = len(rows)
    if engine == "cpp":
        z = np.zeros((max(n - 1, 0), 4))
        z[:, :3] = kernels.nn_chain_codes(rows)
        return _scipy_form(z, n, values)
    kernels.check_engine(engine)
    z = np.empty((n - 1, 4))
    size = np.ones(n, dtype=np.int64)
    # points grouped by cluster, clusters by index: block c holds cluster c's points
    order = np.arange(n)
    start = np.arange(n)  # first position of each active cluster's block
    active = np.arange(n)  # active clusters, ascending
    first = start.copy()  # start[active]
    chain: list[int] = []
    for k in range(n - 1):
        if not chain:
            chain.append(int(active[0]))
        while True:
            x = chain[-1]
            # largest code from cluster x to each active cluster (blocks in index order)
            dist = np.maximum.reduceat(rows[x][order], first)
            dist[np.searchsorted(active, x)] = _INACTIVE
            best = int(dist.min())
            if len(chain) > 1:
                prev = chain[-2]
                prev_dist = int(dist[np.searchsorted(active, prev)])
                if best >= prev_dist:  # only a strictly closer cluster replaces the previous one
                    best, y = prev_dist, prev
                    break
            y = int(active[int(np.argmax(dist == best))])
            chain.append(y)
        chain.pop()
        chain.pop()
        if x > y:
            x, y = y, x
        z[k] = x, y, best, size[x] + size[y]
        # merge x into y: rows by max, x's points moved next to y's (blocks stay by index)
        np.maximum(rows[x], rows[y], out=rows[y])
        sx, sy = start[x], start[y]
        moved = order[sx:sx + size[x]].copy()
        order[sx:sy - size[x]] = order[sx + size[x]:sy]
        order[sy - size[x]:sy] = moved
        start[x + 1:y + 1] -= size[x]
        size[y] += size[x]
        size[x] = 0
        at = np.searchsorted(active, x)
        active = np.delete(active, at)
        first = start[active]
    return _scipy_form(z, n, values)


def _scipy_form(z: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    """As ``nn_chain`` finishes: rows sorted by distance (stable), clusters renamed by a
    union-find (``label`` of ``_hierarchy.pyx``), codes turned into distances."""
    z = z[np.argsort(z[:, 2], kind="mergesort")]
    parent = list(range(2 * n - 1))
    count = [1] * (2 * n - 1)

    def find(a: int) -> int:
        root = a
        while parent[root] != root:
            root = parent[root]
        while parent[a] != root:
            parent[a], a = root, parent[a]
        return root

    for i, (a, b) in enumerate(z[:, :2].astype(np.int64).tolist()):
        ra, rb = find(a), find(b)
        z[i, 0], z[i, 1] = min(ra, rb), max(ra, rb)
        parent[ra] = parent[rb] = n + i
        count[n + i] = count[ra] + count[rb]
        z[i, 3] = count[n + i]
    z[:, 2] = values[z[:, 2].astype(np.int64)]
    return z
