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
again whenever they change. Routing state is kept per graph (:func:`compile_graph`,
:mod:`nest.network.compiled`): every router pair's shortest-path DAG with its ECMP shares
is built once (:mod:`nest.network.paths`) and a family of flows costs a gather over the
DAGs it uses; transit switches that are exact twins (same neighbours, same links: the
core switches of one fat-tree core group, the spines of a leaf-spine network) are merged
first, which ECMP makes exact.
"""

from __future__ import annotations

import numpy as np

from ..errors import SpecError
from . import kernels
from .compiled import EDGE_KEYS, NODE_KEYS, CompiledGraph, compile_graph, devices, validate
from .paths import routes_of

__all__ = ["EDGE_KEYS", "NODE_KEYS", "CompiledGraph", "all_to_all", "compile_graph", "devices", "group_rows",
           "point_to_point", "point_to_point_sets", "ring_collective", "route", "route_one", "validate"]


def route(comp: CompiledGraph, src: np.ndarray, dst: np.ndarray, amount: np.ndarray,
           label: np.ndarray | None = None, nlabels: int = 1):
    """Per label, ``(max over links of load / capacity, max path latency)`` of concurrent
    flows (device indices ``src -> dst`` carrying ``amount`` each), ECMP over min-cost
    paths; loads are summed over the flows of one label only."""
    routes = routes_of(comp)
    if routes.engine == "cpp":
        return _compiled_route(comp, routes, src, dst, amount, None if nlabels == 1 else label, nlabels)
    if label is None:
        label = np.zeros(len(src), dtype=np.int64)
    keep = src != dst
    if not keep.all():
        src, dst, amount, label = src[keep], dst[keep], amount[keep], label[keep]
    ratio = np.zeros(nlabels)
    latency = np.zeros(nlabels)
    if src.size == 0:
        return ratio, latency
    n_dev = len(comp.devices)
    leaves = _leaves(comp)
    for ends, cap in ((src, comp.up_cap), (dst, comp.down_cap)):
        on = None if leaves == "all" else comp.leaf[ends]
        if leaves == "none" or (on is not None and not on.any()):
            continue
        # (label, device) keys and amounts of the flows on access links (all of them when
        # every device hangs off a switch: no masked copies; with one label, the device)
        key = ends if on is None else ends[on]
        if nlabels > 1:
            key = (label if on is None else label[on]) * n_dev + key
        weights = amount if on is None else amount[on]
        if nlabels * n_dev <= max(4 * len(key), 1 << 16):  # a dense table is cheaper than sorting
            use = np.bincount(key, weights=weights, minlength=nlabels * n_dev).reshape(nlabels, n_dev)
            ratio = np.maximum(ratio, (use / cap).max(axis=1))
        else:  # access links of the (label, device) pairs used: the others carry nothing
            used, which = np.unique(key, return_inverse=True)
            use = np.bincount(which.ravel(), weights=weights)
            np.maximum.at(ratio, used // n_dev, use / cap[used % n_dev])
    if leaves == "all":  # np.where(True, x, 0.0) is x: the same sums
        access_lat = comp.up_lat[src] + comp.down_lat[dst]
    elif leaves == "none":  # 0.0 + 0.0
        access_lat = np.zeros(len(src))
    else:
        access_lat = (np.where(comp.leaf[src], comp.up_lat[src], 0.0)
                      + np.where(comp.leaf[dst], comp.down_lat[dst], 0.0))
    a, b = comp.router_of[src], comp.router_of[dst]
    cross = a != b
    flow_lat = access_lat
    if cross.any():
        nr = len(comp.routers)
        every = bool(cross.all())  # then no masked copies
        a, b = (a, b) if every else (a[cross], b[cross])
        codes = a * nr + b if nlabels == 1 else ((label if every else label[cross]) * nr + a) * nr + b
        unique, inverse = np.unique(codes, return_inverse=True)
        amounts = np.bincount(inverse, weights=amount if every else amount[cross])
        pair_label, pair = unique // (nr * nr), unique % (nr * nr)
        with comp.lock:  # the store may grow (and move) while another thread reads it
            link_ratio, pair_lat = routes_of(comp).flows(pair // nr, pair % nr, amounts, pair_label, nlabels)
        ratio = np.maximum(ratio, link_ratio)
        if every:
            flow_lat = access_lat + pair_lat[inverse.ravel()]
        else:
            flow_lat = access_lat.copy()
            flow_lat[cross] += pair_lat[inverse.ravel()]
    if nlabels == 1:  # every flow has label 0: the largest of all
        latency[0] = max(0.0, float(flow_lat.max()))
    else:
        np.maximum.at(latency, label, flow_lat)
    return ratio, latency


def _compiled_route(comp: CompiledGraph, routes, src, dst, amount, label, nlabels):
    """:func:`route` with its sorts and sums compiled (:func:`nest.network.kernels.route_pairs`):
    the same floats (``label``: None with one label)."""
    if label is None and nlabels != 1:
        label = np.zeros(len(src), dtype=np.int64)
    ratio, access_lat, inverse, s, t, amounts, pair_label = kernels.route_pairs(
        comp, src, dst, amount, label, nlabels, _leaves(comp))
    pair_lat = np.zeros(0)
    if len(s):
        with comp.lock:  # the store may grow (and move) while another thread reads it
            link_ratio, pair_lat = routes.flows(s, t, amounts, pair_label, nlabels)
        ratio = np.maximum(ratio, link_ratio)
    return ratio, kernels.route_latency(label, access_lat, inverse, pair_lat, nlabels)


def _leaves(comp: CompiledGraph) -> str:
    """Whether every device (``"all"``), none (``"none"``) or some (``"some"``) hang off a
    single switch (cached per graph)."""
    if "leaves" not in comp.cache:
        comp.cache["leaves"] = "all" if comp.leaf.all() else "none" if not comp.leaf.any() else "some"
    return comp.cache["leaves"]


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
