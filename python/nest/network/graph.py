"""Planning on a network graph: where ranks go and what a layout's groups cost.

Ranks are placed on devices in a locality-preserving order (:func:`locality_order`,
hierarchical clustering of the devices' switches) and :class:`GraphNetwork` prices every
communicator family of a layout with all its groups at once, on the routes and link loads
of :mod:`nest.network.routing`. :func:`graph_cluster` makes a
:class:`~nest.specs.ClusterSpec` of a graph: its tiers are the levels of the device
order (they size the search space and the reports), every price comes from the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..frozen_graph import read_only_graph
from ..specs import ClusterSpec, Tier
from ..units import MiB
from . import kernels
from .compiled import sparse_matrix
from .routing import CompiledGraph, compile_graph, group_rows, route, route_one
from .symmetry import circulant, router_symmetry

_MEBIBYTE = float(MiB)


def _host_distances(comp: CompiledGraph) -> tuple[np.ndarray, np.ndarray]:
    """The routers that host devices (ascending) and their pairwise distances (condensed:
    the upper triangle row by row, as :func:`scipy.spatial.distance.squareform` gives it)
    in seconds to move one MiB along the fastest path (link weight ``latency + 2**20 /
    bandwidth``; the larger of the two directions), a proxy for how well two devices are
    connected that sees bandwidth, unlike the routing cost. With a generator's symmetry,
    one Dijkstra search per orbit of hosts: ``d(h, x) = d(h0, g_h^-1(x))`` (an
    automorphism keeps every path's links and their order, hence the float sums), the
    condensed form filled a block of rows at a time (no square matrix)."""
    hosts = np.unique(comp.router_of)
    weight = comp.elat + _MEBIBYTE / comp.link_cap
    nr, n = len(comp.routers), len(hosts)
    matrix = sparse_matrix(weight, comp.eu, comp.ev, (nr, nr))
    sym = router_symmetry(comp)
    if sym is None:
        from scipy.spatial.distance import squareform

        dist = kernels.dijkstra(matrix, hosts)[:, hosts]
        return hosts, squareform(np.maximum(dist, dist.T), checks=False) if n > 1 else np.zeros(0)
    seeds, which = np.unique(sym.canonical_of[hosts], return_inverse=True)
    rows = kernels.dijkstra(matrix, seeds)
    which = which.ravel()
    condensed = np.empty(n * (n - 1) // 2)
    shifted = circulant(sym, rows[0]) if n == nr else None
    if shifted is not None:  # a torus: every row a slice of one doubled grid
        for i in range(n - 1):
            forward, backward = shifted(i)
            start = n * i - i * (i + 1) // 2
            condensed[start:start + n - i - 1] = np.maximum(forward[i + 1:], backward[i + 1:])
        return hosts, condensed
    step = max(1, (1 << 21) // n)
    for a in range(0, n, step):
        h = hosts[a:a + step]
        forward = rows[which[a:a + step, None], sym.relative(h, hosts)]  # d(h_i, x_j)
        backward = rows[which[None, :], sym.relative(hosts, h).T]  # d(x_j, h_i)
        block = np.maximum(forward, backward)
        for i in range(a, a + len(h)):
            start = n * i - i * (i + 1) // 2
            condensed[start:start + n - i - 1] = block[i - a, i + 1:]
    return hosts, condensed


_CODED_HOSTS = 2048
"""Hosts from which a torus clusters on byte codes of its distances
(:func:`~nest.network.linkage.nn_chain_complete`, its chain compiled) instead of SciPy's
float64 condensed matrix (1 GiB at 16384 chips, and SciPy's copy of it): 4096 chips
0.45 s -> 0.15 s, 16384 chips 4.6 s (the chain in numpy) -> 1.3 s."""


def _torus_codes(comp: CompiledGraph):
    """``(hosts, rows, values)`` of a torus whose every router hosts devices (translations,
    :func:`~nest.network.symmetry.circulant`): ``values[rows[i, j]]`` is
    :func:`_host_distances`' distance of hosts ``i`` and ``j`` (``rows``: ``uint8``, one row
    per host, each a slice of one doubled grid); None for any other graph, or more
    distinct distances than bytes hold."""
    from .linkage import MAX_CODES

    hosts = np.unique(comp.router_of)
    sym = router_symmetry(comp)
    if sym is None or len(hosts) != len(comp.routers) or len(hosts) < max(2, _CODED_HOSTS):
        return None
    weight = comp.elat + _MEBIBYTE / comp.link_cap
    matrix = sparse_matrix(weight, comp.eu, comp.ev, (len(hosts), len(hosts)))
    row = kernels.dijkstra(matrix, [int(sym.canonical_of[hosts[0]])])[0]
    shifted = circulant(sym, row)
    if shifted is None:
        return None
    forward, backward = shifted(0)
    values, codes = np.unique(np.maximum(forward, backward), return_inverse=True)
    if len(values) > MAX_CODES - 1 or not np.isfinite(values).all():
        return None
    # d(i, x) = m[x - i] (coordinates modulo the sizes) with m = max(forward, backward) of
    # router 0, as _host_distances reads it: every row a slice of the doubled grid of codes
    grid = tuple(sym.sizes.tolist())
    doubled = np.tile(codes.astype(np.uint8).reshape(grid), (2,) * len(grid))
    # row i: the window of the doubled grid starting at k - x per axis (x: i's coordinates),
    # every window gathered in one copy
    windows = np.lib.stride_tricks.sliding_window_view(doubled, grid)
    coords = np.unravel_index(np.arange(len(hosts)), grid)
    rows = windows[tuple(k - x for k, x in zip(grid, coords))].reshape(len(hosts), len(hosts))
    return hosts, rows, values


def _dendrogram(comp: CompiledGraph):
    """Complete-linkage clustering of the device-hosting routers (cached): the
    routers, the linkage matrix (None for a single router) and the leaf order, children
    visited by their smallest device index so that the order is canonical. Large tori
    cluster on byte codes of their distances (:func:`_torus_codes`), others with SciPy:
    the same linkage."""
    if "dendrogram" in comp.cache:
        return comp.cache["dendrogram"]
    from .linkage import nn_chain_complete

    coded = _torus_codes(comp)
    if coded is not None:
        hosts, rows, values = coded
        dist = None
    else:
        hosts, dist = _host_distances(comp)
    n = len(hosts)
    first = np.full(len(comp.routers), np.iinfo(np.int64).max)
    np.minimum.at(first, comp.router_of, np.arange(len(comp.devices)))
    if n == 1:
        out = (hosts, None, np.zeros(1, dtype=np.int64))
    else:
        if dist is not None:
            from scipy.cluster.hierarchy import linkage  # imported only here: 0.2 s of start-up

            z = linkage(dist, method="complete")
        else:
            z = nn_chain_complete(rows, values)
        del dist
        smallest = np.concatenate((first[hosts], np.zeros(n - 1, dtype=np.int64)))
        children = z[:, :2].astype(np.int64)
        for i, (a, b) in enumerate(children):
            smallest[n + i] = min(smallest[a], smallest[b])
        order, stack = [], [2 * n - 2]
        while stack:  # depth first, smaller-index child first (iterative: deep trees)
            c = stack.pop()
            if c < n:
                order.append(c)
                continue
            a, b = children[c - n]
            if smallest[a] > smallest[b]:
                a, b = b, a
            stack.extend((b, a))
        out = (hosts, z, np.array(order, dtype=np.int64))
    comp.cache["dendrogram"] = out
    return out


def _known(comp: CompiledGraph) -> tuple[list[int], tuple[int, ...]] | None:
    """``(device indices in locality order, level sizes)`` the graph's generator attached
    (:mod:`nest.network.structure`), or None: the general algorithm's."""
    known = comp.structure
    if known is None or not known.knows_order:
        return None
    order = list(range(len(comp.devices))) if known.order is None else list(known.order)
    return order, tuple(known.levels)


def locality_order(graph) -> list:
    """Device ids in a locality-preserving order: agglomerative hierarchical clustering
    (complete linkage, :func:`scipy.cluster.hierarchy.linkage`) of the routers that host
    devices, by the time to move one MiB between them, read off the dendrogram with the
    child holding the smaller device index first; a router's own devices stay together
    in index order. Every cluster of the dendrogram is a contiguous block of the order,
    so devices that are close (one switch, one pod, one node) get consecutive ranks; on
    the graph form of a hierarchical cluster (and on generated fat trees, spine-leaf and
    rail-optimized networks) the order is the device index order, which their generators
    attach with the levels (:mod:`nest.network.structure`): no clustering runs."""
    comp = compile_graph(graph)
    known = _known(comp)
    if known is not None:
        return [comp.devices[i] for i in known[0]]
    hosts, _, order = _dendrogram(comp)
    by_router: dict[int, list] = {}
    for i, r in enumerate(comp.router_of.tolist()):
        by_router.setdefault(r, []).append(comp.devices[i])
    return [d for h in hosts[order].tolist() for d in by_router[h]]


def level_sizes(graph, order=None) -> tuple[int, ...]:
    """Nested block sizes of the device order (cumulative, the last one all devices):
    devices per router when every device-hosting router has as many, then every cut of
    the clustering dendrogram (:func:`locality_order`) whose clusters all hold the same
    number of devices. With an explicit ``order`` (device ids), the sizes are the
    hierarchy of that order: the aligned blocks of which the smallest distance levels
    of the clustering hold."""
    comp = compile_graph(graph)
    known = _known(comp)
    if known is not None:
        sizes = list(known[1])
        return tuple(sizes if order is None else _aligned_sizes(graph, comp, order, sizes))
    n_dev = len(comp.devices)
    counts = np.bincount(comp.router_of, minlength=len(comp.routers))
    hosts, z, leaf_order = _dendrogram(comp)
    per_host = counts[hosts]
    sizes = []
    if (per_host == per_host[0]).all() and per_host[0] > 1:
        sizes.append(int(per_host[0]))
    if z is not None:
        for size in _cut_sizes(z, per_host):
            if size is not None:
                s = int(size)
                if (not sizes or (s > sizes[-1] and s % sizes[-1] == 0)) and s <= n_dev:
                    sizes.append(s)
    if not sizes or sizes[-1] != n_dev:
        sizes.append(n_dev)
    if order is not None:
        sizes = _aligned_sizes(graph, comp, order, sizes)
    return tuple(sizes)


def _cut_sizes(z: np.ndarray, weights: np.ndarray) -> list:
    """Per distinct merge height of the linkage ``z`` (ascending), the weight every flat
    cluster of the cut at that height has (``weights`` of the leaves summed), or None when
    they differ. ``fcluster(z, t=height, criterion="distance")`` of a monotonic linkage
    (complete linkage is: the rows ascend and every merge is at least as high as the
    merges under it) joins exactly the merges up to that height, so the cut's clusters are
    those merges' unions and the leaves not merged yet (SciPy's clustering itself not
    imported)."""
    n = len(weights)
    weight = weights.astype(np.float64).tolist() + [0.0] * (n - 1)
    count: dict[float, int] = {}
    for w in weight[:n]:
        count[w] = count.get(w, 0) + 1
    heights = z[:, 2].tolist()
    out = []
    for i, (a, b) in enumerate(z[:, :2].astype(np.int64).tolist()):
        for w in (weight[a], weight[b]):
            count[w] -= 1
            if not count[w]:
                del count[w]
        weight[n + i] = weight[a] + weight[b]
        count[weight[n + i]] = count.get(weight[n + i], 0) + 1
        if i + 1 == len(heights) or heights[i + 1] != heights[i]:
            out.append(next(iter(count)) if len(count) == 1 else None)
    return out


def _aligned_sizes(graph, comp: CompiledGraph, order, sizes) -> list[int]:
    """The sizes of ``sizes`` whose aligned blocks of ``order`` are clusters of that
    size (the same device sets as in the locality order's blocks), plus all devices."""
    index = {d: i for i, d in enumerate(comp.devices)}
    mine = np.array([index[d] for d in order], dtype=np.int64)
    ref = np.array([index[d] for d in locality_order(graph)], dtype=np.int64)
    keep = []
    for s in sizes[:-1]:
        a = np.sort(mine.reshape(-1, s), axis=1)
        b = np.sort(ref.reshape(-1, s), axis=1)
        if set(map(bytes, a)) == set(map(bytes, b)):
            keep.append(s)
    return keep + [len(comp.devices)]


# -- a cluster on a graph -----------------------------------------------------------------


def _prime_steps(k: int) -> int:
    """Sum of ``p - 1`` over the prime factors of ``k`` (with multiplicity): the fewest
    ring steps of any hierarchical decomposition of a group of ``k`` (``ab - 1 >= (a - 1)
    + (b - 1)``)."""
    total, p = 0, 2
    while p * p <= k:
        while k % p == 0:
            total += p - 1
            k //= p
        p += 1
    return total + (k - 1 if k > 1 else 0)


@dataclass(frozen=True)
class Schedules:
    """Prices ``(alpha, beta)`` of a ring reduce-scatter family: as one flat ring in rank
    order, and hierarchically over the order's levels (None when the groups do not
    decompose uniformly). ``best`` is what the collective costs: the schedule with the
    smaller ``beta`` (then ``alpha``), as a tuned library picks the algorithm that is
    faster for large messages."""

    flat: tuple[float, float]
    hierarchical: tuple[float, float] | None

    @property
    def best(self) -> tuple[float, float]:
        if self.hierarchical is None:
            return self.flat
        return min(self.flat, self.hierarchical, key=lambda ab: (ab[1], ab[0]))


class GraphNetwork:
    """Prices communicator groups of ranks on a graph: rank ``r`` runs on device
    ``order[r]`` (device node ids; default :func:`locality_order`).

    Groups are rows of ranks, ascending. Every family is priced with all its groups at
    once (they contend for links), cached by its ranks:

    * :meth:`ring`: reduce-scatter (= all-gather; all-reduce twice) as a flat ring over
      each row, and hierarchically: with the order's levels (:func:`level_sizes`), when
      every group has the same number of members in every block of every level, step
      ``t`` runs rings of the members that share a level-``t`` block and a position in
      their level-``(t-1)`` blocks, carrying ``1 / (members per level-(t-1) block)`` of
      the data (the decomposition of :mod:`nest.network`, priced on the graph);
    * :meth:`all_to_all`, :meth:`neighbours` (each member sends to the next, the step of
      a ring: ring attention) and :meth:`boundaries` (pipeline stage pairs, one set per
      boundary).

    Floors (lower bounds for the search) come from subsets of a family's flows, whose
    loads and latencies cannot exceed the family's: :meth:`ring_floor`,
    :meth:`all_to_all_floor` and :meth:`neighbours_floor` price only the flows that the
    first member of one group sends; :meth:`any_ring_floor`, :meth:`any_all_to_all_floor`
    and :meth:`any_send_floor` hold for any group of ``k`` distinct devices (a device sends
    at most as fast as all its links together; a path is at least as slow as its first
    and last link, or a direct link).
    """

    def __init__(self, graph, order=None):
        comp = compile_graph(graph)
        self.order = tuple(locality_order(graph) if order is None else order)
        index = {d: i for i, d in enumerate(comp.devices)}
        if sorted(map(str, self.order)) != sorted(map(str, comp.devices)) or len(set(self.order)) != len(self.order):
            raise SpecError(f"device_order = {list(self.order)[:4]}...: must list every device of the "
                            "graph once")
        self.device = np.array([index[d] for d in self.order], dtype=np.int64)
        self.sizes = level_sizes(graph, None if order is None else self.order)
        self._cache: dict = {}
        # floors for any group: the largest rate a device can send at, the smallest latency
        # a path between two devices can have (its first and last links, or one direct link)
        out_cap = np.bincount(comp.eu, weights=comp.ecap, minlength=len(comp.routers))
        hosting = ~comp.leaf
        cap = np.where(comp.leaf, comp.up_cap, 0.0)
        cap[hosting] = out_cap[comp.router_of[hosting]]
        self.max_rate = float(cap.max())
        lat_out = np.where(comp.leaf, comp.up_lat, np.inf)
        lat_in = np.where(comp.leaf, comp.down_lat, np.inf)
        if hosting.any():
            rmin_out = np.full(len(comp.routers), np.inf)
            np.minimum.at(rmin_out, comp.eu, comp.elat)
            rmin_in = np.full(len(comp.routers), np.inf)
            np.minimum.at(rmin_in, comp.ev, comp.elat)
            lat_out[hosting] = rmin_out[comp.router_of[hosting]]
            lat_in[hosting] = rmin_in[comp.router_of[hosting]]
        self.min_latency = float(min(np.min(lat_out) + np.min(lat_in), np.min(comp.elat)))
        self.comp = comp

    @property
    def num_devices(self) -> int:
        return len(self.device)

    # -- families -------------------------------------------------------------------

    def _key(self, kind, groups):
        return kind, groups.shape, groups.tobytes()

    def _memo(self, key, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def _ring_price(self, pos: np.ndarray, k: int) -> tuple[float, float]:
        if k < 2:
            return 0.0, 0.0
        dev = self.device[pos]
        src, dst = dev.ravel(), np.roll(dev, -1, axis=1).ravel()
        ratio, lat = route_one(self.comp, src, dst, np.ones(src.size))
        return (k - 1) * lat, (k - 1) / k * ratio

    def decompose(self, groups: np.ndarray) -> list[int] | None:
        """Members per level block, level by level (the factors of the hierarchical
        schedule), or None when groups are not uniform over the levels."""
        rows, k = groups.shape
        factors, inner = [], 1
        start = np.zeros((rows, k), dtype=bool)
        start[:, 0] = True
        for size in self.sizes:
            block = groups // size
            cut = start.copy()
            cut[:, 1:] |= block[:, 1:] != block[:, :-1]
            runs = np.diff(np.r_[np.flatnonzero(cut.ravel()), rows * k])
            if not (runs == runs[0]).all() or runs[0] % inner:
                return None
            factors.append(int(runs[0] // inner))
            inner = int(runs[0])
        return factors if inner == k else None

    def _steps(self, groups: np.ndarray, factors: list[int]) -> list[tuple[np.ndarray, int, float]]:
        """Per hierarchical step with a factor > 1: (sub-rings, factor, share of the data)."""
        rows, k = groups.shape
        shaped = groups.reshape((rows,) + tuple(reversed(factors)))
        steps, share = [], 1.0
        for t, f in enumerate(factors):
            if f > 1:
                axis = len(factors) - t
                steps.append((np.moveaxis(shaped, axis, -1).reshape(-1, f), f, share))
                share /= f
        return steps

    def ring(self, groups) -> Schedules:
        """Schedules of a ring reduce-scatter run by every row of ``groups`` at once."""
        groups = group_rows(groups)

        def compute():
            k = groups.shape[1]
            flat = self._ring_price(groups, k)
            factors = self.decompose(groups) if k > 1 else None
            if factors is None or sum(f > 1 for f in factors) < 2:
                return Schedules(flat, None)
            alpha = beta = 0.0
            for sub, f, share in self._steps(groups, factors):
                a, b = self._ring_price(sub, f)
                alpha += a
                beta += share * b
            return Schedules(flat, (alpha, beta))
        return self._memo(self._key("ring", groups), compute)

    def all_to_all(self, groups) -> tuple[float, float]:
        """``(alpha, beta)`` of an all-to-all (each rank sends n bytes in total) of every
        row of ``groups`` at once."""
        groups = group_rows(groups)

        def compute():
            k = groups.shape[1]
            if k < 2:
                return 0.0, 0.0
            dev = self.device[groups]
            src = np.repeat(dev, k, axis=1).ravel()
            dst = np.tile(dev, (1, k)).ravel()
            return route_one(self.comp, src, dst, np.full(src.size, 1.0 / k))[::-1]
        return self._memo(self._key("a2a", groups), compute)

    def neighbours(self, groups) -> tuple[float, float]:
        """``(latency, seconds per byte)`` of one ring step: every member of every row
        sends to the next member at once."""
        groups = group_rows(groups)

        def compute():
            if groups.shape[1] < 2:
                return 0.0, 0.0
            dev = self.device[groups]
            src, dst = dev.ravel(), np.roll(dev, -1, axis=1).ravel()
            return route_one(self.comp, src, dst, np.ones(src.size))[::-1]
        return self._memo(self._key("ring-step", groups), compute)

    def boundaries(self, src: np.ndarray, dst: np.ndarray, label: np.ndarray,
                   count: int) -> tuple[np.ndarray, np.ndarray]:
        """``(alpha[count], beta[count])``: every rank ``src`` sends n bytes to ``dst`` at
        once within a label (a pipeline boundary), the labels one after another."""
        key = ("p2p", count, src.tobytes(), dst.tobytes(), label.tobytes())

        def compute():
            ratio, lat = route(self.comp, self.device[src], self.device[dst], np.ones(len(src)),
                                label, count)
            return lat, ratio
        return self._memo(key, compute)

    # -- floors ---------------------------------------------------------------------

    def _pair(self, a: int, b: int) -> tuple[float, float]:
        """``(latency, ratio)`` of rank ``a`` sending one byte to rank ``b``, alone."""
        def compute():
            ratio, lat = route_one(self.comp, self.device[[a]], self.device[[b]], np.ones(1))
            return lat, ratio
        return self._memo(("pair", a, b), compute)

    def ring_floor(self, group: np.ndarray) -> tuple[float, float]:
        """Term-wise lower bound on :meth:`ring` ``.best`` of any family that contains the
        group ``group`` (ranks ascending): each schedule priced with only the flows its
        first member sends (one per ring step), the smaller of the two per term."""
        group = np.asarray(group, dtype=np.int64)

        def compute():
            k = len(group)
            if k < 2:
                return 0.0, 0.0
            lat, ratio = self._pair(int(group[0]), int(group[1]))
            flat = ((k - 1) * lat, (k - 1) / k * ratio)
            factors = self.decompose(group[None, :])
            if factors is None or sum(f > 1 for f in factors) < 2:
                return flat
            alpha = beta = 0.0
            for sub, f, share in self._steps(group[None, :], factors):
                lat, ratio = self._pair(int(sub[0, 0]), int(sub[0, 1]))
                alpha += (f - 1) * lat
                beta += share * ((f - 1) / f * ratio)
            return min(flat[0], alpha), min(flat[1], beta)
        return self._memo(("ring-floor", group.tobytes()), compute)

    def all_to_all_floor(self, group: np.ndarray) -> tuple[float, float]:
        """Lower bound on :meth:`all_to_all` of a family containing ``group``: only the
        flows of its first member."""
        group = np.asarray(group, dtype=np.int64)

        def compute():
            k = len(group)
            if k < 2:
                return 0.0, 0.0
            dev = self.device[group]
            src = np.full(k, dev[0])
            return route_one(self.comp, src, dev, np.full(k, 1.0 / k))[::-1]
        return self._memo(("a2a-floor", group.tobytes()), compute)

    def neighbours_floor(self, group: np.ndarray) -> tuple[float, float]:
        """Lower bound on :meth:`neighbours` of a family containing ``group``."""
        if len(group) < 2:
            return 0.0, 0.0
        lat, ratio = self._pair(int(group[0]), int(group[1]))
        return lat, ratio

    # Floors for groups of k devices wherever they are; a margin of 1e-12 keeps them
    # below the exact prices whatever the rounding of the latter.
    _MARGIN = 1.0 - 1e-12

    def any_ring_floor(self, k):
        """``(alpha, beta)`` lower bounds on a ring reduce-scatter of any ``k`` devices
        (either schedule), elementwise over an integer array ``k``."""
        k = np.asarray(k, dtype=np.int64)
        steps = np.array([_prime_steps(int(x)) for x in k.ravel()], dtype=np.float64).reshape(k.shape)
        alpha = steps * self.min_latency * self._MARGIN
        beta = np.where(k > 1, (k - 1) / np.maximum(k, 1), 0.0) * (self._MARGIN / self.max_rate)
        return alpha, beta

    def any_all_to_all_floor(self, k):
        """``(alpha, beta)`` lower bounds on an all-to-all of any ``k`` devices."""
        k = np.asarray(k, dtype=np.int64)
        alpha = np.where(k > 1, self.min_latency * self._MARGIN, 0.0)
        beta = np.where(k > 1, (k - 1) / np.maximum(k, 1), 0.0) * (self._MARGIN / self.max_rate)
        return alpha, beta

    def any_send_floor(self) -> tuple[float, float]:
        """``(latency, seconds per byte)`` below any point-to-point transfer."""
        return self.min_latency * self._MARGIN, self._MARGIN / self.max_rate

    # -- levels as tiers --------------------------------------------------------------

    def tiers(self) -> list[tuple[int, float, float]]:
        """Per level: (fanout, bandwidth, latency) of one transfer from rank 0 to the first
        rank of the next block of the level below (the rate and latency a pair of devices
        first meeting at that level gets, alone)."""
        out, inner = [], 1
        for size in self.sizes:
            fanout = size // inner
            if inner < self.num_devices and fanout > 1:
                lat, ratio = self._pair(0, inner)
                out.append((fanout, 1.0 / ratio if ratio > 0 else float("inf"), lat))
            else:
                out.append((fanout, float("inf"), 0.0))
            inner = size
        return out


def network(graph, order=None) -> GraphNetwork:
    """The :class:`GraphNetwork` of ``graph`` with ranks on ``order`` (cached per graph)."""
    comp = compile_graph(graph)
    key = ("network", None if order is None else tuple(order))
    if key not in comp.cache:
        comp.cache[key] = GraphNetwork(graph, order)
    return comp.cache[key]


def graph_cluster(graph, device, name: str | None = None, order=None, source: str = "") -> ClusterSpec:
    """A :class:`~nest.specs.ClusterSpec` whose network is ``graph`` (validated) and whose
    tiers are the levels of its device order (:func:`level_sizes`, bandwidth and latency
    of one transfer first crossing each level): the search space and the reports read
    the tiers, every price comes from the graph. Rank ``r`` runs on ``order[r]``
    (default: :func:`locality_order`). The cluster holds a read-only copy of ``graph``
    (:func:`~nest.frozen_graph.read_only_graph`); ``graph`` itself is left as it is."""
    graph = read_only_graph(graph)
    net = network(graph, order)
    tiers = []
    for t, (fanout, bandwidth, latency) in enumerate(net.tiers()):
        if not np.isfinite(bandwidth):
            bandwidth = net.max_rate
        tiers.append(Tier(f"level{t}", int(fanout), float(bandwidth), float(latency)))
    label = name or graph.graph.get("name") or "graph"
    return ClusterSpec(name=str(label), device=device, tiers=tuple(tiers), source=source,
                       graph=graph, device_order=net.order)
