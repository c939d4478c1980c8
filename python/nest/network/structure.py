"""What a generator knows about the graph it builds, kept with the graph.

The general algorithms of :mod:`nest.network.graph` and :mod:`nest.network.paths` work on
any graph but cost all-pairs work: a locality order from complete-linkage clustering of
every device-hosting router, a Dijkstra search from every router that sends. A generator
(:mod:`nest.network.generators`) knows the answers or the symmetry that makes them cheap,
and attaches them as a :class:`Structure`:

* ``order``/``levels``: the locality order (device indices) and its level sizes, exactly
  what :func:`~nest.network.graph.locality_order` and
  :func:`~nest.network.graph.level_sizes` compute (the generators attach them only under
  conditions that make them so; ``tests/test_structure.py`` compares them with the
  general algorithm);
* ``symmetry``: a group of automorphisms on integer node coordinates
  (:class:`Symmetry`): routes and distances from one canonical router give those of
  every router.

A structure belongs to the read-only copy of the graph as generated
(:func:`~nest.frozen_graph.read_only_graph`): a graph the caller changes afterwards gets
a new copy without it, and the general algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..frozen_graph import is_read_only_graph, read_only_graph

_ATTR = "_nest_structure"  # the attribute of the read-only copy holding its Structure


@dataclass(frozen=True)
class Symmetry:
    """Automorphisms of a graph acting on integer node coordinates.

    ``coords`` maps every node to ``(kind, c_0, ..., c_{A-1})``: a class label (nodes of
    different kinds never map to each other) and one value per axis, ``-1`` where the node
    has no coordinate on that axis (it is fixed by that axis' maps). Axis ``a`` takes the
    values ``0..sizes[a]-1``. With ``shift`` every translation ``c_a -> (c_a + g_a) mod
    sizes[a]`` on all axes at once is an automorphism (tori); otherwise, every
    transposition of two values of one axis, applied to all nodes (rails of a
    rail-optimized cluster, the groups of each level of a hierarchy). Automorphisms keep
    every link's capacity, latency and cost, hence every price."""

    coords: dict
    sizes: tuple[int, ...]
    shift: bool


@dataclass(frozen=True)
class Structure:
    """What a generator knows: ``order`` (device indices in locality order; None: the index
    order) with its ``levels`` (None: unknown, computed by the general algorithm, as the
    order then is), and ``symmetry`` (None: none known)."""

    order: tuple | None = None
    levels: tuple[int, ...] | None = None
    symmetry: Symmetry | None = None

    @property
    def knows_order(self) -> bool:
        """Whether the locality order and its levels are known (else they are clustered)."""
        return self.levels is not None


def attach(graph, structure: Structure):
    """``graph``, with ``structure`` kept on its read-only copy (what a cluster built from
    ``graph`` holds while ``graph`` is unchanged)."""
    object.__setattr__(read_only_graph(graph), _ATTR, structure)
    return graph


def structure_of(graph) -> Structure | None:
    """The structure the generator attached to ``graph`` (read-only graphs; None for any
    other graph, a graph changed since, or one that was never generated)."""
    if not is_read_only_graph(graph):
        return None
    return graph.__dict__.get(_ATTR)
