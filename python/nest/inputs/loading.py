"""Presets and spec files (JSON or YAML) -> validated specs.

File formats (units in the key names; every key optional unless noted):

model::

    base: gpt3-175b          # start from a preset, override the rest
    name: my-model           # required without base
    num_layers: 96
    ...                      # any ModelSpec field

device::

    base: a100-80gb
    memory_MiB: 40960        # or memory_GiB, memory_GB (nvidia-smi's total is in MiB)
    reserved_GiB: 2          # or reserved_MiB: memory kept from tensors (CUDA context,
                             # NCCL buffers, allocator fragmentation; default 2 GiB)
    hbm_bandwidth_GBps: 1555
    peak_TFLOPS_bf16: 312    # also _fp16, _fp8, _fp32
    gemm_efficiency: 0.75    # also hbm_efficiency, attention_efficiency
    kernel_overhead_us: 4
    host: dgx-h100           # a host preset (nest.presets.hosts), null, or a mapping:
                             # {base: dgx-h100, memory_GiB: 4096, memory_bandwidth_GBps: 614,
                             #  link_bandwidth_GBps: 63, devices: 8, cores: 112,
                             #  link_shared_by: 1, adam_Gparams_per_s_per_thread: 0.66, reserved_GiB: 16}

cluster::

    name: my-cluster
    device: a100-80gb        # a preset name or a device mapping as above
    tiers:                   # innermost first; fanouts multiply to the device count
      - {name: nvlink, fanout: 8, bandwidth_GBps: 300, latency_us: 3}
      - {name: ib, fanout: 16, bandwidth_GBps: 25, latency_us: 5, oversubscription: 2}

cluster on a graph (instead of ``tiers``)::

    name: my-cluster
    device: h100-sxm
    graph: net.graphml       # node-link JSON, GraphML or YAML edge list (nest.inputs.graph_files),
                             # relative to this file

A graph file can also be given directly (``--cluster net.graphml``): its graph
attributes ``name`` and ``device`` (a preset name; default ``h100-sxm``) name the cluster
and its devices (YAML edge lists: top-level ``name`` and ``device`` keys).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from ..errors import SpecError, mappings, reject_unknown_keys, short_repr
from ..presets.clusters import CLUSTERS, GRAPH_CLUSTERS
from ..presets.devices import DEVICES
from ..presets.hosts import HOSTS
from ..presets.models import MODELS
from ..specs import ClusterSpec, DeviceSpec, HostSpec, ModelSpec, Tier, field_names, from_mapping
from ..units import GiB, MiB
from .files import MAX_GRAPH_BYTES, is_path, read_spec_file


def _preset(table: dict, name: str, what: str):
    if name not in table:
        raise SpecError(f"{what} = {short_repr(name)}: unknown preset (known: {', '.join(sorted(table))})")
    return table[name]


def load_model(name_or_path: str | ModelSpec) -> ModelSpec:
    """A model preset by name, a model file (JSON/YAML, optional ``base`` preset), or a
    Hugging Face ``config.json`` (recognised by its ``model_type`` key)."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    if not is_path(name_or_path):
        return _preset(MODELS, name_or_path, "model")
    data = read_spec_file(name_or_path, "model")
    if "model_type" in data:
        from .hf import model_from_hf_config  # only for Hugging Face configs

        return model_from_hf_config(data, name=_hf_name(name_or_path, data))
    return _with_base(MODELS, ModelSpec, data, "model")


def _hf_name(path: str, data: dict) -> str:
    origin = data.get("_name_or_path")
    if isinstance(origin, str) and origin.strip("/"):
        return origin.rstrip("/").split("/")[-1]
    file = Path(path)
    return file.resolve().parent.name if file.name == "config.json" else file.stem


def _with_base(table: dict, cls, data: dict, what: str):
    data = dict(data)
    base = data.pop("base", None)
    if base is None:
        return from_mapping(cls, data, what)
    if not isinstance(base, str):
        raise SpecError(f"{what}.base = {short_repr(base)}: must be a preset name")
    preset = _preset(table, base, f"{what}.base")
    reject_unknown_keys(data, field_names(cls), what)
    try:
        return replace(preset, **data)
    except TypeError as error:
        raise SpecError(f"{what}: {error}") from None


