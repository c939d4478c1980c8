"""Arbitrary networks as graphs: loading, generators, contention-aware collective prices.

A network is a networkx graph whose nodes are devices (``kind="device"``) or switches
(any other node; ``kind="switch"`` by convention) and whose edges are links with

* ``bandwidth``: bytes/s in each direction (``bandwidth_GBps`` in files, 1e9 bytes/s);
  a :class:`networkx.DiGraph` gives each direction its own capacity;
* ``latency``: seconds (``latency_us`` in files), default 0;
* ``cost``: positive integer routing metric, default 1 (hop count).

Devices are numbered ``0..N-1`` by their ``index`` attribute when every device has one,
otherwise in node order; communicator groups are rows of such indices (as in
:mod:`nest.network`). A device may name the machine it sits in (``host``; default: the
device itself), which launchers need (``nest plan --emit hostfile``). Graph attributes
``name`` and ``device`` (a device preset) name a cluster built from a file.

Pricing. Every flow is routed over all minimum-``cost`` paths, its bytes split evenly
over those paths (ECMP); the bytes of all concurrent flows are added per directed link,
and a communication step takes ``max over links (load / capacity) + the longest path
latency`` of its flows. Devices with a single link hang off their switch and are folded
into it for routing; devices with several links (torus chips, multi-homed GPUs) route.
The collectives return ``(alpha, beta)`` with ``time = alpha + beta * bytes`` like
:class:`nest.network.GroupShape`:

* :func:`ring_collective`: reduce-scatter (= all-gather; all-reduce is twice) of n bytes
  as a ring over each group's rows in the given order: ``k - 1`` steps in which every
  rank sends ``n / k`` bytes to the next, all groups at once.
* :func:`all_to_all`: each rank sends ``n / k`` bytes to every other member, all at once.
* :func:`point_to_point`: every pair sends n bytes, all pairs at once.

Results are cached per topology and group set, so repeated queries are dictionary hits.
Routing state is kept per graph: every router pair's shortest-path DAG with its ECMP
shares is built once (:class:`_Routes`) and a family of flows costs a gather over the
DAGs it uses; transit switches that are exact twins (same neighbours, same links: the
core switches of one fat-tree core group, the spines of a leaf-spine network) are
merged first, which ECMP makes exact.

Planning on a graph (:func:`graph_cluster`, :class:`GraphNetwork`): ranks are placed on
devices in a locality-preserving order (:func:`locality_order`, hierarchical clustering)
and every communicator family of a layout is priced with all its groups at once.
"""

from __future__ import annotations

import json
import math
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
try:  # sparse shortest paths; the optional extra nest-planner[graphs]
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError("nest.topology needs scipy: pip install 'nest-planner[graphs]'") from error

from .errors import SpecError, short_repr
from .specs import ClusterSpec

GB = 1e9
NODE_KEYS = {"kind", "index", "name", "host"}
EDGE_KEYS = {"bandwidth", "bandwidth_GBps", "latency", "latency_us", "cost"}
_UNIT = {"bandwidth_GBps": ("bandwidth", GB), "latency_us": ("latency", 1e-6)}


# -- loading ----------------------------------------------------------------------------


