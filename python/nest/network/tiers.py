"""Alpha-beta prices of collectives on a hierarchical network.

A group of ranks (device indices) is decomposed tier by tier: ``factors[t]`` is how many
tier-``t-1`` groups (devices, for ``t = 0``) of the group meet inside one tier-``t``
group. A hierarchical reduce-scatter runs a ring inside every tier from the innermost
out, each member sending ``1/(product of inner factors)`` of the data over its own link
of that tier; all-gather mirrors it and all-reduce is both (the NCCL tree/ring
hierarchy). A group that spans a single tier reduces to the plain ring formulas
``(k-1)/k * bytes / bandwidth + (k-1) * latency``.

When a group is not uniform (different numbers of members in different groups of a
tier) the decomposition is not a product; it is then priced as one flat ring on the
slowest tier it crosses, which upper-bounds the hierarchical schedule.

These raw formulas price the tiers at their nominal bandwidth and latency (the graph
model of :mod:`nest.network.graph` must agree with them exactly). What NCCL achieves is an
explicit layer on top, :class:`CollectiveEfficiency`: it rescales each tier to the bus
bandwidth collectives reach and raises its per-step latency to NCCL's, and
:func:`calibrated_cluster` returns the cluster those formulas should then be given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from ..specs import ClusterSpec


@dataclass(frozen=True)
class TokenDispatch:
    """How a flex dispatcher (DeepEP, HybridEP) moves the tokens of an expert-parallel
    all-to-all: a token goes to each *node* holding one of its ``top_k`` experts once (over
    the network, to the GPU with its own local index) and is forwarded inside that node
    over NVLink, instead of one network copy per routed expert (DeepEP README, "internode"
    kernels: NVLink forwarding of RDMA-received tokens; Megatron-Core
    ``MoEFlexTokenDispatcher``). Routing is taken as balanced and uniform over the
    ``experts``, as in the benchmarks that publish these runs (force-balanced routing).

    With expert tensor parallelism (``shards`` > 1) the group is the expert-TP x EP group
    and a token goes to every one of the ``shards`` expert-TP ranks of each of its
    experts: ``shards x top_k`` plain copies (core_v0.14.0 ``token_dispatcher.py``
    ``MoEFlexTokenDispatcher._initialize_metadata``, the routing map expanded over the TP
    ranks)."""

    experts: int
    top_k: int
    shards: int = 1

    def node_ratio(self, nodes: int, ranks: int | None = None) -> float:
        """Network copies per token relative to the plain all-to-all's, in a group of
        ``ranks`` ranks (default: ``nodes``; ``ranks / shards`` expert-parallel positions)
        over ``nodes`` nodes. A node holds ``E / min(N, ep)`` experts (an expert-TP group
        inside a node: ``E / N``; one spanning ``shards / f`` nodes: its ``E / ep``) and
        receives the token unless none of them is chosen, ``1 - C(E - E_n, k) / C(E, k)``,
        so the token crosses ``N (1 - C(E - E_n, k) / C(E, k))`` times instead of
        ``shards x k`` (over the network ``shards k (N - 1) / N`` against the same
        fraction of this)."""
        if nodes <= 1:
            return 1.0
        holders = nodes if ranks is None else min(nodes, ranks // self.shards)
        e, k, per_node = self.experts, self.top_k, self.experts / holders
        miss = math.prod((e - per_node - i) / (e - i) for i in range(k)) if e - per_node >= k else 0.0
        return min(1.0, nodes * (1.0 - miss) / (self.shards * k))


@dataclass(frozen=True)
class GroupShape:
    """How a communicator group spreads over the tiers (see the module docstring)."""

    factors: tuple[int, ...]  # one per tier, product = group size
    bandwidth: tuple[float, ...]  # effective bytes/s per tier
    latency: tuple[float, ...]  # seconds per tier
    # an expert-parallel group whose all-to-alls a flex dispatcher runs (None: plain)
    dispatch: TokenDispatch | None = None

    @property
    def size(self) -> int:
        return math.prod(self.factors)

    def reduce_scatter_terms(self) -> tuple[float, float]:
        """``(alpha, beta)``: a reduce-scatter of n bytes takes ``alpha + beta * n`` seconds."""
        return self._rs_terms

    @cached_property
    def _rs_terms(self) -> tuple[float, float]:
        alpha = beta = 0.0
        share = 1.0
        for factor, bandwidth, latency in zip(self.factors, self.bandwidth, self.latency):
            if factor > 1:
                alpha += (factor - 1) * latency
                beta += (factor - 1) / factor * share / bandwidth
                share /= factor
        return alpha, beta

    def all_to_all_terms(self) -> tuple[float, float]:
        """``(alpha, beta)`` of an all-to-all in which each rank sends n bytes in total.

        A rank sends ``1/size`` of its bytes to every member; the share crossing tier ``t``
        goes over that tier's link, and links of different tiers work in parallel, so the
        slowest tier sets the time. Under a flex dispatcher (:attr:`dispatch`) the shares
        beyond the node (tier 0) carry :meth:`TokenDispatch.node_ratio` of the copies,
        while NVLink carries every copy not received by the GPU it lands on: ``(f0 - 1) /
        f0`` of them, ``f0`` the group's ranks per node.
        """
        size = self.size
        alpha = beta = 0.0
        inner = 1
        ratio = 1.0 if self.dispatch is None else self.dispatch.node_ratio(size // self.factors[0], size)
        for t, (factor, bandwidth, latency) in enumerate(zip(self.factors, self.bandwidth, self.latency)):
            if factor > 1:
                share = (factor - 1) * inner / size
                if self.dispatch is not None:
                    share = (factor - 1) / factor if t == 0 else share * ratio
                beta = max(beta, share / bandwidth)
                alpha = max(alpha, latency)
            inner *= factor
        return alpha, beta

    def reduce_scatter(self, nbytes: float) -> float:
        """Seconds for a reduce-scatter of ``nbytes`` (the full buffer on every rank); nothing
        to reduce costs nothing (no latency either)."""
        if nbytes <= 0:
            return 0.0
        alpha, beta = self.reduce_scatter_terms()
        return alpha + beta * nbytes

    def all_gather(self, nbytes: float) -> float:
        """Seconds for an all-gather producing ``nbytes`` on every rank."""
        return self.reduce_scatter(nbytes)

    def all_reduce(self, nbytes: float) -> float:
        """Seconds for an all-reduce of ``nbytes``."""
        return 2 * self.reduce_scatter(nbytes)


def tier_of_pair(cluster: ClusterSpec, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Innermost tier index whose group contains both devices of each pair."""
    tiers = np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
    for size in cluster.group_sizes()[:-1]:
        tiers += (np.asarray(a) // size) != (np.asarray(b) // size)
    return tiers


def group_shape(cluster: ClusterSpec, groups: np.ndarray) -> GroupShape:
    """The shape of the worst of several concurrent groups of equal size.

    ``groups`` is ``[num_groups, group_size]`` device indices, each row ascending. All
    groups are decomposed (vectorised) and the slowest decomposition is kept, since a
    collective step waits for it.
    """
    groups = np.atleast_2d(np.asarray(groups, dtype=np.int64))
    bandwidth = tuple(t.effective_bandwidth for t in cluster.tiers)
    latency = tuple(t.latency for t in cluster.tiers)
    if groups.size <= SMALL_GROUPS:
        # the distinct decompositions in the order of their codes below (the last tier's
        # factor the most significant digit), so that ties resolve alike
        sizes = cluster.group_sizes()
        rows = sorted({_factor_row(sizes, row) for row in groups.tolist()}, key=lambda f: f[::-1])
        shapes = [GroupShape(f, bandwidth, latency) for f in rows]
    else:
        factors = _factor_rows(cluster, groups)
        radix = groups.shape[1] + 1
        codes = factors @ (radix ** np.arange(factors.shape[1], dtype=np.int64))
        _, first = np.unique(codes, return_index=True)
        shapes = [GroupShape(tuple(int(f) for f in factors[i]), bandwidth, latency) for i in first]
    return max(shapes, key=lambda shape: shape.reduce_scatter_terms()[::-1])


SMALL_GROUPS = 160
"""Up to this many device indices, :func:`group_shape` and :func:`ring_link` decompose
groups in plain Python (:func:`_factor_row`): the placements of a search price one or a
few small groups per family, for which numpy's per-call overhead dominates (break-even
near 200 indices: 14 us against 130 us for one group of 8, 300 us against 185 us for
16 groups of 32)."""


def pair_tier(sizes: tuple[int, ...], a: int, b: int) -> int:
    """:func:`tier_of_pair` of two device indices in plain Python (``sizes``: the
    cluster's :meth:`~nest.specs.ClusterSpec.group_sizes`)."""
    tier = 0
    for size in sizes[:-1]:
        if a // size != b // size:
            tier += 1
    return tier


def _factor_row(sizes: tuple[int, ...], row: list[int]) -> tuple[int, ...]:
    """:func:`_factor_rows` of one ascending group (``sizes``: the cluster's group sizes)."""
    bounds = (1,) + sizes
    factors, uniform = [], True
    for t in range(len(sizes)):
        inner, outer = bounds[t], bounds[t + 1]
        counts: list[int] = []  # distinct tier-(t-1) groups per tier-t group, in order
        last_outer = last_inner = -1
        for device in row:
            o, i = device // outer, device // inner
            if o != last_outer:
                counts.append(1)
                last_outer, last_inner = o, i
            elif i != last_inner:
                counts[-1] += 1
                last_inner = i
        low = min(counts)
        uniform = uniform and low == max(counts)
        factors.append(low)
    if not uniform:
        top = max(pair_tier(sizes, row[0], device) for device in row)
        return tuple(len(row) if t == top else 1 for t in range(len(sizes)))
    return tuple(factors)


def _factor_rows(cluster: ClusterSpec, groups: np.ndarray) -> np.ndarray:
    """Per group, per tier: tier-(t-1) groups per tier-t group; flat ring if non-uniform.

    Rows are ascending, so equal block ids are contiguous: block starts are where the id
    changes, and per-block counts come from ``reduceat`` over the flattened rows.
    """
    rows, width = groups.shape
    sizes = cluster.group_sizes()
    factors = np.ones((rows, len(cluster.tiers)), dtype=np.int64)
    uniform = np.ones(rows, dtype=bool)

    def block_starts(ids: np.ndarray) -> np.ndarray:
        """Where a new block begins in each row (every row begins one)."""
        starts = np.ones((rows, width), dtype=bool)
        starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
        return starts

    inner_start = block_starts(groups)  # tier -1: the devices themselves
    for t in range(len(cluster.tiers)):
        outer_start = block_starts(groups // sizes[t])
        seg = np.flatnonzero(outer_start.ravel())
        counts = np.add.reduceat(inner_start.ravel().astype(np.int64), seg)
        row_first = np.flatnonzero(seg % width == 0)  # each row's first block
        low = np.minimum.reduceat(counts, row_first)
        high = np.maximum.reduceat(counts, row_first)
        uniform &= low == high
        factors[:, t] = low
        inner_start = outer_start  # this tier's blocks are the next tier's members
    if not uniform.all():
        top = tier_of_pair(cluster, groups[:, :1], groups).max(axis=1)
        flat = np.ones_like(factors)
        flat[np.arange(rows), top] = width
        factors[~uniform] = flat[~uniform]
    return factors


def ring_link(cluster: ClusterSpec, groups: np.ndarray) -> tuple[float, float]:
    """``(latency, seconds per byte)`` of the slowest neighbour link of rings over ``groups``."""
    groups = np.atleast_2d(np.asarray(groups, dtype=np.int64))
    if groups.shape[1] < 2:
        return 0.0, 0.0
    if groups.size <= SMALL_GROUPS:
        sizes = cluster.group_sizes()
        tier = max(pair_tier(sizes, row[i - 1], row[i]) for row in groups.tolist() for i in range(len(row)))
    else:
        tier = int(tier_of_pair(cluster, groups, np.roll(groups, -1, axis=1)).max())
    t = cluster.tiers[tier]
    return t.latency, 1.0 / t.effective_bandwidth


def point_to_point(cluster: ClusterSpec, tier: int, nbytes: float) -> float:
    """Seconds to send ``nbytes`` between two devices whose innermost common tier is ``tier``."""
    t = cluster.tiers[tier]
    return t.latency + nbytes / t.effective_bandwidth


# -- lower bounds over every placement a group can have ---------------------------------


@dataclass(frozen=True)
class ShapeFloor:
    """Lower bounds on the alpha-beta terms of any group of ``size`` ranks whose members
    are at least ``spacing`` device indices apart, wherever a layout puts it.

    Each term is the minimum, over every shape such a group can have, of that term as
    :class:`GroupShape` computes it (same code, so the minimum is attained bit for bit by
    some shape and no shape is below it). The shapes are every uniform decomposition
    ``factors`` (product ``size``, ``factors[t] <= fanout[t]``, and at most
    ``ceil(devices per tier-t group / spacing)`` members in one tier-t group, which is the
    product of ``factors[:t+1]``) and every flat ring on a tier whose groups can hold a
    span of ``(size - 1) * spacing + 1`` devices (non-uniform groups).
    """

    rs_alpha: float
    rs_beta: float
    a2a_alpha: float
    a2a_beta: float


def shape_floor(cluster: ClusterSpec, size: int, spacing: int, dispatch: TokenDispatch | None = None,
                memo: dict | None = None) -> ShapeFloor:
    """:class:`ShapeFloor` of groups of ``size`` ranks at least ``spacing`` apart (their
    all-to-alls run by ``dispatch``). ``memo`` (a dict kept with one cluster) keeps each
    size's decompositions and each shape's terms between calls: a search asks for
    thousands of (size, spacing) pairs, an uneven batch one size per device count."""
    memo = {} if memo is None else memo
    sizes = cluster.group_sizes()
    fanouts = tuple(t.fanout for t in cluster.tiers)
    if ("uniform", size) not in memo:
        memo[("uniform", size)] = _uniform_shapes(fanouts, size)
    # the spacing matters only through the room each tier leaves, ceil(S / spacing) for
    # tier groups of S devices: spacings with the same rooms have the same shapes, hence
    # the same floor (a flat ring's span fits, (size - 1) spacing + 1 <= S, exactly when
    # S / spacing > size - 1, that is when the room holds the whole group)
    rooms = tuple(-(-tier // spacing) for tier in sizes)
    key = ("floor", size, rooms, dispatch)
    if key not in memo:
        memo[key] = _floor_of_shapes(cluster, size, rooms, dispatch, memo)
    return memo[key]


SHAPE_COMBOS_LIMIT = 4096
"""Most combinations of the inner tiers' factors :func:`shape_floors` tabulates at once;
clusters with more fall back to :func:`shape_floor` pair by pair."""


@lru_cache(maxsize=64)
def _inner_combos(fanouts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Every choice of the factors of all tiers but the outermost (``factors[t] <=
    fanouts[t]``), lexicographic, and each choice's members per tier-t group (the
    products of ``factors[:t+1]``)."""
    grids = np.meshgrid(*(np.arange(1, f + 1) for f in fanouts[:-1]), indexing="ij")
    factors = np.stack([g.ravel() for g in grids], axis=1).astype(np.int64) if grids else np.ones((1, 0), np.int64)
    return factors, np.cumprod(factors, axis=1) if factors.shape[1] else factors


def shape_floors(cluster: ClusterSpec, sizes: np.ndarray, spacings: np.ndarray,
                 dispatch: TokenDispatch | None = None) -> np.ndarray:
    """``[pair, 4]``: :func:`shape_floor`'s ``(rs_alpha, rs_beta, a2a_alpha, a2a_beta)`` of
    every (size, spacing) pair at once, equal to it bit for bit: the same shapes, their
    terms by :class:`GroupShape`'s arithmetic in the same order elementwise, and the
    minimum per pair. A search bounds thousands of pairs per batch (an uneven batch: one
    data-parallel size per device count); a Python call per pair and per shape was the
    largest part of a library call on the NEST artifact's instances."""
    sizes = np.asarray(sizes, dtype=np.int64)
    spacings = np.asarray(spacings, dtype=np.int64)
    fanouts = tuple(t.fanout for t in cluster.tiers)
    combos, prefix = _inner_combos(fanouts)
    if len(combos) > SHAPE_COMBOS_LIMIT:
        memo: dict = {}  # the pairs share their sizes' decompositions and shapes' terms
        out = [shape_floor(cluster, int(a), int(b), dispatch, memo) for a, b in zip(sizes.tolist(), spacings.tolist())]
        return np.array([(f.rs_alpha, f.rs_beta, f.a2a_alpha, f.a2a_beta) for f in out]).reshape(-1, 4)
    tiers = len(fanouts)
    rooms = -(-np.asarray(cluster.group_sizes(), dtype=np.int64)[None, :] // spacings[:, None])  # [pair, tier]
    # uniform shapes: an inner choice whose product divides the size, the outermost factor
    # the quotient within its fanout, every tier's members within its room
    inner = prefix[:, -1] if tiers > 1 else np.ones(1, np.int64)
    fits = (sizes[None, :] % inner[:, None] == 0) & (sizes[None, :] // inner[:, None] <= fanouts[-1])
    fits &= (sizes <= rooms[:, -1])[None, :]
    for t in range(tiers - 1):
        fits &= prefix[:, t][:, None] <= rooms[:, t][None, :]
    combo, pair = np.nonzero(fits)
    uniform = np.concatenate([combos[combo], (sizes[pair] // inner[combo])[:, None]], axis=1)
    # flat rings on every tier whose room holds the whole group
    flat_pair, flat_tier = np.nonzero(rooms >= sizes[:, None])
    flat = np.ones((len(flat_pair), tiers), dtype=np.int64)
    flat[np.arange(len(flat_pair)), flat_tier] = sizes[flat_pair]
    factors = np.concatenate([uniform, flat])
    owner = np.concatenate([pair, flat_pair])
    terms = _shape_terms(cluster, factors, sizes[owner], dispatch)
    out = np.full((len(sizes), 4), np.inf)
    for j in range(4):
        np.minimum.at(out[:, j], owner, terms[j])
    out[~np.isin(np.arange(len(sizes)), owner)] = 0.0  # no shape fits: no bound beyond zero
    return out


def _shape_terms(cluster: ClusterSpec, factors: np.ndarray, size: np.ndarray,
                 dispatch: TokenDispatch | None) -> list[np.ndarray]:
    """:class:`GroupShape`'s ``reduce_scatter_terms() + all_to_all_terms()`` of every row of
    ``factors`` (``size`` their products), the same operations elementwise."""
    zero = np.zeros(len(factors))
    rs_alpha, rs_beta, share = zero, zero, np.ones(len(factors))
    a2a_alpha, a2a_beta, inner = zero, zero, np.ones(len(factors), dtype=np.int64)
    if dispatch is None:
        ratio = 1.0
    else:
        keys = np.stack([size // factors[:, 0], size], axis=1)
        unique, back = np.unique(keys, axis=0, return_inverse=True)
        ratio = np.array([dispatch.node_ratio(int(n), int(r)) for n, r in unique.tolist()])[back.ravel()]
    for t, tier in enumerate(cluster.tiers):
        f = factors[:, t]
        big = f > 1
        bandwidth, latency = tier.effective_bandwidth, tier.latency
        rs_alpha = rs_alpha + np.where(big, (f - 1) * latency, 0.0)
        rs_beta = rs_beta + np.where(big, (f - 1) / f * share / bandwidth, 0.0)
        share = np.where(big, share / f, share)
        moved = (f - 1) * inner / size
        if dispatch is not None:
            moved = (f - 1) / f if t == 0 else moved * ratio
        a2a_beta = np.maximum(a2a_beta, np.where(big, moved / bandwidth, 0.0))
        a2a_alpha = np.maximum(a2a_alpha, np.where(big, latency, 0.0))
        inner = inner * f
    return [rs_alpha, rs_beta, a2a_alpha, a2a_beta]


def _floor_of_shapes(cluster: ClusterSpec, size: int, rooms: tuple[int, ...], dispatch: TokenDispatch | None,
                     memo: dict) -> ShapeFloor:
    """The minimum terms over the uniform shapes that fit ``rooms`` and the flat rings of
    the tiers whose room holds ``size`` (:func:`shape_floor`)."""
    fanouts = tuple(t.fanout for t in cluster.tiers)
    shapes = [f for f, prefix in memo[("uniform", size)] if all(p <= r for p, r in zip(prefix, rooms))]
    for t, room in enumerate(rooms):
        if room >= size:
            shapes.append(tuple(size if u == t else 1 for u in range(len(fanouts))))
    if not shapes:  # a group cannot exist in this cluster: no bound beyond zero
        return ShapeFloor(0.0, 0.0, 0.0, 0.0)
    terms = []
    for f in shapes:
        key = ("terms", f, dispatch)
        if key not in memo:
            shape = GroupShape(f, tuple(t.effective_bandwidth for t in cluster.tiers),
                               tuple(t.latency for t in cluster.tiers), dispatch)
            memo[key] = shape.reduce_scatter_terms() + shape.all_to_all_terms()
        terms.append(memo[key])
    return ShapeFloor(*(min(term[i] for term in terms) for i in range(4)))


def _uniform_shapes(fanouts: tuple[int, ...], size: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every uniform decomposition of ``size`` ranks (``factors[t] <= fanouts[t]``, product
    ``size``) with its members per tier-t group (the products of ``factors[:t+1]``), in
    lexicographic order."""
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def extend(factors: tuple[int, ...], prefix: tuple[int, ...], remaining: int) -> None:
        t = len(factors)
        if t == len(fanouts):
            if remaining == 1:
                out.append((factors, prefix))
            return
        members = prefix[-1] if prefix else 1
        for f in range(1, min(fanouts[t], remaining) + 1):
            if remaining % f == 0:
                extend(factors + (f,), prefix + (members * f,), remaining // f)

    extend((), (), size)
    return out


def ring_floor(cluster: ClusterSpec, span: int) -> tuple[float, float]:
    """Lower bound on :func:`ring_link` of rings spanning at least ``span`` consecutive
    device indices: the ring's slowest link is on the tier of the smallest tier group
    holding the ring, which must hold the span (minimum over those tiers, per term)."""
    if span < 2:
        return 0.0, 0.0
    sizes = cluster.group_sizes()
    tiers = [t for t, size in zip(cluster.tiers, sizes) if size >= span] or [cluster.tiers[-1]]
    return min(t.latency for t in tiers), min(1.0 / t.effective_bandwidth for t in tiers)


def pair_tier_floor(cluster: ClusterSpec, distance: int) -> int:
    """Lowest :func:`tier_of_pair` of two devices ``distance`` apart: they are in different
    groups of every tier whose groups are not larger than the distance."""
    return sum(1 for size in cluster.group_sizes()[:-1] if size <= distance)


def pair_tier_floors(cluster: ClusterSpec, distances: np.ndarray) -> np.ndarray:
    """:func:`pair_tier_floor` of every distance at once (the group sizes are cumulative
    products of the fanouts, so ascending: the count of those not above a distance is
    where it sorts among them)."""
    sizes = np.asarray(cluster.group_sizes()[:-1], dtype=np.int64)
    return np.searchsorted(sizes, np.asarray(distances, dtype=np.int64), side="right").astype(np.int64)


# -- what NCCL achieves on each tier ----------------------------------------------------


@dataclass(frozen=True)
class TierEfficiency:
    """NCCL on one tier: ``bus_efficiency`` is the large-message bus bandwidth (nccl-tests
    ``busbw``) as a fraction of the tier's nominal per-device bandwidth; ``step_latency``
    the latency of one ring step (seconds), a floor under the tier's own latency."""

    bus_efficiency: float
    step_latency: float

    def __post_init__(self):
        if not 0 < self.bus_efficiency <= 1:
            raise ValueError(f"bus_efficiency = {self.bus_efficiency!r}: must be in (0, 1]")
        if not self.step_latency >= 0:
            raise ValueError(f"step_latency = {self.step_latency!r}: must be >= 0")


@dataclass(frozen=True)
class CollectiveEfficiency:
    """Achievable collective performance per tier, applied on top of the alpha-beta
    formulas (which it leaves unchanged).

    A collective of ``n`` bytes over ``k`` ranks of one tier then takes ``(k - 1) x
    step_latency + (k - 1) / k x n / (bus_efficiency x bandwidth)`` per ring pass: its bus
    bandwidth ``(k - 1) / k x n / time`` rises with the message size from the latency
    floor and saturates at ``bus_efficiency x bandwidth``, the shape of nccl-tests'
    ``busbw`` curves. ``scale_up`` applies to the innermost tier (NVLink/NVSwitch, a TPU
    board), ``scale_out`` to every outer tier (the NICs: InfiniBand, RoCE, a TPU
    fabric). Point-to-point pipeline transfers use the same tiers.

    Defaults (:data:`NCCL_EFFICIENCY`), all public measurements:

    * scale-up bus efficiency 0.80: ring all-reduce / all-gather / reduce-scatter on
      8x H200 NVLink 4 reach 367.2 / 361.4 / 362.9 GB/s of 450 GB/s (80-82%; NVLS
      all-reduce 480 GB/s, but Megatron's tensor-parallel collectives with sequence
      parallelism are all-gathers and reduce-scatters, which NVLS does not accelerate)
      (S. Bekman, *Machine Learning Engineering*, "SHARP",
      https://github.com/stas00/ml-engineering/blob/master/network/README.md); an 8x A100
      node measures 232.5 GB/s all-reduce busbw of 300 GB/s, 78%
      (https://github.com/NVIDIA/nccl/issues/1048).
    * scale-out bus efficiency 0.95: "On an NVIDIA DGX-A100 system we have 8x200Gbit/s IB
      cards and we measure 192GB/s AllReduce BusBW" (24 of 25 GB/s per NIC, NCCL
      maintainers, https://github.com/NVIDIA/nccl/issues/812 and /412); "For NDR @
      400Gbps you should see 46-48GB/s per NIC" (https://github.com/NVIDIA/nccl-tests/issues/290).
    * step latencies 3.4 us (NVLink) and 14 us (network): NCCL's own tuning model for
      the ring algorithm with the Simple protocol that carries large messages
      (``hwLat`` in ``src/graph/tuning.cc``, https://github.com/NVIDIA/nccl). Its 8.4 us
      base latency per collective and the low-latency protocols NCCL picks for messages
      below ~1 MB are not modelled (training collectives are megabytes).
    """

    scale_up: TierEfficiency = TierEfficiency(0.80, 3.4e-6)
    scale_out: TierEfficiency = TierEfficiency(0.95, 14e-6)

    def tier(self, index: int) -> TierEfficiency:
        """The efficiency of tier ``index`` (0 = innermost)."""
        return self.scale_up if index == 0 else self.scale_out

    def bus_bandwidth(self, cluster: ClusterSpec, tier: int, ranks: int, nbytes: float) -> float:
        """The bus bandwidth (bytes/s, nccl-tests convention) of a reduce-scatter or
        all-gather of ``nbytes`` over ``ranks`` ranks of one tier, calibrated."""
        t = calibrated_cluster(cluster, self).tiers[tier]
        busbytes = (ranks - 1) / ranks * nbytes
        return busbytes / ((ranks - 1) * t.latency + busbytes / t.effective_bandwidth)


NCCL_EFFICIENCY = CollectiveEfficiency()
"""The calibrated default (see :class:`CollectiveEfficiency`)."""

RAW_EFFICIENCY = CollectiveEfficiency(TierEfficiency(1.0, 0.0), TierEfficiency(1.0, 0.0))
"""The identity layer: nominal bandwidths and the tiers' own latencies."""


def calibrated_cluster(cluster: ClusterSpec, efficiency: CollectiveEfficiency = NCCL_EFFICIENCY) -> ClusterSpec:
    """``cluster`` with every tier at the bandwidth and latency collectives achieve on it.

    The same devices and tier sizes; tier ``t``'s bandwidth is multiplied by its
    ``bus_efficiency`` and its latency raised to at least its ``step_latency``. Every
    price of this module (and the planner's tables, which read tiers the same way) on
    the returned cluster is the calibrated one; on ``cluster`` it is the raw one.

    A cluster priced on a graph (``cluster.graph``) is returned unchanged: its links are
    priced as the graph gives them, and which links are scale-up or scale-out is the
    graph builder's knowledge (:mod:`nest.network.graph` can apply the same two factors to its
    link attributes).
    """
    if getattr(cluster, "graph", None) is not None:
        return cluster
    tiers = []
    for index, tier in enumerate(cluster.tiers):
        e = efficiency.tier(index)
        tiers.append(replace(tier, bandwidth=tier.bandwidth * e.bus_efficiency,
                             latency=max(tier.latency, e.step_latency)))
    return replace(cluster, tiers=tuple(tiers))
