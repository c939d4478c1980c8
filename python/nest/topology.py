"""Deprecated: the 0.1 name of nest's graph networks, kept for one release (the README of
0.1 documented ``nest.topology``). Use :mod:`nest.network.routing` (validation, routing,
collectives), :mod:`nest.network.generators`, :mod:`nest.network.graph` (locality order,
:class:`GraphNetwork`, :func:`graph_cluster`) and :mod:`nest.inputs.graph_files`."""

from .inputs.graph_files import load_graph
from .network.generators import dragonfly, fat_tree, from_hierarchy, rail_optimized, spine_leaf, torus
from .network.graph import GraphNetwork, Schedules, graph_cluster, level_sizes, locality_order, network
from .network.routing import (
                              EDGE_KEYS,
                              NODE_KEYS,
                              all_to_all,
                              devices,
                              point_to_point,
                              point_to_point_sets,
                              ring_collective,
                              validate,
)
from .units import GB

__all__ = ["EDGE_KEYS", "GB", "NODE_KEYS", "GraphNetwork", "Schedules", "all_to_all", "devices", "dragonfly",
           "fat_tree", "from_hierarchy", "graph_cluster", "level_sizes", "load_graph", "locality_order",
           "network", "point_to_point", "point_to_point_sets", "rail_optimized", "ring_collective",
           "spine_leaf", "torus", "validate"]