def load_graph(path) -> nx.Graph:
    """A topology from node-link JSON (``.json``), GraphML (``.graphml``) or a YAML edge
    list (``.yaml``/``.yml``: ``nodes: [{id, kind, index?, host?}]``, ``links: [{a, b,
    bandwidth_GBps, latency_us, reverse_bandwidth_GBps?, cost?}]``, optional ``name`` and
    ``device``), validated (:func:`validate`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"topology = {str(path)!r}: {exc.strerror}") from None
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"topology = {str(path)!r}: not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise SpecError(f"topology = {str(path)!r}: must hold a node-link JSON object")
        _check_records(data.get("nodes", []), "nodes", "id")
        _check_unique([n.get("id") for n in data.get("nodes", [])], "nodes.id")
        edges_key = "links" if "links" in data else "edges"
        try:
            graph = nx.node_link_graph(data, edges=edges_key)
        except (KeyError, TypeError, ValueError, nx.NetworkXError) as exc:
            raise SpecError(f"topology = {str(path)!r}: not node-link JSON: {type(exc).__name__} {exc}") from None
    elif suffix == ".graphml":
        from xml.etree.ElementTree import ParseError

        try:
            ids = [el.get("id") for el in _graphml_nodes(text)]
        except ParseError as exc:
            raise SpecError(f"topology = {str(path)!r}: not GraphML: {exc}") from None
        _check_unique(ids, "node id")
        try:
            graph = nx.parse_graphml(text)
        except Exception as exc:  # noqa: BLE001 - networkx raises several types
            raise SpecError(f"topology = {str(path)!r}: not GraphML: {str(exc).splitlines()[0]}") from None
    elif suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise SpecError(f"topology = {str(path)!r}: not YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise SpecError(f"topology = {str(path)!r}: must hold a mapping with nodes and links")
        graph = _from_edge_list(data)
    else:
        raise SpecError(f"topology = {str(path)!r}: unknown format (use .json, .graphml or .yaml)")
    validate(graph)
    return graph


def _graphml_nodes(text: str):
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)
    return [el for el in root.iter() if el.tag.endswith("}node") or el.tag == "node"]


def _check_records(records, what: str, key: str | None = None) -> None:
    """``records`` must be a list of mappings, each with ``key`` when one is given."""
    if not isinstance(records, list):
        raise SpecError(f"{what} = {short_repr(records)}: must be a list")
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise SpecError(f"{what}[{i}] = {short_repr(record)}: must be a mapping")
        if key is not None and key not in record:
            raise SpecError(f"{what}[{i}].{key}: missing")


def _check_unique(ids, what: str) -> None:
    seen = set()
    for i in ids:
        if i in seen:
            raise SpecError(f"{what} = {i!r}: duplicate id")
        seen.add(i)


def _from_edge_list(data: dict) -> nx.Graph:
    unknown = set(data) - {"nodes", "links", "name", "device"}
    if unknown:
        raise SpecError(f"topology key = {sorted(unknown)[0]!r}: unknown (expected nodes, links, name, device)")
    nodes = data.get("nodes") or []
    _check_records(nodes, "nodes", "id")
    _check_unique([n.get("id") for n in nodes], "nodes.id")
    links = data.get("links") or []
    _check_records(links, "links")
    directed = any("reverse_bandwidth_GBps" in e or "reverse_bandwidth" in e for e in links)
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.graph.update({k: data[k] for k in ("name", "device") if k in data})
    for n in nodes:
        extra = set(n) - NODE_KEYS - {"id"}
        if extra:
            raise SpecError(f"nodes[{n.get('id')!r}].{sorted(extra)[0]} = "
                            f"{n[sorted(extra)[0]]!r}: unknown key")
        graph.add_node(n["id"], **{k: v for k, v in n.items() if k != "id"})
    for i, e in enumerate(links):
        extra = set(e) - EDGE_KEYS - {"a", "b", "reverse_bandwidth", "reverse_bandwidth_GBps"}
        if extra:
            raise SpecError(f"links[{i}].{sorted(extra)[0]} = {e[sorted(extra)[0]]!r}: unknown key")
        if "a" not in e or "b" not in e:
            raise SpecError(f"links[{i}] = {e!r}: needs 'a' and 'b'")
        for end in (e["a"], e["b"]):
            if end not in graph:
                raise SpecError(f"links[{i}] endpoint = {end!r}: not a declared node")
        attrs = {k: v for k, v in e.items() if k in EDGE_KEYS}
        graph.add_edge(e["a"], e["b"], **attrs)
        if directed:
            back = dict(attrs)
            if "reverse_bandwidth_GBps" in e:
                back.pop("bandwidth", None)
                back["bandwidth_GBps"] = e["reverse_bandwidth_GBps"]
            elif "reverse_bandwidth" in e:
                back.pop("bandwidth_GBps", None)
                back["bandwidth"] = e["reverse_bandwidth"]
            graph.add_edge(e["b"], e["a"], **back)
    return graph


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
    _compile(graph)


# -- compiled form ----------------------------------------------------------------------


@dataclass
class _Compiled:
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


_COMPILED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _compile(graph) -> _Compiled:
    if not isinstance(graph, nx.Graph):
        raise SpecError(f"topology = {type(graph).__name__}: must be a networkx graph")
    cached = _COMPILED.get(graph)
    if cached is not None:
        return cached
    if graph.is_multigraph():
        raise SpecError("topology = multigraph: merge parallel links into one (add bandwidths)")
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
    comp = _Compiled(devices, router_of, leaf, up_cap, down_cap, up_lat, down_lat, routers,
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
    return list(_compile(graph).devices)


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

    def __init__(self, comp: _Compiled):
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


def _route(comp: _Compiled, src: np.ndarray, dst: np.ndarray, amount: np.ndarray,
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


def _as_groups(groups) -> np.ndarray:
    return np.atleast_2d(np.asarray(groups, dtype=np.int64))


def _check_indices(comp, arr) -> None:
    if arr.size and (arr.min() < 0 or arr.max() >= len(comp.devices)):
        raise SpecError(f"device index = {int(arr.max() if arr.max() >= len(comp.devices) else arr.min())}: "
                        f"out of range 0..{len(comp.devices) - 1}")


def _cached(graph, kind: str, arr: np.ndarray, compute):
    comp = _compile(graph)
    _check_indices(comp, arr)
    key = (kind, arr.shape, arr.tobytes())
    if key not in comp.cache:
        comp.cache[key] = compute(comp, arr)
    return comp.cache[key]


def _first(ratio_lat) -> tuple[float, float]:
    ratio, lat = ratio_lat
    return float(ratio[0]), float(lat[0])


def ring_collective(graph, groups) -> tuple[float, float]:
    """``(alpha, beta)`` of a ring reduce-scatter (or all-gather) of n bytes run by every
    row of ``groups`` (device indices, ring order = row order) concurrently."""
    def compute(comp, g):
        k = g.shape[1]
        if k < 2:
            return 0.0, 0.0
        src, dst = g.ravel(), np.roll(g, -1, axis=1).ravel()
        ratio, lat = _first(_route(comp, src, dst, np.ones(src.size)))
        return (k - 1) * lat, (k - 1) / k * ratio
    return _cached(graph, "ring", _as_groups(groups), compute)


def all_to_all(graph, groups) -> tuple[float, float]:
    """``(alpha, beta)`` of an all-to-all in which each rank of every group sends n bytes
    in total (``n / k`` to each member, its own share staying put), all groups at once."""
    def compute(comp, g):
        k = g.shape[1]
        if k < 2:
            return 0.0, 0.0
        src = np.repeat(g, k, axis=1).ravel()
        dst = np.tile(g, (1, k)).ravel()
        return _swap(_first(_route(comp, src, dst, np.full(src.size, 1.0 / k))))
    return _cached(graph, "a2a", _as_groups(groups), compute)


def point_to_point(graph, pairs) -> tuple[float, float]:
    """``(alpha, beta)`` of every ``(src, dst)`` row of ``pairs`` sending n bytes at once."""
    def compute(comp, p):
        if p.shape[1] != 2:
            raise SpecError(f"pairs shape = {p.shape}: must be (m, 2)")
        return _swap(_first(_route(comp, p[:, 0], p[:, 1], np.ones(len(p)))))
    return _cached(graph, "p2p", _as_groups(pairs), compute)


def point_to_point_sets(graph, pairs, labels, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha[count], beta[count])``: for every label ``j < count``, the pairs of
    ``pairs`` labelled ``j`` send n bytes each at once (and contend with each other only);
    the sets run one after another. Labels without pairs cost nothing."""
    p = _as_groups(pairs)
    labels = np.asarray(labels, dtype=np.int64)
    comp = _compile(graph)
    _check_indices(comp, p)
    ratio, lat = _route(comp, p[:, 0], p[:, 1], np.ones(len(p)), labels, count)
    return lat, ratio


