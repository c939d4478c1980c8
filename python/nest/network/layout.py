"""Where each rank sits: parallel coordinates -> device index, by rank order.

The rank order names the parallel dimensions innermost first (Megatron-LM's default
``tp-cp-ep-dp-pp``: tensor-parallel peers are adjacent devices, pipeline stages are
farthest apart). Rank ``r`` runs on device ``r`` of a hierarchical cluster, and on device
``device_order[r]`` of a cluster on a graph (a locality-preserving order, see
:func:`nest.network.graph.locality_order`); a plan that uses fewer devices than the cluster
has takes the first ``devices_used`` of them, which keeps it compact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..parallel import DEFAULT_ORDER, DIMENSIONS, Candidate, parse_order
from ..specs import ClusterSpec
from .tiers import pair_tier, tier_of_pair


@dataclass(frozen=True)
class Layout:
    """Degrees of every parallel dimension and their nesting on the device list."""

    degrees: dict
    order: str = DEFAULT_ORDER

    def __post_init__(self):
        parse_order(self.order)

    @staticmethod
    def of(cand: Candidate) -> "Layout":
        """The layout of a candidate's degrees and rank order."""
        return Layout(cand.degrees(), cand.order)

    @property
    def size(self) -> int:
        return int(np.prod([self.degrees.get(d, 1) for d in DIMENSIONS]))

    def strides(self) -> dict[str, int]:
        """Each dimension's rank stride (a new dict; the layout keeps its own)."""
        return dict(self._strides)

    @cached_property
    def _strides(self) -> dict[str, int]:
        # a placement asks for the strides of its layout about ten times
        strides, stride = {}, 1
        for dim in parse_order(self.order):
            strides[dim] = stride
            stride *= self.degrees.get(dim, 1)
        return strides

    def coordinates(self, dims: tuple[str, ...] = DIMENSIONS) -> dict[str, np.ndarray]:
        """Per rank (index = device), its coordinate in every dimension (of ``dims``)."""
        ranks = np.arange(self.size, dtype=np.int64)
        strides = self.strides()
        return {dim: (ranks // strides[dim]) % self.degrees.get(dim, 1) for dim in dims}

    def pipeline_partners(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ranks, partner, stage)``: every rank, the rank of the next pipeline stage it
        sends to (the last stage wraps to the first) and its own stage."""
        pp = self.degrees.get("pp", 1)
        stride = self.strides()["pp"]
        stage = self.coordinates(("pp",))["pp"]
        ranks = np.arange(self.size, dtype=np.int64)
        return ranks, np.where(stage < pp - 1, ranks + stride, ranks - (pp - 1) * stride), stage

    def boundary_tiers(self, cluster: ClusterSpec) -> np.ndarray:
        """Tier crossed from stage k to stage k+1 (worst over the stage's ranks), for
        k < pp; entry pp-1 is the wrap-around from the last stage to the first, which
        interleaved schedules use."""
        ranks, partner, stage = self.pipeline_partners()
        tiers = tier_of_pair(cluster, ranks, partner)
        worst = np.zeros(self.degrees.get("pp", 1), dtype=np.int64)
        np.maximum.at(worst, stage, tiers)
        return worst


def layout_strides(order: str, tp, cp, dp, pp) -> dict[str, np.ndarray]:
    """:meth:`Layout.strides` elementwise over degree arrays (expert degree 1)."""
    degrees = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    strides, stride = {}, 1
    for dim in parse_order(order):
        strides[dim] = stride
        stride = stride * degrees[dim]
    return strides


def joint_groups(layout: Layout, dims: tuple[str, ...], first_only: bool = False) -> np.ndarray:
    """Groups of ranks that differ only in ``dims``: ``[groups, size]``, rows ascending
    (only the group of rank 0 with ``first_only``)."""
    strides = layout.strides()
    offsets = _span(layout, strides, dims)
    if first_only:
        return offsets[None, :]
    # a rank is the sum of its coordinates times their strides over every dimension, so
    # the leaders (coordinate 0 in each of dims) are the sums over the other dimensions
    leaders = _span(layout, strides, tuple(d for d in strides if d not in dims))
    return leaders[:, None] + offsets[None, :]


_SPANS: dict[tuple, np.ndarray] = {}
""":func:`_span`'s offsets by the (stride, degree) of each dimension moved along (read-only
arrays; a search asks for the same spans across many layouts): at most 4096 spans of at
most :data:`_SPAN_KEPT` offsets (8 MiB)."""

_SPAN_KEPT = 256


def _span(layout: Layout, strides: dict[str, int], dims: tuple[str, ...]) -> np.ndarray:
    """The rank offsets reached by moving along ``dims`` from rank 0, ascending (read-only)."""
    key = tuple((strides[dim], layout.degrees.get(dim, 1)) for dim in dims)
    offsets = _SPANS.get(key)
    if offsets is None:
        offsets = np.zeros(1, dtype=np.int64)
        for stride, degree in key:
            offsets = (offsets[:, None] + stride * np.arange(degree, dtype=np.int64)[None, :]).ravel()
        offsets.sort()
        offsets.flags.writeable = False
        if len(offsets) <= _SPAN_KEPT:
            if len(_SPANS) >= 1 << 12:  # bounded: forget the oldest half
                for old in list(_SPANS)[:1 << 11]:
                    _SPANS.pop(old, None)
            _SPANS[key] = offsets
    return offsets


def expert_groups(layout: Layout, ep: int, etp: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(EP groups, expert-DP groups) of the expert grid (MoE parallel folding).

    The tensor x context x data ranks of one pipeline stage, in rank order, are the grid
    ``etp x ep x expert_dp``, expert TP innermost (Megatron-Core core_v0.14.0
    ``parallel_state.py initialize_model_parallel``, the expert ``RankGenerator`` with
    ``tp = expert_tensor_parallel_size``): consecutive runs of ``ep x etp`` ranks, each
    run's ranks at the same expert-TP position an expert-parallel group; ranks at the same
    position of every run form an expert-data-parallel group.
    """
    runs = _expert_grid(layout, ep, etp)  # [stage, expert_dp, ep, etp]
    ep_groups = runs.transpose(0, 1, 3, 2).reshape(-1, ep)
    edp_groups = runs.transpose(0, 2, 3, 1).reshape(-1, runs.shape[1])
    return ep_groups, edp_groups


def expert_tp_groups(layout: Layout, ep: int, etp: int, with_ep: bool = False) -> np.ndarray:
    """The expert-tensor-parallel groups of the expert grid (:func:`expert_groups`):
    ``etp`` consecutive ranks of a stage; with ``with_ep`` the expert-TP x EP groups, whole
    runs of ``ep x etp`` (the group a flex dispatcher all-to-alls over)."""
    runs = _expert_grid(layout, ep, etp)
    return runs.reshape(-1, ep * etp if with_ep else etp)


def _expert_grid(layout: Layout, ep: int, etp: int) -> np.ndarray:
    """``[stage, expert_dp, ep, etp]`` ranks of the expert grid."""
    stage_ranks = joint_groups(layout, ("tp", "cp", "dp"))  # one row per stage
    return stage_ranks.reshape(stage_ranks.shape[0], -1, ep, etp)


# -- communicator families as mixed-radix sets -----------------------------------------
#
# Every communicator group of a layout is ``leader + offsets`` where both the offsets
# and the leaders are mixed-radix sets ``{sum_d stride_d * c_d : 0 <= c_d < degree_d}``
# over some of the layout's dimensions (nested: a larger stride is a multiple of the
# smaller ones times their degrees). Pricing a group on the network only looks at which
# tier blocks its members fall into (network.group_shape, ring_link, tier_of_pair), and
# every tier block of every tier but the outermost has a size dividing ``period`` (the
# devices of one group of the second-outermost tier). Translating a group by a multiple
# of ``period`` therefore leaves its price unchanged. A leader dimension's values
# ``stride * c`` repeat modulo ``period`` once ``c`` reaches ``period / gcd(stride,
# period)``, so cutting every leader degree to that length keeps exactly the same set of
# leader residues: the reduced family has exactly the distinct group prices of the full
# one, with far fewer groups, and a key that many layouts share.

Dims = tuple[tuple[int, int], ...]


def _merge(dims) -> Dims:
    """(stride, degree) pairs by stride, degree-1 dimensions dropped, adjacent ones merged."""
    out: list[tuple[int, int]] = []
    for stride, degree in sorted((s, g) for s, g in dims if g > 1):
        if out and out[-1][0] * out[-1][1] == stride:
            out[-1] = (out[-1][0], out[-1][1] * degree)
        else:
            out.append((stride, degree))
    return tuple(out)


def reduce_leaders(dims: Dims, period: int) -> Dims:
    """``dims`` cut to the degrees whose values are distinct modulo ``period`` (see above)."""
    return _merge((s, min(g, period // math.gcd(s, period))) for s, g in dims)


def mixed_radix(dims: Dims) -> np.ndarray:
    """The sorted set ``{sum stride * c}`` of ``dims``."""
    values = np.zeros(1, dtype=np.int64)
    for stride, degree in dims:
        values = (values[:, None] + stride * np.arange(degree, dtype=np.int64)[None, :]).ravel()
    values.sort()
    return values


def family_groups(offsets: Dims, leaders: Dims) -> np.ndarray:
    """``[groups, size]`` device indices, rows ascending."""
    return mixed_radix(leaders)[:, None] + mixed_radix(offsets)[None, :]


def dims_of(layout: Layout, names) -> Dims:
    strides = layout.strides()
    return _merge((strides[d], layout.degrees.get(d, 1)) for d in names)


def joint_family(layout: Layout, dims: tuple[str, ...]) -> tuple[Dims, Dims]:
    """(offsets, leaders) of :func:`joint_groups` ``(layout, dims)``."""
    others = [d for d in DIMENSIONS if d not in dims]
    return dims_of(layout, dims), dims_of(layout, others)


def expert_families(layout: Layout, ep: int, etp: int = 1) -> dict[str, tuple[Dims, Dims]] | None:
    """(offsets, leaders) of the families of the expert grid (:func:`expert_groups`,
    :func:`expert_tp_groups`): ``"ep"``, ``"expert_dp"``, ``"expert_tp"`` and
    ``"expert_tp_ep"``; None when runs of ``etp`` and of ``ep x etp`` do not split the
    stage's dimensions (then only the explicit groups describe them).

    A stage's tensor x context x data ranks in ascending order are the mixed-radix set of
    those dimensions with the smallest stride as the fastest digit; the grid's digits are
    the first ones whose degrees multiply to ``etp`` (expert TP), the next ones to ``ep``
    (a dimension possibly split between them), and the rest (expert DP).
    """
    stage = dims_of(layout, ("tp", "cp", "dp"))
    outer = dims_of(layout, ("pp",))
    blocks = _digit_blocks(stage, (etp, ep))
    if blocks is None:
        return None
    inner, middle, rest = (_merge(b) for b in blocks)
    return {"expert_tp": (inner, _merge(middle + rest + outer)), "ep": (middle, _merge(inner + rest + outer)),
            "expert_dp": (rest, _merge(inner + middle + outer)),
            "expert_tp_ep": (_merge(inner + middle), _merge(rest + outer))}


def _digit_blocks(stage: Dims, sizes: tuple[int, ...]) -> list[list[tuple[int, int]]] | None:
    """``stage``'s (stride, degree) digits, fastest first, cut into consecutive blocks whose
    degrees multiply to each of ``sizes`` in turn, and the rest (a digit may be split
    between blocks); None when they do not cut there."""
    blocks: list[list[tuple[int, int]]] = []
    digits = list(stage)
    for need in sizes:
        block = []
        while need > 1:
            if not digits:
                return None
            stride, degree = digits.pop(0)
            if need % degree == 0:
                block.append((stride, degree))
                need //= degree
            elif degree % need == 0:
                block.append((stride, need))
                digits.insert(0, (stride * need, degree // need))
                need = 1
            else:
                return None
        blocks.append(block)
    return blocks + [digits]


SMALL_PAIRS = 64
"""Up to this many rank pairs, :func:`boundary_tiers_reduced` compares them in plain
Python (:func:`~nest.network.tiers.pair_tier`): numpy's per-call overhead exceeds the work."""


def boundary_tiers_reduced(layout: Layout, cluster: ClusterSpec, period: int) -> np.ndarray:
    """:meth:`Layout.boundary_tiers` from each stage's ranks reduced modulo ``period``
    (the tier of a pair of devices is unchanged by translating both by a multiple of it)."""
    pp = layout.degrees.get("pp", 1)
    stride = layout.strides()["pp"]
    offsets = mixed_radix(reduce_leaders(dims_of(layout, [d for d in DIMENSIONS if d != "pp"]), period))
    if pp * len(offsets) <= SMALL_PAIRS:
        sizes, within, tiers = cluster.group_sizes(), offsets.tolist(), []
        for k in range(pp):
            shift = stride if k < pp - 1 else -(pp - 1) * stride
            tiers.append(max(pair_tier(sizes, k * stride + o, k * stride + o + shift) for o in within))
        return np.array(tiers, dtype=np.int64)
    stage = np.arange(pp, dtype=np.int64)
    ranks = stage[:, None] * stride + offsets[None, :]
    shift = np.where(stage < pp - 1, stride, -(pp - 1) * stride)
    return tier_of_pair(cluster, ranks, ranks + shift[:, None]).max(axis=1)


@dataclass(frozen=True, eq=False)
class RankPlacement:
    """Where every rank of a plan runs, as arrays indexed by rank.

    ``coords[dim]`` for ``tp, cp, dp, pp`` (the layout) and ``expert_tp, ep, expert_dp``
    (MoE folding: a stage's tensor x context x data ranks in ascending order, the expert
    grid ``etp x ep x expert_dp`` of :func:`expert_groups`); ``device``: the
    device index (hierarchical clusters) or node id as a string (graphs); ``hosts`` and
    ``host``: the machines and each rank's (tier-0 group ``node<i>`` on hierarchical
    clusters, the device's ``host`` attribute or the device itself on graphs); ``slot``:
    the device's position among its host's devices (by device index), the local rank a
    launcher gives it.
    """

    coords: dict
    device: list
    hosts: list
    host: np.ndarray
    slot: np.ndarray
    on_graph: bool = False

    def records(self) -> list[dict]:
        """One dict per rank: ``rank``, the coordinates, ``device``, ``host``, ``slot``."""
        dims = ("tp", "cp", "dp", "pp", "ep", "expert_dp", "expert_tp")
        columns = [self.coords[d].tolist() for d in dims]
        host, slot = self.host.tolist(), self.slot.tolist()
        return [{"rank": r, **{d: c[r] for d, c in zip(dims, columns)}, "device": self.device[r],
                 "host": self.hosts[host[r]], "slot": slot[r]} for r in range(len(host))]


def rank_placement(cluster: ClusterSpec, layout: Layout, ep: int = 1, etp: int = 1) -> RankPlacement:
    """The :class:`RankPlacement` of ``layout`` on ``cluster`` (experts ``ep x etp``)."""
    coords = {d: c for d, c in layout.coordinates().items() if d != "ep"}
    n = layout.size
    within = np.empty(n, dtype=np.int64)  # position among the stage's ranks, ascending
    within[np.lexsort((np.arange(n), coords["pp"]))] = np.arange(n) % (n // layout.degrees.get("pp", 1))
    coords["expert_tp"], coords["ep"], coords["expert_dp"] = within % etp, within // etp % ep, within // (ep * etp)
    ranks = np.arange(n, dtype=np.int64)
    if cluster.graph is None:
        per_host = cluster.tiers[0].fanout
        host = ranks // per_host
        return RankPlacement(coords, ranks.tolist(), [f"node{h}" for h in range(int(host[-1]) + 1)], host,
                             ranks % per_host)
    attrs = cluster.graph.nodes
    order = cluster.device_order[:n]
    names, host = np.unique([str(attrs[d].get("host", d)) for d in order], return_inverse=True)
    from .routing import devices  # scipy only for graph clusters

    position = {d: i for i, d in enumerate(devices(cluster.graph))}
    index = np.array([position[d] for d in order], dtype=np.int64)
    # hosts in order of first appearance (their ranks), slots by device index on the host
    first = np.full(len(names), n)
    np.minimum.at(first, host.ravel(), ranks)
    rename = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    host = rename[host.ravel()]
    by_host = np.lexsort((index, host))
    slot = np.empty(n, dtype=np.int64)
    starts = np.searchsorted(host[by_host], host[by_host])
    slot[by_host] = np.arange(n) - starts
    hosts = [str(h) for h in names[np.argsort(rename)]]
    return RankPlacement(coords, [str(d) for d in order], hosts, host, slot, on_graph=True)
