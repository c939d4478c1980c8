"""The network: what a communicator group or a pipeline transfer costs where it runs.

Modules: ``tiers`` (alpha-beta collectives on hierarchical tiers, NCCL calibration),
``layout`` (rank order -> device positions, communicator families), ``placement`` (one
:class:`Placer` per kind of network: a candidate's group prices and their floors),
``routing`` (graphs: validation, ECMP routing, link loads), ``graph`` (planning on a
graph: locality order, :class:`~nest.network.graph.GraphNetwork`, graph clusters) and
``generators`` (fat trees, rails, tori, dragonflies). The graph modules need scipy and
are imported only for graph clusters.
"""

from .layout import Layout, RankPlacement, rank_placement
from .placement import GroupTerms, Placement, Placer, placer_for
from .tiers import CollectiveEfficiency, GroupShape, calibrated_cluster, group_shape

__all__ = ["CollectiveEfficiency", "GroupShape", "GroupTerms", "Layout", "Placement", "Placer", "RankPlacement",
           "calibrated_cluster", "group_shape", "placer_for", "rank_placement"]
