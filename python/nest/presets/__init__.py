"""Presets from public datasheets and papers: devices, models (with their published
parameter counts and batches) and clusters (hierarchical and generated graphs)."""

from .._lazy import lazy_exports

_EXPORTS = {
    "CLUSTERS": ".clusters",
    "DEVICES": ".devices",
    "GRAPH_CLUSTERS": ".clusters",
    "MODELS": ".models",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