_DEVICE_UNITS = {
    "memory_MiB": ("memory_bytes", MiB),
    "memory_GiB": ("memory_bytes", GiB),
    "memory_GB": ("memory_bytes", 1e9),
    "reserved_MiB": ("reserved_bytes", MiB),
    "reserved_GiB": ("reserved_bytes", GiB),
    "hbm_bandwidth_GBps": ("hbm_bandwidth", 1e9),
    "peak_TFLOPS_bf16": ("peak_flops_bf16", 1e12),
    "peak_TFLOPS_fp16": ("peak_flops_fp16", 1e12),
    "peak_TFLOPS_fp8": ("peak_flops_fp8", 1e12),
    "peak_TFLOPS_fp32": ("peak_flops_fp32", 1e12),
    "kernel_overhead_us": ("kernel_overhead_s", 1e-6),
}

_HOST_UNITS = {
    "memory_GiB": ("memory_bytes", GiB),
    "memory_GB": ("memory_bytes", 1e9),
    "memory_bandwidth_GBps": ("memory_bandwidth", 1e9),
    "link_bandwidth_GBps": ("link_bandwidth", 1e9),
    "reserved_GiB": ("reserved_bytes", GiB),
    "adam_Gparams_per_s_per_thread": ("adam_rate_per_thread", 1e9),
}

_TIER_UNITS = {"bandwidth_GBps": ("bandwidth", 1e9), "bandwidth_GiBps": ("bandwidth", GiB),
               "latency_us": ("latency", 1e-6)}


def _convert_units(data: dict, units: dict, what: str) -> dict:
    converted = {}
    for key, value in data.items():
        if key in units:
            target, factor = units[key]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise SpecError(f"{what}.{key} = {short_repr(value)}: must be a finite number")
            if target in converted:
                raise SpecError(f"{what}.{key} = {short_repr(value)}: {target} is given twice")
            converted[target] = value * factor
            if not math.isfinite(converted[target]):  # e.g. 1e308 GiB
                raise SpecError(f"{what}.{key} = {short_repr(value)}: too large")
        else:
            converted[key] = value
    return converted


def device_from_mapping(data: dict, what: str = "device") -> DeviceSpec:
    """A device from a file mapping (unit-suffixed keys, optional ``base`` preset; ``host``
    a host preset name, a host mapping or null)."""
    if not isinstance(data, dict):
        raise SpecError(f"{what} = {short_repr(data)}: must be a preset name or a mapping")
    data = _convert_units(data, _DEVICE_UNITS, what)
    if "host" in data:
        data["host"] = host_from_mapping(data["host"], f"{what}.host")
    return _with_base(DEVICES, DeviceSpec, data, what)


def host_from_mapping(data, what: str = "host") -> HostSpec | None:
    """A host from a preset name (:mod:`nest.presets.hosts`), a mapping (unit-suffixed
    keys, optional ``base`` preset) or None (no host: nothing can be offloaded)."""
    if data is None or isinstance(data, HostSpec):
        return data
    if isinstance(data, str):
        return _preset(HOSTS, data, what)
    if not isinstance(data, dict):
        raise SpecError(f"{what} = {short_repr(data)}: must be a host preset name, a mapping or null")
    return _with_base(HOSTS, HostSpec, _convert_units(data, _HOST_UNITS, what), what)


def load_device(name_or_path: str | DeviceSpec) -> DeviceSpec:
    """A device preset by name, or a device file."""
    if isinstance(name_or_path, DeviceSpec):
        return name_or_path
    if not is_path(name_or_path):
        return _preset(DEVICES, name_or_path, "device")
    return device_from_mapping(read_spec_file(name_or_path, "device"))


GRAPH_DEFAULT_DEVICE = "h100-sxm"
"""The device of a graph file that names none."""


def _is_graph(data: dict) -> bool:
    """Whether a cluster file's mapping is a graph (node-link JSON or a YAML edge list)."""
    return "nodes" in data and ("links" in data or "edges" in data)


