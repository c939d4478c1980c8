"""Presets from public datasheets and papers: devices, models (with their published
parameter counts and batches) and clusters (hierarchical and generated graphs)."""

from .clusters import CLUSTERS, GRAPH_CLUSTERS
from .devices import DEVICES
from .models import MODELS

__all__ = ["CLUSTERS", "DEVICES", "GRAPH_CLUSTERS", "MODELS"]
