"""Generated network graphs: fat trees, spine-leaf, rail-optimized, tori, dragonflies,
and the graph form of a hierarchical cluster (see :mod:`nest.network.routing` for the
attributes nodes and links carry)."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..errors import SpecError
from ..specs import ClusterSpec
from ..units import GB


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
