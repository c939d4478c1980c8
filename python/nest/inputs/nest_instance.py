"""The NEST artifact's dynamic-programming input JSON -> profile, cluster, job, baselines.

The artifact (github.com/scai-tech/Nest, ``nest/Solver/solver.py`` writes the file,
``nest/Solver/device_placement/device_placement.cpp`` reads it) describes one solver
instance. Its fields and how :func:`load_instance` converts them to SI units:

``nodes`` ``{"<tp>": [{id, optimalLatencyFw, optimalLatencyBw, parameterSize, activationSize, isTensorParallelized}]}``
    Per tensor-parallel width, one entry per layer-graph node: id -1 is the embedding,
    0 .. L-1 the transformer layers. Latencies are milliseconds (-> seconds); sizes are
    bytes of the layer slice on one device (16-bit elements, 2 bytes each). They become
    a :class:`~nest.inputs.profiles.MeasuredProfile` measured at the instance's micro-batch,
    with node names ``embedding``, ``block.0`` ... ``block.{L-1}``.
``edges`` ``{"<tp>": [{sourceId, destId, communicationCost}]}``
    Bytes sent between nodes per micro-batch. A node's ``output_bytes`` is the cost of
    its edge to the next node (``boundary="chain"``, the default: what Megatron-style
    pipelines send between stages), or with ``boundary="cut"`` the sum of every edge
    from this node or an earlier one to a later node (BERT's graph also has edges from
    the embedding to every layer: its attention mask and, to the last layer, the tied
    decoder weights). The last node sends nothing.
``maxDevices``, ``devices_per_level``, ``bws``, ``latency_per_level``, ``maxMemoryPerDevice``
    -> a :class:`~nest.specs.ClusterSpec` with one tier per level (innermost first;
    fanout = devices per level, bandwidth = ``bws`` in bytes/s, latency in seconds) of
    devices whose memory is ``maxMemoryPerDevice`` bytes. Compute comes from the
    measured latencies, so the device's peak FLOP/s and HBM bandwidth are documented
    placeholders (:data:`PLACEHOLDER_PEAK_FLOPS`, :data:`PLACEHOLDER_HBM_BANDWIDTH`);
    they only enter reported MFU. (``bandwidth`` and ``frequency`` are legacy scalars
    of the artifact and are not used.)
``mbsInBatch``, ``ep_degree``
    The artifact trains a global batch of :data:`GLOBAL_BATCH_SEQUENCES` sequences;
    ``mbsInBatch = 4096 / (micro_batch x ep_degree)`` micro-batches, so the
    per-device micro-batch is ``4096 / (mbsInBatch x ep_degree)``. The artifact's
    data-parallel degree ``d`` excludes the expert ranks: a configuration uses
    ``p x t x ep x cp x d`` devices, and in Megatron-LM's convention (expert ranks
    inside data parallelism) its data-parallel degree is ``d x ep``.
``cp_degree``, ``sp_enabled``, ``activationRecomputation``, ``optimizerAlgorithm``
    Kept as they are; recomputation is the artifact's whole-stage recomputation, priced
    as ``full``. The artifact counts 2 bytes of weights and 2 of gradients per parameter
    for SGD, plus 12 (fp32 copy, momentum, variance) for Adam; :attr:`NestInstance.optimizer`
    is that accounting as an :class:`~nest.specs.OptimizerSpec`.
``baselines`` ``{"Manual"|"Phaze"|"MCMC": {p, t, d, num_transformer_layers[, layer_partition]}}``
    Fixed configurations; see :class:`Baseline` for the artifact's layer split.

Sequence lengths are not in the file; they follow the model named in the file name
(``<setup>_<model>_mbs<k>_n<devices>[_seq].json``) per the artifact's estimate files
(:data:`ARTIFACT_SEQ_LEN`), or the caller's ``seq_len``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError, mappings, non_empty_list, short_repr
from ..specs import ClusterSpec, DeviceSpec, JobSpec, OptimizerSpec, Tier
from .files import read_json_object
from .profiles import MAX_BYTES, MAX_SECONDS, MeasuredProfile, Measurement, NodeMeasurement

GLOBAL_BATCH_SEQUENCES = 4096
"""The artifact's global batch in sequences (``global_batch_size`` in nest/Solver/solver.py)."""

BYTES_PER_ELEMENT = 2
"""The artifact's sizes count 16-bit elements."""

