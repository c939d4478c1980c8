"""The validated routing form of a network graph (:class:`CompiledGraph`), built once per
read-only graph: devices in index order, routers (single-homed devices folded into their
switch), router-level links with their capacity, latency and cost, and exact twin
switches merged (see :mod:`nest.network.routing` for the attributes a graph carries).

Validation reads the graph with a few passes over its link attributes; the first bad
node or link (in the graph's order) is reported as one line naming field and value.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError
from ..frozen_graph import read_only_graph
from ..units import GB
from . import kernels
from .structure import Structure, structure_of

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


def _check_link(u, v, attrs) -> None:
    """Raise the SpecError of one bad link (the checks in the order they are reported)."""
    where = f"link ({u!r}, {v!r})"
    extra = set(attrs) - EDGE_KEYS
    if extra:
        k = min(extra)
        raise SpecError(f"{where}.{k} = {attrs[k]!r}: unknown key")
    if u == v:
        raise SpecError(f"{where} = self-loop: not allowed")
    _link_value(attrs, "bandwidth", where)
    _link_value(attrs, "latency", where, 0.0)
    cost = attrs.get("cost", 1)
    if not (isinstance(cost, int) and not isinstance(cost, bool) and cost > 0):
        raise SpecError(f"{where}.cost = {cost!r}: must be a positive integer")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _column(attrs: list, key: str, default: float | None):
    """Values of ``key`` (its file form scaled when the plain key is absent) over links
    with the same keys, and which are unusable numbers (missing without a default, not a
    number, not finite)."""
    n = len(attrs)
    if not attrs:
        return np.zeros(0), np.zeros(0, dtype=bool)
    keys = attrs[0]
    base, scale = (key, 1.0) if key in keys else next(
        ((fk, s) for fk, (k, s) in _UNIT.items() if k == key and fk in keys), (None, 1.0))
    if base is None:
        return np.full(n, default if default is not None else np.nan), np.full(n, default is None)
    raw = [a[base] for a in attrs]
    if set(map(type, raw)) <= {int, float}:  # plain numbers (the usual case): no test per value
        ok = np.ones(n, dtype=bool)
        values = np.array(raw, dtype=float)
    else:
        ok = np.fromiter((_number(x) for x in raw), dtype=bool, count=n)
        values = np.array([x if o else np.nan for x, o in zip(raw, ok)], dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~ok | ~np.isfinite(values)
        return values * scale, bad


def _edges(graph) -> list:
    """``graph.edges(data=True)`` as a list, read straight off the adjacency dicts (the same
    order: an undirected link once, from the node that comes first)."""
    adj = graph._adj
    if graph.is_directed():
        return [(u, v, d) for u, nbrs in adj.items() for v, d in nbrs.items()]
    out, seen = [], set()
    for u, nbrs in adj.items():
        out.extend((u, v, d) for v, d in nbrs.items() if v not in seen)
        seen.add(u)
    return out


def _links(graph, index: dict) -> tuple[np.ndarray, ...]:
    """Tail, head (node positions), capacity, latency and cost of every link in the
    graph's order; SpecError for the first bad one."""
    edges = _edges(graph)
    n = len(edges)
    u = np.fromiter((index[a] for a, _, _ in edges), dtype=np.int64, count=n)
    v = np.fromiter((index[b] for _, b, _ in edges), dtype=np.int64, count=n)
    cap, lat, cost = np.zeros(n), np.zeros(n), np.zeros(n)
    bad = u == v
    groups: dict[tuple, list[int]] = {}
    for i, (_, _, attrs) in enumerate(edges):
        groups.setdefault(tuple(attrs), []).append(i)
    for keys, members in groups.items():
        at = np.array(members, dtype=np.int64)
        attrs = [edges[i][2] for i in members]
        if set(keys) - EDGE_KEYS:
            bad[at] = True
            continue
        c, c_bad = _column(attrs, "bandwidth", None)
        t, t_bad = _column(attrs, "latency", 0.0)
        raw = [a.get("cost", 1) for a in attrs]
        if set(map(type, raw)) == {int} and -(1 << 62) < min(raw) and max(raw) < 1 << 62:
            k_ok = np.array(raw, dtype=np.int64) > 0
        else:
            k_ok = np.fromiter((isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in raw),
                               dtype=bool, count=len(raw))
        with np.errstate(invalid="ignore"):
            bad[at] |= c_bad | ~(c > 0) | t_bad | ~(t >= 0) | ~k_ok
        cap[at], lat[at] = c, t
        cost[at] = [x if ok else 1 for x, ok in zip(raw, k_ok)]
    if bad.any():
        a, b, attrs = edges[int(np.argmax(bad))]
        _check_link(a, b, attrs)
        raise AssertionError(f"link ({a!r}, {b!r}) flagged but passes the checks")  # pragma: no cover
    return u, v, cap, lat, cost


