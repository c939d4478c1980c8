"""Routing and contention-aware prices of flows on a network graph.

A network is a networkx graph whose nodes are devices (``kind="device"``) or switches
(any other node; ``kind="switch"`` by convention) and whose edges are links with

* ``bandwidth``: bytes/s in each direction (``bandwidth_GBps`` in files, 1e9 bytes/s);
  a :class:`networkx.DiGraph` gives each direction its own capacity;
* ``latency``: seconds (``latency_us`` in files), default 0;
* ``cost``: positive integer routing metric, default 1 (hop count).

Devices are numbered ``0..N-1`` by their ``index`` attribute when every device has one,
otherwise in node order; communicator groups are rows of such indices (as in
:mod:`nest.network.tiers`). A device may name the machine it sits in (``host``; default:
the device itself), which launchers need (``nest plan --emit hostfile``).

Pricing. Every flow is routed over all minimum-``cost`` paths, its bytes split evenly
over those paths (ECMP); the bytes of all concurrent flows are added per directed link,
and a communication step takes ``max over links (load / capacity) + the longest path
latency`` of its flows. Devices with a single link hang off their switch and are folded
into it for routing; devices with several links (torus chips, multi-homed GPUs) route.
The collectives return ``(alpha, beta)`` with ``time = alpha + beta * bytes`` like
:class:`nest.network.tiers.GroupShape`:

* :func:`ring_collective`: reduce-scatter (= all-gather; all-reduce is twice) of n bytes
  as a ring over each group's rows in the given order: ``k - 1`` steps in which every
  rank sends ``n / k`` bytes to the next, all groups at once.
* :func:`all_to_all`: each rank sends ``n / k`` bytes to every other member, all at once.
* :func:`point_to_point`: every pair sends n bytes, all pairs at once.

Results are cached per topology and group set, so repeated queries are dictionary hits.
Caches belong to read-only graphs (:func:`nest.frozen_graph.read_only_graph`, what a
:class:`~nest.specs.ClusterSpec` holds), which cannot change under them; a graph the
caller may still change is priced on a read-only copy of its current contents, made
again whenever they change. Routing state is kept per graph (:func:`compile_graph`):
every router pair's shortest-path DAG with its ECMP shares is built once
(:class:`_Routes`) and a family of flows costs a gather over the DAGs it uses; transit
switches that are exact twins (same neighbours, same links: the core switches of one
fat-tree core group, the spines of a leaf-spine network) are merged first, which ECMP
makes exact.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from ..errors import SpecError
from ..frozen_graph import read_only_graph
from ..units import GB

NODE_KEYS = {"kind", "index", "name", "host"}
"""Node attributes a network graph may have."""

EDGE_KEYS = {"bandwidth", "bandwidth_GBps", "latency", "latency_us", "cost"}
"""Link attributes a network graph may have."""

_UNIT = {"bandwidth_GBps": ("bandwidth", GB), "latency_us": ("latency", 1e-6)}


def _link_value(attrs: dict, key: str, where: str, default=None):
    base, scale = None, 1.0
    for file_key, (k, s) in _UNIT.items():
        if k == key and file_key in attrs:
            base, scale = file_key, s
    if key in attrs:
        base, scale = key, 1.0
    if base is None:
        if default is None:
            raise SpecError(f"{where}.{key} = None: missing")
        return default
    value = attrs[base]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if key == "bandwidth" and not (ok and value > 0):
        raise SpecError(f"{where}.{base} = {value!r}: must be a positive finite number")
    if key == "latency" and not (ok and value >= 0):
        raise SpecError(f"{where}.{base} = {value!r}: must be a finite number >= 0")
    return float(value) * scale


def validate(graph) -> None:
    """Raise SpecError (one line, naming field and value) unless ``graph`` is a usable
    topology: not a multigraph, at least one device, known attribute keys, positive finite
    bandwidths, finite non-negative latencies, positive integer costs, connected, and
    every device reaching every other device (directed graphs)."""
    compile_graph(graph)


# -- compiled form ----------------------------------------------------------------------


@dataclass
class CompiledGraph:
    devices: list  # node ids in device-index order
    router_of: np.ndarray  # device index -> router index
    leaf: np.ndarray  # device hangs off router_of (True) or is that router (False)
    up_cap: np.ndarray  # per device: access link capacity up / down (inf if not a leaf)
    down_cap: np.ndarray
    up_lat: np.ndarray
    down_lat: np.ndarray
    routers: list
    eu: np.ndarray  # router-level directed edges, sorted by head
    ev: np.ndarray
    ecost: np.ndarray
    ecap: np.ndarray
    elat: np.ndarray
    cost_matrix: sp.csr_matrix
    cache: dict
    directed: bool = False
    routes: "_Routes | None" = None
    mul_tail: np.ndarray | None = None  # per router-level link: twins its tail / head stands for
    mul_head: np.ndarray | None = None
    link_cap: np.ndarray | None = None  # capacity of one of the parallel real links
    # guards the routing store, which grows in place (plans may run in several threads)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def routing(self) -> "_Routes":
        with self.lock:
            if self.routes is None:
                self.routes = _Routes(self)
            return self.routes


# read-only graph -> its compiled form (weak keys: entries die with their graph)
_COMPILED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def compile_graph(graph) -> CompiledGraph:
    """The validated routing form of ``graph`` (:class:`CompiledGraph`, with the caches of
    every price on it), kept per read-only graph: a graph the caller may change is
    compiled as its :func:`~nest.frozen_graph.read_only_graph`, so a change is never priced on
    stale state."""
    graph = read_only_graph(graph)
    cached = _COMPILED.get(graph)
    if cached is not None:
        return cached
    for node, attrs in graph.nodes(data=True):
        extra = set(attrs) - NODE_KEYS
        if extra:
            k = sorted(extra)[0]
            raise SpecError(f"node {node!r}.{k} = {attrs[k]!r}: unknown key")
    devices = [n for n, a in graph.nodes(data=True) if a.get("kind") == "device"]
    if not devices:
        raise SpecError("topology devices = []: no node has kind=device")
    if all("index" in graph.nodes[d] for d in devices):
        idx = [graph.nodes[d]["index"] for d in devices]
        if sorted(idx) != list(range(len(devices))):
            raise SpecError(f"device index = {sorted(idx)[:5]}...: must be 0..{len(devices) - 1}")
        devices = [d for _, d in sorted(zip(idx, devices))]
    directed = graph.is_directed()
    arcs = {}  # (u, v) -> (cap, lat, cost)
    for u, v, attrs in graph.edges(data=True):
        where = f"link ({u!r}, {v!r})"
        extra = set(attrs) - EDGE_KEYS
        if extra:
            k = sorted(extra)[0]
            raise SpecError(f"{where}.{k} = {attrs[k]!r}: unknown key")
        if u == v:
            raise SpecError(f"{where} = self-loop: not allowed")
        cap = _link_value(attrs, "bandwidth", where)
        lat = _link_value(attrs, "latency", where, 0.0)
        cost = attrs.get("cost", 1)
        if not (isinstance(cost, int) and not isinstance(cost, bool) and cost > 0):
            raise SpecError(f"{where}.cost = {cost!r}: must be a positive integer")
        arcs[(u, v)] = (cap, lat, cost)
        if not directed:
            arcs[(v, u)] = (cap, lat, cost)
    und = graph.to_undirected(as_view=True) if directed else graph
    if not nx.is_connected(und):
        comps = sorted(nx.connected_components(und), key=len)
        raise SpecError(f"topology = {len(comps)} components: not connected "
                        f"(e.g. {sorted(map(str, comps[0]))[:3]} is cut off)")
    # single-homed devices fold into their switch (they cannot be on a transit path)
    dev_set = set(devices)
    leaf_of = {}
    for d in devices:
        nbrs = set(und.neighbors(d))
        if len(nbrs) == 1:
            (s,) = nbrs
            if s not in dev_set and (d, s) in arcs and (s, d) in arcs:
                leaf_of[d] = s
    routers = [n for n in graph.nodes if n not in leaf_of]
    rindex = {n: i for i, n in enumerate(routers)}
    router_of = np.array([rindex[leaf_of.get(d, d)] for d in devices], dtype=np.int64)
    leaf = np.array([d in leaf_of for d in devices])
    n_dev = len(devices)
    up_cap = np.full(n_dev, np.inf)
    down_cap = np.full(n_dev, np.inf)
    up_lat = np.zeros(n_dev)
    down_lat = np.zeros(n_dev)
    for i, d in enumerate(devices):
        if d in leaf_of:
            s = leaf_of[d]
            up_cap[i], up_lat[i], _ = arcs[(d, s)]
            down_cap[i], down_lat[i], _ = arcs[(s, d)]
    rows = [(rindex[u], rindex[v], *a) for (u, v), a in arcs.items() if u in rindex and v in rindex]
    mult = _twins(len(routers), rows, set(router_of.tolist()))
    # a twin class keeps its first member, whose links stand for the class's parallel links
    rows = [r for r in rows if mult[r[0]] > 0 and mult[r[1]] > 0]
    rows.sort(key=lambda r: (r[1], r[0]))
    arr = np.array([r[:2] for r in rows], dtype=np.int64).reshape(-1, 2)
    vals = np.array([r[2:] for r in rows], dtype=float).reshape(-1, 3)
    eu, ev = arr[:, 0], arr[:, 1]
    link_cap, elat, ecost = vals[:, 0], vals[:, 1], vals[:, 2]
    mul_tail, mul_head = mult[eu].astype(float), mult[ev].astype(float)
    ecap = link_cap * mul_tail * mul_head
    nr = len(routers)
    cost_matrix = sp.csr_matrix((ecost, (eu, ev)), shape=(nr, nr))
    comp = CompiledGraph(devices, router_of, leaf, up_cap, down_cap, up_lat, down_lat, routers,
                     eu, ev, ecost, ecap, elat, cost_matrix, {}, directed, None, mul_tail, mul_head,
                     link_cap)
    if directed:  # every device must reach every other one
        src = np.unique(router_of)
        dist = dijkstra(cost_matrix, indices=src)
        bad = ~np.isfinite(dist[:, np.unique(router_of)])
        if bad.any():
            s, t = np.argwhere(bad)[0]
            raise SpecError(f"topology device route = {routers[src[s]]!r} -> "
                            f"{routers[np.unique(router_of)[t]]!r}: unreachable")
    return _COMPILED.setdefault(graph, comp)  # one compiled form even if threads race here


def _twins(nr: int, rows: list, hosting: set) -> np.ndarray:
    """Per router: the size of its twin class if it represents it (its first member), 0
    if another member does. Twins are routers that host no device and have the same
    neighbours over links of the same capacity, latency and cost in both directions
    (e.g. the core switches of one fat-tree core group, the spines of a leaf-spine
    network): min-cost routing treats them alike, so ECMP splits evenly over them and
    each of their links carries the same load. Routing then runs on one member per
    class whose links stand for the class's parallel links (capacities summed, path
    counts multiplied by the class sizes), which is exact and much smaller."""
    signature: dict[int, list] = {}
    for u, v, cap, lat, cost in rows:
        signature.setdefault(u, []).append((v, 0, cap, lat, cost))
        signature.setdefault(v, []).append((u, 1, cap, lat, cost))
    mult = np.ones(nr, dtype=np.int64)
    classes: dict[tuple, list[int]] = {}
    for r in range(nr):
        if r not in hosting and r in signature:
            classes.setdefault(tuple(sorted(signature[r])), []).append(r)
    for members in classes.values():
        if len(members) > 1:
            mult[members] = 0
            mult[members[0]] = len(members)
    return mult


def devices(graph) -> list:
    """Device node ids in device-index order."""
    return list(compile_graph(graph).devices)


# -- routing and pricing ----------------------------------------------------------------

_BATCH_ELEMENTS = 1 << 22
"""Routers x links per vectorised routing step (bounds the temporary arrays)."""


class _Growing:
    """An append-only numpy array (capacity doubling)."""

    def __init__(self, dtype):
        self.data = np.zeros(1024, dtype=dtype)
        self.size = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.size + len(values)
        if need > len(self.data):
            grown = np.zeros(max(need, 2 * len(self.data)), dtype=self.data.dtype)
            grown[:self.size] = self.data[:self.size]
            self.data = grown
        self.data[self.size:need] = values
        self.size = need

    @property
    def view(self) -> np.ndarray:
        return self.data[:self.size]


class _Routes:
    """Min-cost routing between routers, computed on demand and kept.

    Per router: its distances from (and, on directed graphs, to) every router (scipy's
    Dijkstra). Per (source, destination) router pair: its shortest-path DAG (the links
    ``u -> v`` with ``d(s, u) + cost + d(v, t) = d(s, t)``, found from the routers on a
    shortest path and their out-links) and the share of the pair's traffic each DAG link
    carries under an even split over all min-cost paths (ECMP): ``sigma(s, u) tau(v) /
    sigma(s, t)`` with ``sigma`` the path counts from ``s`` and ``tau`` those to ``t``,
    both counted inside the DAG (every shortest path to or from a router of the DAG lies
    in it), as in Brandes' betweenness algorithm; and the longest latency of those
    paths. A set of concurrent flows then loads every link with the sum of its pairs'
    shares: a gather and a ``bincount`` over the cached DAGs, whose cost is the size of
    the DAGs the flows use, not the size of the network.
    """

    def __init__(self, comp: CompiledGraph):
        self.comp = comp
        self.nr = nr = len(comp.routers)
        order = np.argsort(comp.eu, kind="stable")  # links by tail, for out-link lookups
        self.out_links = order
        self.out_ptr = np.concatenate(([0], np.cumsum(np.bincount(comp.eu, minlength=nr))))
        self.fwd = self._Rows(comp.cost_matrix)
        self.bwd = self._Rows(comp.cost_matrix.T.tocsr()) if comp.directed else self.fwd
        self.keys = np.zeros(0, dtype=np.int64)  # sorted pair codes s * nr + t
        self.key_ids = np.zeros(0, dtype=np.int64)
        self.ptr = _Growing(np.int64)
        self.ptr.extend(np.zeros(1, dtype=np.int64))
        self.edge = _Growing(np.int32)
        self.frac = _Growing(np.float64)
        self.lat = _Growing(np.float64)

    class _Rows:
        """Distances from source routers (rows computed on demand, kept in a buffer that
        doubles when full). Routing costs are integers: float32 holds them exactly (up to
        2**24) and halves the memory the pair DAG searches stream through."""

        def __init__(self, matrix):
            self.matrix = matrix
            self.index: dict[int, int] = {}
            self.buffer = np.zeros((16, matrix.shape[0]), dtype=np.float32)

        @property
        def dist(self) -> np.ndarray:
            return self.buffer[:len(self.index)]

        def rows(self, sources: np.ndarray) -> np.ndarray:
            new = [s for s in dict.fromkeys(sources.tolist()) if s not in self.index]
            if new:
                dist = np.atleast_2d(dijkstra(self.matrix, indices=np.array(new, dtype=np.int64)))
                used = len(self.index)
                if used + len(new) > len(self.buffer):
                    grown = np.zeros((max(used + len(new), 2 * len(self.buffer)), self.buffer.shape[1]),
                                     dtype=np.float32)
                    grown[:used] = self.buffer[:used]
                    self.buffer = grown
                self.buffer[used:used + len(new)] = dist
                for s in new:
                    self.index[s] = len(self.index)
            return np.array([self.index[s] for s in sources.tolist()], dtype=np.int64)

    def pair_ids(self, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Ids of the router pairs ``s -> t`` (``s != t``), their DAGs computed if new."""
        codes = s * self.nr + t
        pos = np.searchsorted(self.keys, codes)
        if len(self.keys):
            found = (pos < len(self.keys)) & (self.keys[np.minimum(pos, len(self.keys) - 1)] == codes)
        else:
            found = np.zeros(len(codes), dtype=bool)
        if not found.all():
            missing = np.unique(codes[~found])
            step = max(1, _BATCH_ELEMENTS // self.nr)
            for at in range(0, len(missing), step):
                part = missing[at:at + step]
                self._add(part // self.nr, part % self.nr)
            pos = np.searchsorted(self.keys, codes)
        return self.key_ids[pos]

    def _add(self, s: np.ndarray, t: np.ndarray) -> None:
        comp, nr = self.comp, self.nr
        eu, ev, ecost = comp.eu, comp.ev, comp.ecost.astype(np.float32)
        rs, rt = self.fwd.rows(s), self.bwd.rows(t)  # before reading .dist: they may grow it
        ds, dt = self.fwd.dist[rs], self.bwd.dist[rt]
        n = len(s)
        total = ds[np.arange(n), t]
        with np.errstate(invalid="ignore"):
            on = ds + dt == total[:, None]  # routers on a shortest s -> t path
        on_flat = on.ravel()
        codes = np.flatnonzero(on_flat)  # (pair, router) on a path, ascending: compact ids
        p, u = codes // nr, codes % nr
        keep = u != t[p]  # the destination's out-links lead nowhere on its paths
        p, u = p[keep], u[keep]
        lens = self.out_ptr[u + 1] - self.out_ptr[u]
        offsets = np.cumsum(lens) - lens
        link = self.out_links[np.repeat(self.out_ptr[u] - offsets, lens) + np.arange(int(lens.sum()))]
        p = np.repeat(p, lens)
        keep = on_flat[p * nr + ev[link]]
        p, link = p[keep], link[keep]
        level = ds[p, eu[link]]
        keep = level + ecost[link] == ds[p, ev[link]]
        p, link, level = p[keep], link[keep], level[keep]
        tail = np.searchsorted(codes, p * nr + eu[link])
        head = np.searchsorted(codes, p * nr + ev[link])
        order = np.lexsort((link, level))
        p, link, tail, head, level = p[order], link[order], tail[order], head[order], level[order]
        cuts = np.flatnonzero(np.diff(level)) + 1
        segments = list(zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(p)].tolist()))
        m = len(codes)
        source = np.searchsorted(codes, np.arange(n) * nr + s)
        sink = np.searchsorted(codes, np.arange(n) * nr + t)
        sigma = np.zeros(m)  # shortest paths from s, inside the DAG
        sigma[source] = 1.0
        lat = np.full(m, -np.inf)  # longest latency of a shortest path from s
        lat[source] = 0.0
        elat = comp.elat[link]
        # per member of a twin class: a head is reached from every member of its tail's class
        m_tail, m_head = comp.mul_tail[link], comp.mul_head[link]
        for a, z in segments:  # tails by distance from s: each is final when reached
            sigma += np.bincount(head[a:z], weights=m_tail[a:z] * sigma[tail[a:z]], minlength=m)
            np.maximum.at(lat, head[a:z], lat[tail[a:z]] + elat[a:z])
        tau = np.zeros(m)  # shortest paths to t
        tau[sink] = 1.0
        for a, z in reversed(segments):  # heads of a segment are one level further
            tau += np.bincount(tail[a:z], weights=m_head[a:z] * tau[head[a:z]], minlength=m)
        # share of all the parallel links a router-level link stands for
        frac = (m_tail * m_head) * sigma[tail] * tau[head] / sigma[sink[p]]
        order = np.lexsort((link, p))
        p, link, frac = p[order], link[order], frac[order]
        first = len(self.lat.view)
        self.ptr.extend(self.ptr.view[-1] + np.cumsum(np.bincount(p, minlength=n)))
        self.edge.extend(link.astype(np.int32))
        self.frac.extend(frac)
        self.lat.extend(lat[sink])
        ids = np.arange(first, first + n, dtype=np.int64)
        keys = np.concatenate((self.keys, s * nr + t))
        key_ids = np.concatenate((self.key_ids, ids))
        order = np.argsort(keys, kind="stable")
        self.keys, self.key_ids = keys[order], key_ids[order]

    def load(self, ids: np.ndarray, amount: np.ndarray, label: np.ndarray, nlabels: int) -> np.ndarray:
        """``[label, link]`` load of the pairs ``ids`` carrying ``amount`` each."""
        ptr = self.ptr.view
        starts = ptr[ids]
        lens = ptr[ids + 1] - starts
        total = int(lens.sum())
        offsets = np.cumsum(lens) - lens
        idx = np.repeat(starts - offsets, lens) + np.arange(total, dtype=np.int64)
        links = self.edge.view[idx]
        weight = self.frac.view[idx] * np.repeat(amount, lens)
        n_links = len(self.comp.eu)
        if nlabels == 1:
            return np.bincount(links, weights=weight, minlength=n_links)[None, :]
        key = np.repeat(label, lens) * n_links + links
        return np.bincount(key, weights=weight, minlength=nlabels * n_links).reshape(nlabels, n_links)


