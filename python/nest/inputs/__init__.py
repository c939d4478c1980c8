"""Inputs -> validated specs: preset names, model/device/cluster files (JSON, YAML),
Hugging Face ``config.json``, measured layer profiles, the NEST artifact's instances and
network graph files, resolved with one set of defaults (:mod:`nest.inputs.coerce`).

Modules: ``files`` (reading spec files), ``loading`` (presets and spec files), ``hf``,
``profiles`` and ``measured`` (measured layer tables as a node-cost source),
``nest_instance``, ``graph_files``, ``coerce``.
"""

from .coerce import coerce_inputs, job_spec
from .loading import load_cluster, load_device, load_model

__all__ = ["coerce_inputs", "job_spec", "load_cluster", "load_device", "load_model"]
