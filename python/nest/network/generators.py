"""Generated network graphs: fat trees, spine-leaf, rail-optimized, tori, dragonflies,
and the graph form of a hierarchical cluster (see :mod:`nest.network.routing` for the
attributes nodes and links carry).

Each generator attaches what it knows (:mod:`nest.network.structure`): the locality order
and levels where they are the device index order and the nested groups it builds (fat
trees, spine-leaf, rail-optimized under the stated conditions, hierarchies), and the
symmetry of its routers (tori: translations; rail-optimized and hierarchies: permuting
the nodes, rails or groups of a level), so that large generated graphs need no all-pairs
work. ``tests/test_structure.py`` checks both against the general algorithms.
"""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np

from ..errors import SpecError
from ..specs import ClusterSpec
from ..units import GB, MiB
from .structure import Structure, Symmetry, attach


def _device(g: nx.Graph, index: int, name=None):
    node = name if name is not None else f"d{index}"
    g.add_node(node, kind="device", index=index)
    return node


def _switch(g: nx.Graph, name):
    g.add_node(name, kind="switch")
    return name


def _levels(*sizes: int) -> tuple[int, ...]:
    """Level sizes of nested groups of the index order (cumulative, ascending, the last
    all devices), as :func:`~nest.network.graph.level_sizes` reads them: sizes of one
    device and repeats dropped."""
    out = []
    for size in sizes:
        if size > 1 and (not out or size > out[-1]):
            out.append(int(size))
    return tuple(out) or (int(sizes[-1]),)


def _mib_time(bandwidth: float, latency: float) -> float:
    """Seconds to move one MiB over a link: the distance the locality order clusters by."""
    return latency + float(MiB) / bandwidth


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
    # edge switches are the hosts: two in one pod are 2 links apart, in two pods 4 (each a
    # superset of the pod's path), so pods cluster first whatever the link speeds
    return attach(g, Structure(levels=_levels(h, h * h, index)))


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
    # leaves host the devices and are all equally far apart
    return attach(g, Structure(levels=_levels(devices_per_leaf, leaves * devices_per_leaf)))


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
    coords = {r: (2, -1, i) for i, r in enumerate(rails)} | {s: (3, -1, -1) for s in spine_nodes}
    for n in range(nodes):
        nvs = _switch(g, f"nvswitch{n}")
        coords[nvs] = (1, n, -1)
        for i in range(gpus_per_node):
            d = _device(g, n * gpus_per_node + i)
            coords[d] = (0, n, i)
            g.nodes[d]["host"] = f"node{n}"
            g.add_edge(d, nvs, bandwidth=nvlink_bandwidth, latency=nvlink_latency / 2, cost=1)
            g.add_edge(d, rails[i], bandwidth=nic_bandwidth, latency=nic_latency, cost=2)
    # any permutation of the nodes, and of the GPU positions with their rails, is an
    # automorphism; the GPUs of a node are closer to each other (through the NVSwitch) than
    # to any other node's when one NVLink hop is faster than one NIC hop
    nvlink_hop = _mib_time(nvlink_bandwidth, nvlink_latency / 2)
    nic_hop = _mib_time(nic_bandwidth, nic_latency)
    levels = _levels(gpus_per_node, nodes * gpus_per_node) if nvlink_hop < nic_hop else None
    return attach(g, Structure(levels=levels, symmetry=Symmetry(coords, (nodes, gpus_per_node), shift=False)))


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
    # translations are automorphisms; the locality order (complete linkage with its ties)
    # has no closed form and stays the general algorithm's
    coords = {c: (0, *c) for c in coords}
    return attach(g, Structure(symmetry=Symmetry(coords, dims, shift=True)))


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
    return attach(g, _hierarchy_structure(cluster, sizes))


def _hierarchy_structure(cluster: ClusterSpec, sizes: tuple) -> Structure:
    """What :func:`from_hierarchy` knows. Symmetry: a device's coordinates are its place in
    each tier's group (axis ``t``: which tier-``(t-1)`` group of its tier-``t`` group), a
    switch's those of the group it serves; permuting the groups of any tier inside their
    parent is an automorphism (the tiers are uniform). Order: the index order with the
    tiers' group sizes as levels, when the time to move one MiB between two devices grows
    strictly with the tier they first share (then those times nest like the groups and
    the clustering cuts the groups); otherwise left to the general algorithm."""
    tiers = cluster.tiers
    n = sizes[-1]
    fanouts = tuple(t.fanout for t in tiers)
    digits = np.stack([np.arange(n) // sizes[t] % fanouts[t] for t in range(len(tiers))], axis=1)
    coords = {}
    for d in range(n):
        row = digits[d].tolist()
        coords[f"d{d}"] = (0, *row)
        coords[f"t0.{d // sizes[1]}"] = (1, -1, *row[1:])
        for t in range(1, len(tiers)):
            coords[f"t{t}.e{d // sizes[t]}"] = (2 * t, *([-1] * t), *row[t:])
            coords[f"t{t}.s{d // sizes[t + 1]}"] = (2 * t + 1, *([-1] * (t + 1)), *row[t + 1:])
    symmetry = Symmetry(coords, fanouts, shift=False)
    # one MiB from a device to one first met at tier t: across plane t (device link, two
    # uplinks, device link), or over the shared edge switch of any plane above
    hop = [_mib_time(t.bandwidth if i else t.effective_bandwidth, t.latency / 2) for i, t in enumerate(tiers)]
    up = [float(MiB) / (sizes[i] * t.effective_bandwidth) if i else 0.0 for i, t in enumerate(tiers)]
    planes = [i for i, t in enumerate(tiers) if i == 0 or t.fanout > 1]
    times = []
    for i, tier in enumerate(tiers):
        if tier.fanout > 1:
            across = hop[i] + hop[i] if i == 0 else ((hop[i] + up[i]) + up[i]) + hop[i]
            times.append(min([across] + [hop[j] + hop[j] for j in planes if j > i]))
    nested = all(b > a * (1 + 1e-9) for a, b in itertools.pairwise(times))
    return Structure(levels=_levels(*sizes[1:]) if nested else None, symmetry=symmetry)
