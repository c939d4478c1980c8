"""Where each rank sits: parallel coordinates -> device index, by rank order.

The rank order names the parallel dimensions innermost first (Megatron-LM's default
``tp-cp-ep-dp-pp``: tensor-parallel peers are adjacent devices, pipeline stages are
farthest apart). Rank ``r`` runs on device ``r``; a plan that uses fewer devices than
the cluster has takes the first ``devices_used`` devices, which keeps it compact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import SpecError
from .network import GroupShape, group_shape, tier_of_pair
from .specs import ClusterSpec

DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def parse_order(order: str) -> tuple[str, ...]:
    """Validate a rank-order string such as ``tp-cp-ep-dp-pp``."""
    dims = tuple(order.split("-"))
    if sorted(dims) != sorted(DIMENSIONS):
        raise SpecError(f"rank_order = {order!r}: must name each of {', '.join(DIMENSIONS)} once, "
                        "innermost first, separated by '-'")
    return dims


@dataclass(frozen=True)
class Layout:
    """Degrees of every parallel dimension and their nesting on the device list."""

    degrees: dict
    order: str = DEFAULT_ORDER

    def __post_init__(self):
        parse_order(self.order)

    @property
    def size(self) -> int:
        return int(np.prod([self.degrees.get(d, 1) for d in DIMENSIONS]))

    def strides(self) -> dict[str, int]:
        strides, stride = {}, 1
        for dim in parse_order(self.order):
            strides[dim] = stride
            stride *= self.degrees.get(dim, 1)
        return strides

    def coordinates(self) -> dict[str, np.ndarray]:
        """Per rank (index = device), its coordinate in every dimension."""
        ranks = np.arange(self.size, dtype=np.int64)
        strides = self.strides()
        return {dim: (ranks // strides[dim]) % self.degrees.get(dim, 1) for dim in DIMENSIONS}

    def groups(self, dim: str) -> np.ndarray:
        """All communicator groups of ``dim``: ``[size / degree, degree]`` device indices."""
        degree = self.degrees.get(dim, 1)
        stride = self.strides()[dim]
        ranks = np.arange(self.size, dtype=np.int64)
        leaders = ranks[(ranks // stride) % degree == 0]
        return leaders[:, None] + stride * np.arange(degree, dtype=np.int64)[None, :]

    def group_shape(self, cluster: ClusterSpec, dim: str) -> GroupShape:
        """The worst-placed group of ``dim`` on ``cluster``."""
        return group_shape(cluster, self.groups(dim))

    def stage_devices(self, stage: int) -> np.ndarray:
        """Device indices of pipeline stage ``stage``."""
        return np.flatnonzero(self.coordinates()["pp"] == stage)

    def boundary_tiers(self, cluster: ClusterSpec) -> np.ndarray:
        """Tier crossed from stage k to stage k+1 (worst over the stage's ranks), for
        k < pp; entry pp-1 is the wrap-around from the last stage to the first, which
        interleaved schedules use."""
        pp = self.degrees.get("pp", 1)
        stride = self.strides()["pp"]
        stage = self.coordinates()["pp"]
        ranks = np.arange(self.size, dtype=np.int64)
        partner = np.where(stage < pp - 1, ranks + stride, ranks - (pp - 1) * stride)
        tiers = tier_of_pair(cluster, ranks, partner)
        worst = np.zeros(pp, dtype=np.int64)
        np.maximum.at(worst, stage, tiers)
        return worst


def joint_groups(layout: Layout, dims: tuple[str, ...], first_only: bool = False) -> np.ndarray:
    """Groups of ranks that differ only in ``dims``: ``[groups, size]``, rows ascending
    (only the group of rank 0 with ``first_only``)."""
    strides = layout.strides()
    offsets = np.zeros(1, dtype=np.int64)
    for dim in dims:
        step = strides[dim] * np.arange(layout.degrees.get(dim, 1), dtype=np.int64)
        offsets = (offsets[:, None] + step[None, :]).ravel()
    offsets.sort()
    if first_only:
        return offsets[None, :]
    coords = layout.coordinates()
    leader = np.ones(layout.size, dtype=bool)
    for dim in dims:
        leader &= coords[dim] == 0
    return np.flatnonzero(leader)[:, None] + offsets[None, :]


def expert_groups(layout: Layout, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """(EP groups, expert-DP groups) under MoE parallel folding with expert TP = 1.

    The tensor x context x data ranks of one pipeline stage, in rank order, are regrouped
    into consecutive runs of ``ep`` (expert-parallel groups); ranks at the same position
    of every run form an expert-data-parallel group.
    """
    stage_ranks = joint_groups(layout, ("tp", "cp", "dp"))  # one row per stage
    runs = stage_ranks.reshape(stage_ranks.shape[0], -1, ep)
    ep_groups = runs.reshape(-1, ep)
    edp_groups = runs.transpose(0, 2, 1).reshape(-1, runs.shape[1])
    return ep_groups, edp_groups