ARTIFACT_SEQ_LEN = {"bert": 512, "gpt3": 2048, "llama2": 4096, "llama3": 4096, "mixtral": 4096}
"""Sequence length per model, from the artifact's estimate files (e.g. ``llama3_mbs_1_sl_4096``)."""

PLACEHOLDER_PEAK_FLOPS = 1e15
"""Peak FLOP/s of the instance's device: irrelevant for measured times (MFU only)."""

PLACEHOLDER_HBM_BANDWIDTH = 1e12
"""HBM bytes/s of the instance's device: irrelevant for measured times."""

BOUNDARIES = ("chain", "cut")

_NAME = re.compile(r"^(?P<setup>.+)_(?P<model>[A-Za-z0-9.]+)_mbs(?P<mbs>\d+)_n(?P<n>\d+)(?P<seq>_seq)?$")
_NODE_KEYS = ("id", "optimalLatencyFw", "optimalLatencyBw", "parameterSize", "activationSize")


@dataclass(frozen=True)
class Baseline:
    """A fixed configuration of the instance (p stages, TP width t, data-parallel degree d).

    Without ``layer_partition`` the artifact gives every stage ``ceil(L / p)``
    transformer layers until they run out (``fixedConfigTimePerBatch`` in
    device_placement.cpp), so trailing stages may be empty; the embedding node always
    joins the first stage.
    """

    name: str
    p: int
    t: int
    d: int
    num_transformer_layers: int
    layer_partition: tuple[int, ...] | None = None

    def blocks_per_stage(self) -> tuple[int, ...]:
        """Transformer layers per stage, first stage first (may contain zeros)."""
        if self.layer_partition is not None:
            return self.layer_partition
        layers, per = self.num_transformer_layers, -(-self.num_transformer_layers // self.p)
        return tuple(min((k + 1) * per, layers) - min(k * per, layers) for k in range(self.p))

    def nodes_per_stage(self) -> tuple[int, ...]:
        """Graph nodes per stage (the embedding node counted in the first stage)."""
        counts = list(self.blocks_per_stage())
        counts[0] += 1
        return tuple(counts)

    def devices(self, ep_degree: int = 1, cp_degree: int = 1) -> int:
        """Devices the configuration occupies: ``p x t x ep x cp x d``."""
        return self.p * self.t * ep_degree * cp_degree * self.d


@dataclass(frozen=True)
class Edge:
    """``bytes`` sent per micro-batch from node position ``source`` to ``dest`` at TP ``tp``."""

    tp: int
    source: int
    dest: int
    bytes: float


@dataclass(frozen=True)
class NestInstance:
    """One NEST-artifact instance in nest's units (seconds, bytes, bytes/s)."""

    name: str
    profile: MeasuredProfile
    node_ids: tuple[int, ...]  # the artifact's ids in node order: -1, 0, ..., L-1
    edges: tuple[Edge, ...]  # positions index profile.names
    cluster: ClusterSpec
    max_devices: int
    micro_batch: int  # sequences per micro-batch per device
    mbs_in_batch: int
    ep_degree: int
    cp_degree: int
    sp_enabled: bool
    activation_recomputation: bool
    optimizer_algorithm: str
    baselines: dict = field(default_factory=dict)  # name -> Baseline
    seq_len: int | None = None
    global_batch: int = GLOBAL_BATCH_SEQUENCES
    setup: str = ""
    model: str = ""
    sequential: bool = False  # the artifact's "_seq" (sequential per-layer scheduling) variant
    boundary: str = "chain"
    source: str = ""

    @property
    def num_layers(self) -> int:
        """Transformer layers (graph nodes minus the embedding)."""
        return self.profile.num_nodes - 1

    @property
    def recompute(self) -> str:
        """nest's recomputation mode for the instance: ``full`` or ``none``."""
        return "full" if self.activation_recomputation else "none"

    @property
    def dtype(self) -> str:
        """The artifact's 16-bit training precision, as nest's ``bf16``."""
        return "bf16"

    @property
    def optimizer(self) -> OptimizerSpec:
        """The artifact's optimizer memory accounting, bytes per parameter."""
        if self.optimizer_algorithm == "Adam":
            return OptimizerSpec(name="adam", grad_bytes=2, master_bytes=4, state_bytes=8)
        return OptimizerSpec(name="sgd", grad_bytes=2, master_bytes=0, state_bytes=0)

    def job(self, seq_len: int | None = None, **overrides) -> JobSpec:
        """The instance's job: 4096 sequences, bf16, the artifact's optimizer accounting."""
        seq_len = seq_len or self.seq_len
        if seq_len is None:
            raise SpecError(f"seq_len = None: instance {self.name!r} names no known model; "
                            "pass seq_len")
        values = dict(global_batch=self.global_batch, seq_len=seq_len, dtype=self.dtype,
                      optimizer=self.optimizer)
        values.update(overrides)
        return JobSpec(**values)

    def fits(self, baseline: Baseline) -> bool:
        """Whether ``baseline`` fits the instance's devices (the artifact's own baselines
        for 64 devices sometimes do not; its solver then reports them as failed)."""
        return baseline.devices(self.ep_degree, self.cp_degree) <= self.max_devices

    def cut_bytes(self, tp: int) -> tuple[float, ...]:
        """Bytes crossing the boundary after each node position (all edges), at ``tp``."""
        cuts = [0.0] * self.profile.num_nodes
        for e in self.edges:
            if e.tp == tp:
                for k in range(e.source, e.dest):
                    cuts[k] += e.bytes
        return tuple(cuts)


def _int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(f"{what} = {short_repr(value)}: must be an integer >= {minimum}")
    return value


def _number(value, what: str, positive: bool = False, maximum: float = math.inf) -> float:
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        raise SpecError(f"{what} = {short_repr(value)}: must be a finite number {'> 0' if positive else '>= 0'}")
    if value > maximum:
        # far beyond any measured layer or network; keeps the DP's int64 picoseconds safe
        raise SpecError(f"{what} = {short_repr(value)}: must be at most {maximum:g}")
    return float(value)


MAX_MS = MAX_SECONDS * 1e3
"""Largest node latency (milliseconds): :data:`nest.inputs.profiles.MAX_SECONDS`."""


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{what} = {short_repr(value)}: must be true or false")
    return value


def _list(data: dict, key: str, where: str) -> list:
    return non_empty_list(data.get(key), f"{where}.{key}")


def _require(data: dict, key: str, where: str):
    if key not in data:
        raise SpecError(f"{where}.{key}: missing")
    return data[key]


def _cluster(data: dict, where: str, name: str) -> tuple[ClusterSpec, int]:
    devices = _int(_require(data, "maxDevices", where), f"{where}.maxDevices")
    fanouts = [_int(v, f"{where}.devices_per_level[{i}]")
               for i, v in enumerate(_list(data, "devices_per_level", where))]
    bws = [_number(v, f"{where}.bws[{i}]", positive=True) for i, v in enumerate(_list(data, "bws", where))]
    lat = [_number(v, f"{where}.latency_per_level[{i}]", maximum=MAX_SECONDS)
           for i, v in enumerate(_list(data, "latency_per_level", where))]
    if not len(fanouts) == len(bws) == len(lat):
        raise SpecError(f"{where}.bws = {short_repr(bws)}: devices_per_level, bws and latency_per_level "
                        "must have one entry per level")
    if math.prod(fanouts) != devices:
        raise SpecError(f"{where}.devices_per_level = {short_repr(fanouts)}: multiplies to "
                        f"{math.prod(fanouts)}, maxDevices is {devices}")
    memory = _number(_require(data, "maxMemoryPerDevice", where), f"{where}.maxMemoryPerDevice",
                     positive=True)
    device = DeviceSpec(name=f"{name}-device", memory_bytes=memory,
                        hbm_bandwidth=PLACEHOLDER_HBM_BANDWIDTH, peak_flops_bf16=PLACEHOLDER_PEAK_FLOPS,
                        source="NEST artifact instance; peak FLOP/s and HBM bandwidth are placeholders")
    tiers = tuple(Tier(name=f"level{i}", fanout=f, bandwidth=b, latency=l)
                  for i, (f, b, l) in enumerate(zip(fanouts, bws, lat)))
    return ClusterSpec(name=name, device=device, tiers=tiers, source=f"NEST artifact instance {name}"), devices


def _graph(data: dict, where: str, micro_batch: int, boundary: str):
    """(profile measurements, node ids, edges) of every TP width."""
    nodes_by_tp, edges_by_tp = data.get("nodes"), data.get("edges")
    for key, value in (("nodes", nodes_by_tp), ("edges", edges_by_tp)):
        if not isinstance(value, dict) or not value:
            raise SpecError(f"{where}.{key} = {short_repr(value)}: must map TP widths to lists")
    if set(nodes_by_tp) != set(edges_by_tp):
        raise SpecError(f"{where}.edges: TP widths {sorted(edges_by_tp)} differ from nodes' "
                        f"{sorted(nodes_by_tp)}")
    ids = None
    measurements, edges = [], []
    for key in sorted(nodes_by_tp, key=lambda k: _tp(k, where)):
        tp = _tp(key, where)
        by_id = {}
        for here, node in mappings(nodes_by_tp[key], f"{where}.nodes[{short_repr(key)}]"):
            for name in _NODE_KEYS:
                _require(node, name, here)
            node_id = node["id"]
            if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id in by_id:
                raise SpecError(f"{here}.id = {short_repr(node_id)}: must be a unique integer")
            by_id[node_id] = node
        order = sorted(by_id)
        if order != list(range(-1, len(order) - 1)):
            raise SpecError(f"{where}.nodes[{short_repr(key)}]: ids {order[:3]}... must be -1 (embedding), "
                            "0, 1, ... (layers)")
        if ids is None:
            ids = tuple(order)
        elif tuple(order) != ids:
            raise SpecError(f"{where}.nodes[{short_repr(key)}]: {len(order)} nodes, other TP widths have {len(ids)}")
        position = {node_id: k for k, node_id in enumerate(ids)}
        tp_edges = []
        for i, e in enumerate(edges_by_tp[key] or []):
            here = f"{where}.edges[{short_repr(key)}][{i}]"
            if not isinstance(e, dict):
                raise SpecError(f"{here} = {short_repr(e)}: must be a mapping")
            src, dst = _require(e, "sourceId", here), _require(e, "destId", here)
            if src not in position or dst not in position or position[src] >= position[dst]:
                raise SpecError(f"{here}: edge {short_repr(src)} -> {short_repr(dst)} must join known nodes forward")
            cost = _number(_require(e, "communicationCost", here), f"{here}.communicationCost",
                           maximum=MAX_BYTES)
            tp_edges.append(Edge(tp, position[src], position[dst], cost))
        chain = {(e.source, e.dest): e.bytes for e in tp_edges}
        out = []
        for k in range(len(ids)):
            if k == len(ids) - 1:
                out.append(0.0)
            elif (k, k + 1) not in chain:
                raise SpecError(f"{where}.edges[{short_repr(key)}]: no edge from node {ids[k]} to node {ids[k + 1]}")
            elif boundary == "chain":
                out.append(chain[(k, k + 1)])
            else:
                out.append(sum(e.bytes for e in tp_edges if e.source <= k < e.dest))
            if out[-1] > MAX_BYTES:
                raise SpecError(f"{where}.edges[{short_repr(key)}]: {out[-1]:g} bytes leave node {ids[k]}, "
                                f"at most {MAX_BYTES:g} supported")
        names = ["embedding"] + [f"block.{i}" for i in range(len(ids) - 1)]
        measured = []
        for k, node_id in enumerate(ids):
            node = by_id[node_id]
            here = f"{where}.nodes[{short_repr(key)}] id {node_id}"
            measured.append(NodeMeasurement(
                name=names[k],
                forward_s=_number(node["optimalLatencyFw"], f"{here}.optimalLatencyFw", maximum=MAX_MS) * 1e-3,
                backward_s=_number(node["optimalLatencyBw"], f"{here}.optimalLatencyBw", maximum=MAX_MS) * 1e-3,
                param_bytes=_number(node["parameterSize"], f"{here}.parameterSize", maximum=MAX_BYTES),
                activation_bytes=_number(node["activationSize"], f"{here}.activationSize",
                                         maximum=MAX_BYTES),
                output_bytes=out[k]))
        measurements.append(Measurement(tp, micro_batch, tuple(measured)))
        edges += tp_edges
    return tuple(measurements), ids, tuple(edges)


def _tp(key, where: str) -> int:
    try:
        return _int(int(key), f"{where}.nodes key")
    except (TypeError, ValueError):
        raise SpecError(f"{where}.nodes key {short_repr(key)}: must be a TP width") from None


def _baselines(data: dict, where: str, layers: int) -> dict:
    raw = data.get("baselines", {}) or {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where}.baselines = {short_repr(raw)}: must be a mapping")
    result = {}
    for name, cfg in raw.items():
        here = f"{where}.baselines.{name}"
        if not isinstance(cfg, dict):
            raise SpecError(f"{here} = {short_repr(cfg)}: must be a mapping")
        values = {k: _int(_require(cfg, k, here), f"{here}.{k}") for k in ("p", "t", "d")}
        count = _int(_require(cfg, "num_transformer_layers", here), f"{here}.num_transformer_layers")
        if count != layers:
            raise SpecError(f"{here}.num_transformer_layers = {count}: the graph has {layers} layers")
        partition = cfg.get("layer_partition")
        if partition is not None:
            if not isinstance(partition, list):
                raise SpecError(f"{here}.layer_partition = {short_repr(partition)}: must be a list")
            partition = tuple(_int(v, f"{here}.layer_partition[{i}]", minimum=0)
                              for i, v in enumerate(partition))
            if len(partition) != values["p"] or sum(partition) != layers:
                raise SpecError(f"{here}.layer_partition = {short_repr(list(partition))}: must give p = "
                                f"{values['p']} stages summing to {layers} layers")
        result[name] = Baseline(name=name, num_transformer_layers=count, layer_partition=partition,
                                **values)
    return result


def load_instance(path, *, boundary: str = "chain", seq_len: int | None = None) -> NestInstance:
    """A :class:`NestInstance` from an artifact DP-input JSON file (see the module docstring).

    ``boundary`` chooses the stage-boundary bytes (``chain`` or ``cut``); ``seq_len``
    overrides the sequence length inferred from the file name.
    """
    if boundary not in BOUNDARIES:
        raise SpecError(f"boundary = {boundary!r}: must be one of {', '.join(BOUNDARIES)}")

    data = read_json_object(path, "nest instance")
    file = Path(path)
    name = file.stem
    where = f"nest instance {name}"
    match = _NAME.match(name)
    setup, model = (match["setup"], match["model"]) if match else ("", "")

    cluster, devices = _cluster(data, where, name)
    ep = _int(data.get("ep_degree", 1), f"{where}.ep_degree")
    cp = _int(data.get("cp_degree", 1), f"{where}.cp_degree")
    mbs_in_batch = _int(_require(data, "mbsInBatch", where), f"{where}.mbsInBatch")
    micro_batch, remainder = divmod(GLOBAL_BATCH_SEQUENCES, mbs_in_batch * ep)
    if remainder or micro_batch < 1:
        raise SpecError(f"{where}.mbsInBatch = {mbs_in_batch}: {GLOBAL_BATCH_SEQUENCES} sequences "
                        f"do not split into micro-batches of mbsInBatch x ep_degree ({ep})")
    if match and (int(match["mbs"]) != micro_batch or int(match["n"]) != devices):
        raise SpecError(f"{where}: file name says mbs {match['mbs']} on {match['n']} devices, the "
                        f"data says mbs {micro_batch} on {devices}")
    measurements, ids, edges = _graph(data, where, micro_batch, boundary)
    profile = MeasuredProfile(name=name, measurements=measurements,
                              source=f"NEST artifact instance {file.name}")
    algorithm = data.get("optimizerAlgorithm", "SGD")
    if algorithm not in ("SGD", "Adam"):
        raise SpecError(f"{where}.optimizerAlgorithm = {short_repr(algorithm)}: must be SGD or Adam")
    if seq_len is None:
        seq_len = ARTIFACT_SEQ_LEN.get(model)
    elif not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len <= 0:
        raise SpecError(f"seq_len = {short_repr(seq_len)}: must be a positive integer")
    return NestInstance(
        name=name, profile=profile, node_ids=ids, edges=edges, cluster=cluster, max_devices=devices,
        micro_batch=micro_batch, mbs_in_batch=mbs_in_batch, ep_degree=ep, cp_degree=cp,
        sp_enabled=_bool(data.get("sp_enabled", False), f"{where}.sp_enabled"),
        activation_recomputation=_bool(data.get("activationRecomputation", False),
                                       f"{where}.activationRecomputation"),
        optimizer_algorithm=algorithm, baselines=_baselines(data, where, len(ids) - 1),
        seq_len=seq_len, setup=setup, model=model, sequential=bool(match and match["seq"]),
        boundary=boundary, source=str(file))
