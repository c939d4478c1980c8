"""Inputs -> validated specs: preset names, model/device/cluster files (JSON, YAML),
Hugging Face ``config.json``, measured layer profiles, the NEST artifact's instances and
network graph files, resolved with one set of defaults (:mod:`nest.inputs.coerce`).

Modules: ``files`` (reading spec files), ``loading`` (presets and spec files), ``hf``,
``profiles`` and ``measured`` (measured layer tables as a node-cost source),
``nest_instance``, ``graph_files``, ``coerce``.
"""

from .._lazy import lazy_exports

_EXPORTS = {
    "coerce_inputs": ".coerce",
    "job_spec": ".coerce",
    "load_cluster": ".loading",
    "load_device": ".loading",
    "load_model": ".loading",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