def route(comp: CompiledGraph, src: np.ndarray, dst: np.ndarray, amount: np.ndarray,
           label: np.ndarray | None = None, nlabels: int = 1):
    """Per label, ``(max over links of load / capacity, max path latency)`` of concurrent
    flows (device indices ``src -> dst`` carrying ``amount`` each), ECMP over min-cost
    paths; loads are summed over the flows of one label only."""
    if label is None:
        label = np.zeros(len(src), dtype=np.int64)
    keep = src != dst
    src, dst, amount, label = src[keep], dst[keep], amount[keep], label[keep]
    ratio = np.zeros(nlabels)
    latency = np.zeros(nlabels)
    if src.size == 0:
        return ratio, latency
    n_dev = len(comp.devices)
    with np.errstate(divide="ignore", invalid="ignore"):
        for ends, cap in ((src, comp.up_cap), (dst, comp.down_cap)):
            on = comp.leaf[ends]
            if on.any():
                use = np.bincount(label[on] * n_dev + ends[on], weights=amount[on],
                                  minlength=nlabels * n_dev).reshape(nlabels, n_dev)
                ratio = np.maximum(ratio, (use / cap).max(axis=1))
    access_lat = (np.where(comp.leaf[src], comp.up_lat[src], 0.0)
                  + np.where(comp.leaf[dst], comp.down_lat[dst], 0.0))
    a, b = comp.router_of[src], comp.router_of[dst]
    cross = a != b
    flow_lat = access_lat
    if cross.any():
        routes = comp.routing()
        nr = routes.nr
        codes = (label[cross] * nr + a[cross]) * nr + b[cross]
        unique, inverse = np.unique(codes, return_inverse=True)
        amounts = np.bincount(inverse, weights=amount[cross])
        pair_label, pair = unique // (nr * nr), unique % (nr * nr)
        with comp.lock:  # the store may grow (and move) while another thread reads it
            ids = routes.pair_ids(pair // nr, pair % nr)
            load = routes.load(ids, amounts, pair_label, nlabels)
            pair_lat = routes.lat.view[ids]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.maximum(ratio, (load / comp.ecap).max(axis=1))
        flow_lat = access_lat.copy()
        flow_lat[cross] += pair_lat[inverse.ravel()]
    np.maximum.at(latency, label, flow_lat)
    return ratio, latency


def group_rows(groups) -> np.ndarray:
    """Groups as a 2-D int64 array, one group per row."""
    return np.atleast_2d(np.asarray(groups, dtype=np.int64))


def _check_indices(comp, arr) -> None:
    if arr.size and (arr.min() < 0 or arr.max() >= len(comp.devices)):
        raise SpecError(f"device index = {int(arr.max() if arr.max() >= len(comp.devices) else arr.min())}: "
                        f"out of range 0..{len(comp.devices) - 1}")


def _cached(graph, kind: str, arr: np.ndarray, compute):
    comp = compile_graph(graph)
    _check_indices(comp, arr)
    key = (kind, arr.shape, arr.tobytes())
    if key not in comp.cache:
        comp.cache[key] = compute(comp, arr)
    return comp.cache[key]


def _first(ratio_lat) -> tuple[float, float]:
    ratio, lat = ratio_lat
    return float(ratio[0]), float(lat[0])


def route_one(comp: CompiledGraph, src: np.ndarray, dst: np.ndarray, amount: np.ndarray) -> tuple[float, float]:
    """``(max over links of load / capacity, max path latency)`` of one set of concurrent
    flows (:func:`route` with a single label)."""
    return _first(route(comp, src, dst, amount))


def ring_collective(graph, groups) -> tuple[float, float]:
    """``(alpha, beta)`` of a ring reduce-scatter (or all-gather) of n bytes run by every
    row of ``groups`` (device indices, ring order = row order) concurrently."""
    def compute(comp, g):
        k = g.shape[1]
        if k < 2:
            return 0.0, 0.0
        src, dst = g.ravel(), np.roll(g, -1, axis=1).ravel()
        ratio, lat = route_one(comp, src, dst, np.ones(src.size))
        return (k - 1) * lat, (k - 1) / k * ratio
    return _cached(graph, "ring", group_rows(groups), compute)


def all_to_all(graph, groups) -> tuple[float, float]:
    """``(alpha, beta)`` of an all-to-all in which each rank of every group sends n bytes
    in total (``n / k`` to each member, its own share staying put), all groups at once."""
    def compute(comp, g):
        k = g.shape[1]
        if k < 2:
            return 0.0, 0.0
        src = np.repeat(g, k, axis=1).ravel()
        dst = np.tile(g, (1, k)).ravel()
        return route_one(comp, src, dst, np.full(src.size, 1.0 / k))[::-1]
    return _cached(graph, "a2a", group_rows(groups), compute)


def point_to_point(graph, pairs) -> tuple[float, float]:
    """``(alpha, beta)`` of every ``(src, dst)`` row of ``pairs`` sending n bytes at once."""
    def compute(comp, p):
        if p.shape[1] != 2:
            raise SpecError(f"pairs shape = {p.shape}: must be (m, 2)")
        return route_one(comp, p[:, 0], p[:, 1], np.ones(len(p)))[::-1]
    return _cached(graph, "p2p", group_rows(pairs), compute)


def point_to_point_sets(graph, pairs, labels, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha[count], beta[count])``: for every label ``j < count``, the pairs of
    ``pairs`` labelled ``j`` send n bytes each at once (and contend with each other only);
    the sets run one after another. Labels without pairs cost nothing."""
    p = group_rows(pairs)
    labels = np.asarray(labels, dtype=np.int64)
    comp = compile_graph(graph)
    _check_indices(comp, p)
    ratio, lat = route(comp, p[:, 0], p[:, 1], np.ones(len(p)), labels, count)
    return lat, ratio