def _swap(ratio_lat):
    ratio, lat = ratio_lat
    return lat, ratio


# -- generators -------------------------------------------------------------------------


def _device(g: nx.Graph, index: int, name=None):
    node = name if name is not None else f"d{index}"
    g.add_node(node, kind="device", index=index)
    return node


def _switch(g: nx.Graph, name):
    g.add_node(name, kind="switch")
    return name


def _tiers(value, n: int, what: str) -> tuple:
    vals = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(vals) != n:
        raise SpecError(f"{what} = {value!r}: needs {n} values")
    for v in vals:
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 1):
            raise SpecError(f"{what} = {v!r}: must be >= 1")
    return vals


def fat_tree(k: int, bandwidth: float = 50 * GB, latency: float = 1e-6,
             oversubscription=1.0, pods: int | None = None) -> nx.Graph:
    """k-ary fat tree (Al-Fares et al. 2008): ``pods`` (default k) pods of k/2 edge and
    k/2 aggregation switches, (k/2)^2 core switches, k/2 devices per edge switch; device
    links carry ``bandwidth``; edge-aggregation and aggregation-core links carry
    ``bandwidth / oversubscription[0 or 1]`` (one value or one per switch tier)."""
    if not (isinstance(k, int) and k >= 2 and k % 2 == 0):
        raise SpecError(f"fat_tree k = {k!r}: must be an even integer >= 2")
    pods = k if pods is None else pods
    if not (isinstance(pods, int) and 1 <= pods <= k):
        raise SpecError(f"fat_tree pods = {pods!r}: must be 1..{k}")
    o_edge, o_agg = _tiers(oversubscription, 2, "fat_tree oversubscription")
    h = k // 2
    g = nx.Graph(name=f"fat-tree-k{k}")
    cores = [_switch(g, f"core{i}") for i in range(h * h)]
    index = 0
    for p in range(pods):
        aggs = [_switch(g, f"agg{p}.{a}") for a in range(h)]
        for a, agg in enumerate(aggs):
            for c in range(h):
                g.add_edge(agg, cores[a * h + c], bandwidth=bandwidth / o_agg, latency=latency)
        for e in range(h):
            edge = _switch(g, f"edge{p}.{e}")
            for agg in aggs:
                g.add_edge(edge, agg, bandwidth=bandwidth / o_edge, latency=latency)
            for _ in range(h):
                g.add_edge(_device(g, index), edge, bandwidth=bandwidth, latency=latency)
                index += 1
    return g