@dataclass(frozen=True)
class CsrMatrix:
    """A compressed sparse row matrix as :class:`scipy.sparse.csr_matrix` holds it
    (``data``, ``indices``, ``indptr``, ``shape``: each row's entries by column, ascending),
    made without importing ``scipy.sparse`` (:func:`sparse_matrix`)."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple

    def to_scipy(self):
        """The same matrix as a :class:`scipy.sparse.csr_matrix`."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def sparse_matrix(data: np.ndarray, row: np.ndarray, col: np.ndarray, shape: tuple):
    """``scipy.sparse.csr_matrix((data, (row, col)), shape=shape)``'s arrays: when no
    ``(row, col)`` repeats (a graph's links), a :class:`CsrMatrix` with the same data,
    indices and row pointers (entries sorted by row, then column: scipy's canonical
    form; nothing to sum), without importing scipy (0.15 s); otherwise scipy's matrix
    (which sums the repeats)."""
    data, row, col = np.asarray(data), np.asarray(row, dtype=np.int64), np.asarray(col, dtype=np.int64)
    order = np.lexsort((col, row))
    r, c = row[order], col[order]
    if len(r) > 1 and ((r[1:] == r[:-1]) & (c[1:] == c[:-1])).any():
        import scipy.sparse as sp

        return sp.csr_matrix((data, (row, col)), shape=shape)
    index = np.int32 if max(shape) < 1 << 31 and len(r) < 1 << 31 else np.int64
    indptr = np.zeros(shape[0] + 1, dtype=index)
    np.cumsum(np.bincount(r, minlength=shape[0]), out=indptr[1:])
    return CsrMatrix(data[order], c.astype(index), indptr, tuple(shape))


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
    cost_matrix: CsrMatrix
    cache: dict
    directed: bool = False
    routes: object = None  # the pair routes (nest.network.paths), made on first use
    mul_tail: np.ndarray | None = None  # per router-level link: twins its tail / head stands for
    mul_head: np.ndarray | None = None
    link_cap: np.ndarray | None = None  # capacity of one of the parallel real links
    structure: Structure | None = None  # what the generator knows (nest.network.structure)
    mult: np.ndarray | None = None  # per router: size of the twin class it stands for, 0 if merged
    # guards the routing store, which grows in place (plans may run in several threads)
    lock: threading.RLock = field(default_factory=threading.RLock)


# read-only graph -> its compiled form (weak keys: entries die with their graph)
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _check_nodes(graph) -> list:
    """Devices in index order; SpecError for unknown node keys or bad indices."""
    for node, attrs in graph.nodes(data=True):
        if not NODE_KEYS.issuperset(attrs):
            k = min(set(attrs) - NODE_KEYS)
            raise SpecError(f"node {node!r}.{k} = {attrs[k]!r}: unknown key")
    devices = [n for n, a in graph.nodes(data=True) if a.get("kind") == "device"]
    if not devices:
        raise SpecError("topology devices = []: no node has kind=device")
    nodes = graph.nodes
    if all("index" in nodes[d] for d in devices):
        idx = [nodes[d]["index"] for d in devices]
        if sorted(idx) != list(range(len(devices))):
            raise SpecError(f"device index = {sorted(idx)[:5]}...: must be 0..{len(devices) - 1}")
        devices = [d for _, d in sorted(zip(idx, devices))]
    return devices


