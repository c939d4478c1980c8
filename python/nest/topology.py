"""Arbitrary networks as graphs: loading, generators, contention-aware collective prices.

A network is a networkx graph whose nodes are devices (``kind="device"``) or switches
(any other node; ``kind="switch"`` by convention) and whose edges are links with

* ``bandwidth``: bytes/s in each direction (``bandwidth_GBps`` in files, 1e9 bytes/s);
  a :class:`networkx.DiGraph` gives each direction its own capacity;
* ``latency``: seconds (``latency_us`` in files), default 0;
* ``cost``: positive integer routing metric, default 1 (hop count).

Devices are numbered ``0..N-1`` by their ``index`` attribute when every device has one,
otherwise in node order; communicator groups are rows of such indices (as in
:mod:`nest.network`).

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
"""

from __future__ import annotations

import json
import math
import weakref
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
try:  # sparse shortest paths; the optional extra nest-planner[graphs]
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError("nest.topology needs scipy: pip install 'nest-planner[graphs]'") from error

from .errors import SpecError
from .specs import ClusterSpec

GB = 1e9
NODE_KEYS = {"kind", "index", "name"}
EDGE_KEYS = {"bandwidth", "bandwidth_GBps", "latency", "latency_us", "cost"}
_UNIT = {"bandwidth_GBps": ("bandwidth", GB), "latency_us": ("latency", 1e-6)}


# -- loading ----------------------------------------------------------------------------