def spine_leaf(leaves: int, devices_per_leaf: int, spines: int, bandwidth: float = 50 * GB,
               uplink_bandwidth: float | None = None, latency: float = 1e-6) -> nx.Graph:
    """Two-tier Clos: every leaf links to every spine (``uplink_bandwidth`` each, default
    ``bandwidth * devices_per_leaf / spines``: non-blocking)."""
    for name, v in (("leaves", leaves), ("devices_per_leaf", devices_per_leaf), ("spines", spines)):
        if not (isinstance(v, int) and v >= 1):
            raise SpecError(f"spine_leaf {name} = {v!r}: must be a positive integer")
    up = uplink_bandwidth if uplink_bandwidth is not None else bandwidth * devices_per_leaf / spines
    g = nx.Graph(name="spine-leaf")
    spine_nodes = [_switch(g, f"spine{s}") for s in range(spines)]
    for lf in range(leaves):
        leaf = _switch(g, f"leaf{lf}")
        for s in spine_nodes:
            g.add_edge(leaf, s, bandwidth=up, latency=latency)
        for i in range(devices_per_leaf):
            g.add_edge(_device(g, lf * devices_per_leaf + i), leaf, bandwidth=bandwidth, latency=latency)
    return g


def rail_optimized(nodes: int, gpus_per_node: int = 8, spines: int = 4,
                   nvlink_bandwidth: float = 450 * GB, nic_bandwidth: float = 50 * GB,
                   nvlink_latency: float = 3e-6, nic_latency: float = 2.5e-6) -> nx.Graph:
    """Rail-optimized cluster (DGX SuperPOD style): every node's GPUs share an NVSwitch;
    GPU i of every node links to rail leaf i; rail leaves link to every spine
    (non-blocking). NVLink links have cost 1, NIC links cost 2, so intra-node traffic
    stays on NVLink and same-rail traffic crosses one leaf."""
    g = nx.Graph(name="rail-optimized")
    rails = [_switch(g, f"rail{i}") for i in range(gpus_per_node)]
    spine_nodes = [_switch(g, f"spine{s}") for s in range(spines)]
    for r in rails:
        for s in spine_nodes:
            g.add_edge(r, s, bandwidth=nic_bandwidth * nodes / spines, latency=nic_latency, cost=2)
    for n in range(nodes):
        nvs = _switch(g, f"nvswitch{n}")
        for i in range(gpus_per_node):
            d = _device(g, n * gpus_per_node + i)
            g.nodes[d]["host"] = f"node{n}"
            g.add_edge(d, nvs, bandwidth=nvlink_bandwidth, latency=nvlink_latency / 2, cost=1)
            g.add_edge(d, rails[i], bandwidth=nic_bandwidth, latency=nic_latency, cost=2)
    return g