def _check_connected(graph, nodes: list, u: np.ndarray, v: np.ndarray) -> None:
    n = len(nodes)
    # weakly connected: every node reached from node 0 over the links taken both ways
    both = sparse_matrix(np.ones(2 * len(u)), np.r_[u, v], np.r_[v, u], (n, n))
    if n > 1 and not np.isfinite(kernels.dijkstra(both, [0])).all():
        import networkx as nx

        und = graph.to_undirected(as_view=True) if graph.is_directed() else graph
        comps = sorted(nx.connected_components(und), key=len)
        raise SpecError(f"topology = {len(comps)} components: not connected "
                        f"(e.g. {sorted(map(str, comps[0]))[:3]} is cut off)")


def compile_graph(graph) -> CompiledGraph:
    """The validated routing form of ``graph`` (:class:`CompiledGraph`, with the caches of
    every price on it), kept per read-only graph: a graph the caller may change is
    compiled as its :func:`~nest.frozen_graph.read_only_graph`, so a change is never priced on
    stale state."""
    graph = read_only_graph(graph)
    cached = _COMPILED.get(graph)
    if cached is not None:
        return cached
    devices = _check_nodes(graph)
    nodes = list(graph.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    directed = graph.is_directed()
    u, v, cap, lat, cost = _links(graph, index)
    _check_connected(graph, nodes, u, v)
    if not directed:  # each link in both directions
        u, v = np.concatenate((u, v)), np.concatenate((v, u))
        cap, lat, cost = np.tile(cap, 2), np.tile(lat, 2), np.tile(cost, 2)
    n = len(nodes)
    # single-homed devices fold into their switch (they cannot be on a transit path): one
    # neighbour, a switch, linked both ways
    dev = np.array([index[d] for d in devices], dtype=np.int64)
    is_dev = np.zeros(n, dtype=bool)
    is_dev[dev] = True
    pairs = np.unique(np.minimum(u, v) * n + np.maximum(u, v))  # undirected neighbours
    low, high = pairs // n, pairs % n
    degree = np.bincount(low, minlength=n) + np.bincount(high, minlength=n)
    other = np.zeros(n, dtype=np.int64)
    other[low] = high
    other[high] = low
    arc = {code: i for i, code in enumerate((u * n + v).tolist())}
    folded = np.zeros(n, dtype=bool)
    up = np.full(len(devices), -1)
    down = np.full(len(devices), -1)
    for i, d in enumerate(dev.tolist()):
        s = int(other[d])
        if degree[d] == 1 and not is_dev[s] and d * n + s in arc and s * n + d in arc:
            folded[d] = True
            up[i], down[i] = arc[d * n + s], arc[s * n + d]
    router_nodes = np.flatnonzero(~folded)
    rindex = np.full(n, -1, dtype=np.int64)
    rindex[router_nodes] = np.arange(len(router_nodes))
    leaf = folded[dev]
    router_of = rindex[np.where(leaf, other[dev], dev)]
    up_cap = np.where(leaf, cap[up], np.inf)
    down_cap = np.where(leaf, cap[down], np.inf)
    up_lat = np.where(leaf, lat[up], 0.0)
    down_lat = np.where(leaf, lat[down], 0.0)
    keep = ~folded[u] & ~folded[v]
    ru, rv, cap, lat, cost = rindex[u[keep]], rindex[v[keep]], cap[keep], lat[keep], cost[keep]
    nr = len(router_nodes)
    mult = _twins(nr, ru, rv, cap, lat, cost, np.unique(router_of))
    # a twin class keeps its first member, whose links stand for the class's parallel links
    keep = (mult[ru] > 0) & (mult[rv] > 0)
    order = np.lexsort((ru[keep], rv[keep]))
    eu, ev = ru[keep][order], rv[keep][order]
    link_cap, elat, ecost = cap[keep][order], lat[keep][order], cost[keep][order]
    mul_tail, mul_head = mult[eu].astype(float), mult[ev].astype(float)
    ecap = link_cap * mul_tail * mul_head
    cost_matrix = sparse_matrix(ecost, eu, ev, (nr, nr))
    routers = [nodes[i] for i in router_nodes.tolist()]
    comp = CompiledGraph(devices, router_of, leaf, up_cap, down_cap, up_lat, down_lat, routers,
                         eu, ev, ecost, ecap, elat, cost_matrix, {}, directed, None, mul_tail, mul_head,
                         link_cap, structure_of(graph), mult)
    if directed:  # every device must reach every other one
        src = np.unique(router_of)
        dist = kernels.dijkstra(cost_matrix, src)
        bad = ~np.isfinite(dist[:, src])
        if bad.any():
            s, t = np.argwhere(bad)[0]
            raise SpecError(f"topology device route = {routers[src[s]]!r} -> {routers[src[t]]!r}: unreachable")
    return _COMPILED.setdefault(graph, comp)  # one compiled form even if threads race here


def _twins(nr: int, u: np.ndarray, v: np.ndarray, cap: np.ndarray, lat: np.ndarray, cost: np.ndarray,
           hosting: np.ndarray) -> np.ndarray:
    """Per router: the size of its twin class if it represents it (its first member), 0 if
    another member does. Twins are routers that host no device and have the same
    neighbours over links of the same capacity, latency and cost in both directions
    (e.g. the core switches of one fat-tree core group, the spines of a leaf-spine
    network): min-cost routing treats them alike, so ECMP splits evenly over them and
    each of their links carries the same load. Routing then runs on one member per
    class whose links stand for the class's parallel links (capacities summed, path
    counts multiplied by the class sizes), which is exact and much smaller."""
    mult = np.ones(nr, dtype=np.int64)
    candidate = np.ones(nr, dtype=bool)
    candidate[hosting] = False
    # one signature row per link end at a candidate: (router, neighbour, direction, cap, lat, cost)
    rows = [np.stack((u, v, np.zeros_like(u)), axis=1), np.stack((v, u, np.ones_like(u)), axis=1)]
    vals = np.concatenate([np.stack((cap, lat, cost), axis=1)] * 2)
    ends = np.concatenate(rows)
    mine = candidate[ends[:, 0]]
    ends, vals = ends[mine], vals[mine]
    if not len(ends):
        return mult
    order = np.lexsort((vals[:, 2], vals[:, 1], vals[:, 0], ends[:, 2], ends[:, 1], ends[:, 0]))
    ends, vals = ends[order], vals[order]
    routers, starts = np.unique(ends[:, 0], return_index=True)
    stops = np.r_[starts[1:], len(ends)]
    body = np.concatenate((ends[:, 1:].astype(np.float64), vals), axis=1)
    classes: dict[bytes, list[int]] = {}
    for r, a, b in zip(routers.tolist(), starts.tolist(), stops.tolist()):
        classes.setdefault(body[a:b].tobytes(), []).append(r)
    for members in classes.values():
        if len(members) > 1:
            mult[members] = 0
            mult[members[0]] = len(members)
    return mult


def validate(graph) -> None:
    """Raise SpecError (one line, naming field and value) unless ``graph`` is a usable
    topology: not a multigraph, at least one device, known attribute keys, positive finite
    bandwidths, finite non-negative latencies, positive integer costs, connected, and
    every device reaching every other device (directed graphs)."""
    compile_graph(graph)


def devices(graph) -> list:
    """Device node ids in device-index order."""
    return list(compile_graph(graph).devices)
