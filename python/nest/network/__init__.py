"""The network: what a communicator group or a pipeline transfer costs where it runs.

Modules: ``tiers`` (alpha-beta collectives on hierarchical tiers, NCCL calibration),
``layout`` (rank order -> device positions, communicator families), ``placement`` (one
:class:`Placer` per kind of network: a candidate's group prices and their floors),
``routing`` (graphs: validation, ECMP routing, link loads), ``graph`` (planning on a
graph: locality order, :class:`~nest.network.graph.GraphNetwork`, graph clusters) and
``generators`` (fat trees, rails, tori, dragonflies). The graph modules need scipy and
are imported only for graph clusters.
"""

from .._lazy import lazy_exports

_EXPORTS = {
    "CollectiveEfficiency": ".tiers",
    "GroupShape": ".tiers",
    "GroupTerms": ".placement",
    "Layout": ".layout",
    "Placement": ".placement",
    "Placer": ".placement",
    "RankPlacement": ".layout",
    "calibrated_cluster": ".tiers",
    "group_shape": ".tiers",
    "placer_for": ".placement",
    "rank_placement": ".layout",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