def torus(dims, bandwidth: float = 45 * GB, latency: float = 1e-6) -> nx.Graph:
    """2-D or 3-D torus of devices (TPU style): every chip links to its 2 neighbours per
    dimension (wrap-around), chips forward traffic; device index is row-major."""
    dims = tuple(dims)
    if len(dims) not in (2, 3) or not all(isinstance(d, int) and d >= 1 for d in dims):
        raise SpecError(f"torus dims = {dims!r}: need 2 or 3 positive integers")
    g = nx.Graph(name=f"torus-{'x'.join(map(str, dims))}")
    coords = list(np.ndindex(*dims))
    for i, c in enumerate(coords):
        _device(g, i, c)
    for c in coords:
        for axis, size in enumerate(dims):
            if size > 1:
                n = list(c)
                n[axis] = (n[axis] + 1) % size
                if tuple(n) != c:
                    g.add_edge(c, tuple(n), bandwidth=bandwidth, latency=latency)
    return g


def dragonfly(groups: int, routers: int, hosts: int, global_links: int = 1,
              bandwidth: float = 25 * GB, global_bandwidth: float | None = None,
              latency: float = 1e-6) -> nx.Graph:
    """Dragonfly (Kim et al. 2008): ``groups`` groups of ``routers`` fully connected
    routers with ``hosts`` devices each; router r of group i has ``global_links`` links to
    other groups, assigned round-robin (group pair (i, j) joined by the links numbered
    consecutively), minimal routing."""
    if groups < 1 or routers < 1 or hosts < 1:
        raise SpecError(f"dragonfly groups/routers/hosts = {(groups, routers, hosts)}: must be >= 1")
    gb = global_bandwidth if global_bandwidth is not None else bandwidth
    g = nx.Graph(name="dragonfly")
    index = 0
    for i in range(groups):
        rs = [_switch(g, f"r{i}.{r}") for r in range(routers)]
        for a in range(routers):
            for b in range(a + 1, routers):
                g.add_edge(rs[a], rs[b], bandwidth=bandwidth, latency=latency)
            for _ in range(hosts):
                g.add_edge(_device(g, index), rs[a], bandwidth=bandwidth, latency=latency)
                index += 1
    ports = [(i, r) for i in range(groups) for r in range(routers) for _ in range(global_links)]
    slot = {i: 0 for i in range(groups)}
    for i in range(groups):
        for j in range(i + 1, groups):
            a = ports[i * routers * global_links + slot[i] % (routers * global_links)]
            b = ports[j * routers * global_links + slot[j] % (routers * global_links)]
            slot[i] += 1
            slot[j] += 1
            u, v = f"r{a[0]}.{a[1]}", f"r{b[0]}.{b[1]}"
            if g.has_edge(u, v):
                g[u][v]["bandwidth"] += gb
            else:
                g.add_edge(u, v, bandwidth=gb, latency=latency)
    return g