def graph_cluster_from_file(path, device=None, name: str | None = None) -> ClusterSpec:
    """A cluster on the graph in ``path`` (:func:`nest.inputs.graph_files.load_graph`); the device
    is ``device`` (a spec, preset name or mapping), else the graph's ``device`` attribute,
    else :data:`GRAPH_DEFAULT_DEVICE`."""
    # networkx and scipy only when a graph is read (they dominate nest's start-up)
    from ..network.graph import graph_cluster
    from .graph_files import load_graph

    graph = load_graph(path)
    attrs = dict(graph.graph)
    spec = device if device is not None else attrs.get("device", GRAPH_DEFAULT_DEVICE)
    if isinstance(spec, DeviceSpec):
        dev = spec
    elif isinstance(spec, str):
        dev = load_device(spec)
    else:
        dev = device_from_mapping(spec, "cluster.device")
    label = name or attrs.get("name") or Path(path).stem
    return graph_cluster(graph, dev, name=str(label), source=str(path))


def load_cluster(name_or_path: str | ClusterSpec, devices: int | None = None) -> ClusterSpec:
    """A cluster preset sized to ``devices`` (hierarchical or on a generated graph), a
    cluster file (whose tiers or graph fix the size) or a graph file."""
    if isinstance(name_or_path, ClusterSpec):
        cluster = name_or_path
    elif not is_path(name_or_path):
        return _preset({**CLUSTERS, **GRAPH_CLUSTERS}, name_or_path, "cluster").sized(devices)
    elif Path(name_or_path).suffix.lower() == ".graphml":
        cluster = graph_cluster_from_file(name_or_path)
    else:  # tiers, a graph file's name, or a graph itself (JSON/YAML): read with the graphs' bound
        data = read_spec_file(name_or_path, "cluster", MAX_GRAPH_BYTES)
        if Path(name_or_path).suffix.lower() in (".json", ".yaml", ".yml") and _is_graph(data):
            data = None  # parsed again, as a graph
            cluster = graph_cluster_from_file(name_or_path)
        else:
            cluster = cluster_from_mapping(data, base=Path(name_or_path).parent)
    if devices is not None and devices != cluster.num_devices:
        raise SpecError(f"devices = {devices}: cluster {cluster.name}'s tiers multiply to "
                        f"{cluster.num_devices} devices")
    return cluster


def cluster_from_mapping(data: dict, base: Path | None = None) -> ClusterSpec:
    """A cluster from a file mapping: name, device, and tiers (innermost first) or
    ``graph`` (a graph file, relative to ``base``)."""
    data = dict(data)
    reject_unknown_keys(data, {"name", "device", "tiers", "graph", "source"}, "cluster")
    if "tiers" in data and "graph" in data:
        raise SpecError(f"cluster.graph = {short_repr(data['graph'])}: give tiers or a graph, not both")
    for key in ("name", "device", "graph" if "graph" in data else "tiers"):
        if key not in data:
            raise SpecError(f"cluster.{key}: missing")
    if not isinstance(data["name"], str) or not data["name"]:
        raise SpecError(f"cluster.name = {short_repr(data['name'])}: must be a non-empty string")
    device = data["device"]
    device = load_device(device) if isinstance(device, str) else device_from_mapping(device, "cluster.device")
    if "graph" in data:
        path = data["graph"]
        if not isinstance(path, str):
            raise SpecError(f"cluster.graph = {short_repr(path)}: must be a graph file path")
        path = Path(path) if base is None or Path(path).is_absolute() else base / path
        return graph_cluster_from_file(path, device, name=str(data["name"]))
    parsed = []
    for i, (where, tier) in enumerate(mappings(data["tiers"], "cluster.tiers")):
        tier = _convert_units(tier, _TIER_UNITS, where)
        tier.setdefault("name", f"tier{i}")
        parsed.append(from_mapping(Tier, tier, where))
    return ClusterSpec(name=str(data["name"]), device=device, tiers=tuple(parsed),
                       source=str(data.get("source", "")))