def load_graph(path) -> nx.Graph:
    """A topology from node-link JSON (``.json``), GraphML (``.graphml``) or a YAML edge
    list (``.yaml``/``.yml``: ``nodes: [{id, kind}]``, ``links: [{a, b, bandwidth_GBps,
    latency_us, reverse_bandwidth_GBps?, cost?}]``), validated (:func:`validate`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"topology = {str(path)!r}: {exc.strerror}") from None
    if suffix == ".json":
        data = json.loads(text)
        _check_unique([n.get("id") for n in data.get("nodes", [])], "nodes.id")
        edges_key = "links" if "links" in data else "edges"
        graph = nx.node_link_graph(data, edges=edges_key)
    elif suffix == ".graphml":
        ids = [el.get("id") for el in _graphml_nodes(text)]
        _check_unique(ids, "node id")
        graph = nx.parse_graphml(text)
    elif suffix in (".yaml", ".yml"):
        import yaml

        graph = _from_edge_list(yaml.safe_load(text) or {})
    else:
        raise SpecError(f"topology = {str(path)!r}: unknown format (use .json, .graphml or .yaml)")
    validate(graph)
    return graph


def _graphml_nodes(text: str):
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)
    return [el for el in root.iter() if el.tag.endswith("}node") or el.tag == "node"]


def _check_unique(ids, what: str) -> None:
    seen = set()
    for i in ids:
        if i in seen:
            raise SpecError(f"{what} = {i!r}: duplicate id")
        seen.add(i)


def _from_edge_list(data: dict) -> nx.Graph:
    unknown = set(data) - {"nodes", "links"}
    if unknown:
        raise SpecError(f"topology key = {sorted(unknown)[0]!r}: unknown (expected nodes, links)")
    nodes = data.get("nodes") or []
    _check_unique([n.get("id") for n in nodes], "nodes.id")
    links = data.get("links") or []
    directed = any("reverse_bandwidth_GBps" in e or "reverse_bandwidth" in e for e in links)
    graph = nx.DiGraph() if directed else nx.Graph()
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
    rows.sort(key=lambda r: (r[1], r[0]))
    arr = np.array([r[:2] for r in rows], dtype=np.int64).reshape(-1, 2)
    vals = np.array([r[2:] for r in rows], dtype=float).reshape(-1, 3)
    eu, ev = arr[:, 0], arr[:, 1]
    ecap, elat, ecost = vals[:, 0], vals[:, 1], vals[:, 2]
    nr = len(routers)
    cost_matrix = sp.csr_matrix((ecost, (eu, ev)), shape=(nr, nr))
    comp = _Compiled(devices, router_of, leaf, up_cap, down_cap, up_lat, down_lat, routers,
                     eu, ev, ecost, ecap, elat, cost_matrix, {})
    if directed:  # every device must reach every other one
        src = np.unique(router_of)
        dist = dijkstra(cost_matrix, indices=src)
        bad = ~np.isfinite(dist[:, np.unique(router_of)])
        if bad.any():
            s, t = np.argwhere(bad)[0]
            raise SpecError(f"topology device route = {routers[src[s]]!r} -> "
                            f"{routers[np.unique(router_of)[t]]!r}: unreachable")
    _COMPILED[graph] = comp
    return comp


def devices(graph) -> list:
    """Device node ids in device-index order."""
    return list(_compile(graph).devices)


# -- routing and pricing ----------------------------------------------------------------


def _route(comp: _Compiled, src: np.ndarray, dst: np.ndarray, amount: np.ndarray):
    """``(max over links of load / capacity, max path latency)`` of concurrent flows
    (device indices ``src -> dst`` carrying ``amount`` each), ECMP over min-cost paths."""
    keep = src != dst
    src, dst, amount = src[keep], dst[keep], amount[keep]
    if src.size == 0:
        return 0.0, 0.0
    n_dev = len(comp.devices)
    up = np.bincount(src, weights=amount, minlength=n_dev)
    down = np.bincount(dst, weights=amount, minlength=n_dev)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = max(float(np.max(np.where(comp.leaf, up / comp.up_cap, 0.0))),
                    float(np.max(np.where(comp.leaf, down / comp.down_cap, 0.0))))
    a, b = comp.router_of[src], comp.router_of[dst]
    access_lat = np.where(comp.leaf[src], comp.up_lat[src], 0.0) + np.where(comp.leaf[dst], comp.down_lat[dst], 0.0)
    cross = a != b
    latency = float(access_lat.max())
    if cross.any():
        a, b, amt, alat = a[cross], b[cross], amount[cross], access_lat[cross]
        sources, row = np.unique(a, return_inverse=True)
        nr = len(comp.routers)
        demand = np.zeros((len(sources), nr))
        np.add.at(demand, (row, b), amt)
        load, plat = _ecmp(comp, sources, demand)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = max(ratio, float(np.max(load / comp.ecap)) if load.size else 0.0)
        latency = max(latency, float(np.max(plat[row, b] + alat)))
    return ratio, latency


def _ecmp(comp: _Compiled, sources: np.ndarray, demand: np.ndarray):
    """Per router-level edge, the total load of ``demand[s, v]`` (from router
    ``sources[s]`` to router v) split evenly over all min-cost paths (path counting as in
    Brandes' betweenness); and per (source, router) the longest latency of those paths."""
    eu, ev, ecost, elat = comp.eu, comp.ev, comp.ecost, comp.elat
    nr = len(comp.routers)
    dist = dijkstra(comp.cost_matrix, indices=sources)
    ns = len(sources)
    dag = dist[:, eu] + ecost == dist[:, ev]  # (ns, E), finite distances are integers
    head_level = np.where(dag, dist[:, ev], -1.0)
    levels = np.unique(head_level[head_level > 0])
    heads, starts = np.unique(ev, return_index=True)
    sigma = np.zeros((ns, nr))
    sigma[np.arange(ns), sources] = 1.0
    lat = np.full((ns, nr), -np.inf)
    lat[np.arange(ns), sources] = 0.0
    masks = []
    for level in levels:
        w = head_level == level
        masks.append(w)
        contrib = np.where(w, sigma[:, eu], 0.0)
        sigma[:, heads] += np.add.reduceat(contrib, starts, axis=1)
        cand = np.where(w, lat[:, eu] + elat, -np.inf)
        lat[:, heads] = np.maximum(lat[:, heads], np.maximum.reduceat(cand, starts, axis=1))
    delta = demand.copy()
    load = np.zeros(len(eu))
    tails = sp.csr_matrix((np.ones(len(eu)), (np.arange(len(eu)), eu)), shape=(len(eu), nr))
    with np.errstate(divide="ignore", invalid="ignore"):
        for w in reversed(masks):
            per = np.where(w, sigma[:, eu] / sigma[:, ev] * delta[:, ev], 0.0)
            load += per.sum(axis=0)
            delta += np.asarray((sp.csr_matrix(per) @ tails).todense())
    return load, lat


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


def ring_collective(graph, groups) -> tuple[float, float]:
    """``(alpha, beta)`` of a ring reduce-scatter (or all-gather) of n bytes run by every
    row of ``groups`` (device indices, ring order = row order) concurrently."""
    def compute(comp, g):
        k = g.shape[1]
        if k < 2:
            return 0.0, 0.0
        src, dst = g.ravel(), np.roll(g, -1, axis=1).ravel()
        ratio, lat = _route(comp, src, dst, np.ones(src.size))
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
        return _swap(_route(comp, src, dst, np.full(src.size, 1.0 / k)))
    return _cached(graph, "a2a", _as_groups(groups), compute)


def point_to_point(graph, pairs) -> tuple[float, float]:
    """``(alpha, beta)`` of every ``(src, dst)`` row of ``pairs`` sending n bytes at once."""
    def compute(comp, p):
        if p.shape[1] != 2:
            raise SpecError(f"pairs shape = {p.shape}: must be (m, 2)")
        return _swap(_route(comp, p[:, 0], p[:, 1], np.ones(len(p))))
    return _cached(graph, "p2p", _as_groups(pairs), compute)


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
    for d in range(n):
        _device(g, d)
    sizes = (1,) + cluster.group_sizes()
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


def locality_order(graph, seed: int = 0) -> list:
    """Device ids in a locality-preserving order: recursive Kernighan-Lin bisection
    (:func:`networkx.algorithms.community.kernighan_lin_bisection`, seeded) of the
    router graph, single-homed devices folded into their switch (so a switch's devices
    are always contiguous); parts are visited in order, devices of one router by index."""
    comp = _compile(graph)
    und = graph.to_undirected(as_view=True) if graph.is_directed() else graph
    routers = comp.routers
    hanging: dict = {r: [] for r in range(len(routers))}
    for i, d in enumerate(comp.devices):
        if comp.leaf[i]:
            hanging[int(comp.router_of[i])].append(d)
    is_device = {d for d in comp.devices}
    sub = und.subgraph(routers)
    rng = np.random.default_rng(seed)
    order: list = []

    def visit(nodes: list) -> None:
        if len(nodes) <= 2:
            parts = [sorted(nodes, key=str)]
        else:
            h = sub.subgraph(nodes)
            if not nx.is_connected(h):
                parts = sorted((sorted(c, key=str) for c in nx.connected_components(h)),
                               key=lambda c: str(c[0]))
            else:
                a, b = nx.algorithms.community.kernighan_lin_bisection(
                    h, seed=int(rng.integers(2**31)))
                parts = sorted((sorted(a, key=str), sorted(b, key=str)), key=lambda c: str(c[0]))
            for p in parts:
                visit(p)
            return
        for n in parts[0]:
            order.append(n)

    visit(sorted(routers, key=str))
    rindex = {n: i for i, n in enumerate(routers)}
    out = []
    for n in order:
        if n in is_device:
            out.append(n)
        out.extend(hanging[rindex[n]])
    return out
