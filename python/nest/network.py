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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .specs import ClusterSpec


@dataclass(frozen=True)
class GroupShape:
    """How a communicator group spreads over the tiers (see the module docstring)."""

    factors: tuple[int, ...]  # one per tier, product = group size
    bandwidth: tuple[float, ...]  # effective bytes/s per tier
    latency: tuple[float, ...]  # seconds per tier

    @property
    def size(self) -> int:
        return math.prod(self.factors)

    @property
    def top_tier(self) -> int:
        """Index of the outermost tier the group crosses (-1 for a single rank)."""
        crossing = [t for t, f in enumerate(self.factors) if f > 1]
        return crossing[-1] if crossing else -1

    def reduce_scatter_terms(self) -> tuple[float, float]:
        """``(alpha, beta)``: a reduce-scatter of n bytes takes ``alpha + beta * n`` seconds."""
        alpha = beta = 0.0
        share = 1.0
        for factor, bandwidth, latency in zip(self.factors, self.bandwidth, self.latency):
            if factor > 1:
                alpha += (factor - 1) * latency
                beta += (factor - 1) / factor * share / bandwidth
                share /= factor
        return alpha, beta

    def reduce_scatter(self, nbytes: float) -> float:
        """Seconds for a reduce-scatter of ``nbytes`` (the full buffer on every rank)."""
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
    shapes = [GroupShape(tuple(int(f) for f in row), bandwidth, latency)
              for row in np.unique(_factor_rows(cluster, groups), axis=0)]
    return max(shapes, key=lambda shape: shape.reduce_scatter_terms()[::-1])


def _factor_rows(cluster: ClusterSpec, groups: np.ndarray) -> np.ndarray:
    """Per group, per tier: tier-(t-1) groups per tier-t group; flat ring if non-uniform."""
    rows, width = groups.shape
    sizes = (1,) + cluster.group_sizes()
    factors = np.ones((rows, len(cluster.tiers)), dtype=np.int64)
    uniform = np.ones(rows, dtype=bool)
    row_index = np.repeat(np.arange(rows), width).reshape(rows, width)
    for t in range(len(cluster.tiers)):
        inner, outer = groups // sizes[t], groups // sizes[t + 1]
        starts = np.ones_like(inner, dtype=bool)
        starts[:, 1:] = inner[:, 1:] != inner[:, :-1]
        segment = np.zeros_like(outer)
        segment[:, 1:] = np.cumsum(outer[:, 1:] != outer[:, :-1], axis=1)
        counts = np.zeros((rows, width), dtype=np.int64)
        np.add.at(counts, (row_index, segment), starts)
        present = counts > 0
        first = counts[:, 0]
        uniform &= ((counts == first[:, None]) | ~present).all(axis=1)
        factors[:, t] = first
    if not uniform.all():
        top = tier_of_pair(cluster, groups[:, :1], groups).max(axis=1)
        flat = np.ones_like(factors)
        flat[np.arange(rows), top] = width
        factors[~uniform] = flat[~uniform]
    return factors


def point_to_point(cluster: ClusterSpec, tier: int, nbytes: float) -> float:
    """Seconds to send ``nbytes`` between two devices whose innermost common tier is ``tier``."""
    t = cluster.tiers[tier]
    return t.latency + nbytes / t.effective_bandwidth