def from_hierarchy(cluster: ClusterSpec) -> nx.Graph:
    """The hierarchical cluster as a graph whose prices equal :mod:`nest.network`.

    Tier t is its own plane (NVLink, the leaf network, the spine network are separate
    NICs/ports, as the tier formulas assume: a device has tier t's bandwidth for tier-t
    traffic whatever the other tiers do). Plane 0: one switch per tier-0 group, device
    links of ``effective_bandwidth``. Plane t >= 1: one edge switch per tier-(t-1) group
    and one switch per tier-t group; device -> edge links carry the tier's ``bandwidth``
    (the NIC), edge -> tier-switch uplinks carry ``bandwidth / oversubscription`` times the
    devices below (fanout-aggregated), so when every device of the group communicates
    each gets the tier's effective bandwidth. Latency: half the tier's latency on each
    device link, so a path across tier t has the tier's latency. Routing costs (1 in
    plane 0; 2t + 1 on device links and 1 on uplinks in plane t) make every pair use the
    innermost plane connecting it, as a tier-aware library (NCCL) does.
    """
    g = nx.Graph(name=f"{cluster.name}-graph")
    n = cluster.num_devices
    sizes = (1,) + cluster.group_sizes()
    for d in range(n):
        g.nodes[_device(g, d)]["host"] = f"node{d // sizes[1]}"
    for t, tier in enumerate(cluster.tiers):
        if tier.fanout == 1 and t > 0:
            continue
        eff = tier.effective_bandwidth
        lat = tier.latency / 2
        if t == 0:
            for d in range(n):
                s = f"t0.{d // sizes[1]}"
                _switch(g, s)
                g.add_edge(f"d{d}", s, bandwidth=eff, latency=lat, cost=1)
            continue
        below = sizes[t]
        for d in range(n):
            edge = f"t{t}.e{d // below}"
            _switch(g, edge)
            g.add_edge(f"d{d}", edge, bandwidth=tier.bandwidth, latency=lat, cost=2 * t + 1)
        for e in range(n // below):
            top = _switch(g, f"t{t}.s{e * below // sizes[t + 1]}")
            g.add_edge(f"t{t}.e{e}", top, bandwidth=below * eff, latency=0.0, cost=1)
    return g


# -- placement --------------------------------------------------------------------------

_MEBIBYTE = float(2**20)


def _host_distances(comp: _Compiled) -> tuple[np.ndarray, np.ndarray]:
    """The routers that host devices (ascending) and their pairwise distances in seconds
    to move one MiB along the fastest path (link weight ``latency + 2**20 / bandwidth``;
    symmetrised on directed graphs), a proxy for how well two devices are connected
    that sees bandwidth, unlike the routing cost."""
    hosts = np.unique(comp.router_of)
    weight = comp.elat + _MEBIBYTE / comp.link_cap
    nr = len(comp.routers)
    matrix = sp.csr_matrix((weight, (comp.eu, comp.ev)), shape=(nr, nr))
    dist = np.atleast_2d(dijkstra(matrix, indices=hosts))[:, hosts]
    dist = np.maximum(dist, dist.T)
    np.fill_diagonal(dist, 0.0)
    return hosts, dist


def _dendrogram(comp: _Compiled):
    """Complete-linkage clustering of the device-hosting routers (cached): the
    routers, the linkage matrix (None for a single router) and the leaf order, children
    visited by their smallest device index so that the order is canonical."""
    if "dendrogram" in comp.cache:
        return comp.cache["dendrogram"]
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    hosts, dist = _host_distances(comp)
    n = len(hosts)
    first = np.full(len(comp.routers), np.iinfo(np.int64).max)
    np.minimum.at(first, comp.router_of, np.arange(len(comp.devices)))
    if n == 1:
        out = (hosts, None, np.zeros(1, dtype=np.int64))
    else:
        z = linkage(squareform(dist, checks=False), method="complete")
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


def locality_order(graph) -> list:
    """Device ids in a locality-preserving order: agglomerative hierarchical clustering
    (complete linkage, :func:`scipy.cluster.hierarchy.linkage`) of the routers that host
    devices, by the time to move one MiB between them, read off the dendrogram with the
    child holding the smaller device index first; a router's own devices stay together
    in index order. Every cluster of the dendrogram is a contiguous block of the order,
    so devices that are close (one switch, one pod, one node) get consecutive ranks; on
    the graph form of a hierarchical cluster (and on generated fat trees, spine-leaf and
    rail-optimized networks) the order is the device index order."""
    comp = _compile(graph)
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
    comp = _compile(graph)
    n_dev = len(comp.devices)
    counts = np.bincount(comp.router_of, minlength=len(comp.routers))
    hosts, z, leaf_order = _dendrogram(comp)
    per_host = counts[hosts]
    sizes = []
    if (per_host == per_host[0]).all() and per_host[0] > 1:
        sizes.append(int(per_host[0]))
    if z is not None:
        from scipy.cluster.hierarchy import fcluster

        for height in np.unique(z[:, 2]):
            label = fcluster(z, t=height, criterion="distance")
            size = np.bincount(label, weights=per_host)[1:]
            size = size[size > 0]
            if (size == size[0]).all():
                s = int(size[0])
                if (not sizes or (s > sizes[-1] and s % sizes[-1] == 0)) and s <= n_dev:
                    sizes.append(s)
    if not sizes or sizes[-1] != n_dev:
        sizes.append(n_dev)
    if order is not None:
        sizes = _aligned_sizes(graph, comp, order, sizes)
    return tuple(sizes)


def _aligned_sizes(graph, comp: _Compiled, order, sizes) -> list[int]:
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
        comp = _compile(graph)
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
        ratio, lat = _first(_route(self.comp, src, dst, np.ones(src.size)))
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
        groups = _as_groups(groups)

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
        groups = _as_groups(groups)

        def compute():
            k = groups.shape[1]
            if k < 2:
                return 0.0, 0.0
            dev = self.device[groups]
            src = np.repeat(dev, k, axis=1).ravel()
            dst = np.tile(dev, (1, k)).ravel()
            return _swap(_first(_route(self.comp, src, dst, np.full(src.size, 1.0 / k))))
        return self._memo(self._key("a2a", groups), compute)

    def neighbours(self, groups) -> tuple[float, float]:
        """``(latency, seconds per byte)`` of one ring step: every member of every row
        sends to the next member at once."""
        groups = _as_groups(groups)

        def compute():
            if groups.shape[1] < 2:
                return 0.0, 0.0
            dev = self.device[groups]
            src, dst = dev.ravel(), np.roll(dev, -1, axis=1).ravel()
            return _swap(_first(_route(self.comp, src, dst, np.ones(src.size))))
        return self._memo(self._key("ring-step", groups), compute)

    def boundaries(self, src: np.ndarray, dst: np.ndarray, label: np.ndarray,
                   count: int) -> tuple[np.ndarray, np.ndarray]:
        """``(alpha[count], beta[count])``: every rank ``src`` sends n bytes to ``dst`` at
        once within a label (a pipeline boundary), the labels one after another."""
        key = ("p2p", count, src.tobytes(), dst.tobytes(), label.tobytes())

        def compute():
            ratio, lat = _route(self.comp, self.device[src], self.device[dst], np.ones(len(src)),
                                label, count)
            return lat, ratio
        return self._memo(key, compute)

    # -- floors ---------------------------------------------------------------------

    def _pair(self, a: int, b: int) -> tuple[float, float]:
        """``(latency, ratio)`` of rank ``a`` sending one byte to rank ``b``, alone."""
        def compute():
            ratio, lat = _first(_route(self.comp, self.device[[a]], self.device[[b]], np.ones(1)))
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
            return _swap(_first(_route(self.comp, src, dev, np.full(k, 1.0 / k))))
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
    comp = _compile(graph)
    key = ("network", None if order is None else tuple(order))
    if key not in comp.cache:
        comp.cache[key] = GraphNetwork(graph, order)
    return comp.cache[key]


def graph_cluster(graph, device, name: str | None = None, order=None, source: str = "") -> ClusterSpec:
    """A :class:`~nest.specs.ClusterSpec` whose network is ``graph`` (validated) and whose
    tiers are the levels of its device order (:func:`level_sizes`, bandwidth and latency
    of one transfer first crossing each level): the search space and the reports read
    the tiers, every price comes from the graph. Rank ``r`` runs on ``order[r]``
    (default: :func:`locality_order`)."""
    from .specs import Tier

    net = network(graph, order)
    tiers = []
    for t, (fanout, bandwidth, latency) in enumerate(net.tiers()):
        if not np.isfinite(bandwidth):
            bandwidth = net.max_rate
        tiers.append(Tier(f"level{t}", int(fanout), float(bandwidth), float(latency)))
    label = name or graph.graph.get("name") or "graph"
    return ClusterSpec(name=str(label), device=device, tiers=tuple(tiers), source=source,
                       graph=graph, device_order=net.order)
